// Explorer: the computations behind the studio's Generations, Latent and Lessons views, on a
// model loaded from a run's checkpoint. Everything a view shows is computed here and handed over
// as plain structs (views only draw them: docs/design.md section 11). Deterministic: the same request
// (seeds included) gives the same result.
//
// Deliberately not here: threads (the studio calls these on its worker), drawing, caching of
// several models (the caller keeps the ExplorerModel it loaded).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/data/batch_source.h"
#include "core/eval/synth_metrics.h"
#include "core/eval/text_kind.h"
#include "core/model/model.h"
#include "core/text/tokenizer.h"
#include "core/train/train_config.h"
#include "kernels/base/result.h"

namespace ftx {

// A run's model at one checkpoint, ready for inference.
struct ExplorerModel {
  std::string run;
  int step = 0;
  TrainConfig train;                           // the run's stored training config (dataset, kappa, ...)
  std::shared_ptr<const Tokenizer> tokenizer;  // the checkpoint's (else the dataset's); never null
  int seq_len = 0;                             // the dataset's tokens per sequence (prompt + body)
  std::unique_ptr<Model> model;
  // Its data has kinds (a text corpus of kinds, docs/text_latent.md: DATA.kinds.json beside the
  // token file): the Latent inspection judges its generations with classify_text_kind. Set by the
  // caller that knows the data's files (the studio's explore worker); false from the loader.
  bool judges_kinds = false;
};
// Loads `run` from the store at `db_path` at checkpoint `step` (the latest when absent); the
// run's dataset (through `datasets`) gives the sequence length, and the tokenizer when the
// checkpoint has none. One-line errors naming the file for a missing database, run or
// checkpoint, a damaged checkpoint, or a checkpoint whose tokenizer is not its dataset's.
Result<ExplorerModel> load_explorer_model(Backend& be, const DatasetFactory& datasets, const std::string& db_path,
                                          const std::string& run, std::optional<int> step);
// `text` in the run's tokens; errors "<what> '<text>': <the tokenizer's reason>".
Result<std::vector<int32_t>> encode_text(const ExplorerModel& m, const std::string& text, const std::string& what);
// Views label a run's columns by token unless its tokenizer has one character per token.
bool labels_tokens(const ExplorerModel& m);

// ---- Generations (Figure 4) ----
struct GroupRow {
  std::string text;                 // prompt + generated
  std::vector<std::string> tokens;  // (S) each token's bytes: views draw one cell per token
  std::vector<uint32_t> codes;      // (T,) one code per input position
  uint64_t latent_seed = 0, sample_seed = 0;
  bool valid = false;       // synthetic task: a valid sequence
  std::vector<int> starts;  // possible target starts in the body (valid rows)
};
struct GroupView {
  int group = 0;       // 0 = independent
  bool fixed = false;  // one Z for the whole group
  std::vector<GroupRow> rows;
  double valid = 0, agreement = 0, noise_agreement = 0;  // NaN when undefined
  int start = -1;  // where the group's targets start (GroupMetrics::start); -1 when none is valid
  std::vector<AgreementAt> agreement_at;  // per valid sequence: its start, the share agreeing with it
  // Routed runs (docs/subjective_depth.md): the router that chose the computed tokens ("student" or
  // "teacher") and what that means (route_path_text); empty for a dense run.
  std::string router, route_path;
};
// The fixed-Z groups' sequences by target start (agreement_by_start over their agreement_at),
// then the bin of starts from kLateStart on: the Generations view's by-start line.
std::vector<StartBin> fixed_groups_by_start(const std::vector<GroupView>& groups);
struct Figure4Request {
  std::string prompt;  // e.g. "K>"; must encode with the run's tokenizer
  int fixed_groups = 3;
  int group_size = 8;
  uint64_t seed = 1;  // latent and sample seeds derive from it
  float temperature = 1.0f;
  std::string router = "student";  // routed runs: student or teacher (SampleConfig::router); dense runs ignore it
};
// One independent group and `fixed_groups` fixed-Z groups for the prompt.
Result<std::vector<GroupView>> explore_figure4(ExplorerModel& m, const Figure4Request& req);
// Freeze Z: the same groups with every row's codes kept and only the tokens resampled (seed), by
// the router that generated them.
Result<std::vector<GroupView>> explore_freeze(ExplorerModel& m, const std::string& prompt,
                                              const std::vector<GroupView>& groups, uint64_t sample_seed,
                                              float temperature);

// ---- Latent ----
struct LatentInspection {
  std::string text;                 // the inspected sequence (prompt + body)
  std::vector<std::string> tokens;  // (T + 1) each token's bytes; empty: one character per token
                                    // (a run's inspection fills them unless its tokenizer is "chars")
  int T = 0, H = 0;                 // positions (tokens - 1), latent bits
  std::vector<float> bit_probs;     // (T, H) encoder's P(bit h of Z_t = 1)
  std::vector<float> kl;            // (T) nats
  std::vector<uint32_t> codes;      // (T) sampled from the encoder (seed)
  double kappa_nats = 0;            // the run's free bits
  std::string free_bits;            // their form (core/model/free_bits.h): "batch-mean", "per-pair"
  // Over a batch of the run's held-out sequences (filled by the caller that has the data, the
  // studio's explore worker; empty otherwise): the mean KL at each position, and on the synthetic
  // task what the position code costs there (start_code_cost), the budget it needs.
  std::vector<double> batch_kl, position_budget;
  int batch_sequences = 0;
  std::string regenerated;                      // generated from the prompt with these codes (sample seed)
  std::vector<std::string> regenerated_tokens;  // its tokens' bytes, when `tokens` is set (else empty)
  uint64_t sample_seed = 0;
  // Kinds (ExplorerModel::judges_kinds): the generations are judged, and the regeneration's kind
  // (of its generated part, as ftx generate --kinds judges; nullopt: unknown).
  bool judges_kinds = false;
  std::optional<TextKind> regenerated_kind;
};
// A regeneration of an inspection (original or with bits flipped).
struct LatentGeneration {
  std::string text;                 // prompt + generated
  std::vector<std::string> tokens;  // each token's bytes, when the inspection has tokens (else empty)
  std::optional<TextKind> kind;     // of the generated part, when the inspection judges kinds (nullopt: unknown)
};
// Runs the encoder on `text` (prompt + at most seq_len-1 more tokens), samples codes with `seed`,
// and regenerates from the first `prompt_len` tokens with those codes (with its kind when the
// model judges kinds). Error for a model without a latent (H = 0), or a text the run's tokenizer
// cannot encode.
Result<LatentInspection> inspect_latent(ExplorerModel& m, const std::string& text, int prompt_len, uint64_t seed);
// The generation from the same prompt and the same token seed with some bits flipped:
// flips = (position, bit) pairs (the Edited policy); no flips: the inspection's own regeneration.
// Its kind is judged when base.judges_kinds.
Result<LatentGeneration> regenerate_edited(ExplorerModel& m, const LatentInspection& base, int prompt_len,
                                           const std::vector<std::pair<int, int>>& flips);

// ---- Lessons ----
// The coin-flip lesson for one sequence of the coin-flip task (docs/design.md section 3): per position t
// (the prediction of X_{t+1} after t observed bits), the exact posterior P(X_{t+1}=1 | X_1..X_t),
// the exact conditional given the true Z, and the models' predictions.
struct CoinflipLesson {
  int z = 0;                            // the sequence's latent coin
  std::vector<int> bits;                // (T) X_1..X_T
  std::vector<double> exact_posterior;  // (T) P(X_{t+1}=1 | X_1..X_t), t = 0..T-1
  std::vector<double> exact_given_z;    // (T)
  std::vector<double> baseline;         // (T) the baseline model's P(next = '1'), empty without one
  std::vector<double> free_z;           // (T) the Free Transformer's, Z from its encoder, empty without one
};
// A sequence drawn like the task's: Z ~ B(0.5), then T bits each flipped with probability eps.
CoinflipLesson coinflip_example(uint64_t seed, int T, double eps);
// Fills the exact curves and the models' predictions of `lesson` (its z and bits set). baseline /
// free_model may be null (their curves stay empty); both must be coin-flip runs of length >= T.
Status coinflip_lesson(CoinflipLesson& lesson, double eps, ExplorerModel* baseline, ExplorerModel* free_model,
                       uint64_t seed);

}  // namespace ftx
