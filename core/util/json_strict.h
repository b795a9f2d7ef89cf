// The strict JSON parser every reader of a file uses (config.json, tokenizer.json, trainer.json,
// run bundles): any syntax error, invalid UTF-8, NUL byte or duplicate object key (at any depth)
// is an Error naming the file; duplicate keys are never "last one wins". Never throws.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kernels/base/result.h"

namespace ftx {

Result<nlohmann::json> parse_json_strict(std::string_view text, const std::string& path);

}  // namespace ftx
