// ModelConfig: the shape of a Free Transformer (or of the plain decoder when latent_bits == 0).
// Plain struct, validated once (STYLE.md section 6); written into every checkpoint's config.json
// (core/io/config_json.h) and every run row of the store.
#pragma once
#include <cstdint>
#include <string>

#include "core/util/result.h"

namespace ftx {

inline constexpr int kMaxLatentBits = 20;

struct ModelConfig {
  int vocab_size = 29;     // V: rows of the embedding; the tokenizer (kept beside) may use fewer
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
  int latent_bits = 0;     // H; 0 = plain decoder baseline
  int inject_after = 2;    // Z enters block inject_after+1 (1-based) = index inject_after (0-based)
  bool readout_bias = false;  // free.encoder_readout.bias present (other writers may add it)

  bool is_free() const { return latent_bits > 0; }
  int64_t num_codes() const { return int64_t{1} << latent_bits; }
  Status validate() const;
};

// Presets of issue 2: tiny (tests) and small (the synthetic task's default).
Result<ModelConfig> model_preset(const std::string& name);

}  // namespace ftx
