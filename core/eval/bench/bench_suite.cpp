#include "core/eval/bench/bench_suite.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "kernels/base/philox.h"

namespace ftx::bench {

Result<std::vector<BenchSpec>> parse_bench_tasks(const std::string& spec) {
  std::vector<BenchSpec> out;
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    BenchSpec b;
    const size_t colon = part.find(':');
    b.task = part.substr(0, colon);
    if (!find_task_info(b.task)) return make_error("bench task '" + part + "': unknown task '" + b.task + "'");
    if (colon != std::string::npos) {
      const std::string n = part.substr(colon + 1);
      if (n.empty() || n.size() > 9 || !std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return make_error("bench task '" + part + "': expected TASK or TASK:N with N a number of items");
      b.items = std::stoi(n);
    }
    for (const BenchSpec& o : out)
      if (o.task == b.task) return make_error("bench task '" + b.task + "' given twice");
    out.push_back(b);
  }
  if (out.empty()) return make_error("bench tasks '" + spec + "': no task given");
  return out;
}

std::vector<size_t> fixed_subset(size_t size, int n) {
  std::vector<size_t> idx(size);
  std::iota(idx.begin(), idx.end(), size_t{0});
  if (n <= 0 || static_cast<size_t>(n) >= size) return idx;
  // Fisher-Yates on the first n places, uniforms from a fixed Philox stream.
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    const double u = philox_uniform(0x62656e6368ull, kStreamEval, i);
    const size_t j = i + std::min(size - i - 1, static_cast<size_t>(u * double(size - i)));
    std::swap(idx[i], idx[j]);
  }
  idx.resize(n);
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::string bench_data_path(const std::string& dir, const std::string& task) {
  const std::string base = dir.empty() ? std::string(".") : dir;
  const std::string want = task + ".jsonl";
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  // HumanEval ships as HumanEval.jsonl: any spelling of <task>.jsonl is taken.
  std::error_code ec;
  if (!std::filesystem::exists(base + "/" + want, ec))
    for (const auto& e : std::filesystem::directory_iterator(base, ec))
      if (lower(e.path().filename().string()) == want) return e.path().string();
  return base + "/" + want;
}

Result<BenchSuite> BenchSuite::load(const std::vector<BenchSpec>& specs, const std::string& data_dir) {
  BenchSuite s;
  for (const BenchSpec& b : specs) {
    auto t = load_task(b.task, bench_data_path(data_dir, b.task));
    if (!t) return t.error();
    Entry e{std::move(*t), {}};
    e.items = fixed_subset(e.task->size(), b.items);
    s.tasks_.push_back(std::move(e));
  }
  return s;
}

Result<std::vector<TaskResult>> BenchSuite::run(LanguageModel& lm, const EvalOptions& o) {
  std::vector<TaskResult> out;
  for (Entry& e : tasks_) {
    auto r = e.task->evaluate(lm, e.items, o);
    if (!r) return r.error();
    out.push_back(std::move(*r));
  }
  return out;
}

}  // namespace ftx::bench
