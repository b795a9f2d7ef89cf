#include "core/explore/text_explorer.h"

#include "core/eval/evaluator.h"
#include "core/sample/sampler.h"
#include "kernels/base/philox.h"

namespace ftx {
namespace {

// Seed lane of derive_seed for inspections (the explorer uses 40..41, the evaluator's groups
// 10..21, which the text groups share through figure4_specs).
enum : uint64_t { kLaneInspect = 63 };

constexpr int kMaxGroupSize = 16, kMaxFixedGroups = 8;

}  // namespace

ChatFormat chat_format(const std::string& chat_template) {
  if (chat_template.find("<|start_header_id|>") != std::string::npos) return ChatFormat::Llama3;
  if (chat_template.find("<|im_start|>") != std::string::npos) return ChatFormat::ChatML;
  return ChatFormat::None;
}

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::ChatML:
      return "ChatML";
    case ChatFormat::Llama3:
      return "Llama 3";
    case ChatFormat::None:
      break;
  }
  return "none";
}

std::string apply_chat(ChatFormat f, const std::string& prompt) {
  switch (f) {
    case ChatFormat::ChatML:
      return "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n";
    case ChatFormat::Llama3:
      return "<|start_header_id|>user<|end_header_id|>\n\n" + prompt +
             "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatFormat::None:
      break;
  }
  return prompt;
}

Result<std::vector<int32_t>> prompt_tokens(const Tokenizer& tokenizer, bool add_bos, const std::string& text) {
  if (text.empty()) return make_error("prompt: empty");
  auto ids = tokenizer.encode(text);
  if (!ids) return make_error("prompt: " + ids.error().message);
  const std::optional<int32_t> bos = tokenizer.special_tokens().bos;
  if (add_bos && bos && (ids->empty() || ids->front() != *bos)) ids->insert(ids->begin(), *bos);
  if (ids->empty()) return make_error("prompt: no tokens (the tokenizer drops every byte of it)");
  return ids;
}

Result<TextGroupPlan> plan_text_groups(const ModelConfig& cfg, const std::vector<int32_t>& prompt,
                                       const TextGroupsRequest& req) {
  if (req.group_size < 1 || req.group_size > kMaxGroupSize)
    return make_error("group size " + std::to_string(req.group_size) + ": expected 1.." +
                      std::to_string(kMaxGroupSize));
  if (req.fixed_groups < 0 || req.fixed_groups > kMaxFixedGroups)
    return make_error("fixed groups " + std::to_string(req.fixed_groups) + ": expected 0.." +
                      std::to_string(kMaxFixedGroups));
  TextGroupPlan plan;
  plan.has_latent = cfg.is_free();
  const int fixed = plan.has_latent ? req.fixed_groups : 0;
  const int n_in = static_cast<int>(prompt.size()) + req.sample.max_new_tokens - 1;
  const std::vector<SequenceSpec> specs =
      figure4_specs(req.group_size, fixed, req.group_size, req.latent_seed, req.sample_seed, std::max(n_in, 1),
                    cfg.latent_bits, &plan.latent_seeds);
  for (int g = 0; g <= fixed; ++g) plan.groups.push_back({g, g > 0, g * req.group_size, req.group_size});
  for (const SequenceSpec& s : specs) plan.requests.push_back({prompt, s});
  FTX_TRY(check_text_requests(cfg, plan.requests, req.sample));
  return plan;
}

Result<LatentInspection> inspect_text_latent(Model& model, const Tokenizer& tokenizer,
                                             const std::vector<int32_t>& tokens, uint64_t seed, int prompt_len,
                                             const SampleConfig& sample) {
  const ModelConfig& cfg = model.config();
  if (!cfg.is_free()) return make_error("this model has no latent Z (plain decoder)");
  const int n = static_cast<int>(tokens.size());
  if (n < 2) return make_error("the text must have at least 2 tokens, got " + std::to_string(n));
  if (n - 1 > cfg.max_seq_len)
    return make_error("the text has " + std::to_string(n) + " tokens; the model's context is " +
                      std::to_string(cfg.max_seq_len) + " positions");
  LatentInspection li;
  li.T = n - 1, li.H = cfg.latent_bits;
  li.text = tokenizer.decode(tokens);
  for (int32_t id : tokens) li.tokens.emplace_back(tokenizer.token_bytes(id));
  auto state = model.make_state(1, li.T);
  (void)model.forward(*state, tokens.data(), nullptr, nullptr, derive_seed(seed, kLaneInspect, 0), kStreamEval, 0.0f);
  li.bit_probs.resize(size_t(li.T) * li.H), li.kl.resize(li.T), li.codes.resize(li.T);
  model.read_bit_probs(*state, li.bit_probs.data());
  model.read_kl(*state, li.kl.data());
  model.read_codes(*state, li.codes.data());
  li.sample_seed = derive_seed(seed, kLaneInspect, 1);
  if (prompt_len <= 0) return li;
  auto regen = regenerate_text_latent(model, tokens, prompt_len, li, {}, sample);
  if (!regen) return regen.error();
  li.regenerated = tokenizer.decode(*regen);
  for (int32_t id : *regen) li.regenerated_tokens.emplace_back(tokenizer.token_bytes(id));
  return li;
}

Result<std::vector<int32_t>> regenerate_text_latent(Model& model, const std::vector<int32_t>& tokens, int prompt_len,
                                                    const LatentInspection& li,
                                                    const std::vector<std::pair<int, int>>& flips,
                                                    const SampleConfig& sample) {
  const int n = static_cast<int>(tokens.size());
  if (prompt_len < 1 || prompt_len >= n)
    return make_error("the prompt must have 1.." + std::to_string(n - 1) + " of the text's " + std::to_string(n) +
                      " tokens, got " + std::to_string(prompt_len));
  if (static_cast<int>(li.codes.size()) != n - 1) return make_error("the inspection is not of this text");
  SampleConfig sc = sample;
  sc.max_new_tokens = n - prompt_len;  // prompt + new tokens = the text's n: the codes cover every input
  const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + prompt_len);
  const std::vector<GenerationRequest> req{{prompt, {LatentPolicy::edited(li.codes, flips), li.sample_seed}}};
  auto gens = generate_text(model, nullptr, req, sc, {});
  if (!gens) return gens.error();
  return std::move((*gens)[0].tokens);
}

}  // namespace ftx
