// The CUDA backend: every Backend op on one GPU, on one stream. GEMMs go to cuBLAS with TF32
// tensor cores by default (fp32 storage and accumulation, 10-bit mantissa inputs: the usual
// fp32-training trade, about 1e-3 relative per product), or fp32 / bf16 (set_matmul_precision);
// everything else is a kernel of ops.cu, attention.cu, attention_tc.cu or latent.cu, run through
// the step graph (step_graph.h). The CPU backend (kernels/cpu) defines what each op computes;
// test_backend_ops checks this file against it op by op.
//
// Ordering: every op, copy and fill is queued on the backend's stream, so ops see each other's
// results in program order without synchronising; upload, download and the scalar reductions
// (sum_squares) wait for the stream because the host reads or frees its buffer right after.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/base/assert.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/step_graph.h"
#include "kernels/device_comm.h"

namespace ftx {
namespace {

using cuda::kReduceBlocks;

constexpr size_t kCublasWorkspace = size_t(32) << 20;

// Column-major extent, in elements, of a stored (rows x cols) matrix with leading dimension ld.
size_t extent(int rows, int cols, int ld) { return rows == 0 || cols == 0 ? 0 : size_t(ld) * (cols - 1) + rows; }

// A new bf16 rounding of x[0, n) from the stream-ordered pool; the caller frees it (cudaFreeAsync).
__nv_bfloat16* rounded(const float* x, size_t n, cudaStream_t st) {
  __nv_bfloat16* out = nullptr;
  FTX_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&out), std::max<size_t>(n, 1) * sizeof(__nv_bfloat16), st));
  cuda::to_bf16(out, x, n, st);
  return out;
}

// Column-major C (m x n) = op(A) op(B) (+ C when accumulate), fp32 inputs, TF32 tensor cores or
// plain fp32.
void cublas_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* A,
                 int lda, const float* B, int ldb, float* C, int ldc, bool accumulate, MatmulPrecision prec) {
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cublasComputeType_t compute = prec == MatmulPrecision::Fp32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  FTX_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, m, n, k, &one, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, &beta, C, CUDA_R_32F,
                                ldc, compute, CUBLAS_GEMM_DEFAULT));
}

// The same on bf16 inputs, fp32 accumulation and output.
void cublas_gemm_bf16(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                      const __nv_bfloat16* A, int lda, const __nv_bfloat16* B, int ldb, float* C, int ldc,
                      bool accumulate) {
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  FTX_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, C,
                                CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Device-to-device copies as op launchers (CudaBackend::op).
void copy_launch(void* dst, const void* src, size_t bytes, cudaStream_t st) {
  FTX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st));
}
void copy_rows_launch(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows,
                      cudaStream_t st) {
  FTX_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice, st));
}

// cudaSetDevice for this host thread, skipped when that device is current already.
void use_device(int device) {
  static thread_local int current = -1;
  if (current != device) FTX_CUDA_CHECK(cudaSetDevice(device));
  current = device;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    use_device(device);
    FTX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    FTX_CUBLAS_CHECK(cublasCreate(&cublas_));
    FTX_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // An explicit workspace (set after the stream, which resets it): cuBLAS then allocates
    // nothing while a step graph is being captured.
    FTX_CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspace));
    FTX_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace));
    FTX_CUDA_CHECK(cudaMalloc(&partial_, kReduceBlocks * sizeof(double)));
    FTX_CUDA_CHECK(cudaMalloc(&clip_factor_, sizeof(float)));
    // Scratch (mapper tiles, bf16 activations) comes from the stream-ordered pool: keep what it
    // has freed instead of returning it to the driver at every synchronisation.
    cudaMemPool_t pool = nullptr;
    FTX_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep = UINT64_MAX;
    FTX_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    graph_ = std::make_unique<cuda::StepGraph>(stream_);
    cudaDeviceProp prop{};
    FTX_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    name_ = std::string("cuda:") + std::to_string(device) + " (" + prop.name + ")";
  }
  ~CudaBackend() override {
    use_device(device_);
    roundings_.forget(stream_);
    cudaStreamSynchronize(stream_);
    graph_.reset();
    cudaFree(mirror_);
    cudaFree(clip_factor_);
    cudaFree(partial_);
    cudaFree(cublas_workspace_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  const char* name() const override { return name_.c_str(); }
  DeviceKind kind() const override { return DeviceKind::Cuda; }

  // ---- memory ----
  void* alloc(size_t bytes) override {
    auto p = try_alloc(bytes);
    FT_ASSERT(p.ok(), "%s", p.error().message.c_str());
    return *p;
  }
  Result<void*> try_alloc(size_t bytes) override {
    outside_graph("alloc");
    void* p = nullptr;
    if (cudaMalloc(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky: clear it for the next check
      return make_error(name_ + ": out of GPU memory allocating " + bytes_text(bytes));
    }
    FTX_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    return p;
  }
  void release(void* p) override {
    if (p == nullptr) return;
    outside_graph("release");
    FTX_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (p == tracked_) track_weights(nullptr, 0);
    FTX_CUDA_CHECK(cudaFree(p));
  }
  void upload(void* dst, const void* host_src, size_t bytes) override {
    outside_graph("upload");
    FTX_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
    FTX_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the caller may reuse host_src at once
    weights_written(dst, bytes);
  }
  void download(void* host_dst, const void* src, size_t bytes) override {
    outside_graph("download");
    FTX_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    FTX_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    op("copy", copy_launch, dst, src, bytes);
    weights_written(dst, bytes);
  }
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                 size_t rows) override {
    if (row_bytes == 0 || rows == 0) return;
    op("copy_rows", copy_rows_launch, dst, dst_pitch, src, src_pitch, row_bytes, rows);
    weights_written(dst, dst_pitch * (rows - 1) + row_bytes);
  }
  void fill(float* x, float value, size_t n) override {
    if (n == 0) return;
    op("fill", cuda::fill, x, value, n);
    weights_written(x, n * sizeof(float));
  }
  void synchronize() override {
    outside_graph("synchronize");
    FTX_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // ---- elementwise / reductions ----
  void add(float* out, const float* a, const float* b, size_t n) override {
    if (n == 0) return;
    op("add", cuda::add, out, a, b, n);
  }
  void add_inplace(float* acc, const float* x, size_t n) override {
    if (n == 0) return;
    op("add_inplace", cuda::add_inplace, acc, x, n);
  }
  void scale(float* x, float s, size_t n) override {
    if (n == 0) return;
    op("scale", cuda::scale, x, s, n);
  }
  double sum_squares(const float* x, size_t n) override {
    outside_graph("sum_squares");
    cuda::sum_squares_partials(partial_, x, n, stream_);
    double host[kReduceBlocks];
    download(host, partial_, sizeof(host));
    double total = 0.0;
    for (double p : host) total += p;
    return total;
  }
  void broadcast_rows(float* out, const float* v, int N, int C) override {
    const size_t n = size_t(N) * C;
    if (n == 0) return;
    op("broadcast_rows", cuda::broadcast_rows, out, v, N, C);
  }
  void sum_rows(float* dv, const float* dout, int N, int C) override {
    if (C == 0) return;
    op("sum_rows", cuda::sum_rows, dv, dout, N, C);
  }
  void route_stats_forward(float* st_ch, float* ma, const float* dx, const float* dx_hat, int B, int T, int C,
                           int W) override {
    FT_ASSERT(W >= 1 && C >= 1, "route_stats: window %d, width %d", W, C);
    if (B * T == 0) return;
    op("route_stats_forward", cuda::route_stats_forward, st_ch, ma, dx, dx_hat, B, T, C, W);
  }
  void route_stats_backward(float* d_dx, float* d_dx_hat, const float* d_st_ch, const float* dx, const float* dx_hat,
                            int N, int C) override {
    if (size_t(N) * C == 0) return;
    op("route_stats_backward", cuda::route_stats_backward, d_dx, d_dx_hat, d_st_ch, dx, dx_hat, N, C);
  }
  void route_gate_forward(float* g, const float* st_ch, const float* ma, const float* params, int N) override {
    if (N == 0) return;
    op("route_gate_forward", cuda::route_gate_forward, g, st_ch, ma, params, N);
  }
  void route_gate_backward(float* d_st_ch, float* dparams, const float* dg, const float* st_ch, const float* ma,
                           const float* params, int N) override {
    if (N == 0) return;
    op("route_gate_backward", cuda::route_gate_backward, d_st_ch, dparams, dg, st_ch, ma, params, N);
  }
  void topk_rows(int32_t* pos, int32_t* rows, const float* score, int B, int T, int k) override {
    if (B == 0 || k == 0) return;
    op("topk_rows", cuda::topk_rows, pos, rows, score, B, T, k);
  }
  void route_mask(int32_t* mask, const int32_t* rows, int N, int M) override {
    if (N == 0) return;
    op("route_mask", cuda::route_mask, mask, rows, N, M);
  }
  void route_scatter_forward(float* out, const float* x, const float* y, const float* g, const int32_t* rows, int N,
                             int M, int C) override {
    if (out != x) copy(out, x, size_t(N) * C * sizeof(float));
    if (size_t(M) * C == 0) return;
    op("route_scatter_forward", cuda::route_scatter_forward, out, y, g, rows, M, C);
  }
  void route_scatter_backward(float* dx, float* dy, float* dg, const float* dout, const float* x, const float* y,
                              const float* g, const int32_t* rows, int N, int M, int C) override {
    if (dx != dout) copy(dx, dout, size_t(N) * C * sizeof(float));
    if (size_t(M) * C == 0) return;
    op("route_scatter_backward", cuda::route_scatter_backward, dx, dy, dg, x, y, g, rows, M, C);
  }

  // ---- embedding ----
  void embedding_forward(float* out, const int32_t* tok, WeightRef wte, int N, int C) override {
    const size_t n = size_t(N) * C;
    if (n == 0) return;
    if (wte.dtype == DType::BF16) {
      op("embedding_forward_bf16", embedding_bf16_launch, out, tok, bf16_of(wte), N, C);
      return;
    }
    op("embedding_forward", embedding_f32_launch, out, tok, wte.f32(), N, C);
  }
  void embedding_backward(float* dwte, const float* dout, const int32_t* tok, int N, int C) override {
    const size_t n = size_t(N) * C;
    if (n == 0) return;
    op("embedding_backward", cuda::embedding_backward, dwte, dout, tok, N, C);
  }

  // ---- RMSNorm ----
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) override {
    if (N == 0) return;
    op("rmsnorm_forward", cuda::rmsnorm_forward, out, rstd, x, w, N, C, eps);
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                        int N, int C) override {
    if (N == 0) return;
    op("rmsnorm_backward", cuda::rmsnorm_backward, dx, dw, dout, x, w, rstd, N, C);
  }

  // ---- matmul: row-major out (N,OC) = inp (N,IC) @ w^T. cuBLAS is column-major, where a
  // row-major (r x c) matrix reads as its transpose, so each product is computed transposed:
  //   out^T (OC x N) = w (OC x IC) . inp^T          -> gemm(T, N, OC, N, IC)
  //   dinp^T (IC x N) = w^T (IC x OC) . dout^T       -> gemm(N, N, IC, N, OC)
  //   dw^T (IC x OC) += inp^T (IC x N) . dout (N x OC) -> gemm(N, T, IC, OC, N)
  // A bf16 weight goes to cuBLAS as it is, whatever the precision (see gemm()).
  void matmul_forward(float* out, const float* inp, WeightRef w, int N, int IC, int OC, bool accumulate) override {
    gemm("matmul_forward", CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, w, IC, inp, IC, out, OC, accumulate);
  }
  void matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, WeightRef w, int N, int IC, int OC,
                       bool accumulate_dinp) override {
    FT_ASSERT(dw == nullptr || w.dtype == DType::F32, "matmul_backward: a %s weight is frozen (dw must be null)",
              dtype_name(w.dtype));
    if (dinp != nullptr)
      gemm("matmul_backward_dinp", CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, w, IC, dout, OC, dinp, IC, accumulate_dinp);
    if (dw != nullptr)
      gemm("matmul_backward_dw", CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, f32_weight(inp), IC, dout, OC, dw, IC, true);
  }

  // ---- RoPE ----
  void rope_forward(float* x, int B, int T, int nh, int HS, int pos0, const float* inv_freq) override {
    rope(x, B, T, nh, HS, pos0, nullptr, inv_freq, 1.0);
  }
  void rope_backward(float* dx, int B, int T, int nh, int HS, int pos0, const float* inv_freq) override {
    rope(dx, B, T, nh, HS, pos0, nullptr, inv_freq, -1.0);
  }
  void rope_forward_at(float* x, const int32_t* pos, int B, int T, int nh, int HS, const float* inv_freq) override {
    rope(x, B, T, nh, HS, 0, pos, inv_freq, 1.0);
  }
  void rope_backward_at(float* dx, const int32_t* pos, int B, int T, int nh, int HS, const float* inv_freq) override {
    rope(dx, B, T, nh, HS, 0, pos, inv_freq, -1.0);
  }

  // ---- attention ----
  size_t attention_saved_floats(const AttnShape& s) const override { return size_t(s.B) * s.NH * s.Tq; }
  // At bf16 the products run on tensor cores (attention_tc.cu) where the shape allows; both
  // kernels save the same log-sum-exp, so either backward follows either forward.
  void attention_forward(float* out, float* saved, const float* q, const float* k, const float* v,
                         const AttnShape& s) override {
    const bool tc = precision_ == MatmulPrecision::Bf16 && cuda::attention_tc_supports(s);
    op("attention_forward", tc ? cuda::attention_tc_forward : cuda::attention_forward, out, saved, q, k, v, s);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* saved,
                          const float* q, const float* k, const float* v, const AttnShape& s) override {
    const bool tc = precision_ == MatmulPrecision::Bf16 && cuda::attention_tc_supports(s);
    op("attention_backward", tc ? cuda::attention_tc_backward : cuda::attention_backward, dq, dk, dv, dout, out, saved,
       q, k, v, s);
  }

  // ---- SwiGLU ----
  void swiglu_forward(float* out, const float* gate, const float* up, size_t n) override {
    if (n == 0) return;
    op("swiglu_forward", cuda::swiglu_forward, out, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                       size_t n) override {
    if (n == 0) return;
    op("swiglu_backward", cuda::swiglu_backward, dgate, dup, dout, gate, up, n);
  }

  // ---- cross-entropy ----
  void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V) override {
    if (N == 0) return;
    op("crossentropy_forward", cuda::crossentropy_forward, losses, logits, targets, N, V);
  }
  void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int N, int V,
                             float scale) override {
    if (N == 0) return;
    op("crossentropy_backward", cuda::crossentropy_backward, dlogits, logits, targets, N, V, scale);
  }

  // ---- latent ----
  void binary_mapper_forward(uint32_t* codes, float* p, const float* logits, int N, int H, uint64_t seed,
                             uint64_t stream) override {
    op("binary_mapper_forward", cuda::binary_mapper_forward, codes, p, logits, N, H, graph_->scalar(seed),
       graph_->scalar(stream));
  }
  void binary_mapper_backward(float* dlogits, const float* dR, const float* W, const float* p, int N, int C,
                              int H) override {
    const __nv_bfloat16* W16 = precision_ == MatmulPrecision::Bf16 ? mirror_of(W) : nullptr;
    op("binary_mapper_backward", mapper_backward_launch, dlogits, dR, W, p, N, C, H, precision_, W16, cublas_);
  }
  void post_sampler_forward(float* R, const uint32_t* codes, const float* W, int N, int C, int H) override {
    op("post_sampler_forward", cuda::post_sampler_forward, R, codes, W, N, C, H);
  }
  void post_sampler_backward(float* dW, const float* dR, const uint32_t* codes, int N, int C, int H) override {
    op("post_sampler_backward", cuda::post_sampler_backward, dW, dR, codes, N, C, H);
  }
  void kl_forward(float* kl, const float* p, int N, int H) override { op("kl_forward", cuda::kl_forward, kl, p, N, H); }
  void kl_batch_mean(float* mean_kl, const float* kl, int B, int T) override {
    op("kl_batch_mean", cuda::kl_batch_mean, mean_kl, kl, B, T);
  }
  void kl_backward(float* dlogits, const float* p, const float* gate, int period, int N, int H, float kappa,
                   float scale) override {
    op("kl_backward", cuda::kl_backward, dlogits, p, gate, period, N, H, graph_->scalar(kappa), scale);
  }

  // ---- optimizer ----
  void clip_grad_norm(float* g, size_t n, float max_norm, float* norm) override {
    op("clip_grad_norm", cuda::clip_grad_norm, g, n, max_norm, norm, partial_, clip_factor_);
  }
  void adamw_update(float* param, const float* grad, float* m, float* v, const AdamWSegment* segments, int n_segments,
                    const AdamWStep& s) override {
    FT_ASSERT(s.t >= 1, "adamw: step %d (steps count from 1)", s.t);
    size_t end = 0;
    for (int i = 0; i < n_segments; ++i) {
      FT_ASSERT(segments[i].offset >= end, "adamw: segments must be sorted and disjoint (segment %d)", i);
      end = segments[i].offset + segments[i].numel;
    }
    if (end == 0) return;
    const auto lr = graph_->scalar(s.lr);
    const auto bc1 = graph_->scalar(float(1.0 / (1.0 - std::pow(double(s.beta1), s.t))));
    const auto bc2 = graph_->scalar(float(1.0 / (1.0 - std::pow(double(s.beta2), s.t))));
    const auto* table = static_cast<const AdamWSegment*>(graph_->table(segments, sizeof(AdamWSegment) * n_segments));
    __nv_bfloat16* mirror = precision_ == MatmulPrecision::Bf16 ? mirror_of(param) : nullptr;
    op("adamw_update", cuda::adamw, param, grad, m, v, mirror, table, n_segments, end, lr, s.beta1, s.beta2, s.eps, bc1,
       bc2);
  }

  // ---- precision and step graphs ----
  Status set_matmul_precision(MatmulPrecision p) override {
    outside_graph("set_matmul_precision");
    precision_ = p;
    if (p == MatmulPrecision::Bf16)
      refresh_mirror();
    else
      free_mirror();  // only bf16 GEMMs read it
    return {};
  }
  MatmulPrecision matmul_precision() const override { return precision_; }
  void track_weights(const float* base, size_t n) override {
    outside_graph("track_weights");
    free_mirror();
    tracked_ = base, tracked_n_ = base != nullptr ? n : 0;
    refresh_mirror();
  }
  void begin_graph() override {
    outside_graph("begin_graph");  // roundings kept from before are freed now, not by the graph
    graph_->begin();
  }
  void end_graph() override {
    op("end_of_step", [](cudaStream_t) {});  // frees the kept roundings inside the graph
    graph_->end();
  }
  GraphStats graph_stats() const override { return {graph_->captures(), graph_->replays(), roundings_.made()}; }

 private:
  // Every op but the GEMMs: launcher(args..., stream_), keyed by the same arguments
  // (cuda::make_op). It may write anything, so the kept roundings go first.
  template <class F, class... A>
  void op(const char* tag, F launcher, const A&... args) {
    cuda::Op o = cuda::make_op(tag, launcher, stream_, args...);
    launch_op({std::move(o.key), [this, f = std::move(o.launch)] {
                 roundings_.forget(stream_);
                 f();
               }});
  }
  void launch_op(cuda::Op&& o) {
    bind();
    if (!graph_->active()) {
      o.launch();
      return;
    }
    graph_->run(std::move(o));
  }
  // Every host call into the backend checks that it is outside a step graph (those that may not be
  // in one) and makes this backend's GPU current: the CUDA device is per host thread, and the
  // studio drives a backend from its worker thread.
  void outside_graph(const char* what) {
    FT_ASSERT(!graph_->active(), "cuda backend: %s inside a step graph", what);
    bind();
    roundings_.forget(stream_);
  }
  void bind() const { use_device(device_); }

  static const __nv_bfloat16* bf16_of(WeightRef w) {
    (void)w.bf16();  // asserts the dtype
    return static_cast<const __nv_bfloat16*>(w.ptr);
  }

  // ---- bf16 copies of the tracked weights ----
  bool tracked(const void* p) const {
    const auto* f = static_cast<const float*>(p);
    return tracked_ != nullptr && f >= tracked_ && f < tracked_ + tracked_n_;
  }
  __nv_bfloat16* mirror_of(const float* p) const {
    return mirror_ != nullptr && tracked(p) ? mirror_ + (p - tracked_) : nullptr;
  }
  // Allocates the mirror when the precision is bf16 and rounds the whole tracked buffer into it.
  void free_mirror() {
    if (mirror_ == nullptr) return;
    FTX_CUDA_CHECK(cudaStreamSynchronize(stream_));
    FTX_CUDA_CHECK(cudaFree(mirror_));
    mirror_ = nullptr;
  }
  void refresh_mirror() {
    if (precision_ != MatmulPrecision::Bf16 || tracked_ == nullptr) return;
    if (mirror_ == nullptr) {
      if (cudaMalloc(&mirror_, tracked_n_ * sizeof(__nv_bfloat16)) != cudaSuccess) {
        cudaGetLastError();
        mirror_ = nullptr;  // no room for the copy: GEMMs round the weights per call instead
        return;
      }
    }
    rounded_copy(mirror_, tracked_, tracked_n_);
  }
  // A write into the tracked buffer outside AdamW (upload, copy, fill): round that range again.
  void weights_written(const void* dst, size_t bytes) {
    if (mirror_ == nullptr || !tracked(dst)) return;
    const float* d = static_cast<const float*>(dst);
    rounded_copy(mirror_ + (d - tracked_), d, std::min(bytes / sizeof(float), size_t(tracked_ + tracked_n_ - d)));
  }
  void rounded_copy(__nv_bfloat16* out, const float* x, size_t n) {
    if (n == 0) return;
    op("to_bf16", cuda::to_bf16, out, x, n);
  }

  // bf16 roundings of activations for one op (the mapper's tiles), freed with the op.
  class BfScratch {
   public:
    explicit BfScratch(cudaStream_t st) : st_(st) {}
    ~BfScratch() {
      for (void* p : blocks_) FTX_CUDA_CHECK(cudaFreeAsync(p, st_));
    }
    const __nv_bfloat16* convert(const float* x, size_t n) {
      blocks_.push_back(rounded(x, n, st_));
      return static_cast<const __nv_bfloat16*>(blocks_.back());
    }

   private:
    cudaStream_t st_;
    std::vector<void*> blocks_;
  };

  // bf16 roundings of GEMM inputs that are not tracked weights (activations, gradients), kept
  // while only GEMMs run: the q, k and v projections then round their common input once, gate and
  // up theirs, a matmul_backward its dout once for both products, and the backward of q, k, v one
  // input for three weight gradients. A GEMM forgets the roundings its output overlaps; any other
  // op, which may write anything, forgets them all (op()), and so does the end of a step graph.
  // Only closures call it, so a replayed graph repeats exactly what its recording decided.
  class Roundings {
   public:
    const __nv_bfloat16* of(const float* x, size_t n, cudaStream_t st) {
      for (auto k = kept_.begin(); k != kept_.end(); ++k)
        if (k->x == x && k->n == n) {  // the latest used goes last: the other operand never evicts it
          std::rotate(k, k + 1, kept_.end());
          return kept_.back().bf;
        }
      if (kept_.size() == kMaxKept) {
        FTX_CUDA_CHECK(cudaFreeAsync(kept_.front().bf, st));
        kept_.erase(kept_.begin());
      }
      kept_.push_back({x, n, rounded(x, n, st)});
      ++made_;
      return kept_.back().bf;
    }
    void written(const float* c, size_t n, cudaStream_t st) {
      const auto stale = std::remove_if(kept_.begin(), kept_.end(), [&](const Kept& k) {
        const bool overlaps = k.x < c + n && c < k.x + k.n;
        if (overlaps) FTX_CUDA_CHECK(cudaFreeAsync(k.bf, st));
        return overlaps;
      });
      kept_.erase(stale, kept_.end());
    }
    void forget(cudaStream_t st) {
      for (const Kept& k : kept_) FTX_CUDA_CHECK(cudaFreeAsync(k.bf, st));
      kept_.clear();
    }
    int64_t made() const { return made_; }

   private:
    struct Kept {
      const float* x;
      size_t n;
      __nv_bfloat16* bf;
    };
    static constexpr size_t kMaxKept = 8;
    std::vector<Kept> kept_;
    int64_t made_ = 0;
  };

  // Column-major C (m x n) = op(A) op(B) (+ C when accumulate) at the backend's precision; A is
  // the weight (fp32 or bf16), B fp32. A bf16 A makes the product a bf16 one at any precision: B
  // is rounded as at MatmulPrecision::Bf16. The op's key holds the precision, A or A16 (the dtype) and the
  // mirror pointers, so a step graph records again when any of them changes.
  void gemm(const char* tag, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, WeightRef Aw, int lda,
            const float* B, int ldb, float* C, int ldc, bool accumulate) {
    if (m == 0 || n == 0) return;
    const bool a_bf16 = Aw.dtype == DType::BF16;
    FT_ASSERT(a_bf16 || Aw.dtype == DType::F32, "gemm: no %s path", dtype_name(Aw.dtype));
    const MatmulPrecision prec = a_bf16 ? MatmulPrecision::Bf16 : precision_;
    const float* A = a_bf16 ? nullptr : Aw.f32();
    const __nv_bfloat16* A16 = a_bf16 ? bf16_of(Aw) : prec == MatmulPrecision::Bf16 ? mirror_of(A) : nullptr;
    const __nv_bfloat16* B16 = prec == MatmulPrecision::Bf16 ? mirror_of(B) : nullptr;
    launch_op(cuda::make_op(tag, gemm_launch, stream_, ta, tb, m, n, k, A, lda, B, ldb, C, ldc, accumulate, prec, A16,
                            B16, cublas_, &roundings_));
  }
  // embedding_forward's launchers, one per table dtype (cuda::embedding_forward is overloaded).
  static void embedding_f32_launch(float* out, const int32_t* tok, const float* wte, int N, int C, cudaStream_t st) {
    cuda::embedding_forward(out, tok, wte, N, C, st);
  }
  static void embedding_bf16_launch(float* out, const int32_t* tok, const __nv_bfloat16* wte, int N, int C,
                                    cudaStream_t st) {
    cuda::embedding_forward(out, tok, wte, N, C, st);
  }
  // gemm's launcher: A16 / B16 are the operands' bf16 forms (a bf16 weight as given, or a mirror;
  // null: round the operand, kept in `kept` for the GEMMs that follow).
  static void gemm_launch(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* A, int lda,
                          const float* B, int ldb, float* C, int ldc, bool accumulate, MatmulPrecision prec,
                          const __nv_bfloat16* A16, const __nv_bfloat16* B16, cublasHandle_t h, Roundings* kept,
                          cudaStream_t st) {
    if (prec != MatmulPrecision::Bf16) {
      cublas_gemm(h, ta, tb, m, n, k, A, lda, B, ldb, C, ldc, accumulate, prec);
    } else {
      // Stored shapes: op(A) is m x k, so A is (m x k) or, transposed, (k x m); B likewise.
      const __nv_bfloat16* a =
          A16 != nullptr ? A16 : kept->of(A, ta == CUBLAS_OP_N ? extent(m, k, lda) : extent(k, m, lda), st);
      const __nv_bfloat16* b =
          B16 != nullptr ? B16 : kept->of(B, tb == CUBLAS_OP_N ? extent(k, n, ldb) : extent(n, k, ldb), st);
      cublas_gemm_bf16(h, ta, tb, m, n, k, a, lda, b, ldb, C, ldc, accumulate);
    }
    kept->written(C, extent(m, n, ldc), st);
  }
  // binary_mapper_backward's launcher: the tiles' GEMMs at `prec` on the cuBLAS handle h.
  static void mapper_backward_launch(float* dlogits, const float* dR, const float* W, const float* p, int N, int C,
                                     int H, MatmulPrecision prec, const __nv_bfloat16* W16, cublasHandle_t h,
                                     cudaStream_t st) {
    if (prec != MatmulPrecision::Bf16) {
      const cuda::TileGemm tile = [=](int m, int n, int k, const float* A, int lda, const float* B, int ldb, float* Cm,
                                      int ldc) {
        cublas_gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, A, lda, B, ldb, Cm, ldc, false, prec);
      };
      cuda::binary_mapper_backward(dlogits, dR, W, p, N, C, H, tile, st);
      return;
    }
    // bf16: dR is rounded once for all the tiles; W's columns come from the mirror W16 (or are
    // rounded per tile when W is not a tracked weight).
    BfScratch scratch(st);
    const __nv_bfloat16* dR16 = scratch.convert(dR, size_t(N) * C);
    const cuda::TileGemm tile = [=, &scratch](int m, int n, int k, const float* A, int lda, const float* B, int ldb,
                                              float* Cm, int ldc) {
      (void)B;
      const __nv_bfloat16* A16 = W16 != nullptr ? W16 + (A - W) : scratch.convert(A, extent(m, k, lda));
      cublas_gemm_bf16(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, A16, lda, dR16, ldb, Cm, ldc, false);
    };
    cuda::binary_mapper_backward(dlogits, dR, W, p, N, C, H, tile, st);
  }
  void rope(float* x, int B, int T, int nh, int HS, int pos0, const int32_t* pos, const float* inv_freq, double sign) {
    FT_ASSERT(HS % 2 == 0, "rope: head size %d", HS);
    if (size_t(B) * T * nh * (HS / 2) == 0) return;
    op("rope", cuda::rope, x, B, T, nh, HS, pos0, pos, inv_freq, sign);
  }

  friend cuda::BackendHandles cuda::backend_handles(Backend& be);
  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  double* partial_ = nullptr;     // sum_squares / clip_grad_norm partials (kReduceBlocks)
  float* clip_factor_ = nullptr;  // (1): clip_grad_norm's factor, read by its scaling kernel
  std::unique_ptr<cuda::StepGraph> graph_;
  MatmulPrecision precision_ = MatmulPrecision::Tf32;
  const float* tracked_ = nullptr;  // track_weights: the weights whose bf16 copy is mirror_
  size_t tracked_n_ = 0;
  __nv_bfloat16* mirror_ = nullptr;
  Roundings roundings_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(int device) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();
    if (err == cudaSuccess) return make_error("no CUDA GPU found");
    return make_error(std::string("no CUDA GPU available (the CUDA runtime says: ") + cudaGetErrorString(err) + ")");
  }
  if (device < 0 || device >= count)
    return make_error("CUDA device " + std::to_string(device) + " does not exist (this machine has " +
                      std::to_string(count) + ")");
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess || prop.major < 8) {
    cudaGetLastError();
    return make_error(std::string("CUDA device ") + std::to_string(device) + " (" + prop.name +
                      ", compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                      ") is older than the sm_80 this build needs");
  }
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(device));
}

bool cuda_backend_built() { return true; }

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

cuda::BackendHandles cuda::backend_handles(Backend& be) {
  auto* c = dynamic_cast<CudaBackend*>(&be);
  return c ? BackendHandles{c->device_, c->stream_} : BackendHandles{};
}

}  // namespace ftx
