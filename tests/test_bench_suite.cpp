// The benchmark schedule of training runs (core/eval/bench/bench_suite.h): parsing of
// --bench-tasks and the fixed item subsets; and the task table's names against the paper's tables.
#include "core/eval/bench/bench_suite.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

namespace ftx::bench {
namespace {

TEST(BenchSuite, ParsesTaskListsAndNamesWhatIsWrong) {
  auto s = parse_bench_tasks("humaneval:40,gsm8k");
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[0].task, "humaneval");
  EXPECT_EQ((*s)[0].items, 40);
  EXPECT_EQ((*s)[1].task, "gsm8k");
  EXPECT_EQ((*s)[1].items, 0);
  for (const char* bad : {"", "humaneval:", "humaneval:x", "humaneval:-3", "nope:4", "mmlu,mmlu"}) {
    auto r = parse_bench_tasks(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
  }
  EXPECT_NE(parse_bench_tasks("nope:4").error().message.find("unknown task 'nope'"), std::string::npos);
}

TEST(BenchSuite, FixedSubsetsAreTheSameDistinctItemsEveryTime) {
  const auto a = fixed_subset(164, 40);
  EXPECT_EQ(a, fixed_subset(164, 40));
  ASSERT_EQ(a.size(), 40u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::set<size_t>(a.begin(), a.end()).size(), 40u);
  EXPECT_LT(a.back(), 164u);
  // Spread over the file, not its first items.
  EXPECT_GT(a.back(), 100u);
  EXPECT_EQ(fixed_subset(10, 0).size(), 10u);
  EXPECT_EQ(fixed_subset(10, 50).size(), 10u);
  // Uniform over the file: a large subset takes about as many items from each quarter.
  const auto big = fixed_subset(10000, 2000);
  int quarter[4] = {};
  for (size_t i : big) ++quarter[i / 2500];
  for (int q : quarter) EXPECT_NEAR(q, 500, 80);
}

// Every paper benchmark of resources/paper_tables.csv has exactly one task, with the same metric.
TEST(BenchSuite, TaskTableCoversThePapersBenchmarks) {
  std::ifstream f(std::string(FTX_RESOURCE_DIR) + "/paper_tables.csv");
  ASSERT_TRUE(f.good());
  std::string line;
  std::getline(f, line);
  std::set<std::pair<std::string, std::string>> paper;
  while (std::getline(f, line)) {
    std::stringstream ss(line);
    std::string col[5];
    for (auto& c : col) std::getline(ss, c, ',');
    paper.insert({col[3], col[4]});
  }
  std::set<std::pair<std::string, std::string>> ours;
  for (const TaskInfo& t : task_infos())
    if (!t.paper_name.empty()) ours.insert({t.paper_name, t.paper_metric});
  EXPECT_EQ(ours, paper);
}

}  // namespace
}  // namespace ftx::bench
