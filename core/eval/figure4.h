// The Figure 4 measurement of one synthetic-task model (docs/figure4.md), the numbers behind
// `ftx sweep`, `ftx demo`, the shipped models' tests and the studio's Figure 4 page: for each
// prompt, independent sequences (a Z each) and fixed-Z groups (one Z per group), Z from the
// uniform prior, temperature 1, every seed derived from Figure4Protocol::seed.
//
// Deliberately not here: the training data's start distribution (datasets/synthetic.h gives it,
// the caller passes it), printing, and opening the run store (callers read and write the rows).
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/data/batch_source.h"
#include "core/eval/evaluator.h"
#include "core/eval/synth_metrics.h"
#include "core/model/model.h"
#include "core/store/run_store.h"
#include "core/text/tokenizer.h"
#include "kernels/base/result.h"

namespace ftx {

struct Figure4Protocol {
  std::vector<std::string> prompts{"K>", "Q>"};
  int independent = 1000;  // per prompt: the start spread needs about 1,000 (57 bins)
  int fixed_groups = 32;   // per prompt
  int group_size = 8;
  uint64_t seed = 7;
};

// Where the encoder spends KL on held-out data (Z from the encoder, as in training): the mean KL at
// each input position, and for synthetic-task sequences with one possible target start s, around
// the input position that announces it. Input position s + 1 is where the model predicts the
// target's first letter (body character s, sequence index s + 2), the last Z the decoder reads
// before it must decide; kStartWindow positions on each side.
inline constexpr int kStartWindow = 4;
struct KlProfile {
  std::vector<double> at;            // (T) mean KL (nats) at each input position over the sequences
  std::vector<double> around_start;  // (2 kStartWindow + 1) mean KL at offsets -4..4 from s + 1
  double elsewhere = std::nan("");   // mean KL at the positions outside that window
  // Latent bits the encoder has decided (p < 0.1 or p > 0.9) per position: at s + 1 and outside
  // the window. A code that pins "the target starts here" fixes k bits there (a cube of prior mass
  // 2^-k): this is k as the trained encoder chose it.
  double bits_at_start = std::nan(""), bits_elsewhere = std::nan("");
  int sequences = 0, with_start = 0;  // sequences read, and those with one possible start
};
// The first n_seq validation sequences of `data` (an error when n_seq < 1 or the model has no Z).
Result<KlProfile> kl_profile(Model& model, const BatchSource& data, int n_seq);

struct Figure4Numbers {
  Estimate valid;                  // over every generated sequence (binomial standard error)
  Estimate agree_fixed;            // over the fixed-Z groups: each group's pair agreement
  Estimate noise_fixed;            // over the fixed-Z groups: each group's noise agreement
  Estimate agree_indep;            // over the independent sequences: the share of the others agreeing with each
  Estimate noise_indep;            // pair noise agreement among each prompt's independent sequences (se 0)
  Estimate agree_late;             // over fixed-Z sequences whose target starts at kLateStart or later
  double start_tv = 0;             // independent sequences' starts against the data's (total variation)
  std::vector<StartBin> by_start;  // fixed-Z sequences by target start (agreement_by_start)
  KlProfile kl;                    // on the training data's held-out sequences (figure4_row passes them)
};

// Measures `model` (a synthetic-task Free Transformer: its tokenizer encodes the prompts,
// sequences of seq_len tokens). data_starts: the training data's start distribution (57 values).
// Errors: a prompt the tokenizer cannot encode, or that is not "<letter>>", or a protocol without
// sequences.
Result<Figure4Numbers> measure_figure4(Model& model, const Tokenizer& tokenizer, int seq_len,
                                       const std::vector<double>& data_starts, const Figure4Protocol& protocol);

// The numbers as run-store metrics ("fig4/valid", "fig4/valid_se", ..., "fig4/start_tv", the KL
// profile as "fig4/kl_at/<t>", "fig4/kl_start/<offset>", "fig4/kl_elsewhere", "fig4/bits_start",
// "fig4/bits_elsewhere") and back (missing keys stay NaN or empty): what ftx sweep stores at the
// measured step and the demo and studio read.
std::vector<std::pair<std::string, double>> figure4_metrics(const Figure4Numbers& f);
Figure4Numbers figure4_from_metrics(const std::vector<std::pair<std::string, double>>& metrics);
// The numbers recorded among a run's metric rows at `step` (a checkpoint's); nullopt when that
// checkpoint was never measured.
std::optional<Figure4Numbers> stored_figure4(const std::vector<MetricRow>& rows, int64_t step);

}  // namespace ftx
