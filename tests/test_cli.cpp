// Tests of the ftx command line (app/), run as a child process (FTX_BINARY): every bad input a user
// can give ends with exit code 1 and exactly one line "ftx: <thing>: <problem>" on stderr, no
// crash and no partial writes (no database created, an existing run untouched, a corrupt file left
// as it was); and the outputs other tools read (score JSON, generate --json, runs, metrics --csv)
// have the documented shape. One tiny checkpoint, trained for 3 steps, serves every test that
// needs a model; the corrupt-checkpoint tests edit copies of it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/io/config_json.h"
#include "core/model/config.h"
#include "core/store/run_store.h"
#include "core/text/char_tokenizer.h"
#include "datasets/synthetic.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops_matmul_bf16.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ce printed by `ftx score` against the mean of its own printed -logprobs: both are doubles
// printed in full by nlohmann::json from the same fp32 losses; only summation order differs.
constexpr double kCeTol = 1e-9;

using test::Outcome;
using test::read_file;

// Writes a fixture file the test needs.
void write_file(const std::string& path, const std::string& bytes) {
  EXPECT_TRUE(test::write_file(path, bytes)) << path;
}

constexpr auto ftx = test::run_ftx;
using test::describe;
using test::expect_one_line_error;

// ---------------------------------------------------------------------------------------------
// Bad training arguments: refused before anything is written.

class CliTrainArgs : public test::TempDirTest {
 protected:
  CliTrainArgs() : TempDirTest("ftx_test_cli_") {}
  // `ftx train` with a fresh database path plus `extra`; the database must not appear.
  void expect_refused(const std::vector<std::string>& extra, const std::vector<std::string>& needles) {
    const std::string db = dir_ + "/fresh.db";
    std::vector<std::string> args = {"train", "--db", db, "--run", "r", "--quiet"};
    // Defaults for what `extra` does not set (CLI11 refuses an option given twice).
    for (const char* opt : {"--preset", "--steps"})
      if (std::find(extra.begin(), extra.end(), opt) == extra.end())
        args.insert(args.end(), {opt, std::string(opt) == "--preset" ? "tiny" : "2"});
    args.insert(args.end(), extra.begin(), extra.end());
    const Outcome r = ftx(args, dir_);
    SCOPED_TRACE(testing::PrintToString(extra));
    expect_one_line_error(r, needles);
    EXPECT_FALSE(fs::exists(db)) << "a database was created for a refused command";
    EXPECT_FALSE(fs::exists(dir_ + "/fresh.checkpoints"));
  }
};

TEST_F(CliTrainArgs, UnknownDataset) {
  expect_refused({"--dataset", "imagenet"}, {"--dataset", "imagenet", "unknown"});
}

TEST_F(CliTrainArgs, PrecisionUnknownOrNotOnTheCpu) {
  expect_refused({"--precision", "fp8"}, {"--precision fp8", "fp32, tf32 or bf16"});
  expect_refused({"--precision", "tf32"}, {"--precision tf32", "no tf32"});
}

TEST_F(CliTrainArgs, UnknownPreset) { expect_refused({"--preset", "huge"}, {"preset", "huge", "unknown"}); }

TEST_F(CliTrainArgs, NegativeKappa) {
  expect_refused({"--kappa-bits", "-1"}, {"kappa", "-1"});
  expect_refused({"--kappa-nats", "-0.5"}, {"kappa", "-0.5"});
}

TEST_F(CliTrainArgs, UnknownFreeBitsForm) {
  expect_refused({"--free-bits", "kingma"}, {"--free-bits \"kingma\"", "batch-mean or per-pair"});
}

TEST_F(CliTrainArgs, LatentBitsOutsideZeroToTwenty) {
  expect_refused({"--latent-bits", "21"}, {"H", "0..20", "21"});
  expect_refused({"--latent-bits", "-1"}, {"H", "0..20", "-1"});
}

TEST_F(CliTrainArgs, NonPositiveStepsBatchLr) {
  expect_refused({"--steps", "0"}, {"--steps", "positive"});
  expect_refused({"--steps", "-3"}, {"--steps", "positive"});
  expect_refused({"--batch", "0"}, {"--batch", "positive"});
  expect_refused({"--batch", "-2"}, {"--batch", "positive"});
  expect_refused({"--lr", "0"}, {"--lr", "positive"});
  expect_refused({"--lr", "-0.001"}, {"--lr", "positive"});
}

TEST_F(CliTrainArgs, DatasetOptionsAndFieldBoundsNameTheirFlags) {
  expect_refused({"--dataset", "coinflip", "--coinflip-eps", "2"}, {"--coinflip-eps 2", "[0, 1]"});
  expect_refused({"--dataset", "coinflip", "--coinflip-len", "0"}, {"--coinflip-len 0", "1..65536"});
  expect_refused({"--warmup", "-1"}, {"--warmup -1", ">= 0"});
  expect_refused({"--post-sampler-std", "-0.5"}, {"--post-sampler-std -0.5"});
}

// The train object of the run row today's `ftx train` writes, byte for byte as before the field
// lists (commit 41a336e wrote exactly this for these flags), and the model the row records is
// the one shape_model_config makes for the same overrides (the studio's Train form gets it too).
TEST_F(CliTrainArgs, RunRowsHoldTheShapedModelAndTheTrainKeysOfEveryRunSoFar) {
  const std::string db = dir_ + "/rows.db";
  const Outcome coin = ftx({"train",
                            "--db",
                            db,
                            "--run",
                            "coin",
                            "--dataset",
                            "coinflip",
                            "--coinflip-eps",
                            "0.25",
                            "--preset",
                            "tiny",
                            "--latent-bits",
                            "2",
                            "--steps",
                            "1",
                            "--batch",
                            "2",
                            "--eval-every",
                            "0",
                            "--checkpoint-every",
                            "0",
                            "--kappa-bits",
                            "0.015625",
                            "--lr",
                            "0.003",
                            "--seed",
                            "7",
                            "--no-bitlinear-init",
                            "--post-sampler-std",
                            "0.04",
                            "--quiet"},
                           dir_);
  ASSERT_EQ(coin.code, 0) << describe(coin);
  const Outcome custom = ftx(
      {"train", "--db",          db,  "--run",   "custom", "--layers", "3", "--dim",        "96", "--heads",
       "3",     "--latent-bits", "4", "--steps", "1",      "--batch",  "2", "--eval-every", "0",  "--checkpoint-every",
       "0",     "--quiet"},
      dir_);
  ASSERT_EQ(custom.code, 0) << describe(custom);
  auto store = RunStore::open_readonly(db);
  ASSERT_TRUE(store.ok()) << store.error().message;
  auto row = [&](const std::string& run) {
    auto info = store->find_run(run);
    EXPECT_TRUE(info.ok()) << run;
    return info.ok() ? json::parse(info->config_json) : json();
  };
  const json coin_row = row("coin"), custom_row = row("custom");
  // Every key of a run row written before the field lists keeps its value; datasets and fields
  // added since (text_data and text_seq_len at their defaults, keep_checkpoints, init_from, ...)
  // only add keys.
  EXPECT_EQ(coin_row["train"]["text_data"], "");
  EXPECT_EQ(coin_row["train"]["text_seq_len"], 256);
  const json before = json::parse(test::kTrainJsonBeforeFieldLists);
  for (const auto& [k, v] : before.items()) EXPECT_EQ(coin_row["train"].value(k, json()), v) << k;

  const CharTokenizer coin_tokens(">01"), synthetic_tokens(kSyntheticAlphabet);
  ShapeOverrides tiny;
  tiny.preset = "tiny", tiny.latent_bits = 2;
  auto coin_model = shape_model_config(tiny, 3, 33);  // the coin flip: ">01", 32 bits after '>'
  ASSERT_TRUE(coin_model.ok()) << coin_model.error().message;
  EXPECT_EQ(coin_row["model"], config_to_json(*coin_model, &coin_tokens));
  ShapeOverrides reshaped;
  reshaped.layers = 3, reshaped.dim = 96, reshaped.heads = 3, reshaped.latent_bits = 4;
  auto custom_model = shape_model_config(reshaped, 29, 66);
  ASSERT_TRUE(custom_model.ok()) << custom_model.error().message;
  EXPECT_EQ(custom_row["model"], config_to_json(*custom_model, &synthetic_tokens));
  EXPECT_EQ(custom_row["train"]["coinflip_len"], 32) << "every registered dataset's options are in the row";
}

TEST_F(CliTrainArgs, ResumeOfARunInADatabaseThatDoesNotExist) {
  const std::string db = dir_ + "/none.db";
  const Outcome r = ftx({"train", "--resume", "--db", db, "--run", "ghost", "--quiet"}, dir_);
  expect_one_line_error(r, {"ghost"});
  EXPECT_NE(r.err.find(db), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(db)) << "a refused --resume created the run store " << db;
}

// A batch no machine can hold is bad input (docs/design.md section 8: out of memory is a Result), not a
// broken invariant: one line, exit 1, and no run row left behind. (Its ~137 TiB of activations
// exceed the 128 TiB x86-64 user address space, so no overcommit setting lets it through.)
TEST_F(CliTrainArgs, AbsurdBatchIsRefusedNotAborted) {
  const std::string db = dir_ + "/big.db";
  const Outcome r = ftx(
      {"train", "--db", db, "--run", "r", "--preset", "tiny", "--steps", "1", "--batch", "100000000", "--quiet"}, dir_);
  EXPECT_NE(r.signal, SIGABRT) << r.err;
  expect_one_line_error(r, {"--batch", "memory"});
  if (fs::exists(db)) {
    auto store = RunStore::open_readonly(db);
    ASSERT_TRUE(store.ok()) << store.error().message;
    EXPECT_FALSE(store->find_run("r").ok()) << "a refused run left its row behind";
  }
}

TEST_F(CliTrainArgs, UnwritableDatabasePath) {
  write_file(dir_ + "/afile", "a regular file, not a directory\n");
  const std::string db = dir_ + "/afile/sub.db";  // under a file: fails even for root
  expect_one_line_error(ftx({"train", "--db", db, "--run", "r", "--preset", "tiny", "--steps", "2", "--quiet"}, dir_),
                        {db});
  expect_one_line_error(ftx({"runs", "--db", db}, dir_), {db});
  expect_one_line_error(ftx({"metrics", "--db", db, "--run", "r"}, dir_), {db});
  EXPECT_EQ(read_file(dir_ + "/afile"), "a regular file, not a directory\n");
}

TEST_F(CliTrainArgs, CorruptDatabaseFile) {
  std::string garbage(8192, '\0');
  uint32_t x = 12345;
  for (char& c : garbage) c = static_cast<char>((x = x * 1664525u + 1013904223u) >> 24);
  const std::string db = dir_ + "/garbage.db";
  write_file(db, garbage);
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"train", "--db", db, "--run", "r", "--preset", "tiny", "--steps", "2", "--quiet"},
           {"train", "--db", db, "--run", "r", "--resume", "--quiet"},
           {"runs", "--db", db},
           {"metrics", "--db", db, "--run", "r"}}) {
    SCOPED_TRACE(args[0]);
    expect_one_line_error(ftx(args, dir_), {db, "not a database"});
    EXPECT_EQ(read_file(db), garbage) << "the corrupt file was modified";
  }
  EXPECT_FALSE(fs::exists(dir_ + "/garbage.checkpoints"));
}

// ---------------------------------------------------------------------------------------------
// Commands on a trained run

class CliWithRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("ftx_test_cli_");
    ASSERT_FALSE(dir_.empty());
    db_ = dir_ + "/runs.db";
    const Outcome r = ftx({"train", "--preset", "tiny", "--latent-bits", "3", "--steps", "3", "--batch", "4",
                           "--eval-every", "0", "--checkpoint-every", "0", "--db", db_, "--run", "base", "--quiet"},
                          dir_);
    ASSERT_EQ(r.code, 0) << describe(r);
    ckpt_ = dir_ + "/runs.checkpoints/base/step-000003";
    ASSERT_TRUE(fs::exists(ckpt_ + "/model.safetensors")) << r.out;
  }
  static void TearDownTestSuite() { test::remove_tree(dir_); }

  // A copy of the checkpoint (config.json + model.safetensors) whose weights file `edit` rewrites.
  static std::string corrupt_copy(const std::string& name, const std::function<void(std::string&)>& edit) {
    const std::string d = dir_ + "/" + name;
    fs::create_directories(d);
    fs::copy_file(ckpt_ + "/config.json", d + "/config.json", fs::copy_options::overwrite_existing);
    std::string st = read_file(ckpt_ + "/model.safetensors");
    edit(st);
    write_file(d + "/model.safetensors", st);
    return d;
  }
  static uint64_t header_len(const std::string& st) {
    uint64_t n = 0;
    std::memcpy(&n, st.data(), 8);  // little-endian host
    return n;
  }
  static json header(const std::string& st) { return json::parse(st.substr(8, header_len(st))); }
  // Replaces the JSON header (padded with spaces to 8 bytes), keeping the data bytes.
  static void set_header(std::string& st, const json& h) {
    const std::string data = st.substr(8 + header_len(st));
    std::string text = h.dump();
    while (text.size() % 8) text += ' ';
    uint64_t n = text.size();
    st.assign(reinterpret_cast<const char*>(&n), 8);
    st += text + data;
  }
  static std::string input_file(const std::string& name, const json& j) {
    const std::string p = dir_ + "/" + name;
    write_file(p, j.dump());
    return p;
  }
  static Outcome score(const std::string& ckpt, const std::string& input, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"score", "--checkpoint", ckpt, "--input", input};
    args.insert(args.end(), extra.begin(), extra.end());
    return ftx(args, dir_);
  }

  static std::string dir_, db_, ckpt_;
};
std::string CliWithRun::dir_, CliWithRun::db_, CliWithRun::ckpt_;

const json kTwoSequences = {{"tokens", {{5, 2, 0, 0, 0, 1, 0}, {7, 2, 0, 0}}}};

TEST_F(CliWithRun, ScoreOutputHasOneLogprobPerPredictionAndTheirMeanAsCe) {
  const Outcome r = score(ckpt_, input_file("two.json", kTwoSequences));
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(r.err, "");
  const json out = json::parse(r.out);
  ASSERT_TRUE(out["logprobs"].is_array());
  ASSERT_EQ(out["logprobs"].size(), 2u);
  double sum = 0;
  int n = 0;
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(out["logprobs"][i].size(), kTwoSequences["tokens"][i].size() - 1) << "sequence " << i;
    for (const json& lp : out["logprobs"][i]) {
      EXPECT_LE(lp.get<double>(), 0.0);
      sum -= lp.get<double>(), ++n;
    }
  }
  EXPECT_NEAR(out["ce"].get<double>(), sum / n, kCeTol);
  EXPECT_GT(out["ce"].get<double>(), 1.0);  // 3 steps of training: far from certain
  EXPECT_TRUE(std::isfinite(out["kl"].get<double>()) && out["kl"].get<double>() >= 0.0);
  // Same seed, same encoder samples: the same output, byte for byte.
  EXPECT_EQ(score(ckpt_, input_file("two.json", kTwoSequences)).out, r.out);
}

TEST_F(CliWithRun, ScoreWithCodesDiffersFromScoreWithout) {
  json zeros = kTwoSequences, sevens = kTwoSequences;
  zeros["codes"] = {std::vector<int>(6, 0), std::vector<int>(3, 0)};
  sevens["codes"] = {std::vector<int>(6, 7), std::vector<int>(3, 7)};
  const Outcome none = score(ckpt_, input_file("none.json", kTwoSequences));
  const Outcome z0 = score(ckpt_, input_file("z0.json", zeros));
  const Outcome z7 = score(ckpt_, input_file("z7.json", sevens));
  ASSERT_EQ(none.code, 0) << describe(none);
  ASSERT_EQ(z0.code, 0) << describe(z0);
  ASSERT_EQ(z7.code, 0) << describe(z7);
  const json a = json::parse(none.out), b = json::parse(z0.out), c = json::parse(z7.out);
  EXPECT_NE(a["logprobs"], b["logprobs"]);
  EXPECT_NE(b["logprobs"], c["logprobs"]);
  EXPECT_EQ(b["logprobs"], json::parse(score(ckpt_, input_file("z0.json", zeros)).out)["logprobs"]);
}

TEST_F(CliWithRun, ScoreRefusesUnknownTokenIds) {
  expect_one_line_error(score(ckpt_, input_file("t99.json", {{"tokens", {{5, 2, 99}}}})), {"tokens[0]", "99"});
  expect_one_line_error(score(ckpt_, input_file("tneg.json", {{"tokens", {{5, 2, 0}, {5, -1, 0}}}})),
                        {"tokens[1]", "-1"});
  expect_one_line_error(score(ckpt_, input_file("tcode.json", {{"tokens", {{5, 2, 0}}}, {"codes", {{0, 8}}}})),
                        {"codes[0]", "8"});
}

TEST_F(CliWithRun, ScoreRefusesATruncatedWeightsFile) {
  const std::string d = corrupt_copy("truncated", [](std::string& st) { st.resize(st.size() / 2); });
  expect_one_line_error(score(d, input_file("two.json", kTwoSequences)), {d + "/model.safetensors"});
}

TEST_F(CliWithRun, ScoreRefusesAHeaderLengthPastTheEndOfTheFile) {
  const std::string d = corrupt_copy("header_len", [](std::string& st) {
    const uint64_t n = st.size() + 100;
    std::memcpy(st.data(), &n, 8);
  });
  expect_one_line_error(score(d, input_file("two.json", kTwoSequences)), {d + "/model.safetensors", "header length"});
}

TEST_F(CliWithRun, ScoreRefusesOverlappingOffsets) {
  const std::string d = corrupt_copy("overlap", [](std::string& st) {
    json h = header(st);
    // Two tensors of the same size ([64] norm weights): the second now points at the first's bytes.
    h["model.layers.0.post_attention_layernorm.weight"]["data_offsets"] =
        h["model.layers.0.input_layernorm.weight"]["data_offsets"];
    set_header(st, h);
  });
  expect_one_line_error(score(d, input_file("two.json", kTwoSequences)), {d + "/model.safetensors", "overlap"});
}

TEST_F(CliWithRun, ScoreRefusesAShapeThatDoesNotMatchTheConfig) {
  const std::string d = corrupt_copy("shape", [](std::string& st) {
    json h = header(st);
    auto& e = h["model.embed_tokens.weight"]["shape"];  // [29, 64] -> [64, 29]: same byte count
    std::swap(e[0], e[1]);
    set_header(st, h);
  });
  expect_one_line_error(score(d, input_file("two.json", kTwoSequences)),
                        {d + "/model.safetensors", "model.embed_tokens.weight", "shape"});
}

TEST_F(CliWithRun, ScoreRefusesNanWeights) {
  const std::string d = corrupt_copy("nan", [](std::string& st) {
    const json h = header(st);
    const uint64_t at = 8 + header_len(st) + h["lm_head.weight"]["data_offsets"][0].get<uint64_t>() + 4 * 17;
    const float nan = std::nanf("");
    std::memcpy(st.data() + at, &nan, 4);
  });
  expect_one_line_error(score(d, input_file("two.json", kTwoSequences)), {"lm_head.weight", "NaN"});
}

TEST_F(CliWithRun, GenerateJsonPrintsOneObjectPerSequence) {
  const Outcome r = ftx({"generate", "--db", db_, "--run", "base", "--prompt", "K>", "--independent", "2",
                         "--fixed-groups", "2", "--group-size", "3", "--seed", "5", "--json"},
                        dir_);
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(r.err, "");
  std::vector<json> rows;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    json j = json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "not JSON: " << line;
    rows.push_back(j);
  }
  ASSERT_EQ(rows.size(), 2u + 2 * 3);
  std::vector<std::vector<uint32_t>> group_codes(3);
  for (const json& j : rows) {
    for (const char* k : {"group", "policy", "seed", "text", "codes"}) ASSERT_TRUE(j.contains(k)) << k << " in " << j;
    const std::string text = j["text"];
    EXPECT_EQ(text.rfind("K>", 0), 0u) << text;
    EXPECT_EQ(text.size(), 66u) << text;
    EXPECT_EQ(text.find_first_not_of("_!>ABCDEFGHIJKLMNOPQRSTUVWXYZ"), std::string::npos) << text;
    ASSERT_EQ(j["codes"].size(), 65u);
    for (const json& z : j["codes"]) EXPECT_LT(z.get<uint32_t>(), 8u);
    const int g = j["group"];
    ASSERT_TRUE(g >= 0 && g <= 2) << g;
    EXPECT_EQ(j["policy"], g == 0 ? "independent" : "fixed");
    const auto codes = j["codes"].get<std::vector<uint32_t>>();
    if (g > 0 && !group_codes[g].empty()) {
      EXPECT_EQ(codes, group_codes[g]) << "a fixed group shares its Z";
    }
    if (g == 0 && !group_codes[0].empty()) {
      EXPECT_NE(codes, group_codes[0]) << "independent Z per sequence";
    }
    group_codes[g] = codes;
  }
  EXPECT_NE(group_codes[1], group_codes[2]);
}

TEST_F(CliWithRun, GenerateRefusesBadPrompts) {
  auto count_generations = [&] {
    auto store = RunStore::open_readonly(db_);
    EXPECT_TRUE(store.ok());
    if (!store) return size_t(0);
    auto info = store->find_run("base");
    EXPECT_TRUE(info.ok());
    if (!info) return size_t(0);
    auto g = store->generations(info->id, 3);
    return g.ok() ? g->size() : size_t(0);
  };
  const size_t before = count_generations();
  auto gen = [&](const std::string& prompt) {
    return ftx({"generate", "--db", db_, "--run", "base", "--prompt", prompt, "--json"}, dir_);
  };
  const Outcome lower = gen("k>");
  expect_one_line_error(lower, {"--prompt", "'k'"});
  EXPECT_EQ(lower.out, "");
  expect_one_line_error(gen(std::string(200, 'K')), {"--prompt", "200"});
  expect_one_line_error(gen(std::string(66, 'K')), {"--prompt", "66"});
  expect_one_line_error(gen(""), {"prompt", "empty"});
  EXPECT_EQ(count_generations(), before) << "a refused generate recorded generations";
}

TEST_F(CliWithRun, GenerateAndScoreAtTf32OnTheCpuAreRefused) {
  const Outcome g = ftx({"generate", "--db", db_, "--run", "base", "--prompt", "K>", "--precision", "tf32"}, dir_);
  expect_one_line_error(g, {"--precision tf32", "no tf32"});
  const Outcome s = ftx({"score", "--checkpoint", dir_ + "/nowhere", "--input", "x", "--precision", "tf32"}, dir_);
  expect_one_line_error(s, {"--precision tf32", "no tf32"});
}

TEST_F(CliWithRun, ResumeOfARunThatDoesNotExist) {
  expect_one_line_error(ftx({"train", "--resume", "--db", db_, "--run", "ghost", "--quiet"}, dir_),
                        {"ghost", "not found", db_});
}

TEST_F(CliWithRun, ExistingRunNameWithoutResumeIsRefusedAndLeftUntouched) {
  auto snapshot = [&] {
    std::vector<std::string> rows;
    auto store = RunStore::open_readonly(db_);
    EXPECT_TRUE(store.ok());
    auto runs = store->list_runs();
    EXPECT_TRUE(runs.ok());
    if (!runs) return rows;
    for (const RunInfo& ri : *runs) {
      rows.push_back(ri.name + "|" + ri.status + "|" + ri.config_json);
      auto metrics = store->metrics(ri.id, "");
      auto checkpoints = store->checkpoints(ri.id);
      EXPECT_TRUE(metrics.ok() && checkpoints.ok());
      if (!metrics || !checkpoints) continue;
      for (const MetricRow& m : *metrics)
        rows.push_back(std::to_string(m.step) + m.key + std::to_string(m.value) + std::to_string(m.wall_time));
      for (const CheckpointRow& c : *checkpoints) rows.push_back(c.path + c.sha256);
    }
    return rows;
  };
  const auto before = snapshot();
  const std::string weights = read_file(ckpt_ + "/model.safetensors");
  const Outcome r =
      ftx({"train", "--db", db_, "--run", "base", "--preset", "tiny", "--latent-bits", "2", "--steps", "2", "--quiet"},
          dir_);
  expect_one_line_error(r, {"base", "already exists"});
  EXPECT_EQ(snapshot(), before);
  EXPECT_EQ(read_file(ckpt_ + "/model.safetensors"), weights);
}

TEST_F(CliWithRun, RunsAndMetricsCsvListWhatWasTrained) {
  const Outcome runs = ftx({"runs", "--db", db_}, dir_);
  ASSERT_EQ(runs.code, 0) << describe(runs);
  EXPECT_EQ(runs.err, "");
  std::istringstream rl(runs.out);
  std::string header, row;
  std::getline(rl, header);
  std::getline(rl, row);
  EXPECT_NE(header.find("run"), std::string::npos) << runs.out;
  EXPECT_EQ(row.rfind("base ", 0), 0u) << runs.out;
  EXPECT_NE(row.find("done"), std::string::npos) << row;
  EXPECT_NE(row.find("tiny"), std::string::npos) << row;

  const Outcome csv = ftx({"metrics", "--db", db_, "--run", "base", "--csv"}, dir_);
  ASSERT_EQ(csv.code, 0) << describe(csv);
  std::istringstream cl(csv.out);
  std::string line;
  std::getline(cl, line);
  EXPECT_EQ(line, "step,key,value,wall_time");
  std::vector<int> ce_steps;
  int rows = 0;
  while (std::getline(cl, line)) {
    ++rows;
    EXPECT_EQ(std::count(line.begin(), line.end(), ','), 3) << line;
    if (line.find(",train/ce,") != std::string::npos) ce_steps.push_back(std::stoi(line));
  }
  EXPECT_EQ(ce_steps, (std::vector<int>{1, 2, 3}));
  EXPECT_GE(rows, 3 * 7);  // seven keys per step

  const Outcome one = ftx({"metrics", "--db", db_, "--run", "base", "--key", "train/kl"}, dir_);
  ASSERT_EQ(one.code, 0) << describe(one);
  EXPECT_EQ(std::count(one.out.begin(), one.out.end(), '\n'), 3) << one.out;
  expect_one_line_error(ftx({"metrics", "--db", db_, "--run", "nobody"}, dir_), {"nobody"});
}

TEST_F(CliWithRun, MetricsBenchmarksPrintsTheRunsBenchmarkValues) {
  {
    auto store = RunStore::open(db_);
    ASSERT_TRUE(store.ok());
    auto run = store->find_run("base");
    ASSERT_TRUE(run.ok());
    ASSERT_TRUE(store->write_bench_result(run->id, 3, 96, "humaneval", {{"pass@1", 0.125, 0.025, 164}}, {}).ok());
    ASSERT_TRUE(store->write_bench_result(run->id, 3, 96, "gsm8k", {{"em_strict", 0.5, 0.1, 50}}, {}).ok());
  }
  const Outcome csv = ftx({"metrics", "--db", db_, "--run", "base", "--benchmarks", "--csv"}, dir_);
  ASSERT_EQ(csv.code, 0) << describe(csv);
  EXPECT_EQ(csv.out,
            "task,metric,step,tokens,value,stderr,n\n"
            "gsm8k,em_strict,3,96,0.5,0.1,50\n"
            "humaneval,pass@1,3,96,0.125,0.025,164\n");
  const Outcome text = ftx({"metrics", "--db", db_, "--run", "base", "--benchmarks", "--key", "humaneval"}, dir_);
  ASSERT_EQ(text.code, 0) << describe(text);
  EXPECT_NE(text.out.find("0.1250 \u00b1 0.0250"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("gsm8k"), std::string::npos) << text.out;
  expect_one_line_error(ftx({"metrics", "--db", db_, "--run", "base", "--benchmarks", "--key", "mmlu"}, dir_),
                        {"base", "mmlu"});
}

// ---------------------------------------------------------------------------------------------
// ftx bench train | mapper | generate: the JSON other tools read, the FLOP count, one-line refusals.

// model_tflops against flops_per_token * tokens_per_s / 1e12 recomputed from the printed doubles:
// the same three operations on the same values, up to the last bit of the printing.
constexpr double kTflopsRelTol = 1e-12;

class CliBench : public test::TempDirTest {
 protected:
  CliBench() : TempDirTest("ftx_test_cli_bench_") {}
  json bench_json(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"bench"};
    all.insert(all.end(), args.begin(), args.end());
    const Outcome r = ftx(all, dir_);
    EXPECT_EQ(r.code, 0) << describe(r);
    EXPECT_EQ(r.err, "");
    return json::parse(r.out, nullptr, false);  // discarded (is_discarded) when not JSON
  }
  void expect_refused(const std::vector<std::string>& args, const std::vector<std::string>& needles) {
    std::vector<std::string> all = {"bench"};
    all.insert(all.end(), args.begin(), args.end());
    SCOPED_TRACE(testing::PrintToString(args));
    const Outcome r = ftx(all, dir_);
    expect_one_line_error(r, needles);
    EXPECT_EQ(r.out, "") << "a refused benchmark printed a report";
  }
};

TEST_F(CliBench, TrainOnTheSyntheticTaskReportsThroughputAndModelFlops) {
  const json j = bench_json({"train", "--preset", "tiny", "--batch", "2", "--warmup", "0", "--steps", "1"});
  ASSERT_TRUE(j.is_object()) << j;
  EXPECT_EQ(j["data"], "synthetic");
  EXPECT_EQ(j["seq_len"], 65);
  EXPECT_EQ(j["vocab"], 29);
  EXPECT_EQ(j["precision"], "fp32");
  EXPECT_EQ(j["tokens_per_step"], 2 * 65);
  for (const char* k : {"step_ms_median", "tokens_per_s", "model_flops_per_token", "model_tflops", "peak_rss_mb"})
    EXPECT_GT(j[k].get<double>(), 0) << k;
  EXPECT_TRUE(j["peak_tflops"].is_null()) << "no peak is known for a CPU";
  EXPECT_TRUE(j["mfu"].is_null());
  EXPECT_TRUE(j["flops_convention"].is_string());
  const double want = j["model_flops_per_token"].get<double>() * j["tokens_per_s"].get<double>() / 1e12;
  EXPECT_NEAR(j["model_tflops"].get<double>(), want, kTflopsRelTol * want);
  // The CPU's GEMM peak, measured after the steps: the product it timed, and the step's model
  // TFLOP/s as a fraction of it (the tiny preset's step, at batch 2, is far below its products' best).
  EXPECT_EQ(j["gemm_peak_shape"], json({2048, 1024, 1024}));
  const double peak = j["gemm_peak_tflops"].get<double>();
  EXPECT_GT(peak, j["model_tflops"].get<double>());
  EXPECT_NEAR(j["fraction_of_gemm_peak"].get<double>(), j["model_tflops"].get<double>() / peak, 1e-12);
}

// bench ops: each op of the traced steps timed alone and in the step. The per-op in-step times add
// up to the ops' total, which with what lies between the ops makes the traced step; the table goes
// to stderr. A non-positive --reps is refused.
TEST_F(CliBench, OpsTimesEachOpAloneAndInTheStep) {
  const Outcome r =
      ftx({"bench", "ops", "--preset", "tiny", "--batch", "2", "--warmup", "0", "--steps", "1", "--reps", "2"}, dir_);
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.err.find("in the traced steps: ops"), std::string::npos) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object() && j["ops"].is_array() && !j["ops"].empty()) << r.out;
  std::vector<std::string> names;
  double calls = 0, in_step = 0;
  for (const json& o : j["ops"]) {
    SCOPED_TRACE(o.dump());
    names.push_back(o["op"].get<std::string>());
    const double c = o["calls_per_step"].get<double>(), ms = o["in_step_ms_per_step"].get<double>();
    EXPECT_GT(c, 0);
    EXPECT_GT(o["us_per_call"].get<double>(), 0);
    EXPECT_GT(ms, 0) << "every call takes some time";
    EXPECT_NEAR(o["in_step_us_per_call"].get<double>() * c / 1e3, ms, 1e-9 * ms);
    calls += c;
    in_step += ms;
  }
  for (const char* op : {"matmul_forward", "matmul_backward", "attention_forward", "attention_backward",
                         "rmsnorm_backward", "binary_mapper_forward", "crossentropy_forward", "adamw_update"})
    EXPECT_NE(std::find(names.begin(), names.end(), op), names.end()) << op;
  EXPECT_NEAR(calls, j["op_calls_per_step"].get<double>(), 1e-9 * calls);
  const double ops_ms = j["ops_in_step_ms_per_step"].get<double>(),
               between = j["between_ops_ms_per_step"].get<double>();
  EXPECT_NEAR(in_step, ops_ms, 1e-9 * ops_ms);
  EXPECT_GE(between, 0.0) << "the ops' intervals lie inside the steps";
  EXPECT_NEAR(ops_ms + between, j["traced_step_ms"].get<double>(), 1e-9 * ops_ms);
  EXPECT_GE(j["traced_steps"].get<int>(), 1);
  expect_refused({"ops", "--preset", "tiny", "--reps", "0"}, {"--reps"});
}

// --gemm-peak-seconds 0 leaves the GEMM peak out (null, not zero); a negative time is refused.
TEST_F(CliBench, TrainWithoutTheGemmPeakReportsNone) {
  const json j = bench_json(
      {"train", "--preset", "tiny", "--batch", "2", "--warmup", "0", "--steps", "1", "--gemm-peak-seconds", "0"});
  ASSERT_TRUE(j.is_object()) << j;
  for (const char* k : {"gemm_peak_tflops", "gemm_peak_shape", "fraction_of_gemm_peak"})
    EXPECT_TRUE(j[k].is_null()) << k;
  expect_refused({"train", "--preset", "tiny", "--gemm-peak-seconds", "-1"}, {"--gemm-peak-seconds"});
}

// The report names the kernels: the CPU path and OpenBLAS's core. ftx restarts itself with the
// core its CPU can run when OpenBLAS picked a weaker one (kernels/cpu/blas_core.h: Prescott's on
// an Emerald Rapids), and keeps the user's OPENBLAS_CORETYPE, saying when it is weaker than the CPU
// runs. At bf16 the precision is reported.
TEST_F(CliBench, TrainReportsItsKernelsAndKeepsTheUsersBlasCore) {
  const std::vector<std::string> tiny = {"train", "--preset", "tiny", "--batch", "2", "--warmup", "0", "--steps", "1"};
  const bool env_core = std::getenv("OPENBLAS_CORETYPE") != nullptr;  // some machines set it
  const json j = bench_json(tiny);
  ASSERT_TRUE(j.is_object()) << j;
  EXPECT_EQ(j["cpu_isa"], cpu::cpu_isa_name(cpu::cpu_isa()));
  if (const char* forced = cpu::blas_core_to_force()) EXPECT_EQ(j["blas_core"], forced) << "not restarted";
  ::setenv("OPENBLAS_CORETYPE", "Prescott", 1);  // the user's choice, even a slow one
  const json user = bench_json(tiny);
  ::unsetenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(user["blas_core"], "Prescott");
  // ... and says when that choice holds OpenBLAS below what the CPU runs (every x86-64 CPU with
  // AVX2 and FMA runs more than Prescott's SSE3).
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  EXPECT_EQ(user["blas_core_held_back"].is_string(), avx2) << user["blas_core_held_back"];
  if (!env_core) {
    EXPECT_TRUE(j["blas_core_held_back"].is_null()) << j["blas_core_held_back"];
  }
  std::vector<std::string> bf16 = tiny;
  bf16.insert(bf16.end(), {"--precision", "bf16"});
  EXPECT_EQ(bench_json(bf16)["precision"], "bf16");
}

// At bf16 on the CPU, what multiplies is said: in bench train's report (null at fp32) and in ftx
// train's start lines. FTX_CPU_ISA=generic forces the rounding path on any CPU; the report of the
// machine's own path names the tiles exactly when it has AMX, VDPBF16PS exactly when this process
// multiplies on it; on an AVX512_BF16 CPU, FTX_BF16_GEMM chooses VDPBF16PS or the rounding path.
TEST_F(CliBench, TrainAtBf16SaysWhatMultiplies) {
  const std::vector<std::string> tiny = {
      "train", "--preset", "tiny", "--batch", "2", "--warmup", "0", "--steps", "1", "--gemm-peak-seconds", "0"};
  std::vector<std::string> bf16 = tiny;
  bf16.insert(bf16.end(), {"--precision", "bf16"});
  EXPECT_TRUE(bench_json(tiny)["bf16_gemms"].is_null());
  const std::string own = bench_json(bf16)["bf16_gemms"].get<std::string>();
  EXPECT_EQ(own == "the AMX tiles", cpu::cpu_isa() == cpu::CpuIsa::Amx) << own;
  EXPECT_EQ(own.find("VDPBF16PS") != std::string::npos, cpu::bf16_inputs_on_vdp()) << own;
  if (cpu::cpu_isa_supported(cpu::CpuIsa::Avx512Bf16)) {
    ::setenv("FTX_CPU_ISA", "avx512bf16", 1);
    ::setenv("FTX_BF16_GEMM", "vdp", 1);
    const std::string vdp = bench_json(bf16)["bf16_gemms"].get<std::string>();
    ::setenv("FTX_BF16_GEMM", "sgemm", 1);
    const std::string sgemm = bench_json(bf16)["bf16_gemms"].get<std::string>();
    ::unsetenv("FTX_BF16_GEMM");
    ::unsetenv("FTX_CPU_ISA");
    EXPECT_NE(vdp.find("VDPBF16PS"), std::string::npos) << vdp;
    EXPECT_NE(sgemm.find("rounded to bf16 in software"), std::string::npos) << sgemm;
  }
  ::setenv("FTX_CPU_ISA", "generic", 1);
  const std::string rounded = bench_json(bf16)["bf16_gemms"].get<std::string>();
  const Outcome r = ftx({"train", "--db", dir_ + "/b.db", "--run", "r", "--preset", "tiny", "--steps", "1",
                         "--precision", "bf16", "--quiet"},
                        dir_);
  ::unsetenv("FTX_CPU_ISA");
  EXPECT_NE(rounded.find("rounded to bf16 in software"), std::string::npos) << rounded;
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("precision bf16, GEMMs: " + rounded + "\n"), std::string::npos) << r.out;
  const Outcome fp32 =
      ftx({"train", "--db", dir_ + "/f.db", "--run", "r", "--preset", "tiny", "--steps", "1", "--quiet"}, dir_);
  EXPECT_EQ(fp32.code, 0) << describe(fp32);
  EXPECT_EQ(fp32.out.find("precision bf16"), std::string::npos) << fp32.out;
}

// A reshaped model trains on random tokens of its own vocabulary and length. Hand count of the
// training FLOPs per token for L = 2, D = 16, 2 query heads of 8 (D_att = 16), 1 kv head (8),
// F = 24, V = 10, T = 8:
//   one block's GEMM weights: q 16x16 + k 16x8 + v 16x8 + o 16x16 + gate, up, down 3 x 16x24
//                           = 256 + 128 + 128 + 256 + 1152 = 1920
//   baseline: 6 x (2 x 1920 + head 10x16) + 12 x 2 x 8 x 16 = 6 x 4000 + 3072 = 27072
//   H = 3: one more block (the encoder) and the readout 3x16:
//          6 x (3 x 1920 + 160 + 48) + 12 x 3 x 8 x 16 + mapper 2 x 2^3 x (16 + 3)
//        = 35808 + 4608 + 304 = 40720
TEST_F(CliBench, TrainFlopsPerTokenMatchAHandCount) {
  const std::vector<std::string> shape = {"train", "--preset",   "tiny", "--layers", "2",  "--dim",   "16", "--heads",
                                          "2",     "--kv-heads", "1",    "--ffn",    "24", "--vocab", "10", "--seq-len",
                                          "8",     "--batch",    "2",    "--warmup", "0",  "--steps", "1"};
  for (const auto& [bits, flops] : std::vector<std::pair<std::string, double>>{{"0", 27072}, {"3", 40720}}) {
    SCOPED_TRACE("--latent-bits " + bits);
    std::vector<std::string> args = shape;
    args.insert(args.end(), {"--latent-bits", bits});
    const json j = bench_json(args);
    ASSERT_TRUE(j.is_object()) << j;
    EXPECT_EQ(j["data"], "random");
    EXPECT_EQ(j["seq_len"], 8);
    EXPECT_EQ(j["vocab"], 10);
    EXPECT_EQ(j["head_dim"], 8);
    EXPECT_EQ(j["kv_heads"], 1);
    EXPECT_EQ(j["ffn"], 24);
    EXPECT_EQ(j["model_flops_per_token"].get<double>(), flops);
    EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
  }
}

// A routed model's report has the share of tokens its routed blocks computed in the last step:
// k / T under top-k; under threshold mode its own share, at which the FLOPs are counted (so they
// differ from the same model counted at --capacity); none for a dense model.
TEST_F(CliBench, TrainReportsTheRoutedShare) {
  const std::vector<std::string> shape = {"train", "--preset",  "tiny", "--layers", "4",  "--latent-bits",
                                          "0",     "--seq-len", "8",    "--vocab",  "10", "--batch",
                                          "2",     "--warmup",  "0",    "--steps",  "1"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = shape;
    args.insert(args.end(), extra.begin(), extra.end());
    return bench_json(args);
  };
  EXPECT_TRUE(with({})["routed_share"].is_null());
  const json mod = with({"--routing", "mod", "--capacity", "0.5"});
  ASSERT_TRUE(mod.is_object()) << mod;
  EXPECT_EQ(mod["routed_share"].get<double>(), 0.5) << "k = 4 of T = 8";
  const json th = with({"--routing", "stt", "--route-mode", "threshold", "--g-th", "0.6"});
  const json topk = with({"--routing", "stt"});
  ASSERT_TRUE(th.is_object() && topk.is_object());
  const double share = th["routed_share"].get<double>();
  EXPECT_GE(share, 0.0);
  EXPECT_LE(share, 1.0);
  if (share != 0.5) EXPECT_NE(th["model_flops_per_token"], topk["model_flops_per_token"]);
}

TEST_F(CliBench, TrainRefusesBadShapesAndPrecisionsTheCpuLacks) {
  expect_refused({"train", "--preset", "tiny", "--dim", "30", "--heads", "4"}, {"--dim 30", "--heads 4"});
  expect_refused({"train", "--preset", "tiny", "--heads", "4", "--kv-heads", "3"}, {"n_kv_heads"});
  expect_refused({"train", "--preset", "tiny", "--layers", "1"}, {"--layers 1"});
  expect_refused({"train", "--preset", "tiny", "--seq-len", "0"}, {"--seq-len", "positive"});
  expect_refused({"train", "--preset", "tiny", "--vocab", "-3"}, {"--vocab", "positive"});
  expect_refused({"train", "--preset", "tiny", "--latent-bits", "25"}, {"--latent-bits 25", "0..20"});
  expect_refused({"train", "--preset", "tiny", "--precision", "fp16"}, {"--precision fp16", "fp32, tf32 or bf16"});
  expect_refused({"train", "--preset", "tiny", "--precision", "tf32"}, {"--precision tf32", "no tf32"});
}

TEST_F(CliBench, TrainAtFp32RunsOnTheCpu) {
  const json j = bench_json({"train", "--preset", "tiny", "--latent-bits", "0", "--batch", "1", "--warmup", "0",
                             "--steps", "1", "--precision", "fp32"});
  ASSERT_TRUE(j.is_object()) << j;
  EXPECT_EQ(j["precision"], "fp32");
}

TEST_F(CliBench, MapperAgainstTheGemmOfTheSameShape) {
  const json j =
      bench_json({"mapper", "--tokens", "256", "--dim", "64", "--latent-bits", "8", "--warmup", "1", "--steps", "3"});
  ASSERT_TRUE(j.is_object()) << j;
  EXPECT_EQ(j["tokens"], 256);
  EXPECT_EQ(j["dim"], 64);
  EXPECT_EQ(j["codes"], 256);
  EXPECT_EQ(j["gemm_flops"].get<double>(), 2.0 * 256 * 64 * 256);
  EXPECT_EQ(j["mapper_flops"].get<double>(), 2.0 * 256 * 256 * (64 + 8));
  for (const char* k : {"mapper_ms_median", "gemm_ms_median", "mapper_tflops", "gemm_tflops", "mapper_vs_gemm"})
    EXPECT_GT(j[k].get<double>(), 0) << k;
  const double ratio = j["gemm_ms_median"].get<double>() / j["mapper_ms_median"].get<double>();
  EXPECT_NEAR(j["mapper_vs_gemm"].get<double>(), ratio, kTflopsRelTol * ratio);
}

TEST_F(CliBench, MapperRefusesBadArguments) {
  expect_refused({"mapper", "--latent-bits", "0"}, {"--latent-bits 0", "1..20"});
  expect_refused({"mapper", "--latent-bits", "25"}, {"--latent-bits 25", "1..20"});
  expect_refused({"mapper", "--tokens", "0"}, {"--tokens", "positive"});
  expect_refused({"mapper", "--dim", "-1"}, {"--dim", "positive"});
  expect_refused({"mapper", "--tokens", "256", "--dim", "64", "--latent-bits", "8", "--steps", "0"}, {"--steps"});
  // 2^25 x 2^20 floats (128 TiB) exceed the x86-64 user address space: refused, not crashed.
  expect_refused({"mapper", "--tokens", "33554432", "--dim", "1", "--latent-bits", "20"},
                 {"GEMM output", "does not fit"});
}

TEST_F(CliBench, GenerateOnTheCpuReportsTokensPerSecond) {
  for (const char* bits : {"0", "3"}) {
    SCOPED_TRACE(std::string("--latent-bits ") + bits);
    const json j = bench_json({"generate", "--preset", "tiny", "--latent-bits", bits, "--batch", "3", "--len", "5",
                               "--warmup", "0", "--steps", "2"});
    ASSERT_TRUE(j.is_object()) << j;
    EXPECT_EQ(j["batch"], 3);
    EXPECT_EQ(j["len"], 5);
    EXPECT_EQ(j["latent_bits"], std::stoi(bits));
    EXPECT_EQ(j["precision"], "fp32");
    EXPECT_EQ(j["timed_runs"], 2);
    for (const char* k : {"tokens_per_s", "run_ms_median", "run_ms_min", "ms_per_position", "peak_rss_mb"})
      EXPECT_GT(j[k].get<double>(), 0) << k;
    const double want = 3.0 * 5 / (j["run_ms_median"].get<double>() * 1e-3);
    EXPECT_NEAR(j["tokens_per_s"].get<double>(), want, kTflopsRelTol * want);
  }
}

// The preset's max_seq_len (128) only sizes the cache: a longer --len raises it.
TEST_F(CliBench, GenerateLongerThanThePresetsContext) {
  const json j =
      bench_json({"generate", "--preset", "tiny", "--batch", "1", "--len", "130", "--warmup", "0", "--steps", "1"});
  ASSERT_TRUE(j.is_object()) << j;
  EXPECT_EQ(j["len"], 130);
  EXPECT_EQ(j["max_seq_len"], 130);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
}

TEST_F(CliBench, GenerateRefusesBadArguments) {
  expect_refused({"generate", "--preset", "tiny", "--batch", "0"}, {"--batch", "positive"});
  expect_refused({"generate", "--preset", "tiny", "--len", "-1"}, {"--len", "positive"});
  expect_refused({"generate", "--preset", "tiny", "--steps", "0"}, {"--steps", "positive"});
  expect_refused({"generate", "--preset", "tiny", "--warmup", "-1"}, {"--warmup"});
  expect_refused({"generate", "--preset", "tiny", "--vocab", "0"}, {"--vocab", "positive"});
  expect_refused({"generate", "--preset", "tiny", "--latent-bits", "25"}, {"--latent-bits 25", "0..20"});
  expect_refused({"generate", "--preset", "tiny", "--dim", "30", "--heads", "4"}, {"--dim 30", "--heads 4"});
  expect_refused({"generate", "--preset", "tiny", "--precision", "tf32"}, {"--precision tf32", "no tf32"});
  // 2^20 sequences of 2^20 positions: a KV cache of petabytes is refused, not allocated.
  expect_refused({"generate", "--preset", "tiny", "--batch", "1048576", "--len", "1048576"},
                 {"KV cache", "do not fit"});
}

}  // namespace
}  // namespace ftx

namespace ftx {
namespace {

// ftx tokenize --bpe-vocab: a tokenizer trained on the corpus, carried by the token file, which
// ftx train then reads like any other; and the one-line refusals of the tokenizer's sources.
class CliTokenizeBpe : public test::TempDirTest {
 protected:
  CliTokenizeBpe() : TempDirTest("ftx_test_cli_bpe_") {}
};

TEST_F(CliTokenizeBpe, TrainsATokenizerThatTheTokenFileCarries) {
  const std::string corpus = in_dir("corpus"), data = in_dir("d.tok");
  fs::create_directories(corpus + "/code");
  fs::create_directories(corpus + "/prose");
  for (int i = 0; i < 12; ++i) {
    std::ofstream(corpus + "/code/f" + std::to_string(i) + ".py")
        << "def handler_" << i << "(request, response):\n    return request.get('value_" << i << "') + " << i << "\n";
    std::ofstream(corpus + "/prose/p" + std::to_string(i) + ".txt")
        << "Permission is hereby granted to any person obtaining a copy of this document, number " << i << ".\n";
  }
  Outcome r = ftx({"tokenize", "--bpe-vocab", "300", "--kinds", "code,prose", "--val-frac", "0.2", "--input", corpus,
                   "--out", data},
                  dir_);
  ASSERT_EQ(r.code, 0) << test::describe(r);
  EXPECT_NE(r.out.find("BPE: 300 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("id 299 '<|endoftext|>'"), std::string::npos) << r.out;
  r = ftx({"train",
           "--dataset",
           "text",
           "--data",
           data,
           "--seq-len",
           "16",
           "--preset",
           "tiny",
           "--steps",
           "2",
           "--batch",
           "2",
           "--eval-every",
           "0",
           "--checkpoint-every",
           "0",
           "--db",
           in_dir("runs.db"),
           "--run",
           "t",
           "--quiet"},
          dir_);
  ASSERT_EQ(r.code, 0) << test::describe(r);

  // Generations of the text run from the neutral prompt, judged by kind (an untrained model's
  // text is mostly of no kind: what is checked is the report, not the model).
  const std::vector<std::string> gen = {
      "generate",       "--db", in_dir("runs.db"), "--run", "t",       "--independent", "3",
      "--fixed-groups", "2",    "--group-size",    "2",     "--kinds", "--prompt"};
  auto with_prompt = [&](const std::string& p, std::vector<std::string> extra) {
    std::vector<std::string> c = gen;
    c.push_back(p);
    c.insert(c.end(), extra.begin(), extra.end());
    return ftx(c, dir_);
  };
  r = with_prompt("<|endoftext|>", {});
  ASSERT_EQ(r.code, 0) << test::describe(r);
  EXPECT_NE(r.out.find("kinds of text"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fixed group 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KL along the sequence"), std::string::npos) << r.out;  // the run's corpus is at hand
  const double chance = json::parse(test::read_file(data + ".kinds.json"))["chance_agreement"].get<double>();
  r = with_prompt("<|endoftext|>", {"--json"});
  ASSERT_EQ(r.code, 0) << test::describe(r);
  std::vector<json> lines;
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line);)
    lines.push_back(json::parse(line));  // valid where a token cuts a character
  ASSERT_EQ(lines.size(), 8u) << r.out;  // 3 + 2 x 2 sequences, then the summary
  for (size_t i = 0; i < 7; ++i) EXPECT_TRUE(lines[i].contains("kind")) << lines[i];
  const json& summary = lines[7]["kinds"];
  EXPECT_DOUBLE_EQ(summary["chance"].get<double>(), chance) << summary;
  EXPECT_EQ(summary["valid_n"], 7) << summary;
  EXPECT_EQ(summary["kl_at"].size(), 15u) << summary;  // one per input position of the 16-token windows
  expect_one_line_error(with_prompt("", {}), {"--kinds", "prompt"});
  expect_one_line_error(with_prompt("<|endoftext|>", {"--kinds-data", in_dir("none.tok")}),
                        {"none.tok", "no such file"});

  expect_one_line_error(
      ftx({"tokenize", "--bpe-vocab", "300", "--checkpoint", "m.gguf", "--input", corpus, "--out", data}, dir_),
      {"--bpe-vocab", "--checkpoint"});
  expect_one_line_error(ftx({"tokenize", "--bpe-vocab", "300", "--input", corpus}, dir_), {"--bpe-vocab", "--out"});
  expect_one_line_error(ftx({"tokenize", "--input", corpus, "--out", in_dir("e.tok")}, dir_), {"--checkpoint"});
  EXPECT_FALSE(fs::exists(in_dir("e.tok")));
}

}  // namespace
}  // namespace ftx
