// What the studio's Generations and Latent views compute for a model file (core/io/model_file.h:
// a Hugging Face checkpoint directory, a GGUF file, or a random-weight Free Transformer) on real
// text: the prompt as the model wants it (the two known chat formats, BOS), the plan of one batch
// of groups (an independent-Z group, each sequence its own Z, beside fixed-Z groups, one Z shared
// by a group's sequences), and the encoder's bit probabilities and KL per token of a text.
// Deterministic: the same request (seeds included) gives the same result.
//
// Deliberately not here: threads and streaming (the studio runs generate_text on its worker),
// a chat template engine (only ChatML and Llama 3 are recognised, anything else is used as typed),
// the synthetic-task explorer of trained runs (core/explore/explorer.h), drawing.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/explore/explorer.h"
#include "core/model/model.h"
#include "core/sample/generator.h"
#include "core/text/tokenizer.h"
#include "kernels/base/result.h"

namespace ftx {

// ---- prompts ----
enum class ChatFormat { None, ChatML, Llama3 };
// Llama 3 when the template contains <|start_header_id|>, ChatML when it contains <|im_start|>,
// else None (also for an empty template).
ChatFormat chat_format(const std::string& chat_template);
const char* chat_format_name(ChatFormat f);  // "none", "ChatML", "Llama 3"
// One user turn and the assistant's header: ChatML
// "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n", Llama 3
// "<|start_header_id|>user<|end_header_id|>\n\n{prompt}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
// (BOS is the caller's, see prompt_tokens); None: the prompt unchanged.
std::string apply_chat(ChatFormat f, const std::string& prompt);
// The text's tokens, the tokenizer's BOS first when `add_bos` (and the text does not already
// begin with it). Errors: "prompt: empty", or the tokenizer's reason prefixed with "prompt: ".
Result<std::vector<int32_t>> prompt_tokens(const Tokenizer& tokenizer, bool add_bos, const std::string& text);

// ---- generations: groups side by side ----
struct TextGroupsRequest {
  int group_size = 4;        // sequences per group
  int fixed_groups = 2;      // fixed-Z groups beside the independent one (none for a plain decoder)
  uint64_t latent_seed = 1;  // every Z derives from it: same latent seed, same codes
  uint64_t sample_seed = 1;  // every token draw derives from it
  SampleConfig sample;
};
struct TextGroup {
  int group = 0;       // 0: independent Z (or the plain decoder's only group); k >= 1: fixed Z #k
  bool fixed = false;  // one Z shared by the group's sequences
  int first = 0;       // its sequences are requests [first, first + size) of the plan
  int size = 0;
};
struct TextGroupPlan {
  bool has_latent = false;  // false: a plain decoder, one group differing only by token sampling
  std::vector<TextGroup> groups;
  std::vector<GenerationRequest> requests;  // one batch, group by group
  std::vector<uint64_t> latent_seeds;       // per request: its Z's seed (a fixed group's seed for its rows)
};
// The batch for `prompt` (token ids, BOS included): for a Free Transformer, group 0 with
// LatentPolicy::uniform(seed_i) per sequence and fixed groups with
// LatentPolicy::fixed(uniform_codes(seed_g, n_in, H)), n_in = prompt + max_new_tokens - 1 input
// positions; for a plain decoder one group of group_size. Token seeds differ per sequence and
// depend only on sample_seed and the sequence's place, so keeping latent_seed and changing
// sample_seed keeps every Z (Freeze Z) and the reverse keeps every token draw (Resample Z).
// Errors: sizes out of range (1..16 per group, 0..8 fixed groups), and check_text_requests'.
Result<TextGroupPlan> plan_text_groups(const ModelConfig& cfg, const std::vector<int32_t>& prompt,
                                       const TextGroupsRequest& req);

// ---- latent ----
// The encoder over `tokens` (n >= 2: T = n - 1 input positions, at most the context): bit
// probabilities, KL per position and the codes the binary mapper samples with `seed`, as one
// forward of B = 1. The inspection's `tokens` are each token's bytes (n of them), `text` their
// concatenation, kappa_nats 0 (a model file carries no free-bits setting). With 0 < prompt_len < n
// it also holds the regeneration of the text from its first prompt_len tokens under these codes
// (regenerate_text_latent without flips; `regenerated` and `regenerated_tokens`); with
// prompt_len 0 it has none. Errors: a plain decoder ("has no latent Z"), too few or too many tokens.
Result<LatentInspection> inspect_text_latent(Model& model, const Tokenizer& tokenizer,
                                             const std::vector<int32_t>& tokens, uint64_t seed, int prompt_len = 0,
                                             const SampleConfig& sample = {});
// The text's first prompt_len tokens continued to its length (n tokens in all) under the
// inspection's codes with (position, bit) `flips` (LatentPolicy::edited), token draws from
// li.sample_seed: what the Latent panel shows as "original" (no flips) and "edited". The ids,
// prompt included; no end-of-generation stop, so that the rows line up with the text's.
Result<std::vector<int32_t>> regenerate_text_latent(Model& model, const std::vector<int32_t>& tokens, int prompt_len,
                                                    const LatentInspection& li,
                                                    const std::vector<std::pair<int, int>>& flips,
                                                    const SampleConfig& sample);

}  // namespace ftx
