// core/explore: what the studio's Generations, Latent and Lessons views show, checked against
// independent computations: the closed-form KL from the bit probabilities, the Fixed policy with
// bits flipped by hand for the Edited policy, the synthetic-task analysis of every row, and a
// baseline trained on the coin-flip task against the exact running posterior.
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "core/eval/synth_metrics.h"
#include "core/explore/explorer.h"
#include "core/sample/sampler.h"
#include "core/train/trainer.h"
#include "datasets/registry.h"
#include "test_util.h"

namespace ftx {
namespace {

constexpr double kProbTol = 1e-6;  // float model outputs against double reference formulas
constexpr double kKlTol = 1e-4;    // the model's KL is accumulated in float over H bits

// Trains `run` for `steps` steps (checkpoint at the end) and returns its database.
void train_run(const std::string& db, const std::string& run, const std::string& dataset, int H, int steps) {
  auto be = make_cpu_backend();
  TrainConfig tc;
  tc.dataset = dataset, tc.preset = "tiny", tc.steps = steps, tc.batch = 16, tc.warmup = 10;
  tc.eval_every = 0, tc.checkpoint_every = 0, tc.lr = 3e-3f;
  tc.dataset_options["coinflip_len"] = 16;
  auto data = make_dataset(tc);
  ModelConfig m = *model_preset("tiny");
  m.latent_bits = H, m.vocab_size = data->tokenizer().vocab_size();
  m.max_seq_len = std::max(m.max_seq_len, data->seq_len());
  auto t = Trainer::start(*be, m, data->tokenizer().clone(), tc, data->seq_len(), db, run);
  ASSERT_TRUE(t.ok()) << t.error().message;
  std::atomic<bool> stop{false};
  ASSERT_TRUE((*t)->run(*data, stop, {}).ok());
}

class ExplorerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("ftx_explore_");
    train_run(db(), "free", "synthetic", 4, 3);
    train_run(db(), "base", "synthetic", 0, 3);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string db() { return *dir_ / "runs.db"; }
  void SetUp() override {
    auto m = load_explorer_model(*be_, make_dataset, db(), "free", std::nullopt);
    ASSERT_TRUE(m.ok()) << m.error().message;
    free_ = std::move(*m);
  }
  static test::TempDir* dir_;
  std::unique_ptr<Backend> be_ = make_cpu_backend();
  ExplorerModel free_;
};
test::TempDir* ExplorerTest::dir_ = nullptr;

TEST_F(ExplorerTest, Figure4GroupsAreDeterministicWithSharedCodesInFixedGroups) {
  Figure4Request req;
  req.prompt = "K>", req.fixed_groups = 2, req.group_size = 4, req.seed = 7;
  auto a = explore_figure4(free_, req);
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto b = explore_figure4(free_, req);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(a->size(), 3u);
  for (size_t g = 0; g < a->size(); ++g) {
    const GroupView& v = (*a)[g];
    EXPECT_EQ(v.fixed, g > 0);
    ASSERT_EQ(v.rows.size(), 4u);
    for (size_t i = 0; i < v.rows.size(); ++i) {
      const GroupRow& r = v.rows[i];
      EXPECT_EQ(r.text, (*b)[g].rows[i].text) << "same request, same text";
      EXPECT_EQ(r.text.size(), 66u);
      EXPECT_EQ(r.text.substr(0, 2), "K>");
      ASSERT_EQ(r.tokens.size(), 66u) << "one entry per token, for the views to draw";
      for (size_t k = 0; k < r.tokens.size(); ++k) EXPECT_EQ(r.tokens[k], r.text.substr(k, 1)) << k;
      EXPECT_EQ(r.codes.size(), 65u);
      SynthAnalysis an = analyze_body(r.text.substr(2), 'K');
      EXPECT_EQ(r.valid, an.valid);
      EXPECT_EQ(r.starts, an.starts);
      // Past the prompt, a fixed group shares one Z and the independent group does not (the two
      // prompt positions come from the encoder and may differ either way).
      std::vector<uint32_t> tail(r.codes.begin() + 2, r.codes.end()),
          first(v.rows[0].codes.begin() + 2, v.rows[0].codes.end());
      if (i > 0) {
        EXPECT_EQ(tail == first, v.fixed) << "group " << g << " row " << i;
      }
    }
    std::vector<std::string> bodies;
    for (const GroupRow& r : v.rows) bodies.push_back(r.text.substr(2));
    const GroupMetrics m = group_metrics(bodies, 'K');
    EXPECT_EQ(v.start, m.start) << "the group's target start, for agreement by position";
    EXPECT_EQ(v.agreement_at, m.agreement_at) << "each valid sequence's start and agreement, for the by-start line";
    EXPECT_EQ(std::isnan(v.agreement), std::isnan(m.agreement));
  }
  req.seed = 8;
  auto c = explore_figure4(free_, req);
  ASSERT_TRUE(c.ok());
  EXPECT_NE((*c)[1].rows[0].codes, (*a)[1].rows[0].codes) << "a new seed resamples Z";
}

TEST_F(ExplorerTest, FreezeKeepsEveryCodeAndResamplesTokens) {
  Figure4Request req;
  req.prompt = "B>", req.fixed_groups = 1, req.group_size = 6;
  auto a = explore_figure4(free_, req);
  ASSERT_TRUE(a.ok());
  auto f = explore_freeze(free_, "B>", *a, 99, 1.0f);
  ASSERT_TRUE(f.ok()) << f.error().message;
  int changed = 0;
  for (size_t g = 0; g < a->size(); ++g)
    for (size_t i = 0; i < (*a)[g].rows.size(); ++i) {
      EXPECT_EQ((*f)[g].rows[i].codes, (*a)[g].rows[i].codes);
      changed += (*f)[g].rows[i].text != (*a)[g].rows[i].text;
    }
  EXPECT_GT(changed, 0) << "new token seeds give new text from a barely trained model";
}

TEST_F(ExplorerTest, LatentInspectionMatchesTheClosedFormKl) {
  const std::string text = "Q>____QQQQQQQQ____!_________________________________________________";
  auto li = inspect_latent(free_, text.substr(0, 66), 2, 5);
  ASSERT_TRUE(li.ok()) << li.error().message;
  ASSERT_EQ(li->T, 65);
  ASSERT_EQ(li->H, 4);
  for (int t = 0; t < li->T; ++t) {
    double kl = 0;
    for (int h = 0; h < li->H; ++h) {
      const double p = li->bit_probs[size_t(t) * li->H + h];
      ASSERT_GE(p, 0.0);
      ASSERT_LE(p, 1.0);
      kl += (p > 0 ? p * std::log(2 * p) : 0) + (p < 1 ? (1 - p) * std::log(2 * (1 - p)) : 0);
    }
    EXPECT_NEAR(li->kl[t], kl, kKlTol) << "t " << t;
    EXPECT_LT(li->codes[t], 16u);
  }
  EXPECT_NEAR(li->kappa_nats, free_.train.kappa_nats, kProbTol);
  auto again = inspect_latent(free_, text.substr(0, 66), 2, 5);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->codes, li->codes);
  EXPECT_EQ(again->regenerated, li->regenerated);
}

TEST_F(ExplorerTest, EditedRegenerationEqualsFixedCodesFlippedByHand) {
  const std::string text = "C>" + std::string(20, '_') + std::string(8, 'C') + std::string(36, '_');
  auto li = inspect_latent(free_, text, 2, 11);
  ASSERT_TRUE(li.ok()) << li.error().message;
  auto none = regenerate_edited(free_, *li, 2, {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->text, li->regenerated);
  EXPECT_TRUE(li->tokens.empty() && none->tokens.empty()) << "a character model's columns are its characters";
  EXPECT_FALSE(li->judges_kinds || none->kind) << "the synthetic task has no kinds";
  const std::vector<std::pair<int, int>> flips{{3, 0}, {10, 2}, {40, 3}};
  auto edited = regenerate_edited(free_, *li, 2, flips);
  ASSERT_TRUE(edited.ok()) << edited.error().message;
  std::vector<uint32_t> codes = li->codes;
  for (auto [t, h] : flips) codes[t] ^= 1u << h;
  SampleConfig sc;
  sc.max_new_tokens = 64;
  auto gens =
      generate(*free_.model, *free_.tokenizer->encode("C>"), {{LatentPolicy::fixed(codes), li->sample_seed}}, sc);
  EXPECT_EQ(edited->text, free_.tokenizer->decode(gens[0].tokens));
  EXPECT_FALSE(regenerate_edited(free_, *li, 2, {{65, 0}}).ok());
  EXPECT_FALSE(regenerate_edited(free_, *li, 2, {{0, 4}}).ok());
}

TEST_F(ExplorerTest, BadInputIsAOneLineError) {
  Figure4Request req;
  req.prompt = "k>";
  auto r = explore_figure4(free_, req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "prompt 'k>': character 'k' at position 0 is not in the vocabulary _!>A..Z");
  req.prompt = "";
  EXPECT_FALSE(explore_figure4(free_, req).ok());
  EXPECT_FALSE(inspect_latent(free_, "K>abc", 2, 1).ok());

  auto base = load_explorer_model(*be_, make_dataset, db(), "base", std::nullopt);
  ASSERT_TRUE(base.ok());
  auto li = inspect_latent(*base, "K>__", 2, 1);
  ASSERT_FALSE(li.ok());
  EXPECT_NE(li.error().message.find("H = 0"), std::string::npos) << li.error().message;

  auto missing = load_explorer_model(*be_, make_dataset, db(), "nobody", std::nullopt);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("nobody"), std::string::npos);
  auto no_db = load_explorer_model(*be_, make_dataset, *dir_ / "absent.db", "free", std::nullopt);
  EXPECT_FALSE(no_db.ok());
}

TEST(ExplorerCheckpoint, DeletedCheckpointFilesAreReportedWithThePath) {
  test::TempDir dir("ftx_explore_del_");
  const std::string db = dir / "runs.db";
  train_run(db, "gone", "synthetic", 2, 2);
  std::filesystem::remove_all(dir / "runs.checkpoints");
  auto be = make_cpu_backend();
  auto m = load_explorer_model(*be, make_dataset, db, "gone", std::nullopt);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("runs.checkpoints"), std::string::npos) << m.error().message;
}

TEST(CoinflipLessonTest, ExampleDrawsTheTaskAndTheExactCurvesFollowTheFormula) {
  const double eps = 0.1;
  CoinflipLesson l = coinflip_example(3, 20000, eps);
  int flips = 0;
  for (int b : l.bits) flips += b != l.z;
  EXPECT_NEAR(flips / 20000.0, eps, 0.01);
  EXPECT_EQ(coinflip_example(3, 50, eps).bits, std::vector<int>(l.bits.begin(), l.bits.begin() + 50));

  CoinflipLesson s = coinflip_example(4, 12, eps);
  ASSERT_TRUE(coinflip_lesson(s, eps, nullptr, nullptr, 1).ok());
  ASSERT_EQ(s.exact_posterior.size(), 12u);
  EXPECT_NEAR(s.exact_posterior[0], 0.5, kProbTol);  // nothing seen yet
  for (int t = 0; t < 12; ++t) {
    // Independent check: P(next=1 | past) = sum_z P(z) P(past|z) P(1|z) / sum_z P(z) P(past|z).
    double num = 0, den = 0;
    for (int z = 0; z < 2; ++z) {
      double like = 0.5;
      for (int i = 0; i < t; ++i) like *= s.bits[i] == z ? 1 - eps : eps;
      num += like * (z ? 1 - eps : eps), den += like;
    }
    EXPECT_NEAR(s.exact_posterior[t], num / den, kProbTol) << "t " << t;
    EXPECT_NEAR(s.exact_given_z[t], s.z ? 1 - eps : eps, kProbTol);
  }
  EXPECT_TRUE(s.baseline.empty());
  EXPECT_TRUE(s.free_z.empty());
}

// A small baseline trained on the coin-flip task learns the running inference: its predictions
// approach the exact posterior (loosely: a short CPU training run).
TEST(CoinflipLessonTest, TrainedBaselineTracksTheExactPosterior) {
  test::TempDir dir("ftx_lesson_");
  const std::string db = dir / "runs.db";
  train_run(db, "coin-base", "coinflip", 0, 300);
  train_run(db, "coin-free", "synthetic", 2, 1);
  auto be = make_cpu_backend();
  auto base = load_explorer_model(*be, make_dataset, db, "coin-base", std::nullopt);
  ASSERT_TRUE(base.ok()) << base.error().message;
  CoinflipLesson l = coinflip_example(21, 16, 0.1);
  ASSERT_TRUE(coinflip_lesson(l, 0.1, &*base, nullptr, 1).ok());
  ASSERT_EQ(l.baseline.size(), 16u);
  double err = 0;
  for (int t = 0; t < 16; ++t) err += std::abs(l.baseline[t] - l.exact_posterior[t]) / 16;
  constexpr double kMeanAbsTol = 0.08;  // 300 steps of a 2-layer model: close, not exact
  EXPECT_LT(err, kMeanAbsTol);
  auto wrong = load_explorer_model(*be, make_dataset, db, "coin-free", std::nullopt);
  ASSERT_TRUE(wrong.ok());
  Status st = coinflip_lesson(l, 0.1, nullptr, &*wrong, 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("coin-flip"), std::string::npos);
}

}  // namespace
}  // namespace ftx
