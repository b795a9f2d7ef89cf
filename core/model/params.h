// Parameter layout: one row per tensor {name, shape, offset} in one flat fp32 arena
// (STYLE.md section 5). Names are the checkpoint contract (DESIGN.md section 4, Hugging Face
// Llama names plus free.*); shapes are nn.Linear [out, in]. Gradients and AdamW moments use the
// same offsets in arenas of their own.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/model/config.h"

namespace ftx {

enum class ParamInit { Normal, Ones, Zeros };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in floats, into the arena
  int64_t numel = 0;
  ParamInit init = ParamInit::Normal;
  bool decay = true;   // AdamW weight decay (matrices yes; norms, zeta no)
};

std::vector<ParamSpec> param_specs(const ModelConfig& c);
int64_t param_count(const std::vector<ParamSpec>& specs);
const ParamSpec* find_param(const std::vector<ParamSpec>& specs, const std::string& name);

}  // namespace ftx
