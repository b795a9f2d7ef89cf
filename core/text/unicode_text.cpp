// UTF-8 by hand (strict, as Rust's str), character classes and NFC from utf8proc, and the GPT-2
// byte alphabet as two 256/324-entry tables built once.
#include "core/text/unicode_text.h"

#include <utf8proc.h>

#include <array>
#include <cstdio>
#include <cstdlib>

#include "kernels/base/assert.h"

namespace ftx::text {
namespace {

struct ByteAlphabet {
  std::array<uint32_t, 256> char_of{};
  std::array<int16_t, 324> byte_of{};  // every character of the alphabet is below U+0144
  std::array<std::string, 256> spelling;
  ByteAlphabet() {
    byte_of.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char_of[b] = self ? static_cast<uint32_t>(b) : next++;
      byte_of[char_of[b]] = static_cast<int16_t>(b);
      utf8_append(spelling[b], char_of[b]);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

int utf8_decode(std::string_view s, size_t i, uint32_t* cp) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = at(0);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int n;
  uint32_t v, min;
  if ((c & 0xE0) == 0xC0) {
    n = 2, v = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, v = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (int k = 1; k < n; ++k) {
    if (!is_continuation(at(k))) return 0;
    v = (v << 6) | (at(k) & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

size_t utf8_invalid_offset(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    uint32_t cp;
    const int n = utf8_decode(s, i, &cp);
    if (n == 0) return i;
    i += static_cast<size_t>(n);
  }
  return std::string_view::npos;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_numeric(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_whitespace(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_word_char(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  if (cp == 0x200C || cp == 0x200D) return true;
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_NL) || c == UTF8PROC_CATEGORY_PC;
}

std::string nfc(std::string_view s) {
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(s);  // ASCII is its own NFC
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  FT_ASSERT(n >= 0 && out != nullptr, "utf8proc_map failed on valid UTF-8: %s", utf8proc_errmsg(n));
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

uint32_t byte_to_char(uint8_t b) { return alphabet().char_of[b]; }

int char_to_byte(uint32_t cp) { return cp < 324 ? alphabet().byte_of[cp] : -1; }

std::string_view byte_spelling(uint8_t b) { return alphabet().spelling[b]; }

std::string spell_bytes(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_spelling(static_cast<uint8_t>(c));
  return out;
}

std::string unspell(std::string_view spelled) {
  std::string out;
  size_t i = 0;
  while (i < spelled.size()) {
    uint32_t cp;
    const int n = utf8_decode(spelled, i, &cp);
    const int b = n > 0 ? char_to_byte(cp) : -1;
    if (b < 0) return std::string(spelled);
    out += static_cast<char>(b);
    i += static_cast<size_t>(n);
  }
  return out;
}

std::string quote_token(std::string_view t, size_t max_bytes) {
  std::string out = "'";
  size_t i = 0;
  for (; i < t.size() && i < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(t[i]);
    if (c < 0x20 || c == 0x7F || c == '\\' || c == '\'') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  while (i < t.size() && (static_cast<unsigned char>(t[i]) & 0xC0) == 0x80) out += t[i++];  // finish the character
  return out + (i < t.size() ? "'..." : "'");
}

}  // namespace ftx::text
