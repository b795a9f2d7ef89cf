#include "core/sample/generator.h"

#include <algorithm>
#include <memory>

#include "kernels/base/philox.h"

namespace ftx {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Length:
      return "length";
    case FinishReason::Eos:
      return "eos";
    case FinishReason::StopString:
      return "stop";
    case FinishReason::Cancelled:
      return "cancelled";
  }
  return "?";
}

Status check_text_requests(const ModelConfig& m, const std::vector<GenerationRequest>& requests,
                           const SampleConfig& cfg) {
  if (requests.empty()) return make_error("no prompts to generate from");
  for (size_t i = 0; i < requests.size(); ++i) {
    const Status st = check_generation_request(m, int(requests[i].prompt.size()), cfg, {requests[i].spec});
    if (!st.ok()) {
      const std::string msg = st.error().message;
      // "prompt: ..." becomes "prompt 2: ..." when there are several.
      if (requests.size() > 1 && msg.starts_with("prompt:"))
        return make_error("prompt " + std::to_string(i + 1) + msg.substr(6));
      return st;
    }
  }
  return {};
}

namespace {

// The text of one sequence as tokens arrive: UTF-8 completed by StreamDecoder, then held back while
// its tail could still be the start of a stop string.
class TextStream {
 public:
  TextStream(const Tokenizer& t, const std::vector<std::string>& stops) : decoder_(t), stops_(stops) {}

  // The text that became final with this token; sets *stopped when a stop string completed.
  std::string feed(int32_t token, bool* stopped) { return take(decoder_.feed(token), stopped); }
  std::string finish() {
    bool stopped = false;
    std::string out = take(decoder_.finish(), &stopped);
    if (!stopped) out += text_.substr(emitted_), emitted_ = text_.size();
    return out;
  }
  const std::string& text() const { return text_; }

 private:
  std::string take(const std::string& piece, bool* stopped) {
    text_ += piece;
    for (const std::string& s : stops_) {
      if (s.empty()) continue;
      const size_t from = emitted_;
      const size_t at = text_.find(s, from);
      if (at != std::string::npos) {
        text_.resize(at);
        *stopped = true;
        return emit(at);
      }
    }
    // Hold back the longest tail that is a proper prefix of a stop string.
    size_t hold = 0;
    for (const std::string& s : stops_)
      for (size_t n = std::min(s.size() - (s.empty() ? 0 : 1), text_.size() - emitted_); n > hold; --n)
        if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
          hold = n;
          break;
        }
    return emit(text_.size() - hold);
  }
  std::string emit(size_t upto) {
    std::string out = text_.substr(emitted_, upto - emitted_);
    emitted_ = upto;
    return out;
  }

  StreamDecoder decoder_;
  const std::vector<std::string>& stops_;
  std::string text_;
  size_t emitted_ = 0;
};

}  // namespace

Result<std::vector<TextGeneration>> generate_text(Model& model, const Tokenizer* tokenizer,
                                                  const std::vector<GenerationRequest>& requests,
                                                  const SampleConfig& cfg, const StopRule& stop,
                                                  const TokenSink& on_token) {
  FTX_TRY(check_text_requests(model.config(), requests, cfg));
  const ModelConfig& m = model.config();
  const int B = int(requests.size()), V = m.vocab_size, H = m.latent_bits;
  int max_len = 0;
  std::vector<TextGeneration> out(static_cast<size_t>(B));
  std::vector<std::unique_ptr<TextStream>> text(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) {
    const GenerationRequest& r = requests[size_t(b)];
    const int n_in = int(r.prompt.size()) + cfg.max_new_tokens - 1;  // the last token is never an input
    max_len = std::max(max_len, n_in);
    TextGeneration& g = out[size_t(b)];
    g.tokens = r.prompt;
    g.prompt_len = int(r.prompt.size());
    if (m.is_free()) {
      g.codes = policy_codes(r.spec.latent, n_in, H);
      if (r.spec.latent.kind == LatentKind::FromEncoder) {
        const std::vector<uint32_t> c = encoder_prompt_codes(model, r.prompt, r.spec.latent.seed);
        std::copy(c.begin(), c.end(), g.codes.begin());
      }
    }
    if (tokenizer) text[size_t(b)] = std::make_unique<TextStream>(*tokenizer, stop.stop_strings);
  }
  auto state = model.try_make_decode_state(B, std::max(max_len, 1), cfg.router == "teacher");
  if (!state) return state.error();
  DecodeState& d = **state;

  std::vector<float> logits(size_t(B) * V);
  std::vector<char> active(static_cast<size_t>(B), 1);
  bool cancelled = false;
  // Draws the token after input position pos of sequence b from its logits row, then stops it
  // when that token or its text says so.
  auto take_token = [&](int b, const float* row, int pos) {
    TextGeneration& g = out[size_t(b)];
    const float u = philox_uniform(requests[size_t(b)].spec.sample_seed, kStreamSample, uint64_t(pos));
    const int32_t t = sample_token(row, V, cfg.temperature, cfg.top_k, cfg.top_p, u);
    g.tokens.push_back(t);
    std::string piece;
    const bool eos = std::find(stop.eos_ids.begin(), stop.eos_ids.end(), t) != stop.eos_ids.end();
    bool stopped = false;
    if (text[size_t(b)] && !eos) piece = text[size_t(b)]->feed(t, &stopped);
    if (eos) g.finish = FinishReason::Eos;
    if (stopped) g.finish = FinishReason::StopString;
    const int generated = int(g.tokens.size()) - g.prompt_len;
    if (eos || stopped || generated >= cfg.max_new_tokens) {
      active[size_t(b)] = 0;
      if (text[size_t(b)] && !stopped) piece += text[size_t(b)]->finish();
    }
    if (on_token && !on_token(b, t, piece)) cancelled = true;
  };

  for (int b = 0; b < B && !cancelled; ++b) {
    const TextGeneration& g = out[size_t(b)];
    model.prefill(d, b, g.tokens.data(), g.codes.empty() ? nullptr : g.codes.data(), g.prompt_len, 0,
                  Model::PrefillLogits::Last, logits.data());
    take_token(b, logits.data(), g.prompt_len - 1);
  }
  std::vector<int32_t> tok(static_cast<size_t>(B));
  std::vector<uint32_t> z(static_cast<size_t>(B), 0);
  std::vector<int> pos(static_cast<size_t>(B));
  while (!cancelled && std::find(active.begin(), active.end(), 1) != active.end()) {
    for (int b = 0; b < B; ++b) {
      const TextGeneration& g = out[size_t(b)];
      // A stopped sequence repeats its last step (same token, same position) until the batch ends.
      const int n = int(g.tokens.size()) - (active[size_t(b)] ? 1 : 2);
      tok[size_t(b)] = g.tokens[size_t(n)];
      pos[size_t(b)] = n;
      if (!g.codes.empty()) z[size_t(b)] = g.codes[size_t(n)];
    }
    model.decode_step(d, tok.data(), z.data(), pos.data(), logits.data());
    for (int b = 0; b < B && !cancelled; ++b)
      if (active[size_t(b)]) take_token(b, logits.data() + size_t(b) * V, pos[size_t(b)]);
  }
  for (int b = 0; b < B; ++b) {
    TextGeneration& g = out[size_t(b)];
    if (cancelled && active[size_t(b)]) g.finish = FinishReason::Cancelled;
    if (text[size_t(b)]) g.text = text[size_t(b)]->text();
  }
  return out;
}

}  // namespace ftx
