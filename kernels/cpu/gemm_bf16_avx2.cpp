// The AVX2 kernel of gemm_bf16w (kernels/cpu/gemm_bf16.h): fp32 activations, bf16 weights widened
// in registers (zero-extend to 32 bits, shift left 16: exact), FMA into fp32 lanes.
//
// A tile is NI <= 2 inputs x R <= 4 weight rows (8 accumulators of 8 lanes: AVX2 has 16 registers),
// stepping 8 k at a time; the weight rows of a tile are read once for the inputs of the group, and
// stay in L1 for the next group. The tail of k (IC not a multiple of 8) is a scalar loop.
//
// Deliberately not here: threads and the choice of path (gemm_bf16.cpp), k-blocking (the Avx2
// path hands large N to sgemm, kAvx2SgemmMinN).
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>

#include "kernels/base/dtype.h"
#include "kernels/cpu/gemm_bf16_kernels.h"

#define FTX_AVX2 __attribute__((target("avx2,fma")))
#define FTX_AVX2_INLINE FTX_AVX2 __attribute__((always_inline)) inline

namespace ftx::cpu::detail {
namespace {

constexpr int kK = 8;  // floats per vector

FTX_AVX2_INLINE __m256 widen8(const uint16_t* w) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// The 4 sums of a[0..3] as one vector (lane r = sum of the 8 lanes of a[r]).
FTX_AVX2_INLINE __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// out[n * ldo + r] (+)= sum_k x[n * ldx + k] * w[r * ldw + k] for n < NI, r < R, k < kc. pf > 0:
// prefetch rows r + pf of w, one cache line per 32 k.
template <int NI, int R>
FTX_AVX2 void tile(float* out, size_t ldo, const float* x, size_t ldx, const uint16_t* w, size_t ldw, int kc, bool add,
                   int pf) {
  __m256 acc[NI][4];
  for (auto& row : acc)
    for (auto& a : row) a = _mm256_setzero_ps();
  int k = 0;
  for (; k + kK <= kc; k += kK) {
    if (pf > 0 && k % 32 == 0) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(w + (r + pf) * ldw + k), _MM_HINT_T0);
    }
    __m256 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = widen8(w + r * ldw + k);
#pragma GCC unroll 2
    for (int n = 0; n < NI; ++n) {
      const __m256 xv = _mm256_loadu_ps(x + n * ldx + k);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[n][r] = _mm256_fmadd_ps(xv, wv[r], acc[n][r]);
    }
  }
  for (int n = 0; n < NI; ++n) {
    alignas(16) float s[4];
    _mm_store_ps(s, reduce4(acc[n][0], acc[n][1], acc[n][2], acc[n][3]));
    for (int r = 0; r < R; ++r) {
      float tail = 0.0f;
      for (int j = k; j < kc; ++j) tail += x[n * ldx + j] * bf16_to_fp32(w[r * ldw + j]);
      float& o = out[n * ldo + r];
      o = (add ? o : 0.0f) + (s[r] + tail);
    }
  }
}

using TileFn = void (*)(float*, size_t, const float*, size_t, const uint16_t*, size_t, int, bool, int);

template <int NI>
constexpr TileFn tile_for_rows(int R) {
  return R == 4 ? tile<NI, 4> : R == 3 ? tile<NI, 3> : R == 2 ? tile<NI, 2> : tile<NI, 1>;
}

}  // namespace

FTX_AVX2 void gemm_bf16w_rows_avx2(float* out, const float* x, size_t ldx, const uint16_t* w, int N, int IC, int OC,
                                   int o0, int o1, bool accumulate) {
  const size_t row_bytes = std::max<size_t>(2, size_t(IC) * 2);
  const int pf = N <= kPrefetchMaxN ? std::max(4, int((kPrefetchBytes + row_bytes - 1) / row_bytes)) : 0;
  for (int o = o0; o < o1; o += 4) {
    const int R = std::min(4, o1 - o);
    const uint16_t* wr = w + size_t(o) * IC;
    for (int n = 0; n < N; n += 2) {
      const TileFn f = N - n >= 2 ? tile_for_rows<2>(R) : tile_for_rows<1>(R);
      f(out + size_t(n) * OC + o, size_t(OC), x + size_t(n) * ldx, ldx, wr, size_t(IC), IC, accumulate,
        n == 0 ? pf : 0);
    }
  }
}

}  // namespace ftx::cpu::detail
#endif
