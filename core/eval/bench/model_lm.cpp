#include "core/eval/bench/model_lm.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>

#include "core/sample/generator.h"
#include "core/sample/sampler.h"
#include "core/text/bpe_tokenizer.h"
#include "core/text/tokenizer_json.h"
#include "kernels/base/philox.h"

namespace ftx::bench {
namespace {

// FNV-1a: requests with the same context draw the same Z (the choices of one question are compared
// under common draws, and every checkpoint sees the same ones).
uint64_t text_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

TokenRoles token_roles(const Tokenizer& tokenizer) {
  TokenRoles r;
  const SpecialTokens sp = tokenizer.special_tokens();
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tokenizer);
  r.add_bos = bpe && bpe->add_bos() && sp.bos;
  const std::optional<int32_t> eot = end_of_text_id(tokenizer);
  r.prefix_id = r.add_bos ? *sp.bos : eot ? *eot : sp.eos ? *sp.eos : 0;
  if (sp.eos) r.eos_ids.push_back(*sp.eos);
  if (eot && (!sp.eos || *eot != *sp.eos)) r.eos_ids.push_back(*eot);
  return r;
}

ModelLm::ModelLm(Model& model, const Tokenizer& tokenizer, bool add_bos, int32_t prefix_id,
                 std::vector<int32_t> eos_ids, ModelLmOptions options)
    : model_(model),
      tok_(tokenizer),
      add_bos_(add_bos),
      prefix_id_(prefix_id),
      eos_ids_(std::move(eos_ids)),
      o_(options) {}

Result<ModelLm::Encoded> ModelLm::encode_request(const LoglikRequest& r) const {
  std::string context = r.context, continuation = r.continuation;
  const size_t kept = context.find_last_not_of(" \t\n\r");
  const size_t n_space = context.size() - (kept == std::string::npos ? 0 : kept + 1);
  if (n_space > 0 && n_space < context.size()) {
    continuation = context.substr(context.size() - n_space) + continuation;
    context.resize(context.size() - n_space);
  }
  Encoded e;
  const auto bos = tok_.special_tokens().bos;
  if (context.empty()) {
    e.tokens.push_back(add_bos_ && bos ? *bos : prefix_id_);
    auto cont = tok_.encode(continuation);
    if (!cont) return cont.error();
    e.continuation_start = 1;
    e.tokens.insert(e.tokens.end(), cont->begin(), cont->end());
  } else {
    auto whole = tok_.encode(context + continuation);
    if (!whole) return whole.error();
    auto ctx = tok_.encode(context);
    if (!ctx) return ctx.error();
    if (add_bos_ && bos) e.tokens.push_back(*bos);
    e.continuation_start = static_cast<int>(e.tokens.size() + std::min(ctx->size(), whole->size()));
    e.tokens.insert(e.tokens.end(), whole->begin(), whole->end());
  }
  if (e.continuation_start >= static_cast<int>(e.tokens.size()))
    return make_error("the continuation '" + r.continuation + "' has no tokens of its own");
  // Longer than the context: keep the last max_seq_len + 1 tokens (lm-evaluation-harness's rule).
  const int keep = model_.config().max_seq_len + 1;
  if (static_cast<int>(e.tokens.size()) > keep) {
    const int cut = static_cast<int>(e.tokens.size()) - keep;
    e.tokens.erase(e.tokens.begin(), e.tokens.begin() + cut);
    e.continuation_start = std::max(1, e.continuation_start - cut);
  }
  return e;
}

Result<std::vector<LoglikResult>> ModelLm::loglikelihood(const std::vector<LoglikRequest>& requests) {
  const ModelConfig& m = model_.config();
  std::vector<Encoded> enc;
  enc.reserve(requests.size());
  for (const LoglikRequest& r : requests) {
    auto e = encode_request(r);
    if (!e) return e.error();
    enc.push_back(std::move(*e));
  }
  // Longest first, so each batch pads little and the first batch is the largest allocation.
  std::vector<size_t> order(enc.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return enc[a].tokens.size() > enc[b].tokens.size(); });
  const int draws = m.is_free() ? std::max(1, o_.latent_draws) : 1;
  std::vector<LoglikResult> out(enc.size());
  std::vector<std::vector<double>> per_draw(enc.size(), std::vector<double>(draws));
  std::unique_ptr<ModelState> state;
  int state_b = 0, state_t = 0;
  for (size_t first = 0; first < order.size();) {
    const int T = static_cast<int>(enc[order[first]].tokens.size()) - 1;
    const int B =
        static_cast<int>(std::min<size_t>(order.size() - first, std::max(1, o_.max_batch_tokens / std::max(T, 1))));
    if (!state || state_b != B || state_t != T) {
      state.reset();
      state = model_.make_state(B, T);
      state_b = B, state_t = T;
    }
    std::vector<int32_t> inputs(size_t(B) * T, 0), targets(size_t(B) * T, 0);
    for (int b = 0; b < B; ++b) {
      const auto& t = enc[order[first + b]].tokens;
      for (size_t p = 0; p + 1 < t.size(); ++p) {
        inputs[size_t(b) * T + p] = t[p];
        targets[size_t(b) * T + p] = t[p + 1];
      }
    }
    std::vector<float> losses(size_t(B) * T);
    std::vector<uint32_t> codes;
    for (int k = 0; k < draws; ++k) {
      if (m.is_free()) {
        // Draw k of a request depends on its context only, not on the batch it lands in.
        codes.assign(size_t(B) * T, 0);
        for (int b = 0; b < B; ++b) {
          const uint64_t key = text_hash(requests[order[first + b]].context);
          const auto c = uniform_codes(derive_seed(o_.seed, key, k), T, m.latent_bits);
          std::copy(c.begin(), c.end(), codes.begin() + size_t(b) * T);
        }
      }
      model_.forward(*state, inputs.data(), targets.data(), m.is_free() ? codes.data() : nullptr, o_.seed, 0, 0.0f);
      model_.read_token_losses(*state, losses.data());
      for (int b = 0; b < B; ++b) {
        const Encoded& e = enc[order[first + b]];
        double lp = 0;
        for (size_t p = e.continuation_start - 1; p + 1 < e.tokens.size(); ++p) lp -= losses[size_t(b) * T + p];
        per_draw[order[first + b]][k] = lp;
      }
    }
    first += B;
  }
  for (size_t i = 0; i < enc.size(); ++i) {
    // log mean_k exp(lp_k), stably.
    const double mx = *std::max_element(per_draw[i].begin(), per_draw[i].end());
    double s = 0;
    for (double v : per_draw[i]) s += std::exp(v - mx);
    out[i].logprob = mx + std::log(s / draws);
    out[i].n_tokens = static_cast<int>(enc[i].tokens.size()) - enc[i].continuation_start;
  }
  return out;
}

Result<std::vector<std::string>> ModelLm::generate(const std::vector<GenRequest>& requests) {
  const ModelConfig& m = model_.config();
  const auto bos = tok_.special_tokens().bos;
  // Requests that share their sampling settings and stop strings are decoded together.
  using Key = std::tuple<int, float, float, std::vector<std::string>>;
  std::map<Key, std::vector<size_t>> groups;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenRequest& r = requests[i];
    groups[{r.max_new_tokens, r.temperature, r.top_p, r.stop}].push_back(i);
  }
  std::vector<std::string> out(requests.size());
  for (const auto& [key, members] : groups) {
    const auto& [max_new, temperature, top_p, stops] = key;
    SampleConfig sc;
    sc.temperature = temperature;
    sc.top_p = top_p;
    sc.max_new_tokens = std::min(max_new, m.max_seq_len - 1);
    const StopRule rule{eos_ids_, stops};
    for (size_t first = 0; first < members.size(); first += std::max(1, o_.gen_batch)) {
      const size_t last = std::min(members.size(), first + std::max(1, o_.gen_batch));
      std::vector<GenerationRequest> batch;
      for (size_t j = first; j < last; ++j) {
        const GenRequest& r = requests[members[j]];
        auto ids = tok_.encode(r.prompt);
        if (!ids) return ids.error();
        std::vector<int32_t> prompt;
        if (add_bos_ && bos) prompt.push_back(*bos);
        prompt.insert(prompt.end(), ids->begin(), ids->end());
        if (prompt.empty()) prompt.push_back(prefix_id_);
        // Too long: keep the prompt's end, room left for the generation.
        const int room = m.max_seq_len - sc.max_new_tokens;
        if (static_cast<int>(prompt.size()) > room) prompt.erase(prompt.begin(), prompt.end() - room);
        batch.push_back({std::move(prompt), SequenceSpec{LatentPolicy::uniform(derive_seed(r.seed, 1, 0)), r.seed}});
      }
      auto gens = generate_text(model_, &tok_, batch, sc, rule);
      if (!gens) return gens.error();
      for (size_t j = first; j < last; ++j) out[members[j]] = (*gens)[j - first].text;
    }
  }
  return out;
}

}  // namespace ftx::bench
