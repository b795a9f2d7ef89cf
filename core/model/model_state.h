// Activation and KV-cache buffers of the model, carved out of one backend allocation each.
// Only core/model reads these fields; others hold the objects and pass them back to Model.
#pragma once
#include <cstdint>
#include <vector>

#include "core/model/free_bits.h"
#include "kernels/backend.h"

namespace ftx {

// Activations of one block for one (B, T), kept for backward.
struct BlockActs {
  float* ln_q;     // (N, C) norm1(q_in)
  float* rstd_q;   // (N)
  float* ln_kv;    // (N, C) norm1(kv_in), or == ln_q when the block has one input
  float* rstd_kv;  // (N)
  float* q;        // (N, NH*HS) after RoPE
  float* k;        // (N, NKV*HS) after RoPE
  float* v;        // (N, NKV*HS)
  float* att;      // the attention's saved state (Backend::attention_saved_floats)
  float* atty;     // (N, NH*HS)
  float* a;        // (N, C) q_in + o_proj(atty)
  float* ln2;      // (N, C)
  float* rstd2;    // (N)
  float* gate;     // (N, F)
  float* up;       // (N, F)
  float* hmid;     // (N, F) silu(gate) * up
};

// Activations of one routed block (docs/subjective_depth.md) for one (B, T), kept for backward.
// The block runs on (B, k) gathered tokens: under top-k every sequence's k = route_k(T) chosen ones;
// when the choice is made per token (threshold mode, the student path) each sequence's own chosen
// tokens in time order, then, up to the largest count k in the batch, some of its skipped tokens.
// Those fillers come after every chosen token, so causal attention keeps them out of the chosen
// tokens' view, and their gate is 0, so they write nothing back.
struct RouteActs {
  int k = 0;                      // gathered tokens per sequence in the last forward (buffers hold up to T)
  bool per_token = false;         // the last forward chose per token (counts below), not top-k
  std::vector<uint8_t> chosen;    // per_token: (B, T) 1 where the token was computed (host)
  std::vector<int32_t> host_pos;  // per_token: (B, k) the gathered positions (host)
  float* g_app;                   // (N) per_token: the gate applied, 0 on skipped tokens (fillers included)
  int32_t* mask;                  // (N) the teacher's choice, 0/1: the student's targets
  float* st_in;                   // (N, 2C) [x_t, x_(t-1)] (zero before the first token): the student's input
  float* st_logits;               // (N, 2) the student's (skip, compute) logits
  float* st_loss;                 // (N) its cross-entropy against mask
  float* score;                   // (N) what top-k ranks: random draws, MoD's router output, or the gate (SDT, STT)
  float* g;                       // == score: the learned gate (MoD's score, SDT/STT's surprise gate); random
                                  // routing and a hard gate scale by ModelState::ones instead
  int32_t* pos;                   // (B, k) the selected positions, in time order
  int32_t* rows;                  // (B k) their rows in the (B T) token matrix
  float* x_sel;                   // (B k, C) the block's inputs, gathered
  float* y_sel;                   // (B k, C) the block's outputs on them
  BlockActs sel;                  // the block on the selection
  // SDT and STT: the surprise of a change against its prediction.
  float* prior_in;     // (N, C) the prior's input: the decision block's input (SDT: xs[l - 1], not
                       // owned) or the teacher's output one token earlier, zero at t = 0 (STT)
  float* change;       // (N, C) the change the gate measures: the decision block's (SDT), the teacher's (STT)
  float* teacher_out;  // (N, C) STT: the block's dense pass
  float *prior_ln, *prior_rstd, *prior_gate, *prior_up, *prior_h;  // (N, C), (N), (N, P) x 3
  float* change_hat;                                               // (N, C) the prior's prediction of change
  float* st_ch;  // (2N) d_st then d_ch per token (Backend::route_stats_forward)
  float* ma;     // (N) moving average of d_st
};

// All activations and scratch for one (B, T): one allocation, carved into named buffers.
class ModelState {
 public:
  explicit ModelState(Backend* be) : be(be) {}  // be == nullptr: only measures a layout
  ~ModelState() {
    if (be) be->release(arena);
  }
  ModelState(const ModelState&) = delete;
  ModelState& operator=(const ModelState&) = delete;
  Backend* be;
  int B = 0, T = 0;
  // The global index of this batch's first sequence: 0 in one process; rank r of a data-parallel
  // job holds sequences r B .. r B + B - 1 of the global batch and draws the latent bits and random
  // routing's scores those sequences get in one process (core/dist, docs/distributed.md).
  int64_t first_seq = 0;
  float* arena = nullptr;
  size_t arena_floats = 0;
  int32_t* tokens = nullptr;      // (2, N): inputs then targets, on the backend
  uint32_t* codes = nullptr;      // (N)
  std::vector<float*> xs;         // L+1 residual streams (N, C): xs[l] is the input of block l
  std::vector<BlockActs> blocks;  // L decoder blocks
  BlockActs enc{};                // encoder block
  float *zeta_b, *kv_inj, *enc_out, *enc_ln, *enc_rstd, *bit_logits, *p, *kl, *R;
  // (T) the mean of kl over the batch at each position: the batch-mean free bits' gate. A caller
  // that splits one batch (gradient accumulation, several processes) must put the whole batch's
  // means here between forward and backward.
  float* kl_mean;
  float *ln_f, *rstd_f, *logits, *losses;
  // backward scratch
  float *dx, *d_ln, *d_ln_kv, *d_atty, *dq, *dk, *dv, *d_hmid;
  float *d_enc_q, *d_enc_kv, *d_enc_out, *d_bits;
  // Routed models: one entry per block (filled for the routed ones), the STT teacher's dense pass,
  // a vector of ones (the gate where there is none) and the routed blocks' backward scratch.
  std::vector<RouteActs> routes;
  BlockActs teacher{};
  float* ones = nullptr;
  float *d_g, *d_y_sel, *d_x_sel, *d_st_ch, *d_change, *d_change_hat, *d_aux_hat, *d_carry, *d_junk;
  float *d_prior_h, *d_prior_gate, *d_prior_up;
  float* d_st_logits = nullptr;  // (N, 2)
  // Hold what the routed blocks' gradients treat as constant at the last forward's values: the
  // choice, the moving averages, STT's teacher pass and the student's input (finite differences).
  bool freeze_routing = false;
  // Routed models: who chooses the tokens in forward. The teacher (training: top-k or threshold on
  // the router's gate) or the student router (causal, no teacher pass: inference); only the
  // teacher's forward has a backward.
  bool route_student = false;
  bool has_targets = false;
  float kappa = 0;
  FreeBitsForm free_bits_form = FreeBitsForm::BatchMean;
  bool free = false;
};

// A routed block's past in generation (docs/subjective_depth.md, "Generation on the student
// path"): what its student and gate read from earlier tokens of each sequence. Kept by position,
// so that a step repeated at the same position (a stopped sequence in a batch) finds what the
// first one found.
struct RoutedPast {
  float* prev_x = nullptr;      // (2, B, C) on the backend: the block's input at the last even, odd position
  std::vector<int32_t> cached;  // (B, max_len + 1) host: the block's cached tokens before each position
  std::vector<float> d_st;      // (B, max_len) host, SDT: the static change's size at each position
};

class DecodeState {
 public:
  explicit DecodeState(Backend* be) : be(be) {}  // be == nullptr: only measures a layout
  ~DecodeState() {
    if (be) be->release(arena);
  }
  DecodeState(const DecodeState&) = delete;
  DecodeState& operator=(const DecodeState&) = delete;
  Backend* be;
  int B = 0, max_len = 0;
  int chunk = 0;  // rows of one prefill chunk
  float* arena = nullptr;
  int32_t* tokens = nullptr;           // (B)
  uint32_t* codes = nullptr;           // (B)
  std::vector<float*> kcache, vcache;  // per layer (B, max_len, NKV, HS)
  BlockActs scratch{};                 // sized for (B, 1) with att (B, NH, 1, max_len)
  BlockActs pre{};                     // a prefill chunk: (1, chunk) with att (1, NH, chunk, max_len)
  // (max(B, chunk), C) each; logits (max(B, rows of logits per prefill group), V)
  float *x, *x2, *kv_in, *R, *ln_f, *rstd_f, *logits;
  // Routed models: the student path's scratch for max(B, chunk) rows (the choice, the prior, the
  // gathered rows and their positions), per block its past (dense blocks: none), and per sequence
  // the positions run so far. Random routing draws from route_seed, sequence b as stream b.
  RouteActs route{};
  std::vector<RoutedPast> past;
  std::vector<int> len;
  uint64_t route_seed = 0;
  // The teacher's path instead (a routed model's state made for it): no cache is filled; every
  // step runs the training forward over the sequence so far, the teacher choosing over all of it.
  bool teacher = false;
  std::vector<std::vector<int32_t>> history;         // per sequence: its tokens so far
  std::vector<std::vector<uint32_t>> history_codes;  // and their Z
};

}  // namespace ftx
