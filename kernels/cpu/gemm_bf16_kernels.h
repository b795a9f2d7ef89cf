// The single-threaded kernels behind gemm_bf16w (kernels/cpu/gemm_bf16.h), one set per instruction
// set, each in its own file compiled with default flags: the functions that use wider instructions
// carry __attribute__((target(...))) and are called only after cpu_isa_supported() said yes, so a
// binary built without -march=native never runs an instruction its CPU lacks.
//
// Each kernel computes the output columns [o0, o1) of out (N, OC) for all N inputs:
//   out[n * OC + o] (+)= sum_k x[n * ldx + k] * w[o * IC + k],  k < IC.
// Deliberately not here: threads (gemm_bf16.cpp splits [0, OC) between them), rounding policy.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/isa.h"

namespace ftx::cpu::detail {

// How a path multiplies: its own register kernel (streams w once for all N inputs), or w widened
// into slabs for OpenBLAS sgemm (on the Avx512Bf16 path, of the activations rounded to bf16, so
// that both engines form the same products).
enum class Bf16Engine { Kernel, Sgemm };

// The x86 register kernels stream w from memory: each tile also prefetches the weight rows about
// kPrefetchBytes ahead (the hardware prefetcher alone left 15-35 % of the bandwidth unused;
// 4 KiB and 64 KiB were a little slower), in calls of up to kPrefetchMaxN inputs: every N the
// engine switch gives a kernel (gemm_bf16.cpp). Measured on whole decode steps of N sequences
// (Sapphire Rapids, 2026-12-06, docs/performance.md eighth pass): prefetching past 16 inputs, the
// old limit, made them 1.1-1.3x faster from 17 to 48 inputs.
constexpr size_t kPrefetchBytes = 16 << 10;
constexpr int kPrefetchMaxN = 64;

// gemm_bf16w_on with the engine named; gemm_bf16w_on takes Sgemm from sgemm_min_n(isa) inputs on.
void gemm_bf16w_engine(CpuIsa isa, Bf16Engine engine, float* out, const float* inp, const uint16_t* w, int N, int IC,
                       int OC, bool accumulate);
int sgemm_min_n(CpuIsa isa);

// x fp32 (N, ldx).
void gemm_bf16w_rows_generic(float* out, const float* x, size_t ldx, const uint16_t* w, int N, int IC, int OC, int o0,
                             int o1, bool accumulate);

#if defined(__x86_64__)
// x fp32 (N, ldx). AVX2 + FMA.
void gemm_bf16w_rows_avx2(float* out, const float* x, size_t ldx, const uint16_t* w, int N, int IC, int OC, int o0,
                          int o1, bool accumulate);

// xb[n * ldx + k] = bf16(x[n * IC + k]) for rows [n0, n1), k < IC (round to nearest even, NaN kept, as
// fp32_to_bf16), and zeros for IC <= k < ldx. AVX-512.
void round_rows_bf16_avx512(uint16_t* xb, size_t ldx, const float* x, int IC, int n0, int n1);

// x bf16 (N, ldx), ldx a multiple of 32 with zeros past IC. AVX-512 + AVX512_BF16.
void gemm_bf16w_rows_avx512bf16(float* out, const uint16_t* xb, size_t ldx, const uint16_t* w, int N, int IC, int OC,
                                int o0, int o1, bool accumulate);
#endif

}  // namespace ftx::cpu::detail
