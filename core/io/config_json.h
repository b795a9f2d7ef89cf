// config.json: ModelConfig <-> a Hugging Face config (docs/design.md section 5) as transformers 4
// and 5 write it for model_type "llama", "mistral" and "qwen2", plus our two extensions,
// "free_transformer": {"latent_bits", "inject_after_layer"} (absent for the plain decoder) and
// "tokenizer" (its form: core/text/tokenizer_json.h). Also the bos/eos ids of a config or a
// generation_config.json. The strict JSON parser every reader uses is core/util/json_strict.h.
//
// Reading is strict: required keys present, exact types (an integer is not 64.0, a bool is not
// 1), ranges bounded before anything is sized from them, then ModelConfig::validate(). Accepted
// spellings: rope_theta top-level (transformers <= 4) or in rope_parameters (v5); the rope type in
// a top-level rope_scaling (v4; "rope_type" or the legacy "type") or in rope_parameters (v5);
// torch_dtype or dtype (ignored). Defaults are transformers': num_key_value_heads absent is
// num_attention_heads for llama, 8 for mistral, 32 for qwen2 (null is num_attention_heads);
// head_dim absent is hidden_size / num_attention_heads; tie_word_embeddings false; model_type
// absent is llama. Biases: llama's attention_bias biases q, k, v and o_proj; qwen2 always biases
// q, k and v; mistral has none.
// Deliberately not supported (rejected in one line naming the file and the key, not ignored,
// since the numbers would differ): rope types other than "default" and "llama3", mlp_bias,
// hidden_act other than silu, other model types, sliding-window attention (mistral
// sliding_window not null: absent is taken as null, although MistralConfig's default is 4096,
// since transformers always writes the key; qwen2 use_sliding_window true; layer_types other than
// full_attention),
// mixture-of-experts keys (num_local_experts, num_experts > 0), tokenizer types other than
// "chars".
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/config.h"
#include "core/text/tokenizer.h"
#include "core/util/json_strict.h"  // parse_json_strict, which every reader of config.json uses
#include "kernels/base/result.h"

namespace ftx {

// The Hugging Face config of `c` (torch_dtype "float32"), with the extensions above; no
// "tokenizer" object when `tokenizer` is null (token ids only). Floats are written with the
// shortest decimal that reads back as the same float. model_type is c.architecture; rope_scaling
// (v4 form) only when the RoPE is scaled (frequency divisors as our own rope_type
// "ftx_divisors"); attention_bias (llama), sliding_window null (mistral), use_sliding_window false
// (qwen2). config_from_json(config_to_json(c)) == c for every config its architecture can say
// (llama: qkv_bias == o_bias; qwen2: qkv_bias; mistral: no bias); readout_bias is the tensors'.
nlohmann::json config_to_json(const ModelConfig& c, const Tokenizer* tokenizer = nullptr);

// Inverse of config_to_json, accepting any conforming HF llama, mistral or qwen2 config. `path` only names the
// source in errors: "PATH: key 'x': problem". Without "free_transformer" the result is the
// plain decoder (latent_bits 0). A "tokenizer" object is always checked (its form, and no more
// tokens than vocab_size) and stored in *tokenizer when given; without one *tokenizer becomes
// null (token ids only). readout_bias is left false (the checkpoint loader sets it from the
// tensors).
Result<ModelConfig> config_from_json(const nlohmann::json& j, const std::string& path,
                                     std::shared_ptr<const Tokenizer>* tokenizer = nullptr);

// bos_token_id and eos_token_id of a config.json or generation_config.json: absent or null ->
// not given; eos an id or a list of ids; every id an integer in [0, vocab_size). Errors
// "PATH: key 'eos_token_id': ...".
struct SpecialTokenIds {
  std::optional<int32_t> bos;
  std::optional<std::vector<int32_t>> eos;
};
Result<SpecialTokenIds> special_token_ids_from_json(const nlohmann::json& j, const std::string& path, int vocab_size);

}  // namespace ftx
