// The decode steps' thread count (core/model/decode_threads.h): the schedule of probes and the
// choice from measured times, given made-up step times (a busy machine where one thread is faster,
// a quiet one where the full count is, a probe that loses at its first step and the gaps that grow
// after it, a load that ends or starts, a new decode state, a new thread count).
#include <gtest/gtest.h>

#include <algorithm>
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

TEST(DecodeThreads, AQuietMachineKeepsEveryThreadAndTheProbeLosesAtOnce) {
  DecodeThreads g;
  int key = 0;
  const std::vector<int> quiet = run(g, &key, 2, 40, [](int n) { return n == 1 ? 0.030 : 0.016; });
  const int first_probe = DecodeThreads::kWarmup + DecodeThreads::kProbe;
  EXPECT_EQ(quiet[size_t(first_probe)], 1) << "the probe of one thread";
  for (int i = first_probe + 1; i < 40; ++i) EXPECT_EQ(quiet[size_t(i)], 2) << "step " << i;
  EXPECT_EQ(g.chosen(), 2);
}

TEST(DecodeThreads, ALosingProbeCostsOneStepAndTheGapsGrow) {
  DecodeThreads g;
  int key = 0;
  // Busy machine: one thread 20 ms, two 100 ms. After the first decision every probe of two loses.
  const int steps = 1200;
  const std::vector<int> used = run(g, &key, 2, steps, [](int n) { return n == 1 ? 0.020 : 0.100; });
  std::vector<int> probes;
  for (int i = kFirstDecision; i < steps; ++i)
    if (used[size_t(i)] == 2) probes.push_back(i);
  ASSERT_GE(probes.size(), 4u);
  EXPECT_EQ(probes[0] - kFirstDecision, DecodeThreads::kPeriod) << "the first probe a period after the switch";
  for (size_t k = 0; k < probes.size(); ++k) {
    EXPECT_EQ(used[size_t(probes[k]) + 1], 1) << "the probe at step " << probes[k] << " went on";
    if (k < 2) continue;
    const int gap = probes[k] - probes[k - 1] - 1, before = probes[k - 1] - probes[k - 2] - 1;
    EXPECT_EQ(gap, std::min(2 * before, int(DecodeThreads::kMaxPeriod))) << "probe " << k;
  }
  EXPECT_EQ(probes.back() - probes[probes.size() - 2] - 1, DecodeThreads::kMaxPeriod);
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

TEST(DecodeThreads, ALoadThatStartsIsNoticedWithinAFewSteps) {
  DecodeThreads g;
  int key = 0, step = 0;
  // Quiet long enough for the gaps between probes to reach their longest, then a busy core.
  const int load_starts = 700, steps = load_starts + 40;
  const std::vector<int> used = run(g, &key, 2, steps, [&](int n) {
    const bool busy = step++ >= load_starts;
    return busy ? (n == 1 ? 0.02 : 0.08) : (n == 1 ? 0.03 : 0.016);
  });
  EXPECT_EQ(used[size_t(load_starts - 1)], 2);
  // Half of the recent window slow, then a whole probe.
  const int noticed = load_starts + DecodeThreads::kRecent / 2 + DecodeThreads::kProbe;
  for (int i = noticed; i < steps; ++i) EXPECT_EQ(used[size_t(i)], 1) << "step " << i;
  EXPECT_EQ(g.chosen(), 1);
}

TEST(DecodeThreads, ANewDecodeStateKeepsTheCountANewUserCountStartsOver) {
  DecodeThreads g;
  int a = 0, b = 0;
  run(g, &a, 2, 20, [](int n) { return n == 1 ? 0.01 : 0.05; });
  EXPECT_EQ(g.chosen(), 1);
  // The machine is as busy as before: a new state goes on with one thread, its warm-up included,
  // and its first probe waits for its own times.
  const std::vector<int> fresh = run(g, &b, 2, 40, [](int n) { return n == 1 ? 0.01 : 0.05; });
  for (int i = 0; i < DecodeThreads::kWarmup + DecodeThreads::kProbe; ++i) EXPECT_EQ(fresh[size_t(i)], 1) << i;
  EXPECT_EQ(g.chosen(), 1);
  // A new user count: the full count again, as on a first call.
  EXPECT_EQ(run(g, &b, 3, 1, [](int) { return 0.01; })[0], 3);
  // One thread asked: never more.
  for (int n : run(g, &b, 1, 30, [](int) { return 0.01; })) EXPECT_EQ(n, 1);
}

}  // namespace
