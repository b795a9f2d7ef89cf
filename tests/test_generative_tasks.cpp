// Generative exact-match tasks (core/eval/bench/generative_tasks.cpp): GSM8K's answer extraction
// and normalisation and NQ-open's / TriviaQA's exact match against lm-evaluation-harness's own
// filters (tests/fixtures/bench/lmeval_generative.json, made by make_lmeval_fixtures.py), the
// prompts and stop strings, score_samples, and bad input.
#include <gtest/gtest.h>

#include <fstream>

#include <set>
#include "core/eval/bench/generative_tasks.h"

#include "tests/bench_table_lm.h"

namespace ftx::bench {
namespace {

using testing::bench_fixture;
using testing::find_metric;
using testing::TableLM;
using testing::write_temp;

nlohmann::json reference() {
  std::ifstream in(bench_fixture("lmeval_generative.json"));
  EXPECT_TRUE(in);
  return nlohmann::json::parse(in);
}

TEST(Gsm8kExtraction, TrickyAnswersByHand) {
  EXPECT_EQ(gsm8k_extract_strict("so 1,250 in all.\n#### 1,250"), "1,250");
  EXPECT_EQ(gsm8k_extract_strict("#### -250,000"), "-250,000");
  EXPECT_EQ(gsm8k_extract_strict("#### $18"), "[invalid]");  // '$' is not in the strict pattern
  EXPECT_EQ(gsm8k_extract_strict("The answer is 18."), "[invalid]");
  EXPECT_EQ(gsm8k_extract_strict("##### 12"), "12");
  EXPECT_EQ(gsm8k_extract_flexible("3 + 4 = 7, so 9 * 2 = 18"), "18");
  EXPECT_EQ(gsm8k_extract_flexible("It costs $1,000.50 in total."), "$1,000.50");
  EXPECT_EQ(gsm8k_extract_flexible("a-12b"), "-12");
  EXPECT_EQ(gsm8k_extract_flexible("no digits"), "[invalid]");
  EXPECT_EQ(gsm8k_normalize("$1,000.50"), "1000.50");
  EXPECT_EQ(gsm8k_normalize("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72"), "72");
  EXPECT_EQ(gsm8k_normalize("18."), "18");
  EXPECT_EQ(gsm8k_normalize("10.\n"), "10\n");
  EXPECT_EQ(gsm8k_normalize("-250,000"), "-250000");
}

// Every completion of the fixture: lm-eval's strict and flexible filters and its exact match.
TEST(Gsm8kExtraction, AgreesWithLmEvaluationHarness) {
  const nlohmann::json ref = reference();
  ASSERT_GE(ref["gsm8k"].size(), 10u);
  for (const auto& c : ref["gsm8k"]) {
    const std::string text = c["completion"];
    SCOPED_TRACE(text);
    const std::string strict = gsm8k_extract_strict(text), flexible = gsm8k_extract_flexible(text);
    EXPECT_EQ(strict, c["strict"].get<std::string>());
    EXPECT_EQ(flexible, c["flexible"].get<std::string>());
    const std::string gold = gsm8k_normalize(c["gold"]);
    EXPECT_EQ(gsm8k_normalize(strict) == gold, c["em_strict"].get<double>() == 1.0);
    EXPECT_EQ(gsm8k_normalize(flexible) == gold, c["em_flexible"].get<double>() == 1.0);
  }
}

TEST(QaExactMatch, AgreesWithLmEvaluationHarness) {
  const nlohmann::json ref = reference();
  ASSERT_GE(ref["qa"].size(), 8u);
  for (const auto& c : ref["qa"]) {
    const std::string text = c["completion"];
    SCOPED_TRACE(text);
    const bool nq = c["task"] == "nq_open";
    std::string stripped = text;
    stripped.erase(0, stripped.find_first_not_of(" \t\n"));
    stripped.erase(stripped.find_last_not_of(" \t\n") + 1);
    bool hit = false;
    for (const auto& g : c["golds"]) hit |= qa_normalize(g, nq) == qa_normalize(stripped, nq);
    EXPECT_EQ(hit, c["em"].get<double>() == 1.0);
  }
}

TEST(QaExactMatch, Normalisation) {
  EXPECT_EQ(qa_normalize("The Beatles", true), "beatles");
  EXPECT_EQ(qa_normalize("THE Beatles", true), "the beatles");  // lm-eval's article regex is case-sensitive
  EXPECT_EQ(qa_normalize("The Beatles", false), "the beatles");
  EXPECT_EQ(qa_normalize("Lennon's band!", false), "lennons band");
  EXPECT_EQ(qa_normalize("Athena", true), "athena");  // "A" only as a word of its own
  EXPECT_EQ(cut_at_stop("Paris, France.", {"\n", ".", ","}), "Paris");
}

// GSM8K end to end: the 2-shot prompt, the stop strings, greedy decoding, both metrics.
TEST(GenerativeTasks, Gsm8kPromptsAndMetrics) {
  auto task = load_task("gsm8k", bench_fixture("gsm8k.jsonl"), bench_fixture("gsm8k.jsonl"));
  ASSERT_TRUE(task.ok()) << task.error().message;
  ASSERT_EQ((*task)->size(), 4u);
  TableLM lm;
  // Item 3 (Janet, 18): right under both filters; item 4 (-250,000): only a bare number, so only
  // the flexible filter finds it; the model then runs on past the stop string.
  lm.generate_fn = [](const GenRequest& r) -> std::string {
    if (r.prompt.ends_with("farmers' market?\nAnswer:")) return " 9 * 2 = 18 dollars.\n#### 18";
    if (r.prompt.ends_with("change?\nAnswer:")) return " It changed by -250,000.\n\nQuestion: next one #### 7";
    return " no idea";
  };
  EvalOptions o;
  o.shots = 2;
  auto r = (*task)->evaluate(lm, {2, 3}, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(lm.generate_seen.size(), 2u);
  const GenRequest& g = lm.generate_seen[0];
  EXPECT_EQ(g.prompt.rfind("Question: Natalia sold clips to 48 of her friends", 0), 0u);
  EXPECT_NE(g.prompt.find("\n#### 72\n\nQuestion: Weng earns $12 an hour"), std::string::npos);
  EXPECT_NE(g.prompt.find("#### 10\n\nQuestion: Janet's ducks"), std::string::npos);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"Question:", "</s>", "<|im_end|>"}));
  EXPECT_EQ(g.temperature, 0.0f);
  EXPECT_EQ(g.max_new_tokens, 256);
  EXPECT_DOUBLE_EQ(find_metric(*r, "em_strict")->value, 0.5);
  EXPECT_DOUBLE_EQ(find_metric(*r, "em_flexible")->value, 1.0);
  EXPECT_EQ(r->items[1].item_id, "line 4");
  EXPECT_EQ(r->items[1].output, " It changed by -250,000.\n\n");
  EXPECT_EQ(r->items[1].detail["strict"], "[invalid]");
  EXPECT_EQ(r->items[1].detail["flexible"], "-250,000.");
  EXPECT_EQ(r->items[1].verdict, "wrong");  // the main metric is em_strict
  EXPECT_EQ(r->items[0].verdict, "correct");
}

// samples = M: each item answered under M draws of Z (M seeds, greedy tokens), the most frequent
// answer counts (maj@M), its first generation is the item's output.
TEST(GenerativeTasks, MajorityOverSeveralZ) {
  auto task = load_task("gsm8k", bench_fixture("gsm8k.jsonl"), bench_fixture("gsm8k.jsonl"));
  ASSERT_TRUE(task.ok()) << task.error().message;
  TableLM lm;
  int call = 0;
  // Item 3 (gold 18): 18, 20, 18 → right; item 4 (gold -250,000): 7, 7, -250,000 → wrong.
  const std::vector<std::string> answers = {" a\n#### 18", " b\n#### 20", " c\n#### 18",
                                            " d\n#### 7",  " e\n#### 7",  " f\n#### -250,000"};
  lm.generate_fn = [&](const GenRequest&) { return answers[call++]; };
  EvalOptions o;
  o.shots = 2;
  o.samples = 3;
  auto r = (*task)->evaluate(lm, {2, 3}, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(lm.generate_seen.size(), 6u);
  std::set<uint64_t> seeds;
  for (const GenRequest& g : lm.generate_seen) {
    seeds.insert(g.seed);
    EXPECT_EQ(g.temperature, 0.0f);
  }
  EXPECT_EQ(seeds.size(), 6u) << "a draw of Z per generation";
  EXPECT_DOUBLE_EQ(find_metric(*r, "em_strict")->value, 0.5);
  EXPECT_EQ(r->items[0].output, " a\n#### 18");
  EXPECT_EQ(r->items[0].detail["votes"], 2);
  EXPECT_EQ(r->items[1].output, " d\n#### 7");
  EXPECT_EQ(r->items[1].verdict, "wrong");
}

TEST(GenerativeTasks, NqPromptWithDescriptionAndAliases) {
  auto task = load_task("nq_open", bench_fixture("nq_open.jsonl"), bench_fixture("nq_open.jsonl"));
  ASSERT_TRUE(task.ok()) << task.error().message;
  TableLM lm;
  lm.generate_fn = [](const GenRequest& r) -> std::string {
    return r.prompt.ends_with("the beatles?\nA:") ? " The Beatles' John Lennon" : " Burt Bacharach";
  };
  EvalOptions o;
  o.shots = 1;
  auto r = (*task)->evaluate(lm, {1, 2}, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(lm.generate_seen[0].prompt,
            "Answer these questions:\n\nQ: where did they film hot tub time machine?\nA: Fernie Alpine Resort\n"
            "Q: who sang the song i'll never fall in love again?\nA:");
  EXPECT_EQ(lm.generate_seen[0].stop, (std::vector<std::string>{"\n", ".", ","}));
  EXPECT_DOUBLE_EQ(find_metric(*r, "em")->value, 1.0);  // the second alias, and an article-stripped alias
}

TEST(GenerativeTasks, TriviaqaZeroShot) {
  auto task = load_task("triviaqa", bench_fixture("triviaqa.jsonl"));
  ASSERT_TRUE(task.ok()) << task.error().message;
  ASSERT_EQ((*task)->size(), 2u);
  TableLM lm;
  lm.generate_fn = [](const GenRequest&) -> std::string { return " Sunset Blvd. is the answer"; };
  auto r = (*task)->evaluate(lm, {0, 1}, EvalOptions{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(lm.generate_seen[0].prompt,
            "Question: Which Lloyd Webber musical premiered in the US on 10th December 1993?\nAnswer:");
  EXPECT_DOUBLE_EQ(find_metric(*r, "em")->value, 0.5);
  EXPECT_NEAR(find_metric(*r, "em")->stderr_, 0.5, 1e-12);
}

TEST(GenerativeTasks, ScoreSamplesByItemId) {
  auto task = load_task("gsm8k", bench_fixture("gsm8k.jsonl"), bench_fixture("gsm8k.jsonl"));
  ASSERT_TRUE(task.ok());
  auto r = (*task)->score_samples(
      {{"line 1", " 48 + 24 = 72\n#### 72"}, {"line 2", " $10.\n\nQuestion: #### 10"}, {"line 4", "#### -250,000."}},
      EvalOptions{});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_DOUBLE_EQ(find_metric(*r, "em_strict")->value, 2.0 / 3);  // line 2 has no "#### " before the stop
  EXPECT_DOUBLE_EQ(find_metric(*r, "em_flexible")->value, 1.0);
  auto bad = (*task)->score_samples({{"HumanEval/0", "x"}}, EvalOptions{});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("task_id 'HumanEval/0' is not an evaluated item"), std::string::npos);
}

TEST(GenerativeTasks, BadInput) {
  auto err = [](const std::string& task, const std::string& path, const std::string& fewshot = "") {
    auto t = load_task(task, path, fewshot);
    return t.ok() ? std::string("(loaded)") : t.error().message;
  };
  EXPECT_EQ(err("triviaqa", bench_fixture("nq_open.jsonl")),
            bench_fixture("nq_open.jsonl") + ": line 1: field 'answer' is not an object {aliases, value}");
  EXPECT_EQ(err("gsm8k", bench_fixture("nq_open.jsonl"), bench_fixture("nq_open.jsonl")),
            bench_fixture("nq_open.jsonl") + ": line 1: field 'answer' is not a string");
  EXPECT_EQ(err("nq_open", bench_fixture("mmlu.jsonl")),
            bench_fixture("mmlu.jsonl") + ": line 1: field 'answer' is not a list");
  const std::string malformed =
      write_temp("gen_malformed.jsonl", "{\"question\": \"q\", \"answer\": [\"a\"]}\n[1, 2]\n");
  EXPECT_EQ(err("nq_open", malformed), malformed + ": line 2: not a JSON object");
  const std::string empty = write_temp("gen_empty.jsonl", "");
  EXPECT_EQ(err("gsm8k", empty), empty + ": empty (no JSON lines)");
  // GSM8K's 5 default shots would take every item of a 4-item file.
  EXPECT_NE(err("gsm8k", bench_fixture("gsm8k.jsonl")).find("all 4 items are taken as few-shot examples"),
            std::string::npos);
}

}  // namespace
}  // namespace ftx::bench
