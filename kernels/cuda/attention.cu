// Flash-style attention (semantics: kernels/cpu/ops_attention.h, geometry: AttnShape in
// kernels/backend.h). The (Tq, Tk) probabilities are never stored: the forward keeps one
// log-sum-exp per query row and the backward recomputes P from it, so memory stays linear in T
// (training runs up to T = 4096, where Tq x Tk per head would not fit for long).
//
// One layout serves all three kernels, chosen so that HS can be anything in 1..256 (odd sizes
// included) with one code path and no atomics:
// - A warp owns a few rows (query rows, or key rows in the dk/dv kernel) and keeps their
//   accumulators in registers, lane l holding dims l, l+32, ... (kChunks = ceil(HS/32) of them,
//   a template parameter so the arrays stay in registers).
// - The other side streams through shared memory in tiles of 32 rows, one row per lane: each lane
//   computes the full dot product of its tile row with the warp's own rows (read as a broadcast),
//   so a score costs no shuffle reduction, and the online-softmax max/sum needs only one warp
//   reduction per 32 keys. The tile's rows are then folded into the accumulators with one shuffle
//   per row (the score) and a conflict-free read of the row by dims.
// - Tiles read "one row per lane" use an odd row stride (HS | 1) so the 32 lanes hit 32 banks.
// Backward: dk/dv are owned by key rows (one block per key tile and (b, kv head), looping over the
// query heads of its GQA group and the visible query rows), dq by query rows (one block per query
// tile and (b, head), looping over the visible keys). Each output element is written once by its
// owner: deterministic, no atomics, no zero fill, and keys no query sees get exact zeros.
// Causal masking by loop bounds where whole tiles are invisible, by a per-score test inside a tile.
// D_i = <dout_i, out_i> is recomputed by both backward kernels (HS flops per row and tile), since
// the op has no scratch for it.
//
// Shared memory per block, in floats (s = HS | 1): forward 32 s + 48 HS; dq 64 s + 32 HS;
// dk/dv 64 s + 32 HS + 64. At HS = 256 that is about 99 KB, above the 48 KB default, so the
// launchers opt in (sm_80 allows 163 KB, sm_90 227 KB).
// Numerics: fp32 throughout, expf/logf (no fast-math), scores scaled after the dot product as
// the CPU's gemm(alpha = scale) does.
// Deliberately not here: split-K over keys for decode (Tq = 1 uses one warp per (b, head)),
// tensor cores, dropout, biases.
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "kernels/base/assert.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_ops.h"

namespace ftx::cuda {
namespace {

constexpr int kWarps = 4;                             // per block
constexpr int kThreads = kWarps * int(kWarp);         // 128
constexpr int kRowsPerWarp = 4;                       // rows whose accumulators a warp owns
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;  // 16
constexpr int kTile = int(kWarp);                     // streamed rows per tile: one per lane
constexpr int kMaxHeadSize = 256;
constexpr int kMaxChunks = kMaxHeadSize / int(kWarp);  // dims per lane at HS = 256
constexpr unsigned kFullMask = 0xffffffffu;

// Row stride of a tile read one row per lane: odd, so the 32 lanes fall in 32 different banks.
__host__ __device__ inline int lane_row_stride(int HS) { return HS | 1; }

// Keys visible to query row i (0 for rows past Tq): all Tk, or j <= q_pos0 + i when causal.
__device__ inline int visible_keys(const AttnShape& s, int i) {
  if (i >= s.Tq) return 0;
  return s.causal ? min(s.Tk, s.q_pos0 + i + 1) : s.Tk;
}

// Copies rows [r0, r0 + n) of a strided (rows, HS) matrix into shared dst (kRows, stride), zero for
// rows past n: zeros (not garbage) so that a masked score times a tile entry can never be NaN.
template <int kRows>
__device__ void load_tile(float* dst, int stride, const float* src, size_t ld, int r0, int n, int HS) {
  for (int idx = threadIdx.x; idx < kRows * HS; idx += kThreads) {
    const int r = idx / HS, d = idx - r * HS;
    dst[r * stride + d] = r < n ? src[size_t(r0 + r) * ld + d] : 0.f;
  }
}

// <a_row, b_row> over HS dims, the lanes striding over dims; all lanes get the sum.
__device__ float warp_dot(const float* a, const float* b, int HS) {
  float acc = 0.f;
  for (int d = threadIdx.x % kWarp; d < HS; d += kWarp) acc += a[d] * b[d];
  return warp_sum(acc);
}

// ---- forward --------------------------------------------------------------------------------
// grid (ceil(Tq / kRowsPerBlock), NH, B). Warp w owns the query rows i0 + w + kWarps t.
template <int kChunks>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v, AttnShape s,
                             float scale) {
  FTX_DYNAMIC_SHARED(float, smem);
  const int HS = s.HS, ks = lane_row_stride(HS);
  float* sk = smem;             // (kTile, ks)   key j0 + lane, read by lane
  float* sv = sk + kTile * ks;  // (kTile, HS)   read by dims
  float* sq = sv + kTile * HS;  // (kRowsPerBlock, HS)  broadcast
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int b = blockIdx.z, h = blockIdx.y, kh = h / (s.NH / s.NKV), i0 = blockIdx.x * kRowsPerBlock;
  const size_t ldq = size_t(s.NH) * HS, ldkv = size_t(s.NKV) * HS;
  const float* qh = q + (size_t(b) * s.Tq * s.NH + h) * HS;
  const float* kb = k + (size_t(b) * s.Tk_cap * s.NKV + kh) * HS;
  const float* vb = v + (size_t(b) * s.Tk_cap * s.NKV + kh) * HS;

  load_tile<kRowsPerBlock>(sq, HS, qh, ldq, i0, min(kRowsPerBlock, s.Tq - i0), HS);
  // The block's last row sees the most keys.
  const int j_end = visible_keys(s, min(s.Tq, i0 + kRowsPerBlock) - 1);

  int row[kRowsPerWarp], jn[kRowsPerWarp];
  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kChunks];
#pragma unroll
  for (int t = 0; t < kRowsPerWarp; ++t) {
    row[t] = warp + kWarps * t;
    jn[t] = visible_keys(s, i0 + row[t]);
    m[t] = -INFINITY;
    l[t] = 0.f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) o[t][c] = 0.f;
  }

  for (int j0 = 0; j0 < j_end; j0 += kTile) {
    const int nk = min(kTile, j_end - j0);
    __syncthreads();  // the previous tile is consumed (first pass: sq is ready)
    load_tile<kTile>(sk, ks, kb, ldkv, j0, nk, HS);
    load_tile<kTile>(sv, HS, vb, ldkv, j0, nk, HS);
    __syncthreads();

    float sc[kRowsPerWarp] = {};
    for (int d = 0; d < HS; ++d) {
      const float kd = sk[lane * ks + d];
#pragma unroll
      for (int t = 0; t < kRowsPerWarp; ++t) sc[t] += sq[row[t] * HS + d] * kd;
    }
    // Online softmax: rescale what was accumulated under the old max by exp(m_old - m_new).
    float p[kRowsPerWarp];
#pragma unroll
    for (int t = 0; t < kRowsPerWarp; ++t) {
      const bool visible = j0 + lane < jn[t];
      const float x = visible ? sc[t] * scale : -INFINITY;
      const float tile_max = warp_max(x);
      p[t] = 0.f;
      if (tile_max == -INFINITY) continue;  // warp-uniform: nothing visible to this row here
      const float m_new = fmaxf(m[t], tile_max);
      const float corr = expf(m[t] - m_new);  // 0 on the row's first visible tile
      p[t] = visible ? expf(x - m_new) : 0.f;
      l[t] = l[t] * corr + warp_sum(p[t]);
      m[t] = m_new;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) o[t][c] *= corr;
    }
    for (int jj = 0; jj < nk; ++jj) {
      float pj[kRowsPerWarp];
#pragma unroll
      for (int t = 0; t < kRowsPerWarp; ++t) pj[t] = __shfl_sync(kFullMask, p[t], jj);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int d = c * kWarp + lane;
        const float vd = d < HS ? sv[jj * HS + d] : 0.f;
#pragma unroll
        for (int t = 0; t < kRowsPerWarp; ++t) o[t][c] += pj[t] * vd;
      }
    }
  }

#pragma unroll
  for (int t = 0; t < kRowsPerWarp; ++t) {
    const int i = i0 + row[t];
    if (i >= s.Tq) continue;
    // l == 0 only for a row without visible keys (a caller's bug, see cuda_ops.h): zeros, -inf.
    const float inv = l[t] > 0.f ? 1.f / l[t] : 0.f;
    float* orow = out + (size_t(b) * s.Tq + i) * ldq + size_t(h) * HS;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = c * kWarp + lane;
      if (d < HS) orow[d] = o[t][c] * inv;
    }
    if (lane == 0) lse[(size_t(b) * s.NH + h) * s.Tq + i] = l[t] > 0.f ? m[t] + logf(l[t]) : -INFINITY;
  }
}

// ---- backward: dq ---------------------------------------------------------------------------
// grid (ceil(Tq / kRowsPerBlock), NH, B). Warp w owns the query rows i0 + w + kWarps t; a lane
// scores key j0 + lane: dS_ij = P_ij (dP_ij - D_i), then dq_i += dS_ij k_j by dims.
template <int kChunks>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(float* dq, const float* dout, const float* out, const float* lse, const float* q,
                                 const float* k, const float* v, AttnShape s, float scale) {
  FTX_DYNAMIC_SHARED(float, smem);
  const int HS = s.HS, ks = lane_row_stride(HS);
  float* sk = smem;                      // (kTile, ks)  read by lane and by dims
  float* sv = sk + kTile * ks;           // (kTile, ks)  read by lane
  float* sq = sv + kTile * ks;           // (kRowsPerBlock, HS)  broadcast
  float* sdo = sq + kRowsPerBlock * HS;  // (kRowsPerBlock, HS)  broadcast
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int b = blockIdx.z, h = blockIdx.y, kh = h / (s.NH / s.NKV), i0 = blockIdx.x * kRowsPerBlock;
  const size_t ldq = size_t(s.NH) * HS, ldkv = size_t(s.NKV) * HS;
  const size_t q_off = (size_t(b) * s.Tq * s.NH + h) * HS;
  const float* kb = k + (size_t(b) * s.Tk * s.NKV + kh) * HS;
  const float* vb = v + (size_t(b) * s.Tk * s.NKV + kh) * HS;

  const int nrows = min(kRowsPerBlock, s.Tq - i0);
  load_tile<kRowsPerBlock>(sq, HS, q + q_off, ldq, i0, nrows, HS);
  load_tile<kRowsPerBlock>(sdo, HS, dout + q_off, ldq, i0, nrows, HS);
  const int j_end = visible_keys(s, i0 + nrows - 1);

  int row[kRowsPerWarp], jn[kRowsPerWarp];
  float row_lse[kRowsPerWarp], row_d[kRowsPerWarp], acc[kRowsPerWarp][kChunks];
#pragma unroll
  for (int t = 0; t < kRowsPerWarp; ++t) {
    row[t] = warp + kWarps * t;
    const int i = i0 + row[t];
    jn[t] = visible_keys(s, i);
    const bool valid = i < s.Tq;  // warp-uniform
    row_lse[t] = valid ? lse[(size_t(b) * s.NH + h) * s.Tq + i] : 0.f;
    row_d[t] = valid ? warp_dot(dout + q_off + size_t(i) * ldq, out + q_off + size_t(i) * ldq, HS) : 0.f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc[t][c] = 0.f;
  }

  for (int j0 = 0; j0 < j_end; j0 += kTile) {
    const int nk = min(kTile, j_end - j0);
    __syncthreads();
    load_tile<kTile>(sk, ks, kb, ldkv, j0, nk, HS);
    load_tile<kTile>(sv, ks, vb, ldkv, j0, nk, HS);
    __syncthreads();

    float sc[kRowsPerWarp] = {}, dp[kRowsPerWarp] = {};
    for (int d = 0; d < HS; ++d) {
      const float kd = sk[lane * ks + d], vd = sv[lane * ks + d];
#pragma unroll
      for (int t = 0; t < kRowsPerWarp; ++t) {
        sc[t] += sq[row[t] * HS + d] * kd;
        dp[t] += sdo[row[t] * HS + d] * vd;
      }
    }
    float ds[kRowsPerWarp];
#pragma unroll
    for (int t = 0; t < kRowsPerWarp; ++t) {
      const bool visible = j0 + lane < jn[t];
      ds[t] = visible ? expf(sc[t] * scale - row_lse[t]) * (dp[t] - row_d[t]) : 0.f;
    }
    for (int jj = 0; jj < nk; ++jj) {
      float dsj[kRowsPerWarp];
#pragma unroll
      for (int t = 0; t < kRowsPerWarp; ++t) dsj[t] = __shfl_sync(kFullMask, ds[t], jj);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int d = c * kWarp + lane;
        const float kd = d < HS ? sk[jj * ks + d] : 0.f;
#pragma unroll
        for (int t = 0; t < kRowsPerWarp; ++t) acc[t][c] += dsj[t] * kd;
      }
    }
  }

#pragma unroll
  for (int t = 0; t < kRowsPerWarp; ++t) {
    const int i = i0 + row[t];
    if (i >= s.Tq) continue;
    float* drow = dq + q_off + size_t(i) * ldq;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = c * kWarp + lane;
      if (d < HS) drow[d] = scale * acc[t][c];
    }
  }
}

// ---- backward: dk, dv -----------------------------------------------------------------------
// grid (ceil(Tk / kRowsPerBlock), NKV, B). Warp w owns the key rows j0 + w + kWarps t; a lane
// scores query i0 + lane of the streamed tile, for every query head of the GQA group in turn:
// dv_j += P_ij dout_i, dk_j += dS_ij q_i by dims.
template <int kChunks>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkv_kernel(float* dk, float* dv, const float* dout, const float* out, const float* lse,
                                  const float* q, const float* k, const float* v, AttnShape s, float scale) {
  FTX_DYNAMIC_SHARED(float, smem);
  const int HS = s.HS, qs = lane_row_stride(HS);
  float* sq = smem;                        // (kTile, qs)  read by lane and by dims
  float* sdo = sq + kTile * qs;            // (kTile, qs)  read by lane and by dims
  float* sk = sdo + kTile * qs;            // (kRowsPerBlock, HS)  broadcast
  float* sv = sk + kRowsPerBlock * HS;     // (kRowsPerBlock, HS)  broadcast
  float* s_lse = sv + kRowsPerBlock * HS;  // (kTile)
  float* s_d = s_lse + kTile;              // (kTile)  D_i
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int b = blockIdx.z, kh = blockIdx.y, j0 = blockIdx.x * kRowsPerBlock;
  const int group = s.NH / s.NKV;
  const size_t ldq = size_t(s.NH) * HS, ldkv = size_t(s.NKV) * HS;
  const size_t kv_off = (size_t(b) * s.Tk * s.NKV + kh) * HS;

  load_tile<kRowsPerBlock>(sk, HS, k + kv_off, ldkv, j0, min(kRowsPerBlock, s.Tk - j0), HS);
  load_tile<kRowsPerBlock>(sv, HS, v + kv_off, ldkv, j0, min(kRowsPerBlock, s.Tk - j0), HS);
  // Causal: query i sees key j iff j <= q_pos0 + i, so queries before j0 - q_pos0 see none of ours.
  const int i_begin = s.causal ? max(0, j0 - s.q_pos0) : 0;

  int row[kRowsPerWarp];
  float acc_k[kRowsPerWarp][kChunks], acc_v[kRowsPerWarp][kChunks];
#pragma unroll
  for (int t = 0; t < kRowsPerWarp; ++t) {
    row[t] = warp + kWarps * t;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc_k[t][c] = acc_v[t][c] = 0.f;
  }

  for (int h = kh * group; h < (kh + 1) * group; ++h) {
    const size_t q_off = (size_t(b) * s.Tq * s.NH + h) * HS;
    const float* lse_h = lse + (size_t(b) * s.NH + h) * s.Tq;
    for (int i0 = i_begin; i0 < s.Tq; i0 += kTile) {
      const int nq = min(kTile, s.Tq - i0);
      __syncthreads();  // the previous tile is consumed (first pass: sk, sv are ready)
      load_tile<kTile>(sq, qs, q + q_off, ldq, i0, nq, HS);
      load_tile<kTile>(sdo, qs, dout + q_off, ldq, i0, nq, HS);
      for (int r = warp; r < kTile; r += kWarps) {
        const int i = i0 + r;
        const float d_i = i < s.Tq ? warp_dot(dout + q_off + size_t(i) * ldq, out + q_off + size_t(i) * ldq, HS) : 0.f;
        if (lane == 0) {
          s_d[r] = d_i;
          s_lse[r] = i < s.Tq ? lse_h[i] : 0.f;
        }
      }
      __syncthreads();

      float sc[kRowsPerWarp] = {}, dp[kRowsPerWarp] = {};
      for (int d = 0; d < HS; ++d) {
        const float qd = sq[lane * qs + d], dod = sdo[lane * qs + d];
#pragma unroll
        for (int t = 0; t < kRowsPerWarp; ++t) {
          sc[t] += qd * sk[row[t] * HS + d];
          dp[t] += dod * sv[row[t] * HS + d];
        }
      }
      const int i = i0 + lane;
      const int jn = visible_keys(s, i);
      float p[kRowsPerWarp], ds[kRowsPerWarp];
#pragma unroll
      for (int t = 0; t < kRowsPerWarp; ++t) {
        const bool visible = j0 + row[t] < jn;  // jn <= Tk, and 0 past Tq
        p[t] = visible ? expf(sc[t] * scale - s_lse[lane]) : 0.f;
        ds[t] = p[t] * (dp[t] - s_d[lane]);
      }
      for (int ii = 0; ii < nq; ++ii) {
        float pi[kRowsPerWarp], dsi[kRowsPerWarp];
#pragma unroll
        for (int t = 0; t < kRowsPerWarp; ++t) {
          pi[t] = __shfl_sync(kFullMask, p[t], ii);
          dsi[t] = __shfl_sync(kFullMask, ds[t], ii);
        }
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const int d = c * kWarp + lane;
          const float qd = d < HS ? sq[ii * qs + d] : 0.f, dod = d < HS ? sdo[ii * qs + d] : 0.f;
#pragma unroll
          for (int t = 0; t < kRowsPerWarp; ++t) {
            acc_v[t][c] += pi[t] * dod;
            acc_k[t][c] += dsi[t] * qd;
          }
        }
      }
    }
  }

#pragma unroll
  for (int t = 0; t < kRowsPerWarp; ++t) {
    const int j = j0 + row[t];
    if (j >= s.Tk) continue;
    const size_t off = kv_off + size_t(j) * ldkv;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = c * kWarp + lane;
      if (d < HS) {
        dk[off + d] = scale * acc_k[t][c];
        dv[off + d] = acc_v[t][c];
      }
    }
  }
}

// ---- launch helpers -------------------------------------------------------------------------

// Calls f(std::integral_constant<int, C>) with C = ceil(HS / 32) rounded up to 1, 2, 4 or 8: few
// instantiations, at most one idle chunk per lane.
template <class F>
void with_chunks(int HS, F&& f) {
  const int chunks = (HS + int(kWarp) - 1) / int(kWarp);
  if (chunks <= 1)
    f(std::integral_constant<int, 1>{});
  else if (chunks <= 2)
    f(std::integral_constant<int, 2>{});
  else if (chunks <= 4)
    f(std::integral_constant<int, 4>{});
  else
    f(std::integral_constant<int, kMaxChunks>{});
}

// Dynamic shared memory above 48 KB needs the kernel's opt-in (here at HS >= about 128).
template <class Kernel>
void allow_smem(Kernel* kernel, size_t bytes) {
  FTX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

void check_shape(const AttnShape& s) {
  FT_ASSERT(s.NKV > 0 && s.NH % s.NKV == 0 && s.Tk >= 1 && s.Tk <= s.Tk_cap && s.HS >= 1 && s.HS <= kMaxHeadSize,
            "cuda attention: NH %d NKV %d HS %d Tk %d Tk_cap %d", s.NH, s.NKV, s.HS, s.Tk, s.Tk_cap);
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, const AttnShape& s,
                       cudaStream_t st) {
  if (size_t(s.B) * s.NH == 0 || s.Tq == 0) return;
  check_shape(s);
  const float scale = 1.f / std::sqrt(float(s.HS));
  const size_t bytes = sizeof(float) * (size_t(kTile) * lane_row_stride(s.HS) + size_t(kTile + kRowsPerBlock) * s.HS);
  const dim3 grid(blocks_for(size_t(s.Tq), kRowsPerBlock), s.NH, s.B);
  with_chunks(s.HS, [&](auto chunks) {
    constexpr int kChunks = decltype(chunks)::value;
    allow_smem(attention_forward_kernel<kChunks>, bytes);
    FTX_LAUNCH(attention_forward_kernel<kChunks>, grid, kThreads, bytes, st, out, lse, q, k, v, s, scale);
    FTX_CUDA_LAUNCHED();
  });
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const float* q, const float* k, const float* v, const AttnShape& s, cudaStream_t st) {
  if (size_t(s.B) * s.NH == 0 || s.Tq == 0) return;
  check_shape(s);
  FT_ASSERT(s.Tk_cap == s.Tk, "cuda attention backward: Tk %d Tk_cap %d", s.Tk, s.Tk_cap);
  const float scale = 1.f / std::sqrt(float(s.HS));
  const size_t tiles = sizeof(float) * (2 * size_t(kTile) * lane_row_stride(s.HS) + 2 * size_t(kRowsPerBlock) * s.HS);
  const size_t dq_bytes = tiles;
  const size_t dkv_bytes = tiles + sizeof(float) * 2 * kTile;  // + lse and D of the query tile
  const dim3 dq_grid(blocks_for(size_t(s.Tq), kRowsPerBlock), s.NH, s.B);
  const dim3 dkv_grid(blocks_for(size_t(s.Tk), kRowsPerBlock), s.NKV, s.B);
  with_chunks(s.HS, [&](auto chunks) {
    constexpr int kChunks = decltype(chunks)::value;
    allow_smem(attention_backward_dq_kernel<kChunks>, dq_bytes);
    FTX_LAUNCH(attention_backward_dq_kernel<kChunks>, dq_grid, kThreads, dq_bytes, st, dq, dout, out, lse, q, k, v, s,
               scale);
    FTX_CUDA_LAUNCHED();
    allow_smem(attention_backward_dkv_kernel<kChunks>, dkv_bytes);
    FTX_LAUNCH(attention_backward_dkv_kernel<kChunks>, dkv_grid, kThreads, dkv_bytes, st, dk, dv, dout, out, lse, q, k,
               v, s, scale);
    FTX_CUDA_LAUNCHED();
  });
}

}  // namespace ftx::cuda
