// Step graphs for the CUDA backend (Backend::begin_graph / end_graph): the ops of one training
// step are recorded once into a CUDA graph and replayed, so that a small model is not bound by
// the CPU's kernel launches.
//
// How: every op of the backend hands run() an Op: a launch and its key, both made by make_op
// from one argument list (the tag, the launcher and every argument the launcher reads: pointers,
// sizes, constant scalars), so no argument can reach the launch without reaching the key.
//   - Outside a step, run() launches at once.
//   - The first step runs its closures while the stream is capturing, and keeps their keys.
//   - Later steps only collect closures and keys. At end(), if the keys equal the recorded ones,
//     the graph is replayed; otherwise the collected closures are captured into a new graph.
// Scalars that change from step to step (lr, the AdamW step, kappa, the Philox stream) enter the
// key by where they are read, not by their value: the op asks scalar() for a Dyn, which kernels
// read through a pointer into a small device table that end() refreshes from the host before every
// launch. table() does the same for small arrays (the AdamW segments): its pointer is the key word.
//
// Deliberately not here: patching kernel nodes, several streams, graphs outside training steps.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_common.h"

namespace ftx::cuda {

// One op of a step: what it launches and the key that says when a recorded launch may stand in
// for it. Made by make_op (below).
struct Op {
  std::vector<uint64_t> key;
  std::function<void()> launch;
};

class StepGraph {
 public:
  explicit StepGraph(cudaStream_t stream);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  bool active() const { return mode_ != Mode::Idle; }
  void begin();
  void end();
  // Counters for tests and benchmarks (Backend::graph_stats).
  int captures() const { return captures_; }
  int replays() const { return replays_; }

  // Launch (or record, or defer) one op.
  void run(Op&& op);

  // A scalar that may differ between replays of the same graph.
  template <class T>
  Dyn<T> scalar(T value) {
    static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
    if (mode_ == Mode::Idle || mode_ == Mode::Eager) return Dyn<T>{nullptr, value};
    const size_t at = reserve(sizeof(uint64_t));
    std::memcpy(host_slots_.data() + at, &value, sizeof(T));
    return Dyn<T>{reinterpret_cast<const T*>(dev_slots_ + at), value};
  }
  // A small array in device memory, valid for the op that asked (stream order).
  const void* table(const void* host, size_t bytes);

 private:
  enum class Mode { Idle, Eager, Capture, Replay };
  size_t reserve(size_t bytes);  // aligned to 16 bytes, in the slot area
  void capture(const std::vector<std::function<void()>>& launches);
  void upload_slots();  // the step's scalars and tables, before its kernels run
  void launch_graph();

  static constexpr size_t kSlotBytes = size_t(64) << 10;  // scalars and tables of one step

  cudaStream_t stream_;
  bool enabled_ = true;  // FTX_CUDA_GRAPHS=0 turns graphs off (steps run op by op)
  Mode mode_ = Mode::Idle;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<std::vector<uint64_t>> recorded_;  // keys of the graph in exec_
  std::vector<std::vector<uint64_t>> keys_;      // keys of this step
  std::vector<std::function<void()>> launches_;  // deferred closures of this step (Replay)
  bool matches_ = true;                          // keys_ so far equal recorded_'s prefix
  int misses_in_a_row_ = 0;
  int captures_ = 0, replays_ = 0;
  std::vector<unsigned char> host_slots_;
  size_t used_ = 0;
  unsigned char* dev_slots_ = nullptr;    // kSlotBytes: read by the graph
  unsigned char* eager_table_ = nullptr;  // kSlotBytes: table() outside a graph
};

// Key words of one op: the tag's address, then each argument as 64 bits (pointers by address,
// floats by their bits, a Dyn by the slot it is read from, an AttnShape field by field). Two calls
// with equal keys launch the same kernels on the same buffers. An argument type without a key_word
// does not compile.
inline uint64_t key_word(const void* p) { return reinterpret_cast<uintptr_t>(p); }
inline uint64_t key_word(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
inline uint64_t key_word(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
template <class T, std::enable_if_t<std::is_integral_v<T> || std::is_enum_v<T>, int> = 0>
uint64_t key_word(T x) {
  return static_cast<uint64_t>(x);
}
// Inside a step the value changes between replays and lives in its slot; outside, no key is kept.
template <class T>
uint64_t key_word(const Dyn<T>& d) {
  return d.p != nullptr ? key_word(static_cast<const void*>(d.p)) : key_word(d.v);
}

template <class T>
void append_key(std::vector<uint64_t>& key, const T& x) {
  key.push_back(key_word(x));
}
inline void append_key(std::vector<uint64_t>& key, const AttnShape& s) {
  static_assert(sizeof(AttnShape) == 9 * sizeof(int), "a new AttnShape field belongs in its key");
  for (int v : {s.B, s.NH, s.NKV, s.HS, s.Tq, s.Tk, s.Tk_cap, s.q_pos0}) key.push_back(key_word(v));
  key.push_back(key_word(s.causal));
}

template <class... A>
std::vector<uint64_t> make_key(const char* tag, const A&... args) {
  std::vector<uint64_t> key{key_word(static_cast<const void*>(tag))};
  (append_key(key, args), ...);
  return key;
}

// The op `tag` that runs launcher(args..., stream), keyed by the tag, the launcher and every
// argument. The launcher captures nothing (a function, or a lambda with an empty capture list):
// whatever it reads comes through args, and so is in the key.
template <class F, class... A>
Op make_op(const char* tag, F launcher, cudaStream_t stream, A... args) {
  static_assert(std::is_empty_v<F> || std::is_pointer_v<F>,
                "a launcher captures nothing: pass what it reads as arguments, so that they are in the key");
  Op op{make_key(tag, args...), [=] { launcher(args..., stream); }};
  if constexpr (std::is_pointer_v<F>) op.key.push_back(reinterpret_cast<uintptr_t>(launcher));
  return op;
}

}  // namespace ftx::cuda
