// Generative exact-match tasks (docs/benchmarks.md "Tasks and metrics"): GSM8K, NQ-open and
// TriviaQA, with the prompts, stop strings, answer filters and normalisations of
// lm-evaluation-harness's task YAMLs. One greedy generation per item; score_samples re-scores
// generations made elsewhere, keyed by the item id "line N" (N: the item's 1-based line in the data
// file).
//
// Not here: decoding (the LanguageModel cuts at the stop strings; we cut again so that samples from
// elsewhere score the same), sampled or majority-vote generation (the paper's maj@1 is greedy here).
#include "core/eval/bench/generative_tasks.h"

#include <algorithm>
#include <map>

#include "core/eval/bench/fields.h"
#include "core/eval/bench/task_loaders.h"

namespace ftx::bench {

namespace {

constexpr const char* kInvalid = "[invalid]";  // lm-eval's RegexFilter fallback

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_number_char(char c) { return is_digit(c) || c == '.' || c == ',' || c == '$'; }

std::string py_strip(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n\r\v\f");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\n\r\v\f") - b + 1);
}

// Python's \w on str: letters, digits, underscore; any non-ASCII byte is taken as a letter.
bool is_word_byte(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return u >= 0x80 || std::isalnum(u) || c == '_';
}

}  // namespace

std::string gsm8k_extract_strict(const std::string& s) {
  for (size_t p = s.find("#### "); p != std::string::npos; p = s.find("#### ", p + 1)) {
    size_t q = p + 5;
    const size_t start = q;
    if (q < s.size() && s[q] == '-') ++q;
    size_t end = q;
    while (end < s.size() && (is_digit(s[end]) || s[end] == '.' || s[end] == ',')) ++end;
    if (end > q) return s.substr(start, end - start);
  }
  return kInvalid;
}

std::string gsm8k_extract_flexible(const std::string& s) {
  std::string last;
  bool found = false;
  for (size_t p = 0; p < s.size();) {
    const size_t q = p + (s[p] == '-');
    size_t run = q;  // first alternative: -?[$0-9.,]{2,}
    while (run < s.size() && is_number_char(s[run])) ++run;
    size_t end = run - q >= 2 ? run : 0;  // (a '-' is not in the class: no retry without it)
    if (!end) {                           // second alternative: -?[0-9]+
      size_t d = q;
      while (d < s.size() && is_digit(s[d])) ++d;
      if (d > q) end = d;
    }
    if (end) {
      last = s.substr(p, end - p);
      found = true;
      p = end;
    } else {
      ++p;
    }
  }
  return found ? py_strip(last) : kInvalid;
}

std::string gsm8k_normalize(const std::string& text) {
  std::string s;
  for (char c : text)
    if (c != ',' && c != '$') s += c;
  const size_t hashes = s.rfind("#### ");
  if (hashes != std::string::npos) s = s.substr(hashes + 5);
  // Python's `\.$`: a '.' at the very end, or just before a final newline.
  if (!s.empty() && s.back() == '.')
    s.pop_back();
  else if (s.size() >= 2 && s.back() == '\n' && s[s.size() - 2] == '.')
    s.erase(s.size() - 2, 1);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string qa_normalize(const std::string& text, bool strip_articles) {
  std::string s;
  if (strip_articles) {
    static const char* kArticles[] = {"The ", "the ", "An ", "A ", "a ", "an "};
    for (size_t i = 0; i < text.size();) {
      size_t cut = 0;
      if (i == 0 || !is_word_byte(text[i - 1]))
        for (const char* a : kArticles)
          if (text.compare(i, std::char_traits<char>::length(a), a) == 0) {
            cut = std::char_traits<char>::length(a);
            break;
          }
      if (cut) {
        i += cut;
      } else {
        s += text[i++];
      }
    }
  } else {
    s = text;
  }
  std::string out;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80 && std::ispunct(u)) continue;  // Python's string.punctuation
    out += static_cast<char>(std::tolower(u));
  }
  return out;
}

std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stop) {
  size_t cut = text.size();
  for (const std::string& s : stop)
    if (!s.empty()) cut = std::min(cut, text.find(s));
  return text.substr(0, cut);
}

namespace {

struct GenItem {
  int line = 0;
  std::string query;               // doc_to_text
  std::vector<std::string> golds;  // any of them counts
  std::string shot_answer;         // the answer shown when the item is a few-shot example
};

struct GenSpec {
  std::string description;
  std::string fewshot_delimiter;
  std::vector<std::string> stop;
  int max_new_tokens;
  Result<GenItem> (*read)(const nlohmann::json&, const std::string&, int);
};

Result<GenItem> read_gsm8k(const nlohmann::json& j, const std::string& path, int line) {
  auto q = get_string(j, "question", path, line);
  if (!q) return q.error();
  auto a = get_string(j, "answer", path, line);
  if (!a) return a.error();
  return GenItem{line, "Question: " + *q + "\nAnswer:", {*a}, *a};
}

Result<GenItem> read_nq(const nlohmann::json& j, const std::string& path, int line) {
  auto q = get_string(j, "question", path, line);
  if (!q) return q.error();
  auto a = get_string_list(j, "answer", path, line);
  if (!a) return a.error();
  return GenItem{line, "Q: " + *q + "?\nA:", *a, (*a)[0]};
}

Result<GenItem> read_triviaqa(const nlohmann::json& j, const std::string& path, int line) {
  auto q = get_string(j, "question", path, line);
  if (!q) return q.error();
  auto a = get_field(j, "answer", path, line);
  if (!a) return a.error();
  if (!(*a)->is_object()) return make_error(field_where(path, line, "answer") + " is not an object {aliases, value}");
  auto aliases = get_string_list(**a, "aliases", path, line);
  if (!aliases) return make_error(field_where(path, line, "answer.aliases") + " missing or not a list of strings");
  return GenItem{line, "Question: " + *q + "?\nAnswer:", *aliases, (*aliases)[0]};
}

const GenSpec& spec_for(const std::string& name) {
  static const std::map<std::string, GenSpec> specs = {
      {"gsm8k", {"", "\n\n", {"Question:", "</s>", "<|im_end|>"}, 256, read_gsm8k}},
      {"nq_open", {"Answer these questions:\n\n", "\n", {"\n", ".", ","}, 256, read_nq}},
      {"triviaqa", {"", "\n\n", {"\n", ".", ","}, 256, read_triviaqa}},
  };
  auto it = specs.find(name);
  FT_ASSERT(it != specs.end(), "no reader for generative task %s", name.c_str());
  return it->second;
}

Result<std::vector<GenItem>> read_items(const GenSpec& spec, const std::string& path) {
  return read_jsonl_items<GenItem>(path, spec.read);
}

struct Verdict {
  std::vector<std::pair<std::string, double>> metrics;  // per item, main metric first
  nlohmann::json detail;
};

class GenerativeTask final : public Task {
 public:
  GenerativeTask(TaskInfo info, std::string pool_source, std::vector<GenItem> items, std::vector<GenItem> pool)
      : info_(std::move(info)),
        spec_(spec_for(info_.name)),
        pool_source_(std::move(pool_source)),
        items_(std::move(items)),
        pool_(std::move(pool)) {}

  const TaskInfo& info() const override { return info_; }
  size_t size() const override { return items_.size(); }
  Result<TaskResult> evaluate(LanguageModel& lm, const std::vector<size_t>& which, const EvalOptions& o) override;
  Result<TaskResult> score_samples(const std::vector<Sample>& samples, const EvalOptions& o) override;

 private:
  TaskInfo info_;
  const GenSpec& spec_;
  std::string pool_source_;
  std::vector<GenItem> items_, pool_;

  Result<std::string> prompt(const GenItem& it, int shots) const;
  Verdict judge(const GenItem& it, const std::string& completion) const;
  TaskResult collect(std::vector<ItemRecord> records, const std::vector<Verdict>& verdicts) const;
};

// lm-eval's plain-text context: description, each example as text + " " + answer + delimiter, item.
Result<std::string> GenerativeTask::prompt(const GenItem& it, int shots) const {
  if (shots > static_cast<int>(pool_.size()))
    return make_error(pool_source_ + ": " + std::to_string(shots) + " few-shot examples asked but only " +
                      std::to_string(pool_.size()) + " available (give a few-shot file)");
  std::string p = spec_.description;
  for (int i = 0; i < shots; ++i) p += pool_[i].query + " " + pool_[i].shot_answer + spec_.fewshot_delimiter;
  return p + it.query;
}

Verdict GenerativeTask::judge(const GenItem& it, const std::string& raw) const {
  const std::string completion = cut_at_stop(raw, spec_.stop);
  Verdict v;
  if (info_.name == "gsm8k") {
    const std::string strict = gsm8k_extract_strict(completion), flexible = gsm8k_extract_flexible(completion);
    const std::string gold = gsm8k_normalize(it.golds[0]);
    v.metrics = {{"em_strict", gsm8k_normalize(strict) == gold}, {"em_flexible", gsm8k_normalize(flexible) == gold}};
    v.detail = {{"strict", strict}, {"flexible", flexible}, {"gold", gold}};
    return v;
  }
  const bool nq = info_.name == "nq_open";
  const std::string answer = qa_normalize(py_strip(completion), nq);
  bool hit = false;
  for (const std::string& g : it.golds) hit |= qa_normalize(g, nq) == answer;
  v.metrics = {{"em", hit}};
  v.detail = {{"normalized", answer}, {"golds", it.golds}};
  return v;
}

TaskResult GenerativeTask::collect(std::vector<ItemRecord> records, const std::vector<Verdict>& verdicts) const {
  TaskResult out;
  out.task = info_.name;
  const std::vector<std::string> names =
      info_.name == "gsm8k" ? std::vector<std::string>{"em_strict", "em_flexible"} : std::vector<std::string>{"em"};
  for (size_t m = 0; m < names.size(); ++m) {
    std::vector<double> values;
    for (const Verdict& v : verdicts) values.push_back(v.metrics[m].second);
    out.metrics.push_back(mean_metric(names[m], values));
  }
  for (size_t k = 0; k < records.size(); ++k) {
    const Verdict& v = verdicts[k];
    records[k].score = v.metrics[0].second;
    records[k].verdict = v.metrics[0].second > 0 ? "correct" : "wrong";
    records[k].detail = v.detail;
    for (const auto& [name, value] : v.metrics) records[k].detail[name] = value;
  }
  out.items = std::move(records);
  return out;
}

Result<TaskResult> GenerativeTask::evaluate(LanguageModel& lm, const std::vector<size_t>& which, const EvalOptions& o) {
  const int shots = o.shots < 0 ? info_.default_shots : o.shots;
  // Greedy tokens; the seed picks a Free Transformer's Z. With samples = M > 1 each item is
  // answered under M draws of Z and the most frequent answer counts (maj@M); a plain decoder gives
  // M equal answers.
  const int m = std::max(1, o.samples);
  std::vector<GenRequest> reqs;
  for (size_t w : which) {
    if (w >= items_.size())
      return make_error("task '" + info_.name + "': item " + std::to_string(w) + " out of range (" +
                        std::to_string(items_.size()) + " items)");
    auto p = prompt(items_[w], shots);
    if (!p) return p.error();
    for (int j = 0; j < m; ++j)
      reqs.push_back({.prompt = *p,
                      .stop = spec_.stop,
                      .max_new_tokens = o.max_new_tokens > 0 ? o.max_new_tokens : spec_.max_new_tokens,
                      .temperature = 0,
                      .top_p = 1,
                      .seed = o.seed + w + uint64_t(j) * 1000003u});
  }
  auto gens = lm.generate(reqs);
  if (!gens) return gens.error();
  if (gens->size() != reqs.size())
    return make_error("task '" + info_.name + "': the model answered " + std::to_string(gens->size()) + " of " +
                      std::to_string(reqs.size()) + " requests");
  std::vector<ItemRecord> records;
  std::vector<Verdict> verdicts;
  for (size_t k = 0; k < which.size(); ++k) {
    const GenItem& it = items_[which[k]];
    // The answer each generation gives, and the first generation of the most frequent one.
    std::map<std::string, int> votes;
    std::vector<std::string> keys;
    size_t chosen = k * m;
    for (int j = 0; j < m; ++j) {
      const Verdict v = judge(it, (*gens)[k * m + j]);
      const std::string key = v.detail.value("strict", std::string()) + "|" +
                              v.detail.value("flexible", std::string()) + "|" +
                              v.detail.value("normalized", std::string());
      keys.push_back(key);
      if (++votes[key] > votes[keys[chosen - k * m]]) chosen = k * m + j;
    }
    ItemRecord r;
    r.item_id = "line " + std::to_string(it.line);
    r.prompt = reqs[k * m].prompt;
    r.output = cut_at_stop((*gens)[chosen], spec_.stop);
    r.target = it.golds[0];
    records.push_back(std::move(r));
    verdicts.push_back(judge(it, (*gens)[chosen]));
    if (m > 1) verdicts.back().detail["votes"] = votes[keys[chosen - k * m]];
  }
  TaskResult out = collect(std::move(records), verdicts);
  for (const ItemRecord& r : out.items) out.samples.push_back({r.item_id, r.output});
  return out;
}

Result<TaskResult> GenerativeTask::score_samples(const std::vector<Sample>& samples, const EvalOptions&) {
  std::map<std::string, const GenItem*> by_id;
  for (const GenItem& it : items_) by_id["line " + std::to_string(it.line)] = &it;
  std::vector<ItemRecord> records;
  std::vector<Verdict> verdicts;
  for (const Sample& s : samples) {
    auto at = by_id.find(s.task_id);
    if (at == by_id.end())
      return make_error("samples: task_id '" + s.task_id + "' is not an evaluated item of task '" + info_.name +
                        "' (ids are \"line N\" of the data file)");
    ItemRecord r;
    r.item_id = s.task_id;
    r.output = cut_at_stop(s.completion, spec_.stop);
    r.target = at->second->golds[0];
    records.push_back(std::move(r));
    verdicts.push_back(judge(*at->second, s.completion));
  }
  return collect(std::move(records), verdicts);
}

}  // namespace

Result<std::unique_ptr<Task>> load_generative_task(const TaskInfo& info, const std::string& path,
                                                   const std::string& fewshot_path) {
  const GenSpec& spec = spec_for(info.name);
  auto items = read_items(spec, path);
  if (!items) return items.error();
  std::vector<GenItem> pool, eval = std::move(*items);
  if (!fewshot_path.empty()) {
    auto shots = read_items(spec, fewshot_path);
    if (!shots) return shots.error();
    pool = std::move(*shots);
  } else {
    // Without a few-shot file the first default_shots items are the examples, not evaluated.
    const size_t k = std::min(eval.size(), static_cast<size_t>(info.default_shots));
    pool.assign(eval.begin(), eval.begin() + k);
    eval.erase(eval.begin(), eval.begin() + k);
    if (eval.empty())
      return make_error(path + ": all " + std::to_string(k) +
                        " items are taken as few-shot examples; give more items or a few-shot file");
  }
  return std::unique_ptr<Task>(
      new GenerativeTask(info, fewshot_path.empty() ? path : fewshot_path, std::move(eval), std::move(pool)));
}

}  // namespace ftx::bench
