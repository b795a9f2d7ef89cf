// CharTokenizer: one byte per token, token id = index of the byte in an alphabet string (the
// synthetic task's "_!>A..Z", the coin-flip task's ">01", or a checkpoint's config.json alphabet).
// A byte that occurs twice in the alphabet encodes to its first index; both ids decode to it.
// Deliberately not here: UTF-8 awareness (a multi-byte character is several tokens), unknown-
// character fallback on encode (a byte outside the alphabet is an error naming it).
#pragma once
#include <array>
#include <string>

#include "core/text/tokenizer.h"

namespace ftx {

class CharTokenizer final : public Tokenizer {
 public:
  explicit CharTokenizer(std::string alphabet);  // not empty (readers check before)

  std::string type() const override { return "chars"; }
  int vocab_size() const override { return static_cast<int>(alphabet_.size()); }
  // Error: "character 'a' at position 0 is not in the vocabulary _!>A..Z".
  Result<std::vector<int32_t>> encode(std::string_view text) const override;
  // Ids outside [0, vocab_size()) give "?" (a model whose vocabulary is wider than its alphabet).
  std::string_view token_bytes(int32_t id) const override;
  std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<CharTokenizer>(alphabet_); }

  const std::string& alphabet() const { return alphabet_; }
  // The alphabet for messages, runs of 3+ consecutive byte values folded: "_!>A..Z".
  std::string describe() const;

 private:
  std::string alphabet_;
  std::array<int32_t, 256> id_of_byte_;  // -1: not in the alphabet
};

}  // namespace ftx
