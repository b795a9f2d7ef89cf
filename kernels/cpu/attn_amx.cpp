// attn_forward_amx (kernels/cpu/attn_amx.h): the packing of K and V, and the tasks of query rows.
//
// Tile layouts (1 KiB bf16 tiles, amx_tiles.h), per (b, kv head):
//   K tiles  [key tile j of 16][head tile c of 32]: the VNNI B tiles of K^T for S = q K^T;
//   V tiles  [head tile n of 16][key tile c of 32]: the VNNI B tiles of V for O = P V;
// per task, in the worker's scratch:
//   q tiles  [row tile i of 16][head tile c of 32] and P tiles [row tile i][key tile c of 32].
#include "kernels/cpu/attn_amx.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/ops_attention.h"

#if defined(__x86_64__)
#include "kernels/cpu/amx_tiles.h"

namespace ftx::cpu {
namespace {

using namespace amx;  // NOLINT(google-build-using-namespace): the tile helpers of amx_tiles.h

// Tile counts of one call.
struct Geometry {
  int hk;          // head tiles of 32 (k of S)
  int kn;          // key tiles of 16 (n of S)
  int kk;          // key tiles of 32 (k of O)
  int hn;          // head tiles of 16 (n of O)
  size_t k_elems;  // bf16 of one (b, kv head)'s K tiles; its V tiles follow
  size_t per;      // bf16 of one (b, kv head)'s K and V tiles
};

Geometry geometry(const AttnShape& s) {
  Geometry g{tiles(s.HS, kTileK), tiles(s.Tk, kTileRows), tiles(s.Tk, kTileK), s.HS / kTileRows, 0, 0};
  g.k_elems = size_t(g.kn) * g.hk * kTileElems;
  g.per = g.k_elems + size_t(g.hn) * g.kk * kTileElems;
  return g;
}

// C (rows x cols valid from c, row stride ldc) = the one or two (m2) A tile rows at a (a_step
// apart) times the n tiles [0, nt) of b (b_step apart), nk k tiles each; n tile j writes columns
// [16 j, 16 j + 16) of C.
FTX_AMX void multiply_tiles(const uint16_t* a, size_t a_step, bool m2, const uint16_t* b, size_t b_step, int nt, int nk,
                            float* c, size_t ldc, int rows, int cols) {
  for (int j = 0; j < nt; j += 2)
    micro_block(m2, j + 1 < nt, a, a_step, b + size_t(j) * b_step, b_step, nk, c + size_t(j) * kTileRows, ldc, rows,
                cols - j * kTileRows, false);
}

// The K and V tiles of pair p = b * NKV + kh, tile t (K's tiles first, then V's).
FTX_AVX512BF16 void pack_kv_tile(uint16_t* kv, const float* k, const float* v, const AttnShape& s, const Geometry& g,
                                 int p, int t) {
  const int b = p / s.NKV, kh = p % s.NKV, ldkv = s.NKV * s.HS;
  const size_t base = (size_t(b) * s.Tk_cap * s.NKV + kh) * s.HS;
  uint16_t* dst = kv + size_t(p) * g.per;
  const int count_k = g.kn * g.hk;
  if (t < count_k) {  // K (Tk, HS) is K^T transposed: B tiles of n = keys, k = head
    const int j = t / g.hk, c = t % g.hk;
    pack_b_tile(dst + size_t(t) * kTileElems, k + base, ldkv, true, s.Tk, s.HS, kTileRows * j, kTileK * c);
  } else {  // V (Tk, HS): B tiles of k = keys, n = head
    const int u = t - count_k, n = u / g.kk, c = u % g.kk;
    pack_b_tile(dst + g.k_elems + size_t(u) * kTileElems, v + base, ldkv, false, s.HS, s.Tk, kTileRows * n, kTileK * c);
  }
}

// Query rows [i0, i1) of (b, head h): S, the softmax, O. kv: the pair's K tiles, V tiles after.
FTX_AMX void attend_rows(float* out, float* att, const float* q, const uint16_t* kv, const AttnShape& s,
                         const Geometry& g, int b, int h, int i0, int i1) {
  const AttnHead x = attn_head(s, b, h, s.Tk_cap);
  float* a = att + x.att_off;     // (Tq, Tk)
  const float* qh = q + x.q_off;  // the head's row 0, rows ldq apart
  const int mt = tiles(i1 - i0, kTileRows);
  const int keys = attn_visible(s, i1 - 1), pk = tiles(keys, kTileK);
  const size_t q_step = size_t(g.hk) * kTileElems, p_step = size_t(pk) * kTileElems;
  uint16_t* qt = tile_scratch<2>(size_t(mt) * (q_step + p_step) * sizeof(uint16_t));
  uint16_t* pt = qt + size_t(mt) * q_step;
  for (int i = 0; i < mt; ++i)
    for (int c = 0; c < g.hk; ++c)
      pack_a_tile(qt + size_t(i) * q_step + size_t(c) * kTileElems, qh, size_t(x.ldq), false, i1, s.HS,
                  i0 + kTileRows * i, kTileK * c);
  // Per pair of row tiles: the keys its last row sees.
  const auto seen = [&](int i) { return attn_visible(s, std::min(i1, i0 + kTileRows * (i + 2)) - 1); };
  for (int i = 0; i < mt; i += 2) {
    const int r0 = i0 + kTileRows * i;
    multiply_tiles(qt + size_t(i) * q_step, q_step, i + 1 < mt, kv, q_step, tiles(seen(i), kTileRows), g.hk,
                   a + size_t(r0) * s.Tk, size_t(s.Tk), i1 - r0, s.Tk);
  }
  attn_softmax_rows(a, s, i0, i1, 1.0f / std::sqrt(float(s.HS)));
  for (int i = 0; i < mt; ++i)
    for (int c = 0; c < pk; ++c)
      pack_a_tile(pt + size_t(i) * p_step + size_t(c) * kTileElems, a, size_t(s.Tk), false, i1, keys,
                  i0 + kTileRows * i, kTileK * c);
  const uint16_t* vt = kv + g.k_elems;
  const size_t v_step = size_t(g.kk) * kTileElems;
  for (int i = 0; i < mt; i += 2) {
    const int r0 = i0 + kTileRows * i;
    multiply_tiles(pt + size_t(i) * p_step, p_step, i + 1 < mt, vt, v_step, g.hn, tiles(seen(i), kTileK),
                   out + x.q_off + size_t(r0) * x.ldq, size_t(x.ldq), i1 - r0, s.HS);
  }
}

}  // namespace

void attn_forward_amx(float* out, float* att, const float* q, const float* k, const float* v, const AttnShape& s) {
  FT_ASSERT(attn_amx_fits(s) && amx_usable(), "attn_forward_amx: shape Tq %d HS %d, or no AMX", s.Tq, s.HS);
  const Geometry g = geometry(s);
  const int pairs = s.B * s.NKV, per_pair = int(g.per / kTileElems);
  uint16_t* kv = tile_scratch<1>(size_t(pairs) * g.per * sizeof(uint16_t));
  const int rows = attn_block_rows(s), blocks = (s.Tq + rows - 1) / rows;
  const int heads = s.B * s.NH, tasks = heads * blocks, group = s.NH / s.NKV;
  const size_t work = size_t(s.B) * s.NH * s.Tq * s.Tk * s.HS;
#pragma omp parallel if (go_parallel(work) && tasks > 1)
  {
    configure_tiles();
#pragma omp for collapse(2) schedule(dynamic, 8)
    for (int p = 0; p < pairs; ++p) {
      for (int t = 0; t < per_pair; ++t) pack_kv_tile(kv, k, v, s, g, p, t);
    }
    // The last blocks of rows (the most keys) first; each task writes its own rows of out and att.
#pragma omp for schedule(dynamic)
    for (int t = 0; t < tasks; ++t) {
      const int blk = blocks - 1 - t / heads, b = t % heads / s.NH, h = t % s.NH;
      const int i0 = blk * rows, i1 = std::min(s.Tq, i0 + rows);
      attend_rows(out, att, q, kv + size_t(b * s.NKV + h / group) * g.per, s, g, b, h, i0, i1);
    }
    release_tiles();
  }
}

}  // namespace ftx::cpu

#else  // not x86-64: no AMX

namespace ftx::cpu {

void attn_forward_amx(float*, float*, const float*, const float*, const float*, const AttnShape&) {
  std::abort();  // precondition amx_usable() violated
}

}  // namespace ftx::cpu
#endif
