// Attention's fp32 products for blocks of query rows, register-blocked: S = scale * Q K^T (attn_qk,
// from a transposed copy of K: keys contiguous) and O = P V (attn_pv, V as it lies in the cache),
// and the softmax's row max (max_of). Used by attention_forward and attention_backward
// (ops_attention.h) for prompts and training (Tq >= kAttnTileMinRows): the backward's dP = dO V^T
// is attn_qk on a transposed V, dQ = dS K is attn_pv, and dV = P^T dO and dK = dS^T Q are attn_pv
// reading P and dS transposed in place (TransP). OpenBLAS on such small products (M = 64 rows,
// K = 64) spent most of its time packing and scaling.
//
// Vectors are GCC vector extensions at the widest width the build targets (16 floats with AVX-512,
// 8 with AVX, 4 otherwise), so each tile is a few dozen accumulators held in registers: an S tile
// is 8 rows x 2 vectors of keys (one broadcast of q per row and two loads of K^T per step of the
// head dimension), an O tile is R rows x up to 4 vectors of the head (16 accumulators); 6 rows
// and 12 accumulators with AVX2's 16 registers.
// Numerics: every S element is a sum over the head dimension in order d = 0..HS-1, every O element
// a sum over the keys in order with fused multiply-adds; whatever the blocking, an element's bits
// do not depend on the block, the thread or the thread count.
// At --precision bf16 the same tiles take operands rounded to bf16 first (ops_attention.h rounds
// them with round_to_bf16): a product of two bf16 numbers is exact in fp32, so that is bf16 inputs
// with fp32 sums.
// Deliberately not here: the rest of the softmax (ops_attention.h), online-softmax fusion (the
// forward keeps the probabilities for the backward).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>

namespace ftx::cpu {

namespace attn_tiles {

// Lanes of a vector; query rows of an S tile (2 accumulators each); accumulators of an O tile.
// AVX-512 has 32 vector registers, AVX and SSE 16: the tiles leave room for the loads.
#if defined(__AVX512F__)
constexpr int kLanes = 16, kRowTile = 8, kPvAccs = 16;
#elif defined(__AVX__)
constexpr int kLanes = 8, kRowTile = 6, kPvAccs = 12;
#else
constexpr int kLanes = 4, kRowTile = 6, kPvAccs = 12;
#endif
typedef float vfloat __attribute__((vector_size(kLanes * sizeof(float))));

inline vfloat load(const float* p) {
  vfloat v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vfloat v) { std::memcpy(p, &v, sizeof v); }

constexpr int kKeyTile = 2 * kLanes;  // keys per S tile

// c[r][j] = scale * sum_d q[r][d] kt[d][j] for r < R and j < n (n <= kKeyTile); kt holds kKeyTile
// readable columns. The first step initialises the accumulators (a product, no zeroed array: GCC
// zeroes one with rep stos, a tenth of the tile's time).
template <int R>
inline void qk_tile(float* c, int ldc, const float* q, int ldq, const float* kt, int ldk, int HS, float scale, int n) {
  vfloat acc[R][2];
  {
    const vfloat k0 = load(kt), k1 = load(kt + kLanes);
    for (int r = 0; r < R; ++r) {
      const float a = q[size_t(r) * ldq];
      acc[r][0] = a * k0;
      acc[r][1] = a * k1;
    }
  }
  for (int d = 1; d < HS; ++d) {
    const vfloat k0 = load(kt + size_t(d) * ldk), k1 = load(kt + size_t(d) * ldk + kLanes);
    for (int r = 0; r < R; ++r) {
      const float a = q[size_t(r) * ldq + d];
      acc[r][0] += a * k0;
      acc[r][1] += a * k1;
    }
  }
  for (int r = 0; r < R; ++r) {
    float* row = c + size_t(r) * ldc;
    const vfloat s0 = acc[r][0] * scale, s1 = acc[r][1] * scale;
    if (n == kKeyTile) {
      store(row, s0);
      store(row + kLanes, s1);
    } else {
      for (int j = 0; j < n; ++j) row[j] = j < kLanes ? s0[j] : s1[j - kLanes];
    }
  }
}

// o[r][:] = sum_{j < keys} p(r, j) v[j][:] (Acc: o[r][:] += that sum) for r < R and keys >= 1; NV
// vectors of the head. p(r, j) is p[r * ldp + j], or with TransP p[j * ldp + r] (P^T: the
// backward's dV = P^T dO and dK = dS^T Q read P and dS as they lie).
template <int R, int NV, bool Acc = false, bool TransP = false>
inline void pv_tile(float* o, int ldo, const float* p, int ldp, const float* v, int ldv, int keys) {
  const auto at = [&](int r, int j) { return TransP ? p[size_t(j) * ldp + r] : p[size_t(r) * ldp + j]; };
  vfloat acc[R][NV];
  for (int r = 0; r < R; ++r) {
    const float a = at(r, 0);
    for (int n = 0; n < NV; ++n) acc[r][n] = a * load(v + n * kLanes);
  }
  for (int j = 1; j < keys; ++j) {
    vfloat vv[NV];
    for (int n = 0; n < NV; ++n) vv[n] = load(v + size_t(j) * ldv + n * kLanes);
    for (int r = 0; r < R; ++r) {
      const float a = at(r, j);
      for (int n = 0; n < NV; ++n) acc[r][n] += a * vv[n];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int n = 0; n < NV; ++n) {
      float* dst = o + size_t(r) * ldo + n * kLanes;
      store(dst, Acc ? load(dst) + acc[r][n] : acc[r][n]);
    }
  }
}

// The largest of x[0..n), n >= 1, as -inf when all are -inf. The softmax's `omp simd` max
// reduction compiled to partial maxima stored as scalars and reloaded as one vector (GCC 12): a
// store-forwarding stall that took a third of the softmax's time.
inline float max_of(const float* x, int n) {
  int j = 0;
  float m = x[0];
  if (n >= kLanes) {
    vfloat acc = load(x);
    for (j = kLanes; j + kLanes <= n; j += kLanes) {
      const vfloat v = load(x + j);
      acc = acc > v ? acc : v;
    }
    m = acc[0];
    for (int l = 1; l < kLanes; ++l) m = m > acc[l] ? m : acc[l];
  }
  for (; j < n; ++j) m = m > x[j] ? m : x[j];
  return m;
}

}  // namespace attn_tiles

// Whether the tiles take a head of HS floats: a whole number of vectors, 1 to 4 or a multiple of 4
// (wider heads are multiplied in column slices of 4 vectors).
inline bool attn_tiles_fit(int HS) {
  const int nv = HS / attn_tiles::kLanes;
  return HS % attn_tiles::kLanes == 0 && nv >= 1 && (nv <= 4 || nv % 4 == 0);
}

// Floats of the transposed K for Tk keys of a head of HS: whole S tiles.
inline size_t attn_kt_floats(int Tk, int HS) {
  constexpr int kt = attn_tiles::kKeyTile;
  return size_t((Tk + kt - 1) / kt) * kt * HS;
}

// Key tile `tile` of k (keys, HS; row stride ldkv) transposed into kt: (HS, kKeyTile) from
// kt + tile * HS * kKeyTile, so that an S tile reads its keys as one contiguous block. Keys past
// `keys` are zeroed.
inline void attn_transpose_key_tile(float* kt, const float* k, int ldkv, int keys, int HS, int tile) {
  constexpr int n = attn_tiles::kKeyTile;
  float* dst = kt + size_t(tile) * HS * n;
  const int j0 = tile * n, cols = std::min(n, keys - j0);
  for (int d = 0; d < HS; ++d) {
    float* row = dst + size_t(d) * n;
    for (int j = 0; j < cols; ++j) row[j] = k[size_t(j0 + j) * ldkv + d];
    std::fill(row + cols, row + n, 0.0f);
  }
}

// s (rows, lds) = scale * q (rows, HS) K^T on the keys row i sees: keys_of(i) for the last row of
// each tile of rows (entries after a row's own keys are written too; the softmax overwrites
// them). kt: the keys transposed by attn_transpose_key_tile.
template <class KeysOf>
void attn_qk(float* s, int lds, const float* q, int ldq, const float* kt, int rows, int HS, float scale,
             KeysOf&& keys_of) {
  using namespace attn_tiles;
  const auto row_tile = [&]<int R>(int r0) {
    const int keys = keys_of(r0 + R - 1);
    for (int j = 0; j < keys; j += kKeyTile)
      qk_tile<R>(s + size_t(r0) * lds + j, lds, q + size_t(r0) * ldq, ldq, kt + size_t(j) * HS, kKeyTile, HS, scale,
                 std::min(kKeyTile, keys - j));
  };
  int r0 = 0;
  for (; r0 + kRowTile <= rows; r0 += kRowTile) row_tile.template operator()<kRowTile>(r0);
  for (; r0 < rows; ++r0) row_tile.template operator()<1>(r0);
}

// o (rows, HS) = p (rows, keys) v (keys, HS; row stride ldv) (Acc: o +=), p as pv_tile reads it
// (TransP: p^T, p stored (keys, ldp)). A tile of rows r0..r1 sums over the keys span_of(r0, r1) =
// {j0, j1} (the keys its rows see, or a range outside which p is zero for all of them), in order
// j = j0..j1-1; an empty span writes zeros (adds nothing).
template <int NV, bool Acc, bool TransP, class SpanOf>
void attn_pv_nv(float* o, int ldo, const float* p, int ldp, const float* v, int ldv, int rows, SpanOf&& span_of) {
  using namespace attn_tiles;
  const auto row_tile = [&]<int R>(int r0) {
    const auto [j0, j1] = span_of(r0, r0 + R - 1);
    float* dst = o + size_t(r0) * ldo;
    if (j1 > j0) {
      const float* pr = TransP ? p + size_t(j0) * ldp + r0 : p + size_t(r0) * ldp + j0;
      pv_tile<R, NV, Acc, TransP>(dst, ldo, pr, ldp, v + size_t(j0) * ldv, ldv, j1 - j0);
    } else if (!Acc) {
      for (int r = 0; r < R; ++r) std::fill_n(dst + size_t(r) * ldo, NV * kLanes, 0.0f);
    }
  };
  constexpr int R = kPvAccs / NV;
  int r0 = 0;
  for (; r0 + R <= rows; r0 += R) row_tile.template operator()<R>(r0);
  for (; r0 < rows; ++r0) row_tile.template operator()<1>(r0);
}

// A head of more than 4 vectors in column slices of 4 (each output element is still one sum over
// the keys in order).
template <bool Acc = false, bool TransP = false, class SpanOf>
void attn_pv(float* o, int ldo, const float* p, int ldp, const float* v, int ldv, int rows, int HS, SpanOf&& span_of) {
  switch (const int nv = HS / attn_tiles::kLanes) {
    case 1:
      return attn_pv_nv<1, Acc, TransP>(o, ldo, p, ldp, v, ldv, rows, span_of);
    case 2:
      return attn_pv_nv<2, Acc, TransP>(o, ldo, p, ldp, v, ldv, rows, span_of);
    case 3:
      return attn_pv_nv<3, Acc, TransP>(o, ldo, p, ldp, v, ldv, rows, span_of);
    default:
      for (int c = 0; c < nv; c += 4) {
        const int col = c * attn_tiles::kLanes;
        attn_pv_nv<4, Acc, TransP>(o + col, ldo, p, ldp, v + col, ldv, rows, span_of);
      }
  }
}

}  // namespace ftx::cpu
