// Elementwise ops and simple reductions on flat buffers: copy_bytes, fill, add, add_inplace,
// scale, sum_squares, broadcast_rows, sum_rows (kernels/backend.h). Templated on the scalar so
// the tests can run them in double.
//
// Numerics: sum_squares and sum_rows accumulate in double. sum_squares splits the buffer into a
// fixed number of chunks (independent of the thread count) and adds the chunk sums in order, so
// the result repeats bit for bit.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_common.h"

namespace ftx::cpu {

// dst[0, bytes) = src[0, bytes), as memmove. A large copy between buffers that do not overlap is
// split between the threads, one memcpy of whole cache lines each: a training step of the small
// preset copies a (tokens, dim) buffer 12 times, and there one thread copied 27-28 GB/s, two
// 86-101 GB/s (docs/performance.md, twelfth pass).
inline void copy_bytes(void* dst, const void* src, size_t bytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (bytes == 0) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(d), b = reinterpret_cast<uintptr_t>(s);
  if ((a < b + bytes && b < a + bytes) || !go_parallel(bytes / sizeof(float))) {
    std::memmove(d, s, bytes);
    return;
  }
  constexpr size_t kLine = 64;
  const size_t lines = (bytes + kLine - 1) / kLine;
#pragma omp parallel
  {
    const size_t nt = size_t(omp_get_num_threads()), t = size_t(omp_get_thread_num());
    const size_t b0 = std::min(bytes, lines * t / nt * kLine);
    const size_t b1 = std::min(bytes, lines * (t + 1) / nt * kLine);
    if (b0 < b1) std::memcpy(d + b0, s + b0, b1 - b0);
  }
}

template <class T>
void fill(T* x, T value, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : go_parallel(n))
  for (size_t i = 0; i < n; ++i) x[i] = value;
}

// out = a + b (out may alias a or b)
template <class T>
void add(T* out, const T* a, const T* b, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : go_parallel(n))
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// acc += x
template <class T>
void add_inplace(T* acc, const T* x, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : go_parallel(n))
  for (size_t i = 0; i < n; ++i) acc[i] += x[i];
}

// x *= s
template <class T>
void scale(T* x, T s, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : go_parallel(n))
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

// sum x^2 in double.
template <class T>
double sum_squares(const T* x, size_t n) {
  constexpr int kChunks = 64;
  double part[kChunks];
#pragma omp parallel for schedule(static) if (go_parallel(n))
  for (int c = 0; c < kChunks; ++c) {
    const size_t lo = n * c / kChunks, hi = n * (c + 1) / kChunks;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = lo; i < hi; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    part[c] = s;
  }
  double total = 0.0;
  for (int c = 0; c < kChunks; ++c) total += part[c];
  return total;
}

// out[n,:] = v; out (N, C), v (C)
template <class T>
void broadcast_rows(T* out, const T* v, int N, int C) {
#pragma omp parallel for schedule(static) if (go_parallel(size_t(N) * C))
  for (int n = 0; n < N; ++n) {
    T* o = out + size_t(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = v[c];
  }
}

// dv += sum_n dout[n,:]; dout (N, C), dv (C). Rows added in order, in double.
template <class T>
void sum_rows(T* dv, const T* dout, int N, int C) {
  parallel_columns(C, size_t(N) * C, [&](int c0, int c1) {
    constexpr int kBlock = 64;
    for (int cb = c0; cb < c1; cb += kBlock) {
      const int w = std::min(kBlock, c1 - cb);
      double acc[kBlock] = {};
      for (int n = 0; n < N; ++n) {
        const T* row = dout + size_t(n) * C + cb;
#pragma omp simd
        for (int c = 0; c < w; ++c) acc[c] += static_cast<double>(row[c]);
      }
      for (int c = 0; c < w; ++c) dv[cb + c] += static_cast<T>(acc[c]);
    }
  });
}

}  // namespace ftx::cpu
