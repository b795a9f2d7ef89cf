// A CPU emulation of the CUDA runtime, for test_cuda_emu only: the kernels of kernels/cuda compile
// as C++ against these headers and run with one fiber per CUDA thread of a block, on the
// launching thread. Blocks run one after another; __syncthreads and __syncwarp are barriers;
// shuffles exchange values through a per-warp table between two warp barriers; dynamic
// shared memory is a fresh NaN-filled buffer per block (a read before any write shows up as NaN),
// and a launch over the 48 KB default without cudaFuncSetAttribute, or over the 227 KB of sm_90,
// fails like on a GPU. Stream capture records launches, copies and fills as closures that a graph
// launch replays (what kernels/cuda/step_graph.cu needs); device memory is host memory, filled
// with NaN when freed. FTX_EMU_ORDER=reverse runs blocks and threads last first, which shows a
// missing barrier that the usual order hides. What it cannot show: timing, races that need two
// threads to interleave between barriers (a fiber runs until it waits), what WMMA does inside a
// warp (mma.h here works on whole 16 x 16 matrices, but checks WMMA's pointer and
// leading-dimension rules).
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ucontext.h>

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
inline uint3 threadIdx, blockIdx;  // of the fiber running now
inline dim3 blockDim, gridDim;

using cudaStream_t = void*;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
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
inline EmuGraph* capturing = nullptr;    // the graph a stream capture records into
inline size_t device_memory = SIZE_MAX;  // a test may shrink the emulated GPU: larger cudaMallocs fail
// Runs `op` now, or records it when a capture is under way.
inline void enqueue(std::function<void()> op) {
  if (capturing != nullptr)
    capturing->nodes.push_back(std::move(op));
  else
    op();
}
}  // namespace ftx_emu

// One emulated device: an "sm_90" with the H100's shared memory.
struct cudaDeviceProp {
  char name[256] = "emulated CUDA device (CPU threads)";
  int major = 9, minor = 0;
};
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  *p = cudaDeviceProp{};
  return device == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
inline cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidValue; }
// Streams and events: every op runs when queued, so order is never wrong here; what the glue asks
// for is kept instead. A stream is a distinct handle (never dereferenced), and every event
// record, stream wait and NCCL call (nccl.h) is written to stream_trace(): "wait S on R" (stream S
// waits for what stream R had queued when the event was recorded), "allreduce N on S".
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDisableTiming = 2;
namespace ftx_emu {
inline std::vector<std::string>& stream_trace() {
  static std::vector<std::string> trace;
  return trace;
}
inline std::string stream_name(void* s) { return "s" + std::to_string(reinterpret_cast<uintptr_t>(s)); }
}  // namespace ftx_emu
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  static uintptr_t made = 0;
  *s = reinterpret_cast<cudaStream_t>(++made);
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }  // every op ran when queued
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
struct EmuEvent {
  cudaStream_t recorded_on = nullptr;
};
using cudaEvent_t = EmuEvent*;
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new EmuEvent;
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  e->recorded_on = s;
  return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  if (e->recorded_on == nullptr) return cudaErrorInvalidValue;  // never recorded: a wait on nothing
  ftx_emu::stream_trace().push_back("wait " + ftx_emu::stream_name(s) + " on " + ftx_emu::stream_name(e->recorded_on));
  return cudaSuccess;
}
using cudaMemPool_t = void*;
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold };
inline cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int) {
  *pool = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }

inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "emulated"; }
namespace ftx_emu {
inline std::map<const void*, size_t>& allocations() {  // live device allocations and their sizes
  static std::map<const void*, size_t> m;
  return m;
}
}  // namespace ftx_emu
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  if (bytes > ftx_emu::device_memory) return cudaErrorMemoryAllocation;
  *p = static_cast<T*>(std::malloc(bytes == 0 ? 1 : bytes));
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  ftx_emu::allocations()[*p] = bytes;
  return cudaSuccess;
}
// Freed memory is filled with NaN bytes first: a kernel that reads it afterwards sees NaN.
inline cudaError_t cudaFree(void* p) {
  const auto a = ftx_emu::allocations().find(p);
  if (a != ftx_emu::allocations().end()) {
    std::memset(p, 0xFF, a->second);
    ftx_emu::allocations().erase(a);
  }
  std::free(p);
  return cudaSuccess;
}
// Stream-ordered allocation: while a capture records, the memory belongs to the graph for good
// (a real graph allocates at every launch; the emulation keeps one allocation and never frees it).
template <class T>
cudaError_t cudaMallocAsync(T** p, size_t bytes, cudaStream_t) {
  return cudaMalloc(p, bytes);
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) {
  return ftx_emu::capturing != nullptr ? cudaSuccess : cudaFree(p);
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t bytes, cudaStream_t) {
  ftx_emu::enqueue([=] { std::memset(p, v, bytes); });
  return cudaSuccess;
}
// Like a graph's memcpy node, a recorded copy reads its source when the graph runs.
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
  ftx_emu::enqueue([=] { std::memcpy(dst, src, bytes); });
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind, cudaStream_t) {
  ftx_emu::enqueue([=] {
    for (size_t r = 0; r < height; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  });
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

// A barrier among fibers: the last to arrive opens it, the others yield until it has opened.
struct Barrier {
  unsigned expected = 0, arrived = 0;
  uint64_t generation = 0;
};

// The CUDA threads of one block as fibers (ucontext) on the launching OS thread: a fiber runs
// until it waits at a barrier or ends, then the next one runs. Switching fibers costs far less
// than waking OS threads, and warps shuffle at every reduction.
struct Fiber {
  ucontext_t ctx{};
  std::unique_ptr<char[]> stack;  // uninitialised: zeroing 256 of them per launch would cost more than the kernel
  uint3 idx;
  bool done = false;
};

struct Block {
  Barrier all;
  std::vector<Barrier> warps;
  std::vector<std::array<uint64_t, 32>> slots;                                // shuffle exchange, one row per warp
  std::unique_ptr<double[], decltype(&std::free)> smem{nullptr, &std::free};  // 128-byte aligned, like a GPU's
  std::vector<Fiber> fibers;
  ucontext_t scheduler{};
  unsigned current = 0;
  uint64_t events = 0;  // barrier openings and fiber ends: progress, for deadlock detection
  const std::function<void()>* body = nullptr;
};
inline Block* block = nullptr;  // the block being run (blocks run one at a time)

inline std::map<const void*, size_t>& smem_limits() {
  static std::map<const void*, size_t> m;
  return m;
}

template <class T>
T* shared() {
  return reinterpret_cast<T*>(block->smem.get());
}

// The order in which blocks run, and fibers resume at every barrier: FTX_EMU_ORDER=reverse runs
// the last block and the last thread first. Run in both orders, a kernel shows its missing
// barriers: a thread that reads what another writes in the same barrier interval reads it
// unwritten (NaN in dynamic shared memory) in one order or the other, as do blocks that rely on
// each other's output or race on a store.
inline const bool reverse_order = [] {
  const char* v = std::getenv("FTX_EMU_ORDER");
  return v != nullptr && std::strcmp(v, "reverse") == 0;
}();
inline unsigned in_order(unsigned i, unsigned n) { return reverse_order ? n - 1 - i : i; }

constexpr size_t kStackBytes = size_t(128) << 10;  // per fiber: the WMMA kernels keep fragments on it

inline void fiber_main() {
  (*block->body)();
  block->fibers[block->current].done = true;
  ++block->events;
}  // returns to the scheduler through uc_link

inline void wait(Barrier& bar) {
  const uint64_t g = bar.generation;
  if (++bar.arrived == bar.expected) {
    bar.arrived = 0;
    ++bar.generation;
    ++block->events;
    return;
  }
  while (bar.generation == g) {
    const unsigned me = block->current;
    swapcontext(&block->fibers[me].ctx, &block->scheduler);
    threadIdx = block->fibers[me].idx;
  }
}

template <class K, class... A>
void run_blocks(dim3 grid, dim3 threads, size_t smem_bytes, K kernel, A... args);

template <class K, class... A>
void launch(dim3 grid, dim3 threads, size_t smem_bytes, K kernel, A... args) {
  enqueue([=] { run_blocks(grid, threads, smem_bytes, kernel, args...); });
}

// Thread t of block b, ready to run fiber_main from the top. Out of line: getcontext returns twice
// as far as the compiler knows, which would make run_blocks' loop counters look clobbered.
[[gnu::noinline]] inline void start_fiber(Block& b, unsigned t, dim3 threads) {
  Fiber& f = b.fibers[t];
  f.idx = {t % threads.x, t / threads.x % threads.y, t / (threads.x * threads.y)};
  f.done = false;
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.get();
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = &b.scheduler;
  makecontext(&f.ctx, fiber_main, 0);
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
  Block b;
  b.all.expected = n;
  b.warps.assign(n / 32, Barrier{32});
  b.slots.resize(n / 32);
  b.fibers.resize(n);
  for (Fiber& f : b.fibers) f.stack.reset(new char[kStackBytes]);
  const std::function<void()> body = [&] { kernel(args...); };
  b.body = &body;
  Block* const outer = block;
  block = &b;
  const unsigned blocks = grid.x * grid.y * grid.z;
  for (unsigned k = 0; k < blocks; ++k) {
    const unsigned i = in_order(k, blocks);
    const size_t words = smem_bytes / sizeof(double) + 16;
    b.smem.reset(static_cast<double*>(std::aligned_alloc(128, words * sizeof(double))));
    std::fill(b.smem.get(), b.smem.get() + words, std::numeric_limits<double>::quiet_NaN());
    blockIdx = {i % grid.x, i / grid.x % grid.y, i / (grid.x * grid.y)};
    blockDim = threads, gridDim = grid;
    for (unsigned t = 0; t < n; ++t) start_fiber(b, t, threads);
    for (unsigned left = n; left > 0;) {
      const uint64_t before = b.events;
      for (unsigned k = 0; k < n; ++k) {
        const unsigned t = in_order(k, n);
        if (b.fibers[t].done) continue;
        b.current = t;
        threadIdx = b.fibers[t].idx;
        swapcontext(&b.scheduler, &b.fibers[t].ctx);
        if (b.fibers[t].done) --left;
      }
      if (left > 0 && b.events == before) {
        std::fprintf(stderr, "emulated kernel deadlocked: threads wait at barriers that never open\n");
        std::abort();
      }
    }
  }
  block = outer;
}

inline unsigned linear_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

}  // namespace ftx_emu

inline void __syncthreads() { ftx_emu::wait(ftx_emu::block->all); }
inline void __syncwarp(unsigned = 0xffffffffu) { ftx_emu::wait(ftx_emu::block->warps[ftx_emu::linear_thread() / 32]); }

template <class T>
T __shfl_sync(unsigned, T v, int src) {
  static_assert(sizeof(T) <= 8);
  const unsigned t = ftx_emu::linear_thread(), w = t / 32, l = t % 32;
  auto& row = ftx_emu::block->slots[w];
  ftx_emu::wait(ftx_emu::block->warps[w]);
  std::memcpy(&row[l], &v, sizeof(T));
  ftx_emu::wait(ftx_emu::block->warps[w]);
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

inline float atomicAdd(float* p, float v) {  // fibers never run at once: a plain add is atomic here
  const float old = *p;
  *p = old + v;
  return old;
}
[[noreturn]] inline void __trap() { std::abort(); }

#define FTX_LAUNCH(kernel, grid, block, smem, stream, ...) \
  ((void)(stream), ::ftx_emu::launch(grid, block, smem, kernel, __VA_ARGS__))
#define FTX_DYNAMIC_SHARED(T, name) T* name = ::ftx_emu::shared<T>()
