// The CUDA backend against the CPU backend (kernels/backend.h): the same host inputs are uploaded
// to both, every output is downloaded and compared by relative L2 error with a limit per kind of
// arithmetic. Every compute op at its test sizes comes from the op table (kernels/op_table.h: the
// sizes are awkward on purpose: T = 1, odd widths, H = 1 and 16, GQA, a KV cache, V = 50257, and
// T = 1024), with guard words after every buffer. Here besides: memory (alloc, try_alloc, upload,
// download, copy, fill), the binary mapper's codes bit for bit for the same Philox draws, GEMMs on
// bf16 weights and at fp32 and bf16 precision (with the bf16 copy of tracked weights, which must
// follow every write), tensor-core attention at bf16, AdamW over several steps, NaN and Inf in the
// inputs of a few elementwise ops coming out at the same places, step graphs (recorded once,
// replayed with new scalars, recorded again when the step changes), and end to end: the tiny
// preset trained for 50 steps from the same seed on both backends gives the same loss curve within
// TF32 rounding, and within bf16 rounding at MatmulPrecision::Bf16.
//
// Without a GPU (or in a build without kernels/cuda) make_cuda_backend returns an error and every
// test is skipped with its reason. test_backend_ops_emu compiles this file against the CPU
// emulation of the CUDA backend (tests/cuda_emu), where every test runs, with a shorter training
// curve and without the T = 1024 attention. The CPU backend is the reference: test_cpu_backend.cpp
// checks it against the op table's double references, test_ops_grad.cpp those by finite
// differences. Not here: the saved attention buffers (probabilities on the CPU, log-sum-exp on
// CUDA: only checked for writes past their end), speed (ftx bench ops).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
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
#include "core/model/model.h"
#include "core/train/train_config.h"
#include "core/train/trainer.h"
#include "datasets/registry.h"
#include "kernels/backend.h"
#include "kernels/base/philox.h"
#include "kernels/cpu/ops_rope.h"
#include "kernels/device_comm.h"
#include "kernels/op_table.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

// ---- limits ---------------------------------------------------------------------------------------
// All limits are on the relative L2 error ||cuda - cpu|| / ||cpu|| over a whole output (the plain
// L2 norm of the difference when the CPU's output is all zero). A wrong index, a lost term or a
// missed accumulation gives errors of order 0.1 to 1, far above every limit here. The op kinds'
// limits and their reasons are the op table's (kernels/op_table.cpp, op_limit_gpu).

const double kExact = op_limit_gpu(OpError::Exact);
const double kElementwise = op_limit_gpu(OpError::Elementwise);
const double kReduction = op_limit_gpu(OpError::Reduction);
const double kTf32 = op_limit_gpu(OpError::Gemm);
const double kMapperTf32 = op_limit_gpu(OpError::Mapper);
const double kBf16 = op_limit_gpu(OpError::Bf16);
const double kAttention = op_limit_gpu(OpError::Attention);
// MatmulPrecision::Fp32 on CUDA: no tensor cores, fp32 products summed in another order than the
// CPU's: a reduction's error.
const double kFp32Gemm = kReduction;
// The binary mapper's backward at bf16: kBf16 with the same cancellation headroom as kMapperTf32.
constexpr double kMapperBf16 = 2e-2;
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

void expect_close(const Outs& ref, const Outs& got, const std::string& key, double limit) {
  const auto r = ref.find(key), g = got.find(key);
  ASSERT_NE(r, ref.end()) << key << " missing from the CPU run";
  ASSERT_NE(g, got.end()) << key << " missing from the CUDA run";
  const double e = op_rel_error(r->second, g->second);
  EXPECT_LE(e, limit) << key << ": relative L2 error CUDA vs CPU; " << op_worst_element(r->second, g->second);
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
  EXPECT_LE(op_rel_error(rf, gf), limit) << what << " (finite elements)";
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

// NCCL's all-reduce for a job of one rank on this GPU (kernels/cuda/nccl_comm.cu): the sum of one
// rank is its data, after a kernel that wrote it on the backend's stream and before a download.
// What a job of two GPUs does is resources/gpu/on_device.sh's two-process check.
TEST_F(BackendOps, NcclAllReduceOfOneRank) {
  if (!nccl_built()) GTEST_SKIP() << "this build has no NCCL";
  auto id = device_comm_id();
  ASSERT_TRUE(id.ok()) << id.error().message;
  auto comm = make_device_comm(gpu(), *id, 0, 1);
  ASSERT_TRUE(comm.ok()) << comm.error().message;
  std::printf("[ nccl     ] %s\n", (*comm)->engine().c_str());
  constexpr size_t n = 1000003;
  const std::vector<float> host = rnd(n, 99);
  DevBuf<float> a(gpu(), host);
  gpu().scale(a.get(), 2.0f, n);  // queued before the reduce
  ASSERT_TRUE((*comm)->allreduce_sum(a.get(), n).ok());
  std::vector<float> expect = host;
  for (float& x : expect) x *= 2.0f;
  EXPECT_EQ(take(a, "allreduce"), expect);
  // The bucketed sums on NCCL's side stream (two buckets), the backend's stream waiting for them
  // before the next op; and ZeRO-1's gather of one rank's one block (a group of one broadcast).
  ASSERT_TRUE((*comm)->start_allreduce_sum(a.get() + n / 2, n - n / 2).ok());
  ASSERT_TRUE((*comm)->start_allreduce_sum(a.get(), n / 2).ok());
  ASSERT_TRUE((*comm)->finish_allreduces().ok());
  gpu().scale(a.get(), 0.5f, n);
  ASSERT_TRUE((*comm)->allgather_blocks(a.get(), {n}).ok());
  EXPECT_EQ(take(a, "bucketed allreduce, allgather"), host);
  EXPECT_FALSE((*comm)->allgather_blocks(a.get(), {n / 2, n - n / 2}).ok()) << "two blocks in a job of one";
}

// ---- the op table: every op at its test sizes ------------------------------------------------------

// Each case of kernels/op_table.h on the CPU and on CUDA from the same inputs, every output within
// the limit of the op's kind of arithmetic (op_limit_gpu), nothing written past a buffer's end.
class OpTable : public ::testing::TestWithParam<OpTestCase> {
 protected:
  void SetUp() override {
    if (!cuda_handle().be) GTEST_SKIP() << "no CUDA backend: " << cuda_handle().why;
  }
};

TEST_P(OpTable, CudaMatchesCpu) {
  const OpCase c = GetParam().build();
#ifdef FTX_EMULATED_GPU
  // One OS thread per CUDA thread: attention at T = 1024 takes minutes (it passed on 2026-11-21).
  if (c.op.rfind("attention", 0) == 0 && c.flops > 1e8) GTEST_SKIP() << c.full_name() << ": too slow in the emulation";
#endif
  SCOPED_TRACE(c.full_name());
  const auto ref = run_op_case(cpu(), c);
  ASSERT_TRUE(ref) << ref.error().message;
  EXPECT_TRUE(ref->overruns.empty()) << "the CPU wrote past a buffer";
  const auto got = run_op_case(*cuda_handle().be, c);
  ASSERT_TRUE(got) << got.error().message;
  for (const std::string& line : op_compare(c, *ref, *got, op_limit_gpu(c.error)))
    ADD_FAILURE() << line << " (" << op_error_name(c.error) << ")";
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTable, ::testing::ValuesIn(op_test_cases()),
                         [](const ::testing::TestParamInfo<OpTestCase>& i) { return i.param.name; });

// ---- matmul ---------------------------------------------------------------------------------------

struct MatmulShape {
  int N, IC, OC;
};
const MatmulShape kMatmulShapes[] = {{333, 130, 77}, {1, 7, 3}, {4, 1, 1}, {64, 64, 29}, {1024, 64, 176}};

std::string matmul_label(const MatmulShape& s) {
  return "N = " + std::to_string(s.N) + ", IC = " + std::to_string(s.IC) + ", OC = " + std::to_string(s.OC);
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

// ---- binary mapper --------------------------------------------------------------

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
  EXPECT_LE(op_rel_error(delta_c, delta_g), kAdamDelta) << "the update; " << op_worst_element(delta_c, delta_g);
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
  EXPECT_LE(op_rel_error(std::vector<float>(c["rstd"].begin() + 1, c["rstd"].end()),
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

// The per-step training loss of the tiny preset (Free Transformer, H = 8) on kTrainDataset, with
// four blocks and half the tokens through the routed ones when `routing` names a router. Empty
// after a test failure.
std::vector<double> train_losses(Backend& be, const std::string& db, Routing routing = Routing::None) {
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
  if (routing != Routing::None) mc.n_layers = 4, mc.routing.kind = routing, mc.routing.capacity = 0.5f;
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

// The largest relative difference of two loss curves and its step (0-based); every CUDA loss must
// be finite (a failure names the first that is not).
std::pair<double, int> worst_step_apart(const std::vector<double>& cpu_losses, const std::vector<double>& gpu_losses) {
  double worst = 0.0;
  int at = 0;
  for (size_t s = 0; s < cpu_losses.size() && s < gpu_losses.size(); ++s) {
    EXPECT_TRUE(std::isfinite(gpu_losses[s])) << "CUDA loss at step " << s + 1 << ": " << gpu_losses[s];
    const double rel = std::abs(gpu_losses[s] - cpu_losses[s]) / cpu_losses[s];
    if (!(rel <= worst)) worst = rel, at = int(s);  // NaN is the worst
  }
  return {worst, at};
}

TEST_F(BackendOps, TrainingCurveMatchesTheCpu) {
  test::TempDir dir("ftx_test_backend_ops_");
  ASSERT_FALSE(dir.path().empty());
  const std::vector<double> lc = train_losses(cpu(), dir / "cpu.db");
  const std::vector<double> lg = train_losses(gpu(), dir / "cuda.db");
  ASSERT_EQ(lc.size(), size_t(kTrainSteps));
  ASSERT_EQ(lg.size(), size_t(kTrainSteps));
  EXPECT_LE(std::abs(lg[0] - lc[0]), kFirstLossRel * lc[0]) << "step 1: cpu " << lc[0] << ", cuda " << lg[0];
  const auto [worst, worst_step] = worst_step_apart(lc, lg);
  EXPECT_LE(worst, kTrainLossRel) << "worst at step " << worst_step + 1 << ": cpu " << lc[worst_step] << ", cuda "
                                  << lg[worst_step];
  if constexpr (kTrainSteps == 50) {
    EXPECT_GE(lc.front() - lc.back(), kMinLossDrop)
        << "the CPU curve did not fall: " << lc.front() << " -> " << lc.back();
  }
}

// Routed compute (MoD, SDT, STT at capacity 1/2) on the GPU follows the CPU over the 50 steps at
// fp32 GEMMs: the top-k choice, the gathered attention at the tokens' own positions, the gated
// write-back and the priors' losses. A score within rounding of the k-th can pick another token
// on the GPU, so the limit is the TF32 one. Only on a real GPU: test_cuda_emu runs 3 steps of each
// router in the emulation.
#ifndef FTX_EMULATED_GPU
TEST_F(BackendOps, RoutedTrainingCurvesFollowTheCpu) {
  test::TempDir dir("ftx_test_backend_ops_");
  ASSERT_FALSE(dir.path().empty());
  PrecisionScope fp32(gpu(), MatmulPrecision::Fp32);
  for (const Routing r : {Routing::Mod, Routing::Sdt, Routing::Stt}) {
    SCOPED_TRACE(routing_name(r));
    const std::string name = routing_name(r);
    const std::vector<double> lc = train_losses(cpu(), dir / (name + "-cpu.db"), r);
    const std::vector<double> lg = train_losses(gpu(), dir / (name + "-cuda.db"), r);
    ASSERT_EQ(lc.size(), size_t(kTrainSteps));
    ASSERT_EQ(lg.size(), size_t(kTrainSteps));
    const auto [worst, worst_step] = worst_step_apart(lc, lg);
    std::printf("[ routed   ] %s: %d steps, cpu %.4f -> %.4f, worst step %d apart by %.2e\n", name.c_str(), kTrainSteps,
                lc.front(), lc.back(), worst_step + 1, worst);
    EXPECT_LE(worst, kTrainLossRel) << "worst at step " << worst_step + 1 << ": cpu " << lc[worst_step] << ", cuda "
                                    << lg[worst_step];
    EXPECT_GE(lc.front() - lc.back(), kMinLossDrop) << "the CPU curve did not fall";
  }
}
#endif

// Generation on a routed model's student path (Model::route_decode: the student's logits, the
// rows gathered, per-row cache slots, SDT's gate, the gated write-back; a prompt prefilled, then
// decode steps) on the GPU gives the CPU's logits and caches the same tokens. fp32 GEMMs, so that
// no student decision rests on TF32 rounding.
TEST_F(BackendOps, RoutedGenerationFollowsTheCpu) {
  PrecisionScope fp32(gpu(), MatmulPrecision::Fp32);
  for (const Routing r : {Routing::Mod, Routing::Sdt, Routing::Stt}) {
    SCOPED_TRACE(routing_name(r));
    auto mc = model_preset("tiny");
    ASSERT_TRUE(mc.ok());
    mc->n_layers = 4, mc->routing.kind = r, mc->routing.capacity = 0.5f, mc->routing.ma_window = 3;
    mc->latent_bits = 4, mc->inject_after = 2;
    const int B = 2, L = 10, P = 4, V = mc->vocab_size;
    Model on_cpu(cpu(), *mc), on_gpu(gpu(), *mc);
    on_cpu.init_weights(4, InitConfig{});
    on_gpu.init_weights(4, InitConfig{});
    auto dc = on_cpu.make_decode_state(B, L), dg = on_gpu.make_decode_state(B, L);
    std::vector<int32_t> prompt(P);
    std::vector<uint32_t> pcodes(P);
    for (int t = 0; t < P; ++t) prompt[size_t(t)] = (t * 7 + 1) % V, pcodes[size_t(t)] = uint32_t(t * 5) % 16;
    std::vector<float> lc(static_cast<size_t>(B) * V), lg(static_cast<size_t>(B) * V), all_c, all_g;
    for (int b = 0; b < B; ++b) {
      on_cpu.prefill(*dc, b, prompt.data(), pcodes.data(), P, 0, Model::PrefillLogits::Last, lc.data());
      on_gpu.prefill(*dg, b, prompt.data(), pcodes.data(), P, 0, Model::PrefillLogits::Last, lg.data());
      all_c.insert(all_c.end(), lc.begin(), lc.begin() + V);
      all_g.insert(all_g.end(), lg.begin(), lg.begin() + V);
    }
    for (int pos = P; pos < L; ++pos) {
      std::vector<int32_t> tok(B);
      std::vector<uint32_t> codes(B);
      for (int b = 0; b < B; ++b) tok[b] = (pos * 5 + b * 3) % V, codes[b] = uint32_t(pos * 7 + b) % 16;
      on_cpu.decode_step(*dc, tok.data(), codes.data(), pos, lc.data());
      on_gpu.decode_step(*dg, tok.data(), codes.data(), pos, lg.data());
      all_c.insert(all_c.end(), lc.begin(), lc.end());
      all_g.insert(all_g.end(), lg.begin(), lg.end());
    }
    EXPECT_LE(op_rel_error(all_c, all_g), 1e-4);
    int cached = 0;
    for (int l : {1, 3})
      for (int b = 0; b < B; ++b) {
        const std::vector<int32_t> want = on_cpu.decode_route_positions(*dc, l, b);
        EXPECT_EQ(on_gpu.decode_route_positions(*dg, l, b), want) << "block " << l << ", sequence " << b;
        cached += int(want.size());
      }
    EXPECT_GT(cached, 0);
    EXPECT_LT(cached, 2 * B * L) << "some tokens skipped, or the test shows nothing";
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
