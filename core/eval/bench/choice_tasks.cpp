// Multiple-choice tasks scored by log-likelihood (docs/benchmarks.md "Tasks and metrics"): MMLU,
// CommonsenseQA, HellaSwag, ARC-Easy/Challenge, PIQA, WinoGrande, BoolQ, OpenBookQA, RACE. Each
// item becomes one request per choice, (context, " " + choice), with the prompts of
// lm-evaluation-harness's task YAMLs, plus one request per distinct choice after the neutral
// context "Answer:" for acc_completion. Metrics: acc, acc_char (lm-eval's acc_norm) and
// acc_completion, and for MMLU their macro (mean over subjects) and micro (mean over items)
// averages.
//
// Not here: the model's side of a request (tokenization, K prior draws of Z: model_lm.h) and
// generation (multiple-choice tasks never generate).
#include "core/eval/bench/choice_tasks.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <unordered_map>

#include "core/eval/bench/fields.h"
#include "core/eval/bench/task_loaders.h"
#include "core/text/unicode_text.h"

namespace ftx::bench {

// ---- Python literals (RACE's `problems` column is the repr of a list of dicts).

namespace {

class PyLiteralParser {
 public:
  explicit PyLiteralParser(const std::string& s) : s_(s) {}

  Result<nlohmann::json> parse_all() {
    auto v = value(0);
    if (!v) return v;
    skip_ws();
    if (pos_ != s_.size()) return fail("trailing characters");
    return v;
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;

  Error fail(const std::string& what) const {
    return make_error("python literal: offset " + std::to_string(pos_) + ": " + what);
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool word(const char* w) {
    const size_t n = std::char_traits<char>::length(w);
    if (s_.compare(pos_, n, w) != 0) return false;
    pos_ += n;
    return true;
  }

  Result<nlohmann::json> value(int depth) {
    if (depth > 64) return fail("nested too deeply");
    skip_ws();
    if (pos_ >= s_.size()) return fail("unexpected end");
    const char c = s_[pos_];
    if (c == '[' || c == '(') return sequence(c == '[' ? ']' : ')', depth);
    if (c == '{') return dict(depth);
    if (c == '\'' || c == '"') {
      auto str = string();
      if (!str) return str.error();
      return nlohmann::json(*str);
    }
    if (word("True")) return nlohmann::json(true);
    if (word("False")) return nlohmann::json(false);
    if (word("None")) return nlohmann::json(nullptr);
    return number();
  }

  Result<nlohmann::json> sequence(char close, int depth) {
    ++pos_;
    nlohmann::json out = nlohmann::json::array();
    for (;;) {
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == close) break;
      auto v = value(depth + 1);
      if (!v) return v;
      out.push_back(std::move(*v));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == close) break;
      return fail(std::string("expected ',' or '") + close + "'");
    }
    ++pos_;
    return out;
  }

  Result<nlohmann::json> dict(int depth) {
    ++pos_;
    nlohmann::json out = nlohmann::json::object();
    for (;;) {
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == '}') break;
      if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return fail("expected a string key");
      auto key = string();
      if (!key) return key.error();
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expected ':'");
      ++pos_;
      auto v = value(depth + 1);
      if (!v) return v;
      out[*key] = std::move(*v);
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') break;
      return fail("expected ',' or '}'");
    }
    ++pos_;
    return out;
  }

  Result<nlohmann::json> number() {
    const size_t start = pos_;
    if (pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) ++pos_;
    bool is_float = false;
    while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' ||
                                s_[pos_] == 'e' || s_[pos_] == 'E' || s_[pos_] == '_')) {
      is_float |= s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E';
      ++pos_;
    }
    std::string text = s_.substr(start, pos_ - start);
    std::erase(text, '_');
    if (text.empty() || text == "-" || text == "+") {
      pos_ = start;
      return fail("expected a value");
    }
    try {
      if (is_float) return nlohmann::json(std::stod(text));
      return nlohmann::json(std::stoll(text));
    } catch (...) {
      pos_ = start;
      return fail("bad number '" + text + "'");
    }
  }

  Result<uint32_t> hex(size_t digits) {
    if (pos_ + digits > s_.size()) return fail("short \\x/\\u escape");
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char h = s_[pos_ + i];
      if (!std::isxdigit(static_cast<unsigned char>(h))) return fail("bad hex digit in escape");
      v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    pos_ += digits;
    if (v > 0x10FFFF) return fail("escape beyond Unicode");
    return v;
  }

  Result<std::string> string() {
    const char quote = s_[pos_++];
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) return fail("unterminated string");
      const char c = s_[pos_++];
      if (c == quote) return out;
      if (c == '\n') return fail("newline inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) return fail("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          auto cp = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
          if (!cp) return cp.error();
          text::utf8_append(out, *cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {  // octal, up to three digits
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2 && pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '7'; ++i)
              v = v * 8 + static_cast<uint32_t>(s_[pos_++] - '0');
            text::utf8_append(out, v);
          } else {  // Python keeps an unknown escape as written
            out += '\\';
            out += e;
          }
      }
    }
  }
};

}  // namespace

Result<nlohmann::json> parse_python_literal(const std::string& text) { return PyLiteralParser(text).parse_all(); }

// ---- Text helpers and scoring rules.

std::string hellaswag_preprocess(const std::string& text) {
  const size_t b = text.find_first_not_of(" \t\n\r\v\f");
  std::string s = b == std::string::npos ? "" : text.substr(b, text.find_last_not_of(" \t\n\r\v\f") - b + 1);
  std::string t;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 8, " [title]") == 0) {
      t += ". ";
      i += 8;
    } else {
      t += s[i++];
    }
  }
  std::string u;  // drop "[...]": the shortest bracketed run that does not cross a newline
  for (size_t i = 0; i < t.size();) {
    if (t[i] == '[') {
      size_t j = i + 1;
      while (j < t.size() && t[j] != ']' && t[j] != '\n') ++j;
      if (j < t.size() && t[j] == ']') {
        i = j + 1;
        continue;
      }
    }
    u += t[i++];
  }
  std::string out;
  for (size_t i = 0; i < u.size();) {
    if (u.compare(i, 2, "  ") == 0) {
      out += ' ';
      i += 2;
    } else {
      out += u[i++];
    }
  }
  return out;
}

std::string ascii_capitalize(const std::string& text) {
  std::string out = text;
  for (size_t i = 0; i < out.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(out[i]);
    out[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
  }
  return out;
}

int argmax_first(const std::vector<double>& values) {
  int best = 0;
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] > values[best]) best = static_cast<int>(i);  // strict: the first maximum wins
  return best;
}

size_t utf8_length(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

ChoiceScores score_choices(const std::vector<double>& loglik, const std::vector<size_t>& n_chars,
                           const std::vector<double>& loglik_unconditional) {
  std::vector<double> per_char(loglik.size()), completion(loglik.size());
  for (size_t i = 0; i < loglik.size(); ++i) {
    // lm-eval divides by len(choice) in float64; an empty choice would divide by zero there, here by 1.
    per_char[i] = loglik[i] / static_cast<double>(std::max<size_t>(n_chars[i], 1));
    completion[i] = loglik[i] - loglik_unconditional[i];
  }
  return {argmax_first(loglik), argmax_first(per_char), argmax_first(completion)};
}

// ---- Items of each task.

namespace {

constexpr const char* kUnconditionalContext = "Answer:";
constexpr const char* kLetters[] = {"A", "B", "C", "D", "E"};

std::string py_strip(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n\r\v\f");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\n\r\v\f") - b + 1);
}

// One item as lm-eval's doc_to_text / doc_to_choice / doc_to_target give it. Usually one context
// and one continuation per choice; WinoGrande (partial scoring) has one context per choice and one
// shared continuation.
struct ChoiceItem {
  int line = 0;
  std::string subject{};  // MMLU: few-shot examples and the macro average are per subject
  std::vector<std::string> contexts{}, continuations{};
  std::vector<std::string> labels{};  // what each choice reads as, for the records
  int gold = 0;

  size_t n_choices() const { return std::max(contexts.size(), continuations.size()); }
  const std::string& context(size_t i) const { return contexts[contexts.size() == 1 ? 0 : i]; }
  const std::string& continuation(size_t i) const { return continuations[continuations.size() == 1 ? 0 : i]; }
  // As a few-shot example: the gold choice's context and continuation, joined by the delimiter.
  std::string solved() const { return context(gold) + " " + continuation(gold); }
};

using ItemReader = Result<ChoiceItem> (*)(const nlohmann::json&, const std::string&, int);

Status check_gold(const ChoiceItem& it, const char* field, const std::string& path, int line) {
  if (it.gold < 0 || static_cast<size_t>(it.gold) >= it.n_choices())
    return make_error(field_where(path, line, field) + " out of range (" + std::to_string(it.gold) + " for " +
                      std::to_string(it.n_choices()) + " choices)");
  return {};
}

std::string lettered(const std::vector<std::string>& options) {
  std::string s;
  for (size_t i = 0; i < options.size(); ++i) s += std::string("\n") + kLetters[i] + ". " + options[i];
  return s + "\nAnswer:";
}

Result<ChoiceItem> read_mmlu(const nlohmann::json& j, const std::string& path, int line) {
  auto q = get_string(j, "question", path, line);
  if (!q) return q.error();
  auto subject = get_string(j, "subject", path, line);
  if (!subject) return subject.error();
  auto choices = get_string_list(j, "choices", path, line);
  if (!choices) return choices.error();
  if (choices->size() != 4) return make_error(field_where(path, line, "choices") + " must hold 4 options");
  auto answer = get_index(j, "answer", path, line);
  if (!answer) return answer.error();
  ChoiceItem it{.line = line, .subject = *subject, .contexts = {py_strip(*q) + lettered(*choices)}};
  it.continuations = {"A", "B", "C", "D"};
  it.labels = *choices;
  it.gold = *answer;
  return it;
}

Result<ChoiceItem> read_csqa(const nlohmann::json& j, const std::string& path, int line) {
  auto q = get_string(j, "question", path, line);
  if (!q) return q.error();
  auto choices = get_labelled_choices(j, path, line);
  if (!choices) return choices.error();
  if (choices->text.size() != 5) return make_error(field_where(path, line, "choices") + " must hold 5 options");
  auto key = get_string(j, "answerKey", path, line);
  if (!key) return key.error();
  ChoiceItem it{.line = line, .contexts = {"Question: " + py_strip(*q) + lettered(choices->text)}};
  it.continuations = {"A", "B", "C", "D", "E"};
  it.labels = choices->text;
  it.gold =
      static_cast<int>(std::find(it.continuations.begin(), it.continuations.end(), *key) - it.continuations.begin());
  return it;
}

Result<ChoiceItem> read_hellaswag(const nlohmann::json& j, const std::string& path, int line) {
  std::string parts[3];
  const char* names[3] = {"activity_label", "ctx_a", "ctx_b"};
  for (int i = 0; i < 3; ++i) {
    auto s = get_string(j, names[i], path, line);
    if (!s) return s.error();
    parts[i] = *s;
  }
  auto endings = get_string_list(j, "endings", path, line);
  if (!endings) return endings.error();
  auto label = get_index(j, "label", path, line);
  if (!label) return label.error();
  ChoiceItem it{.line = line};
  it.contexts = {hellaswag_preprocess(parts[0] + ": " + parts[1] + " " + ascii_capitalize(parts[2]))};
  for (const std::string& e : *endings) it.continuations.push_back(hellaswag_preprocess(e));
  it.labels = it.continuations;
  it.gold = *label;
  return it;
}

// ARC and OpenBookQA: the choice texts are scored, the gold is answerKey's place among the labels.
Result<ChoiceItem> read_labelled(const nlohmann::json& j, const std::string& path, int line, const char* question_field,
                                 bool question_prompt) {
  auto q = get_string(j, question_field, path, line);
  if (!q) return q.error();
  auto choices = get_labelled_choices(j, path, line);
  if (!choices) return choices.error();
  auto key = get_string(j, "answerKey", path, line);
  if (!key) return key.error();
  const std::string k = question_prompt ? *key : key->substr(std::min(key->size(), key->find_first_not_of(" \t\n")));
  ChoiceItem it{.line = line, .contexts = {question_prompt ? "Question: " + *q + "\nAnswer:" : *q}};
  it.continuations = choices->text;
  it.labels = choices->text;
  auto at = std::find(choices->label.begin(), choices->label.end(), k);
  if (at == choices->label.end())
    return make_error(field_where(path, line, "answerKey") + " '" + *key + "' is not among choices.label");
  it.gold = static_cast<int>(at - choices->label.begin());
  return it;
}
Result<ChoiceItem> read_arc(const nlohmann::json& j, const std::string& path, int line) {
  return read_labelled(j, path, line, "question", true);
}
Result<ChoiceItem> read_obqa(const nlohmann::json& j, const std::string& path, int line) {
  return read_labelled(j, path, line, "question_stem", false);
}

Result<ChoiceItem> read_piqa(const nlohmann::json& j, const std::string& path, int line) {
  auto goal = get_string(j, "goal", path, line);
  if (!goal) return goal.error();
  auto sol1 = get_string(j, "sol1", path, line);
  if (!sol1) return sol1.error();
  auto sol2 = get_string(j, "sol2", path, line);
  if (!sol2) return sol2.error();
  auto label = get_index(j, "label", path, line);
  if (!label) return label.error();
  ChoiceItem it{.line = line, .contexts = {"Question: " + *goal + "\nAnswer:"}, .continuations = {*sol1, *sol2}};
  it.labels = it.continuations;
  it.gold = *label;
  return it;
}

// Partial scoring: the sentence up to the blank, completed by each option, is the context; the
// text after the blank is the shared continuation whose log-likelihood is compared.
Result<ChoiceItem> read_winogrande(const nlohmann::json& j, const std::string& path, int line) {
  auto sentence = get_string(j, "sentence", path, line);
  if (!sentence) return sentence.error();
  auto o1 = get_string(j, "option1", path, line);
  if (!o1) return o1.error();
  auto o2 = get_string(j, "option2", path, line);
  if (!o2) return o2.error();
  auto answer = get_index(j, "answer", path, line);
  if (!answer) return answer.error();
  const size_t blank = sentence->find('_');
  if (blank == std::string::npos) return make_error(field_where(path, line, "sentence") + " has no '_' blank");
  const std::string before = sentence->substr(0, blank);
  ChoiceItem it{.line = line, .contexts = {before + *o1, before + *o2}};
  it.continuations = {py_strip(sentence->substr(blank + 1))};
  it.labels = {*o1, *o2};
  it.gold = *answer - 1;  // "1" / "2"
  return it;
}

Result<ChoiceItem> read_boolq(const nlohmann::json& j, const std::string& path, int line) {
  auto passage = get_string(j, "passage", path, line);
  if (!passage) return passage.error();
  auto q = get_string(j, "question", path, line);
  if (!q) return q.error();
  auto label = get_index(j, "label", path, line);
  if (!label) return label.error();
  ChoiceItem it{.line = line, .contexts = {*passage + "\nQuestion: " + *q + "?\nAnswer:"}};
  it.continuations = {"no", "yes"};
  it.labels = it.continuations;
  it.gold = *label;
  return it;
}

// RACE in either export. EleutherAI/race (lm-eval's, "high" only): one row per article, `problems`
// the repr of its questions; earlier questions are shown answered (a fill-in question "...  _  ."
// inline), the last one is scored. ehovy/race ("middle", "high"): one row per question with
// `question`, `options`, `answer`; the article then precedes that question alone.
struct RaceProblem {
  std::string question;
  std::vector<std::string> options;
  int answer = 0;
};

Result<std::vector<RaceProblem>> read_race_problems(const nlohmann::json& j, const std::string& path, int line) {
  nlohmann::json list;
  if (j.contains("problems") || !j.contains("question")) {
    auto text = get_string(j, "problems", path, line);
    if (!text) return text.error();
    auto parsed = parse_python_literal(*text);
    if (!parsed) return make_error(field_where(path, line, "problems") + ": " + parsed.error().message);
    if (!parsed->is_array() || parsed->empty())
      return make_error(field_where(path, line, "problems") + " is not a non-empty list");
    list = std::move(*parsed);
  } else {
    list = nlohmann::json::array({j});
  }
  std::vector<RaceProblem> ps;
  for (const auto& p : list) {
    if (!p.is_object()) return make_error(field_where(path, line, "problems") + " holds a non-dict");
    auto q = get_string(p, "question", path, line);
    if (!q) return q.error();
    auto opts = get_string_list(p, "options", path, line);
    if (!opts) return opts.error();
    auto ans = get_string(p, "answer", path, line);
    if (!ans) return ans.error();
    if (opts->size() != 4 || ans->size() != 1 || (*ans)[0] < 'A' || (*ans)[0] > 'D')
      return make_error(field_where(path, line, "answer") + ": a question needs 4 options and an answer A-D");
    ps.push_back({*q, *opts, (*ans)[0] - 'A'});
  }
  return ps;
}

Result<ChoiceItem> read_race(const nlohmann::json& j, const std::string& path, int line) {
  auto article = get_string(j, "article", path, line);
  if (!article) return article.error();
  auto problems = read_race_problems(j, path, line);
  if (!problems) return problems.error();
  const std::vector<RaceProblem>& ps = *problems;
  std::string ctx = "Article: " + *article + "\n\n";
  for (size_t i = 0; i + 1 < ps.size(); ++i) {
    const RaceProblem& p = ps[i];
    const std::string& a = p.options[p.answer];
    if (p.question.size() >= 6 && p.question.compare(p.question.size() - 6, 6, "  _  .") == 0)
      ctx += p.question.substr(0, p.question.size() - 5) + a + "\n";
    else
      ctx += "Question: " + p.question + "\nAnswer: " + a + "\n";
  }
  ctx += ps.back().question;
  ChoiceItem it{.line = line, .contexts = {ctx}, .continuations = ps.back().options};
  it.labels = it.continuations;
  it.gold = ps.back().answer;
  return it;
}

struct TaskSpec {
  ItemReader read;
  const char* gold_field;
};
TaskSpec spec_for(const std::string& name) {
  static const std::map<std::string, TaskSpec> specs = {
      {"mmlu", {read_mmlu, "answer"}},
      {"csqa", {read_csqa, "answerKey"}},
      {"hellaswag", {read_hellaswag, "label"}},
      {"arc_easy", {read_arc, "answerKey"}},
      {"arc_challenge", {read_arc, "answerKey"}},
      {"piqa", {read_piqa, "label"}},
      {"winogrande", {read_winogrande, "answer"}},
      {"boolq", {read_boolq, "label"}},
      {"obqa", {read_obqa, "answerKey"}},
      {"race_middle", {read_race, "problems"}},
      {"race_high", {read_race, "problems"}},
  };
  auto it = specs.find(name);
  FT_ASSERT(it != specs.end(), "no reader for choice task %s", name.c_str());
  return it->second;
}

Result<std::vector<ChoiceItem>> read_items(const TaskSpec& spec, const std::string& path) {
  return read_jsonl_items<ChoiceItem>(
      path, [&](const nlohmann::json& j, const std::string& p, int line) -> Result<ChoiceItem> {
        auto it = spec.read(j, p, line);
        if (it) FTX_TRY(check_gold(*it, spec.gold_field, p, line));
        return it;
      });
}

// The string that picks an item's few-shot examples: MMLU's subject, one pool for the others.
const std::string& shot_group(const ChoiceItem& it) { return it.subject; }

class ChoiceTask final : public Task {
 public:
  ChoiceTask(TaskInfo info, std::string pool_source, std::vector<ChoiceItem> items, std::vector<ChoiceItem> pool)
      : info_(std::move(info)),
        pool_source_(std::move(pool_source)),
        items_(std::move(items)),
        pool_(std::move(pool)) {}

  const TaskInfo& info() const override { return info_; }
  size_t size() const override { return items_.size(); }

  Result<TaskResult> evaluate(LanguageModel& lm, const std::vector<size_t>& which, const EvalOptions& o) override;
  Result<TaskResult> score_samples(const std::vector<Sample>&, const EvalOptions&) override {
    return make_error("task '" + info_.name + "' is scored by log-likelihood and has no samples to score");
  }

 private:
  TaskInfo info_;
  std::string pool_source_;  // where the few-shot examples come from, for errors
  std::vector<ChoiceItem> items_, pool_;

  Result<std::string> fewshot_prefix(const ChoiceItem& it, int shots) const;
};

// lm-eval's plain-text few-shot context: description, then each example's text, " ", its answer and
// "\n\n", then the item. MMLU's description names the subject (underscores read as spaces).
Result<std::string> ChoiceTask::fewshot_prefix(const ChoiceItem& it, int shots) const {
  std::string prefix;
  if (info_.name == "mmlu") {
    std::string subject = it.subject;
    std::replace(subject.begin(), subject.end(), '_', ' ');
    prefix = "The following are multiple choice questions (with answers) about " + subject + ".\n\n";
  }
  int taken = 0;
  for (const ChoiceItem& ex : pool_) {
    if (taken == shots) break;
    if (shot_group(ex) != shot_group(it)) continue;
    prefix += ex.solved() + "\n\n";
    ++taken;
  }
  if (taken < shots)
    return make_error(pool_source_ + ": " + std::to_string(shots) + " few-shot examples asked but only " +
                      std::to_string(taken) + " available" + (it.subject.empty() ? "" : " for subject " + it.subject) +
                      " (give a few-shot file)");
  return prefix;
}

Result<TaskResult> ChoiceTask::evaluate(LanguageModel& lm, const std::vector<size_t>& which, const EvalOptions& o) {
  const int shots = o.shots < 0 ? info_.default_shots : o.shots;
  std::vector<LoglikRequest> reqs;
  std::vector<size_t> first_req;                      // per evaluated item, its first request
  std::unordered_map<std::string, size_t> uncond_at;  // continuation -> its "Answer:" request
  std::vector<std::string> prompts;
  for (size_t w : which) {
    if (w >= items_.size())
      return make_error("task '" + info_.name + "': item " + std::to_string(w) + " out of range (" +
                        std::to_string(items_.size()) + " items)");
    const ChoiceItem& it = items_[w];
    auto prefix = fewshot_prefix(it, shots);
    if (!prefix) return prefix.error();
    prompts.push_back(*prefix + it.context(0));
    first_req.push_back(reqs.size());
    for (size_t c = 0; c < it.n_choices(); ++c) reqs.push_back({*prefix + it.context(c), " " + it.continuation(c)});
  }
  for (size_t w : which)
    for (const std::string& cont : items_[w].continuations)
      if (uncond_at.emplace(cont, reqs.size()).second) reqs.push_back({kUnconditionalContext, " " + cont});
  auto lls = lm.loglikelihood(reqs);
  if (!lls) return lls.error();
  if (lls->size() != reqs.size())
    return make_error("task '" + info_.name + "': the model answered " + std::to_string(lls->size()) + " of " +
                      std::to_string(reqs.size()) + " requests");

  TaskResult out;
  out.task = info_.name;
  std::vector<double> acc, acc_char, acc_compl;
  std::map<std::string, std::array<std::vector<double>, 3>> by_subject;
  const std::string main = info_.main_metric.substr(info_.main_metric.find('/') + 1);
  for (size_t k = 0; k < which.size(); ++k) {
    const ChoiceItem& it = items_[which[k]];
    std::vector<double> ll, ll_uncond;
    std::vector<size_t> n_chars;
    for (size_t c = 0; c < it.n_choices(); ++c) {
      ll.push_back((*lls)[first_req[k] + c].logprob);
      ll_uncond.push_back((*lls)[uncond_at.at(it.continuation(c))].logprob);
      n_chars.push_back(utf8_length(it.continuation(c)));
    }
    const ChoiceScores s = score_choices(ll, n_chars, ll_uncond);
    const double v[3] = {double(s.acc == it.gold), double(s.acc_char == it.gold), double(s.acc_completion == it.gold)};
    acc.push_back(v[0]);
    acc_char.push_back(v[1]);
    acc_compl.push_back(v[2]);
    for (int m = 0; m < 3; ++m) by_subject[it.subject][m].push_back(v[m]);

    const int pick = main == "acc" ? s.acc : main == "acc_char" ? s.acc_char : s.acc_completion;
    ItemRecord r;
    r.item_id = "line " + std::to_string(it.line);
    r.prompt = prompts[k];
    r.output = it.labels[pick];
    r.target = it.labels[it.gold];
    r.verdict = pick == it.gold ? "correct" : "wrong";
    r.score = pick == it.gold ? 1 : 0;
    r.detail = {{"loglik", ll},
                {"loglik_unconditional", ll_uncond},
                {"n_chars", n_chars},
                {"choices", it.labels},
                {"gold", it.gold},
                {"pred", {{"acc", s.acc}, {"acc_char", s.acc_char}, {"acc_completion", s.acc_completion}}}};
    if (it.contexts.size() > 1) r.detail["contexts"] = it.contexts;
    if (!it.subject.empty()) r.detail["subject"] = it.subject;
    out.items.push_back(std::move(r));
  }
  const char* names[3] = {"acc", "acc_char", "acc_completion"};
  const std::vector<double>* values[3] = {&acc, &acc_char, &acc_compl};
  for (int m = 0; m < 3; ++m) out.metrics.push_back(mean_metric(names[m], *values[m]));
  if (info_.name == "mmlu") {
    // Macro: mean of the subject means; its stderr treats subjects as independent,
    // sqrt(sum se_s^2) / S. Micro: the mean over items (the same numbers as acc, acc_char, ...).
    for (int m = 0; m < 3; ++m) {
      MetricValue macro{.metric = std::string("macro_avg/") + names[m], .n = static_cast<int64_t>(which.size())};
      double var = 0;
      for (const auto& [subject, vals] : by_subject) {
        const MetricValue sm = mean_metric(names[m], vals[m]);
        macro.value += sm.value / by_subject.size();
        var += sm.stderr_ * sm.stderr_;
      }
      if (!by_subject.empty()) macro.stderr_ = std::sqrt(var) / by_subject.size();
      MetricValue micro = mean_metric(std::string("micro_avg/") + names[m], *values[m]);
      out.metrics.push_back(macro);
      out.metrics.push_back(micro);
    }
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Task>> load_choice_task(const TaskInfo& info, const std::string& path,
                                               const std::string& fewshot_path) {
  const TaskSpec spec = spec_for(info.name);
  auto items = read_items(spec, path);
  if (!items) return items.error();
  std::vector<ChoiceItem> pool, eval;
  if (!fewshot_path.empty()) {
    auto shots = read_items(spec, fewshot_path);
    if (!shots) return shots.error();
    pool = std::move(*shots);
    eval = std::move(*items);
  } else {
    // Without a few-shot file the first default_shots items (of each MMLU subject) are the
    // examples, and are not evaluated.
    std::map<std::string, int> taken;
    for (ChoiceItem& it : *items) {
      int& n = taken[shot_group(it)];
      if (n < info.default_shots) {
        ++n;
        pool.push_back(std::move(it));
      } else {
        eval.push_back(std::move(it));
      }
    }
    if (eval.empty())
      return make_error(path + ": all " + std::to_string(pool.size()) +
                        " items are taken as few-shot examples; give more items or a few-shot file");
  }
  return std::unique_ptr<Task>(
      new ChoiceTask(info, fewshot_path.empty() ? path : fewshot_path, std::move(eval), std::move(pool)));
}

}  // namespace ftx::bench
