// Flash-style attention on tensor cores, for MatmulPrecision::Bf16: the same op and the same saved
// log-sum-exp as attention.cu (semantics: kernels/cpu/ops_attention.h), with the four products of
// a tile (Q K^T, P V forward; Q K^T, dO V^T, dS K, P^T dO, dS^T Q backward) as bf16 WMMA
// fragments with fp32 accumulation. Softmax, masking and the log-sum-exp stay in fp32.
//
// Layout: tiles of 64 query rows by 64 keys; a block has 4 warps, and each warp owns 16 rows of
// the side it accumulates (query rows forward and for dq, key rows for dk/dv). Operands are
// rounded to bf16 when they are staged in shared memory; products go through shared memory in
// fp32 (WMMA's fragment layout is opaque), where the softmax reads them by row.
//   forward: per query tile, keys in tiles; O lives in shared memory because the online softmax
//            rescales it by row after every key tile.
//   dq:      per query tile, keys in tiles; dq accumulates in fragments.
//   dk/dv:   per key tile and kv head, over the query heads of the GQA group and the query tiles
//            that see the keys; dk and dv accumulate in fragments. No atomics: every output
//            element has one owner, and keys no query sees get exact zeros.
// D_i = <dout_i, out_i> is computed per query tile from the fp32 inputs.
// Head sizes 32, 64 and 128 (attention_tc_supports); other shapes use attention.cu.
//
// Shared memory per block at HS = 128: forward 110 KB, dq 111 KB, dk/dv 120 KB (opt-in above
// 48 KB, as attention.cu does), with rows padded by 16 bytes against bank conflicts.
#include <cuda_bf16.h>
#include <mma.h>

#include <cmath>
#include <cstddef>

#include "kernels/base/assert.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_ops.h"

namespace ftx::cuda {
namespace {

using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

constexpr int kTcWarps = 4;
constexpr int kTcThreads = kTcWarps * int(kWarp);
constexpr int kBr = 64;  // query rows per tile
constexpr int kBc = 64;  // keys per tile
constexpr int kF = 16;   // fragment edge
constexpr unsigned kMask = 0xffffffffu;

// Leading dimensions in shared memory, padded by 16 bytes: with a 128- or 256-byte row stride the
// rows of a 16 x 16 fragment would all fall in the same banks. 16-row blocks stay 32-byte aligned,
// as WMMA requires (test_cuda_emu checks it).
template <int HS>
constexpr int kLdH = HS + 8;   // bf16 (rows, HS) tiles: Q, K, V, dO
constexpr int kLdP = kBc + 8;  // bf16 (kBr, kBc): P, dS
constexpr int kLdS = kBc + 4;  // fp32 (kBr, kBc): S, dP
template <int HS>
constexpr int kLdO = HS + 4;  // fp32 (kBr, HS): O, and the staging of dq / dk / dv

using FragA = wmma::fragment<wmma::matrix_a, kF, kF, kF, bf16, wmma::row_major>;
using FragAT = wmma::fragment<wmma::matrix_a, kF, kF, kF, bf16, wmma::col_major>;  // a transposed
using FragB = wmma::fragment<wmma::matrix_b, kF, kF, kF, bf16, wmma::row_major>;
using FragBT = wmma::fragment<wmma::matrix_b, kF, kF, kF, bf16, wmma::col_major>;  // b transposed
using FragC = wmma::fragment<wmma::accumulator, kF, kF, kF, float>;

// Keys visible to query row i (0 for rows past Tq).
__device__ inline int tc_visible_keys(const AttnShape& s, int i) {
  if (i >= s.Tq) return 0;
  return s.causal ? min(s.Tk, s.q_pos0 + i + 1) : s.Tk;
}

// Rows first .. first + 64 of a (rows, stride) fp32 matrix into a (64, HS) bf16 tile (leading
// dimension kLdH); rows at or past `rows` become zeros (a garbage row times a zero probability
// would still give NaN).
template <int HS>
__device__ void stage_tile(bf16* dst, const float* src, size_t stride, int first, int rows) {
  for (int e = threadIdx.x; e < kBr * HS; e += kTcThreads) {
    const int r = e / HS, d = e % HS;
    dst[r * kLdH<HS> + d] = __float2bfloat16(first + r < rows ? src[size_t(first + r) * stride + d] : 0.0f);
  }
}

// D_i = <dout_i, out_i> for the 64 query rows of a tile (0 past Tq), one warp per row.
template <int HS>
__device__ void row_dots(float* D, const float* dout, const float* out, size_t stride, int first, int rows) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int r = warp; r < kBr; r += kTcWarps) {
    float acc = 0.0f;
    if (first + r < rows)
      for (int d = lane; d < HS; d += kWarp)
        acc += dout[size_t(first + r) * stride + d] * out[size_t(first + r) * stride + d];
    acc = warp_sum(acc);
    if (lane == 0) D[r] = acc;
  }
}

// C (16 x 16, fp32, row-major ld ldc) = A (16 x K) B (K x 16), both bf16 in shared memory:
// A row-major (ld lda) or, with AT, stored transposed (A^T row-major); B likewise with BT.
template <int K, class FA, class FB>
__device__ void product16(float* C, int ldc, const bf16* A, int lda, int a_step, const bf16* B, int ldb, int b_step) {
  FragC acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int kk = 0; kk < K / kF; ++kk) {
    FA a;
    FB b;
    wmma::load_matrix_sync(a, A + kk * a_step, lda);
    wmma::load_matrix_sync(b, B + kk * b_step, ldb);
    wmma::mma_sync(acc, a, b, acc);
  }
  wmma::store_matrix_sync(C, acc, ldc, wmma::mem_row_major);
}

// ---- forward ----------------------------------------------------------------------------------

template <int HS>
__global__ void __launch_bounds__(kTcThreads)
    attention_tc_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v, AttnShape s,
                                float scale) {
  FTX_DYNAMIC_SHARED(float, smem);
  constexpr int LH = kLdH<HS>, LO = kLdO<HS>;
  bf16* Qs = reinterpret_cast<bf16*>(smem);               // (kBr, HS)
  bf16* Ks = Qs + kBr * LH;                               // (kBc, HS)
  bf16* Vs = Ks + kBc * LH;                               // (kBc, HS)
  bf16* Ps = Vs + kBc * LH;                               // (kBr, kBc) probabilities of the tile
  float* Ss = reinterpret_cast<float*>(Ps + kBr * kLdP);  // (kBr, kBc) scores
  float* Os = Ss + kBr * kLdS;                            // (kBr, HS) unnormalised output
  float* alpha = Os + kBr * LO;                           // (kBr) rescale of the tile

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int i0 = blockIdx.x * kBr, h = blockIdx.y, b = blockIdx.z, kh = h / (s.NH / s.NKV);
  const size_t qs = size_t(s.NH) * HS, ks = size_t(s.NKV) * HS;
  const float* qb = q + size_t(b) * s.Tq * qs + size_t(h) * HS;
  const float* kb = k + size_t(b) * s.Tk_cap * ks + size_t(kh) * HS;
  const float* vb = v + size_t(b) * s.Tk_cap * ks + size_t(kh) * HS;
  stage_tile<HS>(Qs, qb, qs, i0, s.Tq);
  for (int e = threadIdx.x; e < kBr * LO; e += kTcThreads) Os[e] = 0.0f;

  // Two lanes per row: lane 2r and 2r + 1 hold row r of the warp's 16, columns by halves.
  const int r = warp * kF + lane / 2, half = lane % 2;
  const int vis = tc_visible_keys(s, i0 + r);
  float m = -INFINITY, l = 0.0f;
  const int last = min(s.Tq, i0 + kBr) - 1;
  const int kend = s.causal ? min(s.Tk, s.q_pos0 + last + 1) : s.Tk;
  for (int j0 = 0; j0 < kend; j0 += kBc) {
    __syncthreads();  // the previous tile's keys and values are no longer read
    stage_tile<HS>(Ks, kb, ks, j0, s.Tk);
    stage_tile<HS>(Vs, vb, ks, j0, s.Tk);
    __syncthreads();
    for (int n = 0; n < kBc / kF; ++n)  // S_w = Q_w K^T
      product16<HS, FragA, FragBT>(Ss + warp * kF * kLdS + n * kF, kLdS, Qs + warp * kF * LH, LH, kF, Ks + n * kF * LH,
                                   LH, kF);
    __syncwarp();
    float* srow = Ss + r * kLdS;
    float mx = -INFINITY;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float x = j0 + c < vis ? srow[c] * scale : -INFINITY;
      srow[c] = x;
      mx = fmaxf(mx, x);
    }
    mx = fmaxf(mx, __shfl_xor_sync(kMask, mx, 1));
    const float m_new = fmaxf(m, mx);
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // no visible key yet: everything is 0
    float sum = 0.0f;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float p = expf(srow[c] - base);
      Ps[r * kLdP + c] = __float2bfloat16(p);
      sum += p;
    }
    sum += __shfl_xor_sync(kMask, sum, 1);
    const float a = expf(m - base);
    l = l * a + sum;
    m = m_new;
    if (half == 0) alpha[r] = a;
    __syncwarp();
    for (int e = lane; e < kF * HS; e += kWarp) Os[(warp * kF + e / HS) * LO + e % HS] *= alpha[warp * kF + e / HS];
    __syncwarp();
    for (int dn = 0; dn < HS / kF; ++dn) {  // O_w += P_w V
      FragC acc;
      float* o = Os + warp * kF * LO + dn * kF;
      wmma::load_matrix_sync(acc, o, LO, wmma::mem_row_major);
      for (int kk = 0; kk < kBc / kF; ++kk) {
        FragA pa;
        FragB vb16;
        wmma::load_matrix_sync(pa, Ps + warp * kF * kLdP + kk * kF, kLdP);
        wmma::load_matrix_sync(vb16, Vs + kk * kF * LH + dn * kF, LH);
        wmma::mma_sync(acc, pa, vb16, acc);
      }
      wmma::store_matrix_sync(o, acc, LO, wmma::mem_row_major);
    }
    __syncwarp();
  }
  const int i = i0 + r;
  if (i < s.Tq) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float* orow = out + (size_t(b) * s.Tq + i) * qs + size_t(h) * HS;
    for (int d = half; d < HS; d += 2) orow[d] = Os[r * LO + d] * inv;
    if (half == 0) lse[(size_t(b) * s.NH + h) * s.Tq + i] = l > 0.0f ? m + logf(l) : -INFINITY;
  }
}

// ---- backward: dq -------------------------------------------------------------------------------

template <int HS>
__global__ void __launch_bounds__(kTcThreads)
    attention_tc_backward_dq_kernel(float* dq, const float* dout, const float* out, const float* lse, const float* q,
                                    const float* k, const float* v, AttnShape s, float scale) {
  FTX_DYNAMIC_SHARED(float, smem);
  constexpr int LH = kLdH<HS>, LO = kLdO<HS>;
  bf16* Qs = reinterpret_cast<bf16*>(smem);                // (kBr, HS)
  bf16* dOs = Qs + kBr * LH;                               // (kBr, HS)
  bf16* Ks = dOs + kBr * LH;                               // (kBc, HS)
  bf16* Vs = Ks + kBc * LH;                                // (kBc, HS)
  bf16* dSs = Vs + kBc * LH;                               // (kBr, kBc)
  float* Ss = reinterpret_cast<float*>(dSs + kBr * kLdP);  // (kBr, kBc); with dPs: dq staging at the end
  float* dPs = Ss + kBr * kLdS;                            // (kBr, kBc)
  float* Ls = dPs + kBr * kLdS;                            // (kBr) log-sum-exp
  float* Ds = Ls + kBr;                                    // (kBr) D_i

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int i0 = blockIdx.x * kBr, h = blockIdx.y, b = blockIdx.z, kh = h / (s.NH / s.NKV);
  const size_t qs = size_t(s.NH) * HS, ks = size_t(s.NKV) * HS;
  const size_t qoff = size_t(b) * s.Tq * qs + size_t(h) * HS;
  const float* kb = k + size_t(b) * s.Tk_cap * ks + size_t(kh) * HS;
  const float* vb = v + size_t(b) * s.Tk_cap * ks + size_t(kh) * HS;
  stage_tile<HS>(Qs, q + qoff, qs, i0, s.Tq);
  stage_tile<HS>(dOs, dout + qoff, qs, i0, s.Tq);
  row_dots<HS>(Ds, dout + qoff, out + qoff, qs, i0, s.Tq);
  for (int r = threadIdx.x; r < kBr; r += kTcThreads)
    Ls[r] = i0 + r < s.Tq ? lse[(size_t(b) * s.NH + h) * s.Tq + i0 + r] : 0.0f;

  FragC acc[HS / kF];
  for (auto& f : acc) wmma::fill_fragment(f, 0.0f);
  const int last = min(s.Tq, i0 + kBr) - 1;
  const int kend = s.causal ? min(s.Tk, s.q_pos0 + last + 1) : s.Tk;
  for (int j0 = 0; j0 < kend; j0 += kBc) {
    __syncthreads();
    stage_tile<HS>(Ks, kb, ks, j0, s.Tk);
    stage_tile<HS>(Vs, vb, ks, j0, s.Tk);
    __syncthreads();
    for (int n = 0; n < kBc / kF; ++n) {
      product16<HS, FragA, FragBT>(Ss + warp * kF * kLdS + n * kF, kLdS, Qs + warp * kF * LH, LH, kF, Ks + n * kF * LH,
                                   LH, kF);  // S_w = Q_w K^T
      product16<HS, FragA, FragBT>(dPs + warp * kF * kLdS + n * kF, kLdS, dOs + warp * kF * LH, LH, kF,
                                   Vs + n * kF * LH, LH, kF);  // dP_w = dO_w V^T
    }
    __syncwarp();
    for (int e = lane; e < kF * kBc; e += kWarp) {  // dS = P (dP - D)
      const int r = warp * kF + e / kBc, c = e % kBc;
      const float p = j0 + c < tc_visible_keys(s, i0 + r) ? expf(Ss[r * kLdS + c] * scale - Ls[r]) : 0.0f;
      dSs[r * kLdP + c] = __float2bfloat16(p * (dPs[r * kLdS + c] - Ds[r]));
    }
    __syncwarp();
    for (int dn = 0; dn < HS / kF; ++dn)  // dq_w += dS_w K
      for (int kk = 0; kk < kBc / kF; ++kk) {
        FragA a;
        FragB kf;
        wmma::load_matrix_sync(a, dSs + warp * kF * kLdP + kk * kF, kLdP);
        wmma::load_matrix_sync(kf, Ks + kk * kF * LH + dn * kF, LH);
        wmma::mma_sync(acc[dn], a, kf, acc[dn]);
      }
  }
  __syncthreads();  // Ss / dPs become the staging area of dq (kBr x LO floats <= 2 kBr kLdS)
  float* stage = Ss + warp * kF * LO;
  for (int dn = 0; dn < HS / kF; ++dn) wmma::store_matrix_sync(stage + dn * kF, acc[dn], LO, wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < kF * HS; e += kWarp) {
    const int i = i0 + warp * kF + e / HS;
    if (i < s.Tq) dq[(size_t(b) * s.Tq + i) * qs + size_t(h) * HS + e % HS] = stage[(e / HS) * LO + e % HS] * scale;
  }
}

// ---- backward: dk, dv -------------------------------------------------------------------------

template <int HS>
__global__ void __launch_bounds__(kTcThreads)
    attention_tc_backward_dkv_kernel(float* dk, float* dv, const float* dout, const float* out, const float* lse,
                                     const float* q, const float* k, const float* v, AttnShape s, float scale) {
  FTX_DYNAMIC_SHARED(float, smem);
  constexpr int LH = kLdH<HS>, LO = kLdO<HS>;
  bf16* Ks = reinterpret_cast<bf16*>(smem);                // (kBc, HS) this block's keys
  bf16* Vs = Ks + kBc * LH;                                // (kBc, HS)
  bf16* Qs = Vs + kBc * LH;                                // (kBr, HS) the current query tile
  bf16* dOs = Qs + kBr * LH;                               // (kBr, HS)
  bf16* Ps = dOs + kBr * LH;                               // (kBr, kBc)
  bf16* dSs = Ps + kBr * kLdP;                             // (kBr, kBc)
  float* Ss = reinterpret_cast<float*>(dSs + kBr * kLdP);  // (kBr, kBc); with dPs: dk/dv staging at the end
  float* dPs = Ss + kBr * kLdS;                            // (kBr, kBc)
  float* Ls = dPs + kBr * kLdS;                            // (kBr)
  float* Ds = Ls + kBr;                                    // (kBr)

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int j0 = blockIdx.x * kBc, kh = blockIdx.y, b = blockIdx.z, group = s.NH / s.NKV;
  const size_t qs = size_t(s.NH) * HS, ks = size_t(s.NKV) * HS;
  stage_tile<HS>(Ks, k + size_t(b) * s.Tk_cap * ks + size_t(kh) * HS, ks, j0, s.Tk);
  stage_tile<HS>(Vs, v + size_t(b) * s.Tk_cap * ks + size_t(kh) * HS, ks, j0, s.Tk);

  FragC dk_acc[HS / kF], dv_acc[HS / kF];
  for (auto& f : dk_acc) wmma::fill_fragment(f, 0.0f);
  for (auto& f : dv_acc) wmma::fill_fragment(f, 0.0f);
  // Causal: query i sees key j iff j <= q_pos0 + i, so tiles before (j0 - q_pos0) see none.
  const int first = s.causal ? max(0, j0 - s.q_pos0) / kBr * kBr : 0;
  for (int g = 0; g < group; ++g) {
    const int h = kh * group + g;
    const size_t qoff = size_t(b) * s.Tq * qs + size_t(h) * HS;
    for (int i0 = first; i0 < s.Tq; i0 += kBr) {
      __syncthreads();  // the previous query tile is no longer read
      stage_tile<HS>(Qs, q + qoff, qs, i0, s.Tq);
      stage_tile<HS>(dOs, dout + qoff, qs, i0, s.Tq);
      row_dots<HS>(Ds, dout + qoff, out + qoff, qs, i0, s.Tq);
      for (int r = threadIdx.x; r < kBr; r += kTcThreads)
        Ls[r] = i0 + r < s.Tq ? lse[(size_t(b) * s.NH + h) * s.Tq + i0 + r] : 0.0f;
      __syncthreads();
      // Warp w: columns w*16 .. w*16+15 (its keys) of S and dP, for all 64 query rows.
      for (int mq = 0; mq < kBr / kF; ++mq) {
        product16<HS, FragA, FragBT>(Ss + mq * kF * kLdS + warp * kF, kLdS, Qs + mq * kF * LH, LH, kF,
                                     Ks + warp * kF * LH, LH, kF);  // S = Q K_w^T
        product16<HS, FragA, FragBT>(dPs + mq * kF * kLdS + warp * kF, kLdS, dOs + mq * kF * LH, LH, kF,
                                     Vs + warp * kF * LH, LH, kF);  // dP = dO V_w^T
      }
      __syncwarp();
      for (int e = lane; e < kBr * kF; e += kWarp) {
        const int r = e / kF, c = warp * kF + e % kF;
        const float p = j0 + c < tc_visible_keys(s, i0 + r) ? expf(Ss[r * kLdS + c] * scale - Ls[r]) : 0.0f;
        Ps[r * kLdP + c] = __float2bfloat16(p);
        dSs[r * kLdP + c] = __float2bfloat16(p * (dPs[r * kLdS + c] - Ds[r]));
      }
      __syncwarp();
      for (int dn = 0; dn < HS / kF; ++dn)
        for (int kk = 0; kk < kBr / kF; ++kk) {
          // P_w^T and dS_w^T (16 keys x 16 queries) are the stored (queries, keys) blocks read
          // column-major.
          FragAT pt, dst;
          FragB dof, qf;
          wmma::load_matrix_sync(pt, Ps + kk * kF * kLdP + warp * kF, kLdP);
          wmma::load_matrix_sync(dof, dOs + kk * kF * LH + dn * kF, LH);
          wmma::mma_sync(dv_acc[dn], pt, dof, dv_acc[dn]);  // dV_w += P_w^T dO
          wmma::load_matrix_sync(dst, dSs + kk * kF * kLdP + warp * kF, kLdP);
          wmma::load_matrix_sync(qf, Qs + kk * kF * LH + dn * kF, LH);
          wmma::mma_sync(dk_acc[dn], dst, qf, dk_acc[dn]);  // dK_w += dS_w^T Q
        }
    }
  }
  __syncthreads();  // Ss / dPs become the staging area: kF x LO floats per warp, 4 kF LO <= 2 kBr kLdS
  float* stage = Ss + warp * kF * LO;
  for (int pass = 0; pass < 2; ++pass) {
    FragC* acc = pass == 0 ? dk_acc : dv_acc;
    float* dst = pass == 0 ? dk : dv;
    const float mul = pass == 0 ? scale : 1.0f;
    __syncwarp();
    for (int dn = 0; dn < HS / kF; ++dn) wmma::store_matrix_sync(stage + dn * kF, acc[dn], LO, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < kF * HS; e += kWarp) {
      const int j = j0 + warp * kF + e / HS;
      if (j < s.Tk) dst[(size_t(b) * s.Tk + j) * ks + size_t(kh) * HS + e % HS] = stage[(e / HS) * LO + e % HS] * mul;
    }
  }
}

template <int HS>
size_t forward_smem() {  // Q, K, V, P in bf16; S, O, alpha in fp32
  return (size_t(kBr) * kLdH<HS> * 3 + size_t(kBr) * kLdP) * sizeof(bf16) +
         (size_t(kBr) * kLdS + size_t(kBr) * kLdO<HS> + kBr) * sizeof(float);
}
template <int HS>
size_t dq_smem() {  // Q, dO, K, V, dS in bf16; S, dP, lse, D in fp32
  return (size_t(kBr) * kLdH<HS> * 4 + size_t(kBr) * kLdP) * sizeof(bf16) +
         (size_t(kBr) * kLdS * 2 + 2 * kBr) * sizeof(float);
}
template <int HS>
size_t dkv_smem() {  // K, V, Q, dO, P, dS in bf16; S, dP, lse, D in fp32
  return (size_t(kBr) * kLdH<HS> * 4 + size_t(kBr) * kLdP * 2) * sizeof(bf16) +
         (size_t(kBr) * kLdS * 2 + 2 * kBr) * sizeof(float);
}
static_assert(kTcWarps * kF * kLdO<128> <= 2 * kBr * kLdS, "the output staging must fit in S and dP");

template <class Kernel>
void allow_tc_smem(Kernel* kernel, size_t bytes) {
  FTX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

template <int HS>
void tc_forward(float* out, float* lse, const float* q, const float* k, const float* v, const AttnShape& s,
                cudaStream_t st) {
  const size_t bytes = forward_smem<HS>();
  allow_tc_smem(attention_tc_forward_kernel<HS>, bytes);
  const dim3 grid((s.Tq + kBr - 1) / kBr, s.NH, s.B);
  FTX_LAUNCH(attention_tc_forward_kernel<HS>, grid, kTcThreads, bytes, st, out, lse, q, k, v, s,
             1.0f / sqrtf(float(HS)));
  FTX_CUDA_LAUNCHED();
}

template <int HS>
void tc_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse, const float* q,
                 const float* k, const float* v, const AttnShape& s, cudaStream_t st) {
  const float scale = 1.0f / sqrtf(float(HS));
  const size_t dq_bytes = dq_smem<HS>(), dkv_bytes = dkv_smem<HS>();
  allow_tc_smem(attention_tc_backward_dq_kernel<HS>, dq_bytes);
  allow_tc_smem(attention_tc_backward_dkv_kernel<HS>, dkv_bytes);
  FTX_LAUNCH(attention_tc_backward_dq_kernel<HS>, dim3((s.Tq + kBr - 1) / kBr, s.NH, s.B), kTcThreads, dq_bytes, st, dq,
             dout, out, lse, q, k, v, s, scale);
  FTX_CUDA_LAUNCHED();
  FTX_LAUNCH(attention_tc_backward_dkv_kernel<HS>, dim3((s.Tk + kBc - 1) / kBc, s.NKV, s.B), kTcThreads, dkv_bytes, st,
             dk, dv, dout, out, lse, q, k, v, s, scale);
  FTX_CUDA_LAUNCHED();
}

}  // namespace

bool attention_tc_supports(const AttnShape& s) {
  return (s.HS == 32 || s.HS == 64 || s.HS == 128) && s.Tq >= kF && s.Tk >= 1 && s.NKV >= 1 && s.NH % s.NKV == 0;
}

void attention_tc_forward(float* out, float* lse, const float* q, const float* k, const float* v, const AttnShape& s,
                          cudaStream_t st) {
  FT_ASSERT(attention_tc_supports(s), "tensor-core attention: unsupported shape HS=%d Tq=%d", s.HS, s.Tq);
  switch (s.HS) {
    case 32:
      tc_forward<32>(out, lse, q, k, v, s, st);
      break;
    case 64:
      tc_forward<64>(out, lse, q, k, v, s, st);
      break;
    default:
      tc_forward<128>(out, lse, q, k, v, s, st);
      break;
  }
}

void attention_tc_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                           const float* q, const float* k, const float* v, const AttnShape& s, cudaStream_t st) {
  FT_ASSERT(attention_tc_supports(s), "tensor-core attention: unsupported shape HS=%d Tq=%d", s.HS, s.Tq);
  switch (s.HS) {
    case 32:
      tc_backward<32>(dq, dk, dv, dout, out, lse, q, k, v, s, st);
      break;
    case 64:
      tc_backward<64>(dq, dk, dv, dout, out, lse, q, k, v, s, st);
      break;
    default:
      tc_backward<128>(dq, dk, dv, dout, out, lse, q, k, v, s, st);
      break;
  }
}

}  // namespace ftx::cuda
