// The CUDA kernels of kernels/cuda/ops.cu, attention.cu, attention_tc.cu and latent.cu, run on the CPU in an
// emulation of the CUDA threads (tests/cuda_emu: one OS thread per CUDA thread, barriers for
// __syncthreads / __syncwarp, shuffles through a table, WMMA on whole 16 x 16 matrices), against
// references written here in double: attention by its definition, the binary mapper's backward by
// brute force over all 2^H codes, the KL by its closed form, the elementwise ops, norms, losses and
// AdamW by their formulas. CI has no GPU; this is where its
// tests execute the kernels' indexing, masking, tiling and warp reductions. test_backend_ops
// checks the same kernels on a real GPU against the CPU backend.
//
// Also the step graphs of kernels/cuda/step_graph.cu, whose stream capture the emulation records
// and replays: scalars and tables that change between replays, a step that changes shape.
//
// Last, the whole CudaBackend (cuda_backend.cu, with cuBLAS emulated as a loop over TF32- or
// bf16-rounded inputs) trains the tiny model through the Trainer, step graphs and all, and follows
// the CPU backend's loss curve; GEMMs on bf16 weights, and an inference model on them, follow the
// CPU too.
//
// The target compiles these files with cuda=cuda_emu and make_cuda_backend=make_emulated_cuda_backend
// (tests/CMakeLists.txt), so the emulated kernels never collide with the real CUDA library.
//
// ctest runs every test twice, the second time with FTX_EMU_ORDER=reverse (the last block and
// thread first): a missing barrier lets a thread read shared memory before it is written, or
// after it is overwritten, in one order or the other (removing the barrier before the dq staging
// of attention_tc.cu fails only in reverse, the one before its key tiles only in the usual order).
//
// Not here: speed, anything only a GPU shows (races between threads that interleave between
// barriers, shared-memory bank conflicts, cuBLAS's own numerics).
#include <gtest/gtest.h>
#include <unistd.h>
#include <algorithm>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dist/comm.h"
#include "core/io/model_file.h"
#include "core/model/config.h"
#include "core/model/model.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "cuda_runtime.h"  // tests/cuda_emu: the emulation's own controls
#include "datasets/registry.h"
#include "kernels/backend.h"
#include "kernels/base/philox.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/step_graph.h"
#include "kernels/device_comm.h"
#include "kernels/op_trace.h"
#include "nccl.h"  // tests/cuda_emu: the stand-in's call log

namespace ftx {
namespace {

using Vec = std::vector<double>;

// Inputs rounded to float, so that the kernels (float) and the references (double) see the same.
std::vector<float> rnd(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = float(u(gen));
  return v;
}

// ||got - ref|| / ||ref||; infinite on NaN or Inf.
double rel_error(const std::vector<float>& got, const Vec& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// An output buffer of n floats, NaN-filled (an element the kernel forgets stays NaN), with guard
// values after it (a kernel that writes past its output changes them).
class Out {
 public:
  explicit Out(size_t n) : n_(n), buf_(n + kGuard, std::numeric_limits<float>::quiet_NaN()) {
    std::fill(buf_.begin() + n, buf_.end(), kGuardValue);
  }
  float* data() { return buf_.data(); }
  std::vector<float> values() const { return std::vector<float>(buf_.begin(), buf_.begin() + n_); }
  bool guards_intact() const {
    return std::all_of(buf_.begin() + n_, buf_.end(), [](float x) { return x == kGuardValue; });
  }

 private:
  static constexpr size_t kGuard = 16;
  static constexpr float kGuardValue = -12345.678f;
  size_t n_;
  std::vector<float> buf_;
};

// ---- attention ------------------------------------------------------------------------------------

AttnShape shape(int B, int NH, int NKV, int HS, int Tq, int Tk, int Tk_cap, int q_pos0, bool causal) {
  AttnShape s;
  s.B = B, s.NH = NH, s.NKV = NKV, s.HS = HS, s.Tq = Tq, s.Tk = Tk, s.Tk_cap = Tk_cap, s.q_pos0 = q_pos0;
  s.causal = causal;
  return s;
}

struct AttnRef {
  Vec out, dq, dk, dv;
};

// Softmax(q k^T / sqrt(HS)) v over the visible keys, and its gradients for dout, in double.
AttnRef attention_reference(const AttnShape& s, const std::vector<float>& q, const std::vector<float>& k,
                            const std::vector<float>& v, const std::vector<float>& dout) {
  const size_t nq = size_t(s.B) * s.Tq * s.NH * s.HS, nk = size_t(s.B) * s.Tk_cap * s.NKV * s.HS;
  AttnRef r{Vec(nq, 0.0), Vec(nq, 0.0), Vec(nk, 0.0), Vec(nk, 0.0)};
  const int group = s.NH / s.NKV;
  const double scale = 1.0 / std::sqrt(double(s.HS));
  auto qi = [&](int b, int i, int h, int d) { return ((size_t(b) * s.Tq + i) * s.NH + h) * s.HS + d; };
  auto kj = [&](int b, int j, int kh, int d) { return ((size_t(b) * s.Tk_cap + j) * s.NKV + kh) * s.HS + d; };
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < s.Tq; ++i) {
        const int kh = h / group, n = s.causal ? std::min(s.Tk, s.q_pos0 + i + 1) : s.Tk;
        Vec p(n), dp(n);
        double mx = -1e300, sum = 0.0, D = 0.0;
        for (int j = 0; j < n; ++j) {
          double a = 0.0;
          for (int d = 0; d < s.HS; ++d) a += double(q[qi(b, i, h, d)]) * k[kj(b, j, kh, d)];
          p[j] = a * scale;
          mx = std::max(mx, p[j]);
        }
        for (int j = 0; j < n; ++j) sum += p[j] = std::exp(p[j] - mx);
        for (int j = 0; j < n; ++j) p[j] /= sum;
        for (int d = 0; d < s.HS; ++d)
          for (int j = 0; j < n; ++j) r.out[qi(b, i, h, d)] += p[j] * v[kj(b, j, kh, d)];
        for (int j = 0; j < n; ++j) {
          for (int d = 0; d < s.HS; ++d) dp[j] += double(dout[qi(b, i, h, d)]) * v[kj(b, j, kh, d)];
          D += p[j] * dp[j];
        }
        for (int j = 0; j < n; ++j) {
          const double ds = p[j] * (dp[j] - D);
          for (int d = 0; d < s.HS; ++d) {
            r.dq[qi(b, i, h, d)] += scale * ds * k[kj(b, j, kh, d)];
            r.dk[kj(b, j, kh, d)] += scale * ds * q[qi(b, i, h, d)];
            r.dv[kj(b, j, kh, d)] += p[j] * dout[qi(b, i, h, d)];
          }
        }
      }
  return r;
}

// The fp32 kernels (tc = false) or the tensor-core ones; backward when Tk_cap == Tk.
// ctest runs this file twice, the second time with FTX_EMU_ORDER=reverse: the emulation must
// then really start with the last block and the last thread.
// A host vector in a fresh device buffer of `be`, and n floats of a device buffer back.
float* to_device(Backend& be, const std::vector<float>& host) {
  auto* p = static_cast<float*>(be.alloc(host.size() * sizeof(float)));
  be.upload(p, host.data(), host.size() * sizeof(float));
  return p;
}
std::vector<float> to_host(Backend& be, const float* p, size_t n) {
  std::vector<float> h(n);
  be.download(h.data(), p, n * sizeof(float));
  return h;
}

TEST(CudaEmu, RunsBlocksAndThreadsInTheOrderAsked) {
  static std::vector<unsigned> seen;  // (block, thread) in the order they ran, as block * 64 + thread
  seen.clear();
  ftx_emu::run_blocks(
      dim3(3), dim3(64), 0, +[] { seen.push_back(blockIdx.x * 64 + threadIdx.x); });
  ASSERT_EQ(seen.size(), 3u * 64u);
  const char* order = std::getenv("FTX_EMU_ORDER");
  const bool reverse = order != nullptr && std::string(order) == "reverse";
  for (unsigned k = 0; k < seen.size(); ++k) EXPECT_EQ(seen[k], reverse ? 3 * 64 - 1 - k : k) << k;
}

void check_attention(const AttnShape& s, bool tc, double limit, uint64_t seed) {
  SCOPED_TRACE("B " + std::to_string(s.B) + " NH " + std::to_string(s.NH) + " NKV " + std::to_string(s.NKV) + " HS " +
               std::to_string(s.HS) + " Tq " + std::to_string(s.Tq) + " Tk " + std::to_string(s.Tk) + " cap " +
               std::to_string(s.Tk_cap) + " pos0 " + std::to_string(s.q_pos0) + (s.causal ? " causal" : " full") +
               (tc ? ", tensor cores" : ", fp32"));
  const size_t nq = size_t(s.B) * s.Tq * s.NH * s.HS, nk = size_t(s.B) * s.Tk_cap * s.NKV * s.HS;
  const std::vector<float> q = rnd(nq, seed, -2, 2), k = rnd(nk, seed + 1, -2, 2), v = rnd(nk, seed + 2),
                           dout = rnd(nq, seed + 3);
  const AttnRef ref = attention_reference(s, q, k, v, dout);
  Out out(nq), lse(size_t(s.B) * s.NH * s.Tq);
  if (tc)
    cuda::attention_tc_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s, nullptr);
  else
    cuda::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s, nullptr);
  EXPECT_TRUE(out.guards_intact() && lse.guards_intact()) << "forward wrote past its outputs";
  EXPECT_LE(rel_error(out.values(), ref.out), limit) << "out";
  if (s.Tk_cap != s.Tk) return;
  Out dq(nq), dk(nk), dv(nk);
  const std::vector<float> o = out.values(), l = lse.values();
  if (tc)
    cuda::attention_tc_backward(dq.data(), dk.data(), dv.data(), dout.data(), o.data(), l.data(), q.data(), k.data(),
                                v.data(), s, nullptr);
  else
    cuda::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), o.data(), l.data(), q.data(), k.data(),
                             v.data(), s, nullptr);
  EXPECT_TRUE(dq.guards_intact() && dk.guards_intact() && dv.guards_intact()) << "backward wrote past its outputs";
  EXPECT_LE(rel_error(dq.values(), ref.dq), limit) << "dq";
  EXPECT_LE(rel_error(dk.values(), ref.dk), limit) << "dk";
  EXPECT_LE(rel_error(dv.values(), ref.dv), limit) << "dv";
}

// fp32 kernels: reorderings of fp32 sums only (the reference is double).
constexpr double kFp32 = 1e-5;
// Tensor cores: bf16 operands (unit roundoff 2^-9); 2.5e-3..5.6e-3 seen here, a dropped mask or a
// wrong operand gives 0.1..1.7.
constexpr double kBf16 = 2e-2;

TEST(CudaEmu, AttentionFp32) {
  check_attention(shape(1, 2, 1, 9, 10, 45, 45, 5, true), false, kFp32, 10);    // odd HS, query block at an offset
  check_attention(shape(1, 2, 2, 8, 32, 64, 64, 32, true), false, kFp32, 20);   // two key tiles
  check_attention(shape(1, 3, 1, 16, 20, 33, 33, 0, false), false, kFp32, 30);  // non-causal, GQA 3:1
  check_attention(shape(2, 4, 1, 32, 1, 70, 80, 69, true), false, kFp32, 40);   // decode: KV cache of 70 in 80
}

TEST(CudaEmu, AttentionTensorCores) {
  check_attention(shape(1, 2, 1, 32, 70, 70, 70, 0, true), true, kBf16, 50);     // GQA, partial tiles
  check_attention(shape(2, 2, 2, 64, 16, 100, 100, 84, true), true, kBf16, 60);  // 16 queries after 84 positions
  check_attention(shape(1, 1, 1, 32, 130, 77, 77, 0, false), true, kBf16, 70);   // non-causal, Tq != Tk
  check_attention(shape(1, 4, 2, 128, 64, 64, 80, 0, true), true, kBf16, 80);    // HS 128, forward only
  check_attention(shape(1, 2, 1, 64, 128, 128, 128, 0, true), true, kBf16, 90);  // whole tiles
}

TEST(CudaEmu, TensorCoreAttentionTakesOnlyItsShapes) {
  EXPECT_TRUE(cuda::attention_tc_supports(shape(1, 2, 1, 64, 16, 16, 16, 0, true)));
  EXPECT_FALSE(cuda::attention_tc_supports(shape(1, 2, 1, 64, 1, 16, 16, 15, true)));  // decode
  EXPECT_FALSE(cuda::attention_tc_supports(shape(1, 2, 1, 48, 64, 64, 64, 0, true)));  // HS 48
  EXPECT_FALSE(cuda::attention_tc_supports(shape(1, 2, 1, 256, 64, 64, 64, 0, true)));
}

// ---- latent -----------------------------------------------------------------------------------------

// Column-major C (m x n) = A (m x k, ld lda) B (k x n, ld ldb): the GEMM cuBLAS does for the mapper.
void host_gemm(int m, int n, int k, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0.0;
      for (int l = 0; l < k; ++l) acc += double(A[size_t(l) * lda + i]) * B[size_t(j) * ldb + l];
      C[size_t(j) * ldc + i] = float(acc);
    }
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(CudaEmu, BinaryMapperForwardDrawsThePhiloxBits) {
  const int N = 300, H = 7;
  const uint64_t seed = 5, stream = 77;
  const std::vector<float> logits = rnd(size_t(N) * H, 100, -4, 4);
  const uint64_t stream_in_memory = stream;  // as a replayed step graph passes it
  for (const bool by_pointer : {false, true}) {
    Out p(size_t(N) * H);
    std::vector<uint32_t> codes(N, 0xFFFFFFFFu);
    const cuda::Dyn<uint64_t> st =
        by_pointer ? cuda::Dyn<uint64_t>{&stream_in_memory, 0} : cuda::Dyn<uint64_t>{nullptr, stream};
    cuda::binary_mapper_forward(codes.data(), p.data(), logits.data(), N, H, cuda::Dyn<uint64_t>{nullptr, seed}, st,
                                nullptr);
    const std::vector<float> pv = p.values();
    for (int n = 0; n < N; ++n) {
      uint32_t expect = 0;
      for (int h = 0; h < H; ++h) {
        const size_t i = size_t(n) * H + h;
        const float ph = float(sigmoid(logits[i]));
        ASSERT_EQ(pv[i], ph) << "p at " << i;
        expect |= uint32_t(philox_uniform(seed, stream, i) < ph) << h;
      }
      ASSERT_EQ(codes[n], expect) << "row " << n << (by_pointer ? " (stream by pointer)" : "");
    }
  }
}

// dlogits[n,h] += sum_d dG[n,d] G[n,d] (U_h(d) - p[n,h]), dG = dR W, over all 2^H codes, in double.
Vec mapper_backward_reference(const std::vector<float>& dR, const std::vector<float>& W, const std::vector<float>& p,
                              const std::vector<float>& d0, int N, int C, int H) {
  Vec out(d0.begin(), d0.end());
  const uint32_t D = 1u << H;
  for (int n = 0; n < N; ++n)
    for (uint32_t d = 0; d < D; ++d) {
      double dG = 0.0, G = 1.0;
      for (int c = 0; c < C; ++c) dG += double(dR[size_t(n) * C + c]) * W[(size_t(c) << H) + d];
      for (int h = 0; h < H; ++h) G *= (d >> h) & 1 ? p[size_t(n) * H + h] : 1.0 - p[size_t(n) * H + h];
      for (int h = 0; h < H; ++h) out[size_t(n) * H + h] += dG * G * (double((d >> h) & 1) - p[size_t(n) * H + h]);
    }
  return out;
}

TEST(CudaEmu, BinaryMapperBackwardMatchesBruteForce) {
  const struct { int N, C, H; } shapes[] = {{50, 12, 6}, {33, 5, 1}, {9, 3, 10}};
  uint64_t seed = 200;
  for (const auto& sh : shapes) {
    SCOPED_TRACE("N " + std::to_string(sh.N) + " C " + std::to_string(sh.C) + " H " + std::to_string(sh.H));
    const std::vector<float> dR = rnd(size_t(sh.N) * sh.C, seed++), W = rnd(size_t(sh.C) << sh.H, seed++);
    const std::vector<float> p = rnd(size_t(sh.N) * sh.H, seed++, 0.02, 0.98), d0 = rnd(size_t(sh.N) * sh.H, seed++);
    std::vector<float> dl = d0;
    cuda::binary_mapper_backward(dl.data(), dR.data(), W.data(), p.data(), sh.N, sh.C, sh.H, host_gemm, nullptr);
    EXPECT_LE(rel_error(dl, mapper_backward_reference(dR, W, p, d0, sh.N, sh.C, sh.H)), 1e-5);
  }
}

TEST(CudaEmu, KlWithFreeBitsAndPostSampler) {
  const int N = 260, H = 5, C = 40;
  std::vector<float> p = rnd(size_t(N) * H, 300, 0.0, 1.0);
  p[0] = 0.0f, p[1] = 1.0f;  // the limits: log 2 of KL, no gradient
  Out kl(N);
  cuda::kl_forward(kl.data(), p.data(), N, H, nullptr);
  const std::vector<float> klv = kl.values();
  Vec kl_ref(N);
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) {
      const double x = p[size_t(n) * H + h];
      kl_ref[n] += std::log(2.0) + (x > 0 ? x * std::log(x) : 0.0) + (x < 1 ? (1 - x) * std::log(1 - x) : 0.0);
    }
  EXPECT_LE(rel_error(klv, kl_ref), 1e-6);
  EXPECT_TRUE(kl.guards_intact());

  const float kappa = 1.2f, scale = 0.5f, kappa_in_memory = kappa;
  std::vector<float> dl(size_t(N) * H, 0.25f);
  cuda::kl_backward(dl.data(), p.data(), klv.data(), N, N, H, cuda::Dyn<float>{&kappa_in_memory, 0.0f}, scale, nullptr);
  Vec dl_ref(dl.size(), 0.25);
  int above = 0;
  for (int n = 0; n < N; ++n) {
    if (!(klv[n] > kappa)) continue;
    ++above;
    for (int h = 0; h < H; ++h) {
      const double x = p[size_t(n) * H + h];
      if (x > 0 && x < 1) dl_ref[size_t(n) * H + h] += scale * x * (1 - x) * std::log(x / (1 - x));
    }
  }
  EXPECT_GT(above, 0);
  EXPECT_LT(above, N) << "kappa should split the rows";
  EXPECT_LE(rel_error(dl, dl_ref), 1e-6);

  // The batch-mean form: N = 260 rows as B = 20 sequences of T = 13 positions.
  const int B = 20, T = 13;
  Out mean(T);
  cuda::kl_batch_mean(mean.data(), klv.data(), B, T, nullptr);
  EXPECT_TRUE(mean.guards_intact());
  const std::vector<float> mv = mean.values();
  Vec mean_ref(T);
  for (int t = 0; t < T; ++t) {
    for (int b = 0; b < B; ++b) mean_ref[t] += klv[size_t(b) * T + t];
    mean_ref[t] /= B;
  }
  EXPECT_LE(rel_error(mv, mean_ref), 1e-6);
  std::vector<float> sorted = mv;
  std::sort(sorted.begin(), sorted.end());
  const float kappa_m = 0.5f * (sorted[T / 2 - 1] + sorted[T / 2]), kappa_m_in_memory = kappa_m;
  std::vector<float> dlm(size_t(N) * H, 0.25f);
  cuda::kl_backward(dlm.data(), p.data(), mv.data(), T, N, H, cuda::Dyn<float>{&kappa_m_in_memory, 0.0f}, scale,
                    nullptr);
  Vec dlm_ref(dlm.size(), 0.25);
  for (int n = 0; n < N; ++n) {
    if (!(mv[n % T] > kappa_m)) continue;
    for (int h = 0; h < H; ++h) {
      const double x = p[size_t(n) * H + h];
      if (x > 0 && x < 1) dlm_ref[size_t(n) * H + h] += scale * x * (1 - x) * std::log(x / (1 - x));
    }
  }
  EXPECT_LE(rel_error(dlm, dlm_ref), 1e-6);

  const int NR = 24;  // the post-sampler runs a block per row: few rows keep the emulation quick
  std::vector<uint32_t> codes(NR);
  for (int n = 0; n < NR; ++n) codes[n] = uint32_t(n * 7) % 11;  // 11 of the 32 codes: rows share them
  const std::vector<float> W = rnd(size_t(C) << H, 310), dR = rnd(size_t(NR) * C, 311);
  Out R(size_t(NR) * C);
  std::vector<float> dW(W.size(), 0.0f);
  cuda::post_sampler_forward(R.data(), codes.data(), W.data(), NR, C, H, nullptr);
  cuda::post_sampler_backward(dW.data(), dR.data(), codes.data(), NR, C, H, nullptr);
  Vec R_ref(size_t(NR) * C), dW_ref(W.size(), 0.0);
  for (int n = 0; n < NR; ++n)
    for (int c = 0; c < C; ++c) {
      R_ref[size_t(n) * C + c] = W[(size_t(c) << H) + codes[n]];
      dW_ref[(size_t(c) << H) + codes[n]] += dR[size_t(n) * C + c];
    }
  EXPECT_EQ(rel_error(R.values(), R_ref), 0.0);
  EXPECT_TRUE(R.guards_intact());
  EXPECT_LE(rel_error(dW, dW_ref), 1e-6);
}

// ---- step graphs ---------------------------------------------------------------------------------

// y[i] += a * x[i] + sum(table), with a and the table read as a replayed graph would pass them.
__global__ void axpy_table_kernel(float* y, const float* x, cuda::Dyn<float> a, const float* table, int nt, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float t = 0.0f;
  for (int j = 0; j < nt; ++j) t += table[j];
  y[i] += a.get() * x[i] + t;
}

void axpy_table_launch(float* y, const float* x, cuda::Dyn<float> a, const float* table, int nt, int n,
                       cudaStream_t st) {
  FTX_LAUNCH(axpy_table_kernel, 2, 32, 0, st, y, x, a, table, nt, n);
}

// One op as the CUDA backend writes its ops: scalars and tables first, then the op made from the
// launcher and its arguments.
void axpy_table(cuda::StepGraph& g, float* y, const float* x, float a, const std::vector<float>& table) {
  const cuda::Dyn<float> da = g.scalar(a);
  const auto* t = static_cast<const float*>(g.table(table.data(), table.size() * sizeof(float)));
  g.run(cuda::make_op("axpy_table", axpy_table_launch, nullptr, y, x, da, t, static_cast<int>(table.size()), 64));
}

TEST(CudaEmu, StepGraphReplaysWithNewScalarsAndRecordsChangedSteps) {
  cuda::StepGraph g(nullptr);
  std::vector<float> x(64), y(64, 0.0f), other(64, 0.0f);
  for (int i = 0; i < 64; ++i) x[i] = float(i % 7) - 3.0f;
  std::vector<double> expect(64, 0.0), expect_other(64, 0.0);
  auto step = [&](int s, bool extra) {
    const float a = 0.5f * float(s);
    const std::vector<float> table = {float(s), 1.0f, -0.25f * float(s)};
    g.begin();
    axpy_table(g, y.data(), x.data(), a, table);
    if (extra) axpy_table(g, other.data(), x.data(), 2.0f * a, table);
    g.end();
    const double t = table[0] + table[1] + table[2];
    for (int i = 0; i < 64; ++i) {
      expect[i] += double(a) * x[i] + t;
      if (extra) expect_other[i] += 2.0 * a * x[i] + t;
    }
  };
  for (int s = 1; s <= 4; ++s) step(s, false);  // recorded once, then replayed with new values
  EXPECT_EQ(g.captures(), 1);
  EXPECT_EQ(g.replays(), 3);
  step(5, true);  // a different step: recorded again
  step(6, true);  // replayed
  EXPECT_EQ(g.captures(), 2);
  EXPECT_EQ(g.replays(), 4);
  for (int i = 0; i < 64; ++i) {
    ASSERT_NEAR(y[i], expect[i], 1e-4) << i;
    ASSERT_NEAR(other[i], expect_other[i], 1e-4) << i;
  }
  // Outside a step, ops run at once.
  axpy_table(g, y.data(), x.data(), 1.0f, {0.0f});
  for (int i = 0; i < 64; ++i) ASSERT_NEAR(y[i], expect[i] + x[i], 1e-4) << i;
}

// A step that never repeats: three misses in a row turn graphs off, and every step stays right.
TEST(CudaEmu, StepGraphTurnsItselfOffWhenEveryStepDiffers) {
  cuda::StepGraph g(nullptr);
  std::vector<float> x(64, 1.0f);
  std::vector<std::vector<float>> ys(8, std::vector<float>(64, 0.0f));
  for (int s = 0; s < 8; ++s) {
    g.begin();
    axpy_table(g, ys[s].data(), x.data(), float(s + 1), {0.0f});  // a new buffer each step
    g.end();
  }
  EXPECT_EQ(g.replays(), 0);
  EXPECT_EQ(g.captures(), 3) << "the first step and two misses are recorded, the third miss turns graphs off";
  for (int s = 0; s < 8; ++s) ASSERT_EQ(ys[s][5], float(s + 1)) << "step " << s;
}

// An op's key holds every argument of its launch: changing any one of them (or the launcher) gives
// another key, while a Dyn is keyed by its slot, so a new value in the same slot replays.
TEST(CudaEmu, StepGraphKeyHoldsEveryArgumentOfTheLaunch) {
  float y[4] = {}, y2[4] = {}, x[4] = {}, x2[4] = {}, slot[2] = {};
  const float t[1] = {0.0f}, t2[1] = {0.0f};
  const cuda::Dyn<float> a{&slot[0], 1.0f}, a_new_value{&slot[0], 5.0f}, a_other_slot{&slot[1], 1.0f};
  const auto key = [](float* yy, const float* xx, cuda::Dyn<float> aa, const float* tt, int nt, int n) {
    return cuda::make_op("axpy_table", axpy_table_launch, nullptr, yy, xx, aa, tt, nt, n).key;
  };
  const std::vector<uint64_t> base = key(y, x, a, t, 1, 4);
  EXPECT_EQ(key(y, x, a, t, 1, 4), base);
  EXPECT_EQ(key(y, x, a_new_value, t, 1, 4), base) << "a Dyn's value is read from its slot at replay";
  EXPECT_NE(key(y2, x, a, t, 1, 4), base);
  EXPECT_NE(key(y, x2, a, t, 1, 4), base);
  EXPECT_NE(key(y, x, a_other_slot, t, 1, 4), base);
  EXPECT_NE(key(y, x, a, t2, 1, 4), base);
  EXPECT_NE(key(y, x, a, t, 2, 4), base);
  EXPECT_NE(key(y, x, a, t, 1, 3), base);
  const auto other_launcher = [](float*, const float*, cuda::Dyn<float>, const float*, int, int, cudaStream_t) {};
  EXPECT_NE(cuda::make_op("axpy_table", +other_launcher, nullptr, y, x, a, t, 1, 4).key, base);
  EXPECT_NE(cuda::make_op("axpy", axpy_table_launch, nullptr, y, x, a, t, 1, 4).key, base);
  // Every field of an attention shape.
  AttnShape s;
  s.B = 1, s.NH = 2, s.NKV = 1, s.HS = 8, s.Tq = 3, s.Tk = 3, s.Tk_cap = 4, s.q_pos0 = 0, s.causal = true;
  const auto skey = [](const AttnShape& sh) { return cuda::make_key("attention", sh); };
  for (int field = 0; field < 9; ++field) {
    AttnShape c = s;
    int* ints[] = {&c.B, &c.NH, &c.NKV, &c.HS, &c.Tq, &c.Tk, &c.Tk_cap, &c.q_pos0};
    if (field < 8)
      ++*ints[field];
    else
      c.causal = false;
    EXPECT_NE(skey(c), skey(s)) << "field " << field;
  }
}

// The whole backend inside step graphs: a step whose op takes another buffer, size or constant is
// recorded again and computes with the new arguments, never a replay of the recorded ones.
TEST(CudaEmu, BackendStepWithAChangedArgumentIsRecordedAgain) {
  auto made = make_cuda_backend(0);
  ASSERT_TRUE(made.ok()) << made.error().message;
  Backend& be = **made;
  const size_t n = 8;
  auto* x = static_cast<float*>(be.alloc(n * sizeof(float)));
  auto* y = static_cast<float*>(be.alloc(n * sizeof(float)));
  be.fill(x, 1.0f, n);
  be.fill(y, 1.0f, n);
  auto step = [&](float* buf, float s, size_t count) {
    be.begin_graph();
    be.scale(buf, s, count);
    be.end_graph();
  };
  const Backend::GraphStats before = be.graph_stats();
  auto recorded = [&] { return be.graph_stats().captures - before.captures; };
  auto replayed = [&] { return be.graph_stats().replays - before.replays; };
  step(x, 2.0f, n);  // recorded
  step(x, 2.0f, n);  // replayed
  EXPECT_EQ(recorded(), 1);
  EXPECT_EQ(replayed(), 1);
  step(y, 2.0f, n);  // another buffer
  EXPECT_EQ(recorded(), 2);
  step(y, 3.0f, n / 2);  // another constant and size
  EXPECT_EQ(recorded(), 3);
  EXPECT_EQ(replayed(), 1);
  std::vector<float> hx(n), hy(n);
  be.download(hx.data(), x, n * sizeof(float));
  be.download(hy.data(), y, n * sizeof(float));
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(hx[i], 4.0f) << i;
    EXPECT_EQ(hy[i], i < n / 2 ? 6.0f : 2.0f) << i;
  }
  be.release(x);
  be.release(y);
}

// ---- ops.cu ------------------------------------------------------------------------------------------

TEST(CudaEmu, ElementwiseAndReductions) {
  const size_t n = 3001;
  const std::vector<float> a = rnd(n, 400), b = rnd(n, 401);
  std::vector<float> out(n), acc = b, sc = a, filled(n);
  cuda::add(out.data(), a.data(), b.data(), n, nullptr);
  cuda::add_inplace(acc.data(), a.data(), n, nullptr);
  cuda::scale(sc.data(), -1.5f, n, nullptr);
  cuda::fill(filled.data(), 0.75f, n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(out[i], a[i] + b[i]);
    ASSERT_EQ(acc[i], b[i] + a[i]);
    ASSERT_EQ(sc[i], a[i] * -1.5f);
    ASSERT_EQ(filled[i], 0.75f);
  }
  std::vector<double> partial(cuda::kReduceBlocks, -1.0);
  cuda::sum_squares_partials(partial.data(), a.data(), n, nullptr);
  double got = 0.0, expect = 0.0;
  for (double p : partial) got += p;
  for (float x : a) expect += double(x) * x;
  EXPECT_NEAR(got, expect, 1e-9 * expect);

  const int N = 100, C = 70;  // sum_rows: 32 columns x 16 row lanes a block, C not a multiple of 32
  const std::vector<float> row = rnd(C, 402), dout = rnd(size_t(N) * C, 403);
  std::vector<float> bc(size_t(N) * C), dv(C, 0.5f);
  cuda::broadcast_rows(bc.data(), row.data(), N, C, nullptr);
  cuda::sum_rows(dv.data(), dout.data(), N, C, nullptr);
  Vec dv_ref(C, 0.5);
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < C; ++c) {
      ASSERT_EQ(bc[size_t(r) * C + c], row[c]);
      dv_ref[c] += dout[size_t(r) * C + c];
    }
  EXPECT_LE(rel_error(dv, dv_ref), 1e-7);
}

TEST(CudaEmu, EmbeddingRmsnormRopeSwiglu) {
  const int N = 40, C = 50, V = 7;
  std::vector<int32_t> tok(N);
  for (int i = 0; i < N; ++i) tok[i] = (i * 3) % V;  // repeated tokens: the scatter-add collides
  const std::vector<float> wte = rnd(size_t(V) * C, 410), dout = rnd(size_t(N) * C, 411);
  std::vector<float> emb(size_t(N) * C), dwte(size_t(V) * C, 0.0f);
  cuda::embedding_forward(emb.data(), tok.data(), wte.data(), N, C, nullptr);
  cuda::embedding_backward(dwte.data(), dout.data(), tok.data(), N, C, nullptr);
  Vec dwte_ref(dwte.size(), 0.0);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < C; ++c) {
      ASSERT_EQ(emb[size_t(i) * C + c], wte[size_t(tok[i]) * C + c]);
      dwte_ref[size_t(tok[i]) * C + c] += dout[size_t(i) * C + c];
    }
  EXPECT_LE(rel_error(dwte, dwte_ref), 1e-6);

  // RMSNorm: out = w x r, r = 1/sqrt(mean x^2 + eps); dx += r (w g - x <w g, x> r^2 / C); dw += sum g x r.
  const float eps = 1e-6f;
  const std::vector<float> x = rnd(size_t(N) * C, 412, -2, 2), w = rnd(C, 413), g = dout;
  std::vector<float> out(x.size()), rstd(N), dx(x.size(), 0.25f), dw(C, 0.0f);
  cuda::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps, nullptr);
  cuda::rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C, nullptr);
  Vec out_ref(x.size()), dx_ref(x.size(), 0.25), dw_ref(C, 0.0);
  for (int i = 0; i < N; ++i) {
    double ss = 0.0, dot = 0.0;
    for (int c = 0; c < C; ++c) ss += double(x[size_t(i) * C + c]) * x[size_t(i) * C + c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) dot += double(w[c]) * g[size_t(i) * C + c] * x[size_t(i) * C + c];
    for (int c = 0; c < C; ++c) {
      const size_t k = size_t(i) * C + c;
      out_ref[k] = w[c] * x[k] * r;
      dx_ref[k] += r * (w[c] * g[k] - x[k] * dot * r * r / C);
      dw_ref[c] += double(g[k]) * x[k] * r;
    }
  }
  EXPECT_LE(rel_error(out, out_ref), 1e-6);
  EXPECT_LE(rel_error(dx, dx_ref), 1e-5);
  EXPECT_LE(rel_error(dw, dw_ref), 1e-6);

  // RoPE on (B, T, nh, HS): dim i pairs with i + HS/2 at angle pos * theta^(-2i/HS); the backward
  // rotates back.
  const int B = 2, T = 5, nh = 3, HS = 8, pos0 = 4;
  const float theta = 10000.0f;
  const std::vector<float> xr = rnd(size_t(B) * T * nh * HS, 414);
  std::vector<float> fwd = xr, freq(HS / 2);
  for (int i = 0; i < HS / 2; ++i) freq[i] = float(std::pow(double(theta), -2.0 * i / HS));
  cuda::rope(fwd.data(), B, T, nh, HS, pos0, nullptr, freq.data(), 1.0, nullptr);
  Vec fwd_ref(xr.size());
  for (int bt = 0; bt < B * T; ++bt)
    for (int h = 0; h < nh; ++h)
      for (int i = 0; i < HS / 2; ++i) {
        const double ang = double(pos0 + bt % T) * std::pow(double(theta), -2.0 * i / HS);
        const size_t k = (size_t(bt) * nh + h) * HS + i;
        fwd_ref[k] = xr[k] * std::cos(ang) - xr[k + HS / 2] * std::sin(ang);
        fwd_ref[k + HS / 2] = xr[k + HS / 2] * std::cos(ang) + xr[k] * std::sin(ang);
      }
  EXPECT_LE(rel_error(fwd, fwd_ref), 1e-6);
  cuda::rope(fwd.data(), B, T, nh, HS, pos0, nullptr, freq.data(), -1.0, nullptr);
  EXPECT_LE(rel_error(fwd, Vec(xr.begin(), xr.end())), 1e-6);

  const size_t m = 1000;
  const std::vector<float> gate = rnd(m, 415, -4, 4), up = rnd(m, 416), dsw = rnd(m, 417);
  std::vector<float> sw(m), dgate(m), dup(m);
  cuda::swiglu_forward(sw.data(), gate.data(), up.data(), m, nullptr);
  cuda::swiglu_backward(dgate.data(), dup.data(), dsw.data(), gate.data(), up.data(), m, nullptr);
  Vec sw_ref(m), dgate_ref(m), dup_ref(m);
  for (size_t i = 0; i < m; ++i) {
    const double sg = sigmoid(gate[i]);
    sw_ref[i] = gate[i] * sg * up[i];
    dgate_ref[i] = dsw[i] * up[i] * sg * (1.0 + gate[i] * (1.0 - sg));
    dup_ref[i] = dsw[i] * gate[i] * sg;
  }
  EXPECT_LE(rel_error(sw, sw_ref), 1e-6);
  EXPECT_LE(rel_error(dgate, dgate_ref), 1e-6);
  EXPECT_LE(rel_error(dup, dup_ref), 1e-6);
}

TEST(CudaEmu, CrossEntropyInPlace) {
  for (const int V : {29, 1000}) {  // fewer classes than threads, and several per thread
    SCOPED_TRACE("V " + std::to_string(V));
    const int N = 12;
    const std::vector<float> logits = rnd(size_t(N) * V, 420 + V, -5, 5);
    std::vector<int32_t> targets(N);
    for (int i = 0; i < N; ++i) targets[i] = (i * 7) % V;
    Out losses(N);
    std::vector<float> d = logits;
    cuda::crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V, nullptr);
    cuda::crossentropy_backward(d.data(), d.data(), targets.data(), N, V, 0.5f, nullptr);  // in place
    Vec loss_ref(N), d_ref(d.size());
    for (int i = 0; i < N; ++i) {
      double mx = -1e300, sum = 0.0;
      for (int j = 0; j < V; ++j) mx = std::max(mx, double(logits[size_t(i) * V + j]));
      for (int j = 0; j < V; ++j) sum += std::exp(logits[size_t(i) * V + j] - mx);
      loss_ref[i] = std::log(sum) + mx - logits[size_t(i) * V + targets[i]];
      for (int j = 0; j < V; ++j)
        d_ref[size_t(i) * V + j] = 0.5 * (std::exp(logits[size_t(i) * V + j] - mx) / sum - (j == targets[i]));
    }
    EXPECT_LE(rel_error(losses.values(), loss_ref), 1e-6);
    EXPECT_TRUE(losses.guards_intact());
    EXPECT_LE(rel_error(d, d_ref), 1e-5);
  }
}

TEST(CudaEmu, ClipAndAdamwOverSegments) {
  const size_t n = 20011;
  const std::vector<float> g0 = rnd(n, 430, -2, 2);
  double norm = 0.0;
  for (float x : g0) norm += double(x) * x;
  norm = std::sqrt(norm);
  std::vector<double> partial(cuda::kReduceBlocks);
  for (const double limit : {0.0, 2 * norm, norm / 4}) {
    std::vector<float> g = g0;
    float got = -1.0f, factor = -1.0f;
    cuda::clip_grad_norm(g.data(), n, float(limit), &got, partial.data(), &factor, nullptr);
    EXPECT_NEAR(got, norm, 1e-6 * norm);
    const double k = limit > 0 && limit < norm ? limit / norm : 1.0;
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(g[i], g0[i] * k, 1e-6 * std::fabs(g0[i]) + 1e-12) << limit;
  }

  // Segments with a gap before, between and after them: gaps stay untouched.
  const AdamWSegment segs[] = {{3, 9000, 0.1f}, {9003, 1, 0.0f}, {9010, 10990, 0.05f}};
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  std::vector<float> param = rnd(n, 431), m(n, 0.0f), v(n, 0.0f);
  std::vector<__nv_bfloat16> mirror(n, __float2bfloat16(-7.0f));
  Vec p_ref(param.begin(), param.end()), m_ref(n, 0.0), v_ref(n, 0.0);
  for (int t = 1; t <= 3; ++t) {
    const float bc1 = float(1.0 / (1.0 - std::pow(double(b1), t))), bc2 = float(1.0 / (1.0 - std::pow(double(b2), t)));
    cuda::adamw(param.data(), g0.data(), m.data(), v.data(), mirror.data(), segs, 3, 20000, cuda::Dyn<float>{&lr, 0.0f},
                b1, b2, eps, cuda::Dyn<float>{nullptr, bc1}, cuda::Dyn<float>{&bc2, 0.0f}, nullptr);
    for (const AdamWSegment& sg : segs)
      for (size_t i = sg.offset; i < sg.offset + sg.numel; ++i) {
        m_ref[i] = b1 * m_ref[i] + (1.0 - b1) * g0[i];
        v_ref[i] = b2 * v_ref[i] + (1.0 - b2) * double(g0[i]) * g0[i];
        const double mh = m_ref[i] / (1.0 - std::pow(double(b1), t)), vh = v_ref[i] / (1.0 - std::pow(double(b2), t));
        p_ref[i] -= lr * (mh / (std::sqrt(vh) + eps) + double(sg.weight_decay) * p_ref[i]);
      }
  }
  EXPECT_LE(rel_error(param, p_ref), 1e-6);
  EXPECT_LE(rel_error(m, m_ref), 1e-6);
  for (const size_t gap : {size_t(0), size_t(2), size_t(9004), size_t(9009), size_t(20010)}) {
    EXPECT_EQ(param[gap], float(p_ref[gap])) << "gap element " << gap << " was updated";
    EXPECT_EQ(__bfloat162float(mirror[gap]), -7.0f) << "gap element " << gap << " reached the mirror";
  }
  for (size_t i = 3; i < 9003; ++i)
    ASSERT_EQ(__bfloat162float(mirror[i]), __bfloat162float(__float2bfloat16(param[i])));
}

// ---- the whole backend ---------------------------------------------------------------------------

// out (N x C) = bf16(x) bf16(w)^T in double, w (C x C): what a bf16 GEMM computes.
Vec bf16_product(const std::vector<float>& x, const std::vector<float>& w, int N, int C) {
  auto r = [](float v) { return double(__bfloat162float(__float2bfloat16(v))); };
  Vec out(size_t(N) * C, 0.0);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < C; ++o)
      for (int i = 0; i < C; ++i) out[size_t(n) * C + o] += r(x[size_t(n) * C + i]) * r(w[size_t(o) * C + i]);
  return out;
}

// At bf16 a GEMM input that is not a weight is rounded once for a run of GEMMs that read it (q, k
// and v share their input), again once a GEMM or any other op has written into it.
TEST(CudaEmu, Bf16GemmsRoundASharedInputOnceAndAgainAfterAWrite) {
  auto emu = make_cuda_backend(0);
  ASSERT_TRUE(emu.ok()) << emu.error().message;
  std::unique_ptr<Backend> be = std::move(*emu);
  const Status bf16 = be->set_matmul_precision(MatmulPrecision::Bf16);
  ASSERT_TRUE(bf16.ok()) << bf16.error().message;
  const int N = 24, C = 32;
  const size_t nx = size_t(N) * C, nw = size_t(C) * C;
  auto dev = [&](const std::vector<float>& h) { return to_device(*be, h); };
  auto host = [&](const float* p, size_t n) { return to_host(*be, p, n); };
  std::vector<float> x = rnd(nx, 1), weights = rnd(3 * nw, 2);
  float* w = dev(weights);
  be->track_weights(w, 3 * nw);
  auto weight = [&](int i) { return std::vector<float>(weights.begin() + i * nw, weights.begin() + (i + 1) * nw); };
  const std::vector<float> w0 = weight(0), w1 = weight(1), w2 = weight(2);
  float* X = dev(x);
  float *Y0 = dev(std::vector<float>(nx)), *Y1 = dev(std::vector<float>(nx)), *Y2 = dev(std::vector<float>(nx));
  auto made = [&] { return be->graph_stats().roundings; };

  int64_t before = made();
  be->matmul_forward(Y0, X, f32_weight(w), N, C, C, false);
  be->matmul_forward(Y1, X, f32_weight(w + nw), N, C, C, false);
  be->matmul_forward(Y2, X, f32_weight(w + 2 * nw), N, C, C, false);
  EXPECT_EQ(made() - before, 1) << "three GEMMs on one input";
  EXPECT_LE(rel_error(host(Y0, nx), bf16_product(x, w0, N, C)), 1e-5);
  EXPECT_LE(rel_error(host(Y2, nx), bf16_product(x, w2, N, C)), 1e-5);

  // A GEMM writes X: the next GEMM on X must see the new values.
  const std::vector<float> y1 = host(Y1, nx);
  before = made();
  be->matmul_forward(Y0, X, f32_weight(w), N, C, C, false);       // X rounded and kept
  be->matmul_forward(X, Y1, f32_weight(w + nw), N, C, C, false);  // X = Y1 w1^T
  be->matmul_forward(Y2, X, f32_weight(w + 2 * nw), N, C, C, false);
  EXPECT_EQ(made() - before, 3) << "X, Y1, then X again";
  x = host(X, nx);
  EXPECT_LE(rel_error(x, bf16_product(y1, w1, N, C)), 1e-5);
  EXPECT_LE(rel_error(host(Y2, nx), bf16_product(x, w2, N, C)), 1e-5) << "a stale rounding of X was used";

  // Another op writes X: likewise.
  be->matmul_forward(Y0, X, f32_weight(w), N, C, C, false);
  be->scale(X, -2.0f, nx);
  before = made();
  be->matmul_forward(Y2, X, f32_weight(w + 2 * nw), N, C, C, false);
  EXPECT_EQ(made() - before, 1);
  for (float& v : x) v *= -2.0f;
  EXPECT_LE(rel_error(host(Y2, nx), bf16_product(x, w2, N, C)), 1e-5) << "a stale rounding of X was used";

  // matmul_backward rounds dout once for dinp and dw; the weight comes from the mirror.
  float* dW = dev(std::vector<float>(nw));
  before = made();
  be->matmul_backward(Y1, dW, X, Y0, f32_weight(w), N, C, C, false);
  EXPECT_EQ(made() - before, 2) << "dout and inp";

  // Eight roundings are kept at most. A GEMM whose first input is the oldest kept and whose
  // second is new must not evict the first before it has read it (freed memory is NaN here).
  std::vector<float*> inputs;
  for (int i = 0; i < 7; ++i) inputs.push_back(dev(rnd(nx, 10 + i)));
  be->fill(dW, 0.0f, nw);  // an op other than a GEMM: nothing is kept after it
  for (float* in : inputs) be->matmul_forward(Y0, in, f32_weight(w), N, C, C, false);
  be->matmul_forward(Y0, X, f32_weight(w), N, C, C, false);  // 8 kept, inputs[0] the oldest
  before = made();
  be->matmul_backward(nullptr, dW, Y2, inputs[0], f32_weight(w), N, C, C, false);  // dW = Y2^T inputs[0]
  EXPECT_EQ(made() - before, 1) << "inputs[0] kept, Y2 new";
  const std::vector<float> in0 = host(inputs[0], nx), y2 = host(Y2, nx), dw = host(dW, nw);
  Vec ref(nw, 0.0);
  auto r = [](float v) { return double(__bfloat162float(__float2bfloat16(v))); };
  for (int o = 0; o < C; ++o)
    for (int i = 0; i < C; ++i)
      for (int n = 0; n < N; ++n) ref[size_t(o) * C + i] += r(y2[size_t(n) * C + o]) * r(in0[size_t(n) * C + i]);
  EXPECT_LE(rel_error(dw, ref), 1e-5) << "an input freed before its GEMM read it";
  for (float* p : inputs) be->release(p);
  for (float* p : {w, X, Y0, Y1, Y2, dW}) be->release(p);
}

// A bf16 weight makes a GEMM a bf16 one at any precision (TF32 here, the default): the weight goes to
// cuBLAS as it is, the input is rounded once for the GEMMs that share it. In a step graph, the same
// buffer read as fp32 weights and then as bf16 ones is another op: recorded anew, not replayed.
TEST(CudaEmu, Bf16WeightsGoToCublasAsTheyAre) {
  auto made_be = make_cuda_backend(0);
  ASSERT_TRUE(made_be.ok()) << made_be.error().message;
  std::unique_ptr<Backend> be = std::move(*made_be);
  ASSERT_EQ(be->matmul_precision(), MatmulPrecision::Tf32);
  const int N = 24, C = 32;
  const size_t nx = size_t(N) * C, nw = size_t(C) * C;
  const std::vector<float> x = rnd(nx, 31), w32 = rnd(6 * nw, 32);
  std::vector<uint16_t> w16(w32.size());  // (6 C, C): three weights, then room to read as nw floats
  std::vector<float> widened(w16.size());
  for (size_t i = 0; i < w16.size(); ++i) w16[i] = fp32_to_bf16(w32[i]), widened[i] = bf16_to_fp32(w16[i]);
  auto* w = static_cast<uint16_t*>(be->alloc(w16.size() * sizeof(uint16_t)));
  be->upload(w, w16.data(), w16.size() * sizeof(uint16_t));
  auto dev = [&](const std::vector<float>& h) { return to_device(*be, h); };
  auto host = [&](const float* p, size_t n) { return to_host(*be, p, n); };
  auto weight = [&](int i) { return std::vector<float>(widened.begin() + i * nw, widened.begin() + (i + 1) * nw); };
  float *X = dev(x), *Y0 = dev(std::vector<float>(nx)), *Y1 = dev(std::vector<float>(nx)),
        *Y2 = dev(std::vector<float>(nx));

  const int64_t before = be->graph_stats().roundings;
  be->matmul_forward(Y0, X, bf16_weight(w), N, C, C, false);
  be->matmul_forward(Y1, X, bf16_weight(w + nw), N, C, C, false);
  be->matmul_forward(Y2, X, bf16_weight(w + 2 * nw), N, C, C, false);
  EXPECT_EQ(be->graph_stats().roundings - before, 1) << "three GEMMs on one input";
  EXPECT_LE(rel_error(host(Y0, nx), bf16_product(x, weight(0), N, C)), 1e-5);
  EXPECT_LE(rel_error(host(Y2, nx), bf16_product(x, weight(2), N, C)), 1e-5);

  // dinp = dout w with dout = Y1: w (C x C) transposed against bf16_product's layout.
  const std::vector<float> dout = host(Y1, nx), w1 = weight(1);
  std::vector<float> w1t(nw);
  for (int o = 0; o < C; ++o)
    for (int i = 0; i < C; ++i) w1t[size_t(i) * C + o] = w1[size_t(o) * C + i];
  be->matmul_backward(Y0, nullptr, Y1, X, bf16_weight(w + nw), N, C, C, false);
  EXPECT_LE(rel_error(host(Y0, nx), bf16_product(dout, w1t, N, C)), 1e-5);

  // Step graphs: fp32 (recorded), fp32 (replayed), the same pointer as bf16 (recorded again).
  const Backend::GraphStats g0 = be->graph_stats();
  for (const DType t : {DType::F32, DType::F32, DType::BF16}) {
    be->begin_graph();
    be->matmul_forward(Y2, X, WeightRef{w, t}, N, C, C, false);
    be->end_graph();
  }
  EXPECT_EQ(be->graph_stats().captures - g0.captures, 2);
  EXPECT_EQ(be->graph_stats().replays - g0.replays, 1);
  EXPECT_LE(rel_error(host(Y2, nx), bf16_product(x, weight(0), N, C)), 1e-5) << "the replay of the fp32 product";
  be->release(w);
  for (float* p : {X, Y0, Y1, Y2}) be->release(p);
}

// An inference-only model on bf16 GEMM weights (Model::create_inference): uploaded as they are, the
// emulated GPU's forward and generation give the CPU's logits on the same weights, within the bf16
// rounding of the activations that only the GPU does (1.2e-3 here; a misread weight gives O(1)).
TEST(CudaEmu, InferenceOnBf16WeightsFollowsTheCpu) {
  auto made_emu = make_cuda_backend(0);
  ASSERT_TRUE(made_emu.ok()) << made_emu.error().message;
  std::unique_ptr<Backend> emu = std::move(*made_emu);
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  auto mc = model_preset("tiny");
  ASSERT_TRUE(mc.ok());
  mc->latent_bits = 6, mc->inject_after = mc->n_layers / 2, mc->tie_embeddings = true;
  Model fp32(*cpu, *mc);
  fp32.init_weights(7, InitConfig{});
  std::vector<float> arena(fp32.num_params());
  fp32.save_params(arena.data());
  std::vector<std::vector<uint16_t>> bf(fp32.specs().size());
  for (size_t i = 0; i < bf.size(); ++i) {
    const ParamSpec& s = fp32.specs()[i];
    if (s.gemm_weight)
      for (int64_t j = 0; j < s.numel; ++j) bf[i].push_back(fp32_to_bf16(arena[s.offset + j]));
  }
  auto source = [&](const ParamSpec& s) {
    const size_t i = size_t(find_param(fp32.specs(), s.name) - fp32.specs().data());
    return s.gemm_weight ? bf16_weight(bf[i].data()) : f32_weight(arena.data() + s.offset);
  };
  auto on_cpu = Model::create_inference(*cpu, *mc, source), on_emu = Model::create_inference(*emu, *mc, source);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.error().message;
  ASSERT_TRUE(on_emu.ok()) << on_emu.error().message;
  for (size_t i = 0; i < bf.size(); ++i) {
    if (!bf[i].empty()) {
      EXPECT_NE((*on_emu)->tensors()[i].ptr, bf[i].data()) << "host memory handed to the GPU";
    }
  }

  const int B = 2, T = 9, V = mc->vocab_size;
  std::vector<int32_t> tokens(size_t(B) * T);
  std::vector<uint32_t> codes(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 7 + 3) % V, codes[i] = uint32_t(i * 5) % 64;
  std::vector<float> fc(tokens.size() * V), fe(fc.size());
  for (auto [m, out] : {std::pair{on_cpu->get(), &fc}, std::pair{on_emu->get(), &fe}}) {
    auto st = m->make_state(B, T);
    (void)m->forward(*st, tokens.data(), nullptr, codes.data(), 1, 1, 0.0f);
    m->read_logits(*st, out->data());
  }
  EXPECT_LE(rel_error(fe, Vec(fc.begin(), fc.end())), 1e-2) << "forward";

  auto dc = (*on_cpu)->make_decode_state(B, T), de = (*on_emu)->make_decode_state(B, T);
  std::vector<float> lc(size_t(B) * V), le(lc.size()), all_c, all_e;
  for (int pos = 0; pos < T; ++pos) {
    std::vector<int32_t> tok(B);
    std::vector<uint32_t> z(B);
    for (int b = 0; b < B; ++b) tok[b] = tokens[size_t(b) * T + pos], z[b] = codes[size_t(b) * T + pos];
    (*on_cpu)->decode_step(*dc, tok.data(), z.data(), pos, lc.data());
    (*on_emu)->decode_step(*de, tok.data(), z.data(), pos, le.data());
    all_c.insert(all_c.end(), lc.begin(), lc.end());
    all_e.insert(all_e.end(), le.begin(), le.end());
  }
  EXPECT_LE(rel_error(all_e, Vec(all_c.begin(), all_c.end())), 1e-2) << "generation";
}

// Real checkpoint directories (transformers-written: bf16 with llama3 RoPE scaling, f32 with q/k/v/o
// biases, qwen2) loaded by ModelFile onto the device (bf16 weights uploaded as they are from the
// map) follow the CPU: prefill logits at every position, then a batch of two sequences at
// different positions decoding together.
TEST(CudaEmu, ModelFilesOnTheDeviceFollowTheCpu) {
  for (const char* name : {"gqa_llama3", "tied_bias", "qwen2"}) {
    SCOPED_TRACE(name);
    auto file = ModelFile::open(std::string(FTX_FIXTURE_DIR) + "/real/tiny_" + name);
    ASSERT_TRUE(file.ok()) << file.error().message;
    auto cpu = make_cpu_backend();
    auto emu = make_cuda_backend(0);
    ASSERT_TRUE(emu.ok()) << emu.error().message;
    auto on_cpu = (*file)->load(*cpu), on_emu = (*file)->load(**emu);
    ASSERT_TRUE(on_cpu.ok() && on_emu.ok());
    const int V = (*on_cpu)->config().vocab_size;
    const std::vector<int32_t> a = {5, 17, 200, 3, 42}, b = {9, 1, 77};
    std::vector<float> fc, fe;
    for (auto [m, out] : {std::pair{on_cpu->get(), &fc}, std::pair{on_emu->get(), &fe}}) {
      auto d = m->make_decode_state(2, 12);
      std::vector<float> all(a.size() * size_t(V)), last(static_cast<size_t>(V)), step(size_t(2) * V);
      m->prefill(*d, 0, a.data(), nullptr, int(a.size()), 0, Model::PrefillLogits::All, all.data());
      m->prefill(*d, 1, b.data(), nullptr, int(b.size()), 0, Model::PrefillLogits::Last, last.data());
      out->insert(out->end(), all.begin(), all.end());
      out->insert(out->end(), last.begin(), last.end());
      std::vector<int32_t> tok = {11, 12};
      for (int k = 0; k < 4; ++k) {
        const std::vector<int> pos = {int(a.size()) + k, int(b.size()) + k};
        m->decode_step(*d, tok.data(), nullptr, pos.data(), step.data());
        out->insert(out->end(), step.begin(), step.end());
        tok = {int32_t(20 + k), int32_t(30 + k)};
      }
    }
    // bf16 inputs to the device's GEMMs. The error depends on the CPU the reference runs on: on an
    // AVX2-only EPYC (2026-11-27) gqa_llama3 measured 0.006-0.012 at every prompt position and
    // decode step alike (bf16 rounding through three layers, not one wrong row: that gives 0.1-1),
    // the other two 0.001-0.007. 2e-2 keeps that margin on every machine.
    EXPECT_LE(rel_error(fe, Vec(fc.begin(), fc.end())), 2e-2);
  }
}

// Per-step losses of the tiny preset (Free Transformer, H = 8) on short coin-flip sequences: every
// op of a training step, at a size the emulation runs in seconds.
// With routing: 4 blocks, Z into block 2, blocks 1 and 3 routed at capacity 1/2.
// With `comm`: as rank comm.rank() of a data-parallel job, with `device` summing its gradients.
std::vector<double> tiny_losses(Backend& be, int steps, Routing routing = Routing::None, Comm* comm = nullptr,
                                std::unique_ptr<DeviceComm> device = nullptr,
                                DataParallelOptions options = {false, 0}) {
  TrainConfig tc;
  tc.dataset = "coinflip", tc.dataset_options["coinflip_len"] = 16;
  tc.preset = "tiny", tc.steps = steps, tc.batch = 4, tc.warmup = 2, tc.lr = 3e-3f;
  tc.eval_every = 0, tc.checkpoint_every = 0, tc.seed = 5;
  auto data = make_dataset(tc);
  auto mc = model_preset("tiny");
  EXPECT_TRUE(data && mc.ok());
  if (!data || !mc) return {};
  if (routing != Routing::None) mc->n_layers = 4, mc->routing.kind = routing, mc->routing.capacity = 0.5f;
  mc->latent_bits = 8, mc->inject_after = mc->n_layers / 2;
  mc->vocab_size = data->tokenizer().vocab_size();
  mc->max_seq_len = std::max(mc->max_seq_len, data->seq_len());
  auto trainer = Trainer::start(be, *mc, data->tokenizer().clone(), tc, data->seq_len(), ":memory:", "emu");
  EXPECT_TRUE(trainer.ok()) << (trainer ? "" : trainer.error().message);
  if (!trainer) return {};
  if (comm) {
    const Status joined = (*trainer)->use_comm(*comm, std::move(device), options);
    EXPECT_TRUE(joined.ok()) << joined.error().message;
  }
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) losses.push_back((*trainer)->step_once(*data).stats.loss);
  return losses;
}

TEST(CudaEmu, WholeBackendTrainsLikeTheCpuWithStepGraphs) {
  constexpr int kSteps = 5;
  auto made = make_cuda_backend(0);  // the emulated one (see the top)
  ASSERT_TRUE(made.ok()) << made.error().message;
  std::unique_ptr<Backend> emu = std::move(*made);
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const std::vector<double> ref = tiny_losses(*cpu, kSteps);
  for (const MatmulPrecision prec : {MatmulPrecision::Tf32, MatmulPrecision::Bf16}) {
    SCOPED_TRACE(matmul_precision_name(prec));
    const Status set = emu->set_matmul_precision(prec);
    ASSERT_TRUE(set.ok()) << set.error().message;
    const Backend::GraphStats before = emu->graph_stats();
    const std::vector<double> got = tiny_losses(*emu, kSteps);
    ASSERT_EQ(got.size(), ref.size());
    const double limit = prec == MatmulPrecision::Bf16 ? 5e-2 : 2e-2;  // as in test_backend_ops
    for (int s = 0; s < kSteps; ++s)
      EXPECT_LE(std::abs(got[s] - ref[s]), limit * ref[s])
          << "step " << s + 1 << ": cpu " << ref[s] << ", emulated cuda " << got[s];
    EXPECT_LT(got.back(), got.front()) << "the emulated run does not learn";
    EXPECT_EQ(emu->graph_stats().captures - before.captures, 1) << "one recording per run";
    EXPECT_EQ(emu->graph_stats().replays - before.replays, kSteps - 1);
  }
}

// ftx bench ops on a GPU: the timed trace (each op between synchronizes) runs the step op by op
// instead of recording a step graph, in which CUDA refuses a synchronize; untimed, the step graph
// goes through to the backend.
TEST(CudaEmu, TimedOpTraceRunsTheStepWithoutAGraph) {
  auto made = make_cuda_backend(0);  // the emulated one (see the top)
  ASSERT_TRUE(made.ok()) << made.error().message;
  std::unique_ptr<Backend> emu = std::move(*made);
  OpTraceBackend trace(*emu);
  const Backend::GraphStats before = emu->graph_stats();
  trace.record(true, true);
  ASSERT_EQ(tiny_losses(trace, 2).size(), 2u);
  trace.record(false);
  EXPECT_EQ(emu->graph_stats().captures, before.captures) << "a step graph while timed";
  ASSERT_FALSE(trace.calls().empty());
  for (const OpCall& c : trace.calls()) EXPECT_GT(c.seconds, 0.0) << c.op;
  trace.record(true);
  ASSERT_EQ(tiny_losses(trace, 2).size(), 2u);
  EXPECT_EQ(emu->graph_stats().captures, before.captures + 1) << "untimed, the step graph is recorded";
}

// A routed model's training step (the router, top-k, the block on the gathered selection at its
// positions, the gated write-back, and their backward) follows the CPU's, each learned router. At
// fp32 GEMMs: with TF32 a score near the k-th may rank differently and change the choice (measured:
// 3 % apart at step 3), which is rounding, not a wrong kernel.
TEST(CudaEmu, RoutedModelsTrainLikeTheCpu) {
  constexpr int kSteps = 3;
  auto made = make_cuda_backend(0);
  ASSERT_TRUE(made.ok()) << made.error().message;
  std::unique_ptr<Backend> emu = std::move(*made);
  ASSERT_TRUE(emu->set_matmul_precision(MatmulPrecision::Fp32).ok());
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  for (Routing r : {Routing::Mod, Routing::Sdt, Routing::Stt}) {
    SCOPED_TRACE(routing_name(r));
    const std::vector<double> ref = tiny_losses(*cpu, kSteps, r), got = tiny_losses(*emu, kSteps, r);
    ASSERT_EQ(got.size(), ref.size());
    for (int s = 0; s < kSteps; ++s)
      EXPECT_LE(std::abs(got[s] - ref[s]), 1e-3 * ref[s])
          << "step " << s + 1 << ": cpu " << ref[s] << ", emulated cuda " << got[s];
  }
}

// Rank 0 of a job of two ranks that mirror it (the stand-in nccl.h's model): each sum is twice this
// rank's value; broadcast and allgather copy.
class MirrorComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string engine() const override { return "mirror"; }
  [[noreturn]] void abort_job(int code) override { std::exit(code); }
  Status allreduce_sum(float* data, size_t n) override {
    for (size_t i = 0; i < n; ++i) data[i] += data[i];
    return {};
  }
  Status allreduce_sum(double* data, size_t n) override {
    for (size_t i = 0; i < n; ++i) data[i] += data[i];
    return {};
  }
  Status broadcast(void*, size_t, int) override { return {}; }
  Status start_allreduce_sum(float* data, size_t n) override { return allreduce_sum(data, n); }
  Status progress() override { return {}; }
  Status finish_allreduces() override { return {}; }
  Status allgather_blocks(float*, const std::vector<size_t>&) override { return {}; }  // not used: no ZeRO-1 here
  Status gather_blocks(const float*, float*, const std::vector<size_t>&, int) override { return {}; }
  Status allgather(const void* in, size_t bytes, void* out) override {
    for (int q = 0; q < 2; ++q) std::memcpy(static_cast<char*>(out) + size_t(q) * bytes, in, bytes);
    return {};
  }
};

// A rank of a two-rank job on the emulated GPU at fp32 GEMMs: its host communicator (mirrored
// ranks) and, on demand, its NCCL communicator (the stand-in's, rank 0 of 2).
class EmuNcclJob : public ::testing::Test {
 protected:
  void SetUp() override {
    auto made = make_cuda_backend(0);
    ASSERT_TRUE(made.ok()) << made.error().message;
    emu = std::move(*made);
    ASSERT_TRUE(emu->set_matmul_precision(MatmulPrecision::Fp32).ok());
    ASSERT_TRUE(nccl_built());
  }
  std::unique_ptr<DeviceComm> rank0_of_2() {
    auto id = device_comm_id();
    EXPECT_TRUE(id.ok()) << id.error().message;
    auto device = make_device_comm(*emu, *id, 0, 2);
    EXPECT_TRUE(device.ok()) << device.error().message;
    return device.ok() ? std::move(*device) : nullptr;
  }
  std::string main_stream() const { return ftx_emu::stream_name(cuda::backend_handles(*emu).stream); }
  std::unique_ptr<Backend> emu;
  MirrorComm host;
};

// A job's gradients summed on the GPUs (kernels/cuda/nccl_comm.cu on the stand-in NCCL) give the
// step the host path gives (download, MPI, upload): the same losses bit for bit, since both sum
// two equal copies and halve them. And the glue's calls: one communicator of 2 at rank 0 on the
// backend's stream, one in-place reduce of every gradient per step, destroyed with the trainer.
TEST_F(EmuNcclJob, GradientsSummedOnTheGpusFollowTheHostPath) {
  constexpr int kSteps = 4;
  const std::vector<double> through_host = tiny_losses(*emu, kSteps, Routing::None, &host);
  std::unique_ptr<DeviceComm> device = rank0_of_2();
  ASSERT_TRUE(device);
  EXPECT_EQ(device->engine(), "NCCL 2.28.9");
  const EmuNcclLog before = emu_nccl_log();
  const std::vector<double> on_gpus = tiny_losses(*emu, kSteps, Routing::None, &host, std::move(device));
  ASSERT_EQ(on_gpus.size(), size_t(kSteps));
  for (int s = 0; s < kSteps; ++s) EXPECT_EQ(on_gpus[s], through_host[s]) << "step " << s + 1;
  const EmuNcclLog& log = emu_nccl_log();
  EXPECT_EQ(log.nranks, 2);
  EXPECT_EQ(log.rank, 0);
  EXPECT_EQ(log.allreduces - before.allreduces, kSteps) << "one reduce of all gradients per step";
  EXPECT_EQ(log.send, log.recv) << "in place";
  EXPECT_GT(log.count, size_t(100000)) << "every gradient (the tiny preset's parameters)";
  EXPECT_EQ(log.stream, cuda::backend_handles(*emu).stream) << "queued on the backend's stream";
  EXPECT_EQ(log.destroys - before.destroys, 1) << "the communicator goes with its trainer";
}

// With buckets (--bucket-mb) the sums overlap the backward: each block's gradients are sent on
// NCCL's own stream as soon as the backward has written them, after a wait on the backend's
// stream, and the backend's stream waits for them all before the 1/P and the optimizer. The
// losses stay those of the host path bit for bit; the stream order is what only a GPU can race.
TEST_F(EmuNcclJob, BucketedGradientSumsOverlapTheBackwardOnTheirOwnStream) {
  constexpr int kSteps = 3;
  const std::vector<double> through_host = tiny_losses(*emu, kSteps, Routing::None, &host);
  const EmuNcclLog before = emu_nccl_log();
  std::vector<std::string>& trace = ftx_emu::stream_trace();
  trace.clear();
  constexpr double kOneFloat = 1e-6;  // every block its own bucket
  const std::vector<double> bucketed =
      tiny_losses(*emu, kSteps, Routing::None, &host, rank0_of_2(), {false, kOneFloat});
  ASSERT_EQ(bucketed.size(), size_t(kSteps));
  for (int s = 0; s < kSteps; ++s) EXPECT_EQ(bucketed[s], through_host[s]) << "step " << s + 1;

  const std::string main = main_stream();
  const int layers = model_preset("tiny")->n_layers;
  const int reduces = emu_nccl_log().allreduces - before.allreduces;
  ASSERT_EQ(reduces % kSteps, 0);
  EXPECT_GE(reduces / kSteps, layers + 1) << "a bucket per block, then the embedding and the rest";
  // Per step: ("wait side on main", "allreduce n on side") per bucket, then "wait main on side".
  std::string side;
  size_t i = 0, floats = 0;
  for (int s = 0; s < kSteps; ++s) {
    int sums = 0;
    while (i + 1 < trace.size() && trace[i].rfind("wait s", 0) == 0 &&
           trace[i].find(" on " + main) != std::string::npos) {
      const std::string waiter = trace[i].substr(5, trace[i].find(" on ") - 5);
      if (side.empty()) side = waiter;
      EXPECT_EQ(waiter, side) << "step " << s + 1 << ", entry " << i;
      ASSERT_EQ(trace[i + 1].rfind("allreduce ", 0), 0u) << trace[i + 1];
      EXPECT_EQ(trace[i + 1].substr(trace[i + 1].find(" on ") + 4), side) << "on the side stream, not the backend's";
      if (s == 0) floats += std::stoul(trace[i + 1].substr(10));
      i += 2, ++sums;
    }
    EXPECT_EQ(sums, reduces / kSteps) << "step " << s + 1;
    ASSERT_LT(i, trace.size());
    EXPECT_EQ(trace[i], "wait " + main + " on " + side) << "the step goes on only after every sum";
    ++i;
  }
  EXPECT_EQ(i, trace.size()) << "nothing else queued between streams";
  EXPECT_NE(side, main);
  EXPECT_EQ(emu_nccl_log().destroys - before.destroys, 1);
  // The buckets cover every gradient once: as many floats as the one whole sum of an unbucketed step.
  ASSERT_EQ(tiny_losses(*emu, 1, Routing::None, &host, rank0_of_2()).size(), 1u);
  EXPECT_EQ(floats, emu_nccl_log().count);
}

// ZeRO-1 on the GPUs: after the whole sum and the update of this rank's slice, the slices are
// gathered in place on the backend's stream, one broadcast from each rank in one NCCL group, the
// blocks ceil(n / 2) and the rest. (The mirror ranks cannot hold the other rank's update, so the
// losses after the first step are not compared here: test_distributed does that on the CPU.)
TEST_F(EmuNcclJob, ShardedOptimizerGathersItsSlicesOnTheGpus) {
  constexpr int kSteps = 2;
  const std::vector<double> whole = tiny_losses(*emu, 1, Routing::None, &host);
  std::vector<std::string>& trace = ftx_emu::stream_trace();
  trace.clear();
  const std::vector<double> sharded = tiny_losses(*emu, kSteps, Routing::None, &host, rank0_of_2(), {true, 0});
  ASSERT_EQ(sharded.size(), size_t(kSteps));
  EXPECT_EQ(sharded[0], whole[0]) << "the first step's loss comes before any update";
  EXPECT_TRUE(std::isfinite(sharded[1]));
  EXPECT_EQ(emu_nccl_log().group_depth, 0) << "every group closed";

  const std::string main = main_stream();
  ASSERT_EQ(trace.size(), size_t(3 * kSteps)) << "per step: the sum, then two broadcasts";
  for (int s = 0; s < kSteps; ++s) {
    const std::string* t = &trace[size_t(3 * s)];
    ASSERT_EQ(t[0].rfind("allreduce ", 0), 0u) << t[0];
    const size_t n = std::stoul(t[0].substr(10)), chunk = (n + 1) / 2;
    EXPECT_EQ(t[0], "allreduce " + std::to_string(n) + " on " + main);
    EXPECT_EQ(t[1], "broadcast " + std::to_string(chunk) + " from 0 on " + main + " in a group");
    EXPECT_EQ(t[2], "broadcast " + std::to_string(n - chunk) + " from 1 on " + main + " in a group");
  }
}

TEST(CudaEmu, DeviceCommRefusesWhatItCannotServe) {
  auto id = device_comm_id();
  ASSERT_TRUE(id.ok());
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  auto on_cpu = make_device_comm(*cpu, *id, 0, 1);
  ASSERT_FALSE(on_cpu.ok());
  EXPECT_NE(on_cpu.error().message.find("NCCL needs a CUDA backend, not cpu"), std::string::npos)
      << on_cpu.error().message;
  auto made = make_cuda_backend(0);
  ASSERT_TRUE(made.ok());
  auto short_id = make_device_comm(**made, id->substr(0, 10), 0, 1);
  ASSERT_FALSE(short_id.ok());
  EXPECT_NE(short_id.error().message.find("NCCL id of 10 bytes"), std::string::npos) << short_id.error().message;
  auto bad_rank = make_device_comm(**made, *id, 2, 2);
  ASSERT_FALSE(bad_rank.ok());
  EXPECT_NE(bad_rank.error().message.find("ncclCommInitRank (rank 2 of 2"), std::string::npos)
      << bad_rank.error().message;
}

// Generation with a KV cache (decode_step: Tq = 1 attention over the cache, the strided append of
// copy_rows, the post-sampler gather) on the emulated backend gives the CPU's next-token logits.
TEST(CudaEmu, GenerationWithKvCacheFollowsTheCpu) {
  auto made = make_cuda_backend(0);
  ASSERT_TRUE(made.ok()) << made.error().message;
  std::unique_ptr<Backend> emu = std::move(*made);
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  auto mc = model_preset("tiny");
  ASSERT_TRUE(mc.ok());
  mc->latent_bits = 6, mc->inject_after = mc->n_layers / 2;
  const int B = 3, L = 9, V = mc->vocab_size;
  Model on_cpu(*cpu, *mc), on_emu(*emu, *mc);
  on_cpu.init_weights(3, InitConfig{});
  on_emu.init_weights(3, InitConfig{});
  auto dc = on_cpu.make_decode_state(B, L), de = on_emu.make_decode_state(B, L);
  std::vector<float> lc(size_t(B) * V), le(size_t(B) * V);
  std::vector<float> all_c, all_e;
  for (int pos = 0; pos < L; ++pos) {
    std::vector<int32_t> tok(B);
    std::vector<uint32_t> codes(B);
    for (int b = 0; b < B; ++b) tok[b] = (pos * 5 + b * 3) % V, codes[b] = uint32_t(pos * 7 + b) % 64;
    on_cpu.decode_step(*dc, tok.data(), codes.data(), pos, lc.data());
    on_emu.decode_step(*de, tok.data(), codes.data(), pos, le.data());
    all_c.insert(all_c.end(), lc.begin(), lc.end());
    all_e.insert(all_e.end(), le.begin(), le.end());
  }
  EXPECT_LE(rel_error(all_e, Vec(all_c.begin(), all_c.end())), 1e-2) << "TF32 GEMMs: about 1e-3";
}

// A model or a training run too big for the GPU is a one-line error naming the device, not an
// abort (the emulated GPU is shrunk to 2 MiB per allocation here).
TEST(CudaEmu, TooLittleGpuMemoryIsAnErrorNotACrash) {
  auto made = make_cuda_backend(0);
  ASSERT_TRUE(made.ok()) << made.error().message;
  std::unique_ptr<Backend> emu = std::move(*made);
  auto mc = model_preset("small");  // 1M parameters: 4 MiB of weights
  ASSERT_TRUE(mc.ok());
  const std::string db =
      (std::filesystem::temp_directory_path() / ("ftx_emu_oom_" + std::to_string(::getpid()) + ".db")).string();
  ftx_emu::device_memory = size_t(2) << 20;
  auto model = Model::create(*emu, *mc);
  TrainConfig tc;
  auto trainer = Trainer::start(*emu, *mc, nullptr, tc, 66, db, "too_big");
  ftx_emu::device_memory = SIZE_MAX;
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("not enough memory for the model's weights"), std::string::npos)
      << model.error().message;
  EXPECT_NE(model.error().message.find("emulated CUDA device"), std::string::npos) << model.error().message;
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(trainer.error().message.find("not enough memory"), std::string::npos) << trainer.error().message;
  {
    auto store = RunStore::open_readonly(db);
    ASSERT_TRUE(store.ok()) << store.error().message;
    EXPECT_FALSE(store->find_run("too_big").ok()) << "a run that could not start was recorded";
  }
  std::filesystem::remove(db);
  // Inference holds no gradients: a model whose weights fit loads without them.
  auto tiny = model_preset("tiny");
  ASSERT_TRUE(tiny.ok());
  auto fits = Model::create(*emu, *tiny);
  EXPECT_TRUE(fits.ok());
}

}  // namespace
}  // namespace ftx
