// RMSNorm over the last dimension: out = w * x / sqrt(mean(x^2) + eps) (docs/design.md section 3),
// with rstd = 1 / sqrt(mean(x^2) + eps) saved per row for the backward.
//
// Numerics: mean(x^2) accumulates in T (C terms, vectorised); the dw column sums accumulate in
// double, in 16 fixed blocks of rows added in order. Backward:
// dx += rstd * (w*g - x * rstd^2 * mean(w*g*x)).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

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

// dx (N, C) +=, dw (C) +=; dout, x (N, C), w (C), rstd (N). One pass over the rows gives both:
// dw[c] += sum_n dout[n,c] * x[n,c] * rstd[n] is summed per block of rows in double while the rows
// are in cache for dx, and the block sums are added in block order. The blocks are fixed (not one
// per thread), so dw repeats bit for bit whatever the thread count; more than 16 threads idle
// here. A separate dw pass re-read dout and x from memory (docs/performance.md, twelfth pass).
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd, int N, int C) {
  constexpr int kBlocks = 16;
  std::vector<double> part(size_t(kBlocks) * C, 0.0);
#pragma omp parallel for schedule(static) if (go_parallel(size_t(N) * C))
  for (int b = 0; b < kBlocks; ++b) {
    double* acc = part.data() + size_t(b) * C;
    for (int n = split_begin(N, kBlocks, b); n < split_begin(N, kBlocks, b + 1); ++n) {
      const T* g = dout + size_t(n) * C;
      const T* xr = x + size_t(n) * C;
      T* d = dx + size_t(n) * C;
      const T r = rstd[n];
      T dot = 0;  // sum_c w g x
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; ++c) dot += w[c] * g[c] * xr[c];
      const T k = dot * r * r / T(C);
      const double rd = static_cast<double>(r);
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        d[c] += r * (w[c] * g[c] - xr[c] * k);
        acc[c] += static_cast<double>(g[c] * xr[c]) * rd;
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    double sum = 0.0;
    for (int b = 0; b < kBlocks; ++b) sum += part[size_t(b) * C + c];
    dw[c] += static_cast<T>(sum);
  }
}

}  // namespace ftx::cpu
