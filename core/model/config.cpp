#include "core/model/config.h"

#include <algorithm>
#include <cmath>

namespace ftx {

const char* routing_name(Routing r) {
  switch (r) {
    case Routing::None:
      return "none";
    case Routing::Random:
      return "random";
    case Routing::Mod:
      return "mod";
    case Routing::Sdt:
      return "sdt";
    case Routing::Stt:
      return "stt";
  }
  return "?";
}

std::optional<Routing> routing_from_name(const std::string& name) {
  for (Routing r : {Routing::None, Routing::Random, Routing::Mod, Routing::Sdt, Routing::Stt})
    if (name == routing_name(r)) return r;
  return std::nullopt;
}

const char* route_mode_name(RouteMode m) { return m == RouteMode::Threshold ? "threshold" : "topk"; }

std::optional<RouteMode> route_mode_from_name(const std::string& name) {
  for (RouteMode m : {RouteMode::TopK, RouteMode::Threshold})
    if (name == route_mode_name(m)) return m;
  return std::nullopt;
}

std::string routed_blocks_text(const ModelConfig& c) {
  std::string out;
  for (int l = 0; l < c.n_layers; ++l)
    if (c.routed(l)) out += (out.empty() ? "" : ", ") + std::to_string(l);
  return out;
}

int ModelConfig::route_k(int T) const {
  if (!(routing.capacity > 0)) return 0;
  const int k = int(std::floor(double(routing.capacity) * T));
  return std::clamp(k, 1, T);
}

Status ModelConfig::validate() const {
  auto bad = [](const std::string& what) { return make_error("model config: " + what); };
  if (vocab_size <= 0) return bad("vocab_size must be positive, got " + std::to_string(vocab_size));
  if (dim <= 0) return bad("dim must be positive, got " + std::to_string(dim));
  if (n_layers <= 0) return bad("n_layers must be positive, got " + std::to_string(n_layers));
  if (n_heads <= 0 || n_kv_heads <= 0) return bad("heads must be positive");
  if (n_heads % n_kv_heads != 0)
    return bad("n_heads (" + std::to_string(n_heads) + ") must be a multiple of n_kv_heads (" +
               std::to_string(n_kv_heads) + ")");
  if (head_dim <= 0 || head_dim % 2 != 0)
    return bad("head_dim must be positive and even (RoPE half rotation), got " + std::to_string(head_dim));
  if (ffn_hidden <= 0) return bad("ffn_hidden must be positive, got " + std::to_string(ffn_hidden));
  if (max_seq_len <= 0) return bad("max_seq_len must be positive");
  if (!(rms_norm_eps > 0)) return bad("rms_norm_eps must be positive");
  if (!(rope_theta > 0)) return bad("rope_theta must be positive");
  if (latent_bits < 0 || latent_bits > kMaxLatentBits)
    return bad("latent bits H must be in 0.." + std::to_string(kMaxLatentBits) + ", got " +
               std::to_string(latent_bits));
  if (is_free() && (inject_after < 1 || inject_after >= n_layers))
    return bad("inject_after must be in 1.." + std::to_string(n_layers - 1) + ", got " + std::to_string(inject_after));
  if (architecture != "llama" && architecture != "mistral" && architecture != "qwen2")
    return bad("architecture '" + architecture + "' is not supported (llama, mistral, qwen2)");
  if (rope_scaling.kind == RopeScalingKind::Llama3 &&
      !(rope_scaling.factor > 0 && rope_scaling.high_freq_factor > rope_scaling.low_freq_factor &&
        rope_scaling.low_freq_factor > 0 && rope_scaling.original_max_position > 0))
    return bad(
        "rope_scaling llama3 needs factor > 0, high_freq_factor > low_freq_factor > 0 and "
        "original_max_position_embeddings > 0");
  if (routing.kind != Routing::None) {
    const RoutingConfig& r = routing;
    const std::string name = std::string("routing ") + routing_name(r.kind);
    if (!(r.capacity >= 0 && r.capacity <= 1))
      return bad(name + ": capacity must be in [0, 1], got " + std::to_string(r.capacity));
    if (r.prior_div < 1) return bad(name + ": prior_div must be at least 1");
    if (r.ma_window < 1) return bad(name + ": ma_window must be at least 1");
    if (!(r.aux_weight >= 0 && std::isfinite(r.aux_weight)) ||
        !(r.gate_penalty >= 0 && std::isfinite(r.gate_penalty)) ||
        !(r.student_weight >= 0 && std::isfinite(r.student_weight)))
      return bad(name + ": loss weights must be finite and not negative");
    if (!(r.g_th > 0 && r.g_th < 1)) return bad(name + ": g_th must be in (0, 1), got " + std::to_string(r.g_th));
    if (r.mode == RouteMode::Threshold && !r.surprise())
      return bad(name + ": threshold mode needs a gate in (0, 1) (routing sdt or stt)");
    bool any = false;
    for (int l = 0; l < n_layers; ++l) any = any || routed(l);
    if (!any)
      return bad(name + ": no block of " + std::to_string(n_layers) +
                 " can be routed (routed blocks are the odd ones, the block Z enters excepted)");
  }
  if (rope_scaling.kind == RopeScalingKind::Divisors) {
    if (int(rope_scaling.divisors.size()) != head_dim / 2)
      return bad("rope frequency divisors: " + std::to_string(rope_scaling.divisors.size()) +
                 " given, head_dim / 2 = " + std::to_string(head_dim / 2) + " expected");
    for (float d : rope_scaling.divisors)
      if (!(d > 0) || !std::isfinite(d)) return bad("rope frequency divisors must be positive and finite");
  }
  return {};
}

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> out(size_t(std::max(half, 0)));
  const RopeScaling& s = c.rope_scaling;
  for (int i = 0; i < half; ++i) {
    double inv = std::pow(double(c.rope_theta), -2.0 * i / c.head_dim);
    if (s.kind == RopeScalingKind::Llama3) {  // transformers' _compute_llama3_parameters
      const double low_wavelen = s.original_max_position / double(s.low_freq_factor);
      const double high_wavelen = s.original_max_position / double(s.high_freq_factor);
      const double wavelen = 2 * M_PI / inv;
      if (wavelen > low_wavelen) {
        inv /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (s.original_max_position / wavelen - s.low_freq_factor) / (double(s.high_freq_factor) - s.low_freq_factor);
        inv = (1 - smooth) * inv / s.factor + smooth * inv;
      }
    } else if (s.kind == RopeScalingKind::Divisors) {
      inv /= s.divisors[size_t(i)];
    }
    out[size_t(i)] = float(inv);
  }
  return out;
}

const std::vector<std::string>& model_preset_names() {
  static const std::vector<std::string> names = {"tiny", "small", "ft-1.5b", "ft-8b"};
  return names;
}

std::string ShapeOverrides::preset_list(const char* separator) {
  std::string out;
  for (const std::string& n : model_preset_names()) out += (out.empty() ? "" : separator) + n;
  return out;
}

Result<ModelConfig> model_preset(const std::string& name) {
  ModelConfig c;
  if (name == "tiny") {
    c.n_layers = 2, c.dim = 64, c.n_heads = 4, c.n_kv_heads = 4, c.head_dim = 16, c.ffn_hidden = 176;
  } else if (name == "small") {
    c.n_layers = 4, c.dim = 128, c.n_heads = 4, c.n_kv_heads = 4, c.head_dim = 32, c.ffn_hidden = 344;
  } else if (name == "ft-1.5b") {  // the paper's 1.5B (docs/design.md section 4): tied, I = 8960
    c.n_layers = 28, c.dim = 1536, c.n_heads = 12, c.n_kv_heads = 2, c.head_dim = 128, c.ffn_hidden = 8960;
    c.vocab_size = 1 << 17, c.tie_embeddings = true;
    c.max_seq_len = 4096, c.rms_norm_eps = 1e-5f, c.rope_theta = 500000.0f, c.latent_bits = 16;
  } else if (name == "ft-8b") {  // the paper's 8B: Llama-3-8B's structure, vocabulary 2^17
    c.n_layers = 32, c.dim = 4096, c.n_heads = 32, c.n_kv_heads = 8, c.head_dim = 128, c.ffn_hidden = 14336;
    c.vocab_size = 1 << 17, c.tie_embeddings = false;
    c.max_seq_len = 4096, c.rms_norm_eps = 1e-5f, c.rope_theta = 500000.0f, c.latent_bits = 16;
  } else {
    return make_error("preset '" + name + "': unknown (expected " + ShapeOverrides::preset_list(" or ") + ")");
  }
  c.inject_after = c.n_layers / 2;
  return c;
}

Result<RoutingConfig> routing_config(const RouteOverrides& o, FieldName name) {
  auto field = [&](const char* key) { return name(find_field<RouteOverrides>(key)); };
  auto kind = routing_from_name(o.routing);
  if (!kind)
    return make_error(field("routing") + " '" + o.routing + "': unknown (expected none, random, mod, sdt or stt)");
  if (*kind == Routing::None && (!(o.route == RoutingConfig{}) || o.route_mode != "topk"))
    return make_error(field("capacity") + " and the other routing settings need " + field("routing") +
                      " random, mod, sdt or stt");
  auto mode = route_mode_from_name(o.route_mode);
  if (!mode) return make_error(field("route_mode") + " '" + o.route_mode + "': unknown (expected topk or threshold)");
  RoutingConfig r = o.route;
  r.kind = *kind;
  r.mode = *mode;
  if (r.mode == RouteMode::Threshold && !r.surprise())
    return make_error(field("route_mode") + " threshold needs " + field("routing") +
                      " sdt or stt (a gate in (0, 1) to compare with " + field("g_th") + ")");
  if (r.mode == RouteMode::TopK && r.g_th != RoutingConfig{}.g_th)
    return make_error(field("g_th") + " needs " + field("route_mode") + " threshold");
  return r;
}

Result<ModelConfig> shape_model_config(const ShapeOverrides& o, int vocab_size, int seq_len, FieldName name) {
  auto field = [&](const char* key) { return name(find_field<ShapeOverrides>(key)); };
  FTX_TRY(check_fields(o, name));
  auto cfg = model_preset(o.preset);
  if (!cfg)
    return make_error(field("preset") + " '" + o.preset + "': unknown (expected " +
                      ShapeOverrides::preset_list(" or ") + ")");
  if (o.layers) cfg->n_layers = *o.layers;
  if (o.dim) cfg->dim = *o.dim;
  if (o.heads) cfg->n_heads = *o.heads, cfg->n_kv_heads = *o.heads;
  if (o.kv_heads) cfg->n_kv_heads = *o.kv_heads;
  if (o.ffn) cfg->ffn_hidden = *o.ffn;
  if (cfg->dim % cfg->n_heads != 0)
    return make_error(field("dim") + " " + std::to_string(cfg->dim) + " is not a multiple of " + field("heads") + " " +
                      std::to_string(cfg->n_heads));
  cfg->head_dim = cfg->dim / cfg->n_heads;
  cfg->latent_bits = o.latent_bits;
  if (cfg->is_free() && cfg->n_layers < 2)
    return make_error(field("layers") + " " + std::to_string(cfg->n_layers) +
                      ": a Free Transformer needs at least 2 blocks (Z enters at the middle one)");
  cfg->inject_after = cfg->n_layers / 2;
  auto routing = routing_config(o, name);
  if (!routing) return routing.error();
  cfg->routing = *routing;
  cfg->vocab_size = vocab_size;
  cfg->max_seq_len = std::max(cfg->max_seq_len, seq_len);
  FTX_TRY(cfg->validate());
  return cfg;
}

}  // namespace ftx
