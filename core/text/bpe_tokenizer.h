// Byte-level BPE (GPT-2 style): the tokenizer of Llama 3, GPT-2, SmolLM and Qwen2 checkpoints,
// read from a Hugging Face tokenizer.json or from a GGUF file's tokenizer.ggml.* metadata
// (docs/design.md, "Tokenizers"). Ids equal Hugging Face tokenizers' on the same tokenizer.json and
// llama.cpp's on the same GGUF file.
//
// encode(): added/special tokens are cut out of the raw text first (longest match) and emitted as
// their ids; the rest is pre-tokenized by the family's regexes (PCRE2, UTF + UCP), each piece's
// bytes are spelled in the GPT-2 byte alphabet and merged by rank. A byte without a token is
// dropped (as llama.cpp and tokenizers with unk_token null do). BOS is never added here: callers
// prepend special_tokens().bos when add_bos() says the model wants it.
//
// Deliberately not here: SentencePiece vocabularies (refused), chat templates (the CLI), the
// GGUF container (core/io/gguf.h fills a BpeVocab).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/text/tokenizer.h"
#include "kernels/result.h"

namespace ftx {

// A vocabulary as GGUF metadata holds it (tokenizer.ggml.*).
struct BpeVocab {
  std::vector<std::string> tokens;   // id = index, in the GPT-2 byte-to-unicode spelling
  std::vector<int32_t> token_types;  // GGUF: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
                                     // 6 byte; empty = all normal
  std::vector<std::string> merges;   // "left right", rank = index
  std::string pre;                   // tokenizer.ggml.pre: "smollm", "llama-bpe", "gpt2", "qwen2", ...
  SpecialTokens special;             // bos / eos / pad ids
  bool add_bos = false;              // tokenizer.ggml.add_bos_token (with the pre type's default)
};

class BpeTokenizer;
// The tokenizer of a GGUF file's vocabulary; `source` (the file's path) prefixes every error:
// "model.gguf: tokenizer: merge 17 'a': not two tokens".
Result<std::unique_ptr<BpeTokenizer>> bpe_from_vocab(const BpeVocab& vocab, const std::string& source);
// The tokenizer of a Hugging Face tokenizer.json (model type BPE with a ByteLevel decoder);
// anything else (WordPiece, Unigram, SentencePiece-style BPE with byte_fallback and a Metaspace
// pre-tokenizer) is refused in one line naming the file and the feature.
Result<std::unique_ptr<BpeTokenizer>> bpe_from_tokenizer_json(const std::string& path);

class BpeTokenizer : public Tokenizer {
 public:
  ~BpeTokenizer() override;
  std::string type() const override { return "bpe"; }
  int vocab_size() const override;
  Result<std::vector<int32_t>> encode(std::string_view text) const override;
  std::string_view token_bytes(int32_t id) const override;
  SpecialTokens special_tokens() const override;
  std::unique_ptr<Tokenizer> clone() const override;

  // Whether the model expects BOS before a prompt (tokenizer.json's post_processor, GGUF add_bos).
  bool add_bos() const;
  // The id of the token spelled exactly `text` (special tokens by their text, "<|im_end|>"); none
  // when absent.
  std::optional<int32_t> token_id(std::string_view text) const;
  // Control / special tokens (GGUF type 3, tokenizer.json added tokens with special = true): never
  // produced by merges, their text is shown only when asked for.
  bool is_special(int32_t id) const;

  struct Impl;

 protected:
  std::string canonical_form() const override;

 private:
  explicit BpeTokenizer(std::shared_ptr<const Impl> impl);
  friend Result<std::unique_ptr<BpeTokenizer>> bpe_from_vocab(const BpeVocab&, const std::string&);
  friend Result<std::unique_ptr<BpeTokenizer>> bpe_from_tokenizer_json(const std::string&);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace ftx
