// The decode steps' thread count (core/model/decode_threads.h): the schedule of probes and the
// choice from measured times, given made-up step times (a busy machine where one thread is faster,
// a quiet one where the full count is, a load that changes between periods, a new decode state).
#include <gtest/gtest.h>

#include <vector>

#include "core/model/decode_threads.h"

namespace {

using ftx::DecodeThreads;

// Runs `steps` steps of `key` with `full` threads; a step on n threads takes time(n) seconds.
// Returns the thread counts used, in order.
template <class F>
std::vector<int> run(DecodeThreads& g, const void* key, int full, int steps, F time) {
  std::vector<int> used;
  for (int i = 0; i < steps; ++i) {
    const int n = g.next(key, full);
    used.push_back(n);
    g.record(time(n));
  }
  return used;
}

constexpr int kFirstDecision = DecodeThreads::kWarmup + 2 * DecodeThreads::kProbe;

TEST(DecodeThreads, ProbesBothCountsThenKeepsTheFasterOne) {
  DecodeThreads g;
  int key = 0;
  // Busy machine: one thread 20 ms, two 45 ms.
  const std::vector<int> busy = run(g, &key, 2, 64, [](int n) { return n == 1 ? 0.020 : 0.045; });
  for (int i = 0; i < DecodeThreads::kWarmup + DecodeThreads::kProbe; ++i) EXPECT_EQ(busy[size_t(i)], 2) << i;
  for (int i = DecodeThreads::kWarmup + DecodeThreads::kProbe; i < kFirstDecision; ++i) EXPECT_EQ(busy[size_t(i)], 1);
  for (int i = kFirstDecision; i < 64; ++i) EXPECT_EQ(busy[size_t(i)], 1) << "step " << i;
  EXPECT_EQ(g.chosen(), 1);
}

TEST(DecodeThreads, AQuietMachineKeepsEveryThread) {
  DecodeThreads g;
  int key = 0;
  const std::vector<int> quiet = run(g, &key, 2, 40, [](int n) { return n == 1 ? 0.030 : 0.016; });
  for (int i = kFirstDecision; i < 40; ++i) EXPECT_EQ(quiet[size_t(i)], 2) << "step " << i;
  EXPECT_EQ(g.chosen(), 2);
}

TEST(DecodeThreads, ALoadThatEndsIsNoticedAtTheNextPeriod) {
  DecodeThreads g;
  int key = 0;
  int step = 0;
  const int load_ends = DecodeThreads::kWarmup + DecodeThreads::kPeriod / 2;
  const std::vector<int> used = run(g, &key, 4, DecodeThreads::kWarmup + 2 * DecodeThreads::kPeriod, [&](int n) {
    const bool busy = step++ < load_ends;
    return busy ? (n == 1 ? 0.02 : 0.05) : (n == 1 ? 0.02 : 0.008);
  });
  EXPECT_EQ(used[size_t(load_ends - 1)], 1) << "busy: one thread";
  EXPECT_EQ(used.back(), 4) << "quiet again: the full count after the next probes";
  EXPECT_EQ(g.chosen(), 4);
}

TEST(DecodeThreads, ANewDecodeStateStartsOverAndOneThreadIsLeftAlone) {
  DecodeThreads g;
  int a = 0, b = 0;
  run(g, &a, 2, 20, [](int n) { return n == 1 ? 0.01 : 0.05; });
  EXPECT_EQ(g.chosen(), 1);
  const std::vector<int> fresh = run(g, &b, 2, 1, [](int) { return 0.01; });
  EXPECT_EQ(fresh[0], 2) << "a new state warms up on the full count";
  EXPECT_EQ(g.chosen(), 2);
  const std::vector<int> single = run(g, &b, 1, 30, [](int) { return 0.01; });
  for (int n : single) EXPECT_EQ(n, 1);
}

}  // namespace
