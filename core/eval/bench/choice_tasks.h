// Pieces of the multiple-choice tasks (choice_tasks.cpp) that tests check on their own: the safe
// Python-literal reader for RACE's `problems`, HellaSwag's text clean-up, and the scoring rules.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/base/result.h"

namespace ftx::bench {

// Reads a Python literal made of lists, tuples (read as lists), dicts with string keys, str, int,
// float, True, False and None, as `ast.literal_eval` would, into JSON; nothing is executed. Strings
// take single or double quotes and Python's escapes (\n, \', \xNN, \uNNNN, ...). Errors name the
// byte offset: "python literal: offset 17: expected ',' or ']'".
Result<nlohmann::json> parse_python_literal(const std::string& text);

// lm-evaluation-harness's HellaSwag clean-up: strip, " [title]" -> ". ", drop "[...]" (not across
// a newline), then one left-to-right pass replacing "  " by " ".
std::string hellaswag_preprocess(const std::string& text);

// Python's str.capitalize on ASCII: first letter upper, every other letter lower (non-ASCII bytes
// are left alone; HellaSwag's ctx_b is ASCII in practice).
std::string ascii_capitalize(const std::string& text);

// Index of the largest value, the FIRST one on ties (numpy.argmax, what lm-eval uses).
int argmax_first(const std::vector<double>& values);

// Characters as Python's len counts them (Unicode code points) in a UTF-8 string.
size_t utf8_length(const std::string& text);

// What a multiple-choice item is scored on: per choice the log-likelihood of the continuation given
// the context, its length in characters, and its log-likelihood after the neutral context "Answer:".
struct ChoiceScores {
  int acc = 0;             // argmax LL
  int acc_char = 0;        // argmax LL / characters (lm-eval's acc_norm)
  int acc_completion = 0;  // argmax LL - LL("Answer:")
};
ChoiceScores score_choices(const std::vector<double>& loglik, const std::vector<size_t>& n_chars,
                           const std::vector<double>& loglik_unconditional);

}  // namespace ftx::bench
