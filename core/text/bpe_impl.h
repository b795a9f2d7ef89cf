// BpeTokenizer::Impl: what a byte-level BPE tokenizer holds once loaded, shared by its two readers
// (bpe_from_vocab in bpe_vocab.cpp, bpe_from_tokenizer_json in bpe_tokenizer_json.cpp) and the
// encoder (bpe_tokenizer.cpp). Private to core/text.
//
// Two flavours differ where Hugging Face tokenizers and llama.cpp differ:
//  - added tokens: tokenizers cuts them out leftmost-longest (two passes: non-normalized tokens on
//    the raw text, then normalized ones on the normalized text, with lstrip/rstrip/single_word);
//    llama.cpp cuts each CONTROL/USER_DEFINED/UNKNOWN token everywhere, longest token first;
//  - a byte whose character has no token: tokenizers drops it (or emits unk_token) and its
//    neighbours may then merge; llama.cpp keeps it as a symbol that merges with nothing and emits
//    the tokens, if any, spelled by the single raw bytes of its character;
//  - a merge listed twice: tokenizers keeps the last rank, llama.cpp the first;
//  - normalization: tokenizers applies tokenizer.json's normalizer (NFC), llama.cpp none.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/text/bpe_tokenizer.h"
#include "core/text/pretokenize.h"
#include "core/text/unicode_text.h"

namespace ftx {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
  std::string match;  // what is cut out of the text: the content, normalized when `normalized` (NFC)
};

struct BpeMerge {
  int32_t rank;
  int32_t id;  // the merged token
};

struct BpeTokenizer::Impl {
  enum class Flavor { kHuggingFace, kLlamaCpp };
  Flavor flavor = Flavor::kHuggingFace;

  std::vector<std::string> spelling;               // id -> the token as the vocabulary spells it
  std::vector<std::string> bytes;                  // id -> token_bytes()
  std::vector<uint8_t> special;                    // id -> is_special()
  std::vector<uint8_t> in_model;                   // id -> part of the BPE model's vocabulary (not only an added token)
  std::unordered_map<std::string, int32_t> id_of;  // spelling -> id, every token
  std::array<int32_t, 256> byte_id{};              // the model's token of each single byte, -1 when none

  std::unordered_map<uint64_t, BpeMerge> merges;        // (left << 32 | right) -> rank and result
  std::vector<std::pair<int32_t, int32_t>> merge_list;  // rank -> (left, right), for the fingerprint
  bool ignore_merges = false;                           // a pre-token that is itself a token is emitted whole
  std::optional<int32_t> unk;                           // tokenizers' unk_token (kHuggingFace only)
  bool fuse_unk = false;

  bool nfc = false;                // normalizer NFC (kHuggingFace only)
  std::vector<text::PreStep> pre;  // ends with a kByteLevel step
  std::vector<AddedToken> added;   // kHuggingFace: every added token;
                                   // kLlamaCpp: the tokens cut out, longest first
  // kHuggingFace: indices into `added` by pass (0 non-normalized, 1 normalized) and first byte,
  // longest first.
  std::array<std::array<std::vector<uint32_t>, 256>, 2> added_index;
  SpecialTokens specials;
  bool add_bos = false;
  // kLlamaCpp: the GGUF vocabulary's pre type and token types, kept so that to_tokenizer_json()
  // can write a file that bpe_from_vocab rebuilds exactly.
  std::string gguf_pre;
  std::vector<int32_t> gguf_types;

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  int32_t vocab_size() const { return static_cast<int32_t>(spelling.size()); }
  // Fills byte_id from id_of and in_model.
  void index_bytes();
  // kHuggingFace: sets each added token's match and bytes (its normalized form) and fills
  // added_index.
  void index_added();
};

using text::quote_token;

}  // namespace ftx
