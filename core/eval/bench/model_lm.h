// A LanguageModel (task.h) over one of our models and its tokenizer: what `ftx eval`, training's
// benchmark evaluation and the studio score tasks with.
//
// Log-likelihoods: context and continuation are tokenized as lm-evaluation-harness does (the
// context's trailing whitespace moves into the continuation; the continuation's tokens are those of
// the joint encoding after the context's; BOS first when the model wants one, and an empty context
// conditions on BOS or end-of-text), run through the full forward pass in length-sorted batches, and
// summed over the continuation. A Free Transformer is scored with Z from the prior, as generation
// sees it: the log of the mean probability over `latent_draws` draws of uniform codes. The draws
// depend on the context only: the choices of one question are compared under the same draws, and
// every checkpoint of a run sees the same ones, so curves over steps do not move by the draw. Sequences
// longer than the context keep their last positions.
//
// Generation: generate_text (core/sample/generator.h) in batches, greedy or sampled; a Free
// Transformer draws one Z from the prior per request, from the request's seed.
#pragma once
#include <cstdint>
#include <vector>

#include "core/eval/bench/task.h"
#include "core/model/model.h"
#include "core/text/tokenizer.h"

namespace ftx::bench {

struct ModelLmOptions {
  int latent_draws = 4;         // K prior draws of Z per log-likelihood (Free Transformer)
  uint64_t seed = 1;            // of those draws
  int max_batch_tokens = 2048;  // B * T per forward pass (the logits alone are B * T * V floats)
  int gen_batch = 16;           // sequences decoded together
};

// What a tokenizer alone says about the model's sequences: BOS first (a BPE tokenizer's add_bos()),
// the token an empty context conditions on (BOS, else end-of-text, else EOS), and the ids that end a
// generation (EOS and end-of-text). A model file's own list (ModelInfo::eos_ids) may add more.
struct TokenRoles {
  bool add_bos = false;
  int32_t prefix_id = 0;
  std::vector<int32_t> eos_ids;
};
TokenRoles token_roles(const Tokenizer& tokenizer);

class ModelLm final : public LanguageModel {
 public:
  // add_bos: the model's sequences start with the tokenizer's BOS. prefix_id: what an empty
  // context conditions on (BOS, else the end-of-text token). eos_ids end a generation (besides the
  // requests' stop strings). The model and tokenizer must outlive this object.
  ModelLm(Model& model, const Tokenizer& tokenizer, bool add_bos, int32_t prefix_id, std::vector<int32_t> eos_ids,
          ModelLmOptions options = {});

  Result<std::vector<LoglikResult>> loglikelihood(const std::vector<LoglikRequest>& requests) override;
  Result<std::vector<std::string>> generate(const std::vector<GenRequest>& requests) override;

  // The token ids a request is scored on: the whole sequence and where the continuation starts
  // (exposed for tests and for the NLL-per-token metrics).
  struct Encoded {
    std::vector<int32_t> tokens;
    int continuation_start = 0;  // tokens[continuation_start..] are the continuation
  };
  Result<Encoded> encode_request(const LoglikRequest& r) const;

 private:
  Model& model_;
  const Tokenizer& tok_;
  bool add_bos_;
  int32_t prefix_id_;
  std::vector<int32_t> eos_ids_;
  ModelLmOptions o_;
};

}  // namespace ftx::bench
