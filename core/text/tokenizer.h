// Tokenizer: text <-> token ids, the one interface every dataset, the sampler's callers, the CLI
// and the views use (docs/design.md, "Tokenizers"). A tokenizer is immutable once made, so one
// instance may be shared across threads (std::shared_ptr<const Tokenizer>).
//
// The unit of the interface is a token's bytes: decode() concatenates them, StreamDecoder turns
// them into text one token at a time, and views draw one cell per token from them. A token's
// bytes need not be valid UTF-8 on their own (a byte-level BPE token may hold half a character);
// StreamDecoder holds such a tail back until the character is complete.
//
// Implementations: CharTokenizer (core/text/char_tokenizer.h, one byte per token). A byte-level
// BPE tokenizer (tokenizer.json, GGUF metadata) fits the same interface: token_bytes() from its
// vocabulary with the byte-to-unicode mapping undone, encode() with its pre-tokenizer and merges,
// special_tokens() from its added tokens, and canonical_form() extended with the merges.
//
// Deliberately not here: reading or writing files (core/text/tokenizer_json.h writes the forms
// that live in config.json), chat templates, adding BOS on encode (the caller prepends
// special_tokens().bos where a model wants it).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/base/result.h"

namespace ftx {

// Ids with a meaning of their own; absent when the tokenizer has none (CharTokenizer).
struct SpecialTokens {
  std::optional<int32_t> bos, eos, pad;
  bool operator==(const SpecialTokens&) const = default;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The name written as "type" in config.json ("chars").
  virtual std::string type() const = 0;
  // Token ids are 0..vocab_size()-1. A model's vocab_size may be larger (padded embeddings).
  virtual int vocab_size() const = 0;
  // Error for text the vocabulary cannot express; it names the offending character and its byte
  // position, one line, without naming the caller's thing ("prompt", "--prompt"): callers prefix.
  virtual Result<std::vector<int32_t>> encode(std::string_view text) const = 0;
  // The bytes of token `id`, valid as long as the tokenizer lives. Ids outside the vocabulary
  // give a placeholder chosen by the implementation ("?" for CharTokenizer), never an error:
  // a model may sample an id its tokenizer lacks.
  virtual std::string_view token_bytes(int32_t id) const = 0;
  virtual SpecialTokens special_tokens() const { return {}; }
  // An independent copy (for owners that outlive the source, e.g. a dataset's tokenizer kept
  // with a trained model).
  virtual std::unique_ptr<Tokenizer> clone() const = 0;

  // The concatenated token bytes. Virtual so that a tokenizer may drop or rewrite pieces (a
  // SentencePiece model's leading space); the default is exact concatenation.
  virtual std::string decode(std::span<const int32_t> ids) const;
  // SHA-256 (hex) of canonical_form(): equal for tokenizers that encode and decode alike, so a
  // tokenized data file can record which tokenizer made it.
  std::string fingerprint() const;

 protected:
  // Type, vocabulary size, every token's bytes (length-prefixed) and the special ids, in a fixed
  // byte layout. A tokenizer whose encoding depends on more (BPE merges) appends it.
  virtual std::string canonical_form() const;
};

// Whether every id of `t` has a row in a model of `vocab_size` (a model may have more rows, padded
// embeddings, never fewer). Error: "the tokenizer has N tokens, more than the model's vocab_size M";
// callers prefix the file or dataset.
Status check_tokenizer_fits(const Tokenizer& t, int vocab_size);

// Incremental decoding for printing tokens as they are generated: feed() returns the text that
// became complete with this token; bytes of a UTF-8 character split across tokens are held back
// until its last byte arrives. finish() returns what is held back (an incomplete tail, as is).
// The concatenation of every feed() and finish() equals the tokens' bytes concatenated.
// Bytes that cannot start or continue a UTF-8 character are passed through, not held.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string feed(int32_t id);
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;  // an incomplete UTF-8 character's first bytes (at most 3)
};

}  // namespace ftx
