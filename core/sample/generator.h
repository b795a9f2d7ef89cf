// Text generation for models with a real tokenizer (docs/design.md section 7): several sequences,
// each with its own prompt, latent policy and seeds, decoded together in one batch (one
// DecodeState; prompts of different lengths are prefilled one by one through GEMMs, then every
// step decodes all sequences at their own positions). Sampling as sample_token (temperature,
// top-k, top-p, no sort of the vocabulary). A sequence stops at an end-of-generation id, at a
// stop string, or after max_new_tokens; the batch runs until all have stopped or on_token asks to
// cancel. Same seeds, same output: token draws are Philox addressed by (sample_seed, position).
//
// Deliberately not here: the synthetic task's single-prompt generator (core/sample/sampler.h,
// whose outputs the Figure 4 metrics were measured with), chat templates (app/), printing.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/sample/sampler.h"
#include "core/text/tokenizer.h"
#include "kernels/base/result.h"

namespace ftx {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included when the model wants one
  SequenceSpec spec;            // latent policy and sampling seed
};

// When a sequence stops before max_new_tokens.
struct StopRule {
  std::vector<int32_t> eos_ids;           // ids that end a sequence (not part of its text)
  std::vector<std::string> stop_strings;  // text that ends a sequence (cut from its text)
};

enum class FinishReason { Length, Eos, StopString, Cancelled };
const char* finish_reason_name(FinishReason r);  // "length", "eos", "stop", "cancelled"

struct TextGeneration {
  std::vector<int32_t> tokens;  // prompt + generated (an end-of-generation id included)
  int prompt_len = 0;
  std::vector<uint32_t> codes;  // Z per input position; empty for the plain decoder
  std::string text;             // the generated part decoded, cut before a stop string
  FinishReason finish = FinishReason::Length;
};

// Called after each generated token of sequence `seq` with the text that token completed (UTF-8
// held back across tokens, a stop string held back until it cannot match any more). Returning
// false cancels the whole batch.
using TokenSink = std::function<bool(int seq, int32_t token, const std::string& text)>;

// One-line errors for requests a user made: empty prompt, prompt + max_new_tokens beyond the
// context ("prompt 3: 9000 tokens + 64 new tokens exceed the context of 8192 positions"), latent
// codes of the wrong length.
Status check_text_requests(const ModelConfig& m, const std::vector<GenerationRequest>& requests,
                           const SampleConfig& cfg);

// Runs the requests (checked with check_text_requests first) as one batch; tokenizer decodes the
// text (null: no text, no stop strings).
Result<std::vector<TextGeneration>> generate_text(Model& model, const Tokenizer* tokenizer,
                                                  const std::vector<GenerationRequest>& requests,
                                                  const SampleConfig& cfg, const StopRule& stop,
                                                  const TokenSink& on_token = {});

}  // namespace ftx
