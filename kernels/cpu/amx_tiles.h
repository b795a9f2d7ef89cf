// The AMX bf16 tile helpers shared by the tile GEMM (gemm_amx.cpp) and the tile attention
// (attn_amx.cpp): the tile configuration, the packing of fp32 (or bf16) operands into 1 KiB bf16
// tiles, a block of tile products (tile_block: A tiles packed, or a bf16 matrix read in place with
// its row stride), and the micro kernel that multiplies packed tiles into a 2 x 2 block of
// fp32 C tiles; and the same micro kernel on VDPBF16PS for CPUs without AMX (vdp_micro_block).
//
// Tiles (palette 1, every register 16 rows x 64 bytes): tmm0-3 hold up to 2 x 2 C tiles (16 x 16
// fp32 each), tmm4-5 two A tiles (16 rows x 32 bf16 of k), tmm6-7 two B tiles in VNNI layout (16
// rows of k pairs x 16 columns x 2 bf16). An A tile is packed from 16 rows of 32 floats (a row
// tile) or, transposed, from 32 rows of 16; a B tile from 32 rows of 16 floats (a pair tile: rows k
// and k + 1 interleaved) or, transposed, from 16 rows of 32. Operands are rounded to bf16 by
// VCVTNE2PS2BF16 (round to nearest even; subnormals to zero) and padded with zeros past their edges.
//
// Internal to kernels/cpu: include only from .cpp files that build on x86-64, and call only after
// amx_usable() (gemm_amx.h) said yes (the packing and vdp_micro_block: on any AVX512_BF16 CPU). Every function carries
// its target attribute, so no -m flag is needed.
#pragma once
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_common.h"

// GCC 12's AVX-512 headers initialise their "undefined" vectors from themselves, which -Wuninitialized
// (or -Wmaybe-uninitialized) reports wherever a shuffle or an extract is inlined (GCC bug 105593, fixed
// in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define FTX_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define FTX_AVX512BF16_INLINE FTX_AVX512BF16 __attribute__((always_inline)) inline
#define FTX_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace ftx::cpu::amx {

constexpr int kTileRows = 16;    // rows of every tile; m and n per tile
constexpr int kTileK = 32;       // bf16 of k per A tile row (64 bytes)
constexpr int kTileElems = 512;  // bf16 per packed A or B tile (1 KiB)

// Tiles of `per` needed for n (n rounded up to whole tiles).
inline int tiles(int n, int per) { return (n + per - 1) / per; }

// ---------------------------------------------------------------- tile configuration

struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);

// Every tile register 16 rows of 64 bytes. Each thread that runs tile instructions calls this.
FTX_AMX inline void configure_tiles() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = kTileRows;
  }
  asm volatile("" ::: "memory");  // _tile_loadconfig tells the compiler it reads only 8 bytes
  _tile_loadconfig(&cfg);
}

FTX_AMX inline void release_tiles() { _tile_release(); }

// ---------------------------------------------------------------- packing (AVX-512)

// r[i] = the 16 bf16 pairs of row i of a row tile: bf16 of src[i * ld + c] for c < 32, zero past
// `rows` rows and `cols` columns.
FTX_AVX512BF16_INLINE void load_row_tile(__m512i (&r)[16], const float* src, size_t ld, int rows, int cols) {
  const __mmask16 lo = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1u);
  const __mmask16 hi = cols >= 32 ? __mmask16(0xFFFF) : cols <= 16 ? __mmask16(0) : __mmask16((1u << (cols - 16)) - 1u);
  for (int i = 0; i < 16; ++i) {
    if (i < rows) {
      const float* s = src + i * ld;
      const __m512 a = _mm512_maskz_loadu_ps(lo, s);
      const __m512 b = _mm512_maskz_loadu_ps(hi, s + 16);
      r[i] = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // lanes 0-15 from a
    } else {
      r[i] = _mm512_setzero_si512();
    }
  }
}

// r[p] = row p of a pair tile: (bf16 src[2p * ld + c], bf16 src[(2p + 1) * ld + c]) for c < 16, zero
// past `krows` rows and `cols` columns.
FTX_AVX512BF16_INLINE void load_pair_tile(__m512i (&r)[16], const float* src, size_t ld, int krows, int cols) {
  const __mmask16 m = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1u);
  // Interleave: out[2c] = in[c] (row 2p), out[2c + 1] = in[16 + c] (row 2p + 1).
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                       5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int p = 0; p < 16; ++p) {
    const __m512 a = 2 * p < krows ? _mm512_maskz_loadu_ps(m, src + 2 * p * ld) : _mm512_setzero_ps();
    const __m512 b = 2 * p + 1 < krows ? _mm512_maskz_loadu_ps(m, src + (2 * p + 1) * ld) : _mm512_setzero_ps();
    r[p] = _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(b, a));
  }
}

// r = r^T as a 16 x 16 matrix of 32-bit elements.
FTX_AVX512BF16_INLINE void transpose16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // r[4i + j], 128-bit lane L: column 4L + j of rows 4i .. 4i + 3.
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i x0 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88);  // lanes 0, 2 of each
    const __m512i x1 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xDD);  // lanes 1, 3
    const __m512i y0 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
    const __m512i y1 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xDD);
    t[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    t[8 + j] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
    t[4 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    t[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

FTX_AVX512BF16_INLINE void store_tile(uint16_t* dst, const __m512i (&r)[16]) {
  for (int i = 0; i < 16; ++i) _mm512_store_si512(dst + i * 32, r[i]);
}

// The A tile of rows [m0, m0 + 16) and k [k0, k0 + 32) of op(A) (M x K): row i holds 32 bf16 of k.
FTX_AVX512BF16 inline void pack_a_tile(uint16_t* dst, const float* A, size_t lda, bool trans, int M, int K, int m0,
                                       int k0) {
  __m512i r[16];
  const int rows = std::min(kTileRows, M - m0), ks = std::min(kTileK, K - k0);
  if (!trans) {
    load_row_tile(r, A + size_t(m0) * lda + k0, lda, rows, ks);
  } else {  // A (K x M): pairs of k rows give (k pair, m); transposed, (m, k pair)
    load_pair_tile(r, A + size_t(k0) * lda + m0, lda, ks, rows);
    transpose16(r);
  }
  store_tile(dst, r);
}

// The B tile of k [k0, k0 + 32) and columns [n0, n0 + 16) of op(B) (K x N), VNNI: row p holds the
// pairs (k0 + 2p, k0 + 2p + 1) of the 16 columns.
FTX_AVX512BF16 inline void pack_b_tile(uint16_t* dst, const float* B, size_t ldb, bool trans, int N, int K, int n0,
                                       int k0) {
  __m512i r[16];
  const int cols = std::min(kTileRows, N - n0), ks = std::min(kTileK, K - k0);
  if (!trans) {
    load_pair_tile(r, B + size_t(k0) * ldb + n0, ldb, ks, cols);
  } else {  // B (N x K): rows of n give (n, k pair); transposed, (k pair, n)
    load_row_tile(r, B + size_t(n0) * ldb + k0, ldb, cols, ks);
    transpose16(r);
  }
  store_tile(dst, r);
}

// The same tile from bf16 B stored (N x K) with ldb (a weight in nn.Linear layout): each row of n
// is 32 bf16 of k, already 16 k pairs, so the rows are copied and transposed without rounding.
FTX_AVX512BF16 inline void pack_b_tile_bf16(uint16_t* dst, const uint16_t* B, size_t ldb, int N, int K, int n0,
                                            int k0) {
  __m512i r[16];
  const int cols = std::min(kTileRows, N - n0), ks = std::min(kTileK, K - k0);
  const __mmask32 m = ks >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << ks) - 1u);
  for (int i = 0; i < 16; ++i)
    r[i] = i < cols ? _mm512_maskz_loadu_epi16(m, B + size_t(n0 + i) * ldb + k0) : _mm512_setzero_si512();
  transpose16(r);
  store_tile(dst, r);
}

// ---------------------------------------------------------------- micro kernel (AMX)

// The TM x TN (1 or 2) C tiles, held in tmm0-3 while they are computed, at p[i][j] with rows
// ld[i][j] bytes apart: loaded from there (load_c) or zeroed, += A tiles times B tiles over nk k
// tiles, stored back there. A tile i of k tile kt at a + i * a_step + kt * a_kstep, its rows a_stride
// bytes apart (packed: 64; a bf16 matrix read in place: its row stride); B tile j at b + j * b_step
// + kt * 512, packed. ahead > 0: the A rows `ahead` k tiles on are prefetched (an A read in place
// from memory).
template <int TM, int TN>
FTX_AMX inline void tile_block(float* const (&p)[2][2], const long (&ld)[2][2], bool load_c, const uint16_t* a,
                               size_t a_step, size_t a_kstep, long a_stride, const uint16_t* b, size_t b_step, int nk,
                               int ahead) {
  asm volatile("" ::: "memory");  // the tile loads below are asm without a memory operand
  if (load_c) {
    _tile_loadd(0, p[0][0], ld[0][0]);
    if constexpr (TN == 2) _tile_loadd(1, p[0][1], ld[0][1]);
    if constexpr (TM == 2) _tile_loadd(2, p[1][0], ld[1][0]);
    if constexpr (TM == 2 && TN == 2) _tile_loadd(3, p[1][1], ld[1][1]);
  } else {
    _tile_zero(0);
    if constexpr (TN == 2) _tile_zero(1);
    if constexpr (TM == 2) _tile_zero(2);
    if constexpr (TM == 2 && TN == 2) _tile_zero(3);
  }
  for (int kt = 0; kt < nk; ++kt) {
    const size_t o = size_t(kt) * kTileElems;
    const uint16_t* ak = a + size_t(kt) * a_kstep;
    if (ahead > 0 && kt + ahead < nk) {
      const char* pa = reinterpret_cast<const char*>(ak + size_t(ahead) * a_kstep);
      for (int r = 0; r < kTileRows; ++r) _mm_prefetch(pa + r * a_stride, _MM_HINT_T0);
      if constexpr (TM == 2)
        for (int r = 0; r < kTileRows; ++r) _mm_prefetch(pa + a_step * sizeof(uint16_t) + r * a_stride, _MM_HINT_T0);
    }
    _tile_loadd(4, ak, a_stride);
    _tile_loadd(6, b + o, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (TN == 2) {
      _tile_loadd(7, b + b_step + o, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (TM == 2) {
      _tile_loadd(5, ak + a_step, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (TN == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, p[0][0], ld[0][0]);
  if constexpr (TN == 2) _tile_stored(1, p[0][1], ld[0][1]);
  if constexpr (TM == 2) _tile_stored(2, p[1][0], ld[1][0]);
  if constexpr (TM == 2 && TN == 2) _tile_stored(3, p[1][1], ld[1][1]);
  asm volatile("" ::: "memory");  // and the stores above, read by the caller
}

// The TM x TN (1 or 2) C tiles at c (rows, cols: what is valid from c on, possibly more than the
// block) (+)= the A tiles a, a + a_step times the B tiles b, b + b_step, over nk k tiles. load_c:
// start from C, else from zero.
template <int TM, int TN>
FTX_AMX inline void micro(const uint16_t* a, size_t a_step, const uint16_t* b, size_t b_step, int nk, float* c,
                          size_t ldc, int rows, int cols, bool load_c) {
  alignas(64) float buf[TM][TN][kTileRows * kTileRows];
  float* p[2][2] = {};
  long ld[2][2] = {};
  bool edge[2][2] = {};
  for (int i = 0; i < TM; ++i) {
    for (int j = 0; j < TN; ++j) {
      const int r = std::min(kTileRows, rows - kTileRows * i), q = std::min(kTileRows, cols - kTileRows * j);
      float* ct = c + size_t(kTileRows * i) * ldc + kTileRows * j;
      edge[i][j] = r < kTileRows || q < kTileRows;
      if (!edge[i][j]) {
        p[i][j] = ct;
        ld[i][j] = long(ldc * sizeof(float));
        continue;
      }
      p[i][j] = buf[i][j];
      ld[i][j] = kTileRows * sizeof(float);
      if (!load_c) continue;
      std::memset(buf[i][j], 0, sizeof buf[i][j]);
      for (int y = 0; y < r; ++y) std::memcpy(buf[i][j] + y * kTileRows, ct + size_t(y) * ldc, q * sizeof(float));
    }
  }
  tile_block<TM, TN>(p, ld, load_c, a, a_step, kTileElems, 64, b, b_step, nk, 0);
  for (int i = 0; i < TM; ++i) {
    for (int j = 0; j < TN; ++j) {
      if (!edge[i][j]) continue;
      const int r = std::min(kTileRows, rows - kTileRows * i), q = std::min(kTileRows, cols - kTileRows * j);
      float* ct = c + size_t(kTileRows * i) * ldc + kTileRows * j;
      for (int y = 0; y < r; ++y) std::memcpy(ct + size_t(y) * ldc, buf[i][j] + y * kTileRows, q * sizeof(float));
    }
  }
}

// micro<TM, TN> with TM = 2 when m2 and TN = 2 when n2: the 2 x 2 block where there are two row
// and two column tiles left, smaller at the M and N edges.
FTX_AMX inline void micro_block(bool m2, bool n2, const uint16_t* a, size_t a_step, const uint16_t* b, size_t b_step,
                                int nk, float* c, size_t ldc, int rows, int cols, bool load_c) {
  if (n2) {
    if (m2)
      micro<2, 2>(a, a_step, b, b_step, nk, c, ldc, rows, cols, load_c);
    else
      micro<1, 2>(a, a_step, b, b_step, nk, c, ldc, rows, cols, load_c);
  } else {
    if (m2)
      micro<2, 1>(a, a_step, b, b_step, nk, c, ldc, rows, cols, load_c);
    else
      micro<1, 1>(a, a_step, b, b_step, nk, c, ldc, rows, cols, load_c);
  }
}

// ---------------------------------------------------------------- micro kernel (VDPBF16PS)

// The same packed tiles multiplied without AMX, by VDPBF16PS (AVX512_BF16): a B tile row is one
// zmm of 16 columns' k pairs, an A tile row's k pair one dword, broadcast. C is computed 8 rows x
// TN * 16 columns at a time (8 x TN accumulators in zmm registers; 2 B loads and 8 broadcasts per
// 16 VDPBF16PS at TN = 2) over all nk k tiles, then stored. The products are those of the tiles
// (bf16 pairs, exact in fp32); the fp32 sums run in another order (per lane, k pairs in order),
// so the two engines agree to fp32 rounding, not bit for bit. Rows and columns past the edges are
// computed from the packing's zero padding and not stored.
template <int TN>
FTX_AVX512BF16 inline void vdp_rows8(const uint16_t* a, const uint16_t* b, size_t b_step, int nk, float* c, size_t ldc,
                                     int rows, int cols, bool load_c) {
  __m512 acc[8][TN];
  const __mmask16 mask[2] = {
      cols >= kTileRows ? __mmask16(0xFFFF) : __mmask16((1u << std::max(cols, 0)) - 1u),
      cols >= 2 * kTileRows ? __mmask16(0xFFFF) : __mmask16((1u << std::clamp(cols - kTileRows, 0, 16)) - 1u)};
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r)
#pragma GCC unroll 2
    for (int j = 0; j < TN; ++j)
      acc[r][j] = load_c && r < rows ? _mm512_maskz_loadu_ps(mask[j], c + size_t(r) * ldc + kTileRows * j)
                                     : _mm512_setzero_ps();
  for (int kt = 0; kt < nk; ++kt) {
    const uint16_t* ak = a + size_t(kt) * kTileElems;
    const uint16_t* bk = b + size_t(kt) * kTileElems;
    for (int p = 0; p < kTileK / 2; ++p) {
      __m512bh bv[TN];
#pragma GCC unroll 2
      for (int j = 0; j < TN; ++j) bv[j] = (__m512bh)_mm512_load_si512(bk + j * b_step + p * kTileK);
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        int32_t pair;
        std::memcpy(&pair, ak + r * kTileK + 2 * p, sizeof pair);
        const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 2
        for (int j = 0; j < TN; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], av, bv[j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r)
    if (r < rows)
#pragma GCC unroll 2
      for (int j = 0; j < TN; ++j) _mm512_mask_storeu_ps(c + size_t(r) * ldc + kTileRows * j, mask[j], acc[r][j]);
}

// micro_block's contract (m2, n2, a, a_step, b, b_step, nk, c, ldc, rows, cols, load_c) on VDPBF16PS.
FTX_AVX512BF16 inline void vdp_micro_block(bool m2, bool n2, const uint16_t* a, size_t a_step, const uint16_t* b,
                                           size_t b_step, int nk, float* c, size_t ldc, int rows, int cols,
                                           bool load_c) {
  const int groups = std::min(m2 ? 4 : 2, tiles(rows, 8));  // 8-row groups of the 1 or 2 A tiles
  for (int g = 0; g < groups; ++g) {
    const uint16_t* ag = a + (g / 2) * a_step + (g % 2) * 8 * kTileK;
    float* cg = c + size_t(8 * g) * ldc;
    if (n2)
      vdp_rows8<2>(ag, b, b_step, nk, cg, ldc, rows - 8 * g, cols, load_c);
    else
      vdp_rows8<1>(ag, b, b_step, nk, cg, ldc, rows - 8 * g, cols, load_c);
  }
}

// ---------------------------------------------------------------- scratch

// The calling thread's buffer number Slot for packed tiles: grows to the largest request and is
// kept, on huge pages from 2 MiB (thread_scratch, cpu_common.h: a tile walk touches up to 64 MiB
// with few TLB misses; the packing stores whole aligned lines). Slot 0: gemm_amx.cpp; 1 and 2:
// attn_amx.cpp.
template <int Slot>
uint16_t* tile_scratch(size_t bytes) {
  constexpr int kTileSlots = 100;  // apart from the ops' slots of uint16_t scratch
  return thread_scratch<uint16_t, kTileSlots + Slot>((bytes + 1) / 2);
}

}  // namespace ftx::cpu::amx

#endif  // __x86_64__
