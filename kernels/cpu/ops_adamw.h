// AdamW, bias-corrected, with decoupled weight decay, in place over a flat parameter buffer:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  mhat = m / (1-b1^t);  vhat = v / (1-b2^t)
//   param -= lr * (mhat / (sqrt(vhat) + eps) + wd * param)
// t counts steps from 1. The bias corrections are computed in double, the update in T.
// Deliberately not here: which tensors get weight decay (the caller passes wd = 0 for them).
#pragma once
#include <cmath>
#include <cstddef>

#include "kernels/base/assert.h"
#include "kernels/cpu/cpu_common.h"

namespace ftx::cpu {

// param, grad, m, v: (n)
template <class T>
void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, T lr, T beta1, T beta2, T eps, T weight_decay, int t) {
  FT_ASSERT(t >= 1, "adamw: step %d (steps count from 1)", t);
  const T inv_bc1 = static_cast<T>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), t)));
  const T inv_bc2 = static_cast<T>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), t)));
#pragma omp parallel for simd schedule(static) if (parallel : go_parallel(n))
  for (size_t i = 0; i < n; ++i) {
    const T g = grad[i];
    const T mi = beta1 * m[i] + (T(1) - beta1) * g;
    const T vi = beta2 * v[i] + (T(1) - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const T mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    param[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * param[i]);
  }
}

}  // namespace ftx::cpu
