// Training a byte-level BPE vocabulary (GPT-2 style) on a corpus: the tokenizer of a model trained
// from scratch on a small corpus, where a large pretrained vocabulary would be most of the model
// (docs/text_latent.md: SmolLM2's 49,152 tokens are 93 % of the small preset).
//
// The text is cut by GPT-2's pre-tokenizer pattern (core/text/pretokenize.h, kGpt2Pattern); each
// piece starts as its bytes (256 base tokens, id = byte value, spelled in GPT-2's byte alphabet),
// and the most frequent adjacent pair over all pieces, weighted by how often the piece occurs, is
// merged into a new token, again and again until the vocabulary has `vocab_size` tokens with the
// end-of-text token last. Ties go to the pair whose (left id, right id) is smallest, so the
// result is a pure function of the texts and their order does not matter. Pair counts are kept
// up to date incrementally (only the pieces that hold a merged pair are recounted).
//
// The result is a BpeVocab with pre type "gpt2": bpe_from_vocab turns it into the tokenizer that
// token files and checkpoints carry (core/text/tokenizer_json.h).
//
// Deliberately not here: normalization (the text is taken as it is), special tokens other than
// end of text, minimum frequencies (merges stop at the vocabulary size, or when no pair occurs
// twice).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/text/bpe_tokenizer.h"
#include "kernels/base/result.h"

namespace ftx {

inline constexpr const char* kBpeEndOfText = "<|endoftext|>";

// Counts the pre-tokenized pieces of texts, one text at a time, then trains.
class BpeTrainer {
 public:
  BpeTrainer();
  ~BpeTrainer();
  // `text` must be valid UTF-8 (an error names `source` and the byte otherwise).
  Status add_text(std::string_view text, const std::string& source);
  // vocab_size >= 257 (the bytes and end of text). Fewer merges when no pair occurs twice.
  Result<BpeVocab> train(int vocab_size) const;
  size_t distinct_pieces() const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace ftx
