// A Backend that forwards every call to another one and, while recording, notes each compute op
// with the sizes it was called with (as kernels/op_table.h's OpDims, and the row's variant), so
// that `ftx bench ops` can time every op of a real training step alone, at its own sizes. Memory
// transfers and allocation are forwarded without being noted.
//
// Recording timed also notes each op's wall time inside the step, between a synchronize before it
// and one after (on the CPU, where ops return when done, synchronize costs nothing; on a GPU the
// synchronizes serialise the launches and no step graph is recorded, so the step runs slower than
// untraced).
#pragma once
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/op_table.h"

namespace ftx {

struct OpCall {
  std::string op;  // an op_table() row
  OpDims dims;
  double seconds = 0.0;  // its wall time in the step, when recorded timed
};

class OpTraceBackend final : public Backend {
 public:
  explicit OpTraceBackend(Backend& inner) : b_(inner) {}
  void record(bool on, bool timed = false) {
    recording_ = on;
    timed_ = on && timed;
  }
  const std::vector<OpCall>& calls() const { return calls_; }

  const char* name() const override { return b_.name(); }
  DeviceKind kind() const override { return b_.kind(); }
  void* alloc(size_t bytes) override { return b_.alloc(bytes); }
  Result<void*> try_alloc(size_t bytes) override { return b_.try_alloc(bytes); }
  void release(void* p) override { b_.release(p); }
  void upload(void* dst, const void* src, size_t bytes) override { b_.upload(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { b_.download(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    const Stamp stamp = note("copy", flat(bytes / sizeof(float)));
    b_.copy(dst, src, bytes);
  }
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                 size_t rows) override {
    OpDims d;
    d.B = int(rows), d.C = int(row_bytes / sizeof(float)), d.T = int(dst_pitch / row_bytes);
    const Stamp stamp = note("copy_rows", d);
    b_.copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows);
  }
  void fill(float* x, float value, size_t n) override {
    const Stamp stamp = note("fill", flat(n));
    b_.fill(x, value, n);
  }
  void synchronize() override { b_.synchronize(); }

  void add(float* out, const float* a, const float* b, size_t n) override {
    const Stamp stamp = note("add", flat(n));
    b_.add(out, a, b, n);
  }
  void add_inplace(float* acc, const float* x, size_t n) override {
    const Stamp stamp = note("add_inplace", flat(n));
    b_.add_inplace(acc, x, n);
  }
  void scale(float* x, float s, size_t n) override {
    const Stamp stamp = note("scale", flat(n));
    b_.scale(x, s, n);
  }
  double sum_squares(const float* x, size_t n) override {
    const Stamp stamp = note("sum_squares", flat(n));
    return b_.sum_squares(x, n);
  }
  void broadcast_rows(float* out, const float* v, int N, int C) override {
    const Stamp stamp = note("broadcast_rows", nc(N, C));
    b_.broadcast_rows(out, v, N, C);
  }
  void sum_rows(float* dv, const float* dout, int N, int C) override {
    const Stamp stamp = note("sum_rows", nc(N, C));
    b_.sum_rows(dv, dout, N, C);
  }
  void route_stats_forward(float* st_ch, float* ma, const float* dx, const float* dx_hat, int B, int T, int C,
                           int W) override {
    const Stamp stamp = note("route_stats_forward", gate(B, T, C, W));
    b_.route_stats_forward(st_ch, ma, dx, dx_hat, B, T, C, W);
  }
  void route_stats_backward(float* d_dx, float* d_dx_hat, const float* d_st_ch, const float* dx, const float* dx_hat,
                            int N, int C) override {
    const Stamp stamp = note("route_stats_backward", gate(1, N, C, 1));
    b_.route_stats_backward(d_dx, d_dx_hat, d_st_ch, dx, dx_hat, N, C);
  }
  void route_gate_forward(float* g, const float* st_ch, const float* ma, const float* params, int N) override {
    const Stamp stamp = note("route_gate_forward", gate(1, N, 1, 1));
    b_.route_gate_forward(g, st_ch, ma, params, N);
  }
  void route_gate_backward(float* d_st_ch, float* dparams, const float* dg, const float* st_ch, const float* ma,
                           const float* params, int N) override {
    const Stamp stamp = note("route_gate_backward", gate(1, N, 1, 1));
    b_.route_gate_backward(d_st_ch, dparams, dg, st_ch, ma, params, N);
  }
  void topk_rows(int32_t* pos, int32_t* rows, const float* score, int B, int T, int k) override {
    OpDims d;
    d.B = B, d.T = T, d.N = k;
    const Stamp stamp = note("topk_rows", d);
    b_.topk_rows(pos, rows, score, B, T, k);
  }
  void route_mask(int32_t* mask, const int32_t* rows, int N, int M) override {
    OpDims d;
    d.N = N, d.OC = M;
    const Stamp stamp = note("route_mask", d);
    b_.route_mask(mask, rows, N, M);
  }
  void route_scatter_forward(float* out, const float* x, const float* y, const float* g, const int32_t* rows, int N,
                             int M, int C) override {
    OpDims d = nc(N, C, out == x ? 1 : 0);
    d.OC = M;
    const Stamp stamp = note("route_scatter_forward", d);
    b_.route_scatter_forward(out, x, y, g, rows, N, M, C);
  }
  void route_scatter_backward(float* dx, float* dy, float* dg, const float* dout, const float* x, const float* y,
                              const float* g, const int32_t* rows, int N, int M, int C) override {
    OpDims d = nc(N, C, dx == dout ? 1 : 0);
    d.OC = M;
    const Stamp stamp = note("route_scatter_backward", d);
    b_.route_scatter_backward(dx, dy, dg, dout, x, y, g, rows, N, M, C);
  }
  void embedding_forward(float* out, const int32_t* tok, WeightRef wte, int N, int C) override {
    OpDims d = nc(N, C, wte.dtype == DType::BF16 ? 1 : 0);
    d.V = kTraceVocab;
    const Stamp stamp = note("embedding_forward", d);
    b_.embedding_forward(out, tok, wte, N, C);
  }
  void embedding_backward(float* dwte, const float* dout, const int32_t* tok, int N, int C) override {
    OpDims d = nc(N, C);
    d.V = kTraceVocab;
    const Stamp stamp = note("embedding_backward", d);
    b_.embedding_backward(dwte, dout, tok, N, C);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) override {
    const Stamp stamp = note("rmsnorm_forward", nc(N, C));
    b_.rmsnorm_forward(out, rstd, x, w, N, C, eps);
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                        int N, int C) override {
    const Stamp stamp = note("rmsnorm_backward", nc(N, C));
    b_.rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
  }
  void matmul_forward(float* out, const float* inp, WeightRef w, int N, int IC, int OC, bool accumulate) override {
    OpDims d = nc(N, IC, (accumulate ? 1 : 0) | (w.dtype == DType::BF16 ? 2 : 0));
    d.OC = OC;
    const Stamp stamp = note("matmul_forward", d);
    b_.matmul_forward(out, inp, w, N, IC, OC, accumulate);
  }
  void matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, WeightRef w, int N, int IC, int OC,
                       bool accumulate_dinp) override {
    const int variant = w.dtype == DType::BF16 ? 4 : !dinp ? 2 : !dw ? 3 : accumulate_dinp ? 1 : 0;
    OpDims d = nc(N, IC, variant);
    d.OC = OC;
    const Stamp stamp = note("matmul_backward", d);
    b_.matmul_backward(dinp, dw, dout, inp, w, N, IC, OC, accumulate_dinp);
  }
  void rope_forward(float* x, int B, int T, int nh, int HS, int pos0, const float* inv_freq) override {
    const Stamp stamp = note("rope_forward", rope(B, T, nh, HS, pos0));
    b_.rope_forward(x, B, T, nh, HS, pos0, inv_freq);
  }
  void rope_backward(float* dx, int B, int T, int nh, int HS, int pos0, const float* inv_freq) override {
    const Stamp stamp = note("rope_backward", rope(B, T, nh, HS, pos0));
    b_.rope_backward(dx, B, T, nh, HS, pos0, inv_freq);
  }
  void rope_forward_at(float* x, const int32_t* pos, int B, int T, int nh, int HS, const float* inv_freq) override {
    const Stamp stamp = note("rope_forward_at", rope(B, T, nh, HS, 0));
    b_.rope_forward_at(x, pos, B, T, nh, HS, inv_freq);
  }
  void rope_backward_at(float* dx, const int32_t* pos, int B, int T, int nh, int HS, const float* inv_freq) override {
    const Stamp stamp = note("rope_backward_at", rope(B, T, nh, HS, 0));
    b_.rope_backward_at(dx, pos, B, T, nh, HS, inv_freq);
  }
  size_t attention_saved_floats(const AttnShape& s) const override { return b_.attention_saved_floats(s); }
  void attention_forward(float* out, float* saved, const float* q, const float* k, const float* v,
                         const AttnShape& s) override {
    const Stamp stamp = note("attention_forward", op_dims_of(s));
    b_.attention_forward(out, saved, q, k, v, s);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* saved,
                          const float* q, const float* k, const float* v, const AttnShape& s) override {
    const Stamp stamp = note("attention_backward", op_dims_of(s));
    b_.attention_backward(dq, dk, dv, dout, out, saved, q, k, v, s);
  }
  void swiglu_forward(float* out, const float* gate, const float* up, size_t n) override {
    const Stamp stamp = note("swiglu_forward", flat(n));
    b_.swiglu_forward(out, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                       size_t n) override {
    const Stamp stamp = note("swiglu_backward", flat(n));
    b_.swiglu_backward(dgate, dup, dout, gate, up, n);
  }
  void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V) override {
    OpDims d = nc(N, 1);
    d.V = V;
    const Stamp stamp = note("crossentropy_forward", d);
    b_.crossentropy_forward(losses, logits, targets, N, V);
  }
  void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int N, int V,
                             float scale) override {
    OpDims d = nc(N, 1, dlogits == logits ? 1 : 0);
    d.V = V;
    const Stamp stamp = note("crossentropy_backward", d);
    b_.crossentropy_backward(dlogits, logits, targets, N, V, scale);
  }
  void binary_mapper_forward(uint32_t* codes, float* p, const float* logits, int N, int H, uint64_t seed,
                             uint64_t stream) override {
    const Stamp stamp = note("binary_mapper_forward", nch(N, 1, H));
    b_.binary_mapper_forward(codes, p, logits, N, H, seed, stream);
  }
  void binary_mapper_backward(float* dlogits, const float* dR, const float* W, const float* p, int N, int C,
                              int H) override {
    const Stamp stamp = note("binary_mapper_backward", nch(N, C, H));
    b_.binary_mapper_backward(dlogits, dR, W, p, N, C, H);
  }
  void post_sampler_forward(float* R, const uint32_t* codes, const float* W, int N, int C, int H) override {
    const Stamp stamp = note("post_sampler_forward", nch(N, C, H));
    b_.post_sampler_forward(R, codes, W, N, C, H);
  }
  void post_sampler_backward(float* dW, const float* dR, const uint32_t* codes, int N, int C, int H) override {
    const Stamp stamp = note("post_sampler_backward", nch(N, C, H));
    b_.post_sampler_backward(dW, dR, codes, N, C, H);
  }
  void kl_forward(float* kl, const float* p, int N, int H) override {
    const Stamp stamp = note("kl_forward", nch(N, 1, H));
    b_.kl_forward(kl, p, N, H);
  }
  void kl_batch_mean(float* mean_kl, const float* kl, int B, int T) override {
    OpDims d;
    d.B = B, d.T = T;
    const Stamp stamp = note("kl_batch_mean", d);
    b_.kl_batch_mean(mean_kl, kl, B, T);
  }
  void kl_backward(float* dlogits, const float* p, const float* gate, int period, int N, int H, float kappa,
                   float scale) override {
    OpDims d = nch(N, 1, H);
    d.variant = period == N ? 0 : 1, d.T = period;
    const Stamp stamp = note("kl_backward", d);
    b_.kl_backward(dlogits, p, gate, period, N, H, kappa, scale);
  }
  void clip_grad_norm(float* g, size_t n, float max_norm, float* norm) override {
    OpDims d = flat(n);
    d.variant = max_norm > 0.0f ? 2 : 0;
    const Stamp stamp = note("clip_grad_norm", d);
    b_.clip_grad_norm(g, n, max_norm, norm);
  }
  void adamw_update(float* param, const float* grad, float* m, float* v, const AdamWSegment* segments, int n_segments,
                    const AdamWStep& step) override {
    size_t n = 0;
    for (int i = 0; i < n_segments; ++i) n = std::max(n, segments[i].offset + segments[i].numel);
    const Stamp stamp = note("adamw_update", flat(n));
    b_.adamw_update(param, grad, m, v, segments, n_segments, step);
  }

  Status set_matmul_precision(MatmulPrecision p) override { return b_.set_matmul_precision(p); }
  MatmulPrecision matmul_precision() const override { return b_.matmul_precision(); }
  void track_weights(const float* base, size_t n) override { b_.track_weights(base, n); }
  // Recording timed, no step graph: the ops run one by one, each between its synchronizes (a
  // recorded graph would run them later, and CUDA refuses a synchronize while it records).
  void begin_graph() override {
    if (!timed_) b_.begin_graph();
  }
  void end_graph() override {
    if (!timed_) b_.end_graph();
  }
  GraphStats graph_stats() const override { return b_.graph_stats(); }

 private:
  // The table's rows are not passed to the embedding ops; cases get this many (the scatter-add's
  // collisions depend on it: the synthetic task has 29 tokens, SmolLM2 49,152).
  static constexpr int kTraceVocab = 4096;
  using Clock = std::chrono::steady_clock;
  // Destroyed when the traced call returns: then stores the call's wall time, when timed.
  class [[nodiscard]] Stamp {
   public:
    Stamp(OpTraceBackend* trace, size_t index) : trace_(trace), index_(index), t0_(Clock::now()) {}
    Stamp(const Stamp&) = delete;
    Stamp& operator=(const Stamp&) = delete;
    ~Stamp() {
      if (trace_ == nullptr) return;
      trace_->b_.synchronize();
      trace_->calls_[index_].seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
    }

   private:
    OpTraceBackend* trace_;
    size_t index_;
    Clock::time_point t0_;
  };
  Stamp note(const char* op, const OpDims& d) {
    if (!recording_) return Stamp(nullptr, 0);
    calls_.push_back({op, d});
    if (!timed_) return Stamp(nullptr, 0);
    b_.synchronize();  // what ran before is not this op's time
    return Stamp(this, calls_.size() - 1);
  }
  static OpDims flat(size_t n) {
    OpDims d;
    d.n = n;
    return d;
  }
  static OpDims nc(int N, int C, int variant = 0) {
    OpDims d;
    d.N = N, d.C = C, d.variant = variant;
    return d;
  }
  static OpDims nch(int N, int C, int H) {
    OpDims d;
    d.N = N, d.C = C, d.H = H;
    return d;
  }
  static OpDims gate(int B, int T, int C, int W) {  // the window in Tk
    OpDims d;
    d.B = B, d.T = T, d.C = C, d.Tk = W;
    return d;
  }
  static OpDims rope(int B, int T, int nh, int HS, int pos0) {
    OpDims d;
    d.B = B, d.T = T, d.NH = nh, d.HS = HS, d.pos0 = pos0;
    return d;
  }
  Backend& b_;
  bool recording_ = false, timed_ = false;
  std::vector<OpCall> calls_;
};

}  // namespace ftx
