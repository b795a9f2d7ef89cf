// Character tokenizer: a 256-entry lookup table per call (alphabets are tiny, texts short).
// Not here: caching tables across calls, UTF-8 (a byte is a character).
#include "core/io/chars.h"

#include <array>
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

std::string describe_alphabet(const std::string& alphabet) {
  std::string out;
  size_t i = 0;
  while (i < alphabet.size()) {
    size_t j = i;  // extend over consecutive character codes: A, B, C, ...
    while (j + 1 < alphabet.size() && static_cast<unsigned char>(alphabet[j + 1]) ==
                                          static_cast<unsigned char>(alphabet[j]) + 1)
      ++j;
    if (j - i >= 2) {
      out += printable(alphabet[i]) + ".." + printable(alphabet[j]);
    } else {
      for (size_t k = i; k <= j; ++k) out += printable(alphabet[k]);
    }
    i = j + 1;
  }
  return out;
}

Result<std::vector<int32_t>> encode_chars(const std::string& text, const std::string& alphabet,
                                          const std::string& what) {
  std::array<int32_t, 256> id;
  id.fill(-1);
  for (size_t k = 0; k < alphabet.size(); ++k) {
    auto c = static_cast<unsigned char>(alphabet[k]);
    if (id[c] < 0) id[c] = static_cast<int32_t>(k);  // first occurrence wins
  }
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (id[c] < 0)
      return make_error(what + " '" + text + "': character '" + printable(c) + "' at position " +
                        std::to_string(i) + " is not in the vocabulary " + describe_alphabet(alphabet));
    tokens[i] = id[c];
  }
  return tokens;
}

std::string decode_chars(const int32_t* tokens, size_t n, const std::string& alphabet) {
  std::string out(n, '?');
  for (size_t i = 0; i < n; ++i)
    if (tokens[i] >= 0 && static_cast<size_t>(tokens[i]) < alphabet.size()) out[i] = alphabet[tokens[i]];
  return out;
}

std::string decode_chars(const std::vector<int32_t>& tokens, const std::string& alphabet) {
  return decode_chars(tokens.data(), tokens.size(), alphabet);
}

}  // namespace ftx
