#include "core/model/params.h"

#include <cmath>

namespace ftx {
namespace {

struct SpecBuilder {
  std::vector<ParamSpec> specs;
  int64_t offset = 0;
  void add(std::string name, std::vector<int64_t> shape, ParamInit init, bool decay, bool gemm_weight = false) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    specs.push_back(ParamSpec{std::move(name), std::move(shape), offset, n, init, decay, gemm_weight});
    offset += n;
  }
  void gemm(std::string name, std::vector<int64_t> shape) {
    add(std::move(name), std::move(shape), ParamInit::Normal, true, true);
  }
  // One pre-norm Llama block under `prefix` ("model.layers.3." or "free.encoder."), with the
  // attention biases the config has (Qwen2's q/k/v, Llama's attention_bias q/k/v and o).
  void block(const std::string& p, const ModelConfig& c) {
    const int64_t D = c.dim, Q = int64_t{c.n_heads} * c.head_dim, KV = int64_t{c.n_kv_heads} * c.head_dim;
    add(p + "input_layernorm.weight", {D}, ParamInit::Ones, false);
    gemm(p + "self_attn.q_proj.weight", {Q, D});
    if (c.qkv_bias) add(p + "self_attn.q_proj.bias", {Q}, ParamInit::Zeros, false);
    gemm(p + "self_attn.k_proj.weight", {KV, D});
    if (c.qkv_bias) add(p + "self_attn.k_proj.bias", {KV}, ParamInit::Zeros, false);
    gemm(p + "self_attn.v_proj.weight", {KV, D});
    if (c.qkv_bias) add(p + "self_attn.v_proj.bias", {KV}, ParamInit::Zeros, false);
    gemm(p + "self_attn.o_proj.weight", {D, Q});
    if (c.o_bias) add(p + "self_attn.o_proj.bias", {D}, ParamInit::Zeros, false);
    add(p + "post_attention_layernorm.weight", {D}, ParamInit::Ones, false);
    gemm(p + "mlp.gate_proj.weight", {c.ffn_hidden, D});
    gemm(p + "mlp.up_proj.weight", {c.ffn_hidden, D});
    gemm(p + "mlp.down_proj.weight", {D, c.ffn_hidden});
  }
};

}  // namespace

std::vector<ParamSpec> param_specs(const ModelConfig& c) {
  SpecBuilder b;
  const int64_t D = c.dim, V = c.vocab_size;
  b.gemm("model.embed_tokens.weight", {V, D});
  for (int i = 0; i < c.n_layers; ++i) b.block("model.layers." + std::to_string(i) + ".", c);
  b.add("model.norm.weight", {D}, ParamInit::Ones, false);
  if (!c.tie_embeddings) b.gemm("lm_head.weight", {V, D});
  if (c.is_free()) {
    b.add("free.zeta", {D}, ParamInit::Normal, false);
    b.block("free.encoder.", c);
    b.add("free.encoder_norm.weight", {D}, ParamInit::Ones, false);
    b.gemm("free.encoder_readout.weight", {c.latent_bits, D});
    if (c.readout_bias) b.add("free.encoder_readout.bias", {c.latent_bits}, ParamInit::Zeros, false);
    b.add("free.post_sampler.weight", {D, c.num_codes()}, ParamInit::Normal, true);
  }
  // Routed blocks (docs/subjective_depth.md): MoD's linear score; SDT's prior and STT's transition
  // network (a SwiGLU on a normalised input), with the gate's four scalars; the student router.
  for (int l = 0; l < c.n_layers; ++l) {
    if (!c.routed(l)) continue;
    const std::string p = "route.layers." + std::to_string(l) + ".";
    const int64_t P = c.route_prior_hidden();
    switch (c.routing.kind) {
      case Routing::Mod:
        b.gemm(p + "router.weight", {1, D});
        break;
      case Routing::Sdt:
      case Routing::Stt:
        b.add(p + "gate", {4}, ParamInit::RouteGate, false);
        b.add(p + "prior.norm.weight", {D}, ParamInit::Ones, false);
        b.gemm(p + "prior.gate_proj.weight", {P, D});
        b.gemm(p + "prior.up_proj.weight", {P, D});
        b.gemm(p + "prior.down_proj.weight", {D, P});
        break;
      case Routing::None:
      case Routing::Random:
        break;
    }
    if (c.routing.has_student()) {  // logits (skip, compute) from [x_t, x_(t-1)]
      b.gemm(p + "student.weight", {2, 2 * D});
      b.add(p + "student.bias", {2}, ParamInit::Zeros, false);
    }
  }
  return b.specs;
}

float fixed_init_value(ParamInit init, int64_t i) {
  switch (init) {
    case ParamInit::Ones:
      return 1.0f;
    case ParamInit::RouteGate: {  // softplus^-1 of o_ce, m_cu, beta_ce, beta_cu
      const double target[4] = {1.025, 1.1, 0.3, 0.6};
      return float(std::log(std::expm1(target[i % 4])));
    }
    case ParamInit::Zeros:
    case ParamInit::Normal:
      break;
  }
  return 0.0f;
}

int64_t param_count(const std::vector<ParamSpec>& specs) {
  return specs.empty() ? 0 : specs.back().offset + specs.back().numel;
}

const ParamSpec* find_param(const std::vector<ParamSpec>& specs, const std::string& name) {
  for (const auto& s : specs)
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace ftx
