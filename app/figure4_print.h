// Terminal rendering of the Figure 4 comparison (shared by ftx generate and ftx demo): target
// letters bold and coloured, noise dimmed, invalid rows marked, group metrics on each group.
#pragma once
#include <string>
#include <vector>

#include "core/eval/evaluator.h"
#include "core/text/tokenizer.h"

namespace ftx::app {

std::string render(const std::string& text);
std::string group_title(const GroupResult& g, int size);
void print_group(const GroupResult& g, const Tokenizer& tokenizer);
// Synthetic task: the fixed-Z groups' agreement by target start, and how the independent group's
// targets spread over the body against the training data's (total variation). Nothing otherwise.
void print_by_start(const std::vector<GroupResult>& groups, const Tokenizer& tokenizer);

}  // namespace ftx::app
