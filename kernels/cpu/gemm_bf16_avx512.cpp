// The AVX512_BF16 kernel of gemm_bf16w (kernels/cpu/gemm_bf16.h): bf16 activations times bf16
// weights by VDPBF16PS, which multiplies pairs of bf16 exactly and adds them into fp32 lanes.
//
// A tile is NI <= 4 inputs x R <= 4 weight rows: per step of 32 k, R weight vectors and NI input
// vectors are loaded and NI * R VDPBF16PS issued into NI * R accumulators of 16 lanes; at the end
// one transposing reduction turns the 16 accumulators into the 16 sums (reduce_tile). The weight
// rows of a tile are read once for all the inputs of a group, so for decode (N <= 4) each weight
// byte comes from memory exactly once. For many inputs, k is cut into blocks whose slice of the
// inputs fits in L2 (kXPanelBytes), the 4 weight rows of a tile staying in L1 while every input
// group streams past them.
//
// Deliberately not here: threads and the choice of path (gemm_bf16.cpp), AMX.
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>

#include "kernels/base/dtype.h"
#include "kernels/cpu/gemm_bf16_kernels.h"

// GCC 12's AVX-512 headers initialise their "undefined" vectors from themselves, which -Wuninitialized
// reports wherever a shuffle or an extract is inlined (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"

#define FTX_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
#define FTX_AVX512BF16_INLINE FTX_AVX512BF16 __attribute__((always_inline)) inline

namespace ftx::cpu::detail {
namespace {

constexpr int kK = 32;                    // bf16 per vector
constexpr size_t kXPanelBytes = 1 << 20;  // the slice of the inputs one k-block reads (L2)

// v lane (n * 4 + r) = sum of the 16 lanes of a[n][r]. Each sum adds lane i to lane i + 8, then
// i + 4, i + 2, i + 1, the order of _mm512_reduce_add_ps.
FTX_AVX512BF16_INLINE __m512 reduce_tile(const __m512 (&a)[4][4]) {
  __m512 z[4];  // z[r]: 128-bit lane n holds 4 partial sums of a[n][r]
  for (int r = 0; r < 4; ++r) {
    const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a[0][r], a[1][r], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(a[0][r], a[1][r], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a[2][r], a[3][r], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(a[2][r], a[3][r], _MM_SHUFFLE(3, 2, 3, 2)));
    z[r] = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  const __m512 u01 = _mm512_add_ps(_mm512_unpacklo_ps(z[0], z[1]), _mm512_unpackhi_ps(z[0], z[1]));
  const __m512 u23 = _mm512_add_ps(_mm512_unpacklo_ps(z[2], z[3]), _mm512_unpackhi_ps(z[2], z[3]));
  const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(u01), _mm512_castps_pd(u23));
  const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(u01), _mm512_castps_pd(u23));
  return _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
}

// out[n * ldo + r] (+)= sum_k x[n * ldx + k] * w[r * ldw + k] for n < NI, r < R, k < kc. x holds
// zeros from kc up to the next multiple of 32 (or more valid data: w is masked there). pf > 0:
// prefetch rows r + pf of w (a hint: past the end of w it reads nothing).
template <int NI, int R>
FTX_AVX512BF16 void tile(float* out, size_t ldo, const uint16_t* x, size_t ldx, const uint16_t* w, size_t ldw, int kc,
                         bool add, int pf) {
  __m512 acc[4][4];
  for (auto& row : acc)
    for (auto& a : row) a = _mm512_setzero_ps();
  int k = 0;
  for (; k + kK <= kc; k += kK) {
    if (pf > 0) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(w + (r + pf) * ldw + k), _MM_HINT_T0);
    }
    __m512bh wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = (__m512bh)_mm512_loadu_si512(w + r * ldw + k);
#pragma GCC unroll 4
    for (int n = 0; n < NI; ++n) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + n * ldx + k);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[n][r] = _mm512_dpbf16_ps(acc[n][r], xv, wv[r]);
    }
  }
  if (k < kc) {
    const __mmask32 m = _cvtu32_mask32((1u << (kc - k)) - 1u);
    __m512bh wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(m, w + r * ldw + k);
#pragma GCC unroll 4
    for (int n = 0; n < NI; ++n) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x + n * ldx + k);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[n][r] = _mm512_dpbf16_ps(acc[n][r], xv, wv[r]);
    }
  }
  const __m512 v = reduce_tile(acc);
  const __m128 s[4] = {_mm512_castps512_ps128(v), _mm512_extractf32x4_ps(v, 1), _mm512_extractf32x4_ps(v, 2),
                       _mm512_extractf32x4_ps(v, 3)};
  const __mmask8 m = __mmask8((1u << R) - 1u);
#pragma GCC unroll 4
  for (int n = 0; n < NI; ++n) {
    float* o = out + n * ldo;
    const __m128 t = add ? _mm_add_ps(s[n], _mm_maskz_loadu_ps(m, o)) : s[n];
    _mm_mask_storeu_ps(o, m, t);
  }
}

using TileFn = void (*)(float*, size_t, const uint16_t*, size_t, const uint16_t*, size_t, int, bool, int);

template <int NI>
constexpr TileFn tile_for_rows(int R) {
  return R == 4 ? tile<NI, 4> : R == 3 ? tile<NI, 3> : R == 2 ? tile<NI, 2> : tile<NI, 1>;
}

TileFn tile_fn(int NI, int R) {
  switch (NI) {
    case 4:
      return tile_for_rows<4>(R);
    case 3:
      return tile_for_rows<3>(R);
    case 2:
      return tile_for_rows<2>(R);
    default:
      return tile_for_rows<1>(R);
  }
}

}  // namespace

FTX_AVX512BF16 void round_rows_bf16_avx512(uint16_t* xb, size_t ldx, const float* x, int IC, int n0, int n1) {
  for (int n = n0; n < n1; ++n) {
    const float* src = x + size_t(n) * IC;
    uint16_t* dst = xb + size_t(n) * ldx;
    fp32_to_bf16(dst, src, size_t(IC));
    std::fill(dst + IC, dst + ldx, uint16_t(0));
  }
}

FTX_AVX512BF16 void gemm_bf16w_rows_avx512bf16(float* out, const uint16_t* xb, size_t ldx, const uint16_t* w, int N,
                                               int IC, int OC, int o0, int o1, bool accumulate) {
  // k-blocks: all of IC when the inputs fit in kXPanelBytes, else equal multiples of 32 that do.
  int kb = std::max(IC, 1);
  if (size_t(N) * ldx * 2 > kXPanelBytes) {
    const int fit = std::max(kK, int(kXPanelBytes / (size_t(N) * 2)) / kK * kK);
    const int blocks = (IC + fit - 1) / fit;
    kb = ((IC + blocks - 1) / blocks + kK - 1) / kK * kK;
  }
  const size_t row_bytes = std::max<size_t>(2, size_t(IC) * 2);
  const int pf = N <= kPrefetchMaxN ? std::max(4, int((kPrefetchBytes + row_bytes - 1) / row_bytes)) : 0;
  for (int k0 = 0; k0 < std::max(IC, 1); k0 += kb) {
    const int kc = std::min(kb, IC - k0);
    const bool add = accumulate || k0 > 0;
    for (int o = o0; o < o1; o += 4) {
      const int R = std::min(4, o1 - o);
      const uint16_t* wr = w + size_t(o) * IC + k0;
      for (int n = 0; n < N; n += 4) {
        const int NI = std::min(4, N - n);
        tile_fn(NI, R)(out + size_t(n) * OC + o, size_t(OC), xb + size_t(n) * ldx + k0, ldx, wr, size_t(IC), kc, add,
                       n == 0 ? pf : 0);
      }
    }
  }
}

}  // namespace ftx::cpu::detail
#endif
