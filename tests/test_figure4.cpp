// Figure 4 end to end: the measurement (core/eval/figure4), run bundles (core/train/run_bundle:
// ftx export / ftx import), ftx sweep and ftx demo, and the models shipped in resources/models
// against the thresholds of docs/figure4.md. The metric code itself is tested on constructed
// bodies in test_synth_metrics.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/eval/figure4.h"
#include "core/explore/explorer.h"
#include "core/io/checkpoint.h"
#include "core/store/run_store.h"
#include "core/train/run_bundle.h"
#include "core/train/trainer.h"
#include "datasets/registry.h"
#include "datasets/synthetic.h"
#include "kernels/base/dtype.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::Outcome;
constexpr auto ftx = test::run_ftx;

class Figure4Test : public test::TempDirTest {
 protected:
  Figure4Test() : TempDirTest("ftx_test_figure4_") {}
  std::string db() const { return dir_ + "/runs.db"; }
  // A tiny synthetic-task run of a few steps in db() (one checkpoint at `steps`).
  void train_tiny(const std::string& run, int steps = 4, const std::string& kappa_bits = "1") {
    const Outcome r = ftx({"train", "--db", db(), "--run", run, "--preset", "tiny", "--steps", std::to_string(steps),
                           "--kappa-bits", kappa_bits, "--eval-every", "2", "--val-sequences", "16", "--quiet"},
                          dir_);
    ASSERT_EQ(r.code, 0) << test::describe(r);
  }
  std::vector<MetricRow> metrics(const std::string& path, const std::string& run) {
    auto store = RunStore::open_readonly(path);
    EXPECT_TRUE(store.ok());
    auto info = store->find_run(run);
    EXPECT_TRUE(info.ok());
    auto rows = store->metrics(info->id, "");
    return rows ? *rows : std::vector<MetricRow>{};
  }
};

// ---- the measurement -------------------------------------------------------------------------

TEST(Figure4Numbers, StoreKeysRoundTripAndMissingKeysStayNaN) {
  Figure4Numbers f;
  f.valid = {0.9, 0.01, 100};
  f.agree_fixed = {0.4, 0.05, 64};
  f.noise_fixed = {0.1, 0.02, 64};
  f.agree_indep = {0.02, 0.001, 900};
  f.noise_indep = {0.03, 0, 2};
  f.agree_late = {0.8, 0.04, 120};
  f.start_tv = 0.2;
  const auto keys = figure4_metrics(f);
  EXPECT_EQ(keys.size(), 6u * 3 + 1);
  const Figure4Numbers back = figure4_from_metrics(keys);
  EXPECT_EQ(back.agree_fixed.mean, 0.4);
  EXPECT_EQ(back.agree_fixed.se, 0.05);
  EXPECT_EQ(back.agree_fixed.n, 64);
  EXPECT_EQ(back.agree_late.mean, 0.8);
  EXPECT_EQ(back.noise_indep.n, 2);
  EXPECT_EQ(back.start_tv, 0.2);
  const Figure4Numbers none = figure4_from_metrics({{"fig4/valid", 0.5}});
  EXPECT_EQ(none.valid.mean, 0.5);
  EXPECT_TRUE(std::isnan(none.valid.se));
  EXPECT_TRUE(std::isnan(none.agree_fixed.mean));
  EXPECT_TRUE(std::isnan(none.start_tv));
  EXPECT_TRUE(none.kl.at.empty());  // measured before the KL profile existed
  EXPECT_TRUE(none.kl.around_start.empty());

  // The KL profile: one key per position and offset, and the code's summary.
  f.kl.at = {0.01, 0.2, 0.03};
  f.kl.around_start = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  f.kl.elsewhere = 0.04, f.kl.bits_at_start = 5.5, f.kl.bits_elsewhere = 0.25;
  const auto with_kl = figure4_metrics(f);
  EXPECT_EQ(with_kl.size(), 6u * 3 + 1 + 3 + 9 + 3);
  const Figure4Numbers kl_back = figure4_from_metrics(with_kl);
  EXPECT_EQ(kl_back.kl.at, f.kl.at);
  EXPECT_EQ(kl_back.kl.around_start, f.kl.around_start);
  EXPECT_EQ(kl_back.kl.elsewhere, 0.04);
  EXPECT_EQ(kl_back.kl.bits_at_start, 5.5);
  EXPECT_EQ(kl_back.kl.bits_elsewhere, 0.25);
}

// The position code's cost sums, by the chain rule of entropy, to the entropy of the uniform
// start, log 57; at the first body position it is h(1/57), the issue's 0.088 nats.
TEST(Figure4Numbers, PositionCodeCostsAddUpToTheStartsEntropy) {
  double sum = 0;
  for (int i = 0; i < 66; ++i) sum += start_code_cost(i);
  EXPECT_NEAR(sum, std::log(57.0), 1e-12);
  const double q = 1.0 / 57;
  EXPECT_NEAR(start_code_cost(1), -(q * std::log(q) + (1 - q) * std::log(1 - q)), 1e-15);
  EXPECT_NEAR(start_code_cost(1), 0.0883, 1e-4);
  EXPECT_NEAR(start_code_cost(51), 0.0503, 1e-4);  // s = 50
  EXPECT_EQ(start_code_cost(0), 0.0);              // the prompt's letter: no body character next
  EXPECT_EQ(start_code_cost(57), 0.0);             // s = 56, the last start: it is certain by then
  EXPECT_EQ(start_code_cost(58), 0.0);
}

TEST(Figure4Numbers, StoredNumbersAreThoseOfTheCheckpointAsked) {
  Figure4Numbers at500, at1000;
  at500.agree_fixed = {0.1, 0.01, 64};
  at1000.agree_fixed = {0.4, 0.02, 64};
  std::vector<MetricRow> rows = {{.step = 500, .key = "val/kl", .value = 0.08}};
  for (const auto& [key, value] : figure4_metrics(at500)) rows.push_back({.step = 500, .key = key, .value = value});
  for (const auto& [key, value] : figure4_metrics(at1000)) rows.push_back({.step = 1000, .key = key, .value = value});
  EXPECT_EQ(stored_figure4(rows, 500)->agree_fixed.mean, 0.1);
  EXPECT_EQ(stored_figure4(rows, 1000)->agree_fixed.mean, 0.4);
  EXPECT_FALSE(stored_figure4(rows, 750)) << "a checkpoint that was never measured";
  EXPECT_FALSE(stored_figure4({rows.front()}, 500)) << "other metrics are not Figure 4 numbers";
}

TEST(Figure4Numbers, TrainingDataStartsAreUniformUpToNoise) {
  // Noise can hide a target's end, so a few bodies have two or three possible starts: the
  // distribution stays within a few percent of uniform, and sums to 1.
  const std::vector<double> p = SyntheticDataset::start_distribution(20000);
  ASSERT_EQ(p.size(), 57u);
  double sum = 0;
  for (double v : p) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-9);
  const std::vector<double> uniform(57, 1.0 / 57);
  EXPECT_LT(total_variation(p, uniform), 0.06);
}

TEST_F(Figure4Test, MeasurementCountsEverySequenceAndRefusesBadProtocols) {
  train_tiny("r");
  auto be = make_cpu_backend();
  auto m = load_explorer_model(*be, make_dataset, db(), "r", std::nullopt);
  ASSERT_TRUE(m.ok()) << m.error().message;
  Figure4Protocol p;
  p.prompts = {"K>", "Q>"}, p.independent = 10, p.fixed_groups = 3, p.group_size = 4;
  const auto starts = SyntheticDataset::start_distribution(2000);
  auto f = measure_figure4(*m->model, *m->tokenizer, m->seq_len, starts, p);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->valid.n, 2 * (10 + 3 * 4));
  EXPECT_GE(f->valid.mean, 0.0);
  EXPECT_LE(f->valid.mean, 1.0);
  auto again = measure_figure4(*m->model, *m->tokenizer, m->seq_len, starts, p);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->valid.mean, f->valid.mean);  // deterministic seeds

  // The KL profile over held-out sequences: the mean of the model's own KL at every position.
  auto data = make_dataset(m->train);
  auto prof = kl_profile(*m->model, *data, 70);  // a batch of 64 and one of 6
  ASSERT_TRUE(prof.ok()) << prof.error().message;
  EXPECT_EQ(prof->sequences, 70);
  EXPECT_GT(prof->with_start, 20);  // most bodies have one possible start
  ASSERT_EQ(prof->at.size(), 65u);
  std::vector<int32_t> tok(size_t(70) * 66), in(size_t(70) * 65), tg(size_t(70) * 65);
  data->validation(tok.data(), 0, 70);
  split_inputs_targets(tok.data(), 70, 66, in.data(), tg.data());
  auto st = m->model->make_state(70, 65);
  (void)m->model->forward(*st, in.data(), tg.data(), nullptr, 0, 0, 0.0f);
  std::vector<float> kl(size_t(70) * 65);
  m->model->read_kl(*st, kl.data());
  for (int t : {0, 1, 30, 64}) {
    double s = 0;
    for (int b = 0; b < 70; ++b) s += kl[size_t(b) * 65 + t];
    EXPECT_NEAR(prof->at[size_t(t)], s / 70, 1e-6) << "t " << t;
  }
  ASSERT_EQ(prof->around_start.size(), size_t(2 * kStartWindow + 1));
  EXPECT_GE(prof->bits_at_start, 0.0);
  EXPECT_LE(prof->bits_at_start, 8.0);

  for (const auto& [prompts, group_size, needle] :
       {std::tuple{std::vector<std::string>{"k>"}, 4, "not a synthetic-task prompt"},
        std::tuple{std::vector<std::string>{"K>x"}, 4, "not a synthetic-task prompt"},
        std::tuple{std::vector<std::string>{"K>"}, 1, "groups of at least 2"},
        std::tuple{std::vector<std::string>{}, 4, "needs prompts"}}) {
    Figure4Protocol bad = p;
    bad.prompts = prompts, bad.group_size = group_size;
    auto r = measure_figure4(*m->model, *m->tokenizer, m->seq_len, starts, bad);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
  }
}

// ---- run bundles -----------------------------------------------------------------------------

TEST_F(Figure4Test, ExportThenImportGivesTheSameRunWithBf16Weights) {
  train_tiny("src");
  const std::string bundle = dir_ + "/bundle", other = dir_ + "/other/runs.db";
  ASSERT_TRUE(export_run(db(), "src", bundle, ExportOptions{std::nullopt, true, "shipped"}).ok());
  EXPECT_TRUE(fs::exists(bundle + "/run.json"));
  EXPECT_FALSE(fs::exists(bundle + "/training_state.safetensors"));
  fs::create_directories(dir_ + "/other");
  bool imported = false;
  auto st = import_run(other, bundle, &imported);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_TRUE(imported);

  auto store = RunStore::open_readonly(other);
  ASSERT_TRUE(store.ok());
  auto info = store->find_run("shipped");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->status, "done");
  auto ref = find_run_checkpoint(*store, "shipped", std::nullopt);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  EXPECT_EQ(ref->step, 4);
  EXPECT_EQ(ref->dir, checkpoint_dir(other, "shipped", 4));
  auto src_ref = [&] {
    auto s = RunStore::open_readonly(db());
    return *find_run_checkpoint(*s, "src", std::nullopt);
  }();
  auto src = load_checkpoint(src_ref.dir, false);
  auto dst = load_checkpoint(ref->dir, false);
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_EQ(src->params.size(), dst->params.size());
  for (size_t i = 0; i < src->params.size(); ++i)
    ASSERT_EQ(dst->params[i], bf16_to_fp32(fp32_to_bf16(src->params[i]))) << i;
  // Every metric row of the source up to the exported step, same step, key and value.
  const auto a = metrics(db(), "src"), b = metrics(other, "shipped");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].step, b[i].step);
    EXPECT_EQ(a[i].key, b[i].key);
    if (!std::isnan(a[i].value)) {
      EXPECT_EQ(a[i].value, b[i].value) << a[i].key;
    }
  }
  // The imported run reads like a trained one: the explorer loads it.
  auto be = make_cpu_backend();
  auto m = load_explorer_model(*be, make_dataset, other, "shipped", std::nullopt);
  ASSERT_TRUE(m.ok()) << m.error().message;

  // Importing again changes nothing.
  ASSERT_TRUE(import_run(other, bundle, &imported).ok());
  EXPECT_FALSE(imported);
  EXPECT_EQ(metrics(other, "shipped").size(), a.size());
}

TEST_F(Figure4Test, CorruptBundlesAreOneLineErrorsAndLeaveTheStoreAlone) {
  train_tiny("src");
  const std::string good = dir_ + "/good";
  ASSERT_TRUE(export_run(db(), "src", good).ok());
  const std::string store = dir_ + "/target.db";
  auto copy = [&](const std::string& name) {
    const std::string d = dir_ + "/" + name;
    fs::copy(good, d, fs::copy_options::recursive);
    return d;
  };
  struct Case {
    std::string name, needle;
    std::function<void(const std::string&)> damage;
  };
  const std::vector<Case> cases = {
      {"no_run_json", "run.json", [](const std::string& d) { fs::remove(d + "/run.json"); }},
      {"not_json", "not a JSON object", [](const std::string& d) { test::write_file(d + "/run.json", "{oops"); }},
      {"wrong_format", "not a run bundle",
       [](const std::string& d) { test::write_file(d + "/run.json", R"({"format":"other","version":1})"); }},
      {"bad_metric", "metric 'x'",
       [&](const std::string& d) {
         json j = json::parse(test::read_file(d + "/run.json"));
         j["metrics"]["x"] = json::array({json::array({1, "a"})});
         test::write_file(d + "/run.json", j.dump());
       }},
      {"bad_name", "a run name has no '/'",
       [&](const std::string& d) {
         json j = json::parse(test::read_file(d + "/run.json"));
         j["name"] = "../escape";
         test::write_file(d + "/run.json", j.dump());
       }},
      {"truncated_model", "model.safetensors",
       [](const std::string& d) { fs::resize_file(d + "/model.safetensors", 1000); }},
      {"no_model", "model.safetensors", [](const std::string& d) { fs::remove(d + "/model.safetensors"); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string d = copy(c.name);
    c.damage(d);
    const Outcome r = ftx({"import", "--db", store, d}, dir_);
    test::expect_one_line_error(r, {c.needle});
    if (auto s = RunStore::open_readonly(store); s.ok()) {
      EXPECT_FALSE(s->find_run("src").ok());
    }
    EXPECT_FALSE(fs::exists(dir_ + "/target.checkpoints/src"));
  }
  const Outcome ok = ftx({"import", "--db", store, good}, dir_);
  EXPECT_EQ(ok.code, 0) << test::describe(ok);
  EXPECT_NE(ok.out.find("imported"), std::string::npos);
}

// ---- ftx sweep and ftx demo ------------------------------------------------------------------

TEST_F(Figure4Test, SweepTrainsMeasuresOnceAndKeepsFinishedRuns) {
  const std::vector<std::string> args = {"sweep",    "--db",          db(), "--name",         "s",    "--kappas",
                                         "1/64:3,1", "--steps",       "2",  "--preset",       "tiny", "--val-sequences",
                                         "16",       "--independent", "20", "--fixed-groups", "2",    "--group-size",
                                         "4",        "--quiet"};
  const Outcome r = ftx(args, dir_);
  ASSERT_EQ(r.code, 0) << test::describe(r);
  EXPECT_NE(r.out.find("s-1_64bit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("s-1bit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1/64 bit"), std::string::npos) << r.out;
  auto store = RunStore::open_readonly(db());
  ASSERT_TRUE(store.ok());
  auto a = find_run_checkpoint(*store, "s-1_64bit", std::nullopt);
  auto b = find_run_checkpoint(*store, "s-1bit", std::nullopt);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->step, 3);  // the entry's own steps
  EXPECT_EQ(b->step, 2);  // --steps for the others
  auto count_fig4 = [&](const std::string& run) {
    int n = 0;
    for (const MetricRow& m : metrics(db(), run)) n += m.key == "fig4/agree_fixed";
    return n;
  };
  EXPECT_EQ(count_fig4("s-1_64bit"), 1);
  // Again: nothing retrained, nothing measured twice, the same table.
  const Outcome again = ftx(args, dir_);
  ASSERT_EQ(again.code, 0) << test::describe(again);
  EXPECT_NE(again.out.find("s-1_64bit: done, kept"), std::string::npos) << again.out;
  EXPECT_EQ(count_fig4("s-1_64bit"), 1);
  const char* header = "kappa       step";
  ASSERT_NE(r.out.find(header), std::string::npos) << r.out;
  EXPECT_EQ(again.out.substr(again.out.find(header)), r.out.substr(r.out.find(header)));

  // --runs measures (here: reads) any runs by name.
  const Outcome named = ftx({"sweep", "--db", db(), "--runs", "s-1bit"}, dir_);
  ASSERT_EQ(named.code, 0) << test::describe(named);
  EXPECT_EQ(named.out.find("s-1_64bit"), std::string::npos) << named.out;
  EXPECT_NE(named.out.find("s-1bit "), std::string::npos) << named.out;
  test::expect_one_line_error(ftx({"sweep", "--db", db(), "--runs", "nope"}, dir_), {"nope"});
  test::expect_one_line_error(ftx({"sweep", "--db", db()}, dir_), {"--kappas or --runs"});
  test::expect_one_line_error(ftx({"sweep", "--db", db(), "--kappas", "1/0"}, dir_), {"--kappas '1/0'"});
  test::expect_one_line_error(ftx({"sweep", "--db", db(), "--kappas", "x:10"}, dir_), {"BITS[:STEPS]"});
  test::expect_one_line_error(ftx({"sweep", "--db", db(), "--kappas", "1:-5"}, dir_), {"--kappas '1:-5'"});
  test::expect_one_line_error(ftx({"sweep", "--db", db(), "--kappas", "1", "--dataset", "coinflip"}, dir_),
                              {"synthetic task"});
}

TEST_F(Figure4Test, DemoShowsTheShippedModelsWithoutTraining) {
  // Four tiny runs named as the recipe names them, exported like resources/models.
  for (const char* k : {"1/64", "1/8", "1", "8"}) {
    const std::string kappa = k;
    const Outcome r =
        ftx({"sweep", "--db",         db(),   "--name",          "fig4", "--kappas",      kappa, "--steps",
             "2",     "--preset",     "tiny", "--val-sequences", "16",   "--independent", "10",  "--fixed-groups",
             "2",     "--group-size", "4",    "--quiet"},
            dir_);
    ASSERT_EQ(r.code, 0) << test::describe(r);
  }
  const std::string models = dir_ + "/models";
  for (const char* run : {"fig4-1_64bit", "fig4-1_8bit", "fig4-1bit", "fig4-8bit"})
    ASSERT_TRUE(export_run(db(), run, models + "/" + run).ok()) << run;
  const Outcome r = ftx({"demo", "--workspace", dir_ + "/ws", "--models", models}, dir_);
  ASSERT_EQ(r.code, 0) << test::describe(r);
  for (const char* text : {"kappa = 1/64 bit", "kappa = 1/8 bit", "kappa = 1 bit", "kappa = 8 bits", "fixed Z, group 2",
                           "Figure 4 as numbers"})
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  EXPECT_EQ(r.out.find("step    1/"), std::string::npos) << "the demo trained";
  // The table shows the numbers stored with the models, not a new measurement.
  auto store = RunStore::open_readonly(dir_ + "/ws/runs.db");
  ASSERT_TRUE(store.ok());
  auto info = store->find_run("fig4-1bit");
  ASSERT_TRUE(info.ok());
  auto measured = store->metrics(info->id, "fig4/agree_fixed");
  ASSERT_TRUE(measured.ok());
  EXPECT_EQ(measured->size(), 1u);

  // Without the models: one line saying how to get them.
  const Outcome none = ftx({"demo", "--workspace", dir_ + "/empty", "--models", dir_ + "/nowhere"}, dir_);
  test::expect_one_line_error(none, {"nowhere"});
}

// ---- the shipped models ----------------------------------------------------------------------

// resources/models, imported as ./run.sh and ftx demo do, then measured again here with the
// protocol of docs/figure4.md (deterministic seeds). The issue's thresholds that the recipe
// reaches are asserted as thresholds (within two standard errors); the ones it does not reach yet
// (1/8 bit: agreement >= 0.4 and >= 0.8 for late targets; 1 bit: agreement >= 0.9)
// are asserted at what docs/figure4.md reports, so that a shipped model that does worse fails.
class ShippedModels : public test::TempDirTest {
 protected:
  ShippedModels() : TempDirTest("ftx_test_shipped_") {}
  void SetUp() override {
    TempDirTest::SetUp();
    for (const char* run : {"coin-baseline", "coin-free", "fig4-1_64bit", "fig4-1_8bit", "fig4-1bit", "fig4-8bit"}) {
      bool imported = false;
      auto st = import_run(db(), std::string(FTX_RESOURCE_DIR) + "/models/" + run, &imported);
      ASSERT_TRUE(st.ok()) << st.error().message;
      ASSERT_TRUE(imported) << run;
    }
  }
  std::string db() const { return dir_ + "/runs.db"; }
  Figure4Numbers measure(const std::string& run) {
    auto m = load_explorer_model(*be_, make_dataset, db(), run, std::nullopt);
    EXPECT_TRUE(m.ok()) << run << ": " << m.error().message;
    if (!m) return {};
    auto f = measure_figure4(*m->model, *m->tokenizer, m->seq_len, SyntheticDataset::start_distribution(),
                             Figure4Protocol{});
    EXPECT_TRUE(f.ok()) << f.error().message;
    return f ? *f : Figure4Numbers{};
  }
  std::unique_ptr<Backend> be_ = make_cpu_backend();
};

TEST_F(ShippedModels, MeetTheFigure4ThresholdsTheyReach) {
  const Figure4Numbers k64 = measure("fig4-1_64bit"), k8 = measure("fig4-1_8bit"), k1 = measure("fig4-1bit"),
                       k8bits = measure("fig4-8bit");
  for (const Figure4Numbers* f : {&k64, &k8, &k1, &k8bits})  // 32 fixed-Z groups of 8 per prompt
    EXPECT_EQ(f->valid.n, 2 * (1000 + 32 * 8));
  // The shipped models are trained with the batch-mean free bits (docs/figure4.md, "Results").
  for (const char* run : {"fig4-1_64bit", "fig4-1_8bit", "fig4-1bit", "fig4-8bit"}) {
    auto m = load_explorer_model(*be_, make_dataset, db(), run, std::nullopt);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->train.free_bits_form(), FreeBitsForm::BatchMean) << run;
  }
  // 1/64 bit: Z ignored.
  EXPECT_LE(k64.agree_fixed.mean - 2 * k64.agree_fixed.se, 0.1);
  // 1/8 bit: valid, noise not pinned, starts spread like the data's ...
  EXPECT_GE(k8.valid.mean + 2 * k8.valid.se, 0.9);
  EXPECT_LE(k8.noise_fixed.mean - 2 * k8.noise_fixed.se, k8.noise_indep.mean + 0.1);
  EXPECT_LE(k8.start_tv, 0.2);
  // ... and the position pinned in part (0.21 against 0.02 independent; the target 0.8 is not met:
  // docs/figure4.md, "What a product-of-bits encoder can afford at 1/8 bit").
  EXPECT_GE(k8.agree_fixed.mean - 2 * k8.agree_fixed.se, 0.15);
  EXPECT_GE(k8.agree_fixed.mean, 5 * k8.agree_indep.mean);
  // 1 bit: valid, the noise pattern pinned (0.49 ± 0.03), the position in part (0.51 against 0.22
  // independent; starts pile up late, TV 0.61).
  EXPECT_GE(k1.valid.mean, 0.9);
  EXPECT_GE(k1.noise_fixed.mean + 2 * k1.noise_fixed.se, 0.5);
  EXPECT_GE(k1.noise_fixed.mean - 2 * k1.noise_fixed.se, k1.noise_indep.mean);
  EXPECT_GE(k1.agree_fixed.mean - 2 * k1.agree_fixed.se, k1.agree_indep.mean + 0.15);
  // 8 bits: generations from the prior go wrong.
  EXPECT_LE(k8bits.valid.mean + 2 * k8bits.valid.se, k1.valid.mean - 0.3);
  // The numbers shipped with the models are these (measured on the same BF16 weights).
  for (const auto& [run, f] : {std::pair{"fig4-1_64bit", &k64}, std::pair{"fig4-1_8bit", &k8},
                               std::pair{"fig4-1bit", &k1}, std::pair{"fig4-8bit", &k8bits}}) {
    auto store = RunStore::open_readonly(db());
    auto info = store->find_run(run);
    ASSERT_TRUE(info.ok());
    auto rows = store->metrics(info->id, "fig4/valid");  // defined for every panel (8 bits: no agreement)
    ASSERT_TRUE(rows.ok());
    ASSERT_EQ(rows->size(), 1u) << run;
    EXPECT_NEAR(rows->front().value, f->valid.mean, 2 * f->valid.se + 1e-9) << run;
  }
}

TEST_F(ShippedModels, CoinFlipLessonShowsTheDrawnZ) {
  // The baseline, which must infer the coin, predicts the first bit at 1/2 (the lesson's chart);
  // the Free Transformer with Z from its encoder is sure from the first bit, on the coin's side for
  // most sequences (7 of these 8; it predicts about 0.01 or 0.9 rather than eps or 1 - eps: at 1
  // bit per token its Z carries more than the coin).
  auto base = load_explorer_model(*be_, make_dataset, db(), "coin-baseline", std::nullopt);
  auto free = load_explorer_model(*be_, make_dataset, db(), "coin-free", std::nullopt);
  ASSERT_TRUE(base.ok() && free.ok());
  const double eps = 0.1;
  int coin_side = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    CoinflipLesson lesson = coinflip_example(seed, 32, eps);
    ASSERT_TRUE(coinflip_lesson(lesson, eps, &*base, &*free, seed).ok());
    ASSERT_EQ(lesson.free_z.size(), 32u);
    EXPECT_NEAR(lesson.baseline[0], 0.5, 0.05) << seed;
    EXPECT_GT(std::abs(lesson.free_z[0] - 0.5), 0.35) << "seed " << seed;
    coin_side += (lesson.free_z[0] > 0.5) == (lesson.z == 1);
  }
  EXPECT_GE(coin_side, 6);
}

}  // namespace
}  // namespace ftx
