// Parameter layout: one row per tensor {name, shape, offset} in one flat fp32 arena
// (docs/design.md section 2). Names are the checkpoint contract (docs/design.md section 5, Hugging Face
// Llama names plus free.* and route.*); shapes are nn.Linear [out, in]. Gradients and AdamW moments use the
// same offsets in arenas of their own. An inference-only model (Model::create_inference) keeps
// the layout's names and shapes but may hold GEMM weights in another dtype, outside the arena.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "kernels/base/dtype.h"

namespace ftx {

// RouteGate: a routed block's four raw gate scalars (o_ce, m_cu, beta_ce, beta_cu before softplus),
// set so that softplus gives 1.025, 1.1, 0.3 and 0.6 (docs/subjective_depth.md).
enum class ParamInit { Normal, Ones, Zeros, RouteGate };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in floats, into the fp32 arena of a trainable model
  int64_t numel = 0;
  ParamInit init = ParamInit::Normal;
  bool decay = true;  // AdamW weight decay (matrices yes; norms, zeta no)
  // Read only as the weight of matmul_forward / embedding_forward (the embedding, the block
  // projections, lm_head, the encoder readout), so it may be held in any DType; the other tensors
  // (norm weights, zeta, biases, the post-sampler that is gathered by code) are always fp32.
  bool gemm_weight = false;
  // How the model holds it: F32 in a trainable model; what Model::create_inference was given.
  DType dtype = DType::F32;
};

std::vector<ParamSpec> param_specs(const ModelConfig& c);
// Element i of a tensor initialised to fixed values (any ParamInit but Normal).
float fixed_init_value(ParamInit init, int64_t i);
int64_t param_count(const std::vector<ParamSpec>& specs);
const ParamSpec* find_param(const std::vector<ParamSpec>& specs, const std::string& name);

}  // namespace ftx
