// The CUDA backend's own kernels (cuda_backend.cu runs them through these launchers): elementwise
// ops, reductions, embedding, RMSNorm, RoPE, SwiGLU, cross-entropy, gradient clipping, AdamW over
// segments and the bf16 rounding. Semantics: the CPU backend's (kernels/cpu/ops_*.h);
// test_backend_ops checks them on a GPU, test_cuda_emu in a CPU emulation.
//
// Reductions that the CPU does in double (sum_squares, sum_rows, the RMSNorm weight gradient) are
// in double here too, in a fixed order, so a run repeats bit for bit. The embedding scatter-add
// uses float atomics (order-dependent in the last bits).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/base/assert.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_ops.h"

namespace ftx::cuda {
namespace {

constexpr unsigned kThreads = 256;    // elementwise kernels
constexpr unsigned kRowWarps = 8;     // row kernels (RMSNorm): one warp per row, 8 rows a block
constexpr unsigned kColumnRows = 16;  // column sums: 32 columns x 16 row lanes a block

// Logistic sigmoid as the CPU computes it: only exp of non-positive arguments, stable both ways.
__device__ __forceinline__ float sigmoidf(float x) {
  const float e = expf(-fabsf(x));
  const float inv = 1.0f / (1.0f + e);
  return x >= 0.0f ? inv : e * inv;
}

// ---- elementwise ---------------------------------------------------------------------------

__global__ void fill_kernel(float* x, float v, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}

__global__ void add_kernel(float* out, const float* a, const float* b, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void add_inplace_kernel(float* acc, const float* x, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) acc[i] += x[i];
}

__global__ void scale_kernel(float* x, float s, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

// Per-block partial sums of x^2 in double over a grid-stride range; the host adds the
// kReduceBlocks partials in order.
__global__ void sum_squares_kernel(double* partial, const float* x, size_t n) {
  __shared__ double warp_part[kThreads / 32];
  double s = 0.0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    s += double(x[i]) * double(x[i]);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) warp_part[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0.0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) t += warp_part[w];
    partial[blockIdx.x] = t;
  }
}

__global__ void broadcast_rows_kernel(float* out, const float* v, int N, int C) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < size_t(N) * C) out[i] = v[i % C];
}

// acc[c] += sum_n f(n, c), n in order within each of kColumnRows lanes, lanes added in order:
// a fixed order whatever the GPU. Block (32, kColumnRows), grid over column tiles of 32.
template <class F>
__device__ void column_sum(float* acc, int N, int C, F f) {
  __shared__ double part[kColumnRows][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  double s = 0.0;
  if (c < C)
    for (int n = threadIdx.y; n < N; n += kColumnRows) s += f(n, c);
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    double t = 0.0;
    for (unsigned r = 0; r < kColumnRows; ++r) t += part[r][threadIdx.x];
    acc[c] += float(t);
  }
}

__global__ void sum_rows_kernel(float* dv, const float* dout, int N, int C) {
  column_sum(dv, N, C, [=] __device__(int n, int c) { return double(dout[size_t(n) * C + c]); });
}

// ---- the routed block's write-back ----------------------------------------------------------

// out already holds x (the backend copied it); one thread per element of the M selected rows.
__global__ void route_scatter_forward_kernel(float* out, const float* y, const float* g, const int32_t* rows, int M,
                                             int C) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(M) * C) return;
  const int32_t r = rows[i / C];
  const int c = int(i % C);
  const float k = g[r], j = 1.0f - k;
  float* o = out + size_t(r) * C + c;
  *o = k * y[i] + j * *o;  // g = 1: j * o is 0, so y exactly, contracted into an FMA or not
}

__global__ void route_mask_clear_kernel(int32_t* mask, int N) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < N) mask[i] = 0;
}
__global__ void route_mask_set_kernel(int32_t* mask, const int32_t* rows, int M) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < M) mask[rows[i]] = 1;
}

// One warp a selected row (dx already holds dout): dg in double, dy written, dx scaled.
__global__ void route_scatter_backward_kernel(float* dx, float* dy, float* dg, const float* x, const float* y,
                                              const float* g, const int32_t* rows, int M, int C) {
  const int i = blockIdx.x * kRowWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (i >= M) return;
  const int32_t r = rows[i];
  const float k = g[r], j = 1.0f - k;
  const float* yr = y + size_t(i) * C;
  const float* xr = x + size_t(r) * C;
  float* d = dx + size_t(r) * C;
  float* dyr = dy + size_t(i) * C;
  double dot = 0.0;
  for (int c = lane; c < C; c += 32) {
    const float v = d[c];
    dot += double(v) * (double(yr[c]) - double(xr[c]));
    dyr[c] = k * v;
    d[c] = j * v;
  }
  for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
  if (lane == 0) dg[r] += float(dot);
}

// ---- the surprise statistics and gate -----------------------------------------------------------

__device__ __forceinline__ double route_softplus(double p) { return p > 20.0 ? p : log1p(exp(p)); }
__device__ __forceinline__ double route_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// One warp a token: d_st and d_ch.
__global__ void route_norms_kernel(float* st_ch, const float* dx, const float* dx_hat, int N, int C) {
  const int n = blockIdx.x * kRowWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  const float* x = dx + size_t(n) * C;
  const float* h = dx_hat + size_t(n) * C;
  double st = 0.0, ch = 0.0;
  for (int c = lane; c < C; c += 32) {
    st += double(x[c]) * double(x[c]);
    const double e = double(x[c]) - double(h[c]);
    ch += e * e;
  }
  for (int o = 16; o > 0; o >>= 1) {
    st += __shfl_xor_sync(0xffffffffu, st, o);
    ch += __shfl_xor_sync(0xffffffffu, ch, o);
  }
  if (lane != 0) return;
  st_ch[n] = float(st / C);
  st_ch[size_t(N) + n] = float(ch / C);
}

// One thread a token: the mean of d_st over its window.
__global__ void route_average_kernel(float* ma, const float* st_ch, int N, int T, int W) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int t = n % T, t0 = max(0, t - W + 1);
  double sum = 0.0;
  for (int u = n - (t - t0); u <= n; ++u) sum += double(st_ch[u]);
  ma[n] = float(sum / (t - t0 + 1));
}

__global__ void route_stats_backward_kernel(float* d_dx, float* d_dx_hat, const float* d_st_ch, const float* dx,
                                            const float* dx_hat, int N, int C) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(N) * C) return;
  const size_t n = i / C;
  const double k_st = 2.0 / C * double(d_st_ch[n]), k_ch = 2.0 / C * double(d_st_ch[size_t(N) + n]);
  const double e = double(dx[i]) - double(dx_hat[i]);
  d_dx[i] = float(k_st * double(dx[i]) + k_ch * e);
  d_dx_hat[i] = float(-k_ch * e);
}

// CE, CU and their sigmoids a and c at token n. k = softplus(params): o_ce, m_cu, beta_ce, beta_cu,
// taken once per thread (RouteGateK).
struct RouteGateK {
  double k[4], log_o;
  __device__ explicit RouteGateK(const float* params) {
    for (int i = 0; i < 4; ++i) k[i] = route_softplus(params[i]);
    log_o = log(k[0]);
  }
};
struct RouteGateAt {
  double ce, cu, a, c;
};
__device__ RouteGateAt route_gate_at(const RouteGateK& p, const float* st_ch, const float* ma, int N, int n) {
  RouteGateAt r;
  const double d_st = st_ch[n], d_ch = st_ch[size_t(N) + n];
  r.ce = d_st - d_ch + p.log_o;
  r.cu = d_st - p.k[1] * double(ma[n]);
  r.a = route_sigmoid(p.k[2] * r.ce);
  r.c = route_sigmoid(p.k[3] * r.cu);
  return r;
}

__global__ void route_gate_forward_kernel(float* g, const float* st_ch, const float* ma, const float* params, int N) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const RouteGateAt r = route_gate_at(RouteGateK(params), st_ch, ma, N, n);
  g[n] = float(r.a + r.c - r.a * r.c);
}

// dL/d(beta_ce CE) and dL/d(beta_cu CU) at token n.
__device__ void route_gate_grads(double& da, double& dc, const RouteGateAt& r, const float* dg, int n) {
  da = double(dg[n]) * (1.0 - r.c) * r.a * (1.0 - r.a);
  dc = double(dg[n]) * (1.0 - r.a) * r.c * (1.0 - r.c);
}

__global__ void route_gate_backward_kernel(float* d_st_ch, const float* dg, const float* st_ch, const float* ma,
                                           const float* params, int N) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const RouteGateK p(params);
  const RouteGateAt r = route_gate_at(p, st_ch, ma, N, n);
  double da, dc;
  route_gate_grads(da, dc, r, dg, n);
  d_st_ch[n] = float(da * p.k[2] + dc * p.k[3]);
  d_st_ch[size_t(N) + n] = float(-da * p.k[2]);
}

// dparams (4) += the sums over tokens through softplus' derivative. One block of kGateThreads: each
// thread sums its strided tokens in double, then a tree over the threads (a fixed order).
constexpr unsigned kGateThreads = 512;
__global__ void route_gate_params_kernel(float* dparams, const float* dg, const float* st_ch, const float* ma,
                                         const float* params, int N) {
  __shared__ double part[4][kGateThreads];
  const RouteGateK p(params);
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  for (int n = int(threadIdx.x); n < N; n += int(kGateThreads)) {
    const RouteGateAt r = route_gate_at(p, st_ch, ma, N, n);
    double da, dc;
    route_gate_grads(da, dc, r, dg, n);
    s[0] += da * p.k[2] / p.k[0];
    s[1] -= dc * p.k[3] * double(ma[n]);
    s[2] += da * r.ce;
    s[3] += dc * r.cu;
  }
  for (int j = 0; j < 4; ++j) part[j][threadIdx.x] = s[j];
  for (unsigned half = kGateThreads / 2; half > 0; half /= 2) {
    __syncthreads();
    if (threadIdx.x < half)
      for (int j = 0; j < 4; ++j) part[j][threadIdx.x] += part[j][threadIdx.x + half];
  }
  if (threadIdx.x < 4) dparams[threadIdx.x] += float(part[threadIdx.x][0] * route_sigmoid(params[threadIdx.x]));
}

// ---- top-k per sequence ----------------------------------------------------------------------

// One block of kTopkThreads a sequence; each thread owns a contiguous run of positions. It ranks
// each against the whole row (values above, or equal and earlier: ties to the earlier position)
// and flags those ranked under k in dynamic shared memory (T bytes); a scan of the threads' counts
// (shuffles in each warp, then over the warps) gives each thread where its flagged positions go,
// in time order. O(T^2 / kTopkThreads) compares a thread.
constexpr unsigned kTopkThreads = 1024;
__global__ void topk_rows_kernel(int32_t* pos, int32_t* rows, const float* score, int T, int k) {
  FTX_DYNAMIC_SHARED(unsigned char, chosen);
  __shared__ int warp_total[kTopkThreads / 32];
  const int b = blockIdx.x, tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const float* s = score + size_t(b) * T;
  const int per = (T + int(kTopkThreads) - 1) / int(kTopkThreads);
  const int t0 = min(T, tid * per), t1 = min(T, t0 + per);
  int mine = 0;
  for (int t = t0; t < t1; ++t) {
    const float v = s[t];
    int above = 0;
    for (int j = 0; j < T && above < k; ++j) above += s[j] > v || (s[j] == v && j < t);
    chosen[t] = above < k ? 1 : 0;
    mine += chosen[t];
  }
  int incl = mine;  // inclusive scan of the counts within the warp
  for (int o = 1; o < 32; o <<= 1) {
    const int up = __shfl_sync(0xffffffffu, incl, lane >= o ? lane - o : lane);
    if (lane >= o) incl += up;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  if (warp == 0) {  // exclusive scan of the warp totals, in place
    const int w = warp_total[lane];
    int x = w;
    for (int o = 1; o < 32; o <<= 1) {
      const int up = __shfl_sync(0xffffffffu, x, lane >= o ? lane - o : lane);
      if (lane >= o) x += up;
    }
    warp_total[lane] = x - w;
  }
  __syncthreads();
  int n = warp_total[warp] + incl - mine;
  for (int t = t0; t < t1 && n < k; ++t) {
    if (!chosen[t]) continue;
    pos[size_t(b) * k + n] = t;
    rows[size_t(b) * k + n] = b * T + t;
    ++n;
  }
}

// ---- embedding -----------------------------------------------------------------------------

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }

// The table is fp32 or bf16 (widened exactly).
template <class W>
__global__ void embedding_forward_kernel(float* out, const int32_t* tok, const W* wte, int N, int C) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(N) * C) return;
  const size_t n = i / C, c = i % C;
  out[i] = widen(wte[size_t(tok[n]) * C + c]);
}

__global__ void embedding_backward_kernel(float* dwte, const float* dout, const int32_t* tok, int N, int C) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(N) * C) return;
  const size_t n = i / C, c = i % C;
  atomicAdd(dwte + size_t(tok[n]) * C + c, dout[i]);  // repeated tokens collide
}

// ---- RMSNorm: one warp per row ---------------------------------------------------------------

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* x, const float* w, int N, int C,
                                       float eps) {
  const int n = blockIdx.x * kRowWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  const float* xr = x + size_t(n) * C;
  float ss = 0.0f;
  for (int c = lane; c < C; c += 32) ss += xr[c] * xr[c];
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / float(C) + eps);
  if (lane == 0) rstd[n] = r;
  float* o = out + size_t(n) * C;
  for (int c = lane; c < C; c += 32) o[c] = w[c] * (xr[c] * r);
}

__global__ void rmsnorm_backward_dx_kernel(float* dx, const float* dout, const float* x, const float* w,
                                           const float* rstd, int N, int C) {
  const int n = blockIdx.x * kRowWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  const float* g = dout + size_t(n) * C;
  const float* xr = x + size_t(n) * C;
  const float r = rstd[n];
  float dot = 0.0f;
  for (int c = lane; c < C; c += 32) dot += w[c] * g[c] * xr[c];
  dot = warp_sum(dot);
  const float k = dot * r * r / float(C);
  float* d = dx + size_t(n) * C;
  for (int c = lane; c < C; c += 32) d[c] += r * (w[c] * g[c] - xr[c] * k);
}

__global__ void rmsnorm_backward_dw_kernel(float* dw, const float* dout, const float* x, const float* rstd, int N,
                                           int C) {
  column_sum(dw, N, C, [=] __device__(int n, int c) {
    const size_t i = size_t(n) * C + c;
    return double(dout[i] * x[i]) * double(rstd[n]);
  });
}

// ---- RoPE: angles in double as the CPU computes them, one thread per rotated pair -------------

// Token (b, t) at pos[b * T + t] when pos is given, else at pos0 + t.
__global__ void rope_kernel(float* x, int B, int T, int nh, int HS, int pos0, const int32_t* pos, const float* inv_freq,
                            double sign) {
  const int half = HS / 2;
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(B) * T * nh * half) return;
  const int pair = int(i % half);
  const size_t row = i / half;  // (b, t, h)
  const size_t token = row / nh;
  const int at = pos ? pos[token] : pos0 + int(token % T);
  const double angle = double(at) * double(inv_freq[pair]);
  const float cs = float(cos(angle)), sn = float(sign * sin(angle));
  float* r = x + row * HS;
  const float x1 = r[pair], x2 = r[pair + half];
  r[pair] = x1 * cs - x2 * sn;
  r[pair + half] = x2 * cs + x1 * sn;
}

// ---- SwiGLU ----------------------------------------------------------------------------------

__global__ void swiglu_forward_kernel(float* out, const float* gate, const float* up, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  out[i] = g * sigmoidf(g) * up[i];
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                       size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i], s = sigmoidf(g), d = dout[i];
  dgate[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
  dup[i] = d * g * s;
}

// ---- cross-entropy: one block per row; V up to a Llama vocabulary ------------------------------

// Row max and sum exp(l - max) of V logits, reduced over the block; every thread gets both.
__device__ void softmax_stats(const float* l, int V, float& mx, float& sum) {
  __shared__ float red[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, l[j]);
  m = warp_max(m);
  if (lane == 0) red[warp] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < warps; ++w) m = fmaxf(m, red[w]);
  __syncthreads();
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(l[j] - m);
  s = warp_sum(s);
  if (lane == 0) red[warp] = s;
  __syncthreads();
  s = 0.0f;
  for (int w = 0; w < warps; ++w) s += red[w];
  __syncthreads();  // a caller that reduces another row reuses red
  mx = m, sum = s;
}

__global__ void crossentropy_forward_kernel(float* losses, const float* logits, const int32_t* targets, int V) {
  const int n = blockIdx.x;
  const float* l = logits + size_t(n) * V;
  float mx, sum;
  softmax_stats(l, V, mx, sum);
  if (threadIdx.x == 0) losses[n] = logf(sum) + mx - l[targets[n]];
}

// In place allowed: every logit is read by softmax_stats (which ends in a barrier) before the
// thread that owns it overwrites it.
__global__ void crossentropy_backward_kernel(float* dlogits, const float* logits, const int32_t* targets, int V,
                                             float scale) {
  const int n = blockIdx.x;
  const float* l = logits + size_t(n) * V;
  float* d = dlogits + size_t(n) * V;
  float mx, sum;
  softmax_stats(l, V, mx, sum);
  const float k = scale / sum;
  const int t = targets[n];
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = k * expf(l[j] - mx);
    d[j] = j == t ? v - scale : v;
  }
}

// ---- gradient clipping: the norm and the factor stay on the device --------------------------

// One thread: adds the kReduceBlocks partials in order, writes the norm and the clip factor.
__global__ void clip_factor_kernel(float* norm, float* factor, const double* partial, float max_norm) {
  if (threadIdx.x != 0) return;
  double t = 0.0;
  for (unsigned b = 0; b < kReduceBlocks; ++b) t += partial[b];
  const double r = sqrt(t);
  *norm = float(r);
  *factor = max_norm > 0.0f && r > double(max_norm) ? float(double(max_norm) / r) : 1.0f;
}

__global__ void scale_by_kernel(float* x, const float* factor, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= *factor;
}

// ---- AdamW over segments, one launch ---------------------------------------------------------

constexpr size_t kAdamChunk = 8192;  // elements per block

// Block b updates elements [b * kAdamChunk, (b + 1) * kAdamChunk) of the flat buffers; each
// element takes the weight decay of its segment (segments sorted, disjoint; gaps are skipped).
// With a bf16 mirror of the parameters (MatmulPrecision::Bf16), the new value is written there too.
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, __nv_bfloat16* mirror,
                             const AdamWSegment* segs, int nseg, Dyn<float> lr_arg, float beta1, float beta2, float eps,
                             Dyn<float> inv_bc1_arg, Dyn<float> inv_bc2_arg) {
  const size_t start = size_t(blockIdx.x) * kAdamChunk, stop = start + kAdamChunk;
  int lo = 0, hi = nseg;  // first segment that ends after start
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (segs[mid].offset + segs[mid].numel <= start)
      lo = mid + 1;
    else
      hi = mid;
  }
  const float lr = lr_arg.get(), inv_bc1 = inv_bc1_arg.get(), inv_bc2 = inv_bc2_arg.get();
  int sg = lo;
  for (size_t i = start + threadIdx.x; i < stop; i += blockDim.x) {
    while (sg < nseg && segs[sg].offset + segs[sg].numel <= i) ++sg;
    if (sg == nseg) return;
    if (i < segs[sg].offset) continue;
    const float g = grad[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    const float p = param[i] - lr * (mhat / (sqrtf(vhat) + eps) + segs[sg].weight_decay * param[i]);
    param[i] = p;
    if (mirror != nullptr) mirror[i] = __float2bfloat16(p);
  }
}

__global__ void to_bf16_kernel(__nv_bfloat16* out, const float* x, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(x[i]);
}

}  // namespace

// ---- launchers (cuda_ops.h) ------------------------------------------------------------------

void fill(float* x, float v, size_t n, cudaStream_t st) {
  if (n == 0) return;
  FTX_LAUNCH(fill_kernel, blocks_for(n, kThreads), kThreads, 0, st, x, v, n);
  FTX_CUDA_LAUNCHED();
}

void add(float* out, const float* a, const float* b, size_t n, cudaStream_t st) {
  if (n == 0) return;
  FTX_LAUNCH(add_kernel, blocks_for(n, kThreads), kThreads, 0, st, out, a, b, n);
  FTX_CUDA_LAUNCHED();
}

void add_inplace(float* acc, const float* x, size_t n, cudaStream_t st) {
  if (n == 0) return;
  FTX_LAUNCH(add_inplace_kernel, blocks_for(n, kThreads), kThreads, 0, st, acc, x, n);
  FTX_CUDA_LAUNCHED();
}

void scale(float* x, float s, size_t n, cudaStream_t st) {
  if (n == 0) return;
  FTX_LAUNCH(scale_kernel, blocks_for(n, kThreads), kThreads, 0, st, x, s, n);
  FTX_CUDA_LAUNCHED();
}

void sum_squares_partials(double* partial, const float* x, size_t n, cudaStream_t st) {
  FTX_LAUNCH(sum_squares_kernel, kReduceBlocks, kThreads, 0, st, partial, x, n);
  FTX_CUDA_LAUNCHED();
}

void broadcast_rows(float* out, const float* v, int N, int C, cudaStream_t st) {
  const size_t n = size_t(N) * C;
  if (n == 0) return;
  FTX_LAUNCH(broadcast_rows_kernel, blocks_for(n, kThreads), kThreads, 0, st, out, v, N, C);
  FTX_CUDA_LAUNCHED();
}

void sum_rows(float* dv, const float* dout, int N, int C, cudaStream_t st) {
  if (C == 0) return;
  FTX_LAUNCH(sum_rows_kernel, blocks_for(size_t(C), 32), dim3(32, kColumnRows), 0, st, dv, dout, N, C);
  FTX_CUDA_LAUNCHED();
}

void route_stats_forward(float* st_ch, float* ma, const float* dx, const float* dx_hat, int B, int T, int C, int W,
                         cudaStream_t st) {
  const int N = B * T;
  if (N == 0) return;
  FTX_LAUNCH(route_norms_kernel, blocks_for(size_t(N), kRowWarps), kRowWarps * 32, 0, st, st_ch, dx, dx_hat, N, C);
  FTX_CUDA_LAUNCHED();
  FTX_LAUNCH(route_average_kernel, blocks_for(size_t(N), kThreads), kThreads, 0, st, ma, st_ch, N, T, W);
  FTX_CUDA_LAUNCHED();
}

void route_stats_backward(float* d_dx, float* d_dx_hat, const float* d_st_ch, const float* dx, const float* dx_hat,
                          int N, int C, cudaStream_t st) {
  const size_t n = size_t(N) * C;
  if (n == 0) return;
  FTX_LAUNCH(route_stats_backward_kernel, blocks_for(n, kThreads), kThreads, 0, st, d_dx, d_dx_hat, d_st_ch, dx, dx_hat,
             N, C);
  FTX_CUDA_LAUNCHED();
}

void route_gate_forward(float* g, const float* st_ch, const float* ma, const float* params, int N, cudaStream_t st) {
  if (N == 0) return;
  FTX_LAUNCH(route_gate_forward_kernel, blocks_for(size_t(N), kThreads), kThreads, 0, st, g, st_ch, ma, params, N);
  FTX_CUDA_LAUNCHED();
}

void route_gate_backward(float* d_st_ch, float* dparams, const float* dg, const float* st_ch, const float* ma,
                         const float* params, int N, cudaStream_t st) {
  if (N == 0) return;
  FTX_LAUNCH(route_gate_backward_kernel, blocks_for(size_t(N), kThreads), kThreads, 0, st, d_st_ch, dg, st_ch, ma,
             params, N);
  FTX_CUDA_LAUNCHED();
  FTX_LAUNCH(route_gate_params_kernel, 1, kGateThreads, 0, st, dparams, dg, st_ch, ma, params, N);
  FTX_CUDA_LAUNCHED();
}

void topk_rows(int32_t* pos, int32_t* rows, const float* score, int B, int T, int k, cudaStream_t st) {
  FT_ASSERT(k >= 0 && k <= T && T <= kTopkMaxT, "topk_rows: k %d of T %d (at most %d)", k, T, kTopkMaxT);
  if (B == 0 || k == 0) return;
  FTX_LAUNCH(topk_rows_kernel, unsigned(B), kTopkThreads, size_t(T), st, pos, rows, score, T, k);
  FTX_CUDA_LAUNCHED();
}

void route_mask(int32_t* mask, const int32_t* rows, int N, int M, cudaStream_t st) {
  if (N == 0) return;
  FTX_LAUNCH(route_mask_clear_kernel, blocks_for(size_t(N), kThreads), kThreads, 0, st, mask, N);
  FTX_CUDA_LAUNCHED();
  if (M == 0) return;
  FTX_LAUNCH(route_mask_set_kernel, blocks_for(size_t(M), kThreads), kThreads, 0, st, mask, rows, M);
  FTX_CUDA_LAUNCHED();
}

void route_scatter_forward(float* out, const float* y, const float* g, const int32_t* rows, int M, int C,
                           cudaStream_t st) {
  const size_t n = size_t(M) * C;
  if (n == 0) return;
  FTX_LAUNCH(route_scatter_forward_kernel, blocks_for(n, kThreads), kThreads, 0, st, out, y, g, rows, M, C);
  FTX_CUDA_LAUNCHED();
}

void route_scatter_backward(float* dx, float* dy, float* dg, const float* x, const float* y, const float* g,
                            const int32_t* rows, int M, int C, cudaStream_t st) {
  if (M == 0) return;
  FTX_LAUNCH(route_scatter_backward_kernel, blocks_for(size_t(M), kRowWarps), kRowWarps * 32, 0, st, dx, dy, dg, x, y,
             g, rows, M, C);
  FTX_CUDA_LAUNCHED();
}

void embedding_forward(float* out, const int32_t* tok, const float* wte, int N, int C, cudaStream_t st) {
  const size_t n = size_t(N) * C;
  if (n == 0) return;
  FTX_LAUNCH(embedding_forward_kernel<float>, blocks_for(n, kThreads), kThreads, 0, st, out, tok, wte, N, C);
  FTX_CUDA_LAUNCHED();
}

void embedding_forward(float* out, const int32_t* tok, const __nv_bfloat16* wte, int N, int C, cudaStream_t st) {
  const size_t n = size_t(N) * C;
  if (n == 0) return;
  FTX_LAUNCH(embedding_forward_kernel<__nv_bfloat16>, blocks_for(n, kThreads), kThreads, 0, st, out, tok, wte, N, C);
  FTX_CUDA_LAUNCHED();
}

void embedding_backward(float* dwte, const float* dout, const int32_t* tok, int N, int C, cudaStream_t st) {
  const size_t n = size_t(N) * C;
  if (n == 0) return;
  FTX_LAUNCH(embedding_backward_kernel, blocks_for(n, kThreads), kThreads, 0, st, dwte, dout, tok, N, C);
  FTX_CUDA_LAUNCHED();
}

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps,
                     cudaStream_t st) {
  if (N == 0) return;
  FTX_LAUNCH(rmsnorm_forward_kernel, blocks_for(size_t(N), kRowWarps), kRowWarps * 32, 0, st, out, rstd, x, w, N, C,
             eps);
  FTX_CUDA_LAUNCHED();
}

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd, int N,
                      int C, cudaStream_t st) {
  if (N == 0) return;
  FTX_LAUNCH(rmsnorm_backward_dx_kernel, blocks_for(size_t(N), kRowWarps), kRowWarps * 32, 0, st, dx, dout, x, w, rstd,
             N, C);
  FTX_CUDA_LAUNCHED();
  FTX_LAUNCH(rmsnorm_backward_dw_kernel, blocks_for(size_t(C), 32), dim3(32, kColumnRows), 0, st, dw, dout, x, rstd, N,
             C);
  FTX_CUDA_LAUNCHED();
}

void rope(float* x, int B, int T, int nh, int HS, int pos0, const int32_t* pos, const float* inv_freq, double sign,
          cudaStream_t st) {
  FT_ASSERT(HS % 2 == 0, "rope: head size %d", HS);
  const size_t n = size_t(B) * T * nh * (HS / 2);
  if (n == 0) return;
  FTX_LAUNCH(rope_kernel, blocks_for(n, kThreads), kThreads, 0, st, x, B, T, nh, HS, pos0, pos, inv_freq, sign);
  FTX_CUDA_LAUNCHED();
}

void swiglu_forward(float* out, const float* gate, const float* up, size_t n, cudaStream_t st) {
  if (n == 0) return;
  FTX_LAUNCH(swiglu_forward_kernel, blocks_for(n, kThreads), kThreads, 0, st, out, gate, up, n);
  FTX_CUDA_LAUNCHED();
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n,
                     cudaStream_t st) {
  if (n == 0) return;
  FTX_LAUNCH(swiglu_backward_kernel, blocks_for(n, kThreads), kThreads, 0, st, dgate, dup, dout, gate, up, n);
  FTX_CUDA_LAUNCHED();
}

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V, cudaStream_t st) {
  if (N == 0) return;
  FTX_LAUNCH(crossentropy_forward_kernel, N, kThreads, 0, st, losses, logits, targets, V);
  FTX_CUDA_LAUNCHED();
}

void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int N, int V, float scale,
                           cudaStream_t st) {
  if (N == 0) return;
  FTX_LAUNCH(crossentropy_backward_kernel, N, kThreads, 0, st, dlogits, logits, targets, V, scale);
  FTX_CUDA_LAUNCHED();
}

void clip_grad_norm(float* g, size_t n, float max_norm, float* norm, double* partial, float* factor, cudaStream_t st) {
  sum_squares_partials(partial, g, n, st);
  FTX_LAUNCH(clip_factor_kernel, 1, 32, 0, st, norm, factor, partial, max_norm);
  FTX_CUDA_LAUNCHED();
  if (n == 0) return;
  FTX_LAUNCH(scale_by_kernel, blocks_for(n, kThreads), kThreads, 0, st, g, factor, n);
  FTX_CUDA_LAUNCHED();
}

void adamw(float* param, const float* grad, float* m, float* v, __nv_bfloat16* mirror, const AdamWSegment* table,
           int n_segments, size_t end, Dyn<float> lr, float beta1, float beta2, float eps, Dyn<float> inv_bc1,
           Dyn<float> inv_bc2, cudaStream_t st) {
  if (end == 0) return;
  const unsigned blocks = unsigned((end + kAdamChunk - 1) / kAdamChunk);
  FTX_LAUNCH(adamw_kernel, blocks, kThreads, 0, st, param, grad, m, v, mirror, table, n_segments, lr, beta1, beta2, eps,
             inv_bc1, inv_bc2);
  FTX_CUDA_LAUNCHED();
}

void to_bf16(__nv_bfloat16* out, const float* x, size_t n, cudaStream_t st) {
  if (n == 0) return;
  FTX_LAUNCH(to_bf16_kernel, blocks_for(n, kThreads), kThreads, 0, st, out, x, n);
  FTX_CUDA_LAUNCHED();
}

}  // namespace ftx::cuda
