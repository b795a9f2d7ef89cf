// CharTokenizer: a 256-entry byte-to-id table built once; encoding is one lookup per byte.
#include "core/text/char_tokenizer.h"

#include <cstdio>

namespace ftx {
namespace {

std::string printable(unsigned char c) {
  if (c >= 0x20 && c < 0x7f) return std::string(1, static_cast<char>(c));
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  return buf;
}

}  // namespace

CharTokenizer::CharTokenizer(std::string alphabet) : alphabet_(std::move(alphabet)) {
  FT_ASSERT(!alphabet_.empty(), "a chars tokenizer needs an alphabet");
  id_of_byte_.fill(-1);
  for (size_t k = 0; k < alphabet_.size(); ++k) {
    const auto c = static_cast<unsigned char>(alphabet_[k]);
    if (id_of_byte_[c] < 0) id_of_byte_[c] = static_cast<int32_t>(k);  // first occurrence wins
  }
}

Result<std::vector<int32_t>> CharTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (id_of_byte_[c] < 0)
      return make_error("character '" + printable(c) + "' at position " + std::to_string(i) +
                        " is not in the vocabulary " + describe());
    tokens[i] = id_of_byte_[c];
  }
  return tokens;
}

std::string_view CharTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "?";
  return std::string_view(alphabet_).substr(static_cast<size_t>(id), 1);
}

std::string CharTokenizer::describe() const {
  std::string out;
  size_t i = 0;
  while (i < alphabet_.size()) {
    size_t j = i;  // extend over consecutive byte values: A, B, C, ...
    while (j + 1 < alphabet_.size() &&
           static_cast<unsigned char>(alphabet_[j + 1]) == static_cast<unsigned char>(alphabet_[j]) + 1)
      ++j;
    if (j - i >= 2) {
      out += printable(alphabet_[i]) + ".." + printable(alphabet_[j]);
    } else {
      for (size_t k = i; k <= j; ++k) out += printable(alphabet_[k]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace ftx
