// Where each of a model's tensors is, resolved by name once when the model is made: the forward,
// backward and decode steps read these pointers and never look a name up. The same layout serves
// the parameters (GEMM weights as WeightRef, fp32 or bf16; vectors as fp32 pointers) and their
// gradients (all fp32, writable).
//
// Deliberately not here: allocation (core/model/model.cpp owns the arenas), names and shapes
// (core/model/params.h), anything about how a tensor got its values.
#pragma once
#include <cstddef>
#include <vector>

#include "core/model/config.h"
#include "core/model/params.h"
#include "kernels/base/dtype.h"

namespace ftx {

// One pre-norm Llama block: M for the GEMM weights, V for the RMSNorm weights.
template <class M, class V>
struct BlockTensors {
  V ln1;             // (C) input_layernorm
  M wq, wk, wv, wo;  // (NH*HS, C), (NKV*HS, C), (NKV*HS, C), (C, NH*HS)
  V ln2;             // (C) post_attention_layernorm
  M wg, wu, wd;      // (F, C), (F, C), (C, F)
  V bq, bk, bv;      // (NH*HS), (NKV*HS), (NKV*HS) q/k/v_proj.bias; null without ModelConfig::qkv_bias
  V bo;              // (C) o_proj.bias; null without ModelConfig::o_bias
};

// A routed block's router (docs/subjective_depth.md); null where its kind has none.
template <class M, class V>
struct RouteTensors {
  M router;                        // (1, C) route.layers.L.router.weight (MoD)
  V gate;                          // (4) route.layers.L.gate: o_ce, m_cu, beta_ce, beta_cu before softplus (SDT, STT)
  V prior_norm;                    // (C) route.layers.L.prior.norm.weight (SDT, STT)
  M prior_wg, prior_wu, prior_wd;  // (P, C), (P, C), (C, P) route.layers.L.prior.*_proj.weight
  M student;                       // (2, 2C) route.layers.L.student.weight (MoD, SDT, STT)
  V student_bias;                  // (2) route.layers.L.student.bias
};

template <class M, class V>
struct ModelTensors {
  M embed;                                 // (V, C) model.embed_tokens.weight
  std::vector<BlockTensors<M, V>> layers;  // L decoder blocks
  V norm;                                  // (C) model.norm.weight
  M head;                                  // (V, C) lm_head.weight, or embed when tied
  // Free Transformer only (null in the plain decoder):
  V zeta;                  // (C) free.zeta
  BlockTensors<M, V> enc;  // free.encoder.*
  V enc_norm;              // (C) free.encoder_norm.weight
  M readout;               // (H, C) free.encoder_readout.weight
  V readout_bias;          // (H) free.encoder_readout.bias, null when absent
  V post_sampler;          // (C, 2^H) free.post_sampler.weight (a gather: fp32 only)
  // Routed models only: one entry per block, filled for the routed ones (ModelConfig::routed).
  std::vector<RouteTensors<M, V>> routes;
};

using ParamRefs = ModelTensors<WeightRef, const float*>;
using GradPtrs = ModelTensors<float*, float*>;
using BlockW = BlockTensors<WeightRef, const float*>;
using BlockG = BlockTensors<float*, float*>;
using RouteW = RouteTensors<WeightRef, const float*>;
using RouteG = RouteTensors<float*, float*>;

// The parameters where tensors[i] holds specs[i] (specs from param_specs(cfg)); every tensor that
// is not a GEMM weight (ParamSpec::gemm_weight) must be fp32.
ParamRefs resolve_params(const ModelConfig& cfg, const std::vector<ParamSpec>& specs,
                         const std::vector<WeightRef>& tensors);
// The gradients in an fp32 arena laid out by the specs' offsets.
GradPtrs resolve_grads(const ModelConfig& cfg, const std::vector<ParamSpec>& specs, float* grads);

}  // namespace ftx
