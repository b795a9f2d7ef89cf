// RunConfig: a run's configuration as its row in the run store holds it, and as a run bundle's
// run.json carries it: {"model": the ModelConfig as config.json writes it (tokenizer included),
// "train": the TrainConfig}. One writer and one reader, used by the trainer (it writes the row),
// `ftx store list`, sweep, generate, eval, export and import, the explorer and the studio's store
// poller.
//
// Reading is tolerant of what older rows lack and strict about what they hold: a missing "train"
// or "model" object leaves that part absent (a run `ftx eval` made for scores has neither); a
// missing key inside them takes the field's documented default (a row without "free_bits" was
// trained per pair, core/train/train_config.h); a key of the wrong type or value is an error that
// names the store and the run.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/model/config.h"
#include "core/train/train_config.h"
#include "kernels/base/result.h"

namespace ftx {

class RunStore;
class Tokenizer;

struct RunConfig {
  std::optional<ModelConfig> model;  // without its tokenizer (read it from a checkpoint)
  std::optional<TrainConfig> train;
  // Training tokens seen at `step`: batch * (sequence length - 1) * step, for a text run (its
  // sequence length is in the row); -1 when the row does not say.
  int64_t tokens_at(int64_t step) const;
};

// The JSON text of a run row.
std::string run_config_json(const ModelConfig& m, const Tokenizer* tokenizer, const TrainConfig& t);
// A run row's config. `where` names it in errors ("runs.db: run 'fig4-1bit'").
Result<RunConfig> parse_run_config(const std::string& config_json, const std::string& where);
// The row of run `run` in `store`, read and parsed; errors name the store and the run.
Result<RunConfig> read_run_config(RunStore& store, const std::string& run);
// The same for a part the caller needs: an error when the row has no "train" object.
Result<TrainConfig> read_train_config(RunStore& store, const std::string& run);

}  // namespace ftx
