#include "kernels/cuda/step_graph.h"

#include <cstdio>
#include <cstdlib>

#include "kernels/base/assert.h"

namespace ftx::cuda {

StepGraph::StepGraph(cudaStream_t stream) : stream_(stream), host_slots_(kSlotBytes) {
  FTX_CUDA_CHECK(cudaMalloc(&dev_slots_, kSlotBytes));
  FTX_CUDA_CHECK(cudaMalloc(&eager_table_, kSlotBytes));
  const char* env = std::getenv("FTX_CUDA_GRAPHS");
  enabled_ = !(env != nullptr && std::strcmp(env, "0") == 0);
}

StepGraph::~StepGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  cudaFree(dev_slots_);
  cudaFree(eager_table_);
}

void StepGraph::begin() {
  FT_ASSERT(mode_ == Mode::Idle, "begin_graph inside a step graph");
  keys_.clear();
  launches_.clear();
  used_ = 0;
  matches_ = true;
  if (!enabled_) {
    mode_ = Mode::Eager;
  } else if (exec_ != nullptr) {
    mode_ = Mode::Replay;
  } else {
    mode_ = Mode::Capture;
    capture({});
  }
}

void StepGraph::run(Op&& op) {
  switch (mode_) {
    case Mode::Idle:
    case Mode::Eager:
      op.launch();
      return;
    case Mode::Capture:
      op.launch();
      keys_.push_back(std::move(op.key));
      return;
    case Mode::Replay:
      if (matches_) matches_ = keys_.size() < recorded_.size() && recorded_[keys_.size()] == op.key;
      keys_.push_back(std::move(op.key));
      launches_.push_back(std::move(op.launch));
      return;
  }
}

size_t StepGraph::reserve(size_t bytes) {
  const size_t at = (used_ + 15) & ~size_t(15);
  FT_ASSERT(at + bytes <= kSlotBytes, "step graph: more than %zu bytes of step scalars", kSlotBytes);
  used_ = at + bytes;
  return at;
}

const void* StepGraph::table(const void* host, size_t bytes) {
  if (mode_ == Mode::Idle || mode_ == Mode::Eager) {
    FT_ASSERT(bytes <= kSlotBytes, "step graph: table of %zu bytes", bytes);
    // Pageable source: the copy has read it when the call returns; stream order protects the
    // previous user of eager_table_.
    FTX_CUDA_CHECK(cudaMemcpyAsync(eager_table_, host, bytes, cudaMemcpyHostToDevice, stream_));
    return eager_table_;
  }
  const size_t at = reserve(bytes);
  std::memcpy(host_slots_.data() + at, host, bytes);
  return dev_slots_ + at;
}

// Relaxed capture: other threads (the studio's UI, an explorer on another backend) may use CUDA
// meanwhile, and library calls made while capturing (cuBLAS, cudaFuncSetAttribute) are allowed.
void StepGraph::capture(const std::vector<std::function<void()>>& launches) {
  FTX_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  for (const auto& f : launches) f();
}

void StepGraph::upload_slots() {
  if (used_ > 0)
    FTX_CUDA_CHECK(cudaMemcpyAsync(dev_slots_, host_slots_.data(), used_, cudaMemcpyHostToDevice, stream_));
}

void StepGraph::launch_graph() {
  upload_slots();
  FTX_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
}

void StepGraph::end() {
  FT_ASSERT(mode_ != Mode::Idle, "end_graph without begin_graph");
  const Mode mode = mode_;
  mode_ = Mode::Idle;
  if (mode == Mode::Eager) return;
  if (mode == Mode::Replay && matches_ && keys_.size() == recorded_.size()) {
    launches_.clear();
    misses_in_a_row_ = 0;
    ++replays_;
    launch_graph();
    return;
  }
  if (mode == Mode::Replay) {
    // The step differs from the recorded one (shapes, buffers or a constant changed): record it
    // anew. A step that never repeats gains nothing from graphs: after three misses in a row,
    // run eagerly from then on.
    if (++misses_in_a_row_ >= 3) {
      std::fprintf(stderr, "ftx: CUDA step graphs turned off: the training step changes every time\n");
      enabled_ = false;
      FTX_CUDA_CHECK(cudaGraphExecDestroy(exec_));
      exec_ = nullptr;
      upload_slots();
      for (const auto& f : launches_) f();
      launches_.clear();
      return;
    }
    capture(launches_);
    launches_.clear();
  }
  cudaGraph_t graph = nullptr;
  FTX_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  if (exec_ != nullptr) FTX_CUDA_CHECK(cudaGraphExecDestroy(exec_));
  exec_ = nullptr;
  FTX_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph, 0));
  FTX_CUDA_CHECK(cudaGraphDestroy(graph));
  recorded_ = std::move(keys_);
  keys_.clear();
  ++captures_;
  launch_graph();
}

}  // namespace ftx::cuda
