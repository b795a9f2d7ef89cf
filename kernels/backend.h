// The op interface every compute backend implements (docs/design.md section 10). Forward and backward are
// separate ops. Pointers are device pointers of the backend that owns them; shapes in PyTorch order
// (kernels/shapes.h). fp32 throughout for training; the weight of a matmul or an embedding gather
// may also be bf16 (WeightRef, kernels/base/dtype.h), for inference on weights as a checkpoint stores
// them. Parameter gradients accumulate (+=); activation gradients overwrite (=) unless the op says
// otherwise. kernels/ knows nothing of models: the ops
// are generic layers, the model composes them in core/model.
//
// Deliberately not here: autograd, allocation inside ops, model-specific fusion.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "kernels/base/dtype.h"
#include "kernels/base/result.h"
#include "kernels/shapes.h"

namespace ftx {

enum class DeviceKind { Cpu, Cuda };

// Input precision of the GEMMs (matmul_forward / matmul_backward); accumulation is fp32 always.
//   Fp32: full fp32 products (the CPU backend; on CUDA the slow exact reference).
//   Tf32: tensor cores with 10-bit mantissa inputs (the CUDA default for fp32 training).
//   Bf16: tensor cores on bf16 inputs (8-bit mantissa): activations are rounded when a GEMM reads
//         them (once for a run of GEMMs on the same input), weights come from a bf16 copy the
//         backend keeps of every buffer given to track_weights.
enum class MatmulPrecision { Fp32, Tf32, Bf16 };
const char* matmul_precision_name(MatmulPrecision p);
// "fp32", "tf32" or "bf16"; an error naming the three for anything else.
Result<MatmulPrecision> parse_matmul_precision(const std::string& name);

// "1073741824 bytes (1.0 GiB)": how allocation errors name a size.
inline std::string bytes_text(size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%zu bytes (%.1f GiB)", bytes, double(bytes) / double(size_t(1) << 30));
  return buf;
}

// One tensor of a fused AdamW update: elements [offset, offset + numel) of the flat buffers.
struct AdamWSegment {
  size_t offset = 0, numel = 0;
  float weight_decay = 0.0f;
};
// The per-step hyperparameters; t counts steps from 1 (bias correction).
struct AdamWStep {
  float lr = 0.0f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  int t = 1;
};

// Geometry of one attention call. q: (B, Tq, NH, HS); k, v: (B, Tk_cap, NKV, HS) of which the
// first Tk rows per sequence are used; out: (B, Tq, NH, HS); att: (B, NH, Tq, Tk) probabilities.
// Query i sits at absolute position q_pos0 + i; keys at 0..Tk-1. Causal: key j visible to query i
// iff j <= q_pos0 + i. GQA: query head h reads kv head h / (NH / NKV). Scale 1/sqrt(HS).
struct AttnShape {
  int B = 0, NH = 0, NKV = 0, HS = 0;
  int Tq = 0, Tk = 0, Tk_cap = 0;
  int q_pos0 = 0;
  bool causal = true;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual DeviceKind kind() const = 0;

  // ---- memory ----------------------------------------------------------------------------
  // Zero-filled. alloc aborts when the memory is not there (for sizes a bug would get wrong);
  // try_alloc says so in an error that names the backend and the bytes (for sizes a user chose).
  virtual void* alloc(size_t bytes) = 0;
  virtual Result<void*> try_alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // rows rows of row_bytes each, from src (rows src_pitch bytes apart) to dst (dst_pitch apart):
  // one call where a loop of copy() would be one launch per row (the KV cache append).
  virtual void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                         size_t rows) = 0;
  virtual void fill(float* x, float value, size_t n) = 0;
  virtual void synchronize() = 0;

  // ---- elementwise / reductions -------------------------------------------------------------
  virtual void add(float* out, const float* a, const float* b, size_t n) = 0;  // out = a + b
  virtual void add_inplace(float* acc, const float* x, size_t n) = 0;          // acc += x
  virtual void scale(float* x, float s, size_t n) = 0;                         // x *= s
  virtual double sum_squares(const float* x, size_t n) = 0;                    // sum x^2 (double acc)
  virtual void broadcast_rows(float* out, const float* v, int N, int C) = 0;   // out[n,:] = v  (N,C)
  virtual void sum_rows(float* dv, const float* dout, int N, int C) = 0;       // dv += sum_n dout[n,:]

  // ---- the surprise gate of a routed block (docs/subjective_depth.md) -------------------------
  // Two steps, so that the moving average's stop gradient is part of the contract. Statistics,
  // per token n of (B, T), from the block's change dx (N, C) and its prediction dx_hat (N, C):
  // st_ch (2N) = d_st = |dx_n|^2 / C, then d_ch = |dx_n - dx_hat_n|^2 / C; ma (N) = the mean of
  // d_st over positions t-W+1..t of its sequence (those that exist), which takes no gradient.
  virtual void route_stats_forward(float* st_ch, float* ma, const float* dx, const float* dx_hat, int B, int T, int C,
                                   int W) = 0;
  // d_dx, d_dx_hat (N, C) overwritten from d_st_ch (2N).
  virtual void route_stats_backward(float* d_dx, float* d_dx_hat, const float* d_st_ch, const float* dx,
                                    const float* dx_hat, int N, int C) = 0;
  // The gate: CE = d_st - d_ch + log o_ce, CU = d_st - m_cu ma, g = a + c - a c with a =
  // sigmoid(beta_ce CE), c = sigmoid(beta_cu CU); (o_ce, m_cu, beta_ce, beta_cu) = softplus(params (4)).
  virtual void route_gate_forward(float* g, const float* st_ch, const float* ma, const float* params, int N) = 0;
  // d_st_ch (2N) overwritten, dparams (4) accumulated (summed over tokens in double).
  virtual void route_gate_backward(float* d_st_ch, float* dparams, const float* dg, const float* st_ch, const float* ma,
                                   const float* params, int N) = 0;

  // ---- top-k per sequence: a routed block's selection (docs/subjective_depth.md) ------------
  // For each row b of score (B, T), the positions of its k largest values, ties to the earlier
  // position, in increasing position order: pos (B, k), and the same tokens as rows of the (B*T)
  // token matrix, rows[b*k + i] = b*T + pos[b*k + i] (what the embedding ops gather and scatter
  // by). 0 <= k <= T; scores are finite.
  virtual void topk_rows(int32_t* pos, int32_t* rows, const float* score, int B, int T, int k) = 0;
  // mask (N) = 0, then mask[rows[i]] = 1 for i < M: which tokens a selection holds, as class
  // indices (the student router's targets).
  virtual void route_mask(int32_t* mask, const int32_t* rows, int N, int M) = 0;

  // ---- the routed block's write-back: its selected tokens' rows take the gated change --------
  // out (N, C) = x, then row r = rows[i] (i < M, distinct rows) = g[r] y[i] + (1 - g[r]) x[r], where
  // y (M, C) is the block's output on the gathered selection (gathering is embedding_forward on
  // an fp32 table) and g (N) the gate per token: with g = 1 the row is y[i] bit for bit. out may
  // alias x.
  virtual void route_scatter_forward(float* out, const float* x, const float* y, const float* g, const int32_t* rows,
                                     int N, int M, int C) = 0;
  // dx (N, C) = dout with the selected rows scaled by 1 - g (dx may alias dout); dy (M, C) =
  // g dout at the selected rows (overwritten); dg (N) += <dout[r], y[i] - x[r]> at the selected rows.
  virtual void route_scatter_backward(float* dx, float* dy, float* dg, const float* dout, const float* x,
                                      const float* y, const float* g, const int32_t* rows, int N, int M, int C) = 0;

  // ---- embedding: out[n,:] = wte[tok[n],:]; backward scatter-adds into dwte -----------------
  // wte (V, C) of any dtype (widened exactly to fp32); the backward is fp32 only.
  virtual void embedding_forward(float* out, const int32_t* tok, WeightRef wte, int N, int C) = 0;
  virtual void embedding_backward(float* dwte, const float* dout, const int32_t* tok, int N, int C) = 0;

  // ---- RMSNorm: out = w * x / sqrt(mean(x^2) + eps); rstd (N) saved for backward ------------
  virtual void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) = 0;
  // dx += ..., dw += ...
  virtual void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                                const float* rstd, int N, int C) = 0;

  // ---- matmul: out (N,OC) = inp (N,IC) @ w^T, w (OC,IC). accumulate: out += instead of = ------
  // w is fp32 or bf16; products of a bf16 weight accumulate in fp32 (the input is rounded to bf16
  // too on CUDA, at any MatmulPrecision, and on the CPU's avx512bf16 path; the CPU's avx2 and
  // generic paths keep it fp32: kernels/cpu/gemm_bf16.h, FTX_CPU_ISA).
  virtual void matmul_forward(float* out, const float* inp, WeightRef w, int N, int IC, int OC, bool accumulate) = 0;
  // dinp (N,IC) = dout @ w (or += when accumulate_dinp; skipped when dinp is null);
  // dw (OC,IC) += dout^T @ inp (skipped when dw is null). A bf16 weight is frozen (inference, or a
  // layer that is not trained): dw must be null, only dinp is computed.
  virtual void matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, WeightRef w, int N, int IC,
                               int OC, bool accumulate_dinp) = 0;

  // ---- RoPE, Hugging Face half rotation, in place on x (B, T, nh, HS), positions pos0..pos0+T-1.
  // Dim i pairs with i + HS/2 and turns by (pos * inv_freq[i]); inv_freq (HS/2) is in backend
  // memory (theta^(-2i/HS), scaled for long contexts: ModelConfig's rope_inv_freq). Backward applies
  // the inverse rotation.
  virtual void rope_forward(float* x, int B, int T, int nh, int HS, int pos0, const float* inv_freq) = 0;
  virtual void rope_backward(float* dx, int B, int T, int nh, int HS, int pos0, const float* inv_freq) = 0;

  // The same rotations with token (b, t) at position pos[b * T + t] (pos (B, T) int32 in backend
  // memory): the tokens a routed block gathered keep their places in the sequence.
  virtual void rope_forward_at(float* x, const int32_t* pos, int B, int T, int nh, int HS, const float* inv_freq) = 0;
  virtual void rope_backward_at(float* dx, const int32_t* pos, int B, int T, int nh, int HS, const float* inv_freq) = 0;

  // ---- attention (see AttnShape) ---------------------------------------------------------------
  // `saved` is what the backward needs besides q, k, v and out; its size is backend-specific
  // (attention_saved_floats): the CPU keeps the probabilities (B, NH, Tq, Tk), the CUDA backend
  // only the log-sum-exp per query row (B, NH, Tq) and recomputes the probabilities (flash style),
  // so long sequences never hold T x T per head.
  virtual size_t attention_saved_floats(const AttnShape& s) const = 0;
  virtual void attention_forward(float* out, float* saved, const float* q, const float* k, const float* v,
                                 const AttnShape& s) = 0;
  // dq, dk, dv overwritten (dk/dv shaped like k/v with Tk_cap == Tk). out is the forward's output.
  virtual void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                  const float* saved, const float* q, const float* k, const float* v,
                                  const AttnShape& s) = 0;

  // ---- SwiGLU: out (N,F) = silu(gate) * up -----------------------------------------------------
  virtual void swiglu_forward(float* out, const float* gate, const float* up, size_t n) = 0;
  // dgate, dup overwritten; they may be gate and up (in place).
  virtual void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                               size_t n) = 0;

  // ---- cross-entropy over V classes: losses[n] = -log softmax(logits[n])[targets[n]] ---------
  virtual void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V) = 0;
  // dlogits (N,V) = scale * (softmax(logits) - onehot(target)); may alias logits (in place).
  virtual void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int N, int V,
                                     float scale) = 0;

  // ---- binary mapper (docs/design.md section 3) ------------------------------------------------------
  // p = sigmoid(logits) (N,H); bit h of row n is set iff philox_uniform(seed, stream, n*H+h) < p;
  // codes[n] = sum_h bit_h << h (bit h is the h-th least significant).
  virtual void binary_mapper_forward(uint32_t* codes, float* p, const float* logits, int N, int H, uint64_t seed,
                                     uint64_t stream) = 0;
  // Pass-through gradient through G (probability of every code d), never only the sampled code:
  //   dG[n,d] = <dR[n,:], W[:,d]>, a[n,d] = dG[n,d] * G[n,d],
  //   dlogits[n,h] += sum_d a[n,d] * (U_h(d) - p[n,h])      (chain through p = sigmoid(logits))
  // W is the post-sampler (C, 2^H) in nn.Linear layout. Tiled over codes: never holds N x 2^H.
  virtual void binary_mapper_backward(float* dlogits, const float* dR, const float* W, const float* p, int N, int C,
                                      int H) = 0;
  // Post-sampler: R[n,:] = W[:, codes[n]] (a gather). Backward: dW[:, codes[n]] += dR[n,:].
  virtual void post_sampler_forward(float* R, const uint32_t* codes, const float* W, int N, int C, int H) = 0;
  virtual void post_sampler_backward(float* dW, const float* dR, const uint32_t* codes, int N, int C, int H) = 0;
  // KL_n = sum_h (log 2 - Hb(p[n,h])) in nats (closed form of KL(Q(Z_n) || uniform)).
  virtual void kl_forward(float* kl, const float* p, int N, int H) = 0;
  // KL averaged over the batch at each position: mean_kl[t] = (1/B) sum_b kl[b*T + t], in double
  // (the batch-mean free bits' gate; core/model/model.h, FreeBitsForm).
  virtual void kl_batch_mean(float* mean_kl, const float* kl, int B, int T) = 0;
  // Free bits' gradient. Row n is penalised when its gate value gate[n % period] exceeds kappa; then
  // dlogits[n,h] += scale * dKL_n/dlogit = scale * p(1-p) * log(p/(1-p)). Rows at or under kappa add
  // nothing. Per pair: gate = kl, period = N (loss += scale sum_n max(0, KL_n - kappa)). Batch mean:
  // gate = kl_batch_mean (T), period = T (loss += scale B sum_t max(0, mean_b KL[b,t] - kappa)).
  virtual void kl_backward(float* dlogits, const float* p, const float* gate, int period, int N, int H, float kappa,
                           float scale) = 0;

  // ---- optimizer -----------------------------------------------------------------------------
  // Gradient clipping without a host round trip: *norm (one float in backend memory) = ||g||_2
  // (accumulated in double); when max_norm > 0 and the norm exceeds it, g *= max_norm / norm.
  virtual void clip_grad_norm(float* g, size_t n, float max_norm, float* norm) = 0;
  // AdamW, bias-corrected, decoupled weight decay (lr * wd * param), over every segment of the
  // flat buffers param / grad / m / v in one call (one kernel on CUDA).
  virtual void adamw_update(float* param, const float* grad, float* m, float* v, const AdamWSegment* segments,
                            int n_segments, const AdamWStep& step) = 0;

  // ---- precision and step graphs (both optional: the defaults are what the CPU does) ------------
  // An error with the reason when this backend cannot compute GEMMs at that precision.
  virtual Status set_matmul_precision(MatmulPrecision p);
  virtual MatmulPrecision matmul_precision() const { return MatmulPrecision::Fp32; }
  // Buffers whose contents are weights read by GEMMs (the model's parameters). At Bf16 the
  // backend keeps a bf16 copy and refreshes it after any op that writes into the buffer.
  virtual void track_weights(const float* base, size_t n) { (void)base, (void)n; }
  // The ops between begin_graph() and end_graph() form one unit that a backend may record once
  // and replay (CUDA graphs) instead of launching op by op: a training step. Scalar arguments may
  // change from one replay to the next; when buffers or shapes change the backend records again.
  // In between: no upload, download, sum_squares, alloc or release. The CPU runs ops as they come.
  virtual void begin_graph() {}
  virtual void end_graph() {}
  struct GraphStats {
    int captures = 0, replays = 0;  // graphs recorded, graphs replayed unchanged
    int64_t roundings = 0;          // bf16 roundings of GEMM inputs other than weights (a replay adds none)
  };
  virtual GraphStats graph_stats() const { return {}; }
};

// The CPU backend (kernels/cpu), always available.
std::unique_ptr<Backend> make_cpu_backend();

// The CUDA backend (kernels/cuda) on GPU `device`; an error with the reason when this build has no
// CUDA backend, no GPU is present, or the device cannot be used.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device);
// Whether this build compiled kernels/cuda (nvcc was found at configure time).
bool cuda_backend_built();
// "cpu", "cuda" (GPU 0) or "cuda:N"; an error with the reason (unknown name, no CUDA build, no
// such GPU).
Result<std::unique_ptr<Backend>> make_backend_for(const std::string& device);

}  // namespace ftx
