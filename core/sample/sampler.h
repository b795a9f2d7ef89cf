// Generation with a KV cache under a latent policy (docs/design.md section 7). A latent is one code
// z[t] in [0, 2^H) per input position; once drawn it is kept. Same seeds, same output, always:
// every draw is Philox addressed by (seed, stream, position).
//
// Deliberately not here: the Figure 4 grouping and metrics (core/eval), printing (app/).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/model/model.h"
#include "core/util/fields.h"
#include "kernels/base/result.h"

namespace ftx {

enum class LatentKind { FromEncoder, Uniform, Fixed, Edited };

struct LatentPolicy {
  LatentKind kind = LatentKind::Uniform;
  uint64_t seed = 0;                       // Uniform / FromEncoder: codes past the prompt
  std::vector<uint32_t> codes;             // Fixed / Edited: one per input position
  std::vector<std::pair<int, int>> flips;  // Edited: (position, bit) pairs to flip

  static LatentPolicy from_encoder(uint64_t seed) { return {LatentKind::FromEncoder, seed, {}, {}}; }
  static LatentPolicy uniform(uint64_t seed) { return {LatentKind::Uniform, seed, {}, {}}; }
  static LatentPolicy fixed(std::vector<uint32_t> c) { return {LatentKind::Fixed, 0, std::move(c), {}}; }
  static LatentPolicy edited(std::vector<uint32_t> c, std::vector<std::pair<int, int>> f) {
    return {LatentKind::Edited, 0, std::move(c), std::move(f)};
  }
};

const char* latent_kind_name(LatentKind k);

// Codes drawn from the uniform prior for positions [0, n) under seed.
std::vector<uint32_t> uniform_codes(uint64_t seed, int n, int latent_bits);

struct SampleConfig {
  float temperature = 1.0f;  // 0 = greedy
  int top_k = 0;             // 0 = all tokens
  float top_p = 1.0f;        // nucleus: the fewest most likely tokens holding this mass (1 = all)
  int max_new_tokens = 64;
  // Routed models (docs/subjective_depth.md): who chooses the tokens a routed block computes.
  std::string router = "student";

  // Fields with help text are options of `ftx generate` (core/util/fields.h).
  template <class Self, class V>
  static void for_each_field(Self& s, V&& v) {
    v(s.temperature, Field{.key = "temperature", .help = "Sampling temperature (0 = greedy)", .bounds = kNonNegative});
    v(s.top_k,
      Field{.key = "top_k", .help = "Sample among the k most likely tokens (0 = all)", .bounds = kNonNegative});
    v(s.top_p, Field{.key = "top_p",
                     .help = "Sample among the fewest most likely tokens whose probability reaches p (1 = all)",
                     .bounds = Bounds{0, 1, true, false}});
    v(s.max_new_tokens,
      Field{.key = "max_new_tokens",
            .help = "Tokens to generate per sequence (model files; a synthetic run fills its sequence length)",
            .bounds = kPositive});
    v(s.router, Field{.key = "router",
                      .help = "Routed models: student (the causal student router, routed KV caches) | teacher "
                              "(the training choice over the sequence so far, recomputed at every step)"});
  }
  Status validate(FieldName name = field_key) const;
};

struct SequenceSpec {
  LatentPolicy latent;
  uint64_t sample_seed = 0;  // token sampling
};

struct Generation {
  std::vector<int32_t> tokens;  // prompt + generated
  std::vector<uint32_t> codes;  // one per input position (tokens.size() - 1); empty for the baseline
  uint64_t sample_seed = 0;
};

// Generates one sequence per spec, all from the same prompt, batched through one KV cache.
// The prompt must be non-empty and prompt + max_new_tokens must fit the model's max_seq_len
// (checked by the caller: see check_prompt).
std::vector<Generation> generate(Model& model, const std::vector<int32_t>& prompt,
                                 const std::vector<SequenceSpec>& specs, const SampleConfig& cfg);

// One-line errors for requests a user typed: an empty prompt, one too long for the context, or
// wrong codes.
Status check_generation_request(const ModelConfig& m, int prompt_len, const SampleConfig& cfg,
                                const std::vector<SequenceSpec>& specs);

// Z for input positions [0, n) of one sequence under a policy (FromEncoder: uniform codes, the
// prompt's part to be replaced by encoder_prompt_codes).
std::vector<uint32_t> policy_codes(const LatentPolicy& lp, int n, int latent_bits);
// The codes the encoder samples for a prompt (read non-causally, as in training) under `seed`.
std::vector<uint32_t> encoder_prompt_codes(Model& model, const std::vector<int32_t>& prompt, uint64_t seed);

// Samples a token from logits (V) with temperature, top-k and top-p using uniform u in [0, 1):
// the candidates are found by selection (nth_element on growing prefixes), never by sorting the
// vocabulary; ties rank the lower id first. temperature 0 is argmax.
int32_t sample_token(const float* logits, int V, float temperature, int top_k, float top_p, float u);

}  // namespace ftx
