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

// Sizes: vocab, hidden, ffn, layers, heads, kv heads, head_dim, positions.
Status read_shape(const KeyReader& r, ModelConfig* c) {
  FTX_TRY(r.get_int("vocab_size", 1, kMaxVocab, &c->vocab_size));
  FTX_TRY(r.get_int("hidden_size", 1, kMaxHidden, &c->dim));
  FTX_TRY(r.get_int("intermediate_size", 1, kMaxFfn, &c->ffn_hidden));
  FTX_TRY(r.get_int("num_hidden_layers", 1, kMaxLayers, &c->n_layers));
  FTX_TRY(r.get_int("num_attention_heads", 1, kMaxHeads, &c->n_heads));
  c->n_kv_heads = c->n_heads;
  if (r.has("num_key_value_heads")) FTX_TRY(r.get_int("num_key_value_heads", 1, kMaxHeads, &c->n_kv_heads));
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

// A rope_scaling / rope_parameters object must describe plain RoPE (rope_type "default").
Status check_rope_type(const KeyReader& r, const std::string& key, const json& obj) {
  for (const char* k : {"rope_type", "type"}) {
    auto it = obj.find(k);
    if (it == obj.end() || it->is_null()) continue;
    if (!it->is_string() || it->get<std::string>() != "default")
      return r.err(key + "." + k, it->dump() + " is not supported (only plain RoPE, rope_type \"default\")");
  }
  return {};
}

Status read_rope(const KeyReader& r, ModelConfig* c) {
  const json* scaling = nullptr;
  FTX_TRY(r.get_object("rope_scaling", &scaling));
  if (scaling) FTX_TRY(check_rope_type(r, "rope_scaling", *scaling));
  const json* params = nullptr;
  FTX_TRY(r.get_object("rope_parameters", &params));
  const bool top = r.find("rope_theta") != nullptr;
  c->rope_theta = 10000.0f;  // Hugging Face default
  if (top) FTX_TRY(r.get_positive_float("rope_theta", 1e30, &c->rope_theta));
  if (params) {
    FTX_TRY(check_rope_type(r, "rope_parameters", *params));
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

// Numerics and options that must match what the model computes.
Status read_numerics(const KeyReader& r, ModelConfig* c) {
  FTX_TRY(r.get_positive_float("rms_norm_eps", 1.0, &c->rms_norm_eps));
  FTX_TRY(read_rope(r, c));
  c->tie_embeddings = false;
  FTX_TRY(r.get_bool("tie_word_embeddings", &c->tie_embeddings));
  FTX_TRY(r.expect_string("hidden_act", "silu", "the MLP is SwiGLU"));
  FTX_TRY(r.expect_string("model_type", "llama", "only Llama-shaped models load"));
  for (const char* k : {"attention_bias", "mlp_bias"}) {
    bool b = false;
    FTX_TRY(r.get_bool(k, &b));
    if (b) return r.err(k, "true is not supported (the model has no biases)");
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

// The "tokenizer" object, when present: its form is core/text's; here only how it meets the
// config (a tokenizer may use fewer ids than the embedding has rows, never more).
Status read_tokenizer(const KeyReader& r, const ModelConfig& c, std::shared_ptr<const Tokenizer>* out) {
  const json* tk = nullptr;
  FTX_TRY(r.get_object("tokenizer", &tk));
  if (out) out->reset();
  if (!tk) return {};
  auto t = tokenizer_from_json(*tk, r.path());
  if (!t) return t.error();
  if (auto fits = check_tokenizer_fits(**t, c.vocab_size); !fits)
    return make_error(r.path() + ": " + fits.error().message);
  if (out) *out = std::move(*t);
  return {};
}

}  // namespace

Result<json> parse_json_strict(std::string_view text, const std::string& path) {
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore what follows it.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    return make_error(path + ": invalid JSON: NUL byte at offset " + std::to_string(nul));
  try {
    std::vector<std::set<std::string>> open_objects;
    std::string duplicate;
    bool found_duplicate = false;
    auto cb = [&](int, json::parse_event_t ev, json& parsed) {
      if (ev == json::parse_event_t::object_start) {
        open_objects.emplace_back();
      } else if (ev == json::parse_event_t::object_end) {
        if (!open_objects.empty()) open_objects.pop_back();
      } else if (ev == json::parse_event_t::key && !open_objects.empty()) {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!open_objects.back().insert(k).second && !found_duplicate) found_duplicate = true, duplicate = k;
      }
      return true;
    };
    json j = json::parse(text.begin(), text.end(), cb);
    if (found_duplicate) return make_error(path + ": duplicate key " + json(duplicate).dump());
    return j;
  } catch (const std::exception& e) {
    return make_error(path + ": invalid JSON: " + one_line(e.what()));
  }
}

json config_to_json(const ModelConfig& c, const Tokenizer* tokenizer) {
  json j = json::object();
  j["architectures"] = json::array({"LlamaForCausalLM"});
  j["model_type"] = "llama";
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
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["torch_dtype"] = "float32";
  if (c.latent_bits > 0)
    j["free_transformer"] = {{"latent_bits", c.latent_bits}, {"inject_after_layer", c.inject_after}};
  if (tokenizer) j["tokenizer"] = tokenizer_to_json(*tokenizer);
  return j;
}

Result<ModelConfig> config_from_json(const json& j, const std::string& path,
                                     std::shared_ptr<const Tokenizer>* tokenizer) {
  try {
    if (!j.is_object()) return make_error(path + ": config must be a JSON object, got " + j.type_name());
    KeyReader r(j, path, "");
    ModelConfig c;
    FTX_TRY(read_shape(r, &c));
    FTX_TRY(read_numerics(r, &c));
    FTX_TRY(read_free(r, &c));
    c.readout_bias = false;
    if (auto v = c.validate(); !v) return make_error(path + ": " + v.error().message);
    FTX_TRY(read_tokenizer(r, c, tokenizer));
    return c;
  } catch (const std::exception& e) {
    return make_error(path + ": cannot read config: " + one_line(e.what()));
  }
}

}  // namespace ftx
