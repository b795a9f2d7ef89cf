// The Figure 4 measurement of one synthetic-task model (docs/figure4.md), the numbers behind
// `ftx sweep`, `ftx demo`, the shipped models' tests and the studio's Figure 4 page: for each
// prompt, independent sequences (a Z each) and fixed-Z groups (one Z per group), Z from the
// uniform prior, temperature 1, every seed derived from Figure4Protocol::seed.
//
// Deliberately not here: the training data's start distribution (datasets/synthetic.h gives it,
// the caller passes it), printing, and opening the run store (callers read and write the rows).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/eval/evaluator.h"
#include "core/eval/synth_metrics.h"
#include "core/model/model.h"
#include "core/store/run_store.h"
#include "core/text/tokenizer.h"
#include "kernels/result.h"

namespace ftx {

struct Figure4Protocol {
  std::vector<std::string> prompts{"K>", "Q>"};
  int independent = 1000;  // per prompt: the start spread needs about 1,000 (57 bins)
  int fixed_groups = 32;   // per prompt
  int group_size = 8;
  uint64_t seed = 7;
};

struct Figure4Numbers {
  Estimate valid;                  // over every generated sequence (binomial standard error)
  Estimate agree_fixed;            // over the fixed-Z groups: each group's pair agreement
  Estimate noise_fixed;            // over the fixed-Z groups: each group's noise agreement
  Estimate agree_indep;            // over the independent sequences: the share of the others agreeing with each
  Estimate noise_indep;            // pair noise agreement among each prompt's independent sequences (se 0)
  Estimate agree_late;             // over fixed-Z sequences whose target starts at kLateStart or later
  double start_tv = 0;             // independent sequences' starts against the data's (total variation)
  std::vector<StartBin> by_start;  // fixed-Z sequences by target start (agreement_by_start)
};

// Measures `model` (a synthetic-task Free Transformer: its tokenizer encodes the prompts,
// sequences of seq_len tokens). data_starts: the training data's start distribution (57 values).
// Errors: a prompt the tokenizer cannot encode, or that is not "<letter>>", or a protocol without
// sequences.
Result<Figure4Numbers> measure_figure4(Model& model, const Tokenizer& tokenizer, int seq_len,
                                       const std::vector<double>& data_starts, const Figure4Protocol& protocol);

// The numbers as run-store metrics ("fig4/valid", "fig4/valid_se", ..., "fig4/start_tv") and back
// (missing keys stay NaN): what ftx sweep stores at the measured step and the demo and studio read.
std::vector<std::pair<std::string, double>> figure4_metrics(const Figure4Numbers& f);
Figure4Numbers figure4_from_metrics(const std::vector<std::pair<std::string, double>>& metrics);
// The numbers recorded among a run's metric rows at `step` (a checkpoint's); nullopt when that
// checkpoint was never measured.
std::optional<Figure4Numbers> stored_figure4(const std::vector<MetricRow>& rows, int64_t step);

}  // namespace ftx
