// The Unicode facts the byte-level BPE tokenizer needs: strict UTF-8 decoding, the character
// classes its pre-tokenizers test (numeric, white space, word), NFC normalization (utf8proc), and
// GPT-2's byte-to-unicode alphabet that spells every byte as one printable character.
//
// Deliberately not here: regular expressions (core/text/pretokenize.h, PCRE2), anything locale-
// dependent. The character classes follow the Unicode data of utf8proc; they match Rust's (what
// Hugging Face tokenizers uses) except for characters assigned in a later Unicode version.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ftx::text {

// The character at s[i] as a code point in *cp; returns its length in bytes (1-4), or 0 when the
// bytes there are not valid UTF-8 (overlong forms, surrogates and values past U+10FFFF included).
int utf8_decode(std::string_view s, size_t i, uint32_t* cp);
// The byte offset of the first invalid UTF-8 sequence, or std::string_view::npos.
size_t utf8_invalid_offset(std::string_view s);
void utf8_append(std::string& out, uint32_t cp);

// Rust's char::is_numeric: general categories Nd, Nl, No (regex \p{N}).
bool is_numeric(uint32_t cp);
// The White_Space property (Rust regex \s; Oniguruma \s).
bool is_whitespace(uint32_t cp);
// Rust regex \w: letters, marks, decimal and letter numbers, connector punctuation, ZWNJ/ZWJ.
bool is_word_char(uint32_t cp);

// `s` (valid UTF-8) in Normalization Form C.
std::string nfc(std::string_view s);

// GPT-2's bytes_to_unicode: bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF are their own code point,
// the other 68 bytes in increasing order are U+0100, U+0101, ... (space is U+0120 'Ġ').
uint32_t byte_to_char(uint8_t b);
// The inverse: the byte a character of that alphabet spells, or -1 for any other character.
int char_to_byte(uint32_t cp);
// The UTF-8 spelling of byte b's character (one or two bytes).
std::string_view byte_spelling(uint8_t b);
// `bytes` spelled in the alphabet: each byte becomes its character.
std::string spell_bytes(std::string_view bytes);
// The bytes a spelled token stands for: every character mapped back through the alphabet. When a
// character is outside the alphabet (an added token is plain text and may hold a raw space), the
// token's own UTF-8 is returned, as tokenizers' ByteLevel decoder does.
std::string unspell(std::string_view spelled);

// `t` in single quotes for a one-line error message: control bytes, quotes and backslashes as
// \xNN, cut after `max_bytes` (at a character boundary) with "..." after the quote.
std::string quote_token(std::string_view t, size_t max_bytes = 48);

}  // namespace ftx::text
