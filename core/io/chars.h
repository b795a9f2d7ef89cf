// Character tokenizer for the small tasks: token id = index of the character in an alphabet
// string (kSyntheticAlphabet, the coin-flip ">01", or a checkpoint's config alphabet).
// Deliberately not here: BPE or any multi-character token, normalisation, unknown-token fallback
// on encode (a character outside the alphabet is an error naming it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/util/result.h"

namespace ftx {

// Error: "<what> 'a>': character 'a' at position 0 is not in the vocabulary _!>A..Z".
Result<std::vector<int32_t>> encode_chars(const std::string& text, const std::string& alphabet,
                                          const std::string& what = "text");
// Ids outside [0, alphabet.size()) decode to '?' (a model whose vocabulary is wider than its alphabet).
std::string decode_chars(const int32_t* tokens, size_t n, const std::string& alphabet);
std::string decode_chars(const std::vector<int32_t>& tokens, const std::string& alphabet);
// Alphabet for messages, runs of 3+ consecutive characters folded: "_!>A..Z".
std::string describe_alphabet(const std::string& alphabet);

}  // namespace ftx
