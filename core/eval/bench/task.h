// Benchmark tasks (docs/benchmarks.md): the paper's code, multiple-choice and generative
// benchmarks behind one interface, in the prompt formats and metrics of lm-evaluation-harness and
// EvalPlus. A task reads its items from the JSONL that Hugging Face `datasets` exports, turns them
// into requests to a LanguageModel, and scores the answers into metrics with standard errors and
// one ItemRecord per item (what the store keeps for inspection).
//
// Deliberately not here: the model (LanguageModel is implemented over a Model by model_lm.h, and by
// tables in tests), the store (the caller writes TaskResult), the sandbox (sandbox.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/base/result.h"

namespace ftx::bench {

// ---- What a task asks of a model (lm-evaluation-harness's request kinds).

// log P(continuation | context), summed over the continuation's tokens. Context and continuation
// are tokenized together; the continuation's tokens are those after the context's (trailing spaces
// of the context belong to the continuation). An empty context conditions on the model's BOS or
// end-of-text token.
struct LoglikRequest {
  std::string context, continuation;
};
struct LoglikResult {
  double logprob = 0;   // nats, summed over the continuation's tokens
  int n_tokens = 0;     // continuation tokens
  bool greedy = false;  // every continuation token is the argmax of its distribution
};

// One completion of `prompt` (the prompt itself not included), cut before the first stop string.
struct GenRequest {
  std::string prompt;
  std::vector<std::string> stop;
  int max_new_tokens = 256;
  float temperature = 0;  // 0: greedy
  float top_p = 1;
  uint64_t seed = 0;  // sampling and, for a Free Transformer, the prior's Z
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  virtual Result<std::vector<LoglikResult>> loglikelihood(const std::vector<LoglikRequest>& requests) = 0;
  virtual Result<std::vector<std::string>> generate(const std::vector<GenRequest>& requests) = 0;
};

// ---- What a task gives back.

struct MetricValue {
  std::string metric;  // "pass@1", "acc", "acc_char", "em_strict", "macro_avg/acc_char", ...
  double value = 0;
  double stderr_ = 0;  // standard error of the mean over items (0 when not defined)
  int64_t n = 0;       // items behind the value
};

// One item as scored: what the model saw and said, and the verdict. Kept in the store so that a
// user can click a point of a benchmark curve and read the generations behind it.
struct ItemRecord {
  std::string item_id;    // the task's own id ("HumanEval/0") or "line N" of the data file
  std::string prompt;     // the full prompt or context the model saw
  std::string output;     // the generation, or the chosen choice's text
  std::string target;     // the gold answer
  std::string verdict;    // "pass", "fail: assertion", "timeout", "correct", "wrong", ...
  nlohmann::json detail;  // per-choice log-likelihoods, extracted answers, sandbox output tail...
  double score = 0;       // the item's value of the task's main metric (1/0 for accuracies)
};

// A generation as the reference harnesses read it (HumanEval's samples JSONL: {"task_id",
// "completion"}): what `--samples FILE` writes and `--score-samples FILE` reads.
struct Sample {
  std::string task_id, completion;
};

struct TaskResult {
  std::string task;
  std::vector<MetricValue> metrics;
  std::vector<ItemRecord> items;
  std::vector<Sample> samples;  // every generation (code and generative tasks), in item order
};

struct EvalOptions {
  int shots = -1;            // few-shot examples; -1: the task's default
  int samples = 1;           // generations per item: 1 = greedy pass@1; n > 1 sampled, pass@k for k <= n
  float temperature = 0.8f;  // for samples > 1
  float top_p = 0.95f;
  int max_new_tokens = 0;  // 0: the task's default
  uint64_t seed = 1;
  int parallel = 0;  // sandboxed programs at once; 0: the core count
};

// Static facts of a task: how it is named here and in the paper's tables.
struct TaskInfo {
  std::string name;          // ftx's name: "humaneval", "mmlu", "race_high", ...
  std::string kind;          // "code", "multiple_choice" or "generative"
  std::string paper_name;    // benchmark column of paper_tables.csv ("human_eval_plus"), "" if absent
  std::string paper_metric;  // metric of paper_tables.csv ("pass@1", "macro_avg/acc_char")
  std::string main_metric;   // our metric that corresponds to paper_metric
  int default_shots = 0;
  std::string fields;  // the JSONL fields read, for error messages and docs
};

class Task {
 public:
  virtual ~Task() = default;
  virtual const TaskInfo& info() const = 0;
  virtual size_t size() const = 0;  // items in the data file (few-shot examples excluded)
  // Scores the items with these indices (in [0, size())) of the file.
  virtual Result<TaskResult> evaluate(LanguageModel& lm, const std::vector<size_t>& items, const EvalOptions& o) = 0;
  // Scores generations made elsewhere, without a model (code and generative tasks; a
  // multiple-choice task answers with an error).
  virtual Result<TaskResult> score_samples(const std::vector<Sample>& samples, const EvalOptions& o) = 0;
};

// Every task, in documentation order.
const std::vector<TaskInfo>& task_infos();
const TaskInfo* find_task_info(const std::string& name);

// Reads `path` as task `name`. `fewshot_path` (optional, "" = none) supplies few-shot examples in
// the same format; without it a task that needs them takes the first `shots` items of `path` (of
// each subject for MMLU) and leaves them out of size(). shots < 0: the task's default
// (TaskInfo::default_shots), which the returned task then reports as its own. Errors are one line:
// unknown task, the file, "line N: field 'x' missing/wrong type", an empty file, a file that is
// another task's.
Result<std::unique_ptr<Task>> load_task(const std::string& name, const std::string& path,
                                        const std::string& fewshot_path = "", int shots = -1);

// Reads a samples JSONL ({"task_id", "completion"} per line; EvalPlus's "solution" also taken).
Result<std::vector<Sample>> read_samples(const std::string& path);

// ---- Helpers shared by the tasks.

// Mean of per-item values and its standard error (sample std / sqrt(n), 0 for n < 2).
MetricValue mean_metric(const std::string& metric, const std::vector<double>& values);

// Reads a JSONL file: one JSON object per non-empty line; errors "<path>: line N: <problem>".
struct JsonLine {
  int line = 0;  // 1-based line number in the file
  nlohmann::json value;
};
Result<std::vector<JsonLine>> read_jsonl(const std::string& path);

// Every line of a JSONL file made into an item by read(value, path, line) -> Result<Item>; the
// first bad line's error.
template <class Item, class Read>
Result<std::vector<Item>> read_jsonl_items(const std::string& path, Read&& read) {
  auto rows = read_jsonl(path);
  if (!rows) return rows.error();
  std::vector<Item> items;
  for (const JsonLine& row : *rows) {
    Result<Item> it = read(row.value, path, row.line);
    if (!it) return it.error();
    items.push_back(std::move(*it));
  }
  return items;
}

// Field access for task loaders, errors "<path>: line N: field 'x' missing" / "... is not a string".
Result<std::string> get_string(const nlohmann::json& obj, const char* field, const std::string& path, int line);

}  // namespace ftx::bench
