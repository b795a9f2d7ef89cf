// The shipped text-kinds pair (resources/models/kinds-free and kinds-baseline, docs/text_latent.md)
// measured again here as `ftx generate --kinds` measures it (KindsProtocol's defaults: 32
// independent sequences and 8 fixed-Z groups of 8 from the end-of-text token, seed 1), on the
// shipped BF16 weights. The targets the pair reaches are asserted as targets; the ones it
// does not reach are asserted at the measured figure less two standard errors, so that a shipped
// model that does worse fails; and the numbers shipped with the model (its kinds/... metrics)
// are the ones measured here. The Latent view's computations (core/explore) on the shipped Free
// Transformer: BPE tokens labelled, generations judged by kind, and one flipped bit that changes
// the kind.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "core/eval/kind_groups.h"
#include "core/explore/explorer.h"
#include "core/io/model_file.h"
#include "core/store/run_store.h"
#include "core/train/run_bundle.h"
#include "core/train/run_config.h"
#include "kernels/backend.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

const std::string kModels = std::string(FTX_RESOURCE_DIR) + "/models/";

class ShippedTextModels : public test::TempDirTest {
 protected:
  ShippedTextModels() : TempDirTest("ftx_test_shipped_text_") {}
  void SetUp() override {
    TempDirTest::SetUp();
    for (const char* run : {"kinds-free", "kinds-baseline"}) {
      bool imported = false;
      auto st = import_run(db(), kModels + run, &imported);
      ASSERT_TRUE(st.ok()) << st.error().message;
      ASSERT_TRUE(imported) << run;
    }
  }
  std::string db() const { return dir_ + "/runs.db"; }
  // The last value of `key` the run stored.
  double last(const std::string& run, const std::string& key) {
    auto store = RunStore::open_readonly(db());
    EXPECT_TRUE(store.ok());
    auto info = store->find_run(run);
    EXPECT_TRUE(info.ok()) << run;
    auto rows = store->metrics(info->id, key);
    EXPECT_TRUE(rows.ok() && !rows->empty()) << run << " " << key;
    return rows.ok() && !rows->empty() ? rows->back().value : std::nan("");
  }
  std::unique_ptr<Backend> be_ = make_cpu_backend();
};

TEST_F(ShippedTextModels, MeasuredAgain) {
  auto file = ModelFile::open(kModels + "kinds-free");
  ASSERT_TRUE(file.ok()) << file.error().message;
  const ModelInfo& info = (*file)->info();
  ASSERT_TRUE(info.tokenizer);
  ASSERT_EQ(info.config.latent_bits, 8);
  auto model = (*file)->load(*be_);
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto m = measure_kind_groups(**model, *info.tokenizer, KindsProtocol{});
  ASSERT_TRUE(m.ok()) << m.error().message;
  const KindsNumbers& k = m->numbers;
  EXPECT_EQ(k.valid.n, 32 + 8 * 8);
  const double chance = last("kinds-free", "kinds/chance");
  EXPECT_NEAR(chance, 0.256, 0.001);  // the corpus's kind shares (docs/text_latent.md)

  // Seeds 1-3 pooled (288 sequences). On another arithmetic path than the one the figures were
  // shipped from (another fp32 summation order before each bf16 rounding of the activations: the
  // VDPBF16PS prefill of a Zen 5, say) the sampled texts part ways within a few tokens, so the
  // measurement is a new draw of the same numbers, and each comparison with a shipped or
  // documented figure allows two standard errors of the difference of two independent estimates
  // (docs/text_latent.md, "Measured again on other arithmetic").
  Estimate valid = k.valid, indep = k.agree_indep, fixed = k.agree_fixed;
  for (const uint64_t seed : {2, 3}) {
    KindsProtocol p;
    p.seed = seed;
    auto more = measure_kind_groups(**model, *info.tokenizer, p);
    ASSERT_TRUE(more.ok()) << more.error().message;
    for (auto [pooled, e] : {std::pair{&valid, more->numbers.valid}, std::pair{&indep, more->numbers.agree_indep},
                             std::pair{&fixed, more->numbers.agree_fixed}}) {
      pooled->mean += e.mean, pooled->se = std::hypot(pooled->se, e.se), pooled->n += e.n;
    }
  }
  for (Estimate* e : {&valid, &indep, &fixed}) e->mean /= 3, e->se /= 3;
  std::printf("seeds 1-3: valid %.3f +- %.3f, independent-Z agreement %.3f +- %.3f, fixed-Z %.3f +- %.3f\n", valid.mean,
              valid.se, indep.mean, indep.se, fixed.mean, fixed.se);
  auto apart = [](double a, double se_a, const Estimate& b) { return std::abs(a - b.mean) / std::hypot(se_a, b.se); };

  // Reached: the independent group mixes the kinds as the data does (0.24 +- 0.01 against 0.256).
  EXPECT_LE(std::abs(indep.mean - chance), 0.1);
  // Not reached (docs/text_latent.md, "The shipped pair"), asserted at the documented level less
  // two standard errors: validity 0.79 +- 0.04 (target 0.8), fixed-Z agreement 0.25 +- 0.04
  // (target 0.9: a fixed Z does not pick the kind), and validation CE with Z from the prior
  // +0.026 above the baseline's (target at most +0.02).
  EXPECT_TRUE(valid.mean >= 0.79 || apart(0.79, 0.04, valid) <= 2) << valid.mean;
  EXPECT_TRUE(fixed.mean >= 0.25 || apart(0.25, 0.04, fixed) <= 2) << fixed.mean;
  EXPECT_EQ(k.agree_fixed.n, 8);
  const double gap = last("kinds-free", "val/ce_prior") - last("kinds-baseline", "val/ce_prior");
  EXPECT_LE(gap, 0.03);
  // The encoder spends KL evenly along the sequence (no decision at the start): the stored
  // profile's first position is within 50 % of the mean of the rest.
  auto store = RunStore::open_readonly(db());
  ASSERT_TRUE(store.ok());
  auto run = store->find_run("kinds-free");
  ASSERT_TRUE(run.ok());
  auto rows = store->metrics(run->id, "");
  ASSERT_TRUE(rows.ok());
  const auto stored = stored_kinds(*rows, 2000);
  ASSERT_TRUE(stored);
  ASSERT_EQ(stored->kl_at.size(), 255u);
  double rest = 0;
  for (size_t t = 1; t < stored->kl_at.size(); ++t) rest += stored->kl_at[t] / 254;
  EXPECT_NEAR(stored->kl_at[0], rest, 0.5 * rest);

  // The shipped numbers are these, within two standard errors of the difference.
  for (const auto& [key, e] : {std::pair{std::string("valid"), valid}, std::pair{std::string("agree_fixed"), fixed},
                               std::pair{std::string("agree_indep"), indep}})
    EXPECT_LE(apart(last("kinds-free", "kinds/" + key), last("kinds-free", "kinds/" + key + "_se"), e), 2.0)
        << key << ": shipped " << last("kinds-free", "kinds/" + key) << ", measured " << e.mean;
}

// What the studio's Latent view computes for the run kinds-free, built from the shipped folder
// (the run's token file is not needed: the inspected text is given). A Python snippet's codes
// (seed 2) regenerate text from the end-of-text token, judged by kind; flipping one bit of Z_0
// alone changes the kind (with the same token seed). A scan of every bit at positions 0..3 (32
// flips) over 6 inspections (3 held-out sequences, this snippet at 3 seeds) found 131 of 192 flips
// changing the kind, 89 to another named kind: one early flip makes the rest of the sample
// diverge, and the diverged sample's kind is close to a fresh draw (fixed-Z agreement 0.25, chance
// 0.256). Which kind a given sample lands on moves with the machine's rounding: on the AMD EPYC
// where the model was trained the snippet regenerated Python and bit 5 made prose; on an Intel Xeon
// (2026-11-28) the same build's sample was of no single kind. So the test asks that one of Z_0's
// eight bits changes the kind, not which.
TEST_F(ShippedTextModels, LatentFlipChangesTheKind) {
  auto file = ModelFile::open(kModels + "kinds-free");
  ASSERT_TRUE(file.ok()) << file.error().message;
  auto model = (*file)->load(*be_);
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto store = RunStore::open_readonly(db());
  ASSERT_TRUE(store.ok());
  auto train = read_train_config(*store, "kinds-free");
  ASSERT_TRUE(train.ok()) << train.error().message;
  ExplorerModel m;
  m.run = "kinds-free", m.step = 2000, m.train = *train, m.tokenizer = (*file)->info().tokenizer;
  m.seq_len = 256, m.model = std::move(*model), m.judges_kinds = true;

  const std::string text =
      "<|endoftext|>import os\nimport sys\n\n\ndef main(argv):\n    for name in argv[1:]:\n        print(name)\n";
  auto li = inspect_latent(m, text, 1, 2);
  ASSERT_TRUE(li.ok()) << li.error().message;
  ASSERT_EQ(li->tokens.size(), size_t(li->T) + 1) << "a BPE run's columns are its tokens";
  EXPECT_EQ(li->tokens[0], "<|endoftext|>");
  std::string joined;
  for (const std::string& t : li->tokens) joined += t;
  EXPECT_EQ(joined, text);
  ASSERT_EQ(li->regenerated_tokens.size(), size_t(m.seq_len)) << "the prompt token and 255 generated";
  EXPECT_TRUE(li->judges_kinds);
  ASSERT_EQ(li->regenerated.rfind("<|endoftext|>", 0), 0u);
  const auto judged = classify_text_kind(li->regenerated.substr(std::string("<|endoftext|>").size()));
  EXPECT_EQ(li->regenerated_kind, judged) << "the generated part is judged, not the prompt";

  auto same = regenerate_edited(m, *li, 1, {});
  ASSERT_TRUE(same.ok()) << same.error().message;
  EXPECT_EQ(same->text, li->regenerated);
  EXPECT_EQ(same->tokens, li->regenerated_tokens);
  EXPECT_EQ(same->kind, li->regenerated_kind);

  int changed_bit = -1;
  LatentGeneration flipped;
  for (int bit = 0; bit < li->H && changed_bit < 0; ++bit) {
    auto f = regenerate_edited(m, *li, 1, {{0, bit}});
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_NE(f->text, li->regenerated) << "bit " << bit << " of Z_0 changes the sample";
    if (f->kind != li->regenerated_kind) changed_bit = bit, flipped = *f;
  }
  ASSERT_GE(changed_bit, 0) << "no single bit of Z_0 changed the kind of:\n" << li->regenerated;

  LatentInspection unjudged = *li;
  unjudged.judges_kinds = false;
  auto plain = regenerate_edited(m, unjudged, 1, {{0, changed_bit}});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->text, flipped.text);
  EXPECT_FALSE(plain->kind) << "no kinds for data without them";
}

}  // namespace
}  // namespace ftx
