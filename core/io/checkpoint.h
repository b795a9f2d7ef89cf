// Checkpoint directories (docs/design.md section 5, the public contract):
//   config.json                   Hugging Face Llama config + "free_transformer" + "tokenizer"
//   model.safetensors             parameters, names and shapes of param_specs(config)
//     (or model-0000i-of-0000N.safetensors + model.safetensors.index.json: read, never written)
//   training_state.safetensors    "adam_m.<param>" and "adam_v.<param>" (resumable checkpoints)
//   trainer.json                  step, data position, RNG seed, train config (opaque here)
//
// Saving is atomic: everything is written and fsynced in a sibling "<dir>.tmp-<pid>", which then
// replaces <dir> by rename (an existing <dir> is swapped out and removed only after the new one is
// in place), and the parent directory is fsynced. On failure (disk full, EFBIG, EACCES) the temp
// directory is removed and a previous checkpoint at <dir> is left untouched.
//
// Loading is strict: config.json first, then param_specs(config) is the list of expected
// tensors. Each must exist with exactly its shape, dtype F32/BF16/F16 (converted to fp32), all
// values finite. Unknown tensors are an error, except names ending in "rotary_emb.inv_freq"
// (a buffer some writers save). lm_head.weight must be absent iff tie_word_embeddings. A present
// "free.encoder_readout.bias" sets config.readout_bias. Without "free_transformer" and without
// free.* tensors the checkpoint is the plain decoder; free.* tensors without that key, or that key
// without the free.* tensors, are errors.
//
// Deliberately not here: tokenizer.json (core/text), writing shards, dtypes other than F32 and
// BF16 on save, mmap of weights for inference (kernels/).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/io/safetensors.h"
#include "core/model/config.h"
#include "core/text/tokenizer.h"
#include "kernels/base/result.h"

namespace ftx {

inline constexpr const char* kConfigFileName = "config.json";
inline constexpr const char* kModelFileName = "model.safetensors";
inline constexpr const char* kModelIndexFileName = "model.safetensors.index.json";
inline constexpr const char* kTrainingStateFileName = "training_state.safetensors";
inline constexpr const char* kTrainerFileName = "trainer.json";

struct CheckpointData {
  ModelConfig config;
  std::shared_ptr<const Tokenizer> tokenizer;  // config.json's "tokenizer"; null: token ids only
  std::vector<float> params;                   // arena order of param_specs(config)
  // How model.safetensors stores params: F32, or BF16 for a model to ship (half the size; read
  // back widened to fp32). Training state is always F32.
  SafetensorsDType weights_dtype = SafetensorsDType::F32;
  bool has_training_state = false;
  std::vector<float> adam_m, adam_v;  // AdamW moments, same layout as params
  nlohmann::json trainer;             // trainer.json (an object; null is written as {})
};

// Writes `ck` as the checkpoint directory `dir` (atomic, see above). Parent directories are
// created. Refuses params or moments whose size does not match param_specs(ck.config),
// non-finite values, and a tokenizer with more tokens than vocab_size (a checkpoint that cannot be
// loaded back is never written).
Status save_checkpoint(const std::string& dir, const CheckpointData& ck);

// Reads the checkpoint at `dir`. With with_training_state, training_state.safetensors and
// trainer.json must exist and are loaded; otherwise they are not read at all.
Result<CheckpointData> load_checkpoint(const std::string& dir, bool with_training_state);

// The "weight_map" of a model.safetensors.index.json `j` read from index_path: tensor name ->
// shard file, each a plain file name in the index's directory (no '/', no '..'). Errors name the
// index and the entry.
Result<std::map<std::string, std::string>> read_weight_map(const std::string& index_path, const nlohmann::json& j);

// Reads and validates only <dir>/config.json (readout_bias is not known from it: false); its
// tokenizer goes to *tokenizer when given (null when the file has none).
Result<ModelConfig> load_checkpoint_config(const std::string& dir,
                                           std::shared_ptr<const Tokenizer>* tokenizer = nullptr);

}  // namespace ftx
