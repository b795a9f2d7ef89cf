// The task table (names here and in the paper's tables) and the JSONL helpers every task uses.
#include "core/eval/bench/task.h"

#include <cmath>
#include <fstream>

#include "core/eval/bench/task_loaders.h"

namespace ftx::bench {

const std::vector<TaskInfo>& task_infos() {
  // name, kind, paper benchmark, paper metric, our main metric, default shots, fields read
  static const std::vector<TaskInfo> infos = {
      {"humaneval", "code", "", "", "pass@1", 0, "task_id, prompt, canonical_solution, test, entry_point"},
      {"humaneval_plus", "code", "human_eval_plus", "pass@1", "pass@1", 0,
       "task_id, prompt, canonical_solution, test, entry_point (EvalPlus export)"},
      {"mbpp", "code", "mbpp", "pass@1", "pass@1", 3, "task_id, text, code, test_list, test_setup_code"},
      {"mbpp_plus", "code", "", "", "pass@1", 0, "task_id, prompt, code, test_list, test"},
      {"gsm8k", "generative", "gsm8k", "em", "em_strict", 5, "question, answer"},
      {"nq_open", "generative", "nq", "em", "em", 0, "question, answer[]"},
      {"triviaqa", "generative", "tqa", "em", "em", 0, "question, answer{aliases, value}"},
      {"mmlu", "multiple_choice", "mmlu", "macro_avg/acc_char", "macro_avg/acc_char", 5,
       "question, subject, choices[4], answer"},
      {"csqa", "multiple_choice", "csqa", "acc_char", "acc_char", 0, "question, choices{label, text}, answerKey"},
      {"hellaswag", "multiple_choice", "hellaswag", "acc_char", "acc_char", 0,
       "activity_label, ctx_a, ctx_b, endings[4], label"},
      {"arc_easy", "multiple_choice", "arc_easy", "acc_completion", "acc_completion", 0,
       "question, choices{text, label}, answerKey"},
      {"arc_challenge", "multiple_choice", "arc_challenge", "acc_completion", "acc_completion", 0,
       "question, choices{text, label}, answerKey"},
      {"piqa", "multiple_choice", "piqa", "acc_char", "acc_char", 0, "goal, sol1, sol2, label"},
      {"winogrande", "multiple_choice", "winogrande", "acc_char", "acc_char", 0, "sentence, option1, option2, answer"},
      {"boolq", "multiple_choice", "boolq", "acc_completion", "acc_completion", 0, "passage, question, label"},
      {"obqa", "multiple_choice", "obqa", "acc_completion", "acc_completion", 0,
       "question_stem, choices{text, label}, answerKey"},
      {"race_middle", "multiple_choice", "race.middle", "acc_char", "acc_char", 0, "article, problems"},
      {"race_high", "multiple_choice", "race.high", "acc_char", "acc_char", 0, "article, problems"},
  };
  return infos;
}

const TaskInfo* find_task_info(const std::string& name) {
  for (const TaskInfo& t : task_infos())
    if (t.name == name) return &t;
  return nullptr;
}

Result<std::unique_ptr<Task>> load_task(const std::string& name, const std::string& path,
                                        const std::string& fewshot_path, int shots) {
  const TaskInfo* found = find_task_info(name);
  if (!found) {
    std::string known;
    for (const TaskInfo& t : task_infos()) known += (known.empty() ? "" : ", ") + t.name;
    return make_error("unknown task '" + name + "' (known: " + known + ")");
  }
  TaskInfo info = *found;
  if (shots >= 0) info.default_shots = shots;
  if (info.kind == "code") return load_code_task(info, path, fewshot_path);
  if (info.kind == "multiple_choice") return load_choice_task(info, path, fewshot_path);
  return load_generative_task(info, path, fewshot_path);
}

MetricValue mean_metric(const std::string& metric, const std::vector<double>& values) {
  MetricValue m{.metric = metric, .n = static_cast<int64_t>(values.size())};
  if (values.empty()) return m;
  double sum = 0;
  for (double v : values) sum += v;
  m.value = sum / values.size();
  if (values.size() >= 2) {
    double ss = 0;
    for (double v : values) ss += (v - m.value) * (v - m.value);
    m.stderr_ = std::sqrt(ss / (values.size() - 1) / values.size());
  }
  return m;
}

Result<std::vector<JsonLine>> read_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path + ": cannot open");
  std::vector<JsonLine> rows;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return make_error(path + ": line " + std::to_string(n) + ": not valid JSON");
    if (!j.is_object()) return make_error(path + ": line " + std::to_string(n) + ": not a JSON object");
    rows.push_back({n, std::move(j)});
  }
  if (in.bad()) return make_error(path + ": read error");
  if (rows.empty()) return make_error(path + ": empty (no JSON lines)");
  return rows;
}

Result<std::string> get_string(const nlohmann::json& obj, const char* field, const std::string& path, int line) {
  auto it = obj.find(field);
  const std::string where = path + ": line " + std::to_string(line) + ": field '" + field + "'";
  if (it == obj.end()) return make_error(where + " missing");
  if (!it->is_string()) return make_error(where + " is not a string");
  return it->get<std::string>();
}

Result<std::vector<Sample>> read_samples(const std::string& path) {
  auto rows = read_jsonl(path);
  if (!rows) return rows.error();
  std::vector<Sample> out;
  for (const auto& [line, j] : *rows) {
    auto id = get_string(j, "task_id", path, line);
    if (!id) return id.error();
    const char* field = j.contains("completion") ? "completion" : "solution";
    auto text = get_string(j, field, path, line);
    if (!text) return make_error(path + ": line " + std::to_string(line) + ": field 'completion' missing");
    out.push_back({*id, *text});
  }
  return out;
}

}  // namespace ftx::bench
