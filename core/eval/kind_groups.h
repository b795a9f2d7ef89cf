// The text-kinds measurement (docs/text_latent.md): Figure 4's protocol on a Free Transformer
// trained on the text-kinds corpus. From one neutral prompt (the end-of-text token), an independent
// group (a Z per sequence) and fixed-Z groups (one Z per group), Z from the uniform prior,
// temperature 1, every seed derived from KindsProtocol::seed; each generation judged by
// classify_text_kind (core/eval/text_kind.h). What ftx generate --kinds prints, the shipped text
// model's test asserts and the studio's "Z picks the document" lesson shows; the numbers travel
// as run-store metrics "kinds/...".
//
// Deliberately not here: the rules that judge a text (text_kind.h), printing, opening the run
// store, the KL profile (figure4.h's kl_profile: the caller measures it where held-out data is).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/eval/evaluator.h"
#include "core/eval/synth_metrics.h"
#include "core/eval/text_kind.h"
#include "core/model/model.h"
#include "core/store/run_store.h"
#include "core/text/tokenizer.h"
#include "kernels/base/result.h"

namespace ftx {

struct KindsProtocol {
  std::string prompt = "<|endoftext|>";  // neutral: the token every training window opens with
  int independent = 32;
  int fixed_groups = 8;
  int group_size = 8;
  int new_tokens = 0;  // tokens generated after the prompt; 0: the model's context less the prompt
  uint64_t seed = 1;
};

struct KindsNumbers {
  Estimate valid;        // every sequence: the share the classifier names a kind (binomial se)
  Estimate agree_indep;  // independent valid sequences: the share of the others of the same kind
  Estimate agree_fixed;  // fixed-Z groups: each group's pair agreement (groups under 2 valid left out)
  Estimate valid_fixed;  // fixed-Z sequences only
  std::array<double, kTextKinds> indep_share{};  // kinds of the independent valid sequences
  double chance = std::nan("");                  // the data's sum of squared kind shares, when known
  std::vector<double> kl_at;                     // mean KL per input position on held-out data, when known
};

struct KindsMeasurement {
  KindsNumbers numbers;
  std::vector<GroupResult> groups;                          // group 0 independent, then the fixed groups
  std::vector<std::vector<std::optional<TextKind>>> kinds;  // per group, per sequence (nullopt: unknown)
  size_t prompt_len = 0;                                    // tokens of the prompt before each generation
};

// The generated part of a sequence (after the prompt) as text.
std::string generated_text(const Generation& gen, size_t prompt_len, const Tokenizer& tokenizer);

// Errors: a model without Z, a prompt the tokenizer cannot encode or that leaves nothing to
// generate, a protocol without sequences or with groups of fewer than 2.
Result<KindsMeasurement> measure_kind_groups(Model& model, const Tokenizer& tokenizer, const KindsProtocol& p);

// As run-store metrics ("kinds/valid", "kinds/valid_se", "kinds/valid_n", ..., "kinds/chance",
// "kinds/share/<kind>", "kinds/kl_at/<t>") and back (missing keys stay NaN or empty).
std::vector<std::pair<std::string, double>> kinds_metrics(const KindsNumbers& k);
KindsNumbers kinds_from_metrics(const std::vector<std::pair<std::string, double>>& metrics);
// The numbers recorded among a run's metric rows at `step`; nullopt when none were.
std::optional<KindsNumbers> stored_kinds(const std::vector<MetricRow>& rows, int64_t step);

// The corpus summary ftx tokenize --kinds writes beside a token file (DATA.kinds.json), and its
// chance level ("chance_agreement"). Errors name the file.
std::string kinds_json_path(const std::string& token_file);
Result<double> read_kinds_chance(const std::string& kinds_json);

}  // namespace ftx
