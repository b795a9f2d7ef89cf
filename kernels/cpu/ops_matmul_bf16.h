// Training's Linear products at --precision bf16 on the CPU (and attention's, through
// ops_attention.h's AttnProducts::Bf16Inputs): the inputs of every GEMM are rounded to
// bf16 (round to nearest even), the products are summed in fp32, and everything else stays fp32:
// the weights the optimizer updates (the master copy), the gradients, AdamW's moments, the
// activations between ops. This is the arithmetic of PyTorch's CPU autocast for nn.Linear, less
// its bf16 outputs (ours stay fp32, which only removes a rounding).
//
// Paths, by kernels/cpu/isa.h's choice (FTX_CPU_ISA forces one):
//   Amx          the tiles (gemm_amx.h): packing rounds the operands, TDPBF16PS sums in fp32.
//   Avx512Bf16   on AMD (Zen 4 and later), the same packing multiplied by VDPBF16PS (gemm_bf16_vdp,
//                gemm_amx.h), which there issues at the rate of fp32 FMA with twice its
//                multiply-adds: on a Zen 5 1.2-2.3x sgemm's GFLOP/s, a bf16 training step of the
//                small preset 1.03-1.47x (median 1.23x) this path's next one (docs/performance.md,
//                thirteenth pass).
//                On Intel VDPBF16PS issues at half that rate (Emerald Rapids: 62 G against 123 G
//                multiply-adds a second per core), so there this path is the next one.
//                FTX_BF16_GEMM=vdp|sgemm overrides the vendor's choice (isa.h).
//   every other  the operands rounded to bf16 into per-thread scratch, then OpenBLAS sgemm: a
//                product of two bf16 numbers is exact in fp32, so this is the same arithmetic up
//                to the order of the fp32 sums. It is the reference the Amx and VDPBF16PS engines
//                are tested against, and no faster than fp32.
//
// Numerics against the fp32 GEMM: each term moves by at most 2^-8 relative (both inputs rounded),
// so |error| <= about 2^-8 * sum_k |a_k b_k|; subnormal inputs count as zero on the Amx path.
// Deliberately not here: bf16 weights (gemm_bf16w, inference), bf16 activations or gradients kept
// between ops (a memory saving that changes every op's signature).
#pragma once

namespace ftx::cpu {

// C (M, N) (+)= op(A) (M, K) @ op(B) (K, N), row-major with explicit leading dimensions, the
// inputs rounded to bf16 as above.
void gemm_bf16_inputs(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                      float* C, int ldc, bool accumulate);

// The Linear layer's products, as matmul_forward / matmul_backward (ops_matmul.h) with the inputs
// rounded: out (N, OC) (+)= inp (N, IC) @ w^T; dinp (N, IC) (+)= dout @ w (skipped when null);
// dw (OC, IC) += dout^T @ inp (skipped when null).
void matmul_forward_bf16(float* out, const float* inp, const float* w, int N, int IC, int OC, bool accumulate);
void matmul_backward_bf16(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int IC,
                          int OC, bool accumulate_dinp);

// Whether this process takes the Amx path above.
bool bf16_inputs_on_tiles();
// Whether it multiplies on VDPBF16PS (the Avx512Bf16 path where vdpbf16ps_beats_sgemm(), isa.h).
bool bf16_inputs_on_vdp();
// The engine in words, for `ftx train`'s start, `ftx bench train`'s report and the studio: the AMX
// tiles, VDPBF16PS, or the rounding path (bf16's numerics without its speed).
const char* bf16_inputs_engine();

}  // namespace ftx::cpu
