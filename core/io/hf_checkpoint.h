// Hugging Face-layout checkpoint directories opened for inference, memory-mapped: what
// transformers' save_pretrained writes for a llama, mistral or qwen2 model, and our own checkpoint
// directories (core/io/checkpoint.h), which have the same layout.
//   config.json                         config_from_json (core/io/config_json.h): the ModelConfig
//   generation_config.json              optional: its bos/eos ids win over config.json's
//   model.safetensors                   one file, or
//   model.safetensors.index.json        {"weight_map": {tensor: shard}} and the shards it names
//   tokenizer_config.json               optional: "chat_template" (a string, or a list whose
//   chat_template.jinja                 "default" entry is used); the .jinja file wins when present
//   tokenizer.json                      only its path is given out (core/text reads it)
//
// open() reads the JSON files and the safetensors headers, never tensor data: each shard is
// mapped (MappedFile) and its header validated by the strict safetensors code
// (parse_safetensors), so an 8B model opens in milliseconds and its pages are read only when a
// tensor is used. Sharding rules: shard names are plain file names in the directory; every mapped
// tensor is in its shard; a tensor of a shard that the index maps elsewhere (a tensor in two
// shards) or does not list is an error; shards the index does not name are not opened;
// metadata.total_size is not checked (it does not affect the numbers, and writers disagree on it).
// The tensor set must then be param_specs(config()) exactly: each tensor present with its shape
// and a dtype of F32, F16 or BF16; unknown tensors are errors, except names ending in
// "rotary_emb.inv_freq" and an lm_head.weight of shape [V, D] beside tie_word_embeddings true,
// which are ignored as transformers ignores them (the head is the embedding when tied). free.*
// tensors make a Free Transformer as in core/io/checkpoint.h (config.json must have
// "free_transformer"; free.encoder_readout.bias present sets readout_bias).
//
// Values are checked only on request (check_finite, a pass over the data), never at open.
// Every error is one line naming the file (and the tensor).
//
// Deliberately not here: parsing tokenizer.json (core/text), rendering the chat template,
// quantized dtypes (GGUF files have their own reader), writing, building the Model (Model::create_inference
// takes tensor_for as its TensorSource). tensor_for is not thread-safe (it may convert).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/io/mapped_file.h"
#include "core/io/safetensors.h"
#include "core/model/config.h"
#include "core/model/params.h"
#include "core/text/tokenizer.h"
#include "kernels/base/dtype.h"
#include "kernels/base/result.h"

namespace ftx {

inline constexpr const char* kGenerationConfigFileName = "generation_config.json";
inline constexpr const char* kTokenizerConfigFileName = "tokenizer_config.json";
inline constexpr const char* kChatTemplateFileName = "chat_template.jinja";
inline constexpr const char* kTokenizerJsonFileName = "tokenizer.json";

// One tensor of one shard, its bytes in place in the shard's mapping.
struct HfTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::F32;
  std::vector<int64_t> shape;
  std::string file;               // the shard's path
  const uint8_t* data = nullptr;  // into the map; any alignment
  uint64_t bytes = 0;
};

class HfCheckpoint {
 public:
  // Opens `dir` (headers only; see above).
  static Result<HfCheckpoint> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  // End-of-sequence ids: generation_config.json's eos_token_id when it has one, else
  // config.json's; empty when neither says.
  std::vector<int32_t> eos_ids() const { return eos_; }
  // Beginning-of-sequence id, generation_config.json's first, then config.json's.
  std::optional<int32_t> bos_id() const { return bos_; }
  // The chat template's Jinja source; empty when the directory has none.
  const std::string& chat_template() const { return chat_template_; }
  // dir/tokenizer.json when present, else empty.
  std::string tokenizer_json_path() const { return tokenizer_json_; }
  // config.json's "tokenizer" (our chars tokenizer); null when absent.
  std::shared_ptr<const Tokenizer> config_tokenizer() const { return tokenizer_; }

  // Every tensor of every shard (ignored ones too), shard by shard in data order.
  const std::vector<HfTensor>& tensors() const { return tensors_; }
  const HfTensor* find(const std::string& name) const;
  int64_t file_bytes() const { return file_bytes_; }  // sum of the shards' sizes

  // The tensor of one row of param_specs(config()), for Model::create_inference: BF16 and F32
  // tensors in place in the map when their address is aligned for the type (else copied); F16
  // converted, rounding to nearest even, to BF16 for GEMM weights and widened to F32 for the
  // others. Copies and conversions live as long as this object, at stable addresses, and are made
  // once per tensor. Errors name the file and the tensor.
  Result<WeightRef> tensor_for(const ParamSpec& spec);
  // Every value of that tensor finite (a pass over its data; the caller's load step, never open).
  // Error: "FILE: tensor 'NAME': element I is NaN (non-finite weights are refused)".
  Status check_finite(const ParamSpec& spec) const;

 private:
  HfCheckpoint() = default;
  Result<const HfTensor*> lookup(const ParamSpec& spec) const;

  std::string dir_;
  ModelConfig config_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<int32_t> eos_;
  std::optional<int32_t> bos_;
  std::string chat_template_, tokenizer_json_;
  std::vector<MappedFile> maps_;  // one per shard; the mappings stay where they are when moved
  std::vector<HfTensor> tensors_;
  std::vector<size_t> shard_of_;  // per tensor: its shard in maps_
  std::unordered_map<std::string, size_t> by_name_;
  int64_t file_bytes_ = 0;
  // Copies and conversions made by tensor_for: each inner buffer keeps its address when this
  // object or the outer vector moves.
  std::vector<std::vector<float>> owned_f32_;
  std::vector<std::vector<uint16_t>> owned_bf16_;
  std::unordered_map<std::string, WeightRef> given_;
};

}  // namespace ftx
