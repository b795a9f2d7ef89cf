// The decode steps' thread count, chosen by measuring (core/model/decode_threads.h).
#include "core/model/decode_threads.h"

#include <omp.h>

#include <algorithm>

namespace ftx {
namespace {

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

int DecodeThreads::next(const void* key, int full) {
  if (key != key_ || full != full_) {
    key_ = key, full_ = full, chosen_ = full, step_ = 0;
    on_full_.clear(), on_one_.clear();
  }
  if (full_ <= 1) return 1;
  const int at = phase();
  return at < kProbe ? full_ : at < 2 * kProbe ? 1 : chosen_;  // warm-up (at < 0) on full_ too
}

void DecodeThreads::record(double seconds) {
  const int at = phase();
  ++step_;
  if (full_ <= 1 || at < 0 || at >= 2 * kProbe) return;
  (at < kProbe ? on_full_ : on_one_).push_back(seconds);
  if (at == 2 * kProbe - 1) {  // both probed: decide for the rest of the period
    chosen_ = median(on_one_) < median(on_full_) ? 1 : full_;
    on_full_.clear(), on_one_.clear();
  }
}

DecodeThreadScope::DecodeThreadScope(const void* key) : restore_(omp_get_max_threads()) {
  thread_local DecodeThreads threads;
  threads_ = &threads;
  omp_set_num_threads(threads.next(key, restore_));
  t0_ = std::chrono::steady_clock::now();
}

DecodeThreadScope::~DecodeThreadScope() {
  threads_->record(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  omp_set_num_threads(restore_);
}

}  // namespace ftx
