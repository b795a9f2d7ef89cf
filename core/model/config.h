// ModelConfig: the shape of a Free Transformer (or of the plain decoder when latent_bits == 0).
// Plain struct, validated once (docs/design.md section 9); written into every checkpoint's config.json
// (core/io/config_json.h) and every run row of the store.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/util/fields.h"
#include "kernels/base/result.h"

namespace ftx {

inline constexpr int kMaxLatentBits = 20;
// The recipe's latent size (the default of every shape, the demo's).
inline constexpr int kDefaultLatentBits = 8;

// Rotary frequencies beyond plain theta^(-2i/HS): Hugging Face's rope_scaling of type "llama3"
// (Llama 3.1 and later), or per-frequency divisors as a GGUF file's rope_freqs.weight stores them.
enum class RopeScalingKind { None, Llama3, Divisors };
struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::None;
  float factor = 1.0f;               // Llama3
  float low_freq_factor = 1.0f;      // Llama3
  float high_freq_factor = 4.0f;     // Llama3
  int original_max_position = 8192;  // Llama3: original_max_position_embeddings
  std::vector<float> divisors;       // Divisors: inv_freq[i] /= divisors[i], HS/2 of them
  bool operator==(const RopeScaling&) const = default;
};

// Routed compute (docs/subjective_depth.md): some blocks run on a chosen part of each sequence.
// Random: tokens drawn uniformly; Mod: a learned linear score (Mixture-of-Depths); Sdt: the
// surprise of the dense block before it against a small prior network; Stt: the surprise of the
// block's own dense (teacher) pass against a transition network fed the previous token.
enum class Routing { None, Random, Mod, Sdt, Stt };
const char* routing_name(Routing r);  // "none", "random", "mod", "sdt", "stt"
std::optional<Routing> routing_from_name(const std::string& name);
// How the teacher selects: the k = floor(gamma T) tokens of largest gate in each sequence (TopK: the
// choice needs the whole sequence), or every token whose gate reaches g_th (Threshold: causal, the
// count varies per sequence; SDT and STT, whose gate is in (0, 1)).
enum class RouteMode { TopK, Threshold };
const char* route_mode_name(RouteMode m);  // "topk", "threshold"
std::optional<RouteMode> route_mode_from_name(const std::string& name);

struct RoutingConfig {
  Routing kind = Routing::None;
  // gamma: a routed block computes k = max(1, floor(gamma T)) tokens of each sequence of T; 0
  // computes none (the block removed).
  float capacity = 0.5f;
  bool hard_gate = false;       // the selected tokens take the block's output whole (g = 1): an ablation
  int prior_div = 16;           // the prior / transition network's hidden width is max(1, dim / prior_div)
  int ma_window = 100;          // W: the moving average of the static change (min(W, T) in effect)
  float aux_weight = 0.05f;     // the prior's mean squared error to the (stopped) change it predicts
  float gate_penalty = 0.001f;  // STT: weight of the mean gate in the loss
  RouteMode mode = RouteMode::TopK;
  float g_th = 0.75f;            // Threshold mode: a token is computed when its gate is >= g_th
  float student_weight = 0.01f;  // the student router's cross-entropy against the teacher's choice
  // SDT and STT: the gate is computed from surprise statistics (a prior network, its parameters)
  bool surprise() const { return kind == Routing::Sdt || kind == Routing::Stt; }
  // MoD, SDT and STT carry a student router: a linear map of [x_t, x_(t-1)] to two logits (skip,
  // compute), trained against the teacher's choice, that decides causally and without the teacher.
  bool has_student() const { return kind == Routing::Mod || surprise(); }
  bool operator==(const RoutingConfig&) const = default;
};

struct ModelConfig {
  int vocab_size = 29;    // V: rows of the embedding; the tokenizer (kept beside) may use fewer
  int dim = 128;          // D (C)
  int n_layers = 4;       // L
  int n_heads = 4;        // NH
  int n_kv_heads = 4;     // NKV
  int head_dim = 32;      // HS (= dim / n_heads unless a checkpoint says otherwise)
  int ffn_hidden = 344;   // F
  int max_seq_len = 128;  // positions the model may see (prompt + generation)
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  bool tie_embeddings = false;
  int latent_bits = 0;        // H; 0 = plain decoder baseline
  int inject_after = 2;       // Z enters block inject_after+1 (1-based) = index inject_after (0-based)
  bool readout_bias = false;  // free.encoder_readout.bias present (other writers may add it)
  // Real checkpoints (Hugging Face config.json, GGUF metadata); the defaults are what ftx trains.
  std::string architecture = "llama";  // config.json model_type: "llama", "mistral" or "qwen2"
  RopeScaling rope_scaling;
  bool qkv_bias = false;  // q/k/v_proj.bias (Llama's attention_bias, Qwen2 always)
  bool o_bias = false;    // o_proj.bias (Llama's attention_bias)
  RoutingConfig routing;  // routed compute; kind None: every block dense

  bool is_free() const { return latent_bits > 0; }
  // Block `layer` runs on the selected tokens only: the odd blocks under routing, except the block
  // Z enters (Z must reach every token). Under SDT, block layer - 1 decides for it.
  bool routed(int layer) const {
    return routing.kind != Routing::None && layer % 2 == 1 && layer < n_layers && !(is_free() && layer == inject_after);
  }
  // Tokens a routed block computes in each sequence of T.
  int route_k(int T) const;
  // The hidden width of the SDT prior / STT transition network.
  int route_prior_hidden() const { return dim / routing.prior_div > 0 ? dim / routing.prior_div : 1; }
  int64_t num_codes() const { return int64_t{1} << latent_bits; }
  Status validate() const;
};

// inv_freq[i] for i < head_dim / 2: rope_theta^(-2i/head_dim) (computed in double), then the
// scaling (docs/design.md section 4). What every backend's RoPE rotates by.
std::vector<float> rope_inv_freq(const ModelConfig& c);

// The routed blocks of c, "1, 3" (docs/subjective_depth.md).
std::string routed_blocks_text(const ModelConfig& c);

// The presets by name, the one list (help texts, the Train form, errors): "tiny" (tests) and
// "small" (the synthetic task's default).
const std::vector<std::string>& model_preset_names();
Result<ModelConfig> model_preset(const std::string& name);

// The routing settings as the command line and the Train form give them (ftx train, ftx bench,
// ftx upcycle): the router by name, then its settings. routing_config() checks and converts them.
struct RouteOverrides {
  std::string routing = "none";
  RoutingConfig route;
  std::string route_mode = "topk";

  template <class Self, class V>  // Self: RouteOverrides or a struct deriving from it, maybe const
  static void for_each_field(Self& s, V&& v) {
    v(s.routing,
      Field{.key = "routing", .help = "Routed compute: none | random | mod | sdt | stt (docs/subjective_depth.md)"});
    v(s.route.capacity, Field{.key = "capacity",
                              .help = "With --routing: share of each sequence a routed block computes (gamma)",
                              .bounds = {0, 1, true, false}});
    v(s.route.hard_gate, Field{.key = "hard_gate",
                               .help = "With --routing: selected tokens take the block's output "
                                       "whole (gate 1), an ablation"});
    v(s.route.prior_div, Field{.key = "prior_div",
                               .help = "With --routing sdt|stt: prior network hidden width = dim / this",
                               .bounds = kPositive});
    v(s.route.ma_window, Field{.key = "ma_window",
                               .help = "With --routing sdt|stt: positions in the moving average of the change",
                               .bounds = kPositive});
    v(s.route.aux_weight, Field{.key = "aux_weight",
                                .help = "With --routing sdt|stt: weight of the prior's squared error in the loss",
                                .bounds = kNonNegative});
    v(s.route.gate_penalty, Field{.key = "gate_penalty",
                                  .help = "With --routing stt: weight of the mean gate in the loss",
                                  .bounds = kNonNegative});
    v(s.route_mode, Field{.key = "route_mode",
                          .help = "With --routing sdt|stt: topk (k = capacity x T per sequence) | threshold "
                                  "(every token whose gate reaches --g-th; causal)"});
    v(s.route.g_th, Field{.key = "g_th",
                          .help = "With --route-mode threshold: the gate a token needs to be computed",
                          .bounds = {0, 1, true, true}});
    v(s.route.student_weight,
      Field{.key = "student_weight",
            .help = "With --routing mod|sdt|stt: weight of the student router's loss against the teacher's choice",
            .bounds = kNonNegative});
  }
};
// The RoutingConfig of `o`. Errors name the fields through `name`: an unknown router, and routing
// settings without a router.
Result<RoutingConfig> routing_config(const RouteOverrides& o, FieldName name = field_key);

// The model shape a user asks for: a preset and overrides of its sizes. `ftx train`, `ftx bench`
// and the studio's Train form all fill one and call shape_model_config, so one request gives one
// model wherever it is made.
struct ShapeOverrides : RouteOverrides {
  std::string preset = "small";
  std::optional<int> layers, dim, heads, kv_heads, ffn;  // heads also sets kv_heads unless given
  int latent_bits = kDefaultLatentBits;

  template <class Self, class V>  // Self: ShapeOverrides, maybe const (core/util/fields.h)
  static void for_each_field(Self& s, V&& v) {
    v(s.preset, Field{.key = "preset", .help = "Model preset: " + preset_list(" | ")});
    v(s.layers, Field{.key = "layers", .help = "Override the preset's number of blocks", .bounds = kPositive});
    v(s.dim, Field{.key = "dim", .help = "Override the model width", .bounds = kPositive});
    v(s.heads, Field{.key = "heads", .help = "Override the number of query heads", .bounds = kPositive});
    v(s.kv_heads,
      Field{.key = "kv_heads", .help = "Override the number of key/value heads (GQA)", .bounds = kPositive});
    v(s.ffn, Field{.key = "ffn", .help = "Override the SwiGLU hidden width", .bounds = kPositive});
    v(s.latent_bits, Field{.key = "latent_bits",
                           .help = "H: latent bits per position (0 = plain decoder)",
                           .bounds = closed_range(0, kMaxLatentBits),
                           .note = "(H, latent bits per position)"});
    RouteOverrides::for_each_field(s, v);  // routed compute: --routing and its settings
  }
  static std::string preset_list(const char* separator);  // "tiny | small"
};

// The preset reshaped by the overrides: head_dim = dim / heads, Z injected after the middle
// block, `vocab_size` tokens and room for at least `seq_len` positions. Errors name the fields
// through `name` ("dim 30 is not a multiple of heads 4"); the command line passes its flags.
// The tokenizer is not part of the shape: the caller's data bring it.
Result<ModelConfig> shape_model_config(const ShapeOverrides& o, int vocab_size, int seq_len,
                                       FieldName name = field_key);

}  // namespace ftx
