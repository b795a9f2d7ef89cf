// The parts of Tokenizer written once for every implementation: decode by concatenation, the
// fingerprint, and the streaming decoder's UTF-8 hold-back.
#include "core/text/tokenizer.h"

#include <utility>

#include "core/util/sha256.h"

namespace ftx {
namespace {

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Bytes of the UTF-8 character that `lead` starts; 1 for ASCII and for bytes that start none.
int utf8_length(unsigned char lead) {
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

std::string optional_id(const std::optional<int32_t>& id) { return id ? std::to_string(*id) : "-"; }

}  // namespace

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

std::string Tokenizer::canonical_form() const {
  std::string s = "ftx-tokenizer 1\ntype " + type() + "\nvocab " + std::to_string(vocab_size()) + "\n";
  for (int32_t id = 0; id < vocab_size(); ++id) {
    const std::string_view b = token_bytes(id);
    s += std::to_string(b.size()) + ":";
    s += b;
  }
  const SpecialTokens sp = special_tokens();
  s += "\nbos " + optional_id(sp.bos) + " eos " + optional_id(sp.eos) + " pad " + optional_id(sp.pad) + "\n";
  return s;
}

Status check_tokenizer_fits(const Tokenizer& t, int vocab_size) {
  if (t.vocab_size() <= vocab_size) return {};
  return make_error("the tokenizer has " + std::to_string(t.vocab_size()) +
                    " tokens, more than the model's vocab_size " + std::to_string(vocab_size));
}

std::string Tokenizer::fingerprint() const {
  const std::string c = canonical_form();
  return sha256_hex(c.data(), c.size());
}

std::string StreamDecoder::feed(int32_t id) {
  pending_ += tokenizer_.token_bytes(id);
  // Find the last character start among the final 3 bytes; hold it back if its bytes are not all
  // here yet. A start further back is either complete or broken: nothing to wait for.
  size_t hold = 0;
  for (size_t k = 1; k <= 3 && k <= pending_.size(); ++k) {
    const auto b = static_cast<unsigned char>(pending_[pending_.size() - k]);
    if (is_continuation(b)) continue;
    if (utf8_length(b) > static_cast<int>(k)) hold = k;
    break;
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamDecoder::finish() { return std::exchange(pending_, std::string()); }

}  // namespace ftx
