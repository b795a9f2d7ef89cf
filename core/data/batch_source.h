// BatchSource: how datasets/ feeds core/. A source is an endless, seeded, deterministic stream of
// token sequences; its position (sequences consumed) is all the state resume needs.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "core/text/tokenizer.h"

namespace ftx {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual std::string name() const = 0;
  // Every sequence has exactly seq_len() tokens (inputs are [0, T), targets [1, T+1): T = seq_len-1).
  virtual int seq_len() const = 0;
  // Text <-> the ids of next()/validation(); lives as long as the source.
  virtual const Tokenizer& tokenizer() const = 0;
  // Fills tokens (B, seq_len) row-major with the next B training sequences and advances.
  virtual void next(int32_t* tokens, int B) = 0;
  // Validation sequence i of a held-out stream disjoint from training (independent of position).
  virtual void validation(int32_t* tokens, int64_t first, int B) const = 0;
  virtual int64_t position() const = 0;  // sequences consumed so far
  virtual void seek(int64_t position) = 0;
  // The dataset's own options as this source uses them, by key (core/data/dataset_options.h):
  // what TrainConfig::dataset_options gave, defaults filled in. Empty for a dataset without any.
  virtual nlohmann::json options() const { return nlohmann::json::object(); }
};

struct TrainConfig;
// Datasets by name, given by the application (datasets/ sits beside core/, not below it): the
// TrainConfig's dataset with its arguments; null for an unknown name (TrainConfig::validate
// rejects those first).
using DatasetFactory = std::function<std::unique_ptr<BatchSource>(const TrainConfig&)>;

// Splits sequences (B, S) into model inputs (B, S-1) = tokens [0, S-1) and targets (B, S-1) =
// tokens [1, S) of each row.
inline void split_inputs_targets(const int32_t* seqs, int B, int S, int32_t* inputs, int32_t* targets) {
  const int T = S - 1;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      inputs[int64_t{b} * T + t] = seqs[int64_t{b} * S + t];
      targets[int64_t{b} * T + t] = seqs[int64_t{b} * S + t + 1];
    }
}

}  // namespace ftx
