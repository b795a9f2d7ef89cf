// An fp32-in, fp32-out GEMM on Intel AMX bf16 tiles (Sapphire Rapids and later), or with the same
// packing on VDPBF16PS (AVX512_BF16 without AMX: AMD Zen 4 and later): the operands are rounded to
// bf16 as they are packed, the tiles (or VDPBF16PS) multiply bf16 pairs and accumulate in fp32.
// Written for the three products of a Linear layer in training (N tokens, IC inputs, OC outputs):
//   forward  out (N, OC)  = inp (N, IC) @ W (OC, IC)^T     gemm_bf16_amx(false, true, ...)
//   dX       dinp (N, IC) = dout (N, OC) @ W (OC, IC)      gemm_bf16_amx(false, false, ...)
//   dW       dW (OC, IC) += dout (N, OC)^T @ inp (N, IC)   gemm_bf16_amx(true, false, ..., true)
//
// Numerics: each input moves by at most 2^-9 relative when rounded to bf16 (round to nearest even),
// so |C - exact| <= about 2^-8 * sum_k |a_k b_k| (+ fp32 rounding of the sums, and of |C| when
// accumulating). Against the exact product of the rounded inputs only the fp32 summation differs
// (relative 1e-6-ish). Like every AVX512_BF16 / AMX instruction, the conversion treats subnormal fp32
// inputs as zero and the tiles flush subnormal results; NaN and infinity propagate. The order of
// the sums does not depend on the thread count (each element of C is summed by one thread, in k
// order), so results repeat bit for bit.
//
// Self-contained (C++ standard library, <immintrin.h>, OpenMP, Linux syscalls): the AMX and AVX-512
// code carries __attribute__((target(...))), so the file builds without -mamx / -march flags, and
// must be called only after amx_usable() said yes.
//
// Deliberately not here: bf16 activations (callers widen them), alpha/beta other than 1 and 0/1,
// non-x86 machines (amx_usable() is false there; calling a GEMM is a bug).
#pragma once
#include <cstdint>

namespace ftx::cpu {

// Whether this process may run AMX bf16 tiles: the CPU has AMX-TILE and AMX-BF16 (cpuid) and Linux granted
// the tile data state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18), asked once, thread-safe).
// Also requires AVX-512 F/BW and AVX512_BF16 with the OS saving ZMM state (the packing uses them;
// every AMX CPU has them).
bool amx_usable();

// C (M x N, row-major, leading dimension ldc) = (accumulate ? C : 0) + op(A) * op(B), as cblas_sgemm with
// alpha 1 and beta 0 or 1, row-major: op(A) is M x K (A is M x K with lda, or K x M with lda when transA),
// op(B) is K x N (B is K x N with ldb, or N x K with ldb when transB). The inputs are fp32, rounded to bf16
// (round to nearest even) as they are packed; products are accumulated in fp32 by the tiles. Multi-threaded
// with OpenMP over blocks of C (serial when called inside a parallel region or when the work is small).
// Precondition: amx_usable().
//
// Scratch: the packed bf16 operands live in a buffer of the calling thread that grows to the
// largest call and is kept (at most about 64 MiB, more only when M + N exceeds 128 K).
void gemm_bf16_amx(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                   float* C, int ldc, bool accumulate);

// The same product, packed the same way, multiplied by VDPBF16PS instead of the tiles (AMD Zen 4
// and later, where VDPBF16PS issues at the rate of fp32 FMA with twice its multiply-adds; on Intel
// it issues at half that rate and rounding + sgemm is as fast). Same numerics, the fp32 sums in
// another order. Precondition: the CPU runs AVX-512 F/BW/VL/DQ and AVX512_BF16
// (cpu_isa_supported(CpuIsa::Avx512Bf16), isa.h); no AMX needed.
void gemm_bf16_vdp(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                   float* C, int ldc, bool accumulate);

// Inference on bf16 weights (prefill, and decode of 5 or more sequences): out (N, OC) (+)= inp (N,
// IC) @ w^T with w (OC, IC) bf16 row-major (nn.Linear layout), the bits of gemm_bf16_amx(false,
// true, ...) on w widened. When IC is a multiple of 32, OC of 16 and 4 N <= 3 IC, the tiles read w
// in place (out^T = w inp^T, no copy of the weight); otherwise the weight tiles are copied from w
// as they are (no widening, no second rounding). Precondition: amx_usable().
void gemm_bf16w_amx(float* out, const float* inp, const uint16_t* w, int N, int IC, int OC, bool accumulate);

// The same on VDPBF16PS (the weight tiles always copied from w, no widening), the bits of
// gemm_bf16_vdp(false, true, ...) on w widened. Precondition as gemm_bf16_vdp's.
void gemm_bf16w_vdp(float* out, const float* inp, const uint16_t* w, int N, int IC, int OC, bool accumulate);

}  // namespace ftx::cpu
