// A model file opened for inference, whatever its format (docs/design.md section 4): a checkpoint
// directory in the Hugging Face layout (config.json + safetensors, ours or anyone's) or a GGUF
// file. open() reads headers only (an 8B model opens in milliseconds); load() builds the
// inference-only Model: bf16 weights used in place from the map where the file holds them,
// dequantized or converted into memory this object owns otherwise, every tensor checked finite
// as it is taken. The ModelFile must outlive the Model it loads.
//
// Deliberately not here: training checkpoints with optimizer state (core/io/checkpoint.h), the
// chat template engine (the CLI recognises the two known templates), generation (core/sample).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/model.h"
#include "core/text/tokenizer.h"
#include "kernels/base/result.h"

namespace ftx {

// One tensor as the file stores it (what `ftx inspect` lists).
struct FileTensor {
  std::string name;            // the file's own name ("blk.0.attn_q.weight" in a GGUF file)
  std::string dtype;           // "BF16", "Q4_1", ...
  std::vector<int64_t> shape;  // row-major
  uint64_t bytes = 0;
};

// What a model file is, from its headers.
struct ModelInfo {
  std::string path;
  std::string format;                          // "safetensors" or "gguf"
  std::string name;                            // GGUF general.name, else the directory name
  ModelConfig config;                          // architecture, shape, Free Transformer or plain decoder
  std::shared_ptr<const Tokenizer> tokenizer;  // null: token ids only
  bool add_bos = false;                        // prompts start with the tokenizer's BOS
  std::vector<int32_t> eos_ids;                // ids that end a generation
  std::string chat_template;                   // the file's template text, empty if none
  std::vector<FileTensor> tensors;
  int64_t n_params = 0;     // parameters of the model the file makes (tied head counted once)
  uint64_t file_bytes = 0;  // bytes on disk (all shards)
};

class ModelFile {
 public:
  // A directory (config.json + model.safetensors or shards) or a .gguf file. Errors are one line
  // naming the file and the problem (a missing shard, an architecture not supported, ...).
  static Result<std::unique_ptr<ModelFile>> open(const std::string& path);
  virtual ~ModelFile() = default;
  const ModelInfo& info() const { return info_; }
  // progress(done, total) is called as tensors are taken (from the calling thread). gemm_dtype:
  // what a GGUF file is dequantized to, and random weights are made in (bf16, or fp32 to measure
  // what bf16 costs); a safetensors file's weights keep the file's dtype.
  using Progress = std::function<void(int64_t done, int64_t total)>;
  virtual Result<std::unique_ptr<Model>> load(Backend& backend, const Progress& progress = {},
                                              DType gemm_dtype = DType::BF16) = 0;

 protected:
  ModelInfo info_;
};

// A model of shape `config` with random bf16 weights (N(0, 0.02), norms 1), as a ModelFile: for
// benchmarks of shapes no trained checkpoint has (ftx-1.5b, ft-8b) and for the latent mechanics of
// a Free Transformer (config.latent_bits > 0) on a real tokenizer (may be null) before one is
// trained. The weights are made by load(), in memory this object owns.
std::unique_ptr<ModelFile> random_model_file(const ModelConfig& config, std::shared_ptr<const Tokenizer> tokenizer,
                                             uint64_t seed);

}  // namespace ftx
