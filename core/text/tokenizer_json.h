// A tokenizer's JSON form, as the "tokenizer" object of a checkpoint's config.json and of a run's
// stored configuration: {"type": "chars", "alphabet": "_!>ABC..."} (docs/design.md, the checkpoint
// contract). The form is the one written since the first checkpoints, so old files still open.
// Deliberately not here: tokenizer.json or GGUF vocabularies (their own readers, next to the
// tokenizers they make), the rest of config.json (core/io/config_json.h).
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/text/tokenizer.h"
#include "kernels/result.h"

namespace ftx {

// Asserts that the tokenizer's type has a JSON form (today: "chars").
nlohmann::json tokenizer_to_json(const Tokenizer& t);

// Reads the "tokenizer" object `j` of the file `path`; errors "PATH: key 'tokenizer.type': ...".
// Types other than "chars" are rejected, not ignored.
Result<std::shared_ptr<const Tokenizer>> tokenizer_from_json(const nlohmann::json& j, const std::string& path);

}  // namespace ftx
