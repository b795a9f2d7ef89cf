// Token embedding: forward gathers rows of the table, backward scatter-adds into its gradient.
//
// The backward splits the table's columns between threads (each thread walks all rows for its
// columns), so repeated tokens never race and the sum order is the row order, whatever the
// thread count. Token ids are trusted (validated where they enter: datasets, tokenizers).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/base/dtype.h"
#include "kernels/cpu/cpu_common.h"

namespace ftx::cpu {

// out[n,:] = wte[tok[n],:]; out (N, C), wte (V, C), tok (N)
template <class T>
void embedding_forward(T* out, const int32_t* tok, const T* wte, int N, int C) {
#pragma omp parallel for schedule(static) if (go_parallel(size_t(N) * C))
  for (int n = 0; n < N; ++n) {
    const T* src = wte + size_t(tok[n]) * C;
    T* dst = out + size_t(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) dst[c] = src[c];
  }
}

// The same gather from a bf16 table, widened exactly to fp32.
inline void embedding_forward_bf16(float* out, const int32_t* tok, const uint16_t* wte, int N, int C) {
#pragma omp parallel for schedule(static) if (go_parallel(size_t(N) * C))
  for (int n = 0; n < N; ++n) bf16_to_fp32(out + size_t(n) * C, wte + size_t(tok[n]) * C, size_t(C));
}

// dwte[tok[n],:] += dout[n,:]; dwte (V, C), dout (N, C)
template <class T>
void embedding_backward(T* dwte, const T* dout, const int32_t* tok, int N, int C) {
  parallel_columns(C, size_t(N) * C, [&](int c0, int c1) {
    for (int n = 0; n < N; ++n) {
      T* dst = dwte + size_t(tok[n]) * C;
      const T* src = dout + size_t(n) * C;
#pragma omp simd
      for (int c = c0; c < c1; ++c) dst[c] += src[c];
    }
  });
}

}  // namespace ftx::cpu
