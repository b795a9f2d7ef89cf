// The CUDA backend's kernels that live in their own .cu files, as launchers on a stream. Each has
// exactly the semantics of the Backend op of the same name (kernels/backend.h), which the CPU
// backend defines (kernels/cpu/ops_*.h); test_backend_ops checks them against it.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_common.h"

namespace ftx::cuda {

// ---- attention.cu: flash-style, the probabilities are never stored ----------------------------
// saved: log-sum-exp of the scaled scores per query row, (B, NH, Tq). A row with no visible key
// (cannot happen for causal with q_pos0 >= 0) would be a bug.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttnShape& s, cudaStream_t st);
// dq, dk, dv overwritten; dk/dv (B, Tk, NKV, HS). `out` is the forward's output (for
// D_i = <dout_i, out_i>). Scratch from the caller: none; dk/dv accumulate across the query heads of
// a GQA group inside the kernel.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const AttnShape& s, cudaStream_t st);

// ---- attention_tc.cu: the same ops on bf16 tensor cores (MatmulPrecision::Bf16), same saved
// log-sum-exp; for head sizes 32, 64, 128 and at least 16 query rows (else attention.cu).
bool attention_tc_supports(const AttnShape& s);
void attention_tc_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                          const AttnShape& s, cudaStream_t st);
void attention_tc_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                           const float* lse, const float* q, const float* k, const float* v,
                           const AttnShape& s, cudaStream_t st);

// ---- latent.cu: the binary mapper, the post-sampler gather, the KL with free bits --------------
void binary_mapper_forward(uint32_t* codes, float* p, const float* logits, int N, int H, Dyn<uint64_t> seed,
                           Dyn<uint64_t> stream, cudaStream_t st);
// Column-major C (m x n) = A (m x k, ld lda) B (k x n, ld ldb), no transposes, C overwritten: the
// backend's GEMM at its precision, on `st`.
using TileGemm = std::function<void(int m, int n, int k, const float* A, int lda, const float* B, int ldb,
                                    float* C, int ldc)>;
// Tiled over codes: never holds N x 2^H.
void binary_mapper_backward(float* dlogits, const float* dR, const float* W, const float* p, int N, int C,
                            int H, const TileGemm& gemm, cudaStream_t st);
void post_sampler_forward(float* R, const uint32_t* codes, const float* W, int N, int C, int H, cudaStream_t st);
void post_sampler_backward(float* dW, const float* dR, const uint32_t* codes, int N, int C, int H,
                           cudaStream_t st);
void kl_forward(float* kl, const float* p, int N, int H, cudaStream_t st);
void kl_backward(float* dlogits, const float* p, const float* kl, int N, int H, Dyn<float> kappa, float scale,
                 cudaStream_t st);

}  // namespace ftx::cuda
