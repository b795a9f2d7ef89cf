// The CPU backend: the float instantiations of the op templates in kernels/cpu/ops_*.h behind
// the Backend interface (kernels/backend.h). Memory is host memory, 64-byte aligned and
// zero-filled; "device" pointers are plain pointers, so upload/download/copy are memcpy and
// synchronize does nothing (every op has finished when it returns).
//
// Deliberately not here: any numerics (they live in the op headers, where the tests reach them
// in double too), thread-count policy (OpenMP's, set by the process: OMP_NUM_THREADS).
#include <cstdlib>
#include <cstring>

#include "kernels/backend.h"
#include "kernels/base/assert.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/ops_adamw.h"
#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_binary_mapper.h"
#include "kernels/cpu/ops_crossentropy.h"
#include "kernels/cpu/ops_elementwise.h"
#include "kernels/cpu/ops_embedding.h"
#include "kernels/cpu/ops_matmul.h"
#include "kernels/cpu/ops_matmul_bf16.h"
#include "kernels/cpu/ops_rmsnorm.h"
#include "kernels/cpu/ops_rope.h"
#include "kernels/cpu/ops_route.h"
#include "kernels/cpu/ops_swiglu.h"

namespace ftx {
namespace {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  DeviceKind kind() const override { return DeviceKind::Cpu; }

  // ---- memory ----
  void* alloc(size_t bytes) override {
    auto p = try_alloc(bytes);
    FT_ASSERT(p.ok(), "%s", p.error().message.c_str());
    return *p;
  }
  Result<void*> try_alloc(size_t bytes) override {
    void* p = cpu::alloc_cpu_buffer(bytes);  // on huge pages from 2 MiB
    if (p == nullptr) return make_error("cpu: out of memory allocating " + bytes_text(bytes));
    std::memset(p, 0, bytes);
    return p;
  }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* host_src, size_t bytes) override {
    if (bytes != 0) std::memcpy(dst, host_src, bytes);
  }
  void download(void* host_dst, const void* src, size_t bytes) override {
    if (bytes != 0) std::memcpy(host_dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override { cpu::copy_bytes(dst, src, bytes); }
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                 size_t rows) override {
    for (size_t r = 0; r < rows; ++r)
      std::memmove(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, row_bytes);
  }
  void fill(float* x, float value, size_t n) override { cpu::fill(x, value, n); }
  void synchronize() override {}

  // ---- elementwise / reductions ----
  void add(float* out, const float* a, const float* b, size_t n) override { cpu::add(out, a, b, n); }
  void add_inplace(float* acc, const float* x, size_t n) override { cpu::add_inplace(acc, x, n); }
  void scale(float* x, float s, size_t n) override { cpu::scale(x, s, n); }
  double sum_squares(const float* x, size_t n) override { return cpu::sum_squares(x, n); }
  void broadcast_rows(float* out, const float* v, int N, int C) override { cpu::broadcast_rows(out, v, N, C); }
  void sum_rows(float* dv, const float* dout, int N, int C) override { cpu::sum_rows(dv, dout, N, C); }
  void route_stats_forward(float* st_ch, float* ma, const float* dx, const float* dx_hat, int B, int T, int C,
                           int W) override {
    cpu::route_stats_forward(st_ch, ma, dx, dx_hat, B, T, C, W);
  }
  void route_stats_backward(float* d_dx, float* d_dx_hat, const float* d_st_ch, const float* dx, const float* dx_hat,
                            int N, int C) override {
    cpu::route_stats_backward(d_dx, d_dx_hat, d_st_ch, dx, dx_hat, N, C);
  }
  void route_gate_forward(float* g, const float* st_ch, const float* ma, const float* params, int N) override {
    cpu::route_gate_forward(g, st_ch, ma, params, N);
  }
  void route_gate_backward(float* d_st_ch, float* dparams, const float* dg, const float* st_ch, const float* ma,
                           const float* params, int N) override {
    cpu::route_gate_backward(d_st_ch, dparams, dg, st_ch, ma, params, N);
  }
  void topk_rows(int32_t* pos, int32_t* rows, const float* score, int B, int T, int k) override {
    cpu::topk_rows(pos, rows, score, B, T, k);
  }
  void route_mask(int32_t* mask, const int32_t* rows, int N, int M) override { cpu::route_mask(mask, rows, N, M); }
  void route_scatter_forward(float* out, const float* x, const float* y, const float* g, const int32_t* rows, int N,
                             int M, int C) override {
    cpu::route_scatter_forward(out, x, y, g, rows, N, M, C);
  }
  void route_scatter_backward(float* dx, float* dy, float* dg, const float* dout, const float* x, const float* y,
                              const float* g, const int32_t* rows, int N, int M, int C) override {
    cpu::route_scatter_backward(dx, dy, dg, dout, x, y, g, rows, N, M, C);
  }

  // ---- embedding ----
  void embedding_forward(float* out, const int32_t* tok, WeightRef wte, int N, int C) override {
    switch (wte.dtype) {
      case DType::F32:
        return cpu::embedding_forward(out, tok, wte.f32(), N, C);
      case DType::BF16:
        return cpu::embedding_forward_bf16(out, tok, wte.bf16(), N, C);
    }
    FT_ASSERT(false, "embedding_forward: no %s path", dtype_name(wte.dtype));
  }
  void embedding_backward(float* dwte, const float* dout, const int32_t* tok, int N, int C) override {
    cpu::embedding_backward(dwte, dout, tok, N, C);
  }

  // ---- RMSNorm ----
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) override {
    cpu::rmsnorm_forward(out, rstd, x, w, N, C, eps);
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                        int N, int C) override {
    cpu::rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
  }

  // ---- matmul ----
  // fp32, or bf16 inputs with fp32 sums on fp32 weights (training at --precision bf16,
  // ops_matmul_bf16.h). No tf32: no CPU has it.
  Status set_matmul_precision(MatmulPrecision p) override {
    if (p == MatmulPrecision::Tf32) return make_error("cpu has no tf32 GEMMs (fp32 or bf16)");
    precision_ = p;
    return {};
  }
  MatmulPrecision matmul_precision() const override { return precision_; }
  void matmul_forward(float* out, const float* inp, WeightRef w, int N, int IC, int OC, bool accumulate) override {
    switch (w.dtype) {
      case DType::F32:
        if (precision_ == MatmulPrecision::Bf16)
          return cpu::matmul_forward_bf16(out, inp, w.f32(), N, IC, OC, accumulate);
        return cpu::matmul_forward(out, inp, w.f32(), N, IC, OC, accumulate);
      case DType::BF16:
        return cpu::gemm_bf16w(out, inp, w.bf16(), N, IC, OC, accumulate);
    }
    FT_ASSERT(false, "matmul_forward: no %s path", dtype_name(w.dtype));
  }
  void matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, WeightRef w, int N, int IC, int OC,
                       bool accumulate_dinp) override {
    switch (w.dtype) {
      case DType::F32:
        if (precision_ == MatmulPrecision::Bf16)
          return cpu::matmul_backward_bf16(dinp, dw, dout, inp, w.f32(), N, IC, OC, accumulate_dinp);
        return cpu::matmul_backward(dinp, dw, dout, inp, w.f32(), N, IC, OC, accumulate_dinp);
      case DType::BF16:
        FT_ASSERT(dw == nullptr, "matmul_backward: a bf16 weight is frozen (dw must be null)");
        return cpu::matmul_backward_bf16w(dinp, dout, w.bf16(), N, IC, OC, accumulate_dinp);
    }
    FT_ASSERT(false, "matmul_backward: no %s path", dtype_name(w.dtype));
  }

  // ---- RoPE ----
  void rope_forward(float* x, int B, int T, int nh, int HS, int pos0, const float* inv_freq) override {
    cpu::rope_forward(x, B, T, nh, HS, pos0, inv_freq);
  }
  void rope_backward(float* dx, int B, int T, int nh, int HS, int pos0, const float* inv_freq) override {
    cpu::rope_backward(dx, B, T, nh, HS, pos0, inv_freq);
  }
  void rope_forward_at(float* x, const int32_t* pos, int B, int T, int nh, int HS, const float* inv_freq) override {
    cpu::rope_forward_at(x, pos, B, T, nh, HS, inv_freq);
  }
  void rope_backward_at(float* dx, const int32_t* pos, int B, int T, int nh, int HS, const float* inv_freq) override {
    cpu::rope_backward_at(dx, pos, B, T, nh, HS, inv_freq);
  }

  // ---- attention ----
  size_t attention_saved_floats(const AttnShape& s) const override {
    return size_t(s.B) * s.NH * s.Tq * s.Tk;  // the probabilities
  }
  void attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                         const AttnShape& s) override {
    cpu::attention_forward(out, att, q, k, v, s, attn_products());
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* /*out*/, const float* att,
                          const float* q, const float* k, const float* v, const AttnShape& s) override {
    cpu::attention_backward(dq, dk, dv, dout, att, q, k, v, s, attn_products());
  }

  // ---- SwiGLU ----
  void swiglu_forward(float* out, const float* gate, const float* up, size_t n) override {
    cpu::swiglu_forward(out, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                       size_t n) override {
    cpu::swiglu_backward(dgate, dup, dout, gate, up, n);
  }

  // ---- cross-entropy ----
  void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V) override {
    cpu::crossentropy_forward(losses, logits, targets, N, V);
  }
  void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int N, int V,
                             float scale) override {
    cpu::crossentropy_backward(dlogits, logits, targets, N, V, scale);
  }

  // ---- binary mapper ----
  void binary_mapper_forward(uint32_t* codes, float* p, const float* logits, int N, int H, uint64_t seed,
                             uint64_t stream) override {
    cpu::binary_mapper_forward(codes, p, logits, N, H, seed, stream);
  }
  void binary_mapper_backward(float* dlogits, const float* dR, const float* W, const float* p, int N, int C,
                              int H) override {
    cpu::binary_mapper_backward(dlogits, dR, W, p, N, C, H);
  }
  void post_sampler_forward(float* R, const uint32_t* codes, const float* W, int N, int C, int H) override {
    cpu::post_sampler_forward(R, codes, W, N, C, H);
  }
  void post_sampler_backward(float* dW, const float* dR, const uint32_t* codes, int N, int C, int H) override {
    cpu::post_sampler_backward(dW, dR, codes, N, C, H);
  }
  void kl_forward(float* kl, const float* p, int N, int H) override { cpu::kl_forward(kl, p, N, H); }
  void kl_batch_mean(float* mean_kl, const float* kl, int B, int T) override { cpu::kl_batch_mean(mean_kl, kl, B, T); }
  void kl_backward(float* dlogits, const float* p, const float* gate, int period, int N, int H, float kappa,
                   float scale) override {
    cpu::kl_backward(dlogits, p, gate, period, N, H, kappa, scale);
  }

  // ---- optimizer ----
  void clip_grad_norm(float* g, size_t n, float max_norm, float* norm) override {
    const double total = std::sqrt(cpu::sum_squares(g, n));
    *norm = static_cast<float>(total);
    if (max_norm > 0 && total > max_norm) cpu::scale(g, static_cast<float>(max_norm / total), n);
  }
  void adamw_update(float* param, const float* grad, float* m, float* v, const AdamWSegment* segments, int n_segments,
                    const AdamWStep& s) override {
    for (int i = 0; i < n_segments; ++i) {
      const size_t o = segments[i].offset;
      cpu::adamw_update(param + o, grad + o, m + o, v + o, segments[i].numel, s.lr, s.beta1, s.beta2, s.eps,
                        segments[i].weight_decay, s.t);
    }
  }

 private:
  MatmulPrecision precision_ = MatmulPrecision::Fp32;
  // The attention products follow the Linear layers' precision (as on CUDA and in autocast).
  cpu::AttnProducts attn_products() const {
    return precision_ == MatmulPrecision::Bf16 ? cpu::AttnProducts::Bf16Inputs : cpu::AttnProducts::Fp32;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace ftx
