// gemm_bf16_amx and gemm_bf16w_amx (kernels/cpu/gemm_amx.h): the blocking and the threads around
// the tile helpers of amx_tiles.h (tile configuration, packing, the 2 x 2 tile micro kernel), and
// the bf16-weight product that reads the weight in place (below, "bf16 weights read in place").
//
// Packing: op(A) into 1 KiB row tiles [m tile][k tile], op(B) into 1 KiB VNNI tiles [n tile][k
// tile], M and N padded to 16 and K to 32 with zeros. Per 32 k the micro kernel makes 4 tile loads
// and 4 TDPBF16PS (each 16 x 16 x 32 products).
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
// The VDPBF16PS engine (gemm_bf16_vdp, gemm_bf16w_vdp) is this driver with vdp_micro_block
// (amx_tiles.h) in place of the tile micro kernel, and no tile configuration. On a Zen 5 EPYC it
// ran training's products at 0.32-0.44 TFLOP/s on 1 core (1.6-1.95x OpenBLAS's sgemm there) and
// 0.42-0.82 on 2 (1.2-2.3x; docs/performance.md, thirteenth pass).
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
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/cpu/amx_tiles.h"

#ifndef ARCH_REQ_XCOMP_PERM
#define ARCH_REQ_XCOMP_PERM 0x1023
#endif

namespace ftx::cpu {
namespace {

using namespace amx;  // NOLINT(google-build-using-namespace): the tile helpers of amx_tiles.h

constexpr int kXfeatureXtiledata = 18;  // the XSAVE component of the tile registers

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

// Blocks of block_m x block_n tiles over mt x nt tiles, halved (the larger side first) while the
// threads of the enclosing region would have fewer than 2 each, down to 4 tiles a block.
void shrink_blocks(int mt, int nt, int& block_m, int& block_n) {
  while (tiles(mt, block_m) * tiles(nt, block_n) < 2 * omp_get_num_threads() && block_m * block_n > 4) {
    if (block_m >= block_n)
      block_m /= 2;
    else
      block_n /= 2;
  }
}

// C block of the chunk (+)= Ap * Bp, blocks of kBlockM x kBlockN tiles shared among the threads,
// each taking the next block when it is free: the two cores of the machine this was measured on ran
// the tiles at speeds that changed by up to 1.5x over seconds, and with equal shares the faster one
// waited (a SmolLM2-shape fine-tune step at bf16 1.27-1.60x faster, docs/performance.md).
// load_c: add to C (accumulate, or a later k chunk). kTiles: the AMX micro kernel, else the
// VDPBF16PS one (vdp_micro_block; that instantiation runs no AMX instruction despite the target).
template <bool kTiles>
FTX_AMX void multiply(const uint16_t* ap, const uint16_t* bp, const Args& g, const Chunk& ch, bool load_c) {
  // Smaller blocks when there are fewer than 2 per thread (a 256 x 256 dW would be one block).
  int block_m = kBlockM, block_n = kBlockN;
  shrink_blocks(ch.mt, ch.nt, block_m, block_n);
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
          if constexpr (kTiles)
            micro_block(m2, tn + 1 < tn1, a, step, b, step, nk, c, g.ldc, rows, cols, lc);
          else
            vdp_micro_block(m2, tn + 1 < tn1, a, step, b, step, nk, c, g.ldc, rows, cols, lc);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- scratch and plan

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

template <bool kTiles>
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
  uint16_t* const ap = tile_scratch<0>((a_elems + b_elems) * sizeof(uint16_t));
  uint16_t* const bp = ap + a_elems;
  const bool parallel = !omp_in_parallel() && double(M) * N * K >= kParallelMinMacs;

#pragma omp parallel if (parallel)
  {
    if constexpr (kTiles) configure_tiles();
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
          multiply<kTiles>(ap, bp, g, ch, g.accumulate || k0 > 0);
        }
      }
    }
    if constexpr (kTiles) release_tiles();
  }
}

// ---------------------------------------------------------------- bf16 weights read in place

// A bf16 weight w (OC x IC, nn.Linear layout) times N tokens as the transposed product out^T
// (OC x N) = w x^T: 16 rows of w by 32 of k are an A tile as they lie in memory (row stride IC), so
// the weight goes into the tiles in place, never packed; only x^T is packed (B tiles), and each C
// tile (16 weight rows x 16 tokens) is transposed on its way to and from out. The products and
// their order per element are those of the packed path, so the bits are the same.
//
// Packing the weight costs a write and a second read of it per call, which this path saves;
// transposing C costs one 16 x 16 transpose per C tile, where packing transposes one per weight
// tile: 2N / IC times as many. So this path is taken for IC a multiple of 32 and OC of 16 (the
// layers of real models) and 4N <= 3 IC. Measured on Sapphire Rapids (docs/performance.md, ninth
// pass), the GEMMs alone with the weight in L2: at IC = 576 it wins up to N = 384 and loses 12 % at
// 512; at IC = 1536 and 8960 it wins 5-34 % at N = 512; at N = 8 it runs 2-4.5x faster than packing.

// Blocks of out^T per task, in tiles: 256 weight rows x 512 tokens, so that a prefill's weight
// streams from memory once while the packed tokens stay in L2.
constexpr int kWtBlockM = 16;
constexpr int kWtBlockN = 32;
// The weight rows of the A tiles this many k tiles ahead are prefetched while the tiles of the
// first block of tokens stream them from memory (decode of 8 to 32 sequences 3-10 % faster than
// none; 2 and 4 in between).
constexpr int kWtPrefetchTiles = 3;
// Below this many multiply-adds a call runs on the calling thread. Lower than the packed path's:
// with no packing, a small call is the weight streamed from memory, which two cores read faster
// (decode of 4 sequences 1.5x faster than at 2^22).
constexpr double kWtParallelMinMacs = double(1 << 16);

// Whether gemm_bf16w_amx reads w in place (above).
bool weight_in_place(int N, int IC, int OC) {
  return N > 0 && IC > 0 && OC > 0 && IC % kTileK == 0 && OC % kTileRows == 0 && 4 * int64_t(N) <= 3 * int64_t(IC);
}

// out (tokens x ldo, at token n0 and weight row o0 of the block) <-> one 16 x 16 tile t of out^T
// (row = weight row): out_to_tile transposes the valid `rows` tokens into t (zeros past them),
// tile_to_out writes t back transposed.
FTX_AVX512BF16_INLINE void out_to_tile(float* t, const float* out, size_t ldo, int rows) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_loadu_si512(out + i * ldo) : _mm512_setzero_si512();
  transpose16(r);
  for (int i = 0; i < 16; ++i) _mm512_store_si512(t + i * 16, r[i]);
}

FTX_AVX512BF16_INLINE void tile_to_out(float* out, size_t ldo, const float* t, int rows) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(t + i * 16);
  transpose16(r);
  for (int i = 0; i < rows; ++i) _mm512_storeu_si512(out + i * ldo, r[i]);
}

// The TM x TN (1 or 2) tiles of out^T at weight rows [o0, o0 + 16 TM) and tokens [n0, n0 + 16 TN):
// A tiles from w at row o0 in place (row stride ldw), B tiles packed (b, b + b_step), over nk k
// tiles. out points at (n0, o0); `tokens` are valid from n0 on. accumulate: start from out.
// prefetch: the first pass over these weight rows (they come from memory).
template <int TM, int TN>
FTX_AMX void micro_wt(const uint16_t* w, size_t ldw, const uint16_t* b, size_t b_step, int nk, float* out, size_t ldo,
                      int tokens, bool accumulate, bool prefetch) {
  alignas(64) float buf[TM][TN][kTileRows * kTileRows];
  float* p[2][2] = {};
  long ld[2][2] = {};
  for (int i = 0; i < TM; ++i) {
    for (int j = 0; j < TN; ++j) {
      p[i][j] = buf[i][j], ld[i][j] = kTileRows * sizeof(float);
      if (accumulate)
        out_to_tile(buf[i][j], out + size_t(kTileRows * j) * ldo + kTileRows * i, ldo,
                    std::min(kTileRows, tokens - kTileRows * j));
    }
  }
  tile_block<TM, TN>(p, ld, accumulate, w, kTileRows * ldw, kTileK, long(ldw * sizeof(uint16_t)), b, b_step, nk,
                     prefetch ? kWtPrefetchTiles : 0);
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j)
      tile_to_out(out + size_t(kTileRows * j) * ldo + kTileRows * i, ldo, buf[i][j],
                  std::min(kTileRows, tokens - kTileRows * j));
}

// out (N x OC) (+)= inp (N x IC) w^T, w read in place. Precondition: weight_in_place(N, IC, OC).
void run_weight_in_place(float* out, const float* inp, const uint16_t* w, int N, int IC, int OC, bool accumulate) {
  const int kt = IC / kTileK, mt = OC / kTileRows;
  // Tokens per chunk: their packed x^T (kt KiB per 16 tokens) within kPackBytes.
  const size_t tile_bytes = kTileElems * sizeof(uint16_t);
  const int chunk = piece(N, int(std::min<size_t>(kPackBytes / (size_t(kt) * tile_bytes), size_t(1) << 26)) * 16, 16);
  uint16_t* const bp = tile_scratch<0>(size_t(tiles(chunk, 16)) * kt * tile_bytes);
  const bool parallel = !omp_in_parallel() && double(N) * IC * OC >= kWtParallelMinMacs;
  const size_t b_step = size_t(kt) * kTileElems;

#pragma omp parallel if (parallel)
  {
    configure_tiles();
    for (int n0 = 0; n0 < N; n0 += chunk) {
      const int nc = std::min(chunk, N - n0), ntt = tiles(nc, 16);
      // x^T of the chunk: B tile (n' tile i, k tile j) at bp + (i * kt + j) * 512.
#pragma omp for schedule(dynamic, 8)
      for (int t = 0; t < ntt * kt; ++t)
        pack_b_tile(bp + size_t(t) * kTileElems, inp + size_t(n0) * IC, size_t(IC), true, nc, IC, kTileRows * (t / kt),
                    kTileK * (t % kt));
      int block_m = std::min(kWtBlockM, mt), block_n = std::min(kWtBlockN, ntt);
      shrink_blocks(mt, ntt, block_m, block_n);
      const int bm = tiles(mt, block_m), bn = tiles(ntt, block_n);
#pragma omp for schedule(dynamic)
      for (int task = 0; task < bm * bn; ++task) {
        // Weight blocks inner: consecutive tasks share the packed tokens (L2), and the weight is
        // read once per block of tokens.
        const int tm0 = (task % bm) * block_m, tn0 = (task / bm) * block_n;
        const int tm1 = std::min(mt, tm0 + block_m), tn1 = std::min(ntt, tn0 + block_n);
        for (int tm = tm0; tm < tm1; tm += 2) {
          const uint16_t* a = w + size_t(kTileRows) * tm * IC;
          const bool m2 = tm + 1 < tm1;
          for (int tn = tn0; tn < tn1; tn += 2) {
            const uint16_t* b = bp + size_t(tn) * b_step;
            float* o = out + (size_t(n0) + size_t(kTileRows) * tn) * OC + size_t(kTileRows) * tm;
            const int tokens = nc - kTileRows * tn;
            const bool first = tn == tn0;  // this block's first pass over these weight rows
            if (tn + 1 < tn1)
              (m2 ? micro_wt<2, 2> : micro_wt<1, 2>)(a, IC, b, b_step, kt, o, OC, tokens, accumulate, first);
            else
              (m2 ? micro_wt<2, 1> : micro_wt<1, 1>)(a, IC, b, b_step, kt, o, OC, tokens, accumulate, first);
          }
        }
      }
    }
    release_tiles();
  }
}

}  // namespace

void gemm_bf16_amx(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                   float* C, int ldc, bool accumulate) {
  run<true>(Args{transA, transB, M, N, K, A, size_t(lda), B, nullptr, size_t(ldb), C, size_t(ldc), accumulate});
}

void gemm_bf16_vdp(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                   float* C, int ldc, bool accumulate) {
  run<false>(Args{transA, transB, M, N, K, A, size_t(lda), B, nullptr, size_t(ldb), C, size_t(ldc), accumulate});
}

void gemm_bf16w_vdp(float* out, const float* inp, const uint16_t* w, int N, int IC, int OC, bool accumulate) {
  run<false>(Args{false, true, N, OC, IC, inp, size_t(IC), nullptr, w, size_t(IC), out, size_t(OC), accumulate});
}

void gemm_bf16w_amx(float* out, const float* inp, const uint16_t* w, int N, int IC, int OC, bool accumulate) {
  if (weight_in_place(N, IC, OC)) return run_weight_in_place(out, inp, w, N, IC, OC, accumulate);
  run<true>(Args{false, true, N, OC, IC, inp, size_t(IC), nullptr, w, size_t(IC), out, size_t(OC), accumulate});
}

}  // namespace ftx::cpu

#else  // not x86-64: no AMX

namespace ftx::cpu {

bool amx_usable() { return false; }

void gemm_bf16_amx(bool, bool, int, int, int, const float*, int, const float*, int, float*, int, bool) {
  std::abort();  // precondition amx_usable() violated
}

void gemm_bf16_vdp(bool, bool, int, int, int, const float*, int, const float*, int, float*, int, bool) {
  std::abort();  // precondition: an AVX512_BF16 CPU
}

void gemm_bf16w_vdp(float*, const float*, const uint16_t*, int, int, int, bool) {
  std::abort();  // precondition: an AVX512_BF16 CPU
}

void gemm_bf16w_amx(float*, const float*, const uint16_t*, int, int, int, bool) {
  std::abort();  // precondition amx_usable() violated
}

}  // namespace ftx::cpu
#endif
