// Evaluation during and after training (docs/design.md section 6, docs/figure4.md): validation cross-entropy with
// Z from the posterior (optimistic: the encoder saw the targets) and from the uniform prior (what
// generation sees), KL, ELBO, and for the synthetic task the Figure 4 group metrics measured on
// generations: independent groups (a new Z per sequence) and fixed-Z groups (one Z per group).
//
// Deliberately not here: printing (app/), storing (the caller writes the returned metrics).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/data/batch_source.h"
#include "core/eval/synth_metrics.h"
#include "core/model/model.h"
#include "core/sample/sampler.h"
#include "core/text/tokenizer.h"

namespace ftx {

struct EvalConfig {
  int val_sequences = 256;  // held-out sequences for the CE / KL numbers
  int batch = 64;           // sequences per forward pass (activation memory grows with it)
  int prompts = 16;         // synthetic task: one independent and one fixed-Z group per prompt
  int group_size = 8;
  bool synthetic = true;
  uint64_t seed = 1234;
  float temperature = 1.0f;
};

using Metrics = std::vector<std::pair<std::string, double>>;

// One prompt's Figure 4 comparison: group 0 is independent (a new Z per sequence), groups
// 1..fixed_groups each reuse one Z drawn from the prior. Seeds derive from `seed`.
struct GroupResult {
  int group = 0;
  bool fixed = false;
  std::vector<Generation> gens;
  std::vector<uint64_t> latent_seeds;  // the Z seed of each sequence (the group's for fixed groups)
  double valid = 0, agreement = 0, noise_agreement = 0;
  int start = -1;                         // the group's target start (GroupMetrics::start); -1 when none is valid
  std::vector<AgreementAt> agreement_at;  // GroupMetrics::agreement_at
};
// Fills g.valid / agreement / noise_agreement / start from its generations (NaN when the prompt is not a
// synthetic-task prompt). The metrics read the generations as text decoded by `tokenizer`.
void score_group(GroupResult& g, const Tokenizer& tokenizer);
// Each generation of g read as a synthetic-task text (those that are: "<letter>>" then a body).
std::vector<SynthAnalysis> analyze_generations(const GroupResult& g, const Tokenizer& tokenizer);
// The sequences of Figure 4's groups: `independent` sequences with a Z each (group 0), then
// `fixed_groups` groups of `group_size` sharing one Z; n_in input positions, H latent bits. The
// Z seeds derive from latent_seed, the token-sampling seeds from sample_seed (the synthetic task
// passes one seed for both; "Freeze Z" keeps latent_seed and changes sample_seed).
// latent_seeds (one per sequence) and group_of (the group of each sequence) are filled when given.
std::vector<SequenceSpec> figure4_specs(int independent, int fixed_groups, int group_size, uint64_t latent_seed,
                                        uint64_t sample_seed, int n_in, int H,
                                        std::vector<uint64_t>* latent_seeds = nullptr,
                                        std::vector<int>* group_of = nullptr);
std::vector<GroupResult> figure4_groups(Model& model, const std::vector<int32_t>& prompt, int independent,
                                        int fixed_groups, int group_size, uint64_t seed, const SampleConfig& cfg,
                                        const Tokenizer& tokenizer);

// When `samples` is given, it receives the groups of the first prompt (for the run store).
Metrics evaluate(Model& model, const BatchSource& data, const EvalConfig& cfg, float kappa,
                 std::vector<GroupResult>* samples = nullptr);

}  // namespace ftx
