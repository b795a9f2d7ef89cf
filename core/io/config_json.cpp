// config.json reading and writing, and the strict JSON parser (see config_json.h).
// Integer keys are bounded so that param_specs() can never overflow int64 and no allocation is
// sized from an absurd value before the tensors themselves have been checked.
#include "core/io/config_json.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <vector>

#include "core/text/tokenizer_json.h"
#include "core/util/json_strict.h"

namespace ftx {
namespace {

using nlohmann::json;

// Upper bounds on config integers: well above any Llama (vocab 128256, hidden 16384, 126 layers)
// and low enough that every product in param_specs() fits in int64.
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxHidden = int64_t{1} << 16;
constexpr int64_t kMaxFfn = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = int64_t{1} << 14;
constexpr int64_t kMaxPositions = int64_t{1} << 24;

std::string one_line(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

// The shortest decimal that reads back as the same float (1e-06, not 9.99999997e-07).
json short_float(float f) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), f);
  return json(std::strtod(std::string(buf, r.ptr).c_str(), nullptr));
}

// Typed, range-checked access to one JSON object; errors "PATH: key 'PREFIXkey': problem".
class KeyReader {
 public:
  KeyReader(const json& obj, std::string path, std::string prefix)
      : obj_(obj), path_(std::move(path)), prefix_(std::move(prefix)) {}

  Error err(const std::string& key, const std::string& problem) const {
    return make_error(path_ + ": key '" + prefix_ + key + "': " + problem);
  }
  const json* find(const std::string& key) const {
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  // Present and non-null.
  bool has(const std::string& key) const {
    const json* v = find(key);
    return v && !v->is_null();
  }

  Status get_int(const std::string& key, int64_t lo, int64_t hi, int* out, bool required = true) const {
    const json* v = find(key);
    if (!v) return required ? Status(err(key, "missing (required)")) : Status();
    if (!v->is_number_integer())
      return err(key, std::string("must be an integer, got ") + v->type_name() + " " + v->dump());
    int64_t x = 0;  // values above hi (even above INT64_MAX) clamp to hi + 1: out of range
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      x = u > uint64_t(hi) ? hi + 1 : static_cast<int64_t>(u);
    } else {
      x = v->get<int64_t>();
    }
    if (x < lo || x > hi)
      return err(key, "must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + v->dump());
    *out = static_cast<int>(x);
    return {};
  }

  // Finite number in (0, hi); integers are accepted for floats (rope_theta 10000).
  Status get_positive_float(const std::string& key, double hi, float* out, bool required = true) const {
    const json* v = find(key);
    if (!v) return required ? Status(err(key, "missing (required)")) : Status();
    if (!v->is_number()) return err(key, std::string("must be a number, got ") + v->type_name());
    const double x = v->get<double>();
    if (!std::isfinite(x) || !(x > 0) || !(x < hi) || !(static_cast<float>(x) > 0))
      return err(key, "must be a positive number below " + json(hi).dump() + ", got " + v->dump());
    *out = static_cast<float>(x);
    return {};
  }

  Status get_bool(const std::string& key, bool* out) const {
    const json* v = find(key);
    if (!v) return {};
    if (!v->is_boolean()) return err(key, std::string("must be true or false, got ") + v->type_name());
    *out = v->get<bool>();
    return {};
  }

  // Optional string key that, when present, must equal `expected`.
  Status expect_string(const std::string& key, const std::string& expected, const std::string& why) const {
    const json* v = find(key);
    if (!v || v->is_null()) return {};
    if (!v->is_string()) return err(key, std::string("must be a string, got ") + v->type_name());
    if (v->get<std::string>() != expected) return err(key, v->dump() + " is not supported (" + why + ")");
    return {};
  }

  Status get_object(const std::string& key, const json** out) const {
    *out = nullptr;
    const json* v = find(key);
    if (!v || v->is_null()) return {};
    if (!v->is_object()) return err(key, std::string("must be an object, got ") + v->type_name());
    *out = v;
    return {};
  }

  const std::string& path() const { return path_; }

 private:
  const json& obj_;
  std::string path_, prefix_;
};

// The model_type, absent in hand-written configs: "llama".
Status read_architecture(const KeyReader& r, ModelConfig* c) {
  c->architecture = "llama";
  const json* v = r.find("model_type");
  if (!v || v->is_null()) return {};
  if (!v->is_string()) return r.err("model_type", std::string("must be a string, got ") + v->type_name());
  const std::string t = v->get<std::string>();
  if (t != "llama" && t != "mistral" && t != "qwen2")
    return r.err("model_type", v->dump() + " is not supported (supported: llama, mistral, qwen2)");
  c->architecture = t;
  return {};
}

// num_key_value_heads as transformers fills it: null is num_attention_heads for all three; absent
// is num_attention_heads for Llama but the class default for Mistral (8) and Qwen2 (32).
Status read_kv_heads(const KeyReader& r, ModelConfig* c) {
  const json* v = r.find("num_key_value_heads");
  if (v && !v->is_null()) return r.get_int("num_key_value_heads", 1, kMaxHeads, &c->n_kv_heads);
  c->n_kv_heads = c->n_heads;
  if (!v && c->architecture == "mistral") c->n_kv_heads = 8;
  if (!v && c->architecture == "qwen2") c->n_kv_heads = 32;
  return {};
}

// Sizes: vocab, hidden, ffn, layers, heads, kv heads, head_dim, positions.
Status read_shape(const KeyReader& r, ModelConfig* c) {
  FTX_TRY(r.get_int("vocab_size", 1, kMaxVocab, &c->vocab_size));
  FTX_TRY(r.get_int("hidden_size", 1, kMaxHidden, &c->dim));
  FTX_TRY(r.get_int("intermediate_size", 1, kMaxFfn, &c->ffn_hidden));
  FTX_TRY(r.get_int("num_hidden_layers", 1, kMaxLayers, &c->n_layers));
  FTX_TRY(r.get_int("num_attention_heads", 1, kMaxHeads, &c->n_heads));
  FTX_TRY(read_kv_heads(r, c));
  if (r.has("head_dim")) {
    FTX_TRY(r.get_int("head_dim", 1, kMaxHeadDim, &c->head_dim));
  } else {
    if (c->dim % c->n_heads != 0)
      return r.err("head_dim", "missing, and hidden_size " + std::to_string(c->dim) +
                                   " is not a multiple of num_attention_heads " + std::to_string(c->n_heads));
    c->head_dim = c->dim / c->n_heads;
  }
  FTX_TRY(r.get_int("max_position_embeddings", 1, kMaxPositions, &c->max_seq_len));
  return {};
}

// Our extension for frequencies a config cannot otherwise say (a GGUF file's rope_freqs).
constexpr const char* kDivisorsRopeType = "ftx_divisors";

// The llama3 parameters of a rope_scaling / rope_parameters object (all four are required, as
// transformers' rope validation requires them).
Status read_llama3(const KeyReader& r, RopeScaling* s) {
  s->kind = RopeScalingKind::Llama3;
  FTX_TRY(r.get_positive_float("factor", 1e9, &s->factor));
  FTX_TRY(r.get_positive_float("low_freq_factor", 1e9, &s->low_freq_factor));
  FTX_TRY(r.get_positive_float("high_freq_factor", 1e9, &s->high_freq_factor));
  FTX_TRY(r.get_int("original_max_position_embeddings", 1, kMaxPositions, &s->original_max_position));
  return {};
}

Status read_divisors(const KeyReader& r, RopeScaling* s) {
  s->kind = RopeScalingKind::Divisors;
  const json* v = r.find("divisors");
  if (!v || !v->is_array()) return r.err("divisors", "must be an array of positive numbers");
  if (v->size() > size_t(kMaxHeadDim)) return r.err("divisors", "more than " + std::to_string(kMaxHeadDim) + " values");
  for (const json& d : *v) {
    if (!d.is_number() || !std::isfinite(d.get<double>()) || !(d.get<double>() > 0) || !(d.get<double>() < 1e30))
      return r.err("divisors", "must be positive numbers, got " + d.dump());
    s->divisors.push_back(static_cast<float>(d.get<double>()));
  }
  return {};
}

// One rope_scaling (v4) or rope_parameters (v5) object: its type ("rope_type", or the legacy
// "type") and that type's parameters. "default" or no type is plain RoPE.
Status read_rope_object(const KeyReader& r, const std::string& key, const json& obj, RopeScaling* out) {
  KeyReader o(obj, r.path(), key + ".");
  std::string type;
  for (const char* k : {"rope_type", "type"}) {
    const json* v = o.find(k);
    if (!v || v->is_null()) continue;
    if (!v->is_string()) return o.err(k, std::string("must be a string, got ") + v->type_name());
    if (!type.empty() && v->get<std::string>() != type) return o.err(k, v->dump() + " conflicts with rope_type");
    type = v->get<std::string>();
  }
  *out = RopeScaling{};
  if (type.empty() || type == "default") return {};
  if (type == "llama3") return read_llama3(o, out);
  if (type == kDivisorsRopeType) return read_divisors(o, out);
  return o.err(obj.contains("rope_type") ? "rope_type" : "type",
               json(type).dump() + " is not supported (rope scaling: only default and llama3)");
}

Status read_rope(const KeyReader& r, ModelConfig* c) {
  const json* scaling = nullptr;
  FTX_TRY(r.get_object("rope_scaling", &scaling));
  const json* params = nullptr;
  FTX_TRY(r.get_object("rope_parameters", &params));
  const bool top = r.find("rope_theta") != nullptr;
  c->rope_theta = 10000.0f;  // Hugging Face default
  if (top) FTX_TRY(r.get_positive_float("rope_theta", 1e30, &c->rope_theta));
  c->rope_scaling = RopeScaling{};
  if (scaling) FTX_TRY(read_rope_object(r, "rope_scaling", *scaling, &c->rope_scaling));
  if (params) {
    RopeScaling from_params;
    FTX_TRY(read_rope_object(r, "rope_parameters", *params, &from_params));
    if (scaling && !(from_params == c->rope_scaling))
      return r.err("rope_parameters", "conflicts with rope_scaling (give the scaling once)");
    c->rope_scaling = from_params;
    KeyReader pr(*params, r.path(), "rope_parameters.");
    float theta = 0;
    if (pr.find("rope_theta")) {
      FTX_TRY(pr.get_positive_float("rope_theta", 1e30, &theta));
      if (top && theta != c->rope_theta) return pr.err("rope_theta", "conflicts with the top-level rope_theta");
      c->rope_theta = theta;
    }
  }
  return {};
}

// Sliding-window attention, which the model does not compute: Mistral's sliding_window must be
// null (absent is taken as null), Qwen2's use_sliding_window false (its sliding_window and
// max_window_layers then mean nothing), and no layer_types entry other than "full_attention".
Status check_full_attention(const KeyReader& r, const ModelConfig& c) {
  auto refuse = [&](const std::string& what) {
    return make_error(r.path() + ": " + what + ": sliding-window attention is not supported");
  };
  if (c.architecture == "mistral" && r.has("sliding_window"))
    return refuse("sliding_window " + r.find("sliding_window")->dump());
  if (c.architecture == "qwen2") {
    bool sliding = false;
    FTX_TRY(r.get_bool("use_sliding_window", &sliding));
    if (sliding) return refuse("use_sliding_window true");
  }
  if (const json* lt = r.find("layer_types"); lt && !lt->is_null()) {
    if (!lt->is_array()) return r.err("layer_types", std::string("must be an array, got ") + lt->type_name());
    for (const json& t : *lt)
      if (t != "full_attention") return refuse("layer_types entry " + t.dump());
  }
  return {};
}

// Biases as each architecture has them: Llama's attention_bias biases q, k, v and o; Qwen2 always
// biases q, k and v; Mistral has none (transformers ignores attention_bias there). An MLP bias is
// refused.
Status read_biases(const KeyReader& r, ModelConfig* c) {
  bool attention_bias = false, mlp_bias = false;
  FTX_TRY(r.get_bool("attention_bias", &attention_bias));
  FTX_TRY(r.get_bool("mlp_bias", &mlp_bias));
  c->qkv_bias = c->o_bias = false;
  if (c->architecture == "llama") {
    c->qkv_bias = c->o_bias = attention_bias;
    if (mlp_bias) return r.err("mlp_bias", "true is not supported (the MLP has no biases)");
  } else if (c->architecture == "qwen2") {
    c->qkv_bias = true;
  }
  return {};
}

// Numerics and options that must match what the model computes.
Status read_numerics(const KeyReader& r, ModelConfig* c) {
  FTX_TRY(r.get_positive_float("rms_norm_eps", 1.0, &c->rms_norm_eps));
  FTX_TRY(read_rope(r, c));
  c->tie_embeddings = false;
  FTX_TRY(r.get_bool("tie_word_embeddings", &c->tie_embeddings));
  FTX_TRY(r.expect_string("hidden_act", "silu", "the MLP is SwiGLU"));
  FTX_TRY(read_biases(r, c));
  FTX_TRY(check_full_attention(r, *c));
  for (const char* k : {"num_local_experts", "num_experts"}) {
    const json* v = r.find(k);
    if (v && v->is_number() && v->get<double>() > 0)
      return r.err(k, v->dump() + ": mixture-of-experts models are not supported");
  }
  return {};
}

Status read_free(const KeyReader& r, ModelConfig* c) {
  const json* ft = nullptr;
  FTX_TRY(r.get_object("free_transformer", &ft));
  c->latent_bits = 0;
  c->inject_after = c->n_layers / 2;
  if (!ft) return {};
  KeyReader fr(*ft, r.path(), "free_transformer.");
  FTX_TRY(fr.get_int("latent_bits", 0, kMaxLatentBits, &c->latent_bits));
  if (c->latent_bits > 0) FTX_TRY(fr.get_int("inject_after_layer", 1, c->n_layers - 1, &c->inject_after));
  return {};
}

// The "routing" object of a routed model (docs/subjective_depth.md); absent: every block dense.
Status read_routing(const KeyReader& r, ModelConfig* c) {
  const json* ro = nullptr;
  FTX_TRY(r.get_object("routing", &ro));
  c->routing = RoutingConfig{};
  if (!ro) return {};
  KeyReader rr(*ro, r.path(), "routing.");
  const json* kind = rr.find("kind");
  if (!kind || !kind->is_string()) return rr.err("kind", "must be one of none, random, mod, sdt, stt");
  auto k = routing_from_name(kind->get<std::string>());
  if (!k) return rr.err("kind", kind->dump() + " is not one of none, random, mod, sdt, stt");
  c->routing.kind = *k;
  // Numbers in [0, hi].
  auto unit = [&](const char* key, double hi, float* out) -> Status {
    const json* v = rr.find(key);
    if (!v) return {};
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0 || v->get<double>() > hi)
      return rr.err(key, "must be a number in [0, " + json(hi).dump() + "], got " + v->dump());
    *out = float(v->get<double>());
    return {};
  };
  FTX_TRY(unit("capacity", 1.0, &c->routing.capacity));
  FTX_TRY(unit("aux_weight", 1e6, &c->routing.aux_weight));
  FTX_TRY(unit("gate_penalty", 1e6, &c->routing.gate_penalty));
  FTX_TRY(rr.get_bool("hard_gate", &c->routing.hard_gate));
  FTX_TRY(rr.get_int("prior_div", 1, 1 << 20, &c->routing.prior_div, false));
  FTX_TRY(rr.get_int("ma_window", 1, 1 << 30, &c->routing.ma_window, false));
  FTX_TRY(unit("student_weight", 1e6, &c->routing.student_weight));
  if (const json* mode = rr.find("mode")) {
    auto m = mode->is_string() ? route_mode_from_name(mode->get<std::string>()) : std::nullopt;
    if (!m) return rr.err("mode", mode->dump() + " is not one of topk, threshold");
    c->routing.mode = *m;
  }
  FTX_TRY(unit("g_th", 1.0, &c->routing.g_th));
  return {};
}

// The "tokenizer" object, when present: its form is core/text's; here only how it meets the
// config (a tokenizer may use fewer ids than the embedding has rows, never more).
Status read_tokenizer(const KeyReader& r, const ModelConfig& c, std::shared_ptr<const Tokenizer>* out) {
  const json* tk = nullptr;
  FTX_TRY(r.get_object("tokenizer", &tk));
  if (out) out->reset();
  if (!tk) return {};
  // A bpe tokenizer lives in its own file: loaded only when asked for (a run row has none).
  if (!out && tk->is_object() && tk->value("type", json()) == "bpe") return {};
  auto t = tokenizer_from_json(*tk, r.path());
  if (!t) return t.error();
  if (auto fits = check_tokenizer_fits(**t, c.vocab_size); !fits)
    return make_error(r.path() + ": " + fits.error().message);
  if (out) *out = std::move(*t);
  return {};
}

}  // namespace

namespace {

const char* architectures_name(const std::string& arch) {
  if (arch == "mistral") return "MistralForCausalLM";
  if (arch == "qwen2") return "Qwen2ForCausalLM";
  return "LlamaForCausalLM";
}

// The v4 (top-level) rope_scaling object of a scaled RoPE.
json rope_scaling_json(const RopeScaling& s) {
  if (s.kind == RopeScalingKind::Llama3)
    return {{"rope_type", "llama3"},
            {"factor", short_float(s.factor)},
            {"low_freq_factor", short_float(s.low_freq_factor)},
            {"high_freq_factor", short_float(s.high_freq_factor)},
            {"original_max_position_embeddings", s.original_max_position}};
  json d = json::array();
  for (float x : s.divisors) d.push_back(short_float(x));
  return {{"rope_type", kDivisorsRopeType}, {"divisors", d}};
}

// One token id of a config (int, in [0, vocab_size)).
Result<int32_t> read_token_id(const KeyReader& r, const std::string& key, const json& v, int vocab_size) {
  if (!v.is_number_integer()) return r.err(key, std::string("must be an integer token id, got ") + v.dump());
  if (v.is_number_unsigned() ? v.get<uint64_t>() >= uint64_t(vocab_size)
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab_size))
    return r.err(key,
                 "token id " + v.dump() + " is outside the vocabulary (vocab_size " + std::to_string(vocab_size) + ")");
  return static_cast<int32_t>(v.get<int64_t>());
}

}  // namespace

json config_to_json(const ModelConfig& c, const Tokenizer* tokenizer) {
  json j = json::object();
  j["architectures"] = json::array({architectures_name(c.architecture)});
  j["model_type"] = c.architecture;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.ffn_hidden;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = short_float(c.rms_norm_eps);
  j["rope_theta"] = short_float(c.rope_theta);
  if (c.rope_scaling.kind != RopeScalingKind::None) j["rope_scaling"] = rope_scaling_json(c.rope_scaling);
  j["tie_word_embeddings"] = c.tie_embeddings;
  if (c.architecture == "llama") {
    j["attention_bias"] = c.qkv_bias && c.o_bias;
    j["mlp_bias"] = false;
  } else if (c.architecture == "mistral") {
    j["sliding_window"] = nullptr;
  } else if (c.architecture == "qwen2") {
    j["use_sliding_window"] = false;
  }
  j["torch_dtype"] = "float32";
  if (c.latent_bits > 0)
    j["free_transformer"] = {{"latent_bits", c.latent_bits}, {"inject_after_layer", c.inject_after}};
  if (c.routing.kind != Routing::None) {
    const RoutingConfig& ro = c.routing;
    j["routing"] = {{"kind", routing_name(ro.kind)},
                    {"capacity", short_float(ro.capacity)},
                    {"hard_gate", ro.hard_gate},
                    {"prior_div", ro.prior_div},
                    {"ma_window", ro.ma_window},
                    {"aux_weight", short_float(ro.aux_weight)},
                    {"gate_penalty", short_float(ro.gate_penalty)},
                    {"mode", route_mode_name(ro.mode)},
                    {"g_th", short_float(ro.g_th)},
                    {"student_weight", short_float(ro.student_weight)}};
  }
  if (tokenizer) j["tokenizer"] = tokenizer_to_json(*tokenizer);
  return j;
}

Result<SpecialTokenIds> special_token_ids_from_json(const json& j, const std::string& path, int vocab_size) {
  try {
    if (!j.is_object()) return make_error(path + ": must be a JSON object, got " + j.type_name());
    KeyReader r(j, path, "");
    SpecialTokenIds ids;
    if (r.has("bos_token_id")) {
      auto b = read_token_id(r, "bos_token_id", *r.find("bos_token_id"), vocab_size);
      if (!b) return b.error();
      ids.bos = *b;
    }
    if (r.has("eos_token_id")) {
      const json& v = *r.find("eos_token_id");
      std::vector<int32_t> eos;
      for (const json& e : v.is_array() ? v : json::array({v})) {
        auto id = read_token_id(r, "eos_token_id", e, vocab_size);
        if (!id) return id.error();
        eos.push_back(*id);
      }
      ids.eos = std::move(eos);
    }
    return ids;
  } catch (const std::exception& e) {
    return make_error(path + ": cannot read token ids: " + one_line(e.what()));
  }
}

Result<ModelConfig> config_from_json(const json& j, const std::string& path,
                                     std::shared_ptr<const Tokenizer>* tokenizer) {
  try {
    if (!j.is_object()) return make_error(path + ": config must be a JSON object, got " + j.type_name());
    KeyReader r(j, path, "");
    ModelConfig c;
    FTX_TRY(read_architecture(r, &c));
    FTX_TRY(read_shape(r, &c));
    FTX_TRY(read_numerics(r, &c));
    FTX_TRY(read_free(r, &c));
    FTX_TRY(read_routing(r, &c));
    c.readout_bias = false;
    if (auto v = c.validate(); !v) return make_error(path + ": " + v.error().message);
    FTX_TRY(read_tokenizer(r, c, tokenizer));
    return c;
  } catch (const std::exception& e) {
    return make_error(path + ": cannot read config: " + one_line(e.what()));
  }
}

}  // namespace ftx
