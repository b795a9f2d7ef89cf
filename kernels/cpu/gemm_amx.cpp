// gemm_bf16_amx (kernels/cpu/gemm_amx.h): packing into bf16 tiles, the 2 x 2 tile micro kernel,
// the blocking and the threads.
//
// Tiles (palette 1, every register 16 rows x 64 bytes): tmm0-3 hold a 2 x 2 block of C (32 x 32
// fp32), tmm4-5 two A tiles (16 rows x 32 bf16 of k), tmm6-7 two B tiles in VNNI layout (16 rows of
// k pairs x 16 columns x 2 bf16). Per 32 k: 4 tile loads, 4 TDPBF16PS (each 16 x 16 x 32 products).
//
// Packing: op(A) into 1 KiB row tiles [m tile][k tile], op(B) into 1 KiB VNNI tiles [n tile][k
// tile], M and N padded to 16 and K to 32 with zeros, rounded by VCVTNE2PS2BF16 (round to nearest
// even). Each tile is read from 16 rows of 32 floats (row tile) or 32 rows of 16 floats (a pair tile:
// rows k and k + 1 interleaved), and the transposed operands (op(A) of transA, op(B) of transB) are
// the other kind of tile transposed as a 16 x 16 matrix of 32-bit pairs, in registers.
//
// Blocking: the packed operands of one chunk (at most kPackBytes; usually the whole call) are
// written once, in parallel, then threads take blocks of kBlockM x kBlockN tiles of C. A block walks
// k in equal steps of at most kBlockK tiles; in each step, for every pair of m tiles (its A tiles in
// L1) every pair of n tiles (the B tiles of the block, L2), C loaded into the tiles (or zeroed) and
// stored back, and the C lines of the next 2 x 2 block prefetched. Full C tiles move between the
// tiles and C directly; partial ones (the M and N edges) through a buffer.
//
// Speed (2 cores of a shared Xeon, tests/bench_gemm_amx.cpp): the tiles reach 2.5 TFLOP/s per core
// on operands in L1 and about 1.9 from L2; products of K = 256 are bound by memory (reading A,
// writing C), larger ones by the tiles.
//
// Deliberately not here: the choice between AMX and other paths (the caller's), bf16 A.
#include "kernels/cpu/gemm_amx.h"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <asm/prctl.h>
#include <cpuid.h>
#include <immintrin.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

// GCC 12's AVX-512 headers initialise their "undefined" vectors from themselves, which -Wuninitialized
// (or -Wmaybe-uninitialized) reports wherever a shuffle or an extract is inlined (GCC bug 105593, fixed
// in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define FTX_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define FTX_AVX512BF16_INLINE FTX_AVX512BF16 __attribute__((always_inline)) inline
#define FTX_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

#ifndef ARCH_REQ_XCOMP_PERM
#define ARCH_REQ_XCOMP_PERM 0x1023
#endif

namespace ftx::cpu {
namespace {

constexpr int kXfeatureXtiledata = 18;  // the XSAVE component of the tile registers

constexpr int kTileRows = 16;    // rows of every tile; m and n per tile
constexpr int kTileK = 32;       // bf16 of k per A tile row (64 bytes)
constexpr int kTileElems = 512;  // bf16 per packed A or B tile (1 KiB)

// Packed operands of one chunk at most this large: a call whose operands are larger is cut into
// chunks of M or N (the other operand packed whole) or, when that still does not fit, of K.
constexpr size_t kPackBytes = size_t(64) << 20;
// Blocks of C per task (in tiles of 16) and the k step of a block (in tiles of 32), chosen on the
// shapes of tests/bench_gemm_amx.cpp (2 threads; within the noise, 256 x 256 blocks and 1024 k).
constexpr int kBlockM = 16;  // m tiles: 256 rows
constexpr int kBlockN = 16;  // n tiles: 256 columns
constexpr int kBlockK = 32;  // k tiles: 1024 k at most, cut into equal steps
// Below this many multiply-adds a call runs on the calling thread.
constexpr double kParallelMinMacs = double(1 << 22);

int tiles(int n, int per) { return (n + per - 1) / per; }

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
FTX_AMX void configure_tiles() {
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

FTX_AMX void release_tiles() { _tile_release(); }

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
FTX_AVX512BF16 void pack_a_tile(uint16_t* dst, const float* A, size_t lda, bool trans, int M, int K, int m0, int k0) {
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
FTX_AVX512BF16 void pack_b_tile(uint16_t* dst, const float* B, size_t ldb, bool trans, int N, int K, int n0, int k0) {
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
FTX_AVX512BF16 void pack_b_tile_bf16(uint16_t* dst, const uint16_t* B, size_t ldb, int N, int K, int n0, int k0) {
  __m512i r[16];
  const int cols = std::min(kTileRows, N - n0), ks = std::min(kTileK, K - k0);
  const __mmask32 m = ks >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << ks) - 1u);
  for (int i = 0; i < 16; ++i)
    r[i] = i < cols ? _mm512_maskz_loadu_epi16(m, B + size_t(n0 + i) * ldb + k0) : _mm512_setzero_si512();
  transpose16(r);
  store_tile(dst, r);
}

// ---------------------------------------------------------------- micro kernel (AMX)

// The TM x TN (1 or 2) C tiles at c (rows, cols: what is valid from c on, possibly more than the
// block) (+)= the A tiles a, a + a_step times the B tiles b, b + b_step, over nk k tiles. load_c:
// start from C, else from zero.
template <int TM, int TN>
FTX_AMX void micro(const uint16_t* a, size_t a_step, const uint16_t* b, size_t b_step, int nk, float* c, size_t ldc,
                   int rows, int cols, bool load_c) {
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
    _tile_loadd(4, a + o, 64);
    _tile_loadd(6, b + o, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (TN == 2) {
      _tile_loadd(7, b + b_step + o, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (TM == 2) {
      _tile_loadd(5, a + a_step + o, 64);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (TN == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, p[0][0], ld[0][0]);
  if constexpr (TN == 2) _tile_stored(1, p[0][1], ld[0][1]);
  if constexpr (TM == 2) _tile_stored(2, p[1][0], ld[1][0]);
  if constexpr (TM == 2 && TN == 2) _tile_stored(3, p[1][1], ld[1][1]);
  for (int i = 0; i < TM; ++i) {
    for (int j = 0; j < TN; ++j) {
      if (!edge[i][j]) continue;
      const int r = std::min(kTileRows, rows - kTileRows * i), q = std::min(kTileRows, cols - kTileRows * j);
      float* ct = c + size_t(kTileRows * i) * ldc + kTileRows * j;
      for (int y = 0; y < r; ++y) std::memcpy(ct + size_t(y) * ldc, buf[i][j] + y * kTileRows, q * sizeof(float));
    }
  }
}

// ---------------------------------------------------------------- one chunk

// The packed operands of one chunk: rows [m0, m0 + mc) of C, columns [n0, n0 + nc), k [k0, k0 + kc).
struct Chunk {
  int m0, mc, n0, nc, k0, kc;
  int mt, nt, kt;  // tiles: ceil(mc / 16), ceil(nc / 16), ceil(kc / 32)
};

struct Args {
  bool transA, transB;
  int M, N, K;
  const float* A;
  size_t lda;
  const float* B;
  const uint16_t* Bh;  // instead of B: bf16, stored (N x K) (transB)
  size_t ldb;
  float* C;
  size_t ldc;
  bool accumulate;
};

// Ap (+ (i * kt + j) * 512: the A tile of m tile i, k tile j of the chunk) from op(A). Shares the
// tiles among the threads of the enclosing parallel region, 8 at a time to whichever thread is free
// (as multiply's blocks), and ends in its barrier.
void pack_a(uint16_t* ap, const Args& g, const Chunk& ch) {
  const int count = ch.mt * ch.kt;
  const int Mc = ch.m0 + ch.mc, Kc = ch.k0 + ch.kc;
  // Consecutive indices read neighbouring memory: along k for A (M x K), along m for A^T.
#pragma omp for schedule(dynamic, 8)
  for (int t = 0; t < count; ++t) {
    const int i = g.transA ? t % ch.mt : t / ch.kt, j = g.transA ? t / ch.mt : t % ch.kt;
    pack_a_tile(ap + (size_t(i) * ch.kt + j) * kTileElems, g.A, g.lda, g.transA, Mc, Kc, ch.m0 + kTileRows * i,
                ch.k0 + kTileK * j);
  }
}

// Bp (+ (i * kt + j) * 512: the B tile of n tile i, k tile j), as pack_a.
void pack_b(uint16_t* bp, const Args& g, const Chunk& ch) {
  const int count = ch.nt * ch.kt;
  const int Nc = ch.n0 + ch.nc, Kc = ch.k0 + ch.kc;
#pragma omp for schedule(dynamic, 8)
  for (int t = 0; t < count; ++t) {
    const int i = g.transB ? t / ch.kt : t % ch.nt, j = g.transB ? t % ch.kt : t / ch.nt;
    uint16_t* dst = bp + (size_t(i) * ch.kt + j) * kTileElems;
    if (g.Bh != nullptr)
      pack_b_tile_bf16(dst, g.Bh, g.ldb, Nc, Kc, ch.n0 + kTileRows * i, ch.k0 + kTileK * j);
    else
      pack_b_tile(dst, g.B, g.ldb, g.transB, Nc, Kc, ch.n0 + kTileRows * i, ch.k0 + kTileK * j);
  }
}

// The C lines of the (up to) 32 x 32 block at c, rows and cols valid from c on, into L1: the RFO
// of the lines a block will store overlaps the block before (halved the time of a 2048 x 49152
// output, whose lines come from memory).
FTX_AVX512BF16_INLINE void prefetch_c(const float* c, size_t ldc, int rows, int cols) {
  rows = std::min(rows, 2 * kTileRows);
  for (int r = 0; r < rows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    if (cols > kTileRows) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + kTileRows), _MM_HINT_T0);
  }
}

// C block of the chunk (+)= Ap * Bp, blocks of kBlockM x kBlockN tiles shared among the threads,
// each taking the next block when it is free: the two cores of the machine this was measured on ran
// the tiles at speeds that changed by up to 1.5x over seconds, and with equal shares the faster one
// waited (a SmolLM2-shape fine-tune step at bf16 1.27-1.60x faster, docs/performance.md).
// load_c: add to C (accumulate, or a later k chunk).
FTX_AMX void multiply(const uint16_t* ap, const uint16_t* bp, const Args& g, const Chunk& ch, bool load_c) {
  // Smaller blocks when there are fewer than 2 per thread (a 256 x 256 dW would be one block).
  int block_m = kBlockM, block_n = kBlockN;
  while (tiles(ch.mt, block_m) * tiles(ch.nt, block_n) < 2 * omp_get_num_threads() && block_m * block_n > 4) {
    if (block_m >= block_n)
      block_m /= 2;
    else
      block_n /= 2;
  }
  const int bm = tiles(ch.mt, block_m), bn = tiles(ch.nt, block_n);
  const size_t step = size_t(ch.kt) * kTileElems;                            // from one m (n) tile to the next
  const int kblocks = tiles(ch.kt, kBlockK), kstep = tiles(ch.kt, kblocks);  // equal k blocks
  float* c0 = g.C + size_t(ch.m0) * g.ldc + ch.n0;
  auto c_at = [&](int tm, int tn) { return c0 + size_t(tm) * kTileRows * g.ldc + size_t(tn) * kTileRows; };
#pragma omp for schedule(dynamic)
  for (int task = 0; task < bm * bn; ++task) {
    // m blocks inner: consecutive tasks share the B tiles (in L2) when N is large.
    const int tm0 = (task % bm) * block_m, tn0 = (task / bm) * block_n;
    const int tm1 = std::min(ch.mt, tm0 + block_m), tn1 = std::min(ch.nt, tn0 + block_n);
    for (int kb = 0; kb < ch.kt; kb += kstep) {
      const int nk = std::min(kstep, ch.kt - kb);
      const bool lc = load_c || kb > 0;
      // Rows of C outer: a pair of A tiles stays in L1 while the B tiles of the block stream from
      // L2, and C is written in runs along its rows (2.5x faster than down the columns there).
      for (int tm = tm0; tm < tm1; tm += 2) {
        const uint16_t* a = ap + size_t(tm) * step + size_t(kb) * kTileElems;
        const bool m2 = tm + 1 < tm1;
        const int rows = ch.mc - tm * kTileRows;
        for (int tn = tn0; tn < tn1; tn += 2) {
          if (tn + 2 < tn1)
            prefetch_c(c_at(tm, tn + 2), g.ldc, rows, ch.nc - (tn + 2) * kTileRows);
          else if (tm + 2 < tm1)
            prefetch_c(c_at(tm + 2, tn0), g.ldc, rows - 2 * kTileRows, ch.nc - tn0 * kTileRows);
          const uint16_t* b = bp + size_t(tn) * step + size_t(kb) * kTileElems;
          float* c = c_at(tm, tn);
          const int cols = ch.nc - tn * kTileRows;
          if (tn + 1 < tn1) {
            if (m2)
              micro<2, 2>(a, step, b, step, nk, c, g.ldc, rows, cols, lc);
            else
              micro<1, 2>(a, step, b, step, nk, c, g.ldc, rows, cols, lc);
          } else {
            if (m2)
              micro<2, 1>(a, step, b, step, nk, c, g.ldc, rows, cols, lc);
            else
              micro<1, 1>(a, step, b, step, nk, c, g.ldc, rows, cols, lc);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- scratch and plan

// The calling thread's buffer for the packed operands: grows to the largest request, 2 MiB
// aligned and advised into huge pages (a tile walk touches 64 MiB with few TLB misses).
uint16_t* pack_buffer(size_t bytes) {
  struct Buffer {
    void* p = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buf;
  if (bytes > buf.size) {
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
    std::free(buf.p);
    buf.p = std::aligned_alloc(kHuge, size);
    if (buf.p == nullptr) std::abort();
    buf.size = size;
    madvise(buf.p, size, MADV_HUGEPAGE);
  }
  return static_cast<uint16_t*>(buf.p);
}

// n cut into equal pieces of a multiple of `grain`, each at most `most` (at least one grain).
int piece(int n, int most, int grain) {
  most = std::max(grain, most / grain * grain);
  const int parts = (n + most - 1) / most;
  return tiles(tiles(n, parts), grain) * grain;
}

struct Plan {
  int mc, nc, kc;  // chunk sizes
};

// Whole operands when they fit in kPackBytes; else chunks of the larger of M and N (the smaller
// operand packed once and reread from cache by every chunk) when the smaller fits in half of it;
// else chunks of K (C read and written once per chunk).
Plan plan(int M, int N, int K) {
  const size_t mp = size_t(tiles(M, 16)) * 16, np = size_t(tiles(N, 16)) * 16, kp = size_t(tiles(K, 32)) * 32;
  if ((mp + np) * kp * 2 <= kPackBytes) return {M, N, K};
  const size_t small = std::min(mp, np), row = kp * 2;
  if (small * row <= kPackBytes / 2) {
    const int rows = int(std::min<size_t>((kPackBytes - small * row) / row, size_t(1) << 30));
    if (mp >= np) return {piece(M, rows, 16), N, K};
    return {M, piece(N, rows, 16), K};
  }
  const int ks = int(std::min<size_t>(kPackBytes / ((mp + np) * 2), size_t(1) << 30));
  return {M, N, piece(K, std::max(ks, 256), 32)};
}

}  // namespace

bool amx_usable() {
  static const bool usable = [] {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid(1, a, b, c, d);
    if (!(c & (1u << 27))) return false;  // OSXSAVE: xgetbv readable
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned max_sub = a;
    const bool amx = (d >> 24 & 1u) && (d >> 22 & 1u);                                         // AMX-TILE, AMX-BF16
    const bool avx512 = (b >> 16 & 1u) && (b >> 17 & 1u) && (b >> 30 & 1u) && (b >> 31 & 1u);  // F DQ BW VL
    if (!amx || !avx512 || max_sub < 1) return false;
    __cpuid_count(7, 1, a, b, c, d);
    if (!(a >> 5 & 1u)) return false;  // AVX512_BF16
    unsigned lo, hi;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    // XCR0: SSE, AVX, opmask, ZMM (bits 1 2 5 6 7) and the tile config and data (17, 18) enabled.
    const uint64_t xcr0 = uint64_t(hi) << 32 | lo, need = 0xE6 | uint64_t(3) << 17;
    if ((xcr0 & need) != need) return false;
    // Linux (5.16+) hands out the 8 KiB tile state only to processes that ask; the grant is for
    // the whole process, threads started later included.
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, kXfeatureXtiledata) == 0;
  }();
  return usable;
}

namespace {

void run(const Args& g) {
  const int M = g.M, N = g.N, K = g.K;
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!g.accumulate)
      for (int i = 0; i < M; ++i) std::fill(g.C + size_t(i) * g.ldc, g.C + size_t(i) * g.ldc + N, 0.0f);
    return;
  }
  const Plan pl = plan(M, N, K);
  const size_t a_elems = size_t(tiles(pl.mc, 16)) * tiles(pl.kc, 32) * kTileElems;
  const size_t b_elems = size_t(tiles(pl.nc, 16)) * tiles(pl.kc, 32) * kTileElems;
  uint16_t* const ap = pack_buffer((a_elems + b_elems) * sizeof(uint16_t));
  uint16_t* const bp = ap + a_elems;
  const bool parallel = !omp_in_parallel() && double(M) * N * K >= kParallelMinMacs;

#pragma omp parallel if (parallel)
  {
    configure_tiles();
    int a_m0 = -1, a_k0 = -1, b_n0 = -1, b_k0 = -1;  // the chunk in Ap, Bp (every thread the same)
    for (int m0 = 0; m0 < M; m0 += pl.mc) {
      for (int n0 = 0; n0 < N; n0 += pl.nc) {
        for (int k0 = 0; k0 < K; k0 += pl.kc) {
          const int mc = std::min(pl.mc, M - m0), nc = std::min(pl.nc, N - n0), kc = std::min(pl.kc, K - k0);
          const Chunk ch{m0, mc, n0, nc, k0, kc, tiles(mc, 16), tiles(nc, 16), tiles(kc, 32)};
          // The barriers at the ends of these loops order packing, multiplying and repacking.
          if (a_m0 != m0 || a_k0 != k0) pack_a(ap, g, ch);
          if (b_n0 != n0 || b_k0 != k0) pack_b(bp, g, ch);
          a_m0 = m0, a_k0 = k0, b_n0 = n0, b_k0 = k0;
          multiply(ap, bp, g, ch, g.accumulate || k0 > 0);
        }
      }
    }
    release_tiles();
  }
}

}  // namespace

void gemm_bf16_amx(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                   float* C, int ldc, bool accumulate) {
  run(Args{transA, transB, M, N, K, A, size_t(lda), B, nullptr, size_t(ldb), C, size_t(ldc), accumulate});
}

void gemm_bf16w_amx(float* out, const float* inp, const uint16_t* w, int N, int IC, int OC, bool accumulate) {
  run(Args{false, true, N, OC, IC, inp, size_t(IC), nullptr, w, size_t(IC), out, size_t(OC), accumulate});
}

}  // namespace ftx::cpu

#else  // not x86-64: no AMX

namespace ftx::cpu {

bool amx_usable() { return false; }

void gemm_bf16_amx(bool, bool, int, int, int, const float*, int, const float*, int, float*, int, bool) {
  std::abort();  // precondition amx_usable() violated
}

void gemm_bf16w_amx(float*, const float*, const uint16_t*, int, int, int, bool) {
  std::abort();  // precondition amx_usable() violated
}

}  // namespace ftx::cpu
#endif
