// SwiGLU gate: out = silu(gate) * up, silu(g) = g * sigmoid(g) (the MLP's GEMMs are matmul ops).
// Backward: dgate = dout * up * s * (1 + g * (1 - s)), dup = dout * g * s, s = sigmoid(g);
// both overwrite (activation gradients), and may be gate and up (each element is read before it
// is written). sigmoid uses exp_nonpos (cpu_common.h).
#pragma once
#include <cstddef>

#include "kernels/cpu/cpu_common.h"

namespace ftx::cpu {

// out, gate, up: (N, F) flattened to n elements
template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : go_parallel(n))
  for (size_t i = 0; i < n; ++i) {
    const T g = gate[i];
    out[i] = g * sigmoid(g) * up[i];
  }
}

// dgate, dup (N, F) overwritten
template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : go_parallel(n))
  for (size_t i = 0; i < n; ++i) {
    const T g = gate[i], s = sigmoid(g), d = dout[i];
    dgate[i] = d * up[i] * s * (T(1) + g * (T(1) - s));
    dup[i] = d * g * s;
  }
}

}  // namespace ftx::cpu
