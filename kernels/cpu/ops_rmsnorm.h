// RMSNorm over the last dimension: out = w * x / sqrt(mean(x^2) + eps) (docs/design.md section 3),
// with rstd = 1 / sqrt(mean(x^2) + eps) saved per row for the backward.
//
// Numerics: mean(x^2) accumulates in T (C terms, vectorised); the dw column sums accumulate in
// double, rows in ascending order. Backward: dx += rstd * (w*g - x * rstd^2 * mean(w*g*x)).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/cpu/cpu_common.h"

namespace ftx::cpu {

// out (N, C), rstd (N), x (N, C), w (C)
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int N, int C, T eps) {
#pragma omp parallel for schedule(static) if (go_parallel(size_t(N) * C))
  for (int n = 0; n < N; ++n) {
    const T* xr = x + size_t(n) * C;
    T* o = out + size_t(n) * C;
    T ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += xr[c] * xr[c];
    const T r = T(1) / std::sqrt(ss / T(C) + eps);
    rstd[n] = r;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = w[c] * (xr[c] * r);
  }
}

// dw[c] += sum_n dout[n,c] * x[n,c] * rstd[n]; dw (C)
template <class T>
void rmsnorm_backward_weight(T* dw, const T* dout, const T* x, const T* rstd, int N, int C) {
  parallel_columns(C, size_t(N) * C, [&](int c0, int c1) {
    constexpr int kBlock = 64;
    for (int cb = c0; cb < c1; cb += kBlock) {
      const int width = std::min(kBlock, c1 - cb);
      double acc[kBlock] = {};
      for (int n = 0; n < N; ++n) {
        const T* g = dout + size_t(n) * C + cb;
        const T* xr = x + size_t(n) * C + cb;
        const double r = static_cast<double>(rstd[n]);
#pragma omp simd
        for (int c = 0; c < width; ++c) acc[c] += static_cast<double>(g[c] * xr[c]) * r;
      }
      for (int c = 0; c < width; ++c) dw[cb + c] += static_cast<T>(acc[c]);
    }
  });
}

// dx (N, C) +=, dw (C) +=; dout, x (N, C), w (C), rstd (N)
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd, int N, int C) {
#pragma omp parallel for schedule(static) if (go_parallel(size_t(N) * C))
  for (int n = 0; n < N; ++n) {
    const T* g = dout + size_t(n) * C;
    const T* xr = x + size_t(n) * C;
    T* d = dx + size_t(n) * C;
    const T r = rstd[n];
    T dot = 0;  // sum_c w g x
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; ++c) dot += w[c] * g[c] * xr[c];
    const T k = dot * r * r / T(C);
#pragma omp simd
    for (int c = 0; c < C; ++c) d[c] += r * (w[c] * g[c] - xr[c] * k);
  }
  rmsnorm_backward_weight(dw, dout, x, rstd, N, C);
}

}  // namespace ftx::cpu
