// The CUDA backend against the CPU backend, op by op (kernels/backend.h): the same host inputs are
// uploaded to both, every output is downloaded and compared by relative L2 error with a limit per
// op. Covers every Backend op: memory (alloc, try_alloc, upload, download, copy, fill), add,
// add_inplace, scale, sum_squares, broadcast_rows, sum_rows, embedding (fp32 and bf16 tables),
// RMSNorm, matmul (all the accumulate / null-pointer variants, fp32 and bf16 weights), RoPE, attention (causal,
// non-causal, decode with a KV cache, GQA, T = 1 with odd HS, T = 1024), SwiGLU, cross-entropy (in place, V = 29 and
// 50257), the binary mapper (codes identical for the same Philox seed and stream), the post-sampler, the KL with free
// bits and AdamW, on awkward shapes (T = 1, odd widths, H = 1 and H = 16). Every output buffer
// carries guard words after its last element: an op that writes past its output fails. NaN and Inf
// in the inputs of a few elementwise ops must come out at exactly the same places on both. Last,
// an end-to-end check: the tiny preset trained for 50 steps from the same seed on both backends
// gives the same loss curve within TF32 rounding, and within bf16 rounding at MatmulPrecision::Bf16.
// Also: GEMMs at fp32 and bf16 (with and without the bf16 copy of tracked weights, which must
// follow every write), and step graphs: ops recorded once and replayed with new scalars, recorded
// again when the step changes, and a whole training run replayed against the same GPU op by op.
//
// Without a GPU (or in a build without kernels/cuda) make_cuda_backend returns an error and every test
// is skipped with its reason. test_backend_ops_emu compiles this file against the CPU emulation of
// the CUDA backend (tests/cuda_emu), where every test runs, with a shorter training curve and
// without the T = 1024 attention: what it checks there is the CudaBackend class and these tests. The CPU backend is the
// reference: test_cpu_backend.cpp checks it against the double templates, test_ops_grad.cpp those by finite
// differences. Not here: the saved attention buffers (probabilities on the CPU, log-sum-exp on CUDA: they differ by
// design and are only checked for writes past their end), speed (ftx bench).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/model/config.h"
#include "core/train/train_config.h"
#include "core/train/trainer.h"
#include "datasets/registry.h"
#include "kernels/backend.h"
#include "kernels/base/philox.h"
#include "kernels/cpu/ops_rope.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

// ---- limits ---------------------------------------------------------------------------------------
// All limits are on the relative L2 error ||cuda - cpu|| / ||cpu|| over a whole output (the plain
// L2 norm of the difference when the CPU's output is all zero). A wrong index, a lost term or a
// missed accumulation gives errors of order 0.1 to 1, far above every limit here.

// Copies, gathers, fills and single IEEE operations (a + b, a * s): no rounding freedom at all.
constexpr double kExact = 0.0;
// One or a few roundings per element, and expf/logf on the GPU against the CPU's polynomial exp or
// double: each element is within a few ulp (6e-8 each), so the L2 error sits near 1e-7.
constexpr double kElementwise = 1e-6;
// Sums over tens to thousands of terms (RMSNorm, softmax, scatter-adds by atomics, column sums) in
// another order than the CPU's: about sqrt(terms) * 6e-8, i.e. 1e-7..3e-6 at these sizes.
constexpr double kReduction = 1e-5;
// sum_squares returns a double accumulated in double (or float partials summed in double): the
// only rounding is that of the partials.
constexpr double kSumSquares = 1e-6;
// RoPE: the CPU builds cos/sin in double; a GPU that forms the angle pos * inv_freq in float loses
// up to pos * 6e-8 rad, about 7e-6 at the positions used here (< 120). A swapped pair or sign is O(1).
constexpr double kRope = 1e-5;
// The CUDA GEMMs run on tensor cores in TF32 (10-bit mantissa, unit roundoff 2^-11 = 4.9e-4):
// every input is rounded to TF32 before an fp32-accumulated product. Simulated on the CPU (inputs
// rounded to TF32, then the CPU GEMM) on these shapes: 2.6e-4 with round-to-nearest, 7e-4 with
// truncation, and up to 1.2e-3 for IC = 1 (a single product, two truncations: at most 2^-9 = 2e-3
// per element). So ~1e-3, and 3e-3 keeps the worst case inside while staying 30x below what a
// wrong index or a lost term gives.
constexpr double kTf32 = 3e-3;
// binary_mapper_backward: dG = dR @ W is a TF32 GEMM, then dlogits = S_h - p * S subtracts two
// weighted sums of dG, which can cancel a little (the simulated TF32 error was 2e-4..7e-4, like a
// plain GEMM's): kTf32 with headroom for a reduction in float instead of the CPU's double.
constexpr double kMapperTf32 = 5e-3;
// MatmulPrecision::Fp32 on CUDA: no tensor cores, fp32 products summed in another order than the
// CPU's: a reduction's error.
constexpr double kFp32Gemm = kReduction;
// bf16 GEMM inputs (8-bit mantissa, unit roundoff 2^-9 = 2e-3): each input rounded to nearest,
// so a product is off by about 2e-3 / sqrt(3) * sqrt(2) = 1.6e-3 RMS, and a sum of many random
// products keeps that relative size. 1e-2 bounds it with room; a stale bf16 copy of a weight
// (an update the mirror missed) or a wrong offset into the mirror gives O(1).
constexpr double kBf16 = 1e-2;
// The binary mapper's backward at bf16: kBf16 with the same cancellation headroom as kMapperTf32.
constexpr double kMapperBf16 = 2e-2;
// Attention is a flash-style fp32 kernel (not a cuBLAS GEMM): out sums up to 1024 probability-
// weighted rows, the backward recomputes the probabilities from the log-sum-exp and forms
// dS = P * (dP - <dout, out>) instead of the CPU's stored P: about 1e-6..1e-5. This limit assumes
// fp32 FMAs; a TF32 tensor-core attention would need kTf32 here.
constexpr double kAttention = 1e-4;
// At bf16 the attention products run on tensor cores with bf16 operands (Q, K, V, P, dO, dS):
// a CPU emulation of the kernels gave 2.5e-3..5.6e-3 (max error over max value) on these shapes;
// a dropped mask or a wrong operand gave 0.1..1.7.
constexpr double kAttentionBf16 = 2e-2;
// AdamW over several steps: param, m and v are compared elementwise (kElementwise), and the update
// param - param0 on its own, since it is only ~5e-2 of |param| here and would hide in param. Each
// step rounds param to float (an ulp, 6e-8 of |param|, is ~1e-6 of the update), five steps plus
// sqrt and division differences stay near 5e-6; a wrong bias correction or decay is O(1e-1).
constexpr double kAdamDelta = 1e-4;
// End to end: 50 steps of the tiny preset. The TF32 GEMMs perturb every step at the 1e-3 level,
// the perturbations compound through the optimizer, and a p that moves by an ulp can flip a
// sampled latent bit; the per-step loss (3.44 down to about 1.0 nats) must still agree to 2 %.
// With TF32 simulated on the CPU the worst step differed by 7e-4 (truncation), so 2e-2 leaves
// room for the GPU's other reorderings; a wrong op gives diverging curves well beyond that (an
// embedding backward that overwrites instead of accumulating, or a flipped causal mask, fail it).
constexpr double kTrainLossRel = 2e-2;
// Step graphs against op by op on the same GPU: identical kernels, only float atomics reorder.
constexpr double kGraphLossRel = 2e-3;
// bf16 GEMMs perturb every step about 4x more than TF32 (8-bit against 10-bit mantissas).
constexpr double kTrainLossRelBf16 = 5e-2;
// Step 1 has the same weights and data on both: only one forward in TF32 separates them.
constexpr double kFirstLossRel = 1e-3;
// The CPU curve must fall by at least this much over the 50 steps, so that the comparison is of
// two learning curves and not of two flat lines (the first steps learn the character frequencies).
constexpr double kMinLossDrop = 1.0;  // nats (the CPU goes from 3.44 to about 1.0)

constexpr size_t kGuard = 16;                                    // guard words after every buffer
constexpr uint32_t kGuardWord = 0xDEADBEEFu;                     // a finite float no op writes by chance
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();  // outputs that must be written
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- backends -------------------------------------------------------------------------------------

Backend& cpu() {
  static std::unique_ptr<Backend> be = make_cpu_backend();
  return *be;
}

struct CudaHandle {
  std::unique_ptr<Backend> be;
  std::string why;
};

// The CUDA backend on GPU 0, created once for the whole file; null with the reason when absent.
const CudaHandle& cuda_handle() {
  static const CudaHandle h = [] {
    CudaHandle c;
    auto made = make_cuda_backend(0);
    if (made)
      c.be = std::move(*made);
    else
      c.why = made.error().message;
    return c;
  }();
  return h;
}

class BackendOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_handle().be) GTEST_SKIP() << "no CUDA backend: " << cuda_handle().why;
  }
  static Backend& gpu() { return *cuda_handle().be; }
};

// ---- buffers --------------------------------------------------------------------------------------

// n elements of 4 bytes on `be`, followed by kGuard guard words; contents uploaded from the host.
template <class T>
class DevBuf {
  static_assert(sizeof(T) == sizeof(uint32_t), "guard words are 4 bytes");

 public:
  DevBuf(Backend& be, const std::vector<T>& host) : be_(be), n_(host.size()) {
    p_ = static_cast<T*>(be_.alloc((n_ + kGuard) * sizeof(T)));
    if (n_ > 0) be_.upload(p_, host.data(), n_ * sizeof(T));
    const std::vector<uint32_t> guard(kGuard, kGuardWord);
    be_.upload(p_ + n_, guard.data(), kGuard * sizeof(uint32_t));
  }
  DevBuf(Backend& be, size_t n, T value) : DevBuf(be, std::vector<T>(n, value)) {}
  ~DevBuf() { be_.release(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }
  Backend& backend() const { return be_; }
  std::vector<T> to_host() const {
    be_.synchronize();
    std::vector<T> h(n_);
    if (n_ > 0) be_.download(h.data(), p_, n_ * sizeof(T));
    return h;
  }
  bool guard_intact() const {
    be_.synchronize();
    std::vector<uint32_t> g(kGuard);
    be_.download(g.data(), p_ + n_, kGuard * sizeof(uint32_t));
    return std::all_of(g.begin(), g.end(), [](uint32_t w) { return w == kGuardWord; });
  }

 private:
  Backend& be_;
  size_t n_;
  T* p_ = nullptr;
};

// The buffer's contents, after checking that nothing was written past its end.
template <class T>
std::vector<T> take(const DevBuf<T>& b, const std::string& what) {
  EXPECT_TRUE(b.guard_intact()) << what << " on " << b.backend().name() << ": written past its " << b.size()
                                << " elements";
  return b.to_host();
}

// Named outputs of one op run on one backend.
using Outs = std::map<std::string, std::vector<float>>;

// n floats uniform in [lo, hi).
std::vector<float> rnd(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  const std::vector<double> d = test::random_vec(n, seed, lo, hi);
  return std::vector<float>(d.begin(), d.end());
}

// ||got - ref|| / ||ref|| (||got - ref|| when ref is all zero); infinite when the sizes differ or
// either holds a NaN or an Inf.
double rel_error(const std::vector<float>& ref, const std::vector<float>& got) {
  if (ref.size() != got.size()) return std::numeric_limits<double>::infinity();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i]) || !std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Where got and ref differ most (for the failure message).
std::string worst_element(const std::vector<float>& ref, const std::vector<float>& got) {
  if (ref.size() != got.size()) return "sizes " + std::to_string(ref.size()) + " vs " + std::to_string(got.size());
  size_t worst = 0;
  double wd = -1.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = std::abs(double(got[i]) - double(ref[i]));
    if (!(d == d)) d = std::numeric_limits<double>::infinity();  // NaN counts as worst
    if (d > wd) wd = d, worst = i;
  }
  if (ref.empty()) return "empty";
  std::ostringstream s;
  s.precision(9);
  s << "worst at [" << worst << "]: cpu " << ref[worst] << ", cuda " << got[worst];
  return s.str();
}

void expect_close(const Outs& ref, const Outs& got, const std::string& key, double limit) {
  const auto r = ref.find(key), g = got.find(key);
  ASSERT_NE(r, ref.end()) << key << " missing from the CPU run";
  ASSERT_NE(g, got.end()) << key << " missing from the CUDA run";
  const double e = rel_error(r->second, g->second);
  EXPECT_LE(e, limit) << key << ": relative L2 error CUDA vs CPU; " << worst_element(r->second, g->second);
}

// Runs f (Backend& -> Outs) on the CPU, then on CUDA.
template <class F>
std::pair<Outs, Outs> on_both(Backend& gpu, F&& f) {
  Outs c = f(cpu());
  Outs g = f(gpu);
  return {std::move(c), std::move(g)};
}

// Sets the CUDA backend's GEMM precision for one test and restores the default (TF32) after it.
class PrecisionScope {
 public:
  PrecisionScope(Backend& be, MatmulPrecision p) : be_(be) {
    const Status st = be_.set_matmul_precision(p);
    ok_ = st.ok();
    EXPECT_TRUE(ok_) << st.error().message;
  }
  ~PrecisionScope() {
    be_.track_weights(nullptr, 0);
    const Status st = be_.set_matmul_precision(MatmulPrecision::Tf32);
    EXPECT_TRUE(st.ok()) << st.error().message;
  }

 private:
  Backend& be_;
  bool ok_ = false;
};

// NaN where the CPU has NaN, Inf of the same sign where it has Inf, and the finite rest within
// `limit`. The inputs were built to produce some non-finite outputs: there must be some.
void expect_same_nonfinite(const std::vector<float>& ref, const std::vector<float>& got, const std::string& what,
                           double limit) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  size_t nonfinite = 0, mismatched = 0;
  std::vector<float> rf, gf;
  for (size_t i = 0; i < ref.size(); ++i) {
    const bool rn = std::isnan(ref[i]), gn = std::isnan(got[i]);
    const bool ri = std::isinf(ref[i]), gi = std::isinf(got[i]);
    nonfinite += rn || ri;
    if (rn != gn || ri != gi || (ri && std::signbit(ref[i]) != std::signbit(got[i]))) {
      if (++mismatched <= 5) ADD_FAILURE() << what << "[" << i << "]: cpu " << ref[i] << ", cuda " << got[i];
    } else if (!rn && !ri) {
      rf.push_back(ref[i]);
      gf.push_back(got[i]);
    }
  }
  EXPECT_EQ(mismatched, 0u) << what << ": elements where NaN/Inf disagree";
  EXPECT_GT(nonfinite, 0u) << what << ": the test meant the CPU to produce NaN or Inf here";
  EXPECT_LE(rel_error(rf, gf), limit) << what << " (finite elements)";
}

AttnShape attn_shape(int B, int NH, int NKV, int HS, int Tq, int Tk, int Tk_cap, int q_pos0, bool causal) {
  AttnShape s;
  s.B = B, s.NH = NH, s.NKV = NKV, s.HS = HS;
  s.Tq = Tq, s.Tk = Tk, s.Tk_cap = Tk_cap, s.q_pos0 = q_pos0, s.causal = causal;
  return s;
}

// ---- memory ---------------------------------------------------------------------------------------

TEST_F(BackendOps, AllocIsZeroedAndTryAllocFailsCleanly) {
  for (size_t bytes : {size_t(4), size_t(1000), size_t(4) << 20}) {
    void* p = gpu().alloc(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    std::vector<unsigned char> h(bytes, 0xAB);
    gpu().download(h.data(), p, bytes);
    EXPECT_EQ(size_t(std::count(h.begin(), h.end(), 0)), bytes) << bytes << " bytes not zero-filled";
    gpu().release(p);
  }
  for (const size_t huge : {std::numeric_limits<size_t>::max() / 2, std::numeric_limits<size_t>::max() - 10}) {
    auto refused = gpu().try_alloc(huge);  // the second overflows when rounded up
    ASSERT_FALSE(refused.ok()) << huge;
    EXPECT_NE(refused.error().message.find(gpu().name()), std::string::npos) << refused.error().message;
    EXPECT_NE(refused.error().message.find(std::to_string(huge) + " bytes"), std::string::npos)
        << refused.error().message;
  }
  auto ok = gpu().try_alloc(1000);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_NE(*ok, nullptr);
  gpu().release(*ok);
  gpu().release(nullptr);
}

TEST_F(BackendOps, UploadCopyFillDownloadRoundTrip) {
  for (size_t n : {size_t(1), size_t(7), size_t(100003)}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const std::vector<float> host = rnd(n, 10 + n);
    DevBuf<float> a(gpu(), host), b(gpu(), n, kNaN), c(gpu(), n, kNaN);
    EXPECT_EQ(take(a, "a"), host);  // upload, download
    gpu().copy(b.get(), a.get(), n * sizeof(float));
    EXPECT_EQ(take(b, "copy"), host);
    gpu().fill(c.get(), 0.25f, n);
    EXPECT_EQ(take(c, "fill"), std::vector<float>(n, 0.25f));
    if (n >= 3) {  // into the middle of a buffer: neighbours untouched
      gpu().copy(c.get() + 1, a.get(), (n - 2) * sizeof(float));
      gpu().fill(b.get() + 1, -3.0f, n - 2);
      std::vector<float> expect_c(n, 0.25f), expect_b = host;
      for (size_t i = 1; i + 1 < n; ++i) expect_c[i] = host[i - 1], expect_b[i] = -3.0f;
      EXPECT_EQ(take(c, "copy into the middle"), expect_c);
      EXPECT_EQ(take(b, "fill of the middle"), expect_b);
    }
  }
  // Integer payloads travel bit for bit.
  const std::vector<uint32_t> bits = {0u, 1u, 0x7FC00001u, 0xFFFFFFFFu, 0x80000000u};
  DevBuf<uint32_t> u(gpu(), bits);
  EXPECT_EQ(take(u, "uint32"), bits);
}

// ---- elementwise and reductions -------------------------------------------------------------------

TEST_F(BackendOps, AddAddInplaceScale) {
  for (size_t n : {size_t(1), size_t(7), size_t(100003)}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const std::vector<float> a = rnd(n, 20), b = rnd(n, 21, -5, 5);
    auto [c, g] = on_both(gpu(), [&](Backend& be) {
      DevBuf<float> da(be, a), db(be, b), out(be, n, kNaN), acc(be, b), sc(be, a);
      be.add(out.get(), da.get(), db.get(), n);
      be.add_inplace(acc.get(), da.get(), n);
      be.scale(sc.get(), -1.7f, n);
      return Outs{{"add", take(out, "add")}, {"add_inplace", take(acc, "add_inplace")}, {"scale", take(sc, "scale")}};
    });
    expect_close(c, g, "add", kExact);
    expect_close(c, g, "add_inplace", kExact);
    expect_close(c, g, "scale", kExact);
  }
}

TEST_F(BackendOps, SumSquares) {
  for (size_t n : {size_t(1), size_t(7), size_t(1000003)}) {
    const std::vector<float> x = rnd(n, 30 + n, -3, 3);
    DevBuf<float> dc(cpu(), x), dg(gpu(), x);
    const double ref = cpu().sum_squares(dc.get(), n), got = gpu().sum_squares(dg.get(), n);
    EXPECT_LE(std::abs(got - ref), kSumSquares * ref) << "n = " << n << ": cpu " << ref << ", cuda " << got;
  }
  DevBuf<float> empty(gpu(), 4, 1.0f);
  EXPECT_EQ(gpu().sum_squares(empty.get(), 0), 0.0);
}

// The KV cache append: B rows into a (B, max_len, KD) cache at one position.
TEST_F(BackendOps, CopyRowsIntoAStridedCache) {
  const int B = 5, max_len = 9, KD = 12, pos = 7;
  const std::vector<float> rows = rnd(size_t(B) * KD, 50), cache0 = rnd(size_t(B) * max_len * KD, 51);
  auto [c, g] = on_both(gpu(), [&](Backend& be) {
    DevBuf<float> src(be, rows), cache(be, cache0);
    be.copy_rows(cache.get() + size_t(pos) * KD, size_t(max_len) * KD * sizeof(float), src.get(), KD * sizeof(float),
                 KD * sizeof(float), B);
    return Outs{{"cache", take(cache, "cache")}};
  });
  expect_close(c, g, "cache", kExact);
}

// The norm stays on the device; clipping happens there too (no host round trip in a step graph).
TEST_F(BackendOps, ClipGradNorm) {
  for (size_t n : {size_t(1), size_t(1000003)}) {
    const std::vector<float> g0 = rnd(n, 40 + n, -3, 3);
    for (const float limit : {0.0f, 1e9f, 0.5f}) {
      auto [c, g] = on_both(gpu(), [&](Backend& be) {
        DevBuf<float> grad(be, g0), norm(be, 1, kNaN);
        be.clip_grad_norm(grad.get(), n, limit, norm.get());
        return Outs{{"grad", take(grad, "grad")}, {"norm", take(norm, "norm")}};
      });
      expect_close(c, g, "norm", kSumSquares);
      expect_close(c, g, "grad", kSumSquares);
    }
  }
}

TEST_F(BackendOps, BroadcastRowsAndSumRows) {
  const std::pair<int, int> shapes[] = {{1, 1}, {1000, 70}, {3, 4099}, {257, 1}};
  for (auto [N, C] : shapes) {
    SCOPED_TRACE("N = " + std::to_string(N) + ", C = " + std::to_string(C));
    const std::vector<float> row = rnd(C, 40), dout = rnd(size_t(N) * C, 41), dv0 = rnd(C, 42);
    auto [c, g] = on_both(gpu(), [&](Backend& be) {
      DevBuf<float> v(be, row), out(be, size_t(N) * C, kNaN), d(be, dout), dv(be, dv0);
      be.broadcast_rows(out.get(), v.get(), N, C);
      be.sum_rows(dv.get(), d.get(), N, C);  // accumulates
      return Outs{{"broadcast", take(out, "broadcast_rows")}, {"sum_rows", take(dv, "sum_rows")}};
    });
    expect_close(c, g, "broadcast", kExact);
    expect_close(c, g, "sum_rows", kReduction);
  }
}

// ---- embedding ------------------------------------------------------------------------------------

TEST_F(BackendOps, EmbeddingForwardAndScatterAddBackward) {
  struct Shape {
    int V, N, C;
  };
  for (Shape sh : {Shape{29, 500, 130}, Shape{3, 1, 7}, Shape{50, 4096, 64}}) {
    const auto [V, N, C] = sh;
    SCOPED_TRACE("V = " + std::to_string(V) + ", N = " + std::to_string(N) + ", C = " + std::to_string(C));
    std::vector<int32_t> tok(N);  // every token repeats: the scatter-adds collide
    for (int n = 0; n < N; ++n) tok[n] = (n * 11 + n / 7) % V;
    const std::vector<float> wte = rnd(size_t(V) * C, 50), dout = rnd(size_t(N) * C, 51);
    const std::vector<float> dwte0 = rnd(wte.size(), 52);
    auto [c, g] = on_both(gpu(), [&](Backend& be) {
      DevBuf<int32_t> t(be, tok);
      DevBuf<float> w(be, wte), out(be, size_t(N) * C, kNaN), d(be, dout), dw(be, dwte0);
      be.embedding_forward(out.get(), t.get(), f32_weight(w.get()), N, C);
      be.embedding_backward(dw.get(), d.get(), t.get(), N, C);  // accumulates
      return Outs{{"out", take(out, "out")}, {"dwte", take(dw, "dwte")}};
    });
    expect_close(c, g, "out", kExact);  // a gather
    expect_close(c, g, "dwte", kReduction);
  }
}

// ---- RMSNorm --------------------------------------------------------------------------------------

TEST_F(BackendOps, RmsnormForwardBackward) {
  const std::pair<int, int> shapes[] = {{260, 130}, {1, 1}, {7, 4097}, {1, 64}};
  for (auto [N, C] : shapes) {
    SCOPED_TRACE("N = " + std::to_string(N) + ", C = " + std::to_string(C));
    const std::vector<float> x = rnd(size_t(N) * C, 60, -3, 3), w = rnd(C, 61, 0.5, 1.5);
    const std::vector<float> dout = rnd(x.size(), 62), dx0 = rnd(x.size(), 63), dw0 = rnd(C, 64);
    auto [c, g] = on_both(gpu(), [&](Backend& be) {
      DevBuf<float> dx_(be, x), dw_(be, w), out(be, x.size(), kNaN), rstd(be, N, kNaN);
      DevBuf<float> d(be, dout), dx(be, dx0), dw(be, dw0);
      be.rmsnorm_forward(out.get(), rstd.get(), dx_.get(), dw_.get(), N, C, 1e-6f);
      be.rmsnorm_backward(dx.get(), dw.get(), d.get(), dx_.get(), dw_.get(), rstd.get(), N, C);  // +=
      return Outs{
          {"out", take(out, "out")}, {"rstd", take(rstd, "rstd")}, {"dx", take(dx, "dx")}, {"dw", take(dw, "dw")}};
    });
    expect_close(c, g, "out", kReduction);
    expect_close(c, g, "rstd", kReduction);
    expect_close(c, g, "dx", kReduction);
    expect_close(c, g, "dw", kReduction);
  }
}

// ---- matmul ---------------------------------------------------------------------------------------

struct MatmulShape {
  int N, IC, OC;
};
const MatmulShape kMatmulShapes[] = {{333, 130, 77}, {1, 7, 3}, {4, 1, 1}, {64, 64, 29}, {1024, 64, 176}};

std::string matmul_label(const MatmulShape& s) {
  return "N = " + std::to_string(s.N) + ", IC = " + std::to_string(s.IC) + ", OC = " + std::to_string(s.OC);
}

TEST_F(BackendOps, MatmulForward) {
  for (const MatmulShape& s : kMatmulShapes) {
    SCOPED_TRACE(matmul_label(s));
    const std::vector<float> inp = rnd(size_t(s.N) * s.IC, 70), w = rnd(size_t(s.OC) * s.IC, 71);
    const std::vector<float> base = rnd(size_t(s.N) * s.OC, 72);
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
      auto [c, g] = on_both(gpu(), [&](Backend& be) {
        DevBuf<float> i(be, inp), ww(be, w);
        DevBuf<float> out = accumulate ? DevBuf<float>(be, base) : DevBuf<float>(be, base.size(), kNaN);
        be.matmul_forward(out.get(), i.get(), f32_weight(ww.get()), s.N, s.IC, s.OC, accumulate);
        return Outs{{"out", take(out, "out")}};
      });
      expect_close(c, g, "out", kTf32);
    }
  }
}

TEST_F(BackendOps, MatmulBackward) {
  enum class Variant { Both, AccumulateDinp, NoDinp, NoDw };
  const std::pair<Variant, const char*> variants[] = {{Variant::Both, "dinp = ..., dw += ..."},
                                                      {Variant::AccumulateDinp, "dinp += ..., dw += ..."},
                                                      {Variant::NoDinp, "dinp null"},
                                                      {Variant::NoDw, "dw null"}};
  for (const MatmulShape& s : kMatmulShapes) {
    SCOPED_TRACE(matmul_label(s));
    const std::vector<float> inp = rnd(size_t(s.N) * s.IC, 80), w = rnd(size_t(s.OC) * s.IC, 81);
    const std::vector<float> dout = rnd(size_t(s.N) * s.OC, 82);
    const std::vector<float> dinp0 = rnd(inp.size(), 83), dw0 = rnd(w.size(), 84);
    for (auto [variant, label] : variants) {
      SCOPED_TRACE(label);
      auto [c, g] = on_both(gpu(), [&](Backend& be) {
        DevBuf<float> i(be, inp), ww(be, w), d(be, dout);
        DevBuf<float> dinp =
            variant == Variant::AccumulateDinp ? DevBuf<float>(be, dinp0) : DevBuf<float>(be, inp.size(), kNaN);
        DevBuf<float> dw(be, dw0);
        be.matmul_backward(variant == Variant::NoDinp ? nullptr : dinp.get(),
                           variant == Variant::NoDw ? nullptr : dw.get(), d.get(), i.get(), f32_weight(ww.get()), s.N,
                           s.IC, s.OC, variant == Variant::AccumulateDinp);
        Outs o{{"dinp", take(dinp, "dinp")}, {"dw", take(dw, "dw")}};
        return o;
      });
      if (variant == Variant::NoDinp) {
        EXPECT_TRUE(std::all_of(g["dinp"].begin(), g["dinp"].end(), [](float x) { return std::isnan(x); }))
            << "dinp was null: its buffer must stay untouched";
      } else {
        expect_close(c, g, "dinp", kTf32);
      }
      if (variant == Variant::NoDw) {
        EXPECT_EQ(g["dw"], dw0) << "dw was null: its buffer must stay untouched";
      } else {
        expect_close(c, g, "dw", kTf32);
      }
    }
  }
}

// ---- bf16 weights ----------------------------------------------------------------------------------

// n bf16 values, rounded from uniform [lo, hi), packed two to a 32-bit word for DevBuf.
std::vector<uint32_t> bf16_words(size_t n, uint64_t seed) {
  const std::vector<float> x = rnd(n, seed);
  std::vector<uint16_t> b(n + n % 2, 0);
  for (size_t i = 0; i < n; ++i) b[i] = fp32_to_bf16(x[i]);
  std::vector<uint32_t> words(b.size() / 2);
  std::memcpy(words.data(), b.data(), b.size() * sizeof(uint16_t));
  return words;
}

// A bf16 weight: the CPU widens it and keeps the input fp32, CUDA rounds the input to bf16 as well
// (at every precision: a bf16 weight makes it a bf16 GEMM), so the two differ by one input rounding
// per product, kBf16. dw is never asked for (a bf16 weight is frozen).
TEST_F(BackendOps, MatmulWithBf16Weight) {
  for (const MatmulPrecision prec : {MatmulPrecision::Tf32, MatmulPrecision::Fp32, MatmulPrecision::Bf16}) {
    for (const MatmulShape& s : kMatmulShapes) {
      SCOPED_TRACE(std::string(matmul_precision_name(prec)) + ", " + matmul_label(s));
      const std::vector<float> inp = rnd(size_t(s.N) * s.IC, 75), dout = rnd(size_t(s.N) * s.OC, 76);
      const std::vector<float> base = rnd(size_t(s.N) * s.OC, 77), dinp0 = rnd(inp.size(), 78);
      const std::vector<uint32_t> w = bf16_words(size_t(s.OC) * s.IC, 79);
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
        auto [c, g] = on_both(gpu(), [&](Backend& be) {
          std::unique_ptr<PrecisionScope> scope;
          if (&be == &gpu()) scope = std::make_unique<PrecisionScope>(be, prec);
          DevBuf<float> i(be, inp), d(be, dout);
          DevBuf<uint32_t> ww(be, w);
          DevBuf<float> out = accumulate ? DevBuf<float>(be, base) : DevBuf<float>(be, base.size(), kNaN);
          DevBuf<float> dinp = accumulate ? DevBuf<float>(be, dinp0) : DevBuf<float>(be, inp.size(), kNaN);
          const WeightRef wr{ww.get(), DType::BF16};
          be.matmul_forward(out.get(), i.get(), wr, s.N, s.IC, s.OC, accumulate);
          be.matmul_backward(dinp.get(), nullptr, d.get(), i.get(), wr, s.N, s.IC, s.OC, accumulate);
          return Outs{{"out", take(out, "out")}, {"dinp", take(dinp, "dinp")}};
        });
        expect_close(c, g, "out", kBf16);
        expect_close(c, g, "dinp", kBf16);
      }
    }
  }
}

TEST_F(BackendOps, EmbeddingForwardFromBf16Table) {
  const int V = 50, N = 333, C = 130;
  std::vector<int32_t> tok(N);
  for (int n = 0; n < N; ++n) tok[n] = (n * 13 + 5) % V;
  const std::vector<uint32_t> wte = bf16_words(size_t(V) * C, 85);
  auto [c, g] = on_both(gpu(), [&](Backend& be) {
    DevBuf<int32_t> t(be, tok);
    DevBuf<uint32_t> w(be, wte);
    DevBuf<float> out(be, size_t(N) * C, kNaN);
    be.embedding_forward(out.get(), t.get(), WeightRef{w.get(), DType::BF16}, N, C);
    return Outs{{"out", take(out, "out")}};
  });
  expect_close(c, g, "out", kExact);  // widening is exact on both
}

// ---- RoPE -----------------------------------------------------------------------------------------

TEST_F(BackendOps, RopeForwardBackward) {
  struct Shape {
    int B, T, nh, HS, pos0;
    float theta;
  };
  const Shape shapes[] = {{2, 65, 3, 32, 37, 10000.0f},   // odd head count, pos0 > 0
                          {1, 1, 1, 2, 5, 10000.0f},      // T = 1, the smallest head
                          {3, 5, 5, 66, 100, 500000.0f},  // HS / 2 odd
                          {4, 66, 4, 16, 0, 10000.0f}};   // the tiny preset's shape
  for (const Shape& s : shapes) {
    SCOPED_TRACE("B = " + std::to_string(s.B) + ", T = " + std::to_string(s.T) + ", nh = " + std::to_string(s.nh) +
                 ", HS = " + std::to_string(s.HS) + ", pos0 = " + std::to_string(s.pos0));
    const std::vector<float> x = rnd(size_t(s.B) * s.T * s.nh * s.HS, 90);
    const std::vector<float> freq = cpu::rope_default_inv_freq(s.theta, s.HS);
    auto [c, g] = on_both(gpu(), [&](Backend& be) {
      DevBuf<float> f(be, x), b(be, x), fr(be, freq);
      be.rope_forward(f.get(), s.B, s.T, s.nh, s.HS, s.pos0, fr.get());
      be.rope_backward(b.get(), s.B, s.T, s.nh, s.HS, s.pos0, fr.get());
      return Outs{{"forward", take(f, "forward")}, {"backward", take(b, "backward")}};
    });
    expect_close(c, g, "forward", kRope);
    expect_close(c, g, "backward", kRope);
  }
}

// ---- attention ------------------------------------------------------------------------------------

// out always; dq, dk, dv when Tk_cap == Tk (the backward's contract). Each backend's backward gets
// its own forward's out and saved buffer.
void compare_attention(Backend& gpu, const AttnShape& s, uint64_t seed, double limit = kAttention) {
  const size_t nq = size_t(s.B) * s.Tq * s.NH * s.HS, nk = size_t(s.B) * s.Tk_cap * s.NKV * s.HS;
  const std::vector<float> q = rnd(nq, seed, -2, 2), k = rnd(nk, seed + 1, -2, 2);
  const std::vector<float> v = rnd(nk, seed + 2), dout = rnd(nq, seed + 3);
  const bool backward = s.Tk_cap == s.Tk;
  auto [c, g] = on_both(gpu, [&](Backend& be) {
    DevBuf<float> dq_in(be, q), dk_in(be, k), dv_in(be, v), d(be, dout);
    DevBuf<float> out(be, nq, kNaN), saved(be, be.attention_saved_floats(s), kNaN);
    be.attention_forward(out.get(), saved.get(), dq_in.get(), dk_in.get(), dv_in.get(), s);
    Outs o{{"out", take(out, "out")}};
    take(saved, "saved");  // contents differ by design; only the guard is checked
    if (backward) {
      DevBuf<float> dq(be, nq, kNaN), dk(be, nk, kNaN), dv(be, nk, kNaN);
      be.attention_backward(dq.get(), dk.get(), dv.get(), d.get(), out.get(), saved.get(), dq_in.get(), dk_in.get(),
                            dv_in.get(), s);
      o["dq"] = take(dq, "dq");
      o["dk"] = take(dk, "dk");
      o["dv"] = take(dv, "dv");
    }
    return o;
  });
  expect_close(c, g, "out", limit);
  if (backward) {
    expect_close(c, g, "dq", limit);
    expect_close(c, g, "dk", limit);
    expect_close(c, g, "dv", limit);
  }
}

TEST_F(BackendOps, AttentionCausalGqa) { compare_attention(gpu(), attn_shape(3, 4, 2, 32, 65, 65, 65, 0, true), 100); }

TEST_F(BackendOps, AttentionNonCausal) { compare_attention(gpu(), attn_shape(3, 4, 2, 32, 65, 65, 65, 0, false), 110); }

// One new query against a KV cache of 70 rows in a buffer of 80 (the last 10 rows hold values that
// must be ignored), GQA 4:1. Forward only: the backward takes Tk_cap == Tk.
TEST_F(BackendOps, AttentionDecodeWithKvCache) {
  compare_attention(gpu(), attn_shape(2, 4, 1, 32, 1, 70, 80, 69, true), 120);
}

// The same geometry with Tk_cap == Tk, so the backward runs too (Tq = 1 < Tk, q_pos0 = 69).
TEST_F(BackendOps, AttentionSingleQueryAtOffsetBackward) {
  compare_attention(gpu(), attn_shape(2, 4, 1, 32, 1, 70, 70, 69, true), 125);
}

TEST_F(BackendOps, AttentionTOneOddHeadSize) {
  compare_attention(gpu(), attn_shape(5, 2, 2, 7, 1, 1, 1, 0, true), 130);
}

TEST_F(BackendOps, AttentionLongSequence) {
  compare_attention(gpu(), attn_shape(1, 4, 2, 64, 1024, 1024, 1024, 0, true), 140);
}

// At bf16 the shapes with HS 32, 64 or 128 and Tq >= 16 run on tensor cores (attention_tc.cu):
// partial tiles, GQA, a query block at the end of a longer context, non-causal with Tq != Tk, a
// KV buffer longer than Tk (forward only), T = 1024. Shapes it does not take (Tq = 1, odd HS) go
// to the fp32 kernel and must still be right.
TEST_F(BackendOps, AttentionOnTensorCoresAtBf16) {
  PrecisionScope bf16(gpu(), MatmulPrecision::Bf16);
  const AttnShape shapes[] = {
      attn_shape(1, 2, 1, 32, 70, 70, 70, 0, true),   attn_shape(2, 2, 2, 64, 16, 100, 100, 84, true),
      attn_shape(1, 1, 1, 32, 130, 77, 77, 0, false), attn_shape(1, 4, 2, 128, 64, 64, 80, 0, true),
      attn_shape(3, 4, 2, 64, 65, 65, 65, 0, true),   attn_shape(1, 4, 2, 64, 1024, 1024, 1024, 0, true),
      attn_shape(2, 4, 1, 32, 1, 70, 70, 69, true),   attn_shape(5, 2, 2, 7, 17, 17, 17, 0, true)};
  uint64_t seed = 150;
  for (const AttnShape& s : shapes) {
    SCOPED_TRACE("HS " + std::to_string(s.HS) + " Tq " + std::to_string(s.Tq) + " Tk " + std::to_string(s.Tk) +
                 (s.causal ? " causal" : " full"));
    compare_attention(gpu(), s, seed += 10, kAttentionBf16);
  }
}

// ---- SwiGLU ---------------------------------------------------------------------------------------

TEST_F(BackendOps, SwigluForwardBackward) {
  for (size_t n : {size_t(1), size_t(7), size_t(100003)}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::vector<float> gate = rnd(n, 150, -8, 8);
    const float extremes[] = {-100.0f, -30.0f, -1e-30f, 0.0f, 1e-30f, 30.0f, 100.0f};
    for (size_t i = 0; i < std::size(extremes) && i * 7 < n; ++i) gate[i * 7] = extremes[i];
    const std::vector<float> up = rnd(n, 151), dout = rnd(n, 152);
    auto [c, g] = on_both(gpu(), [&](Backend& be) {
      DevBuf<float> ga(be, gate), u(be, up), d(be, dout);
      DevBuf<float> out(be, n, kNaN), dgate(be, n, kNaN), dup(be, n, kNaN);
      be.swiglu_forward(out.get(), ga.get(), u.get(), n);
      be.swiglu_backward(dgate.get(), dup.get(), d.get(), ga.get(), u.get(), n);
      return Outs{{"out", take(out, "out")}, {"dgate", take(dgate, "dgate")}, {"dup", take(dup, "dup")}};
    });
    expect_close(c, g, "out", kElementwise);
    expect_close(c, g, "dgate", kElementwise);
    expect_close(c, g, "dup", kElementwise);
  }
}

// ---- cross-entropy --------------------------------------------------------------------------------

TEST_F(BackendOps, CrossentropyForwardBackwardInPlace) {
  struct Shape {
    int N, V;
    double range;
  };
  for (Shape sh : {Shape{517, 29, 15.0}, Shape{1, 29, 15.0}, Shape{3, 2, 5.0}, Shape{64, 50257, 10.0}}) {
    const auto [N, V, range] = sh;
    SCOPED_TRACE("N = " + std::to_string(N) + ", V = " + std::to_string(V));
    const std::vector<float> logits = rnd(size_t(N) * V, 160, -range, range);
    std::vector<int32_t> targets(N);
    for (int n = 0; n < N; ++n) targets[n] = (n * 7 + 3) % V;
    targets[N - 1] = V - 1;  // the last class
    const float scale = 1.0f / float(N);
    auto [c, g] = on_both(gpu(), [&](Backend& be) {
      DevBuf<float> l(be, logits), losses(be, N, kNaN), dl(be, logits.size(), kNaN), in_place(be, logits);
      DevBuf<int32_t> t(be, targets);
      be.crossentropy_forward(losses.get(), l.get(), t.get(), N, V);
      be.crossentropy_backward(dl.get(), l.get(), t.get(), N, V, scale);
      be.crossentropy_backward(in_place.get(), in_place.get(), t.get(), N, V, scale);  // dlogits aliases logits
      return Outs{{"losses", take(losses, "losses")},
                  {"dlogits", take(dl, "dlogits")},
                  {"in_place", take(in_place, "dlogits in place")}};
    });
    expect_close(c, g, "losses", kReduction);
    expect_close(c, g, "dlogits", kReduction);
    expect_close(c, g, "in_place", kReduction);
    // In place must give what out of place gives, on the GPU too.
    EXPECT_LE(rel_error(g["dlogits"], g["in_place"]), kReduction) << "CUDA in place vs out of place";
  }
}

// ---- binary mapper, post-sampler, KL --------------------------------------------------------------

TEST_F(BackendOps, BinaryMapperForwardSameCodesAsCpu) {
  const std::pair<int, int> shapes[] = {{1000, 1}, {1000, 8}, {300, 16}, {1, 16}};
  const uint64_t seed = 77, stream = kStreamLatent + 5;
  for (auto [N, H] : shapes) {
    SCOPED_TRACE("N = " + std::to_string(N) + ", H = " + std::to_string(H));
    const std::vector<float> logits = rnd(size_t(N) * H, 170, -4, 4);
    std::vector<uint32_t> codes_c, codes_g;
    auto run = [&](Backend& be, std::vector<uint32_t>& codes) {
      DevBuf<float> l(be, logits), p(be, logits.size(), kNaN);
      DevBuf<uint32_t> cd(be, size_t(N), 0xFFFFFFFFu);
      be.binary_mapper_forward(cd.get(), p.get(), l.get(), N, H, seed, stream);
      codes = take(cd, "codes");
      return Outs{{"p", take(p, "p")}};
    };
    Outs c = run(cpu(), codes_c), g = run(gpu(), codes_g);
    expect_close(c, g, "p", kElementwise);
    ASSERT_EQ(codes_c.size(), codes_g.size());
    // The same Philox draws: every bit identical. The one legitimate exception is a draw u that
    // falls between the two backends' roundings of the same sigmoid (an ulp apart): then the bits
    // may differ, and the check says so instead of failing.
    int unexplained = 0, ties = 0;
    for (int n = 0; n < N; ++n) {
      const uint32_t diff = codes_c[n] ^ codes_g[n];
      if (codes_g[n] >> H) ++unexplained;  // bits above H set
      for (int h = 0; h < H; ++h) {
        if (!((diff >> h) & 1)) continue;
        const size_t i = size_t(n) * H + h;
        const float u = philox_uniform(seed, stream, i);
        const float lo = std::min(c["p"][i], g["p"][i]), hi = std::max(c["p"][i], g["p"][i]);
        if (u >= lo && u < hi) {
          ++ties;
        } else if (++unexplained <= 5) {
          ADD_FAILURE() << "row " << n << " bit " << h << ": cpu " << ((codes_c[n] >> h) & 1) << ", cuda "
                        << ((codes_g[n] >> h) & 1) << " (u = " << u << ", p cpu " << c["p"][i] << ", cuda " << g["p"][i]
                        << ")";
        }
      }
    }
    EXPECT_EQ(unexplained, 0) << "code bits that differ from the CPU's for the same seed and stream";
    EXPECT_LE(ties, 2) << "more draws between the two p roundings than chance allows";
  }
}

TEST_F(BackendOps, BinaryMapperBackward) {
  struct Shape {
    int N, C, H;
  };
  for (Shape sh : {Shape{300, 128, 1}, Shape{257, 33, 4}, Shape{100, 64, 16}}) {
    const auto [N, C, H] = sh;
    SCOPED_TRACE("N = " + std::to_string(N) + ", C = " + std::to_string(C) + ", H = " + std::to_string(H));
    const std::vector<float> p = rnd(size_t(N) * H, 180, 0.02, 0.98);  // (N, H)
    const std::vector<float> dR = rnd(size_t(N) * C, 181);             // (N, C)
    const std::vector<float> W = rnd(size_t(C) << H, 182);             // (C, 2^H)
    const std::vector<float> dl0 = rnd(p.size(), 183);
    auto [c, g] = on_both(gpu(), [&](Backend& be) {
      DevBuf<float> pp(be, p), r(be, dR), w(be, W), dl(be, dl0);
      be.binary_mapper_backward(dl.get(), r.get(), w.get(), pp.get(), N, C, H);  // accumulates
      return Outs{{"dlogits", take(dl, "dlogits")}};
    });
    expect_close(c, g, "dlogits", kMapperTf32);
    // The accumulated part alone (dl0 must not hide it): compare the increments too.
    std::vector<float> inc_c(dl0.size()), inc_g(dl0.size());
    for (size_t i = 0; i < dl0.size(); ++i) inc_c[i] = c["dlogits"][i] - dl0[i], inc_g[i] = g["dlogits"][i] - dl0[i];
    EXPECT_LE(rel_error(inc_c, inc_g), kMapperTf32) << "dlogits increment; " << worst_element(inc_c, inc_g);
  }
}

TEST_F(BackendOps, PostSamplerForwardBackward) {
  struct Shape {
    int N, C, H;
  };
  for (Shape sh : {Shape{500, 130, 8}, Shape{7, 3, 1}, Shape{100, 64, 16}}) {
    const auto [N, C, H] = sh;
    SCOPED_TRACE("N = " + std::to_string(N) + ", C = " + std::to_string(C) + ", H = " + std::to_string(H));
    std::vector<uint32_t> codes(N);  // repeated codes: the scatter-adds collide
    for (int n = 0; n < N; ++n) codes[n] = uint32_t((n * 37 + n / 3) % 17) & ((1u << H) - 1);
    codes[0] = (1u << H) - 1;  // the last code
    const std::vector<float> W = rnd(size_t(C) << H, 190), dR = rnd(size_t(N) * C, 191);
    const std::vector<float> dW0 = rnd(W.size(), 192);
    auto [c, g] = on_both(gpu(), [&](Backend& be) {
      DevBuf<uint32_t> cd(be, codes);
      DevBuf<float> w(be, W), r(be, dR), R(be, dR.size(), kNaN), dW(be, dW0);
      be.post_sampler_forward(R.get(), cd.get(), w.get(), N, C, H);
      be.post_sampler_backward(dW.get(), r.get(), cd.get(), N, C, H);  // accumulates
      return Outs{{"R", take(R, "R")}, {"dW", take(dW, "dW")}};
    });
    expect_close(c, g, "R", kExact);  // a gather
    expect_close(c, g, "dW", kReduction);
  }
}

TEST_F(BackendOps, KlForwardBackwardFreeBits) {
  const std::pair<int, int> shapes[] = {{500, 16}, {7, 1}, {300, 8}};
  for (auto [N, H] : shapes) {
    SCOPED_TRACE("N = " + std::to_string(N) + ", H = " + std::to_string(H));
    std::vector<float> p = rnd(size_t(N) * H, 200, 0.0, 1.0);
    p[0] = 0.0f;  // the limits: Hb = 0 and a zero derivative
    if (p.size() > 2) p[2] = 1.0f;
    const std::vector<float> dl0 = rnd(p.size(), 201);
    // kappa at the median KL, so that some rows are above and some below. The backward gets the
    // CPU's KL on both backends, so both select the same rows.
    DevBuf<float> pc(cpu(), p), klc(cpu(), size_t(N), kNaN);
    cpu().kl_forward(klc.get(), pc.get(), N, H);
    std::vector<float> kl = klc.to_host(), sorted = kl;
    std::sort(sorted.begin(), sorted.end());
    const float kappa = N > 1 ? 0.5f * (sorted[N / 2 - 1] + sorted[N / 2]) : sorted[0] - 0.1f;
    const int above = int(std::count_if(kl.begin(), kl.end(), [&](float x) { return x > kappa; }));
    if (N > 1) {
      ASSERT_GT(above, 0);
      ASSERT_LT(above, N);
    }
    const float scale = 0.3f;
    auto [c, g] = on_both(gpu(), [&](Backend& be) {
      DevBuf<float> pp(be, p), klo(be, size_t(N), kNaN), kli(be, kl), dl(be, dl0);
      be.kl_forward(klo.get(), pp.get(), N, H);
      be.kl_backward(dl.get(), pp.get(), kli.get(), N, N, H, kappa, scale);  // accumulates
      return Outs{{"kl", take(klo, "kl")}, {"dlogits", take(dl, "dlogits")}};
    });
    expect_close(c, g, "kl", kReduction);
    expect_close(c, g, "dlogits", kReduction);
    // Rows at or below kappa are untouched on the GPU.
    for (int n = 0; n < N; ++n) {
      if (kl[n] > kappa) continue;
      for (int h = 0; h < H; ++h) {
        const size_t i = size_t(n) * H + h;
        EXPECT_EQ(g["dlogits"][i], dl0[i]) << "row " << n << " is below kappa but its gradient changed";
      }
    }
  }
}

// The batch-mean form: the column mean over the batch per position on the device, then the gate on
// it (period T). kappa at the median of the CPU's means; both backends get the CPU's means for the
// backward, so they gate the same positions, and the device's own means are compared separately.
TEST_F(BackendOps, KlBatchMeanAndItsFreeBits) {
  const std::pair<int, int> shapes[] = {{64, 65}, {1, 7}, {3, 1}, {256, 130}};  // (B, T)
  const int H = 8;
  for (auto [B, T] : shapes) {
    SCOPED_TRACE("B = " + std::to_string(B) + ", T = " + std::to_string(T));
    const int N = B * T;
    const std::vector<float> p = rnd(size_t(N) * H, 210, 0.0, 1.0), dl0 = rnd(p.size(), 211);
    DevBuf<float> pc(cpu(), p), klc(cpu(), size_t(N), kNaN), mc(cpu(), size_t(T), kNaN);
    cpu().kl_forward(klc.get(), pc.get(), N, H);
    cpu().kl_batch_mean(mc.get(), klc.get(), B, T);
    const std::vector<float> kl = klc.to_host(), mean = mc.to_host();
    std::vector<float> sorted = mean;
    std::sort(sorted.begin(), sorted.end());
    const float kappa = T > 1 ? 0.5f * (sorted[T / 2 - 1] + sorted[T / 2]) : sorted[0] - 0.1f;
    auto [c, g] = on_both(gpu(), [&](Backend& be) {
      DevBuf<float> kli(be, kl), mo(be, size_t(T), kNaN), mi(be, mean), pp(be, p), dl(be, dl0);
      be.kl_batch_mean(mo.get(), kli.get(), B, T);
      be.kl_backward(dl.get(), pp.get(), mi.get(), T, N, H, kappa, 1.0f / N);  // accumulates
      return Outs{{"mean", take(mo, "mean")}, {"dlogits", take(dl, "dlogits")}};
    });
    expect_close(c, g, "mean", kReduction);
    expect_close(c, g, "dlogits", kReduction);
    for (int n = 0; n < N; ++n) {
      if (mean[n % T] > kappa) continue;
      for (int h = 0; h < H; ++h) {
        const size_t i = size_t(n) * H + h;
        EXPECT_EQ(g["dlogits"][i], dl0[i]) << "row " << n << " is at a position below kappa but its gradient changed";
      }
    }
  }
}

// ---- optimizer ------------------------------------------------------------------------------------

// Segments that straddle the CUDA kernel's chunks, one of a single element, one without decay.
TEST_F(BackendOps, AdamwSeveralStepsOverSegments) {
  const size_t n = 100003;
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  const AdamWSegment segs[] = {{0, 70001, 0.1f}, {70001, 1, 0.0f}, {70002, 30001, 0.05f}};
  const std::vector<float> param0 = rnd(n, 210);
  auto [c, g] = on_both(gpu(), [&](Backend& be) {
    DevBuf<float> param(be, param0), m(be, n, 0.0f), v(be, n, 0.0f);
    for (int t = 1; t <= 5; ++t) {
      DevBuf<float> grad(be, rnd(n, 210 + t, -2, 2));
      be.adamw_update(param.get(), grad.get(), m.get(), v.get(), segs, 3, AdamWStep{lr, b1, b2, eps, t});
      take(grad, "grad");
    }
    return Outs{{"param", take(param, "param")}, {"m", take(m, "m")}, {"v", take(v, "v")}};
  });
  expect_close(c, g, "param", kElementwise);
  expect_close(c, g, "m", kElementwise);
  expect_close(c, g, "v", kElementwise);
  std::vector<float> delta_c(n), delta_g(n);
  for (size_t i = 0; i < n; ++i) delta_c[i] = c["param"][i] - param0[i], delta_g[i] = g["param"][i] - param0[i];
  EXPECT_LE(rel_error(delta_c, delta_g), kAdamDelta) << "the update; " << worst_element(delta_c, delta_g);
}

// ---- NaN / Inf agreement --------------------------------------------------------------------------

TEST_F(BackendOps, NanAndInfPropagateLikeTheCpu) {
  const size_t n = 1001;
  std::vector<float> a = rnd(n, 220), b = rnd(n, 221);
  a[5] = kNaN, b[9] = kInf, a[11] = kInf, b[11] = -kInf, a[13] = -kInf, b[17] = kNaN, a[19] = kInf;
  std::vector<float> gate = rnd(n, 222, -8, 8), up = rnd(n, 223);
  gate[3] = kNaN, gate[4] = kInf, gate[5] = -kInf, up[6] = kInf, up[7] = -kInf, up[8] = kNaN;
  gate[9] = 0.0f, up[9] = kInf;  // silu(0) * Inf
  gate[10] = kInf, up[10] = 0.0f;
  const int N = 5, C = 33;  // rows: a NaN, an Inf, a -Inf, finite, finite
  std::vector<float> x = rnd(size_t(N) * C, 224, -3, 3), w = rnd(C, 225, 0.5, 1.5);
  x[3] = kNaN, x[C + 4] = kInf, x[2 * C + 5] = -kInf;
  auto [c, g] = on_both(gpu(), [&](Backend& be) {
    DevBuf<float> da(be, a), db(be, b), sum(be, n, kNaN), acc(be, b), sc(be, a), sc0(be, a);
    be.add(sum.get(), da.get(), db.get(), n);
    be.add_inplace(acc.get(), da.get(), n);
    be.scale(sc.get(), 2.5f, n);
    be.scale(sc0.get(), 0.0f, n);  // Inf * 0 = NaN, NaN * 0 = NaN
    DevBuf<float> dg(be, gate), du(be, up), sw(be, n, kNaN);
    be.swiglu_forward(sw.get(), dg.get(), du.get(), n);
    DevBuf<float> dx(be, x), dw(be, w), out(be, x.size(), kNaN), rstd(be, N, kNaN);
    be.rmsnorm_forward(out.get(), rstd.get(), dx.get(), dw.get(), N, C, 1e-6f);
    return Outs{{"add", take(sum, "add")},           {"add_inplace", take(acc, "add_inplace")},
                {"scale", take(sc, "scale")},        {"scale0", take(sc0, "scale by 0")},
                {"swiglu", take(sw, "swiglu")},      {"rmsnorm", take(out, "rmsnorm out")},
                {"rstd", take(rstd, "rmsnorm rstd")}};
  });
  expect_same_nonfinite(c["add"], g["add"], "add", kExact);
  expect_same_nonfinite(c["add_inplace"], g["add_inplace"], "add_inplace", kExact);
  expect_same_nonfinite(c["scale"], g["scale"], "scale", kExact);
  expect_same_nonfinite(c["scale0"], g["scale0"], "scale by 0", kExact);
  expect_same_nonfinite(c["swiglu"], g["swiglu"], "swiglu", kElementwise);
  expect_same_nonfinite(c["rmsnorm"], g["rmsnorm"], "rmsnorm out", kReduction);
  // rstd of the Inf rows is 0 (finite): agreement on NaN/Inf plus the finite values.
  EXPECT_LE(rel_error(std::vector<float>(c["rstd"].begin() + 1, c["rstd"].end()),
                      std::vector<float>(g["rstd"].begin() + 1, g["rstd"].end())),
            kReduction)
      << "rstd of the rows without NaN";
  EXPECT_TRUE(std::isnan(c["rstd"][0]) == std::isnan(g["rstd"][0]))
      << "rstd of the NaN row: cpu " << c["rstd"][0] << ", cuda " << g["rstd"][0];
}

// ---- end to end -----------------------------------------------------------------------------------

// test_backend_ops_emu (FTX_EMULATED_GPU: these tests against the CPU emulation of the CUDA
// backend, tests/cuda_emu, which runs a fiber per CUDA thread) trains 6 steps of batch 4 on coin
// flips of length 16, a thousandth of the work; whether the CPU curve falls far is checked in the
// full run only.
#ifdef FTX_EMULATED_GPU
constexpr int kTrainSteps = 6, kTrainBatch = 4, kCoinflipLen = 16;
constexpr const char* kTrainDataset = "coinflip";
#else
constexpr int kTrainSteps = 50, kTrainBatch = 16, kCoinflipLen = 0;
constexpr const char* kTrainDataset = "synthetic";
#endif
constexpr uint64_t kTrainSeed = 11;

// The per-step training loss of the tiny preset (Free Transformer, H = 8) on kTrainDataset.
// Empty after a test failure.
std::vector<double> train_losses(Backend& be, const std::string& db) {
  TrainConfig tc;
  tc.dataset = kTrainDataset;
  if (kCoinflipLen > 0) tc.dataset_options["coinflip_len"] = kCoinflipLen;
  tc.preset = "tiny";
  tc.steps = kTrainSteps;
  tc.batch = kTrainBatch;
  tc.warmup = 5;
  tc.lr = 1e-3f;
  tc.eval_every = 0;        // never: only the training curve is compared
  tc.checkpoint_every = 0;  // only at the end
  tc.seed = kTrainSeed;
  std::unique_ptr<BatchSource> data = make_dataset(tc);
  if (!data) {
    ADD_FAILURE() << "make_dataset(" << kTrainDataset << ") returned null";
    return {};
  }
  auto preset = model_preset("tiny");
  if (!preset) {
    ADD_FAILURE() << preset.error().message;
    return {};
  }
  ModelConfig mc = *preset;  // sized for the dataset like `ftx train` does (app/cmd_train.cpp)
  mc.latent_bits = kDefaultLatentBits;
  mc.inject_after = mc.n_layers / 2;
  mc.vocab_size = data->tokenizer().vocab_size();
  mc.max_seq_len = std::max(mc.max_seq_len, data->seq_len());
  auto trainer = Trainer::start(be, mc, data->tokenizer().clone(), tc, data->seq_len(), db, "e2e");
  if (!trainer) {
    ADD_FAILURE() << "Trainer::start on " << be.name() << ": " << trainer.error().message;
    return {};
  }
  std::vector<double> losses;
  TrainerCallbacks cb;
  cb.on_step = [&](const StepReport& r) { losses.push_back(r.stats.loss); };
  const std::atomic<bool> never{false};
  const Status st = (*trainer)->run(*data, never, cb);
  if (!st) {
    ADD_FAILURE() << "training on " << be.name() << ": " << st.error().message;
    return {};
  }
  return losses;
}

TEST_F(BackendOps, TrainingCurveMatchesTheCpu) {
  test::TempDir dir("ftx_test_backend_ops_");
  ASSERT_FALSE(dir.path().empty());
  const std::vector<double> lc = train_losses(cpu(), dir / "cpu.db");
  const std::vector<double> lg = train_losses(gpu(), dir / "cuda.db");
  ASSERT_EQ(lc.size(), size_t(kTrainSteps));
  ASSERT_EQ(lg.size(), size_t(kTrainSteps));
  EXPECT_LE(std::abs(lg[0] - lc[0]), kFirstLossRel * lc[0]) << "step 1: cpu " << lc[0] << ", cuda " << lg[0];
  double worst = 0.0;
  int worst_step = 0;
  for (int s = 0; s < kTrainSteps; ++s) {
    ASSERT_TRUE(std::isfinite(lg[s])) << "CUDA loss at step " << s + 1 << ": " << lg[s];
    const double rel = std::abs(lg[s] - lc[s]) / lc[s];
    if (rel > worst) worst = rel, worst_step = s;
  }
  EXPECT_LE(worst, kTrainLossRel) << "worst at step " << worst_step + 1 << ": cpu " << lc[worst_step] << ", cuda "
                                  << lg[worst_step];
  if constexpr (kTrainSteps == 50) {
    EXPECT_GE(lc.front() - lc.back(), kMinLossDrop)
        << "the CPU curve did not fall: " << lc.front() << " -> " << lc.back();
  }
}

// ---- precision: fp32 and bf16 GEMMs ---------------------------------------------------------------

TEST_F(BackendOps, MatmulAtFp32AndBf16) {
  const MatmulShape s{257, 96, 130};
  const std::vector<float> inp = rnd(size_t(s.N) * s.IC, 700), w = rnd(size_t(s.OC) * s.IC, 701);
  const std::vector<float> dout = rnd(size_t(s.N) * s.OC, 702), base = rnd(size_t(s.N) * s.OC, 703);
  for (const auto& [prec, limit] :
       {std::pair{MatmulPrecision::Fp32, kFp32Gemm}, std::pair{MatmulPrecision::Bf16, kBf16}}) {
    for (const bool tracked : {false, true}) {
      SCOPED_TRACE(std::string(matmul_precision_name(prec)) + (tracked ? ", weights tracked" : ", weights untracked"));
      auto [c, g] = on_both(gpu(), [&](Backend& be) {
        std::unique_ptr<PrecisionScope> scope;
        if (&be == &gpu()) scope = std::make_unique<PrecisionScope>(be, prec);
        DevBuf<float> i(be, inp), ww(be, w), d(be, dout), out(be, base), dinp(be, inp.size(), kNaN),
            dw(be, w.size(), 0.0f);
        if (tracked) be.track_weights(ww.get(), w.size());
        be.matmul_forward(out.get(), i.get(), f32_weight(ww.get()), s.N, s.IC, s.OC, true);
        be.matmul_backward(dinp.get(), dw.get(), d.get(), i.get(), f32_weight(ww.get()), s.N, s.IC, s.OC, false);
        Outs o{{"out", take(out, "out")}, {"dinp", take(dinp, "dinp")}, {"dw", take(dw, "dw")}};
        if (tracked) be.track_weights(nullptr, 0);
        return o;
      });
      expect_close(c, g, "out", limit);
      expect_close(c, g, "dinp", limit);
      expect_close(c, g, "dw", limit);
    }
  }
}

// The bf16 copy of tracked weights follows every write: an upload, a copy, a fill and AdamW. A
// stale copy would compute with the old weights (error O(1)).
TEST_F(BackendOps, Bf16MirrorFollowsWeightWrites) {
  const int N = 64, IC = 48, OC = 40;
  const size_t nw = size_t(OC) * IC;
  const std::vector<float> inp = rnd(size_t(N) * IC, 710), w1 = rnd(nw, 711), w2 = rnd(nw, 712), grad = rnd(nw, 713);
  const AdamWSegment seg{0, nw, 0.1f};
  auto [c, g] = on_both(gpu(), [&](Backend& be) {
    std::unique_ptr<PrecisionScope> scope;
    if (&be == &gpu()) scope = std::make_unique<PrecisionScope>(be, MatmulPrecision::Bf16);
    DevBuf<float> i(be, inp), ww(be, w1), other(be, w2), gr(be, grad), m(be, nw, 0.0f), v(be, nw, 0.0f);
    DevBuf<float> out(be, size_t(N) * OC, kNaN);
    be.track_weights(ww.get(), nw);
    Outs o;
    auto product = [&](const std::string& what) {
      be.matmul_forward(out.get(), i.get(), f32_weight(ww.get()), N, IC, OC, false);
      o[what] = take(out, what);
    };
    product("initial");
    be.upload(ww.get(), w2.data(), nw * sizeof(float));
    product("after upload");
    be.copy(ww.get(), other.get(), nw / 2 * sizeof(float));
    be.fill(ww.get() + nw / 2, 0.25f, nw / 4);
    product("after copy and fill");
    for (int t = 1; t <= 3; ++t)
      be.adamw_update(ww.get(), gr.get(), m.get(), v.get(), &seg, 1, AdamWStep{0.05f, 0.9f, 0.95f, 1e-8f, t});
    product("after adamw");
    be.track_weights(nullptr, 0);
    return o;
  });
  for (const char* what : {"initial", "after upload", "after copy and fill", "after adamw"})
    expect_close(c, g, what, kBf16);
}

TEST_F(BackendOps, BinaryMapperBackwardAtBf16) {
  const int N = 300, C = 40, H = 10;
  const std::vector<float> dR = rnd(size_t(N) * C, 720), W = rnd(size_t(C) << H, 721);
  const std::vector<float> p = rnd(size_t(N) * H, 722, 0.02, 0.98), d0 = rnd(size_t(N) * H, 723);
  for (const bool tracked : {false, true}) {
    SCOPED_TRACE(tracked ? "W tracked" : "W untracked");
    auto [c, g] = on_both(gpu(), [&](Backend& be) {
      std::unique_ptr<PrecisionScope> scope;
      if (&be == &gpu()) scope = std::make_unique<PrecisionScope>(be, MatmulPrecision::Bf16);
      DevBuf<float> dr(be, dR), w(be, W), pp(be, p), dl(be, d0);
      if (tracked) be.track_weights(w.get(), W.size());
      be.binary_mapper_backward(dl.get(), dr.get(), w.get(), pp.get(), N, C, H);
      Outs o{{"dlogits", take(dl, "dlogits")}};
      if (tracked) be.track_weights(nullptr, 0);
      return o;
    });
    expect_close(c, g, "dlogits", kMapperBf16);
  }
}

// ---- step graphs ------------------------------------------------------------------------------------

// Ops recorded in a step graph and replayed with new scalars (kappa, lr and t, the Philox stream)
// give what the CPU gives step by step; a step whose buffers or constants differ is recorded anew.
TEST_F(BackendOps, StepGraphReplaysWithNewScalars) {
  const int N = 200, H = 6;
  const size_t n = 5000;
  const std::vector<float> logits0 = rnd(size_t(N) * H, 730, -3, 3), param0 = rnd(n, 731), grad = rnd(n, 732);
  const AdamWSegment segs[] = {{0, 3000, 0.1f}, {3000, 2000, 0.0f}};
  const Backend::GraphStats before = gpu().graph_stats();
  auto [c, g] = on_both(gpu(), [&](Backend& be) {
    DevBuf<float> logits(be, logits0), p(be, logits0.size(), kNaN), kl(be, N, kNaN), dl(be, logits0.size(), 0.0f);
    DevBuf<uint32_t> codes(be, N, 0u);
    DevBuf<float> param(be, param0), gr(be, grad), m(be, n, 0.0f), v(be, n, 0.0f), extra(be, n, 1.0f);
    Outs o;
    for (int step = 1; step <= 6; ++step) {
      const float kappa = 0.5f + 0.25f * float(step);
      be.begin_graph();
      be.binary_mapper_forward(codes.get(), p.get(), logits.get(), N, H, 11, 100 + step);
      be.kl_forward(kl.get(), p.get(), N, H);
      be.kl_backward(dl.get(), p.get(), kl.get(), N, N, H, kappa, 1.0f / N);
      be.adamw_update(param.get(), gr.get(), m.get(), v.get(), segs, 2,
                      AdamWStep{1e-2f / float(step), 0.9f, 0.95f, 1e-8f, step});
      if (step == 4) be.scale(extra.get(), 3.0f, n);  // a different step: recorded again
      be.end_graph();
      const std::string at = " step " + std::to_string(step);
      const std::vector<uint32_t> cd = codes.to_host();
      o["codes" + at] = std::vector<float>(cd.begin(), cd.end());
      o["dlogits" + at] = take(dl, "dlogits");
      o["param" + at] = take(param, "param");
    }
    o["extra"] = take(extra, "extra");
    return o;
  });
  for (const auto& [key, ref] : c) {
    SCOPED_TRACE(key);
    if (key.rfind("codes", 0) == 0) {
      EXPECT_EQ(g[key], ref) << "the Philox stream must reach the replayed mapper";
    } else {
      expect_close(c, g, key, key.rfind("param", 0) == 0 ? kElementwise : kReduction);
    }
  }
  const Backend::GraphStats after = gpu().graph_stats();
  // steps 1 (first), 4 (different) and 5 (back to the first shape) are recorded; 2, 3, 6 replay.
  EXPECT_EQ(after.captures - before.captures, 3);
  EXPECT_EQ(after.replays - before.replays, 3);
}

// The training step as one CUDA graph (recorded at step 1, replayed after) against the same
// backend running op by op (FTX_CUDA_GRAPHS=0): the same kernels on the same data, so the curves
// differ only by the order of float atomics in the scatter-adds.
TEST_F(BackendOps, TrainingWithStepGraphsMatchesOpByOp) {
  test::TempDir dir("ftx_test_backend_ops_");
  ASSERT_FALSE(dir.path().empty());
  setenv("FTX_CUDA_GRAPHS", "0", 1);
  auto made = make_cuda_backend(0);
  unsetenv("FTX_CUDA_GRAPHS");
  ASSERT_TRUE(made.ok()) << made.error().message;
  std::unique_ptr<Backend> eager = std::move(*made);
  const Backend::GraphStats before = gpu().graph_stats();
  const std::vector<double> lg = train_losses(gpu(), dir / "graph.db");
  const std::vector<double> le = train_losses(*eager, dir / "eager.db");
  ASSERT_EQ(lg.size(), size_t(kTrainSteps));
  ASSERT_EQ(le.size(), size_t(kTrainSteps));
  const Backend::GraphStats after = gpu().graph_stats();
  EXPECT_EQ(after.captures - before.captures, 1) << "one recording for the whole run";
  EXPECT_EQ(after.replays - before.replays, kTrainSteps - 1);
  EXPECT_EQ(eager->graph_stats().captures + eager->graph_stats().replays, 0);
  for (int s = 0; s < kTrainSteps; ++s)
    EXPECT_LE(std::abs(lg[s] - le[s]), kGraphLossRel * le[s])
        << "step " << s + 1 << ": graph " << lg[s] << ", op by op " << le[s];
}

// bf16 GEMMs end to end (the model tracks its weights, AdamW refreshes their bf16 copy).
TEST_F(BackendOps, TrainingCurveAtBf16FollowsTheCpu) {
  test::TempDir dir("ftx_test_backend_ops_");
  ASSERT_FALSE(dir.path().empty());
  const std::vector<double> lc = train_losses(cpu(), dir / "cpu.db");
  std::vector<double> lb;
  {
    PrecisionScope bf16(gpu(), MatmulPrecision::Bf16);
    lb = train_losses(gpu(), dir / "bf16.db");
  }
  ASSERT_EQ(lc.size(), size_t(kTrainSteps));
  ASSERT_EQ(lb.size(), size_t(kTrainSteps));
  for (int s = 0; s < kTrainSteps; ++s)
    EXPECT_LE(std::abs(lb[s] - lc[s]), kTrainLossRelBf16 * lc[s])
        << "step " << s + 1 << ": cpu " << lc[s] << ", bf16 " << lb[s];
}

}  // namespace
}  // namespace ftx
