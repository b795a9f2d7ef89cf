// Byte-level BPE (GPT-2 style): the tokenizer of Llama 3, GPT-2, SmolLM and Qwen2 checkpoints,
// read from a Hugging Face tokenizer.json or from a GGUF file's tokenizer.ggml.* metadata
// (docs/design.md, "Tokenizers"). Ids equal Hugging Face tokenizers' on the same tokenizer.json and
// llama.cpp's on the same GGUF file (where the two differ, each reader follows its own reference:
// core/text/bpe_impl.h lists the differences).
//
// encode(): added/special tokens are cut out of the raw text first and emitted as their ids; the
// rest is normalized (NFC when tokenizer.json asks for it), pre-tokenized by the family's regexes
// (PCRE2, UTF + UCP), each piece's bytes are spelled in the GPT-2 byte alphabet and merged by
// rank. A byte without a token is dropped (as llama.cpp and tokenizers with unk_token null do).
// BOS is never added here: callers prepend special_tokens().bos when add_bos() says the model
// wants it. encode() fails only on text that is not valid UTF-8 (naming the byte and its offset)
// and when PCRE2 gives up on a pathological pattern of a tokenizer.json (match limit).
//
// Deliberately not here: SentencePiece vocabularies (refused), chat templates (the CLI), the
// GGUF container (core/io/gguf.h fills a BpeVocab), truncation and padding (tokenizer.json keys
// that only batch encoding uses), tokens a post-processor template puts after the text (EOS).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/text/tokenizer.h"
#include "kernels/base/result.h"

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
// Supported pre types (tokenizer.ggml.pre, empty = "default" as llama.cpp): default; gpt2, gpt-2,
// phi-2, mpt, olmo; llama3, llama-v3, llama-bpe, falcon3, pixtral (ignore_merges); dbrx,
// smaug-bpe; qwen2, deepseek-r1-qwen, stablelm2, megrez; smollm, starcoder, refact, command-r,
// codeshell, exaone, minerva-7b; falcon. Any other is refused in one line naming it.
Result<std::unique_ptr<BpeTokenizer>> bpe_from_vocab(const BpeVocab& vocab, const std::string& source);
// The tokenizer of a Hugging Face tokenizer.json (model type BPE with a ByteLevel pre-tokenizer
// step and decoder; normalizer null or NFC; pre-tokenizers Split, Digits, ByteLevel, Sequence);
// anything else (WordPiece, Unigram, SentencePiece-style BPE with byte_fallback and a Metaspace
// pre-tokenizer) is refused in one line naming the file and the feature. BOS is the special
// token the post-processor's template puts before the text (then add_bos() is true); bos, eos
// and pad come from a tokenizer_config.json beside the file when there is one, else EOS is the
// first of <|end_of_text|>, <|endoftext|>, </s>, <|im_end|> in the vocabulary.
Result<std::unique_ptr<BpeTokenizer>> bpe_from_tokenizer_json(const std::string& path);
// The same from the file's text (no tokenizer_config.json is looked for); `source` names it in
// errors.
Result<std::unique_ptr<BpeTokenizer>> bpe_from_tokenizer_json_text(std::string_view json_text,
                                                                   const std::string& source);

class BpeTokenizer : public Tokenizer {
 public:
  ~BpeTokenizer() override;
  std::string type() const override { return "bpe"; }
  int vocab_size() const override;
  Result<std::vector<int32_t>> encode(std::string_view text) const override;
  // A token's bytes with the byte alphabet undone; added and control tokens give their text. An id
  // outside the vocabulary gives U+FFFD.
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
  // This tokenizer as a Hugging Face-style tokenizer.json text that bpe_from_tokenizer_json_text
  // reads back into a tokenizer with the same fingerprint() and encode(). An "ftx" object in "model"
  // keeps what tokenizer.json cannot say: the special ids, add_bos, and for a tokenizer made from
  // GGUF metadata the llama.cpp flavour (pre type and token types; the reader then rebuilds it with
  // bpe_from_vocab). The standard keys describe the same pipeline: Hugging Face tokenizers loads
  // the file (with its own rules where they differ from llama.cpp's).
  std::string to_tokenizer_json() const;

  struct Impl;

 protected:
  std::string canonical_form() const override;

 private:
  explicit BpeTokenizer(std::shared_ptr<const Impl> impl);
  friend Result<std::unique_ptr<BpeTokenizer>> bpe_from_vocab(const BpeVocab&, const std::string&);
  friend Result<std::unique_ptr<BpeTokenizer>> bpe_from_tokenizer_json(const std::string&);
  friend Result<std::unique_ptr<BpeTokenizer>> bpe_from_tokenizer_json_text(std::string_view, const std::string&);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace ftx
