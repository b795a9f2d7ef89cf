// The CUDA backend: every Backend op on one GPU, on one stream. GEMMs go to cuBLAS with TF32
// tensor cores (fp32 storage and accumulation, 10-bit mantissa inputs: the usual fp32-training
// trade, about 1e-3 relative per product); everything else is a kernel here or in attention.cu /
// latent.cu. The CPU backend (kernels/cpu) defines what each op computes; test_backend_ops checks
// this file against it op by op.
//
// Ordering: every op, copy and fill is queued on the backend's stream, so ops see each other's
// results in program order without synchronising; upload, download and the scalar reductions
// (sum_squares) wait for the stream because the host reads or frees its buffer right after.
//
// Reductions that the CPU does in double (sum_squares, sum_rows, the RMSNorm weight gradient)
// are in double here too, in a fixed order, so a run repeats bit for bit. The embedding and
// post-sampler scatter-adds use float atomics (order-dependent in the last bits).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/common.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/step_graph.h"

namespace ftx {
namespace {

using cuda::blocks_for;
using cuda::Dyn;
using cuda::warp_sum;
using cuda::warp_max;

constexpr unsigned kThreads = 256;      // elementwise kernels
constexpr unsigned kRowWarps = 8;       // row kernels (RMSNorm): one warp per row, 8 rows a block
constexpr unsigned kColumnRows = 16;    // column sums: 32 columns x 16 row lanes a block
constexpr unsigned kReduceBlocks = 256; // sum_squares partials

// Logistic sigmoid as the CPU computes it: only exp of non-positive arguments, stable both ways.
__device__ __forceinline__ float sigmoidf(float x) {
  const float e = expf(-fabsf(x));
  const float inv = 1.0f / (1.0f + e);
  return x >= 0.0f ? inv : e * inv;
}

// ---- elementwise ---------------------------------------------------------------------------

__global__ void fill_kernel(float* x, float v, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}

__global__ void add_kernel(float* out, const float* a, const float* b, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void add_inplace_kernel(float* acc, const float* x, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) acc[i] += x[i];
}

__global__ void scale_kernel(float* x, float s, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

// Per-block partial sums of x^2 in double over a grid-stride range; the host adds the
// kReduceBlocks partials in order.
__global__ void sum_squares_kernel(double* partial, const float* x, size_t n) {
  __shared__ double warp_part[kThreads / 32];
  double s = 0.0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    s += double(x[i]) * double(x[i]);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) warp_part[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0.0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) t += warp_part[w];
    partial[blockIdx.x] = t;
  }
}

__global__ void broadcast_rows_kernel(float* out, const float* v, int N, int C) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < size_t(N) * C) out[i] = v[i % C];
}

// acc[c] += sum_n f(n, c), n in order within each of kColumnRows lanes, lanes added in order:
// a fixed order whatever the GPU. Block (32, kColumnRows), grid over column tiles of 32.
template <class F>
__device__ void column_sum(float* acc, int N, int C, F f) {
  __shared__ double part[kColumnRows][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  double s = 0.0;
  if (c < C)
    for (int n = threadIdx.y; n < N; n += kColumnRows) s += f(n, c);
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    double t = 0.0;
    for (unsigned r = 0; r < kColumnRows; ++r) t += part[r][threadIdx.x];
    acc[c] += float(t);
  }
}

__global__ void sum_rows_kernel(float* dv, const float* dout, int N, int C) {
  column_sum(dv, N, C, [=] __device__(int n, int c) { return double(dout[size_t(n) * C + c]); });
}

// ---- embedding -----------------------------------------------------------------------------

__global__ void embedding_forward_kernel(float* out, const int32_t* tok, const float* wte, int N, int C) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(N) * C) return;
  const size_t n = i / C, c = i % C;
  out[i] = wte[size_t(tok[n]) * C + c];
}

__global__ void embedding_backward_kernel(float* dwte, const float* dout, const int32_t* tok, int N, int C) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(N) * C) return;
  const size_t n = i / C, c = i % C;
  atomicAdd(dwte + size_t(tok[n]) * C + c, dout[i]);  // repeated tokens collide
}

// ---- RMSNorm: one warp per row ---------------------------------------------------------------

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* x, const float* w, int N, int C,
                                       float eps) {
  const int n = blockIdx.x * kRowWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  const float* xr = x + size_t(n) * C;
  float ss = 0.0f;
  for (int c = lane; c < C; c += 32) ss += xr[c] * xr[c];
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / float(C) + eps);
  if (lane == 0) rstd[n] = r;
  float* o = out + size_t(n) * C;
  for (int c = lane; c < C; c += 32) o[c] = w[c] * (xr[c] * r);
}

__global__ void rmsnorm_backward_dx_kernel(float* dx, const float* dout, const float* x, const float* w,
                                           const float* rstd, int N, int C) {
  const int n = blockIdx.x * kRowWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  const float* g = dout + size_t(n) * C;
  const float* xr = x + size_t(n) * C;
  const float r = rstd[n];
  float dot = 0.0f;
  for (int c = lane; c < C; c += 32) dot += w[c] * g[c] * xr[c];
  dot = warp_sum(dot);
  const float k = dot * r * r / float(C);
  float* d = dx + size_t(n) * C;
  for (int c = lane; c < C; c += 32) d[c] += r * (w[c] * g[c] - xr[c] * k);
}

__global__ void rmsnorm_backward_dw_kernel(float* dw, const float* dout, const float* x, const float* rstd,
                                           int N, int C) {
  column_sum(dw, N, C, [=] __device__(int n, int c) {
    const size_t i = size_t(n) * C + c;
    return double(dout[i] * x[i]) * double(rstd[n]);
  });
}

// ---- RoPE: angles in double as the CPU computes them, one thread per rotated pair -------------

__global__ void rope_kernel(float* x, int B, int T, int nh, int HS, int pos0, double theta, double sign) {
  const int half = HS / 2;
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(B) * T * nh * half) return;
  const int pair = int(i % half);
  const size_t row = i / half;                // (b, t, h)
  const int t = int((row / nh) % T);
  const double angle = double(pos0 + t) * pow(theta, -2.0 * pair / HS);
  const float cs = float(cos(angle)), sn = float(sign * sin(angle));
  float* r = x + row * HS;
  const float x1 = r[pair], x2 = r[pair + half];
  r[pair] = x1 * cs - x2 * sn;
  r[pair + half] = x2 * cs + x1 * sn;
}

// ---- SwiGLU ----------------------------------------------------------------------------------

__global__ void swiglu_forward_kernel(float* out, const float* gate, const float* up, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  out[i] = g * sigmoidf(g) * up[i];
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dout, const float* gate,
                                       const float* up, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i], s = sigmoidf(g), d = dout[i];
  dgate[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
  dup[i] = d * g * s;
}

// ---- cross-entropy: one block per row; V up to a Llama vocabulary ------------------------------

// Row max and sum exp(l - max) of V logits, reduced over the block; every thread gets both.
__device__ void softmax_stats(const float* l, int V, float& mx, float& sum) {
  __shared__ float red[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, l[j]);
  m = warp_max(m);
  if (lane == 0) red[warp] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < warps; ++w) m = fmaxf(m, red[w]);
  __syncthreads();
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(l[j] - m);
  s = warp_sum(s);
  if (lane == 0) red[warp] = s;
  __syncthreads();
  s = 0.0f;
  for (int w = 0; w < warps; ++w) s += red[w];
  __syncthreads();  // red is reused by the caller's next row
  mx = m, sum = s;
}

__global__ void crossentropy_forward_kernel(float* losses, const float* logits, const int32_t* targets, int V) {
  const int n = blockIdx.x;
  const float* l = logits + size_t(n) * V;
  float mx, sum;
  softmax_stats(l, V, mx, sum);
  if (threadIdx.x == 0) losses[n] = logf(sum) + mx - l[targets[n]];
}

// In place allowed: every logit is read by softmax_stats (which ends in a barrier) before the
// thread that owns it overwrites it.
__global__ void crossentropy_backward_kernel(float* dlogits, const float* logits, const int32_t* targets, int V,
                                             float scale) {
  const int n = blockIdx.x;
  const float* l = logits + size_t(n) * V;
  float* d = dlogits + size_t(n) * V;
  float mx, sum;
  softmax_stats(l, V, mx, sum);
  const float k = scale / sum;
  const int t = targets[n];
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = k * expf(l[j] - mx);
    d[j] = j == t ? v - scale : v;
  }
}

// ---- gradient clipping: the norm and the factor stay on the device --------------------------

// One thread: adds the kReduceBlocks partials in order, writes the norm and the clip factor.
__global__ void clip_factor_kernel(float* norm, float* factor, const double* partial, float max_norm) {
  double t = 0.0;
  for (unsigned b = 0; b < kReduceBlocks; ++b) t += partial[b];
  const double r = sqrt(t);
  *norm = float(r);
  *factor = max_norm > 0.0f && r > double(max_norm) ? float(double(max_norm) / r) : 1.0f;
}

__global__ void scale_by_kernel(float* x, const float* factor, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= *factor;
}

// ---- AdamW over segments, one launch ---------------------------------------------------------

constexpr size_t kAdamChunk = 8192;  // elements per block

// Block b updates elements [b * kAdamChunk, (b + 1) * kAdamChunk) of the flat buffers; each
// element takes the weight decay of its segment (segments sorted, disjoint; gaps are skipped).
// With a bf16 mirror of the parameters (MatmulPrecision::Bf16), the new value is written there too.
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, __nv_bfloat16* mirror,
                             const AdamWSegment* segs, int nseg, Dyn<float> lr_arg, float beta1, float beta2,
                             float eps, Dyn<float> inv_bc1_arg, Dyn<float> inv_bc2_arg) {
  const size_t start = size_t(blockIdx.x) * kAdamChunk, stop = start + kAdamChunk;
  int lo = 0, hi = nseg;  // first segment that ends after start
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (segs[mid].offset + segs[mid].numel <= start) lo = mid + 1;
    else hi = mid;
  }
  const float lr = lr_arg.get(), inv_bc1 = inv_bc1_arg.get(), inv_bc2 = inv_bc2_arg.get();
  int sg = lo;
  for (size_t i = start + threadIdx.x; i < stop; i += blockDim.x) {
    while (sg < nseg && segs[sg].offset + segs[sg].numel <= i) ++sg;
    if (sg == nseg) return;
    if (i < segs[sg].offset) continue;
    const float g = grad[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    const float p = param[i] - lr * (mhat / (sqrtf(vhat) + eps) + segs[sg].weight_decay * param[i]);
    param[i] = p;
    if (mirror != nullptr) mirror[i] = __float2bfloat16(p);
  }
}

__global__ void to_bf16_kernel(__nv_bfloat16* out, const float* x, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(x[i]);
}

// ---------------------------------------------------------------------------------------------

constexpr size_t kCublasWorkspace = size_t(32) << 20;

// Column-major extent, in elements, of a stored (rows x cols) matrix with leading dimension ld.
size_t extent(int rows, int cols, int ld) { return rows == 0 || cols == 0 ? 0 : size_t(ld) * (cols - 1) + rows; }

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    FTX_CUDA_CHECK(cudaSetDevice(device));
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
    void* p = try_alloc(bytes);
    FT_ASSERT(p != nullptr, "cuda backend: out of GPU memory allocating %zu bytes", bytes);
    return p;
  }
  void* try_alloc(size_t bytes) override {
    outside_graph("alloc");
    void* p = nullptr;
    if (cudaMalloc(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky: clear it for the next check
      return nullptr;
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
    run(cuda::make_key("copy", dst, src, bytes),
        [=, st = stream_] { FTX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st)); });
    weights_written(dst, bytes);
  }
  void fill(float* x, float value, size_t n) override {
    if (n == 0) return;
    run(cuda::make_key("fill", x, value, n), [=, st = stream_] {
      fill_kernel<<<blocks_for(n, kThreads), kThreads, 0, st>>>(x, value, n);
      FTX_CUDA_LAUNCHED();
    });
    weights_written(x, n * sizeof(float));
  }
  void synchronize() override {
    outside_graph("synchronize");
    FTX_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // ---- elementwise / reductions ----
  void add(float* out, const float* a, const float* b, size_t n) override {
    if (n == 0) return;
    run(cuda::make_key("add", out, a, b, n), [=, st = stream_] {
      add_kernel<<<blocks_for(n, kThreads), kThreads, 0, st>>>(out, a, b, n);
      FTX_CUDA_LAUNCHED();
    });
  }
  void add_inplace(float* acc, const float* x, size_t n) override {
    if (n == 0) return;
    run(cuda::make_key("add_inplace", acc, x, n), [=, st = stream_] {
      add_inplace_kernel<<<blocks_for(n, kThreads), kThreads, 0, st>>>(acc, x, n);
      FTX_CUDA_LAUNCHED();
    });
  }
  void scale(float* x, float s, size_t n) override {
    if (n == 0) return;
    run(cuda::make_key("scale", x, s, n), [=, st = stream_] {
      scale_kernel<<<blocks_for(n, kThreads), kThreads, 0, st>>>(x, s, n);
      FTX_CUDA_LAUNCHED();
    });
  }
  double sum_squares(const float* x, size_t n) override {
    outside_graph("sum_squares");
    sum_squares_kernel<<<kReduceBlocks, kThreads, 0, stream_>>>(partial_, x, n);
    FTX_CUDA_LAUNCHED();
    double host[kReduceBlocks];
    download(host, partial_, sizeof(host));
    double total = 0.0;
    for (double p : host) total += p;
    return total;
  }
  void broadcast_rows(float* out, const float* v, int N, int C) override {
    const size_t n = size_t(N) * C;
    if (n == 0) return;
    run(cuda::make_key("broadcast_rows", out, v, N, C), [=, st = stream_] {
      broadcast_rows_kernel<<<blocks_for(n, kThreads), kThreads, 0, st>>>(out, v, N, C);
      FTX_CUDA_LAUNCHED();
    });
  }
  void sum_rows(float* dv, const float* dout, int N, int C) override {
    if (C == 0) return;
    run(cuda::make_key("sum_rows", dv, dout, N, C), [=, st = stream_] {
      sum_rows_kernel<<<blocks_for(size_t(C), 32), dim3(32, kColumnRows), 0, st>>>(dv, dout, N, C);
      FTX_CUDA_LAUNCHED();
    });
  }

  // ---- embedding ----
  void embedding_forward(float* out, const int32_t* tok, const float* wte, int N, int C) override {
    const size_t n = size_t(N) * C;
    if (n == 0) return;
    run(cuda::make_key("embedding_forward", out, tok, wte, N, C), [=, st = stream_] {
      embedding_forward_kernel<<<blocks_for(n, kThreads), kThreads, 0, st>>>(out, tok, wte, N, C);
      FTX_CUDA_LAUNCHED();
    });
  }
  void embedding_backward(float* dwte, const float* dout, const int32_t* tok, int N, int C) override {
    const size_t n = size_t(N) * C;
    if (n == 0) return;
    run(cuda::make_key("embedding_backward", dwte, dout, tok, N, C), [=, st = stream_] {
      embedding_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, st>>>(dwte, dout, tok, N, C);
      FTX_CUDA_LAUNCHED();
    });
  }

  // ---- RMSNorm ----
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) override {
    if (N == 0) return;
    run(cuda::make_key("rmsnorm_forward", out, rstd, x, w, N, C, eps), [=, st = stream_] {
      rmsnorm_forward_kernel<<<blocks_for(size_t(N), kRowWarps), kRowWarps * 32, 0, st>>>(out, rstd, x, w, N, C,
                                                                                         eps);
      FTX_CUDA_LAUNCHED();
    });
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                        int N, int C) override {
    if (N == 0) return;
    run(cuda::make_key("rmsnorm_backward", dx, dw, dout, x, w, rstd, N, C), [=, st = stream_] {
      rmsnorm_backward_dx_kernel<<<blocks_for(size_t(N), kRowWarps), kRowWarps * 32, 0, st>>>(dx, dout, x, w, rstd,
                                                                                             N, C);
      FTX_CUDA_LAUNCHED();
      rmsnorm_backward_dw_kernel<<<blocks_for(size_t(C), 32), dim3(32, kColumnRows), 0, st>>>(dw, dout, x, rstd, N,
                                                                                             C);
      FTX_CUDA_LAUNCHED();
    });
  }

  // ---- matmul: row-major out (N,OC) = inp (N,IC) @ w^T. cuBLAS is column-major, where a
  // row-major (r x c) matrix reads as its transpose, so each product is computed transposed:
  //   out^T (OC x N) = w (OC x IC) . inp^T          -> gemm(T, N, OC, N, IC)
  //   dinp^T (IC x N) = w^T (IC x OC) . dout^T       -> gemm(N, N, IC, N, OC)
  //   dw^T (IC x OC) += inp^T (IC x N) . dout (N x OC) -> gemm(N, T, IC, OC, N)
  void matmul_forward(float* out, const float* inp, const float* w, int N, int IC, int OC, bool accumulate) override {
    gemm("matmul_forward", CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, w, IC, inp, IC, out, OC, accumulate);
  }
  void matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int IC,
                       int OC, bool accumulate_dinp) override {
    if (dinp != nullptr)
      gemm("matmul_backward_dinp", CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, w, IC, dout, OC, dinp, IC, accumulate_dinp);
    if (dw != nullptr) gemm("matmul_backward_dw", CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, dout, OC, dw, IC, true);
  }

  // ---- RoPE ----
  void rope_forward(float* x, int B, int T, int nh, int HS, int pos0, float theta) override {
    rope(x, B, T, nh, HS, pos0, theta, 1.0);
  }
  void rope_backward(float* dx, int B, int T, int nh, int HS, int pos0, float theta) override {
    rope(dx, B, T, nh, HS, pos0, theta, -1.0);
  }

  // ---- attention ----
  size_t attention_saved_floats(const AttnShape& s) const override { return size_t(s.B) * s.NH * s.Tq; }
  // At bf16 the products run on tensor cores (attention_tc.cu) where the shape allows; both
  // kernels save the same log-sum-exp, so either backward follows either forward.
  void attention_forward(float* out, float* saved, const float* q, const float* k, const float* v,
                         const AttnShape& s) override {
    const bool tc = precision_ == MatmulPrecision::Bf16 && cuda::attention_tc_supports(s);
    run(cuda::make_key("attention_forward", out, saved, q, k, v, s.B, s.NH, s.NKV, s.HS, s.Tq, s.Tk, s.Tk_cap,
                       s.q_pos0, s.causal, tc),
        [=, st = stream_] {
          if (tc) cuda::attention_tc_forward(out, saved, q, k, v, s, st);
          else cuda::attention_forward(out, saved, q, k, v, s, st);
        });
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* saved,
                          const float* q, const float* k, const float* v, const AttnShape& s) override {
    const bool tc = precision_ == MatmulPrecision::Bf16 && cuda::attention_tc_supports(s);
    run(cuda::make_key("attention_backward", dq, dk, dv, dout, out, saved, q, k, v, s.B, s.NH, s.NKV, s.HS, s.Tq,
                       s.Tk, s.Tk_cap, s.q_pos0, s.causal, tc),
        [=, st = stream_] {
          if (tc) cuda::attention_tc_backward(dq, dk, dv, dout, out, saved, q, k, v, s, st);
          else cuda::attention_backward(dq, dk, dv, dout, out, saved, q, k, v, s, st);
        });
  }

  // ---- SwiGLU ----
  void swiglu_forward(float* out, const float* gate, const float* up, size_t n) override {
    if (n == 0) return;
    run(cuda::make_key("swiglu_forward", out, gate, up, n), [=, st = stream_] {
      swiglu_forward_kernel<<<blocks_for(n, kThreads), kThreads, 0, st>>>(out, gate, up, n);
      FTX_CUDA_LAUNCHED();
    });
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                       size_t n) override {
    if (n == 0) return;
    run(cuda::make_key("swiglu_backward", dgate, dup, dout, gate, up, n), [=, st = stream_] {
      swiglu_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, st>>>(dgate, dup, dout, gate, up, n);
      FTX_CUDA_LAUNCHED();
    });
  }

  // ---- cross-entropy ----
  void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V) override {
    if (N == 0) return;
    run(cuda::make_key("crossentropy_forward", losses, logits, targets, N, V), [=, st = stream_] {
      crossentropy_forward_kernel<<<N, kThreads, 0, st>>>(losses, logits, targets, V);
      FTX_CUDA_LAUNCHED();
    });
  }
  void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int N, int V,
                             float scale) override {
    if (N == 0) return;
    run(cuda::make_key("crossentropy_backward", dlogits, logits, targets, N, V, scale), [=, st = stream_] {
      crossentropy_backward_kernel<<<N, kThreads, 0, st>>>(dlogits, logits, targets, V, scale);
      FTX_CUDA_LAUNCHED();
    });
  }

  // ---- latent ----
  void binary_mapper_forward(uint32_t* codes, float* p, const float* logits, int N, int H, uint64_t seed,
                             uint64_t stream) override {
    const auto sd = graph_->scalar(seed), sm = graph_->scalar(stream);
    run(cuda::make_key("binary_mapper_forward", codes, p, logits, N, H),
        [=, st = stream_] { cuda::binary_mapper_forward(codes, p, logits, N, H, sd, sm, st); });
  }
  void binary_mapper_backward(float* dlogits, const float* dR, const float* W, const float* p, int N, int C,
                              int H) override {
    const MatmulPrecision prec = precision_;
    const __nv_bfloat16* W16 = prec == MatmulPrecision::Bf16 ? mirror_of(W) : nullptr;
    run(cuda::make_key("binary_mapper_backward", dlogits, dR, W, p, N, C, H, prec, W16), [=, st = stream_] {
      if (prec != MatmulPrecision::Bf16) {
        const cuda::TileGemm tile = [=](int m, int n, int k, const float* A, int lda, const float* B, int ldb,
                                        float* Cm, int ldc) {
          cublas_gemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, A, lda, B, ldb, Cm, ldc, false, prec);
        };
        cuda::binary_mapper_backward(dlogits, dR, W, p, N, C, H, tile, st);
        return;
      }
      // bf16: dR is rounded once for all the tiles; W's columns come from the mirror (or are
      // rounded per tile when W is not a tracked weight).
      BfScratch scratch(st);
      const __nv_bfloat16* dR16 = scratch.convert(dR, size_t(N) * C);
      const cuda::TileGemm tile = [=, &scratch](int m, int n, int k, const float* A, int lda, const float* B, int ldb,
                                                float* Cm, int ldc) {
        (void)B;
        const __nv_bfloat16* A16 = W16 != nullptr ? W16 + (A - W) : scratch.convert(A, extent(m, k, lda));
        cublas_gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, A16, lda, dR16, ldb, Cm, ldc, false);
      };
      cuda::binary_mapper_backward(dlogits, dR, W, p, N, C, H, tile, st);
    });
  }
  void post_sampler_forward(float* R, const uint32_t* codes, const float* W, int N, int C, int H) override {
    run(cuda::make_key("post_sampler_forward", R, codes, W, N, C, H),
        [=, st = stream_] { cuda::post_sampler_forward(R, codes, W, N, C, H, st); });
  }
  void post_sampler_backward(float* dW, const float* dR, const uint32_t* codes, int N, int C, int H) override {
    run(cuda::make_key("post_sampler_backward", dW, dR, codes, N, C, H),
        [=, st = stream_] { cuda::post_sampler_backward(dW, dR, codes, N, C, H, st); });
  }
  void kl_forward(float* kl, const float* p, int N, int H) override {
    run(cuda::make_key("kl_forward", kl, p, N, H), [=, st = stream_] { cuda::kl_forward(kl, p, N, H, st); });
  }
  void kl_backward(float* dlogits, const float* p, const float* kl, int N, int H, float kappa, float scale) override {
    const auto kp = graph_->scalar(kappa);
    run(cuda::make_key("kl_backward", dlogits, p, kl, N, H, scale),
        [=, st = stream_] { cuda::kl_backward(dlogits, p, kl, N, H, kp, scale, st); });
  }

  // ---- optimizer ----
  void clip_grad_norm(float* g, size_t n, float max_norm, float* norm) override {
    double* partial = partial_;
    float* factor = clip_factor_;
    run(cuda::make_key("clip_grad_norm", g, n, max_norm, norm), [=, st = stream_] {
      sum_squares_kernel<<<kReduceBlocks, kThreads, 0, st>>>(partial, g, n);
      FTX_CUDA_LAUNCHED();
      clip_factor_kernel<<<1, 1, 0, st>>>(norm, factor, partial, max_norm);
      FTX_CUDA_LAUNCHED();
      if (n == 0) return;
      scale_by_kernel<<<blocks_for(n, kThreads), kThreads, 0, st>>>(g, factor, n);
      FTX_CUDA_LAUNCHED();
    });
  }
  void adamw_update(float* param, const float* grad, float* m, float* v, const AdamWSegment* segments,
                    int n_segments, const AdamWStep& s) override {
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
    const unsigned blocks = unsigned((end + kAdamChunk - 1) / kAdamChunk);
    run(cuda::make_key("adamw_update", param, grad, m, v, mirror, table, n_segments, end, s.beta1, s.beta2, s.eps),
        [=, st = stream_, b1 = s.beta1, b2 = s.beta2, eps = s.eps] {
          adamw_kernel<<<blocks, kThreads, 0, st>>>(param, grad, m, v, mirror, table, n_segments, lr, b1, b2, eps, bc1,
                                                   bc2);
          FTX_CUDA_LAUNCHED();
        });
  }

  // ---- precision and step graphs ----
  bool set_matmul_precision(MatmulPrecision p, std::string* why) override {
    (void)why;
    outside_graph("set_matmul_precision");
    precision_ = p;
    refresh_mirror();
    return true;
  }
  MatmulPrecision matmul_precision() const override { return precision_; }
  void track_weights(const float* base, size_t n) override {
    outside_graph("track_weights");
    if (mirror_ != nullptr) {
      FTX_CUDA_CHECK(cudaStreamSynchronize(stream_));
      FTX_CUDA_CHECK(cudaFree(mirror_));
    }
    mirror_ = nullptr;
    tracked_ = base, tracked_n_ = base != nullptr ? n : 0;
    refresh_mirror();
  }
  void begin_graph() override { graph_->begin(); }
  void end_graph() override { graph_->end(); }
  GraphStats graph_stats() const override { return {graph_->captures(), graph_->replays()}; }

 private:
  template <class F>
  void run(std::vector<uint64_t>&& key, F&& launch) {
    if (!graph_->active()) {
      launch();
      return;
    }
    graph_->run(std::move(key), std::forward<F>(launch));
  }
  void outside_graph(const char* what) const {
    FT_ASSERT(!graph_->active(), "cuda backend: %s inside a step graph", what);
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
    run(cuda::make_key("to_bf16", out, x, n), [=, st = stream_] {
      to_bf16_kernel<<<blocks_for(n, kThreads), kThreads, 0, st>>>(out, x, n);
      FTX_CUDA_LAUNCHED();
    });
  }

  // bf16 roundings of activations for one op, from the stream-ordered pool, freed with the op.
  class BfScratch {
   public:
    explicit BfScratch(cudaStream_t st) : st_(st) {}
    ~BfScratch() {
      for (void* p : blocks_) FTX_CUDA_CHECK(cudaFreeAsync(p, st_));
    }
    const __nv_bfloat16* convert(const float* x, size_t n) {
      __nv_bfloat16* out = nullptr;
      FTX_CUDA_CHECK(
          cudaMallocAsync(reinterpret_cast<void**>(&out), std::max<size_t>(n, 1) * sizeof(__nv_bfloat16), st_));
      blocks_.push_back(out);
      if (n > 0) {
        to_bf16_kernel<<<blocks_for(n, kThreads), kThreads, 0, st_>>>(out, x, n);
        FTX_CUDA_LAUNCHED();
      }
      return out;
    }

   private:
    cudaStream_t st_;
    std::vector<void*> blocks_;
  };

  // Column-major C (m x n) = op(A) op(B) (+ C when accumulate) at the backend's precision. The
  // op's key holds the precision and the mirror pointers, so a step graph records again when
  // either changes.
  void gemm(const char* tag, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* A, int lda,
            const float* B, int ldb, float* C, int ldc, bool accumulate) {
    if (m == 0 || n == 0) return;
    const MatmulPrecision prec = precision_;
    const __nv_bfloat16* A16 = prec == MatmulPrecision::Bf16 ? mirror_of(A) : nullptr;
    const __nv_bfloat16* B16 = prec == MatmulPrecision::Bf16 ? mirror_of(B) : nullptr;
    run(cuda::make_key(tag, ta, tb, m, n, k, A, lda, B, ldb, C, ldc, accumulate, prec, A16, B16), [=, st = stream_] {
      if (prec != MatmulPrecision::Bf16) {
        cublas_gemm(ta, tb, m, n, k, A, lda, B, ldb, C, ldc, accumulate, prec);
        return;
      }
      BfScratch scratch(st);
      // Stored shapes: op(A) is m x k, so A is (m x k) or, transposed, (k x m); B likewise.
      const __nv_bfloat16* a =
          A16 != nullptr ? A16 : scratch.convert(A, ta == CUBLAS_OP_N ? extent(m, k, lda) : extent(k, m, lda));
      const __nv_bfloat16* b =
          B16 != nullptr ? B16 : scratch.convert(B, tb == CUBLAS_OP_N ? extent(k, n, ldb) : extent(n, k, ldb));
      cublas_gemm_bf16(ta, tb, m, n, k, a, lda, b, ldb, C, ldc, accumulate);
    });
  }
  void cublas_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* A, int lda,
                   const float* B, int ldb, float* C, int ldc, bool accumulate, MatmulPrecision prec) const {
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const cublasComputeType_t compute =
        prec == MatmulPrecision::Fp32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
    FTX_CUBLAS_CHECK(cublasGemmEx(cublas_, ta, tb, m, n, k, &one, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, &beta, C,
                                  CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT));
  }
  void cublas_gemm_bf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const __nv_bfloat16* A,
                        int lda, const __nv_bfloat16* B, int ldb, float* C, int ldc, bool accumulate) const {
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    FTX_CUBLAS_CHECK(cublasGemmEx(cublas_, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, C,
                                  CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  void rope(float* x, int B, int T, int nh, int HS, int pos0, float theta, double sign) {
    FT_ASSERT(HS % 2 == 0, "rope: head size %d", HS);
    const size_t n = size_t(B) * T * nh * (HS / 2);
    if (n == 0) return;
    run(cuda::make_key("rope", x, B, T, nh, HS, pos0, theta, sign), [=, st = stream_] {
      rope_kernel<<<blocks_for(n, kThreads), kThreads, 0, st>>>(x, B, T, nh, HS, pos0, double(theta), sign);
      FTX_CUDA_LAUNCHED();
    });
  }

  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  double* partial_ = nullptr;      // sum_squares / clip_grad_norm partials (kReduceBlocks)
  float* clip_factor_ = nullptr;   // (1): clip_grad_norm's factor, read by its scaling kernel
  std::unique_ptr<cuda::StepGraph> graph_;
  MatmulPrecision precision_ = MatmulPrecision::Tf32;
  const float* tracked_ = nullptr;  // track_weights: the weights whose bf16 copy is mirror_
  size_t tracked_n_ = 0;
  __nv_bfloat16* mirror_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    *why = err == cudaSuccess
               ? std::string("no CUDA GPU found")
               : std::string("no CUDA GPU available (the CUDA runtime says: ") + cudaGetErrorString(err) + ")";
    cudaGetLastError();
    return nullptr;
  }
  if (device < 0 || device >= count) {
    *why = "CUDA device " + std::to_string(device) + " does not exist (this machine has " + std::to_string(count) + ")";
    return nullptr;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess || prop.major < 8) {
    *why = std::string("CUDA device ") + std::to_string(device) + " (" + prop.name + ", compute capability " +
           std::to_string(prop.major) + "." + std::to_string(prop.minor) + ") is older than the sm_80 this build needs";
    cudaGetLastError();
    return nullptr;
  }
  return std::make_unique<CudaBackend>(device);
}

bool cuda_backend_built() { return true; }

}  // namespace ftx
