// The CUDA backend's kernels that live in their own .cu files, as launchers on a stream. Each has
// exactly the semantics of the Backend op of the same name (kernels/backend.h), which the CPU
// backend defines (kernels/cpu/ops_*.h); test_backend_ops checks them against it.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_common.h"

namespace ftx::cuda {

// ---- ops.cu: elementwise ops, reductions, embedding, RMSNorm, RoPE (sign -1: the backward),
// SwiGLU, cross-entropy, clipping, AdamW, bf16 rounding; each as the Backend op of its name ---
constexpr unsigned kReduceBlocks = 256;  // sum_squares_partials: one double per block
void fill(float* x, float v, size_t n, cudaStream_t st);
void add(float* out, const float* a, const float* b, size_t n, cudaStream_t st);
void add_inplace(float* acc, const float* x, size_t n, cudaStream_t st);
void scale(float* x, float s, size_t n, cudaStream_t st);
void sum_squares_partials(double* partial, const float* x, size_t n, cudaStream_t st);  // (kReduceBlocks)
void broadcast_rows(float* out, const float* v, int N, int C, cudaStream_t st);
void sum_rows(float* dv, const float* dout, int N, int C, cudaStream_t st);
void route_stats_forward(float* st_ch, float* ma, const float* dx, const float* dx_hat, int B, int T, int C, int W,
                         cudaStream_t st);
void route_stats_backward(float* d_dx, float* d_dx_hat, const float* d_st_ch, const float* dx, const float* dx_hat,
                          int N, int C, cudaStream_t st);
void route_gate_forward(float* g, const float* st_ch, const float* ma, const float* params, int N, cudaStream_t st);
void route_gate_backward(float* d_st_ch, float* dparams, const float* dg, const float* st_ch, const float* ma,
                         const float* params, int N, cudaStream_t st);
constexpr int kTopkMaxT = 48 * 1024;  // topk_rows: a byte of shared memory per position
void topk_rows(int32_t* pos, int32_t* rows, const float* score, int B, int T, int k, cudaStream_t st);
void route_mask(int32_t* mask, const int32_t* rows, int N, int M, cudaStream_t st);
// route_scatter_*: out (dx) already holds x (dout); only the selected rows are touched.
void route_scatter_forward(float* out, const float* y, const float* g, const int32_t* rows, int M, int C,
                           cudaStream_t st);
void route_scatter_backward(float* dx, float* dy, float* dg, const float* x, const float* y, const float* g,
                            const int32_t* rows, int M, int C, cudaStream_t st);
void embedding_forward(float* out, const int32_t* tok, const float* wte, int N, int C, cudaStream_t st);
void embedding_forward(float* out, const int32_t* tok, const __nv_bfloat16* wte, int N, int C, cudaStream_t st);
void embedding_backward(float* dwte, const float* dout, const int32_t* tok, int N, int C, cudaStream_t st);
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps, cudaStream_t st);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd, int N,
                      int C, cudaStream_t st);
// pos (B, T) null: token (b, t) at pos0 + t.
void rope(float* x, int B, int T, int nh, int HS, int pos0, const int32_t* pos, const float* inv_freq, double sign,
          cudaStream_t st);
void swiglu_forward(float* out, const float* gate, const float* up, size_t n, cudaStream_t st);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n,
                     cudaStream_t st);
void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V, cudaStream_t st);
void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int N, int V, float scale,
                           cudaStream_t st);
// *norm = ||g||, then g *= max_norm / norm when max_norm > 0 and the norm exceeds it; partial
// (kReduceBlocks doubles) and factor (1 float) are scratch in device memory.
void clip_grad_norm(float* g, size_t n, float max_norm, float* norm, double* partial, float* factor, cudaStream_t st);
// AdamW over the segments in `table` (device memory, sorted, disjoint; end = the last one's end);
// mirror (nullable) gets the new parameters in bf16.
void adamw(float* param, const float* grad, float* m, float* v, __nv_bfloat16* mirror, const AdamWSegment* table,
           int n_segments, size_t end, Dyn<float> lr, float beta1, float beta2, float eps, Dyn<float> inv_bc1,
           Dyn<float> inv_bc2, cudaStream_t st);
void to_bf16(__nv_bfloat16* out, const float* x, size_t n, cudaStream_t st);

// ---- attention.cu: flash-style, the probabilities are never stored ----------------------------
// saved: log-sum-exp of the scaled scores per query row, (B, NH, Tq). A row with no visible key
// (cannot happen for causal with q_pos0 >= 0) would be a bug.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, const AttnShape& s,
                       cudaStream_t st);
// dq, dk, dv overwritten; dk/dv (B, Tk, NKV, HS). `out` is the forward's output (for
// D_i = <dout_i, out_i>). Scratch from the caller: none; dk/dv accumulate across the query heads of
// a GQA group inside the kernel.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const float* q, const float* k, const float* v, const AttnShape& s, cudaStream_t st);

// ---- attention_tc.cu: the same ops on bf16 tensor cores (MatmulPrecision::Bf16), same saved
// log-sum-exp; for head sizes 32, 64, 128 and at least 16 query rows (else attention.cu).
bool attention_tc_supports(const AttnShape& s);
void attention_tc_forward(float* out, float* lse, const float* q, const float* k, const float* v, const AttnShape& s,
                          cudaStream_t st);
void attention_tc_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                           const float* q, const float* k, const float* v, const AttnShape& s, cudaStream_t st);

// ---- latent.cu: the binary mapper, the post-sampler gather, the KL with free bits --------------
void binary_mapper_forward(uint32_t* codes, float* p, const float* logits, int N, int H, Dyn<uint64_t> seed,
                           Dyn<uint64_t> stream, cudaStream_t st);
// Column-major C (m x n) = A (m x k, ld lda) B (k x n, ld ldb), no transposes, C overwritten: the
// backend's GEMM at its precision, on `st`.
using TileGemm =
    std::function<void(int m, int n, int k, const float* A, int lda, const float* B, int ldb, float* C, int ldc)>;
// Tiled over codes: never holds N x 2^H.
void binary_mapper_backward(float* dlogits, const float* dR, const float* W, const float* p, int N, int C, int H,
                            const TileGemm& gemm, cudaStream_t st);
void post_sampler_forward(float* R, const uint32_t* codes, const float* W, int N, int C, int H, cudaStream_t st);
void post_sampler_backward(float* dW, const float* dR, const uint32_t* codes, int N, int C, int H, cudaStream_t st);
void kl_forward(float* kl, const float* p, int N, int H, cudaStream_t st);
void kl_batch_mean(float* mean_kl, const float* kl, int B, int T, cudaStream_t st);
void kl_backward(float* dlogits, const float* p, const float* gate, int period, int N, int H, Dyn<float> kappa,
                 float scale, cudaStream_t st);

}  // namespace ftx::cuda
