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
  if (full != full_) full_ = full, chosen_ = full, period_ = kPeriod, gap_ = 0, key_ = nullptr;
  if (key != key_) {
    key_ = key, warm_ = kWarmup, reference_ = 0;
    recent_.clear(), probe_.clear();
  }
  probing_ = false;
  if (full_ <= 1 || warm_ > 0) return chosen_;
  probing_ = !probe_.empty() || (gap_ <= 0 && int(recent_.size()) >= kProbe);
  return probing_ ? other() : chosen_;
}

void DecodeThreads::record(double seconds) {
  if (full_ <= 1) return;
  if (warm_ > 0) {
    --warm_;
    return;
  }
  if (!probing_) {
    recent_.push_back(seconds);
    if (int(recent_.size()) > kRecent) recent_.erase(recent_.begin());
    --gap_;
    if (int(recent_.size()) < kProbe) return;
    if (reference_ == 0)
      reference_ = median(recent_);
    else if (median(recent_) > kLose * reference_)
      gap_ = 0;  // the chosen count got slower: a load started, probe now
    return;
  }
  probe_.push_back(seconds);
  const double mine = median(recent_);
  const bool slow = seconds > kLose * mine;          // a probe loses at its first slow step
  if (!slow && int(probe_.size()) < kProbe) return;  // the probe goes on
  if (!slow && median(probe_) < mine) {
    chosen_ = other(), period_ = kPeriod;
    recent_ = probe_;
  } else {
    period_ = std::min(2 * period_, kMaxPeriod);
  }
  probe_.clear();
  gap_ = period_, reference_ = median(recent_);
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
