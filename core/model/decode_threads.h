// How many threads a CPU decode step runs on, chosen by measuring (issue 27). A decode step is a
// few hundred small ops; each multi-threaded one ends at a barrier that waits for every thread. On a
// quiet machine two threads read the weights twice as fast as one; beside a CPU-bound process one
// of them is descheduled for whole time slices and every barrier waits for it (measured on 2
// cores with a busy loop on one: 21 tokens/s on 2 threads, 42 on 1). So Model::decode_step times
// its steps and keeps the faster of the user's thread count and one thread.
//
// Schedule. The count in use is `chosen` (the user's count at first). Its last kRecent step times
// are kept. A probe runs up to kProbe steps on the other count:
// - it stops at its first step slower than kLose x the chosen count's median (a probe that loses
//   costs one step: beside a busy core a two-thread step can take 6 one-thread steps);
// - otherwise the other count wins when its median is the lower, and becomes the chosen one.
// Probes come kPeriod steps apart after a switch; each probe lost doubles the gap, up to
// kMaxPeriod. A probe comes at once when the chosen count's median grows past kLose x its median at
// the last probe (a load that starts), so a long gap never hides a busy core for long.
// A new decode state keeps the chosen count and the gap (the load is the machine's, not the
// state's): its first kWarmup steps are not timed and its times start over. A new user's count
// starts everything over.
//
// Deliberately not here: the threads inside an op (OpenMP's, kernels/cpu), prefill and training
// (large ops, where every thread pays), GPUs (Model::decode_step asks only on the CPU).
#pragma once
#include <chrono>
#include <vector>

namespace ftx {

class DecodeThreads {
 public:
  static constexpr int kWarmup = 2, kRecent = 8, kProbe = 4, kPeriod = 64, kMaxPeriod = 256;
  static constexpr double kLose = 1.5;

  // The thread count of the next step of `key` (the decode state), `full` being the user's count.
  int next(const void* key, int full);
  // The seconds the step that next() announced took.
  void record(double seconds);
  // The count in use outside probes (full until a probe won).
  int chosen() const { return chosen_; }

 private:
  int other() const { return chosen_ == 1 ? full_ : 1; }

  const void* key_ = nullptr;
  int full_ = 0, chosen_ = 1;
  int warm_ = 0;                        // untimed steps left of the current state
  int gap_ = 0, period_ = kPeriod;      // steps on `chosen` before the next probe; the gap to set next
  bool probing_ = false;                // the step announced is a probe step
  double reference_ = 0;                // the chosen count's median at the last decision (0: none yet)
  std::vector<double> recent_, probe_;  // the chosen count's last steps; this probe's steps
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
