// config.json: ModelConfig <-> a Hugging Face Llama config (docs/design.md section 5) plus our two
// extensions, "free_transformer": {"latent_bits", "inject_after_layer"} (absent for the plain
// decoder) and "tokenizer" (docs/design.md section 5; its form: core/text/tokenizer_json.h). Also the strict
// JSON parser every io/ reader uses (duplicate keys are an error, never "last one wins").
//
// Reading is strict: required keys present, exact types (an integer is not 64.0, a bool is not
// 1), ranges bounded before anything is sized from them, then ModelConfig::validate(). Accepted
// spellings: rope_theta top-level (transformers <= 4) or in rope_parameters (v5); torch_dtype or
// dtype. Deliberately not supported (rejected, not ignored, since the numbers would differ):
// rope scaling other than "default", attention_bias / mlp_bias, hidden_act other than silu,
// model_type other than llama, tokenizer types other than "chars".
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/model/config.h"
#include "core/text/tokenizer.h"
#include "kernels/result.h"

namespace ftx {

// Parses `text` as JSON; any syntax error, invalid UTF-8 or duplicate object key (at any depth)
// is an Error "<path>: ...". Never throws.
Result<nlohmann::json> parse_json_strict(std::string_view text, const std::string& path);

// The Hugging Face Llama config of `c` (torch_dtype "float32"), with the extensions above; no
// "tokenizer" object when `tokenizer` is null (token ids only).
// Floats are written with the shortest decimal that reads back as the same float.
nlohmann::json config_to_json(const ModelConfig& c, const Tokenizer* tokenizer = nullptr);

// Inverse of config_to_json, accepting any conforming HF Llama config. `path` only names the
// source in errors: "PATH: key 'x': problem". Without "free_transformer" the result is the
// plain decoder (latent_bits 0). A "tokenizer" object is always checked (its form, and no more
// tokens than vocab_size) and stored in *tokenizer when given; without one *tokenizer becomes
// null (token ids only). readout_bias is left false (the checkpoint loader sets it from the
// tensors).
Result<ModelConfig> config_from_json(const nlohmann::json& j, const std::string& path,
                                     std::shared_ptr<const Tokenizer>* tokenizer = nullptr);

}  // namespace ftx
