#include "core/model/weights.h"

#include <string>

namespace ftx {
namespace {

// Every tensor of the layout, by name: mat(i) for GEMM weights, vec(i) for the rest (i indexes specs).
template <class M, class V, class MatAt, class VecAt>
ModelTensors<M, V> resolve(const ModelConfig& c, const std::vector<ParamSpec>& specs, MatAt&& mat, VecAt&& vec) {
  auto index = [&](const std::string& name) {
    const ParamSpec* s = find_param(specs, name);
    FT_ASSERT(s != nullptr, "no parameter %s", name.c_str());
    return size_t(s - specs.data());
  };
  auto m = [&](const std::string& name) { return mat(index(name)); };
  auto v = [&](const std::string& name) { return vec(index(name)); };
  auto block = [&](const std::string& p) {
    BlockTensors<M, V> b{v(p + "input_layernorm.weight"),
                         m(p + "self_attn.q_proj.weight"),
                         m(p + "self_attn.k_proj.weight"),
                         m(p + "self_attn.v_proj.weight"),
                         m(p + "self_attn.o_proj.weight"),
                         v(p + "post_attention_layernorm.weight"),
                         m(p + "mlp.gate_proj.weight"),
                         m(p + "mlp.up_proj.weight"),
                         m(p + "mlp.down_proj.weight"),
                         {},
                         {},
                         {},
                         {}};
    if (c.qkv_bias) {
      b.bq = v(p + "self_attn.q_proj.bias");
      b.bk = v(p + "self_attn.k_proj.bias");
      b.bv = v(p + "self_attn.v_proj.bias");
    }
    if (c.o_bias) b.bo = v(p + "self_attn.o_proj.bias");
    return b;
  };
  ModelTensors<M, V> t{};
  t.embed = m("model.embed_tokens.weight");
  for (int l = 0; l < c.n_layers; ++l) t.layers.push_back(block("model.layers." + std::to_string(l) + "."));
  t.norm = v("model.norm.weight");
  t.head = c.tie_embeddings ? t.embed : m("lm_head.weight");
  if (c.is_free()) {
    t.zeta = v("free.zeta");
    t.enc = block("free.encoder.");
    t.enc_norm = v("free.encoder_norm.weight");
    t.readout = m("free.encoder_readout.weight");
    if (c.readout_bias) t.readout_bias = v("free.encoder_readout.bias");
    t.post_sampler = v("free.post_sampler.weight");
  }
  if (c.routing.kind != Routing::None) {
    t.routes.resize(size_t(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      if (!c.routed(l)) continue;
      const std::string p = "route.layers." + std::to_string(l) + ".";
      RouteTensors<M, V>& r = t.routes[size_t(l)];
      if (c.routing.kind == Routing::Mod) r.router = m(p + "router.weight");
      if (c.routing.surprise()) {
        r.gate = v(p + "gate");
        r.prior_norm = v(p + "prior.norm.weight");
        r.prior_wg = m(p + "prior.gate_proj.weight");
        r.prior_wu = m(p + "prior.up_proj.weight");
        r.prior_wd = m(p + "prior.down_proj.weight");
      }
      if (c.routing.has_student()) {
        r.student = m(p + "student.weight");
        r.student_bias = v(p + "student.bias");
      }
    }
  }
  return t;
}

}  // namespace

ParamRefs resolve_params(const ModelConfig& cfg, const std::vector<ParamSpec>& specs,
                         const std::vector<WeightRef>& tensors) {
  FT_ASSERT(tensors.size() == specs.size(), "%zu tensors for %zu specs", tensors.size(), specs.size());
  return resolve<WeightRef, const float*>(
      cfg, specs, [&](size_t i) { return tensors[i]; }, [&](size_t i) { return tensors[i].f32(); });
}

GradPtrs resolve_grads(const ModelConfig& cfg, const std::vector<ParamSpec>& specs, float* grads) {
  FT_ASSERT(grads != nullptr, "resolve_grads: no gradient arena");
  auto at = [&](size_t i) { return grads + specs[i].offset; };
  return resolve<float*, float*>(cfg, specs, at, at);
}

}  // namespace ftx
