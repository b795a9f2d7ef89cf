// Softmax cross-entropy over V classes, one row per predicted token. Forward writes the per-row
// loss; backward writes scale * (softmax - onehot(target)), and may run in place on the logits.
//
// Numerics: the row max is subtracted before exp (exp_nonpos); sums over V accumulate in T, which
// is enough for small vocabularies (V = 29 here). Targets must lie in [0, V) (asserted: a bad id
// is a bug upstream, the datasets validate their tokens).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/base/assert.h"
#include "kernels/cpu/cpu_common.h"

namespace ftx::cpu {

// Row max and sum_j exp(l_j - max) of one row of V logits.
template <class T>
void softmax_stats(const T* l, int V, T& mx, T& sum) {
  mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < V; ++j) mx = mx > l[j] ? mx : l[j];  // std::max here stays scalar (GCC 12)
  sum = T(0);
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) sum += exp_nonpos<T>(l[j] - mx);
}

// losses (N), logits (N, V), targets (N)
template <class T>
void crossentropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V) {
#pragma omp parallel for schedule(static) if (go_parallel(size_t(N) * V * 8))
  for (int n = 0; n < N; ++n) {
    const T* l = logits + size_t(n) * V;
    const int32_t t = targets[n];
    FT_ASSERT(t >= 0 && t < V, "crossentropy: target %d outside [0, %d) at row %d", t, V, n);
    T mx, sum;
    softmax_stats(l, V, mx, sum);
    losses[n] = std::log(sum) + mx - l[t];
  }
}

// dlogits (N, V) = scale * (softmax(logits) - onehot(target)); dlogits may alias logits.
template <class T>
void crossentropy_backward(T* dlogits, const T* logits, const int32_t* targets, int N, int V, T scale) {
#pragma omp parallel for schedule(static) if (go_parallel(size_t(N) * V * 8))
  for (int n = 0; n < N; ++n) {
    const T* l = logits + size_t(n) * V;
    T* d = dlogits + size_t(n) * V;
    const int32_t t = targets[n];
    FT_ASSERT(t >= 0 && t < V, "crossentropy: target %d outside [0, %d) at row %d", t, V, n);
    T mx, sum;
    softmax_stats(l, V, mx, sum);
    const T k = scale / sum;
#pragma omp simd
    for (int j = 0; j < V; ++j) d[j] = k * exp_nonpos<T>(l[j] - mx);  // reads l[j] before d[j]
    d[t] -= scale;
  }
}

}  // namespace ftx::cpu
