// The Free Transformer (docs/design.md sections 3 and 5) and, with latent_bits == 0, the
// plain decoder, as explicit forward and backward passes over Backend ops (docs/design.md section 2).
// Parameters and gradients live in one arena each on the backend; activations for one (B, T) live
// in a ModelState sized once; the KV cache for generation lives in a DecodeState. Every tensor's
// place is resolved once when the model is made (core/model/weights.h), never by name per step.
// An inference-only model (create_inference) reads its GEMM weights where a caller keeps them, in
// their own dtype (bf16 from a mapped checkpoint), and has no gradients.
//
// Deliberately not here: the optimizer (core/train), sampling policies (core/sample), file I/O.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/model/config.h"
#include "core/model/model_state.h"
#include "core/model/params.h"
#include "core/model/weights.h"
#include "kernels/backend.h"

namespace ftx {

struct InitConfig {
  float std = 0.02f;               // normal init of every matrix
  bool scale_residual = true;      // o_proj and down_proj std / sqrt(2 L)
  float post_sampler_std = 0.02f;  // free.post_sampler.weight
  // Bit-linear post-sampler: column d = sum_h (2 U_h(d) - 1) v_h with v_h ~ N(0, std^2), so Z
  // reaches the decoder as a sum of one direction per bit (training is free to leave that form).
  bool post_sampler_bitlinear = true;
  float zeta_std = 1.0f;  // free.zeta (goes through RMSNorm: only its direction matters)
};

struct StepStats {
  double ce = 0;         // mean cross-entropy over B*T predictions (nats)
  double kl = 0;         // mean KL_t over B*T positions (nats)
  double kl_excess = 0;  // the free-bits term of the loss under the forward's form (core/model/free_bits.h)
  double route = 0;      // routed models: the routers' own terms (the prior's error, STT's gate penalty)
  double loss = 0;       // ce + kl_excess + route
};

class Model {
 public:
  Model(Backend& backend, const ModelConfig& config);  // aborts when the weights do not fit (tests, tools)
  // The model with its weights allocated, or which backend lacks the memory for them (how ftx,
  // the studio and the trainer make models: a checkpoint too big for the GPU is an error, not a crash).
  static Result<std::unique_ptr<Model>> create(Backend& backend, const ModelConfig& config);
  // An inference-only model on tensors that `source` gives for each row of param_specs(config):
  // host memory, row-major in the spec's shape, fp32 or bf16. GEMM weights (ParamSpec::gemm_weight)
  // stay in their dtype: used in place on the CPU backend (no copy; the memory must outlive the
  // model), uploaded as they are to any other. The rest is widened to fp32 in the model's own
  // arena. Errors: a tensor not given, or no device memory for the model.
  using TensorSource = std::function<WeightRef(const ParamSpec&)>;
  static Result<std::unique_ptr<Model>> create_inference(Backend& backend, const ModelConfig& config,
                                                         const TensorSource& source);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return cfg_; }
  // Whether a training step can be recorded once as a device graph and replayed: not when routers
  // choose per token on the host (threshold mode), which changes the step's shapes.
  bool step_graphable() const { return cfg_.routing.mode != RouteMode::Threshold; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  Backend& backend() { return be_; }
  int64_t num_params() const { return n_params_; }
  bool inference_only() const { return inference_; }
  // Where each row of specs() is on the backend, in the dtype that row names.
  const std::vector<WeightRef>& tensors() const { return refs_; }
  // The fp32 arena (num_params) on the backend, in specs() order; not for an inference-only model.
  float* params();
  // Gradients (num_params) on the backend, allocated on first use (inference never needs them);
  // allocate_grads() returns an error instead of aborting when the memory is not there. Not for an
  // inference-only model.
  float* grads();
  Status allocate_grads();

  void init_weights(uint64_t seed, const InitConfig& init);
  void load_params(const float* host);  // (num_params) host, arena order of specs()
  void save_params(float* host) const;
  void zero_grad();

  std::unique_ptr<ModelState> make_state(int B, int T);
  // Bytes make_state(B, T) allocates (for memory checks before anything is allocated).
  static int64_t state_bytes(const ModelConfig& cfg, int B, int T);
  // Runs the whole model on inputs (B, T) (host int32). targets (B, T) may be null: no CE then.
  // Latent: when codes (B, T) (host) are given they are used as Z (prior, fixed or edited codes);
  // otherwise Z is sampled from the encoder with Philox (seed, stream). The encoder always runs
  // for a Free Transformer, so KL and the pass-through gradient exist in both cases.
  // kappa_nats and form make the free-bits term (core/model/free_bits.h); with kappa 0 both forms
  // are the mean KL.
  StepStats forward(ModelState& s, const int32_t* inputs, const int32_t* targets, const uint32_t* codes, uint64_t seed,
                    uint64_t stream, float kappa_nats, FreeBitsForm form = FreeBitsForm::BatchMean);
  // forward() in its three parts, for a caller that wraps the device work in a step graph
  // (Backend::begin_graph): forward_ops neither uploads nor downloads unless codes are given.
  // upload_batch also uploads random routing's draws for (seed, stream), the forward's.
  void upload_batch(ModelState& s, const int32_t* inputs, const int32_t* targets, uint64_t seed = 0,
                    uint64_t stream = 0);
  void forward_ops(ModelState& s, const uint32_t* codes, uint64_t seed, uint64_t stream, float kappa_nats,
                   FreeBitsForm form = FreeBitsForm::BatchMean);
  StepStats read_stats(const ModelState& s) const;  // mean CE and KL of the last forward_ops
  // Accumulates d(loss)/d(params) into grads() for the last forward of s (which needs targets).
  // block_done(l), when given, is called as soon as block l's parameters ("model.layers.l.*")
  // hold their final gradient, last block first: a data-parallel step starts summing them then.
  void backward(ModelState& s, const std::function<void(int layer)>& block_done = nullptr);

  // Host copies of the last forward's results.
  void read_codes(const ModelState& s, uint32_t* host) const;       // (B, T)
  void read_bit_probs(const ModelState& s, float* host) const;      // (B, T, H)
  void read_kl(const ModelState& s, float* host) const;             // (B, T) nats
  void read_kl_batch_mean(const ModelState& s, float* host) const;  // (T) nats: mean over the batch
  // Replaces the batch means the backward uses (T): a data-parallel job's mean over the global batch.
  void write_kl_batch_mean(ModelState& s, const float* host);
  void read_token_losses(const ModelState& s, float* host) const;  // (B, T) -log p(target)
  void read_logits(const ModelState& s, float* host) const;        // (B, T, V)
  // A routed block's choice in the last forward (docs/subjective_depth.md): for each sequence the
  // positions it computed, in time order (k = config().route_k(T) of them under top-k, any number
  // under a per-token choice), and the gate of every token, computed or not (B, T): 1 for random
  // routing and a hard gate, MoD's raw score, the surprise gate, and on STT's student path (no
  // teacher) the student's probability.
  std::vector<std::vector<int32_t>> read_route_choice(const ModelState& s, int layer) const;
  void read_route_gate(const ModelState& s, int layer, float* host) const;
  // MoD, SDT and STT: the student router's probability of computing each token (B, T), read after
  // either path's forward (the student runs in both).
  void read_route_student(const ModelState& s, int layer, float* host) const;
  // SDT and STT: the surprise statistics of every token, (3, B, T): D_st, D_ch and the moving
  // average of D_st; and the gate's four parameters (before softplus): o_ce, m_cu, beta_ce, beta_cu.
  void read_route_surprise(const ModelState& s, int layer, float* host) const;
  std::array<float, 4> read_route_gate_params(int layer) const;

  // Generation with a KV cache (docs/design.md section 7). A DecodeState holds B sequences of up to
  // max_len positions; each sequence is at its own length, so prompts of different lengths share
  // one batch. make_decode_state aborts when the memory is not there; try_make_decode_state says so.
  // A routed model's state runs the student path (causal, cached), or with teacher = true the
  // teacher's (not causal under top-k: each step recomputes the whole sequence so far, no cache).
  std::unique_ptr<DecodeState> make_decode_state(int B, int max_len, bool teacher = false);
  Result<std::unique_ptr<DecodeState>> try_make_decode_state(int B, int max_len, bool teacher = false);
  static int64_t decode_state_bytes(const ModelConfig& cfg, int B, int max_len);
  // n tokens of sequence b at positions pos0..pos0+n-1 (a prompt), through GEMMs in chunks; codes
  // (n) = Z at those positions (ignored for the plain decoder). Logits to host: none, the last
  // position's (V), or every position's (n, V).
  enum class PrefillLogits { None, Last, All };
  void prefill(DecodeState& d, int b, const int32_t* tokens, const uint32_t* codes, int n, int pos0,
               PrefillLogits which, float* logits_host);
  // One token for each of the B sequences, sequence b at position pos[b]; codes (B) = Z there.
  // Writes next-token logits (B, V) to host.
  void decode_step(DecodeState& d, const int32_t* tokens, const uint32_t* codes, const int* pos, float* logits_host);
  // All B sequences at the same position.
  void decode_step(DecodeState& d, const int32_t* tokens, const uint32_t* codes, int pos, float* logits_host);
  // A routed model generates on the student path (causal; docs/subjective_depth.md): a routed
  // block's KV cache holds only the tokens its student chose, slot after slot. The positions of
  // sequence b that routed block `layer` has computed so far, one per cache slot in use.
  std::vector<int32_t> decode_route_positions(const DecodeState& d, int layer, int b) const;

 private:
  // One layer's KV cache: k and v (B, cap, NKV, HS) each.
  struct KvCache {
    float* k;
    float* v;
    int cap;
  };
  // Queries at positions pos0..pos0+T-1. Without a cache (training, pos0 = 0) attention reads this
  // call's own keys and values; with one, they are appended to the cache at pos0 first and
  // attention reads its rows 0..pos0+T-1 (generation).
  // pos (B, T) on the backend, when given, places each token instead (a routed block's selection).
  void block_forward(const BlockW& w, BlockActs& a, const float* q_in, const float* kv_in, float* out, int B, int T,
                     bool causal, int pos0 = 0, const KvCache* cache = nullptr, const int32_t* pos = nullptr);
  // One token per row, each at its own position (decode_step): row i is sequence seq[i] (null: i)
  // at position pos[i], its K and V written to cache slot slot[i] (null: pos[i]), attending slots
  // 0..slot[i]. Rows of one sequence come in time order.
  void block_decode(const BlockW& w, BlockActs& a, const float* q_in, const float* kv_in, float* out, int B,
                    const int* pos, const KvCache& cache, const int* seq = nullptr, const int* slot = nullptr);
  // A routed block l on n rows of generation on the student path: row i is sequence seq[i] at
  // position pos[i] (a decode step: one row per sequence; a prefill chunk: one sequence in time
  // order). x_before is the decision block's input (SDT). Chooses, computes the chosen rows into
  // the routed cache, writes out and advances the block's past.
  void route_decode(DecodeState& d, BlockActs& scratch, int l, const float* x, const float* x_before, float* out, int n,
                    const int* seq, const int* pos);
  // The teacher's path: appends n tokens of sequence b at pos0 to its history and writes the
  // logits of its last `rows` positions (0: none) from a forward over the whole history.
  void teacher_step(DecodeState& d, int b, const int32_t* tokens, const uint32_t* codes, int n, int pos0, int rows,
                    float* logits_host);
  void block_tail(const BlockW& w, BlockActs& a, const float* q_in, float* out, int N);
  // out (N, OC) = inp @ w^T + bias (bias null: none).
  void linear(float* out, const float* inp, WeightRef w, const float* bias, int N, int IC, int OC);
  const float* inject_latent(DecodeState& d, const float* x, const uint32_t* codes, int N);
  void block_backward(const BlockW& w, const BlockG& dw, BlockActs& a, const float* q_in, const float* kv_in,
                      const float* dout, float* dq_in, float* dkv_in, ModelState& s, bool causal, int B, int T,
                      const int32_t* pos = nullptr);
  // A routed block l (docs/subjective_depth.md): the router's scores and gate, top-k, the block on
  // the selection, the gated write-back into s.xs[l + 1]; and its backward, which leaves d(xs[l])
  // in s.dx (and, under SDT, the decision block's share in s.d_carry).
  void route_forward(ModelState& s, int l);
  void route_backward(ModelState& s, int l);
  void prior_forward(const RouteW& w, RouteActs& r, int N);
  void student_forward(const RouteW& w, RouteActs& r, const float* x, int B, int T, bool frozen);
  void lay_out_choice(RouteActs& r, int B, int T);
  double route_loss(const ModelState& s) const;                      // the routers' loss terms of the last forward
  void redraw_codes(ModelState& s, uint64_t seed, uint64_t stream);  // s.first_seq > 0 (model.cpp)
  void prior_backward(const RouteW& w, const RouteG& dw, RouteActs& r, ModelState& s, float* d_in);
  void init_bitlinear_post_sampler(std::vector<float>& host, uint64_t seed, float std) const;
  void set_tensors(std::vector<WeightRef> refs);
  Status take_tensors(const TensorSource& source);

  struct LayoutOnly {};
  Model(Backend& backend, const ModelConfig& config, LayoutOnly);      // specs and RoPE frequencies only
  Model(Backend& backend, const ModelConfig& config, std::nullptr_t);  // params_ null when out of memory

  Backend& be_;
  ModelConfig cfg_;
  std::vector<ParamSpec> specs_;
  int64_t n_params_ = 0;
  bool inference_ = false;
  float* params_ = nullptr;  // trainable: (num_params) in specs order; inference: the fp32 tensors only
  float* grads_ = nullptr;
  float* rope_freq_ = nullptr;   // (HS/2) rope_inv_freq(cfg_) on the backend
  void* uploaded_ = nullptr;     // inference off the host: the GEMM weights, in their dtypes
  std::vector<WeightRef> refs_;  // per spec
  ParamRefs w_;                  // resolved from refs_
  GradPtrs g_;                   // resolved from grads_ once allocated
};

}  // namespace ftx
