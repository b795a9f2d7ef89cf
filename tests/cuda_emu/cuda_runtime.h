// A CPU emulation of the CUDA runtime, for test_cuda_emu only: the kernels of kernels/cuda/
// attention.cu, attention_tc.cu and latent.cu compile as C++ against these headers and run with
// one OS thread per CUDA thread of a block. Blocks run one after another; __syncthreads and __syncwarp are
// barriers; shuffles exchange values through a per-warp table between two warp barriers; dynamic
// shared memory is a fresh NaN-filled buffer per block (a read before any write shows up as NaN),
// and a launch over the 48 KB default without cudaFuncSetAttribute, or over the 227 KB of sm_90,
// fails like on a GPU. Stream capture records launches, copies and fills as closures that a graph
// launch replays (what kernels/cuda/step_graph.cu needs); device memory is host memory. What it
// cannot show: timing, races a real GPU exposes, WMMA's alignment rules (mma.h here works on
// whole 16 x 16 matrices).
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __align__(x)
// A block's static shared arrays: one static per function, right while blocks run one at a time.
#define __shared__ static

using std::max;
using std::min;

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

using cudaStream_t = void*;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal,
  cudaStreamCaptureModeThreadLocal,
  cudaStreamCaptureModeRelaxed
};
struct EmuGraph {
  std::vector<std::function<void()>> nodes;
};
using cudaGraph_t = EmuGraph*;
using cudaGraphExec_t = EmuGraph*;

namespace ftx_emu {
inline EmuGraph* capturing = nullptr;  // the graph a stream capture records into
// Runs `op` now, or records it when a capture is under way.
inline void enqueue(std::function<void()> op) {
  if (capturing != nullptr) capturing->nodes.push_back(std::move(op));
  else op();
}
}  // namespace ftx_emu

inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "emulated"; }
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  *p = static_cast<T*>(std::malloc(bytes == 0 ? 1 : bytes));
  return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMallocAsync(T** p, size_t bytes, cudaStream_t) {
  return cudaMalloc(p, bytes);
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t bytes, cudaStream_t) {
  ftx_emu::enqueue([=] { std::memset(p, v, bytes); });
  return cudaSuccess;
}
// Like a graph's memcpy node, a recorded copy reads its source when the graph runs.
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
  ftx_emu::enqueue([=] { std::memcpy(dst, src, bytes); });
  return cudaSuccess;
}
inline cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
  if (ftx_emu::capturing != nullptr) return cudaErrorInvalidValue;
  ftx_emu::capturing = new EmuGraph;
  return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* g) {
  if (ftx_emu::capturing == nullptr) return cudaErrorInvalidValue;
  *g = ftx_emu::capturing;
  ftx_emu::capturing = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long) {
  *e = new EmuGraph(*g);
  return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t) {
  for (auto& node : e->nodes) node();
  return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  delete e;
  return cudaSuccess;
}

namespace ftx_emu {

constexpr size_t kDefaultSmem = 48 << 10, kMaxSmem = 227 << 10;

struct Block {
  std::unique_ptr<std::barrier<>> all;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<std::array<uint64_t, 32>> slots;  // shuffle exchange, one row per warp
  std::vector<double> smem;                     // double: 8-byte aligned for any element type
};
inline thread_local Block* block = nullptr;

inline std::map<const void*, size_t>& smem_limits() {
  static std::map<const void*, size_t> m;
  return m;
}

template <class T>
T* shared() {
  return reinterpret_cast<T*>(block->smem.data());
}

template <class K, class... A>
void run_blocks(dim3 grid, dim3 threads, size_t smem_bytes, K kernel, A... args);

template <class K, class... A>
void launch(dim3 grid, dim3 threads, size_t smem_bytes, K kernel, A... args) {
  enqueue([=] { run_blocks(grid, threads, smem_bytes, kernel, args...); });
}

template <class K, class... A>
void run_blocks(dim3 grid, dim3 threads, size_t smem_bytes, K kernel, A... args) {
  const unsigned n = threads.x * threads.y * threads.z;
  const auto lim = smem_limits().find(reinterpret_cast<const void*>(kernel));
  const size_t allowed = lim == smem_limits().end() ? kDefaultSmem : lim->second;
  if (n == 0 || n > 1024 || n % 32 != 0 || smem_bytes > allowed || smem_bytes > kMaxSmem) {
    std::fprintf(stderr, "emulated launch refused: %u threads, %zu bytes of shared memory (allowed %zu)\n", n,
                 smem_bytes, allowed);
    std::abort();
  }
  // One OS thread per CUDA thread of a block, reused for every block of the grid in turn.
  Block b;
  b.all = std::make_unique<std::barrier<>>(n);
  for (unsigned w = 0; w < n / 32; ++w) b.warps.push_back(std::make_unique<std::barrier<>>(32));
  b.slots.resize(n / 32);
  const unsigned blocks = grid.x * grid.y * grid.z;
  std::vector<std::thread> ts;
  ts.reserve(n);
  for (unsigned t = 0; t < n; ++t)
    ts.emplace_back([&, t] {
      threadIdx = {t % threads.x, t / threads.x % threads.y, t / (threads.x * threads.y)};
      blockDim = threads, gridDim = grid;
      block = &b;
      for (unsigned i = 0; i < blocks; ++i) {
        if (t == 0) b.smem.assign(smem_bytes / sizeof(double) + 1, std::numeric_limits<double>::quiet_NaN());
        blockIdx = {i % grid.x, i / grid.x % grid.y, i / (grid.x * grid.y)};
        b.all->arrive_and_wait();  // fresh shared memory for the block
        kernel(args...);
        b.all->arrive_and_wait();  // every thread is done before the next block reuses it
      }
    });
  for (auto& t : ts) t.join();
}

inline unsigned linear_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

}  // namespace ftx_emu

inline void __syncthreads() { ftx_emu::block->all->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  ftx_emu::block->warps[ftx_emu::linear_thread() / 32]->arrive_and_wait();
}

template <class T>
T __shfl_sync(unsigned, T v, int src) {
  static_assert(sizeof(T) <= 8);
  const unsigned t = ftx_emu::linear_thread(), w = t / 32, l = t % 32;
  auto& row = ftx_emu::block->slots[w];
  ftx_emu::block->warps[w]->arrive_and_wait();
  std::memcpy(&row[l], &v, sizeof(T));
  ftx_emu::block->warps[w]->arrive_and_wait();
  T out;
  std::memcpy(&out, &row[unsigned(src) % 32], sizeof(T));
  return out;
}
template <class T>
T __shfl_xor_sync(unsigned m, T v, int o) {
  return __shfl_sync(m, v, int(ftx_emu::linear_thread() % 32) ^ o);
}

template <class K>
cudaError_t cudaFuncSetAttribute(K* kernel, cudaFuncAttribute, int v) {
  ftx_emu::smem_limits()[reinterpret_cast<const void*>(kernel)] = size_t(v);
  return cudaSuccess;
}

inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
[[noreturn]] inline void __trap() { std::abort(); }

#define FTX_LAUNCH(kernel, grid, block, smem, stream, ...) ::ftx_emu::launch(grid, block, smem, kernel, __VA_ARGS__)
#define FTX_DYNAMIC_SHARED(T, name) T* name = ::ftx_emu::shared<T>()
