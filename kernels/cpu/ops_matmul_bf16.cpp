// Training's GEMMs with bf16 inputs (kernels/cpu/ops_matmul_bf16.h).
#include "kernels/cpu/ops_matmul_bf16.h"

#include <cstddef>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops_matmul.h"

namespace ftx::cpu {

bool bf16_inputs_on_tiles() { return cpu_isa() == CpuIsa::Amx; }

bool bf16_inputs_on_vdp() { return cpu_isa() == CpuIsa::Avx512Bf16 && vdpbf16ps_beats_sgemm(); }

const char* bf16_inputs_engine() {
  if (bf16_inputs_on_tiles()) return "the AMX tiles";
  if (bf16_inputs_on_vdp()) return "VDPBF16PS (AVX512_BF16) on packed bf16 operands";
  return "inputs rounded to bf16 in software, then sgemm (bf16's numerics, no faster than fp32)";
}

void gemm_bf16_inputs(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                      float* C, int ldc, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (bf16_inputs_on_tiles()) return gemm_bf16_amx(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
  if (bf16_inputs_on_vdp()) return gemm_bf16_vdp(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
  if (K <= 0) {  // sgemm with beta 0 clears C
    if (!accumulate)
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) C[size_t(m) * ldc + n] = 0.0f;
    return;
  }
  // op(A) is stored (M, K) or, transposed, (K, M); op(B) (K, N) or (N, K).
  const int a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  const float* ra = rounded_to_bf16<0>(A, a_rows, a_cols, lda);
  const float* rb = rounded_to_bf16<1>(B, b_rows, b_cols, ldb);
  gemm(trans_a, trans_b, M, N, K, 1.0f, ra, a_cols, rb, b_cols, accumulate ? 1.0f : 0.0f, C, ldc);
}

void matmul_forward_bf16(float* out, const float* inp, const float* w, int N, int IC, int OC, bool accumulate) {
  if (N <= 0 || OC <= 0) return;
  gemm_bf16_inputs(false, true, N, OC, IC, inp, IC, w, IC, out, OC, accumulate);
}

void matmul_backward_bf16(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int IC,
                          int OC, bool accumulate_dinp) {
  if (N <= 0 || IC <= 0) return;
  if (dinp) gemm_bf16_inputs(false, false, N, IC, OC, dout, OC, w, IC, dinp, IC, accumulate_dinp);
  if (dw && OC > 0) gemm_bf16_inputs(true, false, OC, IC, N, dout, OC, inp, IC, dw, IC, true);
}

}  // namespace ftx::cpu
