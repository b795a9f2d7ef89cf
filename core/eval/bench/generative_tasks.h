// Pieces of the generative exact-match tasks (generative_tasks.cpp) that tests check on their own:
// lm-evaluation-harness's GSM8K answer filters and the exact-match normalisations.
#pragma once
#include <string>
#include <vector>

namespace ftx::bench {

// GSM8K "strict-match": the first `#### (-?[0-9.,]+)` group, else "[invalid]".
std::string gsm8k_extract_strict(const std::string& completion);
// GSM8K "flexible-extract": the last match of `(-?[$0-9.,]{2,})|(-?[0-9]+)`, else "[invalid]".
std::string gsm8k_extract_flexible(const std::string& completion);
// GSM8K's exact-match normalisation, applied to the extracted answer and to the gold `answer`
// alike: drop ",", "$", everything up to the last "#### ", a final "." (also before a final
// newline), then lower-case.
std::string gsm8k_normalize(const std::string& text);

// NQ-open / TriviaQA normalisation: (NQ only) drop the articles "the ", "a ", "an " (lm-eval's
// case-sensitive `\b(?:The |the |An |A |a |an )`), lower-case (ASCII), drop ASCII punctuation.
std::string qa_normalize(const std::string& text, bool strip_articles);

// Cuts `text` before the first occurrence of any stop string.
std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stop);

}  // namespace ftx::bench
