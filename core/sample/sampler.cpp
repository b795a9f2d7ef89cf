#include "core/sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/base/philox.h"

namespace ftx {

const char* latent_kind_name(LatentKind k) {
  switch (k) {
    case LatentKind::FromEncoder:
      return "from_encoder";
    case LatentKind::Uniform:
      return "uniform";
    case LatentKind::Fixed:
      return "fixed";
    case LatentKind::Edited:
      return "edited";
  }
  return "?";
}

std::vector<uint32_t> uniform_codes(uint64_t seed, int n, int latent_bits) {
  std::vector<uint32_t> codes(n);
  const uint32_t mask = latent_bits >= 32 ? ~0u : (1u << latent_bits) - 1u;
  for (int t = 0; t < n; ++t) codes[t] = philox_block(seed, kStreamPrior, t).v[0] & mask;
  return codes;
}

Status SampleConfig::validate(FieldName name) const {
  FTX_TRY(check_fields(*this, name));
  if (router != "student" && router != "teacher")
    return make_error(name(find_field<SampleConfig>("router")) + " '" + router +
                      "': unknown (expected student or teacher)");
  return {};
}

Status check_generation_request(const ModelConfig& m, int prompt_len, const SampleConfig& cfg,
                                const std::vector<SequenceSpec>& specs) {
  FTX_TRY(cfg.validate());
  if (cfg.router == "teacher" && m.routing.kind == Routing::None)
    return make_error("router teacher: the model is not routed (it has no teacher to choose)");
  if (prompt_len <= 0) return make_error("prompt: empty (the model needs at least one token to start from)");
  const int total = prompt_len + cfg.max_new_tokens;
  if (total > m.max_seq_len)
    return make_error("prompt: " + std::to_string(prompt_len) + " tokens + " + std::to_string(cfg.max_new_tokens) +
                      " new tokens exceed the context of " + std::to_string(m.max_seq_len) + " positions");
  for (const auto& s : specs) {
    const auto& lp = s.latent;
    if (lp.kind != LatentKind::Fixed && lp.kind != LatentKind::Edited) continue;
    if (static_cast<int>(lp.codes.size()) < total - 1)
      return make_error("latent codes: " + std::to_string(lp.codes.size()) + " given, " + std::to_string(total - 1) +
                        " needed (one per input position)");
    for (uint32_t c : lp.codes)
      if (m.latent_bits < 32 && c >= (1u << m.latent_bits))
        return make_error("latent codes: code " + std::to_string(c) + " outside 0.." +
                          std::to_string((1u << m.latent_bits) - 1));
    for (auto [pos, bit] : lp.flips)
      if (pos < 0 || pos >= total - 1 || bit < 0 || bit >= m.latent_bits)
        return make_error("latent flip (" + std::to_string(pos) + ", " + std::to_string(bit) + ") out of range");
  }
  return {};
}

int32_t sample_token(const float* logits, int V, float temperature, int top_k, float top_p, float u) {
  if (temperature <= 0) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  const float max_logit = *std::max_element(logits, logits + V);
  auto weight = [&](int i) { return std::exp(double(logits[i] - max_logit) / temperature); };
  const int k = (top_k > 0 && top_k < V) ? top_k : V;
  if (k == V && top_p >= 1.0f) {  // the whole distribution: walk the ids in order, no ranking needed
    thread_local std::vector<double> w;
    w.resize(size_t(V));
    double total = 0;
    for (int i = 0; i < V; ++i) total += w[size_t(i)] = weight(i);
    double acc = 0;
    const double target = double(u) * total;
    for (int i = 0; i < V; ++i)
      if (target < (acc += w[size_t(i)])) return i;
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  }
  // The m best ids ranked (higher logit first, then lower id), m growing until the top-k / top-p
  // set is inside: selection is linear in V, only the m candidates are sorted.
  auto better = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  double total = 0;
  if (top_p < 1.0f)
    for (int i = 0; i < V; ++i) total += weight(i);
  std::vector<int> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  int m = std::min(k, 64), keep = 0;
  for (;;) {
    std::nth_element(ids.begin(), ids.begin() + (m - 1), ids.end(), better);
    std::sort(ids.begin(), ids.begin() + m, better);
    keep = m;
    if (top_p < 1.0f) {  // the fewest candidates whose probability reaches top_p
      double mass = 0;
      for (keep = 0; keep < m && mass < double(top_p) * total;) mass += weight(ids[size_t(keep++)]);
      if (mass < double(top_p) * total && m < k) {
        m = std::min(k, m * 4);
        continue;
      }
    }
    if (keep == m && m < k && top_p >= 1.0f) {
      m = k;  // top-k alone: rank exactly k
      continue;
    }
    break;
  }
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += weight(ids[size_t(i)]);
  double acc = 0;
  const double target = double(u) * kept;
  for (int i = 0; i < keep; ++i)
    if (target < (acc += weight(ids[size_t(i)]))) return ids[size_t(i)];
  return ids[0];
}

// Codes of every input position [0, n) for one sequence; FromEncoder fills the prompt part later.
std::vector<uint32_t> policy_codes(const LatentPolicy& lp, int n, int H) {
  switch (lp.kind) {
    case LatentKind::FromEncoder:
    case LatentKind::Uniform:
      return uniform_codes(lp.seed, n, H);
    case LatentKind::Fixed:
      return {lp.codes.begin(), lp.codes.begin() + n};
    case LatentKind::Edited: {
      std::vector<uint32_t> c(lp.codes.begin(), lp.codes.begin() + n);
      for (auto [pos, bit] : lp.flips) c[pos] ^= 1u << bit;
      return c;
    }
  }
  return {};
}

std::vector<uint32_t> encoder_prompt_codes(Model& model, const std::vector<int32_t>& prompt, uint64_t seed) {
  const int Tp = static_cast<int>(prompt.size());
  auto state = model.make_state(1, Tp);
  StepStats unused = model.forward(*state, prompt.data(), nullptr, nullptr, seed, kStreamEval, 0.0f);
  (void)unused;
  std::vector<uint32_t> c(Tp);
  model.read_codes(*state, c.data());
  return c;
}

namespace {

// Prompt prefill under FromEncoder: the encoder reads the prompt (non-causally) and its binary
// mapper samples the prompt's codes, as in training.
void encoder_prompt_codes(Model& model, const std::vector<int32_t>& prompt, const std::vector<SequenceSpec>& specs,
                          std::vector<std::vector<uint32_t>>& codes) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].latent.kind != LatentKind::FromEncoder) continue;
    const std::vector<uint32_t> c = encoder_prompt_codes(model, prompt, specs[i].latent.seed);
    const size_t n = std::min(c.size(), codes[i].size());  // every prompt position is an input
    std::copy(c.begin(), c.begin() + n, codes[i].begin());
  }
}

}  // namespace

std::vector<Generation> generate(Model& model, const std::vector<int32_t>& prompt,
                                 const std::vector<SequenceSpec>& specs, const SampleConfig& cfg) {
  const ModelConfig& m = model.config();
  const int B = static_cast<int>(specs.size()), V = m.vocab_size, H = m.latent_bits;
  const int Tp = static_cast<int>(prompt.size()), total = Tp + cfg.max_new_tokens, n_in = total - 1;
  FT_ASSERT(check_generation_request(m, Tp, cfg, specs).ok(), "unchecked generation request");
  std::vector<Generation> out(B);
  std::vector<std::vector<uint32_t>> codes(B);
  for (int i = 0; i < B; ++i) {
    out[i].tokens = prompt;
    out[i].sample_seed = specs[i].sample_seed;
    if (m.is_free()) codes[i] = policy_codes(specs[i].latent, n_in, H);
  }
  if (m.is_free()) encoder_prompt_codes(model, prompt, specs, codes);

  auto dec = model.make_decode_state(B, n_in, cfg.router == "teacher");
  std::vector<int32_t> tok(B);
  std::vector<uint32_t> zc(B, 0);
  std::vector<float> logits(size_t(B) * V);
  for (int pos = 0; pos < n_in; ++pos) {
    for (int i = 0; i < B; ++i) {
      tok[i] = out[i].tokens[pos];
      if (m.is_free()) zc[i] = codes[i][pos];
    }
    model.decode_step(*dec, tok.data(), zc.data(), pos, logits.data());
    if (pos + 1 < Tp) continue;  // still inside the prompt: its next token is given
    for (int i = 0; i < B; ++i) {
      const float u = philox_uniform(specs[i].sample_seed, kStreamSample, pos);
      out[i].tokens.push_back(sample_token(logits.data() + size_t(i) * V, V, cfg.temperature, cfg.top_k, cfg.top_p, u));
    }
  }
  for (int i = 0; i < B; ++i) out[i].codes = std::move(codes[i]);
  return out;
}

}  // namespace ftx
