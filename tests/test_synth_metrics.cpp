// Synthetic-task metrics on hand-built bodies and small hand-computed groups, plus a cross-check
// against the dataset (every training body is valid and its true start is a possible start).
#include "core/eval/synth_metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "datasets/synthetic.h"

using namespace ftx;

namespace {

// 64 '_' with `run` written from `at`, then '!' at each of `bangs`.
std::string body(const std::string& run, int at, const std::vector<int>& bangs = {}) {
  std::string b(64, '_');
  b.replace(at, run.size(), run);
  for (int p : bangs) b[p] = '!';
  return b;
}

}  // namespace

TEST(SynthMetrics, IntactTarget) {
  SynthAnalysis a = analyze_body(body("KKKKKKKK", 10, {2, 40}), 'K');
  EXPECT_TRUE(a.valid) << a.reason;
  EXPECT_TRUE(a.reason.empty());
  EXPECT_EQ(a.letters, 8);
  EXPECT_EQ(a.starts, std::vector<int>{10});
  EXPECT_EQ(a.noise_outside, (std::vector<int>{2, 40}));
}

TEST(SynthMetrics, TargetsAtBothEdges) {
  SynthAnalysis first = analyze_body(body("AAAAAAAA", 0), 'A');
  EXPECT_TRUE(first.valid);
  EXPECT_EQ(first.starts, std::vector<int>{0});
  SynthAnalysis last = analyze_body(body("ZZZZZZZZ", 56), 'Z');
  EXPECT_TRUE(last.valid);
  EXPECT_EQ(last.starts, std::vector<int>{56});
}

TEST(SynthMetrics, NoiseInsideTheTarget) {
  SynthAnalysis a = analyze_body(body("KKK!KK!K", 20, {5}), 'K');
  EXPECT_TRUE(a.valid) << a.reason;
  EXPECT_EQ(a.letters, 6);
  EXPECT_EQ(a.starts, std::vector<int>{20});
  EXPECT_EQ(a.noise_outside, std::vector<int>{5});  // 23 and 26 are target noise
  // A '!' hiding an end with '_' beyond the other end leaves one start.
  SynthAnalysis b = analyze_body(body("!KKKKKKK", 20), 'K');
  EXPECT_TRUE(b.valid);
  EXPECT_EQ(b.starts, std::vector<int>{20});
  EXPECT_TRUE(b.noise_outside.empty());
}

TEST(SynthMetrics, NoiseAtATargetEndGivesSeveralStarts) {
  // "!KKKKKKK!" at 10..18: the target is 10..17 or 11..18.
  SynthAnalysis two = analyze_body(body("!KKKKKKK!", 10, {40}), 'K');
  EXPECT_TRUE(two.valid) << two.reason;
  EXPECT_EQ(two.starts, (std::vector<int>{10, 11}));
  EXPECT_EQ(two.noise_outside, std::vector<int>{40});  // 10 and 18 may be target: not counted
  // "!!KKKKKK!!" at 10..19: starts 10, 11, 12.
  SynthAnalysis three = analyze_body(body("!!KKKKKK!!", 10, {9 + 12}), 'K');
  EXPECT_TRUE(three.valid) << three.reason;
  EXPECT_EQ(three.starts, (std::vector<int>{10, 11, 12}));
  EXPECT_EQ(three.noise_outside, std::vector<int>{21});
  // The window may not leave the body: letters at 57..63 can only start at 56.
  SynthAnalysis edge = analyze_body(body("!KKKKKKK", 56, {55}), 'K');
  EXPECT_TRUE(edge.valid);
  EXPECT_EQ(edge.starts, std::vector<int>{56});
  EXPECT_EQ(edge.noise_outside, std::vector<int>{55});
}

TEST(SynthMetrics, InvalidBodies) {
  SynthAnalysis runs = analyze_body(body("KKKK", 5).replace(30, 4, "KKKK"), 'K');  // two letter runs
  EXPECT_FALSE(runs.valid);
  EXPECT_TRUE(runs.starts.empty());
  EXPECT_NE(runs.reason.find("do not fit"), std::string::npos) << runs.reason;

  SynthAnalysis gap = analyze_body(body("KKK_KKKK", 5), 'K');  // within 8 but a '_' inside
  EXPECT_FALSE(gap.valid);
  EXPECT_TRUE(gap.starts.empty());

  SynthAnalysis few = analyze_body(body("KKK!!!!!", 5), 'K');
  EXPECT_FALSE(few.valid);
  EXPECT_EQ(few.letters, 3);
  EXPECT_NE(few.reason.find("at least 4"), std::string::npos) << few.reason;

  SynthAnalysis wrong_letter = analyze_body(body("QQQQQQQQ", 5), 'K');
  EXPECT_FALSE(wrong_letter.valid);
  EXPECT_NE(wrong_letter.reason.find("'Q' at position 5"), std::string::npos) << wrong_letter.reason;

  std::string mixed_body = body("KKKKKKKK", 5, {});
  mixed_body[40] = 'Q';
  SynthAnalysis mixed = analyze_body(mixed_body, 'K');
  EXPECT_FALSE(mixed.valid);

  EXPECT_FALSE(analyze_body(body("kkkkkkkk", 5), 'K').valid);
  EXPECT_FALSE(analyze_body(body("KKKKKKKK", 5), 'k').valid);  // prompt letter must be A-Z

  std::string short_body = body("KKKKKKKK", 5).substr(0, 63), long_body = body("KKKKKKKK", 5) + "_";
  SynthAnalysis s = analyze_body(short_body, 'K');
  EXPECT_FALSE(s.valid);
  EXPECT_NE(s.reason.find("63 characters"), std::string::npos) << s.reason;
  EXPECT_FALSE(analyze_body(long_body, 'K').valid);
  EXPECT_FALSE(analyze_body("", 'K').valid);
}

TEST(SynthMetrics, GroupAgreementHandComputed) {
  const std::vector<std::string> group = {
      body("KKKKKKKK", 10, {40}),      // starts {10}, noise {40}
      body("KKKKKKKK", 10, {40, 50}),  // starts {10}, noise {40, 50}
      body("KKKKKKKK", 20),            // starts {20}, noise {}
      body("KKK_KKKK", 30),            // invalid
  };
  GroupMetrics g = group_metrics(group, 'K');
  EXPECT_EQ(g.n, 4);
  EXPECT_EQ(g.n_valid, 3);
  EXPECT_DOUBLE_EQ(g.valid, 0.75);
  // Pairs (0,1) agree, (0,2) and (1,2) do not: 1/3. Jaccard 1/2, 0, 0: mean 1/6.
  EXPECT_DOUBLE_EQ(g.agreement, 1.0 / 3);
  EXPECT_DOUBLE_EQ(g.noise_agreement, 1.0 / 6);
}

TEST(SynthMetrics, AmbiguousStartsAgreeWhenTheyIntersect) {
  const std::vector<std::string> group = {
      body("!KKKKKKK!", 10),  // starts {10, 11}
      body("KKKKKKKK", 11),   // starts {11}
      body("KKKKKKKK", 10),   // starts {10}
  };
  GroupMetrics g = group_metrics(group, 'K');
  EXPECT_EQ(g.n_valid, 3);
  // (0,1) and (0,2) intersect, (1,2) do not: 2/3. No noise outside any target: Jaccard 1 each.
  EXPECT_DOUBLE_EQ(g.agreement, 2.0 / 3);
  EXPECT_DOUBLE_EQ(g.noise_agreement, 1.0);
}

TEST(SynthMetrics, FewerThanTwoValidIsUndefined) {
  GroupMetrics one = group_metrics({body("KKKKKKKK", 3), body("KK", 3)}, 'K');
  EXPECT_EQ(one.n_valid, 1);
  EXPECT_DOUBLE_EQ(one.valid, 0.5);
  EXPECT_TRUE(std::isnan(one.agreement));
  EXPECT_TRUE(std::isnan(one.noise_agreement));
  GroupMetrics none = group_metrics({}, 'K');
  EXPECT_EQ(none.n, 0);
  EXPECT_TRUE(std::isnan(none.valid));
  EXPECT_DOUBLE_EQ(mean_defined({0.5, std::nan(""), 1.0}), 0.75);
  EXPECT_TRUE(std::isnan(mean_defined({std::nan("")})));
  EXPECT_TRUE(std::isnan(mean_defined({})));
}

TEST(SynthMetrics, SplitGeneration) {
  const std::string b = body("KKKKKKKK", 10);
  auto s = split_generation("K>" + b);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->letter, 'K');
  EXPECT_EQ(s->body, b);
  EXPECT_TRUE(analyze_body(s->body, s->letter).valid);
  EXPECT_FALSE(split_generation("K").ok());
  EXPECT_FALSE(split_generation("KK____").ok());
  auto empty_body = split_generation("K>");
  ASSERT_TRUE(empty_body.ok());
  EXPECT_TRUE(empty_body->body.empty());
}

TEST(SynthMetrics, EveryTrainingSequenceIsValidWithItsTrueStart) {
  SyntheticDataset d(7);
  int checked = 0;
  for (int i = 0; i < 5000; ++i) {
    const SyntheticSpec spec = d.training_spec(i);
    if (__builtin_popcountll(spec.noise & (uint64_t{0xFF} << spec.start)) > 4) continue;  // < 4 letters left
    auto t = split_generation(SyntheticDataset::make_text(spec));
    ASSERT_TRUE(t.ok());
    SynthAnalysis a = analyze_body(t->body, t->letter);
    ASSERT_TRUE(a.valid) << i << " " << a.reason;
    ASSERT_NE(std::find(a.starts.begin(), a.starts.end(), spec.start), a.starts.end()) << i;
    for (int p : a.noise_outside) ASSERT_TRUE((spec.noise >> p) & 1);
    ++checked;
  }
  EXPECT_GT(checked, 4990);
}

// A group's start is the median of its generations' target starts (the middle of each one's
// possible starts); its agreement is then binned by that start.
TEST(SynthMetrics, GroupStartIsTheMedianTargetStart) {
  EXPECT_EQ(target_start(analyze_body(body("!KKKKKKK!", 10), 'K')), 10) << "starts {10, 11}: the lower middle";
  EXPECT_EQ(target_start(analyze_body(body("KKK_KKKK", 30), 'K')), -1);
  GroupMetrics g = group_metrics({body("KKKKKKKK", 40), body("KKKKKKKK", 3), body("KKKKKKKK", 41), body("KK", 0)}, 'K');
  EXPECT_EQ(g.start, 40);
  EXPECT_EQ(group_metrics({body("KK", 0)}, 'K').start, -1);
}

TEST(SynthMetrics, AgreementByStartPosition) {
  // Groups of known agreement; the last has one valid generation (undefined, in no bin).
  auto group = [](std::vector<int> at) {
    std::vector<std::string> b;
    for (int p : at) b.push_back(body("KKKKKKKK", p));
    return group_metrics(b, 'K');
  };
  const std::vector<GroupMetrics> groups = {group({5, 5, 25}), group({5, 5, 5}), group({33, 33, 33}),
                                            group({50, 10, 52}), group({50})};
  // Per generation: the share of the others agreeing with it; their mean is the group's agreement.
  using At = std::vector<std::pair<int, double>>;
  EXPECT_EQ(groups[0].agreement_at, (At{{5, 0.5}, {5, 0.5}, {25, 0.0}}));
  EXPECT_DOUBLE_EQ(groups[0].agreement, 1.0 / 3);
  EXPECT_EQ(groups[3].agreement_at, (At{{50, 0.0}, {10, 0.0}, {52, 0.0}}));
  EXPECT_TRUE(groups[4].agreement_at.empty());
  At entries;
  for (const GroupMetrics& g : groups) entries.insert(entries.end(), g.agreement_at.begin(), g.agreement_at.end());
  std::vector<StartBin> bins = agreement_by_start(entries);
  ASSERT_EQ(bins.size(), 7u);
  EXPECT_EQ(bins[0].lo, 0);
  EXPECT_EQ(bins[0].hi, 7);
  EXPECT_EQ(bins[6].lo, 48);
  EXPECT_EQ(bins[6].hi, 56);
  // 0-7: {0.5, 0.5, 1, 1, 1}: mean 0.8, sample variance 0.3 / 4, standard error sqrt(0.075 / 5).
  EXPECT_EQ(bins[0].generations, 5);
  EXPECT_DOUBLE_EQ(bins[0].agreement, 0.8);
  EXPECT_NEAR(bins[0].stderr_, std::sqrt(0.015), 1e-12);
  EXPECT_EQ(bins[1].generations, 1);  // the 10 of a group whose median start is 50
  EXPECT_DOUBLE_EQ(bins[1].agreement, 0.0);
  EXPECT_DOUBLE_EQ(bins[1].stderr_, 0.0);
  EXPECT_EQ(bins[2].generations, 0);
  EXPECT_TRUE(std::isnan(bins[2].agreement));
  EXPECT_EQ(bins[4].generations, 3);
  EXPECT_DOUBLE_EQ(bins[4].agreement, 1.0);
  EXPECT_EQ(bins[6].generations, 2);
  EXPECT_DOUBLE_EQ(bins[6].agreement, 0.0);
  int counted = 0;
  for (const StartBin& b : bins) counted += b.generations;
  EXPECT_EQ(counted, 12) << "the group with one valid generation is in no bin";
  // From 32: {1, 1, 1, 0, 0}: mean 0.6, sample variance 1.2 / 4, standard error sqrt(0.3 / 5).
  const StartBin late = agreement_from(entries, 32);
  EXPECT_EQ(late.generations, 5);
  EXPECT_DOUBLE_EQ(late.agreement, 0.6);
  EXPECT_NEAR(late.stderr_, std::sqrt(0.06), 1e-12);
  EXPECT_EQ(agreement_by_start(entries, 57).size(), 1u);
}

TEST(SynthMetrics, SpreadOfStartsAgainstTheData) {
  // Two bodies at 0 and one with starts {10, 11}: 1/3, 1/6, 1/6 (the invalid one is not counted).
  std::vector<SynthAnalysis> a = {analyze_body(body("KKKKKKKK", 0), 'K'), analyze_body(body("KKKKKKKK", 0), 'K'),
                                  analyze_body(body("!KKKKKKK!", 10), 'K'), analyze_body(body("KK", 0), 'K')};
  std::vector<double> p = start_distribution(a);
  ASSERT_EQ(p.size(), 57u);
  EXPECT_DOUBLE_EQ(p[0], 2.0 / 3);
  EXPECT_DOUBLE_EQ(p[10], 1.0 / 6);
  EXPECT_DOUBLE_EQ(p[11], 1.0 / 6);
  const std::vector<double> uniform(57, 1.0 / 57);
  EXPECT_DOUBLE_EQ(total_variation(p, p), 0.0);
  // Mass above uniform: (2/3 - 1/57) + 2 (1/6 - 1/57).
  EXPECT_NEAR(total_variation(p, uniform), 2.0 / 3 + 2.0 / 6 - 3.0 / 57, 1e-12);
  std::vector<double> q(57, 0.0);
  q[30] = 1;
  EXPECT_DOUBLE_EQ(total_variation(p, q), 1.0);
  // The training data's starts are uniform: 20,000 bodies are within 0.05 of it.
  SyntheticDataset d(3);
  std::vector<SynthAnalysis> data;
  for (int i = 0; i < 20000; ++i) {
    auto t = split_generation(SyntheticDataset::make_text(d.training_spec(i)));
    data.push_back(analyze_body(t->body, t->letter));
  }
  EXPECT_LT(total_variation(start_distribution(data), uniform), 0.05);
  EXPECT_TRUE(std::all_of(p.begin(), p.end(), [](double v) { return v >= 0; }));
  const std::vector<double> none = start_distribution({analyze_body(body("KK", 0), 'K')});
  EXPECT_TRUE(std::all_of(none.begin(), none.end(), [](double v) { return v == 0; }));
}
