// Multiple-choice tasks (core/eval/bench/choice_tasks.cpp): the scoring rules on hand-computed
// log-likelihoods (ties, WinoGrande's partial scoring, MMLU's macro vs micro average), the prompts
// and choices against lm-evaluation-harness (tests/fixtures/make_lmeval_fixtures.py), RACE's
// Python literals, and bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "core/eval/bench/choice_tasks.h"
#include "tests/bench_table_lm.h"

namespace ftx::bench {
namespace {

using testing::bench_fixture;
using testing::find_metric;
using testing::TableLM;
using testing::write_temp;

std::unique_ptr<Task> load_ok(const std::string& name, const std::string& path, const std::string& fewshot = "") {
  auto t = load_task(name, path, fewshot);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<size_t> all_items(const Task& t) {
  std::vector<size_t> v(t.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

TEST(ChoiceScoring, FirstMaximumWinsTies) {
  EXPECT_EQ(argmax_first({-2, -1, -1}), 1);
  EXPECT_EQ(argmax_first({-3, -3}), 0);
  EXPECT_EQ(argmax_first({-5}), 0);
}

TEST(ChoiceScoring, HandComputedAccCharCompletion) {
  // LL: -4, -6, -4.5; per char: -1, -0.5, -1.5; minus unconditional: -3, -0.5, -3.5.
  const ChoiceScores s = score_choices({-4, -6, -4.5}, {4, 12, 3}, {-1, -5.5, -1});
  EXPECT_EQ(s.acc, 0);
  EXPECT_EQ(s.acc_char, 1);
  EXPECT_EQ(s.acc_completion, 1);
}

TEST(ChoiceScoring, CharactersAreCodePoints) {
  EXPECT_EQ(utf8_length("caf\xC3\xA9"), 4u);  // Python's len("café")
  EXPECT_EQ(utf8_length("\xE2\x82\xAC"
                        "5"),
            2u);
}

// Two ARC items whose log-likelihoods are written by hand, with ties in acc, acc_char and
// acc_completion: item 1 gold B, item 2 gold C.
TEST(ChoiceTasks, ArcHandComputedMetricsAndRequests) {
  const std::string path = write_temp(
      "arc_hand.jsonl",
      R"({"id":"1","question":"Q1","choices":{"text":["aa","bbbbbbbb","c"],"label":["A","B","C"]},"answerKey":"B"})"
      "\n"
      R"({"id":"2","question":"Q2","choices":{"text":["x","y","z"],"label":["A","B","C"]},"answerKey":"C"})"
      "\n");
  auto task = load_ok("arc_easy", path);
  ASSERT_TRUE(task);
  ASSERT_EQ(task->size(), 2u);
  TableLM lm;
  const std::string c1 = "Question: Q1\nAnswer:", c2 = "Question: Q2\nAnswer:";
  // Item 1: acc -> c (wrong); per char -1.5, -0.5, -2.5 -> b (right); completion -2, -3.5, -2 tie -> aa (wrong).
  lm.loglik_table = {{{c1, " aa"}, -3},
                     {{c1, " bbbbbbbb"}, -4},
                     {{c1, " c"}, -2.5},
                     {{"Answer:", " aa"}, -1},
                     {{"Answer:", " bbbbbbbb"}, -0.5},
                     {{"Answer:", " c"}, -0.5},
                     // Item 2: all tie -> x (wrong) for acc and acc_char; completion 0, 0, 1 -> z (right).
                     {{c2, " x"}, -1},
                     {{c2, " y"}, -1},
                     {{c2, " z"}, -1},
                     {{"Answer:", " x"}, -1},
                     {{"Answer:", " y"}, -1},
                     {{"Answer:", " z"}, -2}};
  auto r = task->evaluate(lm, all_items(*task), EvalOptions{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(lm.loglik_seen.size(), 12u);  // 6 conditional, 6 distinct unconditional
  EXPECT_EQ(lm.loglik_seen[0].context, c1);
  EXPECT_EQ(lm.loglik_seen[0].continuation, " aa");
  EXPECT_EQ(lm.loglik_seen[6].context, "Answer:");
  EXPECT_DOUBLE_EQ(find_metric(*r, "acc")->value, 0.0);
  EXPECT_DOUBLE_EQ(find_metric(*r, "acc_char")->value, 0.5);
  EXPECT_DOUBLE_EQ(find_metric(*r, "acc_completion")->value, 0.5);
  EXPECT_NEAR(find_metric(*r, "acc_char")->stderr_, 0.5, 1e-12);  // values {1, 0}: sd 0.7071 / sqrt(2)
  EXPECT_EQ(find_metric(*r, "acc")->n, 2);
  // Records follow the main metric (acc_completion for ARC-Easy).
  ASSERT_EQ(r->items.size(), 2u);
  EXPECT_EQ(r->items[0].item_id, "line 1");
  EXPECT_EQ(r->items[0].output, "aa");
  EXPECT_EQ(r->items[0].target, "bbbbbbbb");
  EXPECT_EQ(r->items[0].verdict, "wrong");
  EXPECT_EQ(r->items[1].output, "z");
  EXPECT_EQ(r->items[1].verdict, "correct");
  EXPECT_EQ(r->items[1].score, 1.0);
  EXPECT_EQ(r->items[0].detail["pred"]["acc"], 2);
  EXPECT_EQ(r->items[0].detail["pred"]["acc_char"], 1);
  EXPECT_EQ(r->items[0].detail["loglik"][1], -4.0);
  EXPECT_EQ(r->items[0].detail["gold"], 1);
}

// Partial scoring: two contexts (the sentence up to the blank with each option), one continuation.
TEST(ChoiceTasks, WinograndePartialScoring) {
  const std::string path = write_temp(
      "wino_hand.jsonl", R"({"sentence":"The cup fell off the table because _ was slippery.","option1":"the cup",)"
                         R"("option2":"the table","answer":"2"})"
                         "\n");
  auto task = load_ok("winogrande", path);
  ASSERT_TRUE(task);
  TableLM lm;
  const std::string a = "The cup fell off the table because the cup",
                    b = "The cup fell off the table because the table";
  lm.loglik_table = {{{a, " was slippery."}, -5}, {{b, " was slippery."}, -4}, {{"Answer:", " was slippery."}, -9}};
  auto r = task->evaluate(lm, {0}, EvalOptions{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(lm.loglik_seen.size(), 3u);  // the shared continuation's unconditional LL once
  EXPECT_EQ(lm.loglik_seen[0].context, a);
  EXPECT_EQ(lm.loglik_seen[1].context, b);
  EXPECT_EQ(lm.loglik_seen[1].continuation, " was slippery.");
  EXPECT_DOUBLE_EQ(find_metric(*r, "acc")->value, 1.0);
  // With one shared continuation acc_char and acc_completion choose as acc does.
  EXPECT_DOUBLE_EQ(find_metric(*r, "acc_char")->value, 1.0);
  EXPECT_DOUBLE_EQ(find_metric(*r, "acc_completion")->value, 1.0);
  EXPECT_EQ(r->items[0].output, "the table");
  // Swapped log-likelihoods pick option 1: wrong.
  lm.loglik_table[{a, " was slippery."}] = -3;
  auto r2 = task->evaluate(lm, {0}, EvalOptions{});
  ASSERT_TRUE(r2.ok());
  EXPECT_DOUBLE_EQ(find_metric(*r2, "acc")->value, 0.0);
}

TEST(ChoiceTasks, WinograndeFixtureContexts) {
  auto task = load_ok("winogrande", bench_fixture("winogrande.jsonl"));
  ASSERT_TRUE(task);
  TableLM lm;
  lm.loglik_fn = [](const LoglikRequest&) { return -1.0; };
  ASSERT_TRUE(task->evaluate(lm, {0}, EvalOptions{}).ok());
  EXPECT_EQ(lm.loglik_seen[0].context, "Sarah was a much better surgeon than Maria so Sarah");
  EXPECT_EQ(lm.loglik_seen[1].context, "Sarah was a much better surgeon than Maria so Maria");
  EXPECT_EQ(lm.loglik_seen[0].continuation, " always got the harder cases.");
}

// Subject a: 3 items, all right; subject b: 1 item, wrong. Micro 3/4, macro (1 + 0) / 2.
TEST(ChoiceTasks, MmluMacroVersusMicro) {
  std::string rows;
  for (const char* q : {"qa1", "qa2", "qa3"})
    rows += std::string(R"({"question":")") + q +
            R"(","subject":"high_school_physics","choices":["w","x","y","z"],"answer":0})" + "\n";
  rows += R"({"question":"qb1","subject":"virology","choices":["w","x","y","z"],"answer":1})"
          "\n";
  const std::string path = write_temp("mmlu_hand.jsonl", rows);
  auto task = load_ok("mmlu", path, path);  // a few-shot file, so that no item is held back
  ASSERT_TRUE(task);
  ASSERT_EQ(task->size(), 4u);
  TableLM lm;
  lm.loglik_fn = [](const LoglikRequest& r) { return r.continuation == " A" ? -1.0 : -2.0; };
  EvalOptions o;
  o.shots = 0;
  auto r = task->evaluate(lm, all_items(*task), o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_DOUBLE_EQ(find_metric(*r, "acc")->value, 0.75);
  EXPECT_DOUBLE_EQ(find_metric(*r, "micro_avg/acc_char")->value, 0.75);
  EXPECT_DOUBLE_EQ(find_metric(*r, "macro_avg/acc_char")->value, 0.5);
  EXPECT_DOUBLE_EQ(find_metric(*r, "macro_avg/acc")->value, 0.5);
  EXPECT_DOUBLE_EQ(find_metric(*r, "macro_avg/acc_completion")->value, 0.5);
  EXPECT_EQ(find_metric(*r, "macro_avg/acc_char")->n, 4);
  EXPECT_EQ(lm.loglik_seen[0].context,
            "The following are multiple choice questions (with answers) about high school physics.\n\n"
            "qa1\nA. w\nB. x\nC. y\nD. z\nAnswer:");
  EXPECT_EQ(lm.loglik_seen.size(), 16u + 4u);  // 4 letters per item, then " A".." D" after "Answer:" once each
  EXPECT_EQ(r->items[3].detail["subject"], "virology");
}

// Without a few-shot file the first K = 5 items of each subject are the examples, not evaluated.
TEST(ChoiceTasks, FewshotFromTheDataFile) {
  std::string rows;
  for (int i = 1; i <= 6; ++i)
    rows += R"({"question":"q)" + std::to_string(i) +
            R"(","subject":"virology","choices":["w","x","y","z"],"answer":)" + std::to_string(i % 4) + "}\n";
  const std::string path = write_temp("mmlu_six.jsonl", rows);
  auto task = load_ok("mmlu", path);
  ASSERT_TRUE(task);
  ASSERT_EQ(task->size(), 1u);
  TableLM lm;
  lm.loglik_fn = [](const LoglikRequest&) { return -1.0; };
  auto r = task->evaluate(lm, {0}, EvalOptions{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->items[0].item_id, "line 6");
  const std::string& ctx = lm.loglik_seen[0].context;
  EXPECT_EQ(ctx.rfind("The following are multiple choice questions (with answers) about virology.\n\n"
                      "q1\nA. w\nB. x\nC. y\nD. z\nAnswer: B\n\nq2\n",
                      0),
            0u)
      << ctx;
  EXPECT_NE(ctx.find("q5\nA. w\nB. x\nC. y\nD. z\nAnswer: B\n\nq6\nA. w"), std::string::npos) << ctx;
  // The file of the fixture has fewer than 5 items per subject: all would be examples.
  auto all_shots = load_task("mmlu", bench_fixture("mmlu.jsonl"));
  ASSERT_FALSE(all_shots.ok());
  EXPECT_NE(all_shots.error().message.find("all 7 items are taken as few-shot examples"), std::string::npos);
}

TEST(ChoiceTasks, FewshotShortageIsAnError) {
  auto task = load_ok("mmlu", bench_fixture("mmlu.jsonl"), bench_fixture("mmlu_dev.jsonl"));
  ASSERT_TRUE(task);
  TableLM lm;
  lm.loglik_fn = [](const LoglikRequest&) { return -1.0; };
  auto r = task->evaluate(lm, {0}, EvalOptions{});  // default 5 shots, the dev file has 2 per subject
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("mmlu_dev.jsonl: 5 few-shot examples asked but only 2 available for subject "
                                   "abstract_algebra"),
            std::string::npos)
      << r.error().message;
}

// ---- Against lm-evaluation-harness: the same requests, and from its log-likelihoods the same
// choices and accuracies. The log-likelihoods go through the JSON as doubles, unchanged, so the
// tolerance is zero: a different choice would be a different rule.
TEST(ChoiceTasks, AgreesWithLmEvaluationHarness) {
  std::ifstream in(bench_fixture("lmeval_choice.json"));
  ASSERT_TRUE(in);
  const nlohmann::json ref = nlohmann::json::parse(in);
  int checked_items = 0;
  for (const auto& [name, t] : ref["tasks"].items()) {
    SCOPED_TRACE(name);
    auto task = name == "mmlu" ? load_ok(name, bench_fixture("mmlu.jsonl"), bench_fixture("mmlu_dev.jsonl"))
                               : load_ok(name, bench_fixture(name + ".jsonl"));
    ASSERT_TRUE(task);
    ASSERT_EQ(task->size(), t["items"].size());
    TableLM lm;
    std::vector<std::pair<std::string, std::string>> expected;
    for (const auto& item : t["items"])
      for (const auto& q : item["requests"]) {
        lm.loglik_table[{q["context"], q["continuation"]}] = q["loglik"].get<double>();
        expected.emplace_back(q["context"], q["continuation"]);
      }
    lm.loglik_fn = [](const LoglikRequest& r) -> std::optional<double> {
      if (r.context == "Answer:") return 0.0;  // acc_completion's requests: not lm-eval's, not checked here
      return std::nullopt;
    };
    EvalOptions o;
    o.shots = t["num_fewshot"];
    auto r = task->evaluate(lm, all_items(*task), o);
    ASSERT_TRUE(r.ok()) << r.error().message;
    std::vector<std::pair<std::string, std::string>> ours;
    for (const LoglikRequest& q : lm.loglik_seen)
      if (q.context != "Answer:") ours.emplace_back(q.context, q.continuation);
    ASSERT_EQ(ours.size(), expected.size());
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_EQ(ours[i].first, expected[i].first) << "request " << i;
      EXPECT_EQ(ours[i].second, expected[i].second) << "request " << i;
    }
    double acc = 0, acc_norm = 0;
    for (size_t k = 0; k < r->items.size(); ++k) {
      const auto& want = t["items"][k];
      const nlohmann::json& d = r->items[k].detail;
      EXPECT_EQ(r->items[k].item_id, "line " + std::to_string(want["line"].get<int>()));
      EXPECT_EQ(d["pred"]["acc"], want["pred"]) << "item " << k;
      EXPECT_EQ(d["pred"]["acc_char"], want["pred_norm"]) << "item " << k;
      const double our_acc = d["pred"]["acc"] == d["gold"], our_char = d["pred"]["acc_char"] == d["gold"];
      EXPECT_EQ(our_acc, want["acc"].get<double>()) << "item " << k;
      if (!want["acc_norm"].is_null()) {
        EXPECT_EQ(our_char, want["acc_norm"].get<double>()) << "item " << k;
      }
      acc += want["acc"].get<double>();
      acc_norm += want["acc_norm"].is_null() ? our_char : want["acc_norm"].get<double>();
      ++checked_items;
    }
    EXPECT_DOUBLE_EQ(find_metric(*r, "acc")->value, acc / r->items.size());
    EXPECT_DOUBLE_EQ(find_metric(*r, "acc_char")->value, acc_norm / r->items.size());
  }
  EXPECT_EQ(checked_items, 7 + 4 + 4 + 3);
}

// Every fixture loads, and each item's requests are well formed.
TEST(ChoiceTasks, EveryFixtureLoads) {
  for (const char* name : {"csqa", "hellaswag", "arc_easy", "arc_challenge", "piqa", "winogrande", "boolq", "obqa",
                           "race_middle", "race_high"}) {
    SCOPED_TRACE(name);
    auto task = load_ok(name, bench_fixture(std::string(name) + ".jsonl"));
    ASSERT_TRUE(task);
    EXPECT_GT(task->size(), 0u);
    TableLM lm;
    lm.loglik_fn = [](const LoglikRequest& r) { return -static_cast<double>(r.continuation.size()); };
    auto r = task->evaluate(lm, all_items(*task), EvalOptions{});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->items.size(), task->size());
    EXPECT_FALSE(task->score_samples({}, EvalOptions{}).ok());
  }
}

TEST(ChoiceTasks, BoolqCsqaObqaPrompts) {
  TableLM lm;
  lm.loglik_fn = [](const LoglikRequest&) { return -1.0; };
  auto boolq = load_ok("boolq", bench_fixture("boolq.jsonl"));
  ASSERT_TRUE(boolq && boolq->evaluate(lm, {1}, EvalOptions{}).ok());
  EXPECT_EQ(lm.loglik_seen[0].context,
            "Good Samaritan law -- Good Samaritan laws offer legal protection to people who give reasonable "
            "assistance to those who are, or who they believe to be, injured, ill, in peril, or otherwise "
            "incapacitated.\nQuestion: do good samaritan laws protect those who help at an accident?\nAnswer:");
  EXPECT_EQ(lm.loglik_seen[0].continuation, " no");
  EXPECT_EQ(lm.loglik_seen[1].continuation, " yes");
  lm.loglik_seen.clear();
  auto csqa = load_ok("csqa", bench_fixture("csqa.jsonl"));
  ASSERT_TRUE(csqa && csqa->evaluate(lm, {1}, EvalOptions{}).ok());
  EXPECT_EQ(lm.loglik_seen[0].context,
            "Question: What do people aim to do at work?\nA. complete job\nB. learn from each other\nC. kill "
            "animals\nD. wear hats\nE. talk to each other\nAnswer:");
  EXPECT_EQ(lm.loglik_seen[4].continuation, " E");
  lm.loglik_seen.clear();
  auto obqa = load_ok("obqa", bench_fixture("obqa.jsonl"));
  ASSERT_TRUE(obqa);
  auto r = obqa->evaluate(lm, {2}, EvalOptions{});  // answerKey " C": stripped on the left
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(lm.loglik_seen[0].context, "When food is reduced in the stomach");
  EXPECT_EQ(r->items[0].target, "nutrients are being deconstructed");
}

// ---- RACE and its Python-literal `problems`.

TEST(PythonLiteral, ReadsWhatReprWrites) {
  auto v = parse_python_literal(
      R"([{'answer': 'A', 'options': ["it's", 'say "hi"', 'back\\slash', 'tab\there'], 'question': 'caf\xe9 \u20ac \n'},)"
      R"( (1, -2.5, True, None)])");
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_EQ((*v)[0]["options"][0], "it's");
  EXPECT_EQ((*v)[0]["options"][1], "say \"hi\"");
  EXPECT_EQ((*v)[0]["options"][2], "back\\slash");
  EXPECT_EQ((*v)[0]["options"][3], "tab\there");
  EXPECT_EQ((*v)[0]["question"], "caf\xC3\xA9 \xE2\x82\xAC \n");
  EXPECT_EQ((*v)[1][0], 1);
  EXPECT_EQ((*v)[1][1], -2.5);
  EXPECT_EQ((*v)[1][2], true);
  EXPECT_TRUE((*v)[1][3].is_null());
}

TEST(PythonLiteral, RejectsWhatIsNotALiteral) {
  for (const char* bad :
       {"__import__('os').system('true')", "[1, 2", "{'a' 1}", "['unterminated]", "[1] x", "{1: 2}", "'\\x4'", ""}) {
    auto v = parse_python_literal(bad);
    EXPECT_FALSE(v.ok()) << bad;
    if (!v.ok()) {
      EXPECT_EQ(v.error().message.rfind("python literal: offset ", 0), 0u) << v.error().message;
    }
  }
}

TEST(ChoiceTasks, RaceInlinesEarlierProblems) {
  auto task = load_ok("race_high", bench_fixture("race_high.jsonl"));
  ASSERT_TRUE(task);
  TableLM lm;
  lm.loglik_fn = [](const LoglikRequest&) { return -1.0; };
  auto r = task->evaluate(lm, {0}, EvalOptions{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string& ctx = lm.loglik_seen[0].context;
  EXPECT_EQ(ctx.rfind("Article: The rain had continued", 0), 0u);
  EXPECT_NE(ctx.find("\"It's Nancy's cows,\" he said later.\n\nQuestion: What was Nancy Brown?\nAnswer: a farmer\n"
                     "Nancy's farm was damaged by the flood\nWhat happened to Nancy after she hit her head?"),
            std::string::npos)
      << ctx;
  EXPECT_EQ(ctx.substr(ctx.size() - 5), "head?");
  EXPECT_EQ(lm.loglik_seen[3].continuation, " She went to the hospital.");
  EXPECT_EQ(r->items[0].target, "She went to the hospital.");
  // ehovy/race's one-question-per-row export (the only one with "middle"): the article, then the question.
  auto middle = load_ok("race_middle", bench_fixture("race_middle.jsonl"));
  ASSERT_TRUE(middle);
  ASSERT_EQ(middle->size(), 2u);
  lm.loglik_seen.clear();
  auto m = middle->evaluate(lm, {1}, EvalOptions{});
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(lm.loglik_seen[0].context,
            "Article: Mary's family lives in a small town. Every Sunday they go to the park near their house. Mary "
            "likes to fly kites there. Her brother Tom likes to play football with his friends.\n\nWhat does Mary "
            "like to do in the park?");
  EXPECT_EQ(m->items[0].target, "fly kites");
}

// ---- Bad input: one line naming the file, the line and the field.

TEST(ChoiceTasks, BadInput) {
  auto err = [](const std::string& task, const std::string& path) {
    auto t = load_task(task, path);
    return t.ok() ? std::string("(loaded)") : t.error().message;
  };
  const std::string malformed = write_temp("malformed.jsonl", R"({"goal":"g","sol1":"a","sol2":"b","label":0})"
                                                              "\n"
                                                              R"({"goal": "g", "sol1": )"
                                                              "\n");
  EXPECT_EQ(err("piqa", malformed), malformed + ": line 2: not valid JSON");
  EXPECT_EQ(err("mmlu", bench_fixture("arc_easy.jsonl")),
            bench_fixture("arc_easy.jsonl") + ": line 1: field 'subject' missing");
  EXPECT_EQ(err("hellaswag", bench_fixture("piqa.jsonl")),
            bench_fixture("piqa.jsonl") + ": line 1: field 'activity_label' missing");
  const std::string empty = write_temp("empty.jsonl", "\n\n");
  EXPECT_EQ(err("arc_easy", empty), empty + ": empty (no JSON lines)");
  const std::string range = write_temp("range.jsonl", R"({"goal":"g","sol1":"a","sol2":"b","label":2})"
                                                      "\n");
  EXPECT_EQ(err("piqa", range), range + ": line 1: field 'label' out of range (2 for 2 choices)");
  const std::string key =
      write_temp("key.jsonl", R"({"question":"q","choices":{"text":["a","b"],"label":["A","B"]},"answerKey":"E"})"
                              "\n");
  EXPECT_EQ(err("arc_challenge", key), key + ": line 1: field 'answerKey' 'E' is not among choices.label");
  const std::string race = write_temp("race_bad.jsonl", R"({"article":"a","problems":"[{'answer': 'A',"})"
                                                        "\n");
  EXPECT_NE(err("race_high", race).find(race + ": line 1: field 'problems': python literal: offset"),
            std::string::npos);
  EXPECT_EQ(err("race_middle", bench_fixture("mmlu.jsonl")),
            bench_fixture("mmlu.jsonl") + ": line 1: field 'article' missing");
  const std::string no_options = write_temp("race_no_options.jsonl", R"({"article":"a","question":"q","choices":[]})"
                                                                     "\n");
  EXPECT_EQ(err("race_high", no_options), no_options + ": line 1: field 'options' missing");
  const std::string blank =
      write_temp("blank.jsonl", R"({"sentence":"no blank","option1":"a","option2":"b","answer":"1"})"
                                "\n");
  EXPECT_EQ(err("winogrande", blank), blank + ": line 1: field 'sentence' has no '_' blank");
  const std::string label = write_temp("label.jsonl", R"({"goal":"g","sol1":"a","sol2":"b","label":"x"})"
                                                      "\n");
  EXPECT_EQ(err("piqa", label), label + ": line 1: field 'label' is not an integer (got \"x\")");
}

}  // namespace
}  // namespace ftx::bench
