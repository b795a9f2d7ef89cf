// A LanguageModel backed by tables, for the benchmark-task tests: log-likelihoods looked up by
// (context, continuation) or computed by a test's function, generations looked up by prompt. It
// records every request so that tests can check what a task asked.
#pragma once
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/eval/bench/task.h"

namespace ftx::bench::testing {

class TableLM final : public LanguageModel {
 public:
  std::map<std::pair<std::string, std::string>, double> loglik_table;
  std::function<std::optional<double>(const LoglikRequest&)> loglik_fn;  // consulted when the table has no entry
  std::function<std::string(const GenRequest&)> generate_fn;
  std::vector<LoglikRequest> loglik_seen;
  std::vector<GenRequest> generate_seen;

  Result<std::vector<LoglikResult>> loglikelihood(const std::vector<LoglikRequest>& requests) override {
    std::vector<LoglikResult> out;
    for (const LoglikRequest& r : requests) {
      loglik_seen.push_back(r);
      auto it = loglik_table.find({r.context, r.continuation});
      std::optional<double> v;
      if (it != loglik_table.end())
        v = it->second;
      else if (loglik_fn)
        v = loglik_fn(r);
      if (!v) return make_error("table LM: no log-likelihood for continuation '" + r.continuation + "'");
      out.push_back({*v, 1, false});
    }
    return out;
  }
  Result<std::vector<std::string>> generate(const std::vector<GenRequest>& requests) override {
    std::vector<std::string> out;
    for (const GenRequest& r : requests) {
      generate_seen.push_back(r);
      out.push_back(generate_fn ? generate_fn(r) : "");
    }
    return out;
  }
};

// Writes `text` to a fresh file under the test temp directory and returns its path.
inline std::string write_temp(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / "ftx_bench_tests";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

inline std::string bench_fixture(const std::string& name) { return std::string(FTX_FIXTURE_DIR) + "/bench/" + name; }

inline const MetricValue* find_metric(const TaskResult& r, const std::string& name) {
  for (const MetricValue& m : r.metrics)
    if (m.metric == name) return &m;
  return nullptr;
}

}  // namespace ftx::bench::testing
