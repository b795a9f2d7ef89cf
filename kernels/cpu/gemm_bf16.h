// The CPU's matmul on bf16 weights for inference: out (N, OC) (+)= inp (N, IC) @ w^T, with w
// (OC, IC) bf16 row-major (nn.Linear layout) and fp32 activations and output, read at the speed of
// the memory for decode (small N) and at sgemm's speed for prefill (N in the hundreds).
//
// Paths (kernels/cpu/isa.h chooses one at run time; gemm_bf16w_on names one), each with two
// engines: its own register kernel for small N, which streams each weight row once for all N
// inputs, and from a per-path N on (measured where the two are equal, docs/performance.md) the
// weight widened into fp32 slabs for OpenBLAS sgemm (matmul_forward_bf16w, ops_matmul.h), whose
// FMA kernels beat every bf16 kernel here once the product is compute-bound.
//   Generic     portable C++: a dot product per output in 16 independent fp32 lanes (the compiler
//               vectorises it); sgemm from 8 inputs on.
//   Avx2        the weight widened in registers (zero-extend, shift left 16), fp32 FMA on fp32
//               activations, 4 weight rows x 2 inputs a tile; sgemm from 48 inputs on.
//   Avx512Bf16  the activations rounded to bf16 once per call (round to nearest even, as
//               fp32_to_bf16), then VDPBF16PS dot products of bf16 pairs into fp32, 4 weight rows
//               x 4 inputs a tile, as ggml's CPU backend does for bf16 weights; from 65 inputs on,
//               sgemm on the same rounded activations (the same products), or where
//               vdpbf16ps_beats_sgemm() (isa.h: AMD) VDPBF16PS on packed tiles (gemm_bf16w_vdp).
//   Amx         Avx512Bf16's kernel for up to 4 inputs; from 5 on, the AMX tiles (gemm_bf16w_amx
//               in gemm_amx.h): the weight's bf16 loaded into tiles where it lies (or, for many
//               inputs on a narrow weight, copied into tiles), the activations rounded as
//               Avx512Bf16 does (the same products, summed by the tiles).
//
// Numerics: every product of a bf16 weight and an fp32 activation is exact in fp32 on the Generic
// and Avx2 paths, so they differ from a double-precision GEMM only by fp32 summation (relative
// error about 1e-6 on a dot product of 1536 terms). The Avx512Bf16 path multiplies bf16(x), not x:
// each term moves by at most 2^-9 relative, so |error| <= 2^-8 * sum_i |x_i w_i| with room to spare
// for the fp32 sums; VDPBF16PS also treats subnormal inputs as zero. Within one path the result of
// an output does not depend on the thread count; the order of its sum may depend on N (the engine,
// k-blocks for many inputs).
//
// Threads: one OpenMP region per call, contiguous ranges of whole 16-row blocks of w per thread
// (each weight byte read by one thread, output lines never shared); products too small to pay
// for waking the pool run on the calling thread, as do calls made inside a parallel region.
// The register kernels prefetch the weight rows 16 KiB ahead, up to 64 inputs (gemm_bf16_kernels.h).
//
// Deliberately not here: the backward (bf16 weights are frozen; matmul_backward_bf16w widens),
// weight repacking (the model reads w where the checkpoint maps it), quantised types.
#pragma once
#include <cstdint>

#include "kernels/cpu/isa.h"

namespace ftx::cpu {

// out (N, OC) = inp (N, IC) @ w^T, or += when accumulate; w (OC, IC) bf16. On cpu_isa()'s path.
void gemm_bf16w(float* out, const float* inp, const uint16_t* w, int N, int IC, int OC, bool accumulate);

// The same on a named path (a bug when the CPU cannot run it): tests and benchmarks compare paths.
void gemm_bf16w_on(CpuIsa isa, float* out, const float* inp, const uint16_t* w, int N, int IC, int OC, bool accumulate);

}  // namespace ftx::cpu
