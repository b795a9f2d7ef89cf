// Whole-model invariants of core/model (docs/testing.md) on the CPU backend:
//   * a zero post-sampler makes the Free Transformer's logits those of the baseline;
//   * Model::backward equals central finite differences of the loss for every tensor, free bits
//     active on some positions; the pass-through gradient of the binary mapper (a surrogate, not a
//     derivative, so invisible to finite differences) is checked separately against a brute-force
//     sum over all 2^H codes;
//   * decode_step with a KV cache equals forward() over the whole sequence, position by position
//     (Free Transformer and baseline, GQA);
//   * the encoder's codes are a pure function of (seed, stream);
//   * an inference-only model on bf16 GEMM weights (Model::create_inference) gives the logits of
//     the fp32 model on the same weights widened, close to those of the unrounded model, and
//     generates with them.
// Not here: the ops one by one (test_ops_grad.cpp, test_binary_mapper.cpp), the sampler's
// policies (test_sampler.cpp), training (test_trainer.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/model/params.h"
#include "kernels/backend.h"
#include "kernels/cpu/isa.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

// Logits of the Free Transformer with W_post = 0 against the baseline's: the same fp32 ops on the
// same values (kv_in = x + 0 = x), so they agree to rounding; 1e-5 is the bound.
constexpr float kBaselineTol = 1e-5f;
// decode_step vs forward(): same math in a different order (one row vs a (B*T) GEMM, attention
// over a cache): fp32 rounding of O(1) logits is ~1e-6; 1e-4 is the bound.
constexpr float kDecodeTol = 1e-4f;

// Finite differences. The loss is fp32 (~3.5); each evaluation carries rounding noise of ~1e-7
// relative. Central differences with step h and one Richardson step (4 D(h/2) - D(h)) / 3 have
// truncation error O(h^4) and noise ~ 1e-6 / h per element. kFdStep = 1e-2 keeps the noise near
// 1e-4 per element, well below the gradients checked (the test asserts every tensor's FD gradient
// is far above kFdNoise), while perturbations stay small next to the free-bits margin around kappa.
constexpr double kFdStep = 1e-2;
// Per-element noise floor of the FD gradient (measured ~1e-5; 5x margin).
constexpr double kFdNoise = 5e-5;
// Per tensor: ||analytic - fd|| <= kGradRelTol * ||fd|| + kFdNoise * sqrt(n). Correct gradients
// land near 1e-3; a tensor whose gradient is dropped (error 1), doubled (error 1) or misses a path
// that carries more than a few percent of it (checked below for the encoder path) fails.
constexpr double kGradRelTol = 1e-2;

std::unique_ptr<Backend> g_backend;

Backend& cpu() {
  if (!g_backend) g_backend = make_cpu_backend();
  return *g_backend;
}

ModelConfig small_config(int latent_bits, int n_heads, int n_kv_heads) {
  ModelConfig c;
  c.vocab_size = 29;
  c.dim = 32, c.n_layers = 3, c.n_heads = n_heads, c.n_kv_heads = n_kv_heads, c.head_dim = 32 / n_heads;
  c.ffn_hidden = 40, c.max_seq_len = 24, c.latent_bits = latent_bits, c.inject_after = 1;
  return c;
}

// The finite-difference config: vocab 29, dim 8, 2 layers, 2 heads, 1 kv head, ffn 12.
ModelConfig fd_config(int latent_bits, bool readout_bias) {
  ModelConfig c;
  c.vocab_size = 29;
  c.dim = 8, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 4, c.ffn_hidden = 12;
  c.max_seq_len = 8, c.latent_bits = latent_bits, c.inject_after = 1, c.readout_bias = readout_bias;
  return c;
}

std::vector<uint32_t> random_codes(size_t n, int H, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> d(0, (1u << H) - 1);
  std::vector<uint32_t> c(n);
  for (auto& x : c) x = d(rng);
  return c;
}

// Host arena with every tensor random: matrices N(0, std^2), norm weights 1 + N(0, 0.2^2) (so
// their gradients are not special), readout scaled by readout_std (large bit logits: large KL).
std::vector<float> random_params(const Model& m, uint32_t seed, float std, float readout_std) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> p(m.num_params());
  for (const ParamSpec& s : m.specs()) {
    float scale = std;
    if (s.name.starts_with("free.encoder_readout")) scale = readout_std;
    for (int64_t i = 0; i < s.numel; ++i) {
      float& x = p[s.offset + i];
      x = s.init == ParamInit::Ones ? 1.0f + 0.2f * nd(rng) : scale * nd(rng);
    }
  }
  return p;
}

float* tensor(std::vector<float>& arena, const Model& m, const std::string& name) {
  const ParamSpec* s = find_param(m.specs(), name);
  EXPECT_NE(s, nullptr) << name;
  return arena.data() + s->offset;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// ---------------------------------------------------------------------------------------------
// Zero post-sampler == baseline

TEST(ModelInvariants, ZeroPostSamplerGivesBaselineLogits) {
  const int B = 3, T = 11;
  ModelConfig fc = small_config(4, 4, 2), bc = small_config(0, 4, 2);
  Model free_model(cpu(), fc), base(cpu(), bc);
  std::vector<float> fp = random_params(free_model, 11, 0.2f, 0.5f);
  float* wpost = tensor(fp, free_model, "free.post_sampler.weight");
  std::fill(wpost, wpost + find_param(free_model.specs(), "free.post_sampler.weight")->numel, 0.0f);
  // The baseline's tensors are the Free Transformer's shared ones, copied by name.
  std::vector<float> bp(base.num_params(), std::nanf(""));
  for (const ParamSpec& s : base.specs()) {
    const ParamSpec* f = find_param(free_model.specs(), s.name);
    ASSERT_NE(f, nullptr) << s.name;
    ASSERT_EQ(f->shape, s.shape) << s.name;
    std::copy_n(fp.data() + f->offset, s.numel, bp.data() + s.offset);
  }
  free_model.load_params(fp.data());
  base.load_params(bp.data());

  const auto inputs = test::random_tokens(size_t(B) * T, fc.vocab_size, 1);
  const auto targets = test::random_tokens(size_t(B) * T, fc.vocab_size, 2);
  auto fs = free_model.make_state(B, T);
  auto bs = base.make_state(B, T);
  std::vector<float> fl(size_t(B) * T * fc.vocab_size), bl(fl.size());
  for (uint64_t stream : {0ull, 1ull, 2ull}) {  // several encoder samples: Z must not matter
    StepStats fst = free_model.forward(*fs, inputs.data(), targets.data(), nullptr, 7, stream, 0.0f);
    StepStats bst = base.forward(*bs, inputs.data(), targets.data(), nullptr, 7, stream, 0.0f);
    free_model.read_logits(*fs, fl.data());
    base.read_logits(*bs, bl.data());
    EXPECT_LT(max_abs_diff(fl, bl), kBaselineTol) << "stream " << stream;
    EXPECT_NEAR(fst.ce, bst.ce, kBaselineTol);
    EXPECT_GT(fst.kl, 0.0);  // the encoder still ran
  }
  // Sensitivity: a non-zero post-sampler must move the logits, or the comparison proves nothing.
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.2f);
  for (int64_t i = 0; i < find_param(free_model.specs(), "free.post_sampler.weight")->numel; ++i) wpost[i] = nd(rng);
  free_model.load_params(fp.data());
  (void)free_model.forward(*fs, inputs.data(), targets.data(), nullptr, 7, 0, 0.0f);
  free_model.read_logits(*fs, fl.data());
  EXPECT_GT(max_abs_diff(fl, bl), 100 * kBaselineTol);
}

// ---------------------------------------------------------------------------------------------
// Backward against finite differences

struct LossParts {
  double loss = 0, kl_excess = 0;
};

class FdHarness {
 public:
  FdHarness(const ModelConfig& c, int B, int T, uint32_t seed)
      : model(cpu(), c), B(B), T(T), state(model.make_state(B, T)) {
    inputs = test::random_tokens(size_t(B) * T, c.vocab_size, seed + 1);
    targets = test::random_tokens(size_t(B) * T, c.vocab_size, seed + 2);
    codes = random_codes(size_t(B) * T, std::max(c.latent_bits, 1), seed + 3);
  }

  // Loss at params; counts in side_flips the evaluations where some gate value (KL_t per pair, or
  // its batch mean at t) lies on the other side of kappa than at the unperturbed point
  // (max(0, x - kappa) has a kink there).
  LossParts eval(const std::vector<float>& params) {
    model.load_params(params.data());
    StepStats st = model.forward(*state, inputs.data(), targets.data(), codes.data(), 5, 9, kappa, form);
    if (!side.empty()) {
      kl_buf = gate_values();
      for (size_t i = 0; i < side.size(); ++i)
        if ((kl_buf[i] > kappa) != side[i]) {
          ++side_flips;
          break;
        }
    }
    return {st.loss, st.kl_excess};
  }

  std::vector<float> analytic(const std::vector<float>& params) {
    model.load_params(params.data());
    model.zero_grad();
    (void)model.forward(*state, inputs.data(), targets.data(), codes.data(), 5, 9, kappa, form);
    model.backward(*state);
    std::vector<float> g(model.num_params());
    cpu().download(g.data(), model.grads(), g.size() * sizeof(float));
    return g;
  }

  // What the form compares with kappa after the last forward: KL (B, T) per pair, or its mean
  // over the batch (T), computed here in double from KL (not read from the model's own gate).
  std::vector<float> gate_values() {
    std::vector<float> kl(size_t(B) * T);
    model.read_kl(*state, kl.data());
    if (form == FreeBitsForm::PerPair) return kl;
    std::vector<float> mean(T);
    for (int t = 0; t < T; ++t) {
      double s = 0;
      for (int b = 0; b < B; ++b) s += kl[size_t(b) * T + t];
      mean[t] = float(s / B);
    }
    return mean;
  }

  std::vector<float> kl_per_position(const std::vector<float>& params) {
    model.load_params(params.data());
    (void)model.forward(*state, inputs.data(), targets.data(), codes.data(), 5, 9, kappa, form);
    return gate_values();
  }

  // Sets kappa in the middle of the widest gap between the sorted gate values, with at least two
  // on each side; returns the distance of the closest one to kappa.
  double place_kappa(const std::vector<float>& params) {
    std::vector<float> kl = kl_per_position(params);
    std::sort(kl.begin(), kl.end());
    size_t best = 2;
    for (size_t i = 2; i + 2 < kl.size(); ++i)
      if (kl[i] - kl[i - 1] > kl[best] - kl[best - 1]) best = i;
    kappa = 0.5f * (kl[best] + kl[best - 1]);
    const std::vector<float> at = kl_per_position(params);
    side.resize(at.size());
    kl_buf.resize(at.size());
    for (size_t i = 0; i < at.size(); ++i) side[i] = at[i] > kappa;
    return 0.5 * (kl[best] - kl[best - 1]);
  }

  // Richardson-extrapolated central differences of the loss and of its free-bits term.
  void fd(std::vector<float> params, std::vector<double>* d_loss, std::vector<double>* d_kl) {
    d_loss->assign(params.size(), 0.0);
    d_kl->assign(params.size(), 0.0);
    for (size_t i = 0; i < params.size(); ++i) {
      const float x0 = params[i];
      auto central = [&](double h, double* dk) {
        params[i] = static_cast<float>(x0 + h);
        const double hp = double(params[i]) - x0;  // the step fp32 actually took
        LossParts p = eval(params);
        params[i] = static_cast<float>(x0 - h);
        const double hm = x0 - double(params[i]);
        LossParts m = eval(params);
        params[i] = x0;
        *dk = (p.kl_excess - m.kl_excess) / (hp + hm);
        return (p.loss - m.loss) / (hp + hm);
      };
      double k1, k2;
      const double d1 = central(kFdStep, &k1), d2 = central(kFdStep / 2, &k2);
      (*d_loss)[i] = (4 * d2 - d1) / 3;
      (*d_kl)[i] = (4 * k2 - k1) / 3;
    }
  }

  Model model;
  int B, T;
  std::unique_ptr<ModelState> state;
  std::vector<int32_t> inputs, targets;
  std::vector<uint32_t> codes;
  float kappa = 0;
  FreeBitsForm form = FreeBitsForm::PerPair;
  std::vector<bool> side;  // gate value > kappa at the unperturbed point
  std::vector<float> kl_buf;
  int side_flips = 0;
};

double norm2(const std::vector<double>& v, int64_t off, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += v[off + i] * v[off + i];
  return std::sqrt(s);
}

// Per tensor: analytic vs FD with kGradRelTol; returns the failing tensors' report lines.
void expect_tensor_grads_match(const Model& m, const std::vector<float>& analytic, const std::vector<double>& fd,
                               const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const ParamSpec* s = find_param(m.specs(), name);
    ASSERT_NE(s, nullptr) << name;
    double err = 0;
    for (int64_t i = 0; i < s->numel; ++i) {
      const double d = double(analytic[s->offset + i]) - fd[s->offset + i];
      err += d * d;
    }
    err = std::sqrt(err);
    const double ref = norm2(fd, s->offset, s->numel);
    const double floor = kFdNoise * std::sqrt(double(s->numel));
    // The check must be able to fail: the gradient itself stands far above the FD noise.
    EXPECT_GT(ref, 20 * floor) << name << ": FD gradient too small to check";
    EXPECT_LE(err, kGradRelTol * ref + floor)
        << name << ": |analytic - fd| = " << err << ", |fd| = " << ref << " (relative " << err / ref << ")";
  }
}

// Places kappa so that at least two positions' KL_t lie on each side of it.
void place_kappa_between_positions(FdHarness& h, const std::vector<float>& params) {
  (void)h.place_kappa(params);
  const std::vector<float> kl = h.kl_per_position(params);
  const auto above = std::count_if(kl.begin(), kl.end(), [&](float x) { return x > h.kappa; });
  ASSERT_GE(above, 2);
  ASSERT_LE(above, static_cast<long>(kl.size()) - 2);
}

// h.fd, which is a derivative only if no perturbation moved a KL_t across kappa.
void fd_on_one_side(FdHarness& h, const std::vector<float>& params, std::vector<double>* fd,
                    std::vector<double>* fd_kl) {
  h.fd(params, fd, fd_kl);
  ASSERT_EQ(h.side_flips, 0) << "a perturbation moved some KL_t across kappa: the FD is not a derivative";
}

std::vector<std::string> all_names(const Model& m) {
  std::vector<std::string> n;
  for (const ParamSpec& s : m.specs()) n.push_back(s.name);
  return n;
}

// Every tensor, free.* and the encoder included. The post-sampler's columns are all equal here, so
// R does not depend on the code and the pass-through term (sum_d dG_d (bit - p)) is exactly zero:
// the analytic gradient is then the true derivative of the loss, which finite differences see.
// The encoder, zeta, the readout and (through the encoder's keys/values) layer 0 and the embedding
// get gradient only from the free-bits KL term, which kappa activates on some positions only.
TEST(ModelBackward, MatchesFiniteDifferencesForEveryTensor) {
  FdHarness h(fd_config(3, false), 2, 5, 100);
  std::vector<float> params = random_params(h.model, 101, 0.4f, 0.8f);
  const ParamSpec* post = find_param(h.model.specs(), "free.post_sampler.weight");
  const int D = 1 << 3;
  for (int64_t c = 0; c < post->shape[0]; ++c)
    for (int d = 1; d < D; ++d) params[post->offset + c * D + d] = params[post->offset + c * D];
  ASSERT_NO_FATAL_FAILURE(place_kappa_between_positions(h, params));

  const std::vector<float> analytic = h.analytic(params);
  std::vector<double> fd, fd_kl;
  ASSERT_NO_FATAL_FAILURE(fd_on_one_side(h, params, &fd, &fd_kl));
  expect_tensor_grads_match(h.model, analytic, fd, all_names(h.model));

  // Sensitivity of the encoder path: the free-bits term carries a share of layer 0's and the
  // embedding's gradient well above the tolerance, so dropping d(kv) of the encoder (or the KL
  // gradient) would fail above, not hide in the tolerance.
  for (const char* name : {"model.embed_tokens.weight", "model.layers.0.self_attn.k_proj.weight",
                           "free.encoder.self_attn.v_proj.weight", "free.zeta"}) {
    const ParamSpec* s = find_param(h.model.specs(), name);
    EXPECT_GT(norm2(fd_kl, s->offset, s->numel), 5 * kGradRelTol * norm2(fd, s->offset, s->numel)) << name;
  }
}

// The batch-mean form (Kingma et al.'s free bits): every tensor against finite differences of
// CE + (1/T) sum_t max(0, mean_b KL[b,t] - kappa), with kappa between positions' batch means.
// Per pair, the same kappa would penalise another set of rows (checked), so a backward that gated
// on the rows' own KL would fail here.
TEST(ModelBackward, BatchMeanFreeBitsMatchFiniteDifferences) {
  FdHarness h(fd_config(3, false), 3, 6, 300);
  h.form = FreeBitsForm::BatchMean;
  std::vector<float> params = random_params(h.model, 301, 0.4f, 0.8f);
  const ParamSpec* post = find_param(h.model.specs(), "free.post_sampler.weight");
  const int D = 1 << 3;
  for (int64_t c = 0; c < post->shape[0]; ++c)  // equal columns: no pass-through term (above)
    for (int d = 1; d < D; ++d) params[post->offset + c * D + d] = params[post->offset + c * D];
  ASSERT_NO_FATAL_FAILURE(place_kappa_between_positions(h, params));

  // The forms differ at this kappa: some row's own KL is on the other side of kappa than its mean.
  (void)h.kl_per_position(params);
  std::vector<float> kl(size_t(h.B) * h.T);
  h.model.read_kl(*h.state, kl.data());
  const std::vector<float> mean = h.gate_values();
  std::vector<float> device_mean(h.T);  // the model's own gate, computed by the backend in the forward
  h.model.read_kl_batch_mean(*h.state, device_mean.data());
  for (int t = 0; t < h.T; ++t) EXPECT_NEAR(device_mean[t], mean[t], 1e-6f * (1 + mean[t])) << "t " << t;
  int differ = 0;
  for (size_t i = 0; i < kl.size(); ++i) differ += (kl[i] > h.kappa) != (mean[i % h.T] > h.kappa);
  ASSERT_GT(differ, 0) << "kappa must separate the forms for this test to tell them apart";
  const StepStats batch_mean = h.model.forward(*h.state, h.inputs.data(), h.targets.data(), h.codes.data(), 5, 9,
                                               h.kappa, FreeBitsForm::BatchMean);
  const StepStats per_pair = h.model.forward(*h.state, h.inputs.data(), h.targets.data(), h.codes.data(), 5, 9, h.kappa,
                                             FreeBitsForm::PerPair);
  EXPECT_EQ(batch_mean.kl, per_pair.kl);                // the mean KL does not depend on the form
  EXPECT_LT(batch_mean.kl_excess, per_pair.kl_excess);  // Jensen: max(0, mean - k) <= mean of max(0, . - k)

  const std::vector<float> analytic = h.analytic(params);
  std::vector<double> fd, fd_kl;
  ASSERT_NO_FATAL_FAILURE(fd_on_one_side(h, params, &fd, &fd_kl));
  expect_tensor_grads_match(h.model, analytic, fd, all_names(h.model));
  for (const char* name : {"free.encoder.self_attn.v_proj.weight", "free.zeta"}) {
    const ParamSpec* s = find_param(h.model.specs(), name);
    EXPECT_GT(norm2(fd_kl, s->offset, s->numel), 5 * kGradRelTol * norm2(fd, s->offset, s->numel)) << name;
  }
}

// The pass-through gradient of the binary mapper, at model level: with random post-sampler columns
// and one distinct code per position, the post-sampler's gradient column of code_t is dL/dR_t, and
//   dL/dbias_h = FD(bias_h) + sum_t sum_d <dR_t, W_d> G_t(d) (bit_h(d) - p_th)
// (FD sees the true derivative: the free-bits term; the sum is the straight-through surrogate,
// brute force over all 2^H codes). Tensors after the mapper must still match FD exactly.
TEST(ModelBackward, PassThroughGradientReachesTheEncoder) {
  const int H = 4, B = 2, T = 5, N = B * T;
  FdHarness h(fd_config(H, true), B, T, 200);
  for (int n = 0; n < N; ++n) h.codes[n] = static_cast<uint32_t>((n * 7 + 3) % (1 << H));  // distinct
  std::vector<float> params = random_params(h.model, 201, 0.4f, 0.8f);
  ASSERT_NO_FATAL_FAILURE(place_kappa_between_positions(h, params));

  const std::vector<float> analytic = h.analytic(params);
  std::vector<float> p(size_t(N) * H);
  h.model.read_bit_probs(*h.state, p.data());
  std::vector<double> fd, fd_kl;
  ASSERT_NO_FATAL_FAILURE(fd_on_one_side(h, params, &fd, &fd_kl));
  // After the mapper: untouched by the surrogate.
  std::vector<std::string> after;
  for (const ParamSpec& s : h.model.specs())
    if (s.name.starts_with("model.layers.1.") || s.name == "model.norm.weight" || s.name == "lm_head.weight" ||
        s.name == "free.post_sampler.weight")
      after.push_back(s.name);
  expect_tensor_grads_match(h.model, analytic, fd, after);

  const ParamSpec* post = find_param(h.model.specs(), "free.post_sampler.weight");
  const ParamSpec* bias = find_param(h.model.specs(), "free.encoder_readout.bias");
  const int C = h.model.config().dim, D = 1 << H;
  std::vector<double> pass(H, 0.0);
  for (int n = 0; n < N; ++n) {
    const uint32_t z = h.codes[n];
    for (int d = 0; d < D; ++d) {
      double g = 1, dot = 0;
      for (int b = 0; b < H; ++b) g *= ((d >> b) & 1) ? p[n * H + b] : 1.0 - p[n * H + b];
      for (int c = 0; c < C; ++c)
        dot += double(analytic[post->offset + int64_t(c) * D + z]) * params[post->offset + int64_t(c) * D + d];
      for (int b = 0; b < H; ++b) pass[b] += dot * g * (double((d >> b) & 1) - p[n * H + b]);
    }
  }
  double pass_norm = 0;
  for (int b = 0; b < H; ++b) {
    const double expected = fd[bias->offset + b] + pass[b];
    EXPECT_NEAR(analytic[bias->offset + b], expected, kGradRelTol * std::fabs(expected) + kFdNoise)
        << "bit " << b << ": FD (free bits) " << fd[bias->offset + b] << ", pass-through " << pass[b];
    pass_norm += pass[b] * pass[b];
  }
  // Both parts matter, so dropping or doubling either fails above.
  EXPECT_GT(std::sqrt(pass_norm), 20 * kFdNoise);
  EXPECT_GT(norm2(fd, bias->offset, H), 20 * kFdNoise);
}

// ---------------------------------------------------------------------------------------------
// KV cache == full recompute

void expect_decode_matches_forward(const ModelConfig& c) {
  const int B = 3, T = 17, V = c.vocab_size;
  Model m(cpu(), c);
  InitConfig init;
  init.std = 0.2f, init.post_sampler_std = 0.5f;
  m.init_weights(21, init);
  const auto tokens = test::random_tokens(size_t(B) * T, V, 22);
  const auto codes = random_codes(size_t(B) * T, std::max(c.latent_bits, 1), 23);
  auto s = m.make_state(B, T);
  (void)m.forward(*s, tokens.data(), nullptr, c.is_free() ? codes.data() : nullptr, 1, 2, 0.0f);
  std::vector<float> full(size_t(B) * T * V);
  m.read_logits(*s, full.data());

  auto d = m.make_decode_state(B, T);
  std::vector<int32_t> tok(B);
  std::vector<uint32_t> z(B);
  std::vector<float> step(size_t(B) * V);
  float worst = 0, spread = 0;
  for (int pos = 0; pos < T; ++pos) {
    for (int b = 0; b < B; ++b) tok[b] = tokens[size_t(b) * T + pos], z[b] = codes[size_t(b) * T + pos];
    m.decode_step(*d, tok.data(), z.data(), pos, step.data());
    for (int b = 0; b < B; ++b)
      for (int v = 0; v < V; ++v) {
        const float ref = full[(size_t(b) * T + pos) * V + v];
        worst = std::max(worst, std::fabs(step[size_t(b) * V + v] - ref));
        spread = std::max(spread, std::fabs(ref - full[(size_t(b) * T) * V + v]));
      }
    EXPECT_LT(worst, kDecodeTol) << "position " << pos;
  }
  EXPECT_GT(spread, 100 * kDecodeTol);  // the logits do depend on the position (a real check)
}

TEST(ModelDecode, KvCacheEqualsFullRecomputeFreeTransformerGqa) {
  expect_decode_matches_forward(small_config(5, 4, 2));
}

TEST(ModelDecode, KvCacheEqualsFullRecomputeBaselineGqa) { expect_decode_matches_forward(small_config(0, 4, 1)); }

// A code at a past position reaches later positions through the cache (keys/values of x + R).
TEST(ModelDecode, PastCodeChangesLaterLogits) {
  ModelConfig c = small_config(3, 4, 2);
  const int V = c.vocab_size;
  Model m(cpu(), c);
  InitConfig init;
  init.post_sampler_std = 0.5f;
  m.init_weights(31, init);
  const auto tokens = test::random_tokens(6, V, 32);
  std::vector<float> a(V), b(V);
  for (uint32_t first : {0u, 5u}) {
    auto d = m.make_decode_state(1, 6);
    for (int pos = 0; pos < 6; ++pos) {
      const uint32_t z = pos == 0 ? first : 1u;
      m.decode_step(*d, &tokens[pos], &z, pos, first == 0 ? a.data() : b.data());
    }
  }
  EXPECT_GT(max_abs_diff(a, b), 100 * kDecodeTol);
}

// ---------------------------------------------------------------------------------------------
// Determinism of the encoder's samples

TEST(ModelForward, SameSeedSameCodesAndLossOtherStreamOtherCodes) {
  const int B = 2, T = 16;
  ModelConfig c = small_config(8, 4, 2);
  Model m(cpu(), c);
  m.init_weights(41, InitConfig{});
  const auto in = test::random_tokens(size_t(B) * T, c.vocab_size, 42);
  const auto tg = test::random_tokens(size_t(B) * T, c.vocab_size, 43);
  auto s = m.make_state(B, T);
  auto run = [&](uint64_t seed, uint64_t stream, StepStats* st) {
    *st = m.forward(*s, in.data(), tg.data(), nullptr, seed, stream, 0.1f);
    std::vector<uint32_t> codes(size_t(B) * T);
    m.read_codes(*s, codes.data());
    return codes;
  };
  StepStats s1, s2, s3, s4;
  const auto c1 = run(1, 100, &s1), c2 = run(1, 100, &s2), c3 = run(1, 101, &s3), c4 = run(2, 100, &s4);
  EXPECT_EQ(c1, c2);
  EXPECT_EQ(s1.loss, s2.loss);  // bit for bit
  EXPECT_EQ(s1.ce, s2.ce);
  EXPECT_EQ(s1.kl, s2.kl);
  // 32 positions of 8 bits: equal codes under another stream or seed would be a 2^-256 accident.
  EXPECT_NE(c1, c3);
  EXPECT_NE(c1, c4);
  EXPECT_NE(s1.ce, s3.ce);
  for (uint32_t z : c1) EXPECT_LT(z, 1u << 8);
}

TEST(ModelForward, GivenCodesAreTheCodesUsed) {
  const int B = 2, T = 7;
  ModelConfig c = small_config(4, 4, 2);
  Model m(cpu(), c);
  m.init_weights(51, InitConfig{});
  const auto in = test::random_tokens(size_t(B) * T, c.vocab_size, 52);
  const auto given = random_codes(size_t(B) * T, 4, 53);
  auto s = m.make_state(B, T);
  (void)m.forward(*s, in.data(), nullptr, given.data(), 1, 1, 0.0f);
  std::vector<uint32_t> got(given.size());
  m.read_codes(*s, got.data());
  EXPECT_EQ(got, given);
}

// ---------------------------------------------------------------------------------------------
// Inference on bf16 weights (Model::create_inference)

// A host arena's GEMM weights rounded to bf16 (per spec; empty for the tensors that stay fp32), and
// the arena with those weights widened back, for an fp32 model that computes the same products.
struct Bf16Weights {
  std::vector<std::vector<uint16_t>> gemm;
  std::vector<float> rounded;
};

Bf16Weights round_gemm_weights(const Model& m, const std::vector<float>& arena) {
  Bf16Weights w{std::vector<std::vector<uint16_t>>(m.specs().size()), arena};
  for (size_t i = 0; i < m.specs().size(); ++i) {
    const ParamSpec& s = m.specs()[i];
    if (!s.gemm_weight) continue;
    for (int64_t j = 0; j < s.numel; ++j) {
      w.gemm[i].push_back(fp32_to_bf16(arena[s.offset + j]));
      w.rounded[s.offset + j] = bf16_to_fp32(w.gemm[i].back());
    }
  }
  return w;
}

// The tensors of `ref`'s layout: GEMM weights from w (bf16), the others from the fp32 arena.
Model::TensorSource bf16_source(const Model& ref, const Bf16Weights& w, const std::vector<float>& arena) {
  return [&ref, &w, &arena](const ParamSpec& s) {
    const ParamSpec* r = find_param(ref.specs(), s.name);
    if (r == nullptr) return WeightRef{};
    const size_t i = size_t(r - ref.specs().data());
    return s.gemm_weight ? bf16_weight(w.gemm[i].data()) : f32_weight(arena.data() + r->offset);
  };
}

// The bf16 model and the fp32 model on the widened weights compute the same products in the same
// fp32 sgemm (one slab at this size), so their logits agree to float rounding of a reordered sum.
constexpr float kSameProductsTol = 1e-5f;
// Against the unrounded fp32 model, as ||bf16 - fp32|| / ||fp32|| over all logits: every weight
// moves by up to 2^-9 relative (bf16's 8-bit mantissa, about 1.1e-3 RMS), and about ten GEMMs in
// series (embedding, 3 blocks, head, the encoder) compound it: measured 7e-3..9e-3 here (logits up
// to 4). 3e-2 bounds that; a weight read with the wrong dtype or from the wrong tensor gives O(1).
constexpr double kBf16RoundingRel = 3e-2;

double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

TEST(ModelInference, Bf16WeightsGiveTheLogitsOfTheirRoundingInFp32) {
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied embeddings" : "own lm_head");
    ModelConfig c = small_config(4, 4, 2);
    c.tie_embeddings = tied;
    const int B = 2, T = 9, V = c.vocab_size;
    Model fp32(cpu(), c), rounded(cpu(), c);
    const std::vector<float> arena = random_params(fp32, 61, 0.2f, 0.5f);
    const Bf16Weights w = round_gemm_weights(fp32, arena);
    fp32.load_params(arena.data());
    rounded.load_params(w.rounded.data());
    auto made = Model::create_inference(cpu(), c, bf16_source(fp32, w, arena));
    ASSERT_TRUE(made.ok()) << made.error().message;
    Model& bf = **made;
    ASSERT_TRUE(bf.inference_only());
    for (size_t i = 0; i < bf.specs().size(); ++i) {  // GEMM weights used where they are; the rest copied
      const ParamSpec& s = bf.specs()[i];
      EXPECT_EQ(s.dtype, s.gemm_weight ? DType::BF16 : DType::F32) << s.name;
      if (s.gemm_weight)
        EXPECT_EQ(bf.tensors()[i].ptr, w.gemm[i].data()) << s.name;
      else
        EXPECT_NE(bf.tensors()[i].ptr, arena.data() + s.offset) << s.name;
    }

    const auto in = test::random_tokens(size_t(B) * T, V, 62);
    const auto codes = random_codes(size_t(B) * T, c.latent_bits, 63);
    auto logits = [&](Model& m) {
      auto st = m.make_state(B, T);
      (void)m.forward(*st, in.data(), nullptr, codes.data(), 1, 2, 0.0f);
      std::vector<float> l(size_t(B) * T * V);
      m.read_logits(*st, l.data());
      return l;
    };
    const std::vector<float> lb = logits(bf), lr = logits(rounded), lf = logits(fp32);
    // The same products need fp32 activations: the AVX512_BF16 path rounds them to bf16 as well
    // (kernels/cpu/gemm_bf16.h; tests/test_gemm_bf16.cpp bounds that), so compare on Generic.
    cpu::set_cpu_isa_for_tests(cpu::CpuIsa::Generic);
    const std::vector<float> lg = logits(bf);
    cpu::reset_cpu_isa_for_tests();
    EXPECT_LT(max_abs_diff(lg, lr), kSameProductsTol);
    EXPECT_LT(rel_l2(lb, lf), kBf16RoundingRel);
    EXPECT_GT(max_abs_diff(lb, lf), kSameProductsTol) << "the bf16 model computed with unrounded weights";

    // Generation on the bf16 weights: decode_step equals the bf16 model's own forward. On Generic
    // (fp32 activations: every engine forms the same products) to fp32 rounding; on this CPU's
    // path, where decode (2 inputs) and the forward (18) may use engines that round the
    // activations to bf16 after sums in another order, within bf16 rounding (an activation on a
    // rounding boundary flips; measured 4e-3 of logits up to 4 on AMX).
    auto decoded = [&] {
      auto d = bf.make_decode_state(B, T);
      std::vector<int32_t> tok(B);
      std::vector<uint32_t> z(B);
      std::vector<float> step(size_t(B) * V), all(size_t(B) * T * V);
      for (int pos = 0; pos < T; ++pos) {
        for (int b = 0; b < B; ++b) tok[b] = in[size_t(b) * T + pos], z[b] = codes[size_t(b) * T + pos];
        bf.decode_step(*d, tok.data(), z.data(), pos, step.data());
        for (int b = 0; b < B; ++b) std::copy_n(step.data() + size_t(b) * V, V, all.data() + (size_t(b) * T + pos) * V);
      }
      return all;
    };
    EXPECT_LT(rel_l2(decoded(), lb), kBf16RoundingRel);
    cpu::set_cpu_isa_for_tests(cpu::CpuIsa::Generic);
    const std::vector<float> dg = decoded();
    cpu::reset_cpu_isa_for_tests();
    EXPECT_LT(max_abs_diff(dg, lg), kDecodeTol);
  }
}

TEST(ModelInference, ATensorNotGivenIsAnError) {
  const ModelConfig c = small_config(0, 4, 2);
  Model ref(cpu(), c);
  const std::vector<float> arena(ref.num_params(), 0.5f);
  auto made = Model::create_inference(cpu(), c, [&](const ParamSpec& s) {
    return s.name == "model.norm.weight" ? WeightRef{} : f32_weight(arena.data() + s.offset);
  });
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.error().message.find("model.norm.weight"), std::string::npos) << made.error().message;
}

// An inference-only model has no gradients and no fp32 arena: asking for them is a bug.
TEST(ModelInference, HasNoGradients) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const ModelConfig c = small_config(0, 4, 2);
  Model ref(cpu(), c);
  const std::vector<float> arena(ref.num_params(), 0.5f);
  auto made =
      Model::create_inference(cpu(), c, [&](const ParamSpec& s) { return f32_weight(arena.data() + s.offset); });
  ASSERT_TRUE(made.ok()) << made.error().message;
  EXPECT_DEATH((void)(*made)->grads(), "no gradients");
  EXPECT_DEATH((void)(*made)->params(), "no fp32 arena");
}

}  // namespace
}  // namespace ftx
