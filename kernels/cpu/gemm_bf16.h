// The CPU's matmul on bf16 weights for inference: out (N, OC) (+)= inp (N, IC) @ w^T, with w
// (OC, IC) bf16 row-major (nn.Linear layout) and fp32 activations and output, read at the speed of
// the memory for decode (N = 1) and close to the arithmetic peak for prefill (N in the hundreds).
//
// Paths (kernels/cpu/isa.h chooses one at run time; gemm_bf16w_on names one):
//   Generic     portable C++. Small N: a dot product per output with 16 independent fp32 lanes
//               (the compiler vectorises it). Larger N: the bf16 weight widened in slabs and
//               multiplied by OpenBLAS sgemm (matmul_forward_bf16w, kernels/cpu/ops_matmul.h).
//   Avx2        the weight widened in registers (a 16-bit shift), fp32 FMA on fp32 activations;
//               from kAvx2SgemmMinN inputs on, the Generic sgemm path (it is faster there).
//   Avx512Bf16  the activations rounded to bf16 once per call (round to nearest even, as
//               fp32_to_bf16), then VDPBF16PS dot products of bf16 pairs into fp32, as ggml's CPU
//               backend does for bf16 weights.
//
// Numerics: every product of a bf16 weight and an fp32 activation is exact in fp32 on the Generic
// and Avx2 paths, so they differ from a double-precision GEMM only by fp32 summation (relative
// error about 1e-6 on a dot product of 1536 terms). The Avx512Bf16 path multiplies bf16(x), not x:
// each term moves by at most 2^-9 relative, so |error| <= 2^-8 * sum_i |x_i w_i| with room to spare
// for the fp32 sums; VDPBF16PS also treats subnormal inputs as zero. Within one path the result of
// an output does not depend on the thread count; it may depend on N (k-blocking for large N).
//
// Threads: one OpenMP region per call, contiguous ranges of whole 16-row blocks of w per thread
// (each weight byte read by one thread, output lines never shared); products too small to pay
// for waking the pool run on the calling thread, as do calls made inside a parallel region.
//
// Deliberately not here: the backward (bf16 weights are frozen; matmul_backward_bf16w widens),
// weight repacking (the model reads w where the checkpoint maps it), AMX, quantised types.
#pragma once
#include <cstdint>

#include "kernels/cpu/isa.h"

namespace ftx::cpu {

// out (N, OC) = inp (N, IC) @ w^T, or += when accumulate; w (OC, IC) bf16. On cpu_isa()'s path.
void gemm_bf16w(float* out, const float* inp, const uint16_t* w, int N, int IC, int OC, bool accumulate);

// The same on a named path (a bug when the CPU cannot run it): tests and benchmarks compare paths.
void gemm_bf16w_on(CpuIsa isa, float* out, const float* inp, const uint16_t* w, int N, int IC, int OC, bool accumulate);

}  // namespace ftx::cpu
