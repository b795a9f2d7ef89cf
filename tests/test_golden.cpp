// Golden test: the C++ model against an independent PyTorch float64 implementation written from
// the method and exact math of docs/design.md section 3 (tests/fixtures/make_golden.py, which documents the fixture).
//
// Fixtures (FTX_FIXTURE_DIR/golden/): free/ and baseline/ are checkpoints in our format (a
// 2-layer Free Transformer, D 16, 4 query heads / 2 KV heads, H = 3 latent bits injected after
// layer 1, and the plain decoder with the same non-free weights); expected.safetensors holds the
// inputs (B = 2, T = 7), targets, the given codes, kappa, and PyTorch's logits, bit probabilities,
// per-position KL, CE / KL / loss, and the gradient of the loss w.r.t. every parameter of both
// models. Integers (inputs, targets, codes) are stored as F32 (exact).
//
// Checked: free-model logits, p, KL, scalars and every gradient (failure messages name the
// tensor); baseline logits, CE and every gradient; the invariant that a Free Transformer whose
// post-sampler is zero computes the baseline's logits (docs/testing.md); gradients
// accumulate across two backward passes; p and KL do not depend on where the codes came from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/io/safetensors.h"
#include "core/model/config.h"
#include "core/model/model.h"
#include "core/model/params.h"
#include "core/text/char_tokenizer.h"
#include "datasets/synthetic.h"
#include "kernels/backend.h"
#include "kernels/cpu/isa.h"

namespace ftx {
namespace {

constexpr int kB = 2;
constexpr int kT = 7;
constexpr int kV = 29;
constexpr int kH = 3;

// Tolerances. The C++ model runs in fp32, the reference in float64 on the same fp32-rounded
// weights and kappa, so what differs is fp32 rounding only: unit roundoff 6e-8, amplified by a
// few dozen dependent ops (two blocks, the encoder, softmax, log, sigmoid) and by sums over at
// most B*T*max(V, F) = 406 terms, which gives errors of order 1e-6 of a tensor's scale.
// Real bugs (a wrong GQA head map, RoPE pairing, a missing norm weight, a dropped gradient
// path) move values by 1e-2 or more. Errors are measured against the tensor's largest |value|
// (elementwise relative error is meaningless for entries that are zero up to cancellation),
// leaving ~100x headroom over rounding and ~100x margin under a bug.
constexpr double kRelTol = 1e-4;        // per tensor: max |got - want| <= kRelTol * max |want|
constexpr double kScalarRelTol = 1e-5;  // ce, kl, loss: reductions of many terms, well conditioned
// At bf16 GEMM inputs each product term moves by up to 2^-8; through a few layers, and with the
// cancellation in attention's gradients, a tensor moves by more against its largest value
// (measured: 0.042 on layer 1's q_proj with fp32 attention products; 0.047 on layer 0's k_proj
// since attention's products round too, the same on both paths). Under twice that is the bound.
constexpr double kBf16RelTol = 8e-2;
// A Free Transformer with a zero post-sampler runs the same fp32 ops on the same values as the
// baseline, except that its injection block normalises x + 0 separately for keys and values:
// equal up to (at most) a few ulps of reordering.
constexpr double kSameOpsRelTol = 1e-6;

std::string golden(const std::string& rel) { return std::string(FTX_FIXTURE_DIR) + "/golden/" + rel; }

// The shape make_golden.py writes; the loaded config.json must say exactly this.
ModelConfig expected_config(bool free) {
  ModelConfig c;
  c.vocab_size = kV;
  c.dim = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.ffn_hidden = 24;
  c.max_seq_len = 16;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 10000.0f;
  c.tie_embeddings = false;
  c.latent_bits = free ? kH : 0;
  c.inject_after = 1;
  return c;
}

// expected.safetensors, opened once per call site (cheap: 58 KB).
class Expected {
 public:
  Expected() {
    auto f = SafetensorsFile::open(golden("expected.safetensors"));
    if (!f.ok()) {
      ADD_FAILURE() << f.error().message;
      return;
    }
    file_ = std::make_unique<SafetensorsFile>(std::move(f.value()));
  }
  bool ok() const { return file_ != nullptr; }
  bool has(const std::string& name) const { return file_ && file_->find(name) != nullptr; }
  std::vector<float> get(const std::string& name) const {
    if (!file_) return {};
    auto r = file_->read_f32(name);
    if (!r.ok()) {
      ADD_FAILURE() << "expected.safetensors: " << r.error().message;
      return {};
    }
    return std::move(r.value());
  }
  double scalar(const std::string& name) const {
    auto v = get(name);
    if (v.size() != 1) {
      ADD_FAILURE() << name << ": expected one value, got " << v.size();
      return NAN;
    }
    return v[0];
  }
  std::vector<int32_t> ints(const std::string& name) const {
    std::vector<int32_t> out;
    for (float x : get(name)) out.push_back(static_cast<int32_t>(std::lround(x)));
    return out;
  }

 private:
  std::unique_ptr<SafetensorsFile> file_;
};

// Compares a tensor against the reference; returns max |got - want| / max |want|.
double expect_close(const std::string& what, const float* got, const std::vector<float>& want, size_t n,
                    double rel_tol) {
  EXPECT_EQ(want.size(), n) << what << ": reference has " << want.size() << " values, model " << n;
  if (want.size() != n || n == 0) return INFINITY;
  double scale = 0, worst = -1;
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(double(want[i])));
  for (size_t i = 0; i < n; ++i) {
    const double e = std::isfinite(got[i]) ? std::fabs(double(got[i]) - double(want[i])) : INFINITY;
    if (e > worst) worst = e, at = i;
  }
  const double denom = std::max(scale, 1e-30);
  const double rel = worst / denom;
  EXPECT_LE(rel, rel_tol) << what << ": max |C++ - PyTorch| = " << worst << " at flat index " << at << " (C++ "
                          << got[at] << ", PyTorch " << want[at] << "), max |PyTorch| = " << scale
                          << ", normalised error " << rel << " > " << rel_tol;
  return rel;
}

void expect_scalar(const std::string& what, double got, double want, double rel_tol) {
  EXPECT_LE(std::fabs(got - want), rel_tol * std::max(1.0, std::fabs(want)))
      << what << ": C++ " << got << ", PyTorch " << want;
}

struct Loaded {
  ModelConfig config;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::vector<float> params;
};

Loaded load(const std::string& which) {
  auto r = load_checkpoint(golden(which), /*with_training_state=*/false);
  if (!r.ok()) {
    ADD_FAILURE() << "load_checkpoint(" << which << "): " << r.error().message;
    return {};
  }
  return Loaded{r.value().config, r.value().tokenizer, r.value().params};
}

// One model with the golden inputs, run forward (and backward) on demand.
struct GoldenRun {
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::unique_ptr<Model> model;
  std::unique_ptr<ModelState> state;
  StepStats stats;

  GoldenRun(const ModelConfig& cfg, const std::vector<float>& params,
            MatmulPrecision precision = MatmulPrecision::Fp32) {
    EXPECT_TRUE(be->set_matmul_precision(precision).ok());
    model = std::make_unique<Model>(*be, cfg);
    EXPECT_EQ(static_cast<int64_t>(params.size()), model->num_params());
    if (static_cast<int64_t>(params.size()) == model->num_params()) model->load_params(params.data());
    state = model->make_state(kB, kT);
  }
  void forward(const Expected& e, bool given_codes = true) {
    const auto inputs = e.ints("inputs"), targets = e.ints("targets"), codes_i = e.ints("codes");
    std::vector<uint32_t> codes(codes_i.begin(), codes_i.end());
    const bool free = model->config().is_free();
    // The PyTorch reference applies the free bits per (sequence, position) pair: the batch-mean form
    // is checked against finite differences in float64 (test_binary_mapper, test_model).
    stats = model->forward(*state, inputs.data(), targets.data(), free && given_codes ? codes.data() : nullptr,
                           /*seed=*/0, /*stream=*/0, static_cast<float>(e.scalar("kappa")), FreeBitsForm::PerPair);
  }
  std::vector<float> grads() {
    std::vector<float> g(model->num_params());
    be->download(g.data(), model->grads(), g.size() * sizeof(float));
    return g;
  }
  // The gradients of the last forward alone: zero_grad, then backward.
  std::vector<float> fresh_grads() {
    model->zero_grad();
    model->backward(*state);
    return grads();
  }
  std::vector<float> logits() {
    std::vector<float> v(size_t{kB} * kT * kV);
    model->read_logits(*state, v.data());
    return v;
  }
};

// The golden checkpoint `which` ("free" or "baseline") run forward on the golden inputs; nullptr
// after a failure when it does not load as that kind of model.
std::unique_ptr<GoldenRun> run_golden(const std::string& which, const Expected& e,
                                      MatmulPrecision precision = MatmulPrecision::Fp32) {
  const Loaded l = load(which);
  if (l.config.is_free() != (which == "free")) {
    ADD_FAILURE() << which << ": loaded with is_free() = " << l.config.is_free();
    return nullptr;
  }
  auto run = std::make_unique<GoldenRun>(l.config, l.params, precision);
  run->forward(e);
  return run;
}

// Every gradient tensor against "<prefix>grad.<name>"; returns the worst normalised error.
double expect_grads(const std::string& prefix, const Model& m, const std::vector<float>& g, const Expected& e,
                    double rel_tol = kRelTol) {
  double worst = 0;
  std::string worst_name;
  for (const ParamSpec& s : m.specs()) {
    const std::string key = prefix + "grad." + s.name;
    if (!e.has(key)) {
      ADD_FAILURE() << key << ": missing from expected.safetensors";
      continue;
    }
    const double r = expect_close(prefix + "gradient of " + s.name, g.data() + s.offset, e.get(key),
                                  static_cast<size_t>(s.numel), rel_tol);
    if (r > worst) worst = r, worst_name = s.name;
  }
  std::printf("[%sgrad] %zu tensors, worst normalised error %.3g (%s)\n", prefix.c_str(), m.specs().size(), worst,
              worst_name.c_str());
  return worst;
}

TEST(Golden, CheckpointsLoadWithTheExpectedShape) {
  for (bool free : {true, false}) {
    const Loaded l = load(free ? "free" : "baseline");
    const ModelConfig want = expected_config(free);
    const ModelConfig& c = l.config;
    SCOPED_TRACE(free ? "free" : "baseline");
    EXPECT_EQ(c.vocab_size, want.vocab_size);
    EXPECT_EQ(c.dim, want.dim);
    EXPECT_EQ(c.n_layers, want.n_layers);
    EXPECT_EQ(c.n_heads, want.n_heads);
    EXPECT_EQ(c.n_kv_heads, want.n_kv_heads);
    EXPECT_EQ(c.head_dim, want.head_dim);
    EXPECT_EQ(c.ffn_hidden, want.ffn_hidden);
    EXPECT_EQ(c.max_seq_len, want.max_seq_len);
    EXPECT_EQ(c.rms_norm_eps, want.rms_norm_eps);
    EXPECT_EQ(c.rope_theta, want.rope_theta);
    EXPECT_EQ(c.tie_embeddings, want.tie_embeddings);
    EXPECT_EQ(c.latent_bits, want.latent_bits);
    if (free) {
      EXPECT_EQ(c.inject_after, want.inject_after);
    }
    EXPECT_EQ(c.readout_bias, false);
    // config.json's "tokenizer" in the form written since the first checkpoints.
    ASSERT_TRUE(l.tokenizer);
    EXPECT_EQ(l.tokenizer->type(), "chars");
    EXPECT_EQ(l.tokenizer->fingerprint(), CharTokenizer(kSyntheticAlphabet).fingerprint());
    EXPECT_EQ(static_cast<int64_t>(l.params.size()), param_count(param_specs(want)));
  }
}

TEST(Golden, FreeTransformerForwardMatchesPyTorch) {
  const Expected e;
  ASSERT_TRUE(e.ok());
  const auto run = run_golden("free", e);
  ASSERT_NE(run, nullptr);

  std::vector<uint32_t> codes(kB * kT);
  run->model->read_codes(*run->state, codes.data());
  const auto want_codes = e.ints("codes");
  for (int i = 0; i < kB * kT; ++i) EXPECT_EQ(codes[i], static_cast<uint32_t>(want_codes[i])) << "code " << i;

  const auto logits = run->logits();
  std::vector<float> p(kB * kT * kH), kl(kB * kT);
  run->model->read_bit_probs(*run->state, p.data());
  run->model->read_kl(*run->state, kl.data());
  const double rl = expect_close("free logits", logits.data(), e.get("free.logits"), logits.size(), kRelTol);
  const double rp = expect_close("free bit probabilities p", p.data(), e.get("free.p"), p.size(), kRelTol);
  const double rk = expect_close("free KL per position", kl.data(), e.get("free.kl"), kl.size(), kRelTol);
  std::printf("[free forward] normalised errors: logits %.3g, p %.3g, kl %.3g\n", rl, rp, rk);

  expect_scalar("free ce", run->stats.ce, e.scalar("free.ce"), kScalarRelTol);
  expect_scalar("free kl (mean KL_t)", run->stats.kl, e.scalar("free.kl_mean"), kScalarRelTol);
  expect_scalar("free kl_excess (mean max(0, KL_t - kappa))", run->stats.kl_excess, e.scalar("free.kl_excess"),
                kScalarRelTol);
  expect_scalar("free loss", run->stats.loss, e.scalar("free.loss"), kScalarRelTol);
  std::printf("[free forward] ce %.7f (PyTorch %.7f), loss %.7f (PyTorch %.7f)\n", run->stats.ce, e.scalar("free.ce"),
              run->stats.loss, e.scalar("free.loss"));

  // The fixture's kappa splits the positions: both sides of max(0, KL - kappa) are exercised.
  const double kappa = e.scalar("kappa");
  int above = 0;
  for (float v : e.get("free.kl")) above += v > kappa;
  EXPECT_GT(above, 0);
  EXPECT_LT(above, kB * kT);
}

TEST(Golden, FreeTransformerGradientsMatchPyTorch) {
  const Expected e;
  ASSERT_TRUE(e.ok());
  const auto run = run_golden("free", e);
  ASSERT_NE(run, nullptr);
  expect_grads("free.", *run->model, run->fresh_grads(), e);
}

// At --precision bf16 on the CPU (every GEMM's inputs rounded to bf16, fp32 sums) the gradients
// stay within bf16's reach of PyTorch's fp32 ones, on each path this CPU runs. The bound is
// bf16's, not a bug's margin: a bug that moves a tensor by less than it is caught at fp32 above.
TEST(Golden, FreeTransformerGradientsAtBf16StayWithinBf16OfPyTorch) {
  const Expected e;
  ASSERT_TRUE(e.ok());
  for (const cpu::CpuIsa isa : {cpu::CpuIsa::Generic, cpu::CpuIsa::Amx}) {
    if (!cpu::cpu_isa_supported(isa)) continue;
    cpu::set_cpu_isa_for_tests(isa);
    const auto run = run_golden("free", e, MatmulPrecision::Bf16);
    ASSERT_NE(run, nullptr);
    const std::vector<float> g = run->fresh_grads();
    cpu::reset_cpu_isa_for_tests();
    std::printf("[ bf16 ] %s:\n", cpu::cpu_isa_name(isa));
    const double worst = expect_grads("free.", *run->model, g, e, kBf16RelTol);
    EXPECT_GT(worst, kRelTol) << "no further from fp32 than fp32 rounding: the GEMMs did not round";
  }
}

TEST(Golden, BaselineMatchesPyTorch) {
  const Expected e;
  ASSERT_TRUE(e.ok());
  const auto run = run_golden("baseline", e);
  ASSERT_NE(run, nullptr);
  const auto logits = run->logits();
  const double rl = expect_close("baseline logits", logits.data(), e.get("baseline.logits"), logits.size(), kRelTol);
  std::printf("[baseline forward] normalised error: logits %.3g\n", rl);
  expect_scalar("baseline ce", run->stats.ce, e.scalar("baseline.ce"), kScalarRelTol);
  expect_scalar("baseline loss (= ce)", run->stats.loss, e.scalar("baseline.ce"), kScalarRelTol);
  EXPECT_EQ(run->stats.kl, 0.0);
  expect_grads("baseline.", *run->model, run->fresh_grads(), e);
}

TEST(Golden, ZeroPostSamplerGivesTheBaselineLogits) {
  const Expected e;
  ASSERT_TRUE(e.ok());
  Loaded f = load("free");
  const Loaded b = load("baseline");
  ASSERT_TRUE(f.config.is_free());
  const std::vector<ParamSpec> specs = param_specs(f.config);
  const ParamSpec* ps = find_param(specs, "free.post_sampler.weight");
  ASSERT_NE(ps, nullptr);
  ASSERT_EQ(f.params.size(), static_cast<size_t>(param_count(specs)));
  std::fill(f.params.begin() + ps->offset, f.params.begin() + ps->offset + ps->numel, 0.0f);

  GoldenRun free_run(f.config, f.params), base_run(b.config, b.params);
  free_run.forward(e);
  base_run.forward(e);
  const auto lf = free_run.logits(), lb = base_run.logits();
  expect_close("zero-post-sampler FT logits vs C++ baseline logits", lf.data(), lb, lf.size(), kSameOpsRelTol);
  expect_close("zero-post-sampler FT logits vs PyTorch baseline logits", lf.data(), e.get("baseline.logits"), lf.size(),
               kRelTol);
  expect_scalar("zero-post-sampler FT ce vs baseline ce", free_run.stats.ce, base_run.stats.ce, kSameOpsRelTol);
}

TEST(Golden, GradientsAccumulateAndRepeatedForwardIsStable) {
  const Expected e;
  ASSERT_TRUE(e.ok());
  const auto run = run_golden("free", e);
  ASSERT_NE(run, nullptr);
  const auto g1 = run->fresh_grads();
  const double loss1 = run->stats.loss;
  // A second forward on the same state must not see stale activations or scratch.
  run->forward(e);
  expect_scalar("loss of a repeated forward", run->stats.loss, loss1, kSameOpsRelTol);
  run->model->backward(*run->state);
  const auto g2 = run->grads();
  std::vector<float> twice(g1.size());
  for (size_t i = 0; i < g1.size(); ++i) twice[i] = 2.0f * g1[i];
  for (const ParamSpec& s : run->model->specs())
    expect_close("second backward accumulates into " + s.name, g2.data() + s.offset,
                 std::vector<float>(twice.begin() + s.offset, twice.begin() + s.offset + s.numel),
                 static_cast<size_t>(s.numel), kSameOpsRelTol);
}

TEST(Golden, BitProbabilitiesAndKlDoNotDependOnWhereCodesComeFrom) {
  // p and KL come from the encoder, which reads X only: sampling Z instead of taking the given
  // codes changes the logits but not p, KL or the KL part of the loss.
  const Expected e;
  ASSERT_TRUE(e.ok());
  const Loaded l = load("free");
  GoldenRun run(l.config, l.params);
  run.forward(e, /*given_codes=*/false);
  std::vector<float> p(kB * kT * kH), kl(kB * kT);
  run.model->read_bit_probs(*run.state, p.data());
  run.model->read_kl(*run.state, kl.data());
  expect_close("p with sampled codes", p.data(), e.get("free.p"), p.size(), kRelTol);
  expect_close("KL with sampled codes", kl.data(), e.get("free.kl"), kl.size(), kRelTol);
  expect_scalar("kl_excess with sampled codes", run.stats.kl_excess, e.scalar("free.kl_excess"), kScalarRelTol);
  std::vector<uint32_t> codes(kB * kT);
  run.model->read_codes(*run.state, codes.data());
  for (uint32_t c : codes) EXPECT_LT(c, 1u << kH);
}

}  // namespace
}  // namespace ftx
