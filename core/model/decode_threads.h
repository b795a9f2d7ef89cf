// How many threads a CPU decode step runs on, chosen by measuring (issue 27). A decode step is a
// few hundred small ops; each multi-threaded one ends at a barrier that waits for every thread. On a
// quiet machine two threads read the weights twice as fast as one; beside a CPU-bound process one
// of them is descheduled for whole time slices and every barrier waits for it (measured on 2
// cores with a busy loop on one: 21 tokens/s on 2 threads, 42 on 1). So Model::decode_step times
// its steps and keeps the faster of the user's thread count and one thread, trying both again
// every kPeriod steps in case the load changed.
//
// Schedule, per decode state (a new state starts over): kWarmup steps at full count, untimed; then
// periods of kPeriod steps, each opening with kProbe steps at full count and kProbe at one thread
// (their medians decide), the rest of the period on the winner. At most 2 x kProbe / kPeriod of
// the steps run on the worse count.
//
// Deliberately not here: the threads inside an op (OpenMP's, kernels/cpu), prefill and training
// (large ops, where every thread pays), GPUs (Model::decode_step asks only on the CPU).
#pragma once
#include <chrono>
#include <vector>

namespace ftx {

class DecodeThreads {
 public:
  static constexpr int kWarmup = 2, kProbe = 4, kPeriod = 64;

  // The thread count of the next step of `key` (the decode state), `full` being the user's count.
  int next(const void* key, int full);
  // The seconds the step that next() announced took.
  void record(double seconds);
  // The count the last decision chose (full until one was made).
  int chosen() const { return chosen_; }

 private:
  // Where step_ falls: -1 in the warm-up, else its place in the period (0 .. kPeriod - 1).
  int phase() const { return step_ < kWarmup ? -1 : (step_ - kWarmup) % kPeriod; }

  const void* key_ = nullptr;
  int full_ = 1, chosen_ = 1, step_ = 0;
  std::vector<double> on_full_, on_one_;
};

// Around one decode step on the calling thread: sets OpenMP's thread count for the step from
// the thread's DecodeThreads and restores it after, recording the time.
class DecodeThreadScope {
 public:
  explicit DecodeThreadScope(const void* key);
  ~DecodeThreadScope();
  DecodeThreadScope(const DecodeThreadScope&) = delete;
  DecodeThreadScope& operator=(const DecodeThreadScope&) = delete;

 private:
  int restore_;
  DecodeThreads* threads_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace ftx
