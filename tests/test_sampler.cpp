// Tests of core/sample (docs/design.md section 7): generation is a pure function of the seeds, each
// latent policy produces the codes it promises (Fixed reproduces, Edited flips exactly the asked
// bits, Uniform follows its seed, FromEncoder takes the prompt's codes from the encoder and the
// rest from the prior), temperature 0 and top-k 1 are greedy, and check_generation_request refuses
// what a user can get wrong. A small random model on the CPU backend; no training.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/model/model.h"
#include "core/sample/sampler.h"
#include "kernels/backend.h"
#include "kernels/base/philox.h"

namespace ftx {
namespace {

constexpr int kBits = 4;
constexpr int kNewTokens = 12;

class SamplerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    backend_ = make_cpu_backend().release();
    ModelConfig c;
    c.vocab_size = 29;
    c.dim = 16, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 8, c.ffn_hidden = 24;
    c.max_seq_len = 40, c.latent_bits = kBits, c.inject_after = 1;
    model_ = new Model(*backend_, c);
    InitConfig init;
    init.std = 0.5f, init.post_sampler_std = 1.0f;  // peaked, code-dependent next-token distributions
    model_->init_weights(3, init);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete backend_;
  }

  static Model& model() { return *model_; }
  static SampleConfig config(float temperature = 1.0f, int top_k = 0) {
    SampleConfig sc;
    sc.temperature = temperature, sc.top_k = top_k, sc.max_new_tokens = kNewTokens;
    return sc;
  }
  const std::vector<int32_t> prompt_ = {5, 2, 0};  // "C>_"
  const int n_in_ = 3 + kNewTokens - 1;            // input positions: every token but the last

  static Backend* backend_;
  static Model* model_;
};
Backend* SamplerTest::backend_ = nullptr;
Model* SamplerTest::model_ = nullptr;

std::vector<uint32_t> some_codes(int n, uint32_t mul) {
  std::vector<uint32_t> c(n);
  for (int i = 0; i < n; ++i) c[i] = (i * mul + 1) % (1u << kBits);
  return c;
}

TEST_F(SamplerTest, SameSeedsGiveIdenticalGenerations) {
  const std::vector<SequenceSpec> specs = {
      {LatentPolicy::uniform(11), 1},
      {LatentPolicy::fixed(some_codes(n_in_, 5)), 2},
      {LatentPolicy::edited(some_codes(n_in_, 3), {{1, 2}}), 3},
      {LatentPolicy::from_encoder(12), 4},
  };
  const auto a = generate(model(), prompt_, specs, config());
  const auto b = generate(model(), prompt_, specs, config());
  ASSERT_EQ(a.size(), specs.size());
  ASSERT_EQ(b.size(), specs.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "sequence " << i;
    EXPECT_EQ(a[i].codes, b[i].codes) << "sequence " << i;
    EXPECT_EQ(a[i].sample_seed, specs[i].sample_seed);
    ASSERT_EQ(a[i].tokens.size(), prompt_.size() + kNewTokens);
    EXPECT_TRUE(std::equal(prompt_.begin(), prompt_.end(), a[i].tokens.begin()));
    EXPECT_EQ(static_cast<int>(a[i].codes.size()), n_in_);
    for (int32_t t : a[i].tokens) EXPECT_TRUE(t >= 0 && t < model().config().vocab_size);
  }
  // Batching must not leak between sequences: one spec alone gives the same sequence.
  const auto alone = generate(model(), prompt_, {specs[3]}, config());
  EXPECT_EQ(alone[0].tokens, a[3].tokens);
  EXPECT_EQ(alone[0].codes, a[3].codes);
}

TEST_F(SamplerTest, DifferentSampleSeedsGiveDifferentTokens) {
  std::vector<SequenceSpec> specs;
  for (uint64_t s = 1; s <= 4; ++s) specs.push_back({LatentPolicy::fixed(some_codes(n_in_, 5)), s});
  const auto g = generate(model(), prompt_, specs, config());
  int distinct = 0;
  for (size_t i = 1; i < g.size(); ++i) distinct += g[i].tokens != g[0].tokens;
  EXPECT_GT(distinct, 0);
}

TEST_F(SamplerTest, FixedPolicyReproducesItsCodes) {
  const auto z = some_codes(n_in_, 7);
  const auto g = generate(model(), prompt_, {{LatentPolicy::fixed(z), 9}, {LatentPolicy::fixed(z), 9}}, config());
  EXPECT_EQ(g[0].codes, z);
  EXPECT_EQ(g[1].codes, z);
  EXPECT_EQ(g[0].tokens, g[1].tokens);  // same Z, same sample seed: same sequence
  // Z decides the output: the codes a Uniform policy drew, replayed as Fixed, give its sequence.
  const auto u = generate(model(), prompt_, {{LatentPolicy::uniform(77), 5}}, config());
  const auto f = generate(model(), prompt_, {{LatentPolicy::fixed(u[0].codes), 5}}, config());
  EXPECT_EQ(f[0].codes, u[0].codes);
  EXPECT_EQ(f[0].tokens, u[0].tokens);
}

TEST_F(SamplerTest, EditedFlipsExactlyTheRequestedBits) {
  const auto z = some_codes(n_in_, 5);
  const std::vector<std::pair<int, int>> flips = {{0, 0}, {3, 2}, {5, 1}, {5, 3}, {n_in_ - 1, kBits - 1}};
  const auto g = generate(model(), prompt_, {{LatentPolicy::edited(z, flips), 1}}, config());
  ASSERT_EQ(static_cast<int>(g[0].codes.size()), n_in_);
  std::vector<uint32_t> expected_mask(n_in_, 0);
  for (auto [pos, bit] : flips) expected_mask[pos] |= 1u << bit;
  for (int t = 0; t < n_in_; ++t) EXPECT_EQ(g[0].codes[t] ^ z[t], expected_mask[t]) << "position " << t;
}

TEST_F(SamplerTest, UniformFollowsItsSeed) {
  const auto g =
      generate(model(), prompt_,
               {{LatentPolicy::uniform(1), 1}, {LatentPolicy::uniform(2), 1}, {LatentPolicy::uniform(1), 2}}, config());
  EXPECT_NE(g[0].codes, g[1].codes);  // 14 positions of 4 bits: equal by accident with p = 2^-56
  EXPECT_EQ(g[0].codes, g[2].codes);  // the latent seed alone decides the codes
  EXPECT_EQ(g[0].codes, uniform_codes(1, n_in_, kBits));
  EXPECT_EQ(g[1].codes, uniform_codes(2, n_in_, kBits));
  for (uint32_t z : g[0].codes) EXPECT_LT(z, 1u << kBits);
  EXPECT_NE(std::count(g[0].codes.begin(), g[0].codes.end(), g[0].codes[0]), n_in_);  // not constant
}

// Prompt positions: the encoder's sample on the prompt, as Model::forward draws it with the
// policy's seed on stream kStreamEval (what sampler.cpp's prefill uses); later positions: the
// uniform prior of the same seed.
TEST_F(SamplerTest, FromEncoderTakesPromptCodesFromTheEncoderAndTheRestFromThePrior) {
  const uint64_t seed = 1234;
  const auto g = generate(model(), prompt_, {{LatentPolicy::from_encoder(seed), 1}}, config());
  const int Tp = static_cast<int>(prompt_.size());
  auto s = model().make_state(1, Tp);
  (void)model().forward(*s, prompt_.data(), nullptr, nullptr, seed, kStreamEval, 0.0f);
  std::vector<uint32_t> enc(Tp);
  model().read_codes(*s, enc.data());
  const auto prior = uniform_codes(seed, n_in_, kBits);
  ASSERT_EQ(static_cast<int>(g[0].codes.size()), n_in_);
  for (int t = 0; t < Tp; ++t) EXPECT_EQ(g[0].codes[t], enc[t]) << "prompt position " << t;
  for (int t = Tp; t < n_in_; ++t) EXPECT_EQ(g[0].codes[t], prior[t]) << "position " << t;
  // The two sources disagree on the prompt for this seed, so the check above tells them apart.
  EXPECT_FALSE(std::equal(enc.begin(), enc.end(), prior.begin()));
}

// Greedy reference: the same decode_step calls as generate, argmax of exactly those logits.
std::vector<int32_t> greedy_reference(Model& m, const std::vector<int32_t>& prompt, const std::vector<uint32_t>& z,
                                      int new_tokens) {
  const int V = m.config().vocab_size, Tp = static_cast<int>(prompt.size()), n_in = Tp + new_tokens - 1;
  std::vector<int32_t> out = prompt;
  auto d = m.make_decode_state(1, n_in);
  std::vector<float> logits(V);
  for (int pos = 0; pos < n_in; ++pos) {
    m.decode_step(*d, &out[pos], &z[pos], pos, logits.data());
    if (pos + 1 >= Tp)
      out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  return out;
}

TEST_F(SamplerTest, TemperatureZeroIsGreedyAndTopKOneEqualsGreedy) {
  const auto z = some_codes(n_in_, 3);
  const auto greedy =
      generate(model(), prompt_, {{LatentPolicy::fixed(z), 1}, {LatentPolicy::fixed(z), 2}}, config(0.0f));
  const auto ref = greedy_reference(model(), prompt_, z, kNewTokens);
  EXPECT_EQ(greedy[0].tokens, ref);
  EXPECT_EQ(greedy[1].tokens, ref);  // the sample seed plays no part
  const auto top1 =
      generate(model(), prompt_, {{LatentPolicy::fixed(z), 1}, {LatentPolicy::fixed(z), 2}}, config(1.0f, 1));
  EXPECT_EQ(top1[0].tokens, ref);
  EXPECT_EQ(top1[1].tokens, ref);
  // Sampling at temperature 1 does leave the greedy path (otherwise the above proves little).
  std::vector<SequenceSpec> specs;
  for (uint64_t s = 1; s <= 4; ++s) specs.push_back({LatentPolicy::fixed(z), s});
  const auto sampled = generate(model(), prompt_, specs, config(1.0f));
  int off_greedy = 0;
  for (const auto& g : sampled) off_greedy += g.tokens != ref;
  EXPECT_GT(off_greedy, 0);
}

TEST(SampleToken, GreedyTopKAndTemperature) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f, 0.5f};
  for (float u : {0.0f, 0.3f, 0.999f}) {
    EXPECT_EQ(sample_token(logits.data(), 5, 0.0f, 0, 1.0f, u), 1);
    EXPECT_EQ(sample_token(logits.data(), 5, 1.0f, 1, 1.0f, u), 1);
    EXPECT_EQ(sample_token(logits.data(), 5, 0.0f, 3, 1.0f, u), 1);
    const int32_t t2 = sample_token(logits.data(), 5, 1.0f, 2, 1.0f, u);
    EXPECT_TRUE(t2 == 1 || t2 == 3) << t2;
  }
}

// The distribution sample_token draws from, by brute force: every id ranked by a full sort
// (higher logit, then lower id), cut to top-k, then to the fewest ids reaching top_p, renormalised.
std::vector<double> truncated_distribution(const std::vector<float>& logits, float temperature, int top_k,
                                           float top_p) {
  const int V = int(logits.size());
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  std::vector<double> w(V);
  double total = 0;
  for (int i = 0; i < V; ++i) total += w[i] = std::exp(double(logits[i]) / temperature);
  const int k = top_k > 0 ? std::min(top_k, V) : V;
  std::vector<double> p(V, 0.0);
  double mass = 0;
  for (int r = 0; r < k && (r == 0 || mass < double(top_p) * total); ++r) mass += p[order[r]] = w[order[r]];
  for (double& x : p) x /= mass;
  return p;
}

// sample_token is an inverse CDF: over u spread evenly on [0, 1) each id is drawn with its exact
// truncated probability (up to the 1/n grid), whatever ranking the selection used internally.
TEST(SampleToken, DrawsTheTruncatedDistributionWithoutSorting) {
  std::vector<float> logits(3000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::sin(double(i) * 0.37) * 4.0);
  logits[17] = logits[2000] = 5.5f;  // a tie at the top: lower id ranks first
  struct Case {
    float temperature;
    int top_k;
    float top_p;
  };
  for (const Case c : {Case{1.0f, 0, 1.0f}, Case{0.7f, 5, 1.0f}, Case{1.0f, 0, 0.5f}, Case{1.3f, 200, 0.9f},
                       Case{1.0f, 1000, 0.999f}, Case{0.5f, 0, 0.05f}}) {
    SCOPED_TRACE("T " + std::to_string(c.temperature) + " k " + std::to_string(c.top_k) + " p " +
                 std::to_string(c.top_p));
    const std::vector<double> want = truncated_distribution(logits, c.temperature, c.top_k, c.top_p);
    const int n = 20000;  // evenly spaced u: each id is off by at most 1/n
    std::vector<double> got(logits.size(), 0.0);
    for (int i = 0; i < n; ++i) {
      const int32_t t =
          sample_token(logits.data(), int(logits.size()), c.temperature, c.top_k, c.top_p, (float(i) + 0.5f) / n);
      ASSERT_GT(want[size_t(t)], 0.0) << "id " << t << " is outside the truncated set";
      got[size_t(t)] += 1.0 / n;
    }
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-4) << "id " << i;
  }
}

TEST_F(SamplerTest, BaselineGenerationHasNoCodes) {
  ModelConfig c = model().config();
  c.latent_bits = 0;
  Model base(*backend_, c);
  base.init_weights(5, InitConfig{});
  const auto g = generate(base, prompt_, {{LatentPolicy::uniform(1), 1}}, config());
  EXPECT_TRUE(g[0].codes.empty());
  EXPECT_EQ(g[0].tokens.size(), prompt_.size() + kNewTokens);
}

// ---------------------------------------------------------------------------------------------
// check_generation_request

void expect_rejected(const Status& s, const std::string& needle) {
  ASSERT_FALSE(s.ok()) << "accepted, expected an error about '" << needle << "'";
  EXPECT_NE(s.error().message.find(needle), std::string::npos) << s.error().message;
  EXPECT_EQ(s.error().message.find('\n'), std::string::npos) << "not one line: " << s.error().message;
}

TEST_F(SamplerTest, CheckGenerationRequestRejectsBadRequests) {
  const ModelConfig& m = model().config();  // max_seq_len 40, H 4
  const int Tp = 3;
  const SampleConfig sc = config();  // 12 new tokens: 14 input positions
  const auto ok_codes = some_codes(n_in_, 5);
  EXPECT_TRUE(check_generation_request(m, Tp, sc, {}).ok());
  EXPECT_TRUE(check_generation_request(m, Tp, sc, {{LatentPolicy::fixed(ok_codes), 1}}).ok());
  EXPECT_TRUE(check_generation_request(m, Tp, sc, {{LatentPolicy::edited(ok_codes, {{0, 0}, {13, 3}}), 1}}).ok());
  SampleConfig fits = config();
  fits.max_new_tokens = 40 - Tp;  // exactly the context
  EXPECT_TRUE(check_generation_request(m, Tp, fits, {}).ok());

  // Prompt too long for the context (prompt + new tokens > max_seq_len), and an empty prompt.
  expect_rejected(check_generation_request(m, 30, sc, {}), "context");
  SampleConfig over = config();
  over.max_new_tokens = 40 - Tp + 1;
  expect_rejected(check_generation_request(m, Tp, over, {}), "context");
  expect_rejected(check_generation_request(m, 0, sc, {}), "prompt");
  // Wrong code counts (Fixed and Edited), out-of-range codes.
  expect_rejected(check_generation_request(m, Tp, sc, {{LatentPolicy::fixed(some_codes(n_in_ - 1, 5)), 1}}),
                  "latent codes");
  expect_rejected(check_generation_request(m, Tp, sc, {{LatentPolicy::edited(some_codes(2, 5), {}), 1}}),
                  "latent codes");
  auto bad = ok_codes;
  bad[4] = 1u << kBits;
  expect_rejected(check_generation_request(m, Tp, sc, {{LatentPolicy::fixed(bad), 1}}), "outside");
  // Flips outside the positions or the bits.
  for (auto f : std::vector<std::pair<int, int>>{{n_in_, 0}, {-1, 0}, {0, kBits}, {0, -1}})
    expect_rejected(check_generation_request(m, Tp, sc, {{LatentPolicy::edited(ok_codes, {f}), 1}}), "flip");
  // Sampling settings.
  expect_rejected(check_generation_request(m, Tp, config(-0.5f), {}), "temperature");
  expect_rejected(check_generation_request(m, Tp, config(std::nanf("")), {}), "temperature");
  expect_rejected(check_generation_request(m, Tp, config(1.0f, -1), {}), "top_k");
  SampleConfig none = config();
  none.max_new_tokens = 0;
  EXPECT_FALSE(check_generation_request(m, Tp, none, {}).ok());
  // A bad spec after good ones is still found.
  expect_rejected(check_generation_request(m, Tp, sc, {{LatentPolicy::uniform(1), 1}, {LatentPolicy::fixed(bad), 2}}),
                  "outside");
}

}  // namespace
}  // namespace ftx
