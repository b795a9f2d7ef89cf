// Shared by the .cu files of the CUDA backend: error checks and launch geometry. Errors of the
// CUDA runtime or cuBLAS inside an op are bugs or a lost device: they print file:line and abort
// (FT_ASSERT's policy); what a user controls (no GPU, too little memory) is answered earlier, by
// make_cuda_backend and try_alloc.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define FTX_CUDA_CHECK(call)                                                                                    \
  do {                                                                                                          \
    cudaError_t err_ = (call);                                                                                  \
    if (err_ != cudaSuccess) {                                                                                  \
      std::fprintf(stderr, "%s:%d: CUDA error: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::abort();                                                                                             \
    }                                                                                                           \
  } while (0)

#define FTX_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                           \
    cublasStatus_t st_ = (call);                                                                 \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                          \
      std::fprintf(stderr, "%s:%d: cuBLAS error %d: %s\n", __FILE__, __LINE__, int(st_), #call); \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

// kernel<<<grid, block, smem_bytes, stream>>>(args...), and the block's dynamic shared memory. Macros
// so that tests/cuda_emu can run the kernels of attention.cu, attention_tc.cu and latent.cu on
// CPU threads (it defines both before including this header).
#ifndef FTX_LAUNCH
#define FTX_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#define FTX_DYNAMIC_SHARED(T, name) extern __shared__ __align__(128) T name[]
#endif

// After a kernel launch: a bad configuration is reported where it happened.
#define FTX_CUDA_LAUNCHED() FTX_CUDA_CHECK(cudaGetLastError())

namespace ftx {
class Backend;
}

namespace ftx::cuda {

// A CudaBackend's device and stream (cuda_backend.cu), for code outside it that queues work in its
// order (nccl_comm.cu); device -1 and no stream for another backend.
struct BackendHandles {
  int device = -1;
  cudaStream_t stream = nullptr;
};
BackendHandles backend_handles(Backend& be);

// A kernel argument that a replayed step graph may change (kernels/cuda/step_graph.h): kernels
// read *p when it is set (a slot the graph's launch refreshes), v otherwise.
template <class T>
struct Dyn {
  const T* p = nullptr;
  T v{};
  __host__ __device__ T get() const { return p != nullptr ? *p : v; }
};

inline unsigned blocks_for(size_t n, unsigned threads) { return unsigned((n + threads - 1) / threads); }

constexpr unsigned kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace ftx::cuda
