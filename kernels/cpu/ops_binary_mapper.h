// The binary mapper (docs/design.md section 3) and what surrounds it: bit sampling, the pass-through
// gradient through G, the post-sampler gather / scatter, and the closed-form KL with free bits.
//
// binary_mapper_backward is the custom kernel: for every code d, dG[n,d] = <dR[n,:], W[:,d]> and
// G[n,d] = prod_h (bit h of d ? p : 1-p); dlogits[n,h] += S_{n,h} - p[n,h] * S_n with
// a = dG * G, S_n = sum_d a, S_{n,h} = sum over codes with bit h set. It is tiled over rows and
// codes (never N x 2^H in memory): one GEMM per (row tile, code tile), then per row
//   * G on the tile = G_high (bits >= k, constant over an aligned tile of 2^k codes) times a table
//     of the low bits built by doubling,
//   * the k low-bit sums S_h by a butterfly (fold the upper half onto the lower, 2 * 2^k adds),
//   * the high-bit sums as S_tile added to every high bit set in the tile's first code.
// Each thread owns a contiguous range of row tiles and walks the code tiles outermost, so a tile
// of W is read from memory once per thread. Per-row sums accumulate across tiles in double.
//
// Deliberately not here: a dense one-hot Y or a dense G (the forward is a gather).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/base/assert.h"
#include "kernels/base/philox.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/ops_matmul.h"

namespace ftx::cpu {

// Tile sizes of binary_mapper_backward. A (128 x 2^10) float tile is 512 KB: it stays in L2
// between the GEMM that writes it and the reduction that reads it. At H = 16 on the 2-core EPYC
// the time varied by under 5 % over 64..256 rows and 2^9..2^12 codes. Tests shrink the tiles to
// put tile boundaries inside small problems.
struct MapperTiles {
  int rows = 128;       // rows per GEMM
  int codes_log2 = 10;  // 2^codes_log2 codes per GEMM (clamped to H)
};

// codes (N), p (N, H) = sigmoid(logits (N, H)); bit h of row n set iff
// philox_uniform(seed, stream, n*H + h) < p[n,h]. The sigmoid is computed in double.
template <class T>
void binary_mapper_forward(uint32_t* codes, T* p, const T* logits, int N, int H, uint64_t seed, uint64_t stream) {
  FT_ASSERT(H >= 1 && H <= 31, "binary mapper: H = %d", H);
#pragma omp parallel for schedule(static) if (go_parallel(size_t(N) * H * 64))
  for (int n = 0; n < N; ++n) {
    uint32_t code = 0;
    for (int h = 0; h < H; ++h) {
      const size_t i = size_t(n) * H + h;
      const T ph = static_cast<T>(1.0 / (1.0 + std::exp(-static_cast<double>(logits[i]))));
      p[i] = ph;
      const bool bit = static_cast<T>(philox_uniform(seed, stream, i)) < ph;
      code |= static_cast<uint32_t>(bit) << h;
    }
    codes[n] = code;
  }
}

// Adds one row's contribution of the code tile [d0, d0 + 2^k) to acc (H + 1): acc[h] += S_h for
// h < H, acc[H] += S. a (2^k) holds dG on entry and is destroyed; table (2^k) is scratch.
template <class T>
void mapper_reduce_tile(T* a, T* table, const T* ph, int H, int k, size_t d0, double* acc) {
  double g_high = 1.0;  // probability of the tile's high bits
  for (int h = k; h < H; ++h) {
    g_high *= ((d0 >> h) & 1) ? static_cast<double>(ph[h]) : 1.0 - static_cast<double>(ph[h]);
  }
  if (g_high == 0.0) return;  // every code of the tile has probability 0
  table[0] = T(1);
  for (int j = 0; j < k; ++j) {  // table[l] = prod_{j<k} (bit j of l ? p_j : 1 - p_j)
    const int half = 1 << j;
    const T pj = ph[j], qj = T(1) - ph[j];
#pragma omp simd
    for (int l = 0; l < half; ++l) {
      table[l + half] = table[l] * pj;
      table[l] *= qj;
    }
  }
  const int K = 1 << k;
#pragma omp simd
  for (int l = 0; l < K; ++l) a[l] *= table[l];
  for (int j = k - 1; j >= 0; --j) {  // butterfly: S_j is the sum of the upper half
    const int half = 1 << j;
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int l = 0; l < half; ++l) {
      s += a[l + half];
      a[l] += a[l + half];
    }
    acc[j] += g_high * static_cast<double>(s);
  }
  const double s_tile = g_high * static_cast<double>(a[0]);
  acc[H] += s_tile;
  for (int h = k; h < H; ++h) {
    if ((d0 >> h) & 1) acc[h] += s_tile;
  }
}

// Rows [n0, n1) of binary_mapper_backward, on the calling thread (sequential GEMMs).
template <class T>
void mapper_backward_rows(T* dlogits, const T* dR, const T* W, const T* p, int n0, int n1, int C, int H, int k,
                          int tile_rows) {
  const int K = 1 << k;
  const size_t D = size_t(1) << H;
  T* tile = thread_scratch<T, 0>(size_t(tile_rows) * K);               // (tile_rows, 2^k)
  T* table = thread_scratch<T, 1>(K);                                  // (2^k)
  double* acc = thread_scratch<double, 2>(size_t(n1 - n0) * (H + 1));  // (n1 - n0, H + 1)
  std::fill(acc, acc + size_t(n1 - n0) * (H + 1), 0.0);
  for (size_t d0 = 0; d0 < D; d0 += K) {
    for (int r0 = n0; r0 < n1; r0 += tile_rows) {
      const int m = std::min(tile_rows, n1 - r0);
      gemm(false, false, m, K, C, T(1), dR + size_t(r0) * C, C, W + d0, static_cast<int>(D), T(0), tile, K);
      for (int r = 0; r < m; ++r) {
        mapper_reduce_tile(tile + size_t(r) * K, table, p + size_t(r0 + r) * H, H, k, d0,
                           acc + size_t(r0 + r - n0) * (H + 1));
      }
    }
  }
  for (int n = n0; n < n1; ++n) {
    const double* s = acc + size_t(n - n0) * (H + 1);
    for (int h = 0; h < H; ++h) {
      const double ph = static_cast<double>(p[size_t(n) * H + h]);
      dlogits[size_t(n) * H + h] += static_cast<T>(s[h] - ph * s[H]);
    }
  }
}

// dlogits (N, H) += pass-through gradient; dR (N, C), W (C, 2^H), p (N, H).
template <class T>
void binary_mapper_backward(T* dlogits, const T* dR, const T* W, const T* p, int N, int C, int H,
                            MapperTiles tiles = {}) {
  FT_ASSERT(H >= 1 && H <= 30 && tiles.rows >= 1 && tiles.codes_log2 >= 0,
            "binary mapper backward: H = %d, tiles %d x 2^%d", H, tiles.rows, tiles.codes_log2);
  const int k = std::min(H, tiles.codes_log2);
  const int row_tiles = (N + tiles.rows - 1) / tiles.rows;
  const size_t work = size_t(N) * C << H;
#pragma omp parallel if (go_parallel(work))
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int n0 = split_begin(row_tiles, nt, t) * tiles.rows;
    const int n1 = std::min(N, split_begin(row_tiles, nt, t + 1) * tiles.rows);
    if (n0 < n1) mapper_backward_rows(dlogits, dR, W, p, n0, n1, C, H, k, tiles.rows);
  }
}

// The walk both post-sampler ops share: check every code < D = 2^H, then call body(n, cb, ce, D)
// for every row n of each block [cb, ce) of at most 16 columns. Walking the rows once per block
// keeps the block's 16 rows of W in cache while the codes jump around in them (4x to 9x faster
// than one row of R at a time at H = 8..16). Threads own disjoint column ranges.
template <class Body>
inline void post_sampler_blocks(const uint32_t* codes, int N, int C, int H, Body&& body) {
  constexpr int kBlock = 16;
  const size_t D = size_t(1) << H;
  for (int n = 0; n < N; ++n) {
    FT_ASSERT(codes[n] < D, "post sampler: code %u >= 2^%d at row %d", codes[n], H, n);
  }
  parallel_columns(C, size_t(N) * C * 4, [&](int c0, int c1) {
    for (int cb = c0; cb < c1; cb += kBlock) {
      const int ce = std::min(c1, cb + kBlock);
      for (int n = 0; n < N; ++n) body(n, cb, ce, D);
    }
  });
}

// R (N, C): R[n,:] = W[:, codes[n]]; W (C, 2^H).
template <class T>
void post_sampler_forward(T* R, const uint32_t* codes, const T* W, int N, int C, int H) {
  post_sampler_blocks(codes, N, C, H, [&](int n, int cb, int ce, size_t D) {
    const T* col = W + codes[n];
    T* r = R + size_t(n) * C;
    for (int c = cb; c < ce; ++c) r[c] = col[size_t(c) * D];
  });
}

// dW[:, codes[n]] += dR[n,:]; dW (C, 2^H), dR (N, C). Threads own rows of dW (race free), rows
// of dR are added in ascending order.
template <class T>
void post_sampler_backward(T* dW, const T* dR, const uint32_t* codes, int N, int C, int H) {
  post_sampler_blocks(codes, N, C, H, [&](int n, int cb, int ce, size_t D) {
    const T* r = dR + size_t(n) * C;
    T* col = dW + codes[n];
    for (int c = cb; c < ce; ++c) col[size_t(c) * D] += r[c];
  });
}

// x log x with its limit 0 at x = 0.
inline double xlogx(double x) { return x > 0.0 ? x * std::log(x) : 0.0; }

// kl (N): KL_n = sum_h (log 2 - Hb(p[n,h])) in nats, computed in double; p (N, H). p = 0 or 1
// gives exactly log 2 (no clamping needed: x log x is taken as 0 at 0).
template <class T>
void kl_forward(T* kl, const T* p, int N, int H) {
  const double log2 = std::log(2.0);
#pragma omp parallel for schedule(static) if (go_parallel(size_t(N) * H * 32))
  for (int n = 0; n < N; ++n) {
    double s = 0.0;
    for (int h = 0; h < H; ++h) {
      const double ph = static_cast<double>(p[size_t(n) * H + h]);
      s += log2 + xlogx(ph) + xlogx(1.0 - ph);
    }
    kl[n] = static_cast<T>(s);
  }
}

// mean_kl (T) = the mean of kl (B, T) over the batch at each position, summed in double.
template <class T>
void kl_batch_mean(T* mean_kl, const T* kl, int B, int T_) {
  for (int t = 0; t < T_; ++t) {
    double s = 0.0;
    for (int b = 0; b < B; ++b) s += static_cast<double>(kl[size_t(b) * T_ + t]);
    mean_kl[t] = static_cast<T>(B > 0 ? s / B : 0.0);
  }
}

// Free bits: rows n with gate[n % period] > kappa get dlogits[n,h] += scale * p(1-p) log(p/(1-p))
// (the derivative of KL_n through p = sigmoid(logit)); other rows are untouched. At p = 0 or 1 the
// derivative's limit, 0, is used. gate = kl with period N is the per-pair form; the batch means
// (kl_batch_mean) with period T the batch-mean form (kernels/backend.h).
template <class T>
void kl_backward(T* dlogits, const T* p, const T* gate, int period, int N, int H, T kappa, T scale) {
#pragma omp parallel for schedule(static) if (go_parallel(size_t(N) * H * 32))
  for (int n = 0; n < N; ++n) {
    if (!(gate[n % period] > kappa)) continue;
    for (int h = 0; h < H; ++h) {
      const size_t i = size_t(n) * H + h;
      const double ph = static_cast<double>(p[i]);
      if (!(ph > 0.0 && ph < 1.0)) continue;
      const double g = ph * (1.0 - ph) * std::log(ph / (1.0 - ph));
      dlogits[i] += static_cast<T>(static_cast<double>(scale) * g);
    }
  }
}

}  // namespace ftx::cpu
