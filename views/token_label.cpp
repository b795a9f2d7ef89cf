#include "views/token_label.h"

#include <cstdio>

namespace ftx {

namespace {

// The length of the valid UTF-8 sequence at s[i] (1..4), 0 when the bytes there are not one.
// Overlong forms, surrogates and code points past U+10FFFF are invalid, as in RFC 3629.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  if (n == 0 || i + n > s.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((b(k) & 0xC0) != 0x80) return 0;
  return n;
}

void append_hex(std::string& out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02X", c);
  out += buf;
}

}  // namespace

std::string printable_token(std::string_view bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    const size_t n = utf8_length(bytes, i);
    if (c == ' ')
      out += "\xC2\xB7";  // U+00B7 middle dot
    else if (c == '\n')
      out += "\xE2\x86\xB5";  // U+21B5 ↵
    else if (c == '\t')
      out += "\xE2\x87\xA5";  // U+21E5 ⇥
    else if (n == 0 || c < 0x20 || c == 0x7F)
      append_hex(out, c);
    else if (n == 2 && c == 0xC2 && static_cast<unsigned char>(bytes[i + 1]) < 0xA0)  // C1 controls
      append_hex(out, c), append_hex(out, static_cast<unsigned char>(bytes[i + 1]));
    else
      out.append(bytes.substr(i, n));
    i += n == 0 ? 1 : n;
  }
  return out;
}

}  // namespace ftx
