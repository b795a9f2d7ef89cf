// Figure 4 in the terminal (shared by ftx generate, ftx sweep and ftx demo): groups with target
// letters bold and coloured, noise dimmed, invalid rows marked, group metrics on each group; and
// the measured table of a sweep (core/eval/figure4.h), one row per run.
#pragma once
#include <string>
#include <vector>

#include "core/eval/evaluator.h"
#include "core/eval/figure4.h"
#include "core/text/tokenizer.h"

namespace ftx::app {

std::string render(const std::string& text);
std::string group_title(const GroupResult& g, int size);
void print_group(const GroupResult& g, const Tokenizer& tokenizer);
// Synthetic task: the fixed-Z groups' agreement by target start, and how the independent group's
// targets spread over the body against the training data's (total variation). Nothing otherwise.
void print_by_start(const std::vector<GroupResult>& groups, const Tokenizer& tokenizer);

// One synthetic-task run at its latest checkpoint, measured with the Figure 4 protocol.
struct Figure4Row {
  std::string run;
  double kappa_bits = 0;
  int step = 0;
  double ce_prior = 0, kl = 0;  // the run's last val/ce_prior and val/kl
  Figure4Numbers numbers;
};
// The run's numbers at its latest checkpoint: read from the store ("fig4/..." metrics at that
// step) when measured before, else measured now with `protocol` and stored (db is then written).
Result<Figure4Row> figure4_row(const std::string& db, const std::string& run, const Figure4Protocol& protocol);
// The table, then print_kl_profiles.
void print_figure4_table(const std::vector<Figure4Row>& rows);
// Where each run spends KL (fig4 KL profile) against what the position code costs.
void print_kl_profiles(const std::vector<Figure4Row>& rows);
// Held-out sequences of the KL profile.
inline constexpr int kFigure4KlSequences = 512;

}  // namespace ftx::app
