// Shared helpers of the CPU ops (kernels/cpu/ops_*.h): when to go parallel, how to split columns
// between threads, buffers (on huge pages from 2 MiB), per-thread scratch and operands rounded to
// bf16 in it, and the exp/sigmoid used by softmax, SwiGLU and the mapper.
//
// Numerics: exp_nonpos<float> is a polynomial (Cephes expf, relative error about 1e-7) written so
// that GCC vectorises it; exp_nonpos<double> is std::exp, the reference the float path is tested
// against. Every parallel loop uses a static schedule, and every reduction combines its partial
// sums in an order fixed by the data, not by the thread count, so a run repeats bit for bit.
//
// Deliberately not here: intrinsics, thread pools of our own (OpenMP's is shared with OpenBLAS).
#pragma once
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "kernels/base/dtype.h"

namespace ftx::cpu {

// Below this many scalar operations (tens of microseconds of work) a parallel region costs more
// than it saves, more so on a busy machine where a barrier may wait for a descheduled thread.
constexpr size_t kParallelMinWork = 1 << 17;

inline bool go_parallel(size_t work) { return work >= kParallelMinWork; }

// [begin, end) of part `idx` when `total` items are split into `parts` contiguous ranges.
inline int split_begin(int total, int parts, int idx) {
  return static_cast<int>(static_cast<int64_t>(total) * idx / parts);
}

// Runs body(c0, c1) on disjoint contiguous column ranges, one per thread, cut at multiples of
// 16 columns (a cache line of floats: no false sharing between threads). Column reductions done
// this way add rows in ascending order whatever the thread count (deterministic, race free).
template <class Body>
void parallel_columns(int C, size_t work, Body&& body) {
  constexpr int kGrain = 16;
  const int blocks = (C + kGrain - 1) / kGrain;
#pragma omp parallel if (go_parallel(work) && blocks > 1)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int c0 = std::min(C, split_begin(blocks, nt, t) * kGrain);
    const int c1 = std::min(C, split_begin(blocks, nt, t + 1) * kGrain);
    if (c0 < c1) body(c0, c1);
  }
}

// Memory for a CPU buffer of `bytes`: 64-byte aligned (a cache line, one AVX-512 vector) and, from
// kHugePage on, kHugePage-aligned, rounded up to whole huge pages and advised MADV_HUGEPAGE. Debian's
// kernels give transparent huge pages only to memory so advised (THP "madvise"). A training step
// streams through tens of MiB of activations, and under a hypervisor every TLB miss walks two page
// tables: on a Sapphire Rapids VM the small preset trained 1.12x faster at fp32 and 1.13-1.15x at
// bf16 with its buffers on huge pages (docs/performance.md, tenth pass). Null when out of memory;
// free with std::free.
constexpr size_t kHugePage = size_t(2) << 20;
inline void* alloc_cpu_buffer(size_t bytes) {
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t size = (bytes + align - 1) / align * align;
  if (size < bytes) return nullptr;  // overflow
  void* p = std::aligned_alloc(align, size == 0 ? align : size);
  if (p != nullptr && align == kHugePage) madvise(p, size, MADV_HUGEPAGE);
  return p;
}

// Per-thread buffer reused across calls (grows, never shrinks; zeroed when it grows, its contents
// kept between calls otherwise), from alloc_cpu_buffer. Slot separates buffers that are alive at
// the same time in one op.
template <class T, int Slot>
T* thread_scratch(size_t n) {
  struct Buffer {
    void* p = nullptr;
    size_t n = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buf;
  if (buf.n < n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    void* p = alloc_cpu_buffer(n * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, n * sizeof(T));
    std::free(buf.p);
    buf.p = p, buf.n = n;
  }
  return static_cast<T*>(buf.p);
}

// rows x cols of src (row stride ld) rounded to bf16 (round_to_bf16), dense (row stride cols), in
// the calling thread's scratch slot Slot: the operands of products with bf16 inputs. Outside a
// parallel region a large operand is shared out between the threads by rows.
template <int Slot>
const float* rounded_to_bf16(const float* src, int rows, int cols, int ld) {
  const size_t n = size_t(rows) * size_t(cols);
  float* dst = thread_scratch<float, Slot>(n);
  if (omp_in_parallel() || !go_parallel(n)) {
    if (ld == cols) return round_to_bf16(dst, src, n), dst;
    for (int r = 0; r < rows; ++r) round_to_bf16(dst + size_t(r) * cols, src + size_t(r) * ld, size_t(cols));
    return dst;
  }
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) round_to_bf16(dst + size_t(r) * cols, src + size_t(r) * ld, size_t(cols));
  return dst;
}

// exp(x) for x <= 0 (softmax after max subtraction, sigmoid of -|x|). NaN propagates; x < -87
// returns 0 (the true value is below 1.7e-38).
template <class T>
inline T exp_nonpos(T x) {
  return std::exp(x);
}

template <>
inline float exp_nonpos<float>(float x) {
  constexpr float kLo = -87.0f;
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float xc = x < kLo ? kLo : x;
  const float t = xc * 1.44269504088896341f + kMagic;
  const float n = t - kMagic;  // round(x / ln 2)
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kMagic);
  float r = xc - n * 0.693359375f;  // ln 2, high part
  r = r - n * -2.12194440e-4f;      // ln 2, low part
  float p = 1.9875691500e-4f;       // e^r, |r| <= ln2/2
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float y = p * std::bit_cast<float>((ni + 127) << 23);
  return x < kLo ? 0.0f : y;
}

// Logistic sigmoid, stable for both signs (only exp of non-positive arguments).
template <class T>
inline T sigmoid(T x) {
  const T e = exp_nonpos<T>(-std::abs(x));
  const T inv = T(1) / (T(1) + e);
  return x >= T(0) ? inv : e * inv;
}

}  // namespace ftx::cpu
