// libFuzzer target: the input is a tokenizer.json text. bpe_from_tokenizer_json_text must either
// refuse it in one line or give a tokenizer that encodes a few fixed strings and the input's own
// tail, and decodes (whole and streamed) what it encoded, without a crash, a leak or UB.
// Seed corpus: tests/fuzz/corpus/tokenizer_json (small trained tokenizer.json files).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/text/bpe_tokenizer.h"

namespace {

void exercise(const ftx::BpeTokenizer& t, std::string_view text) {
  auto ids = t.encode(text);
  if (!ids.ok()) {
    FT_ASSERT(ids.error().message.find('\n') == std::string::npos, "multi-line error: %s", ids.error().message.c_str());
    return;
  }
  std::string streamed;
  ftx::StreamDecoder dec(t);
  for (int32_t id : *ids) {
    FT_ASSERT(id >= 0 && id < t.vocab_size(), "id %d outside the vocabulary of %d", id, t.vocab_size());
    streamed += dec.feed(id);
  }
  streamed += dec.finish();
  FT_ASSERT(streamed == t.decode(*ids), "streamed decoding differs from decode()");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto t = ftx::bpe_from_tokenizer_json_text(input, "fuzz.json");
  if (!t.ok()) {
    FT_ASSERT(t.error().message.find('\n') == std::string::npos, "multi-line error: %s", t.error().message.c_str());
    FT_ASSERT(t.error().message.rfind("fuzz.json: ", 0) == 0, "error without the file: %s", t.error().message.c_str());
    return 0;
  }
  const ftx::BpeTokenizer& tok = **t;
  for (const char* s : {"Hello world! It's 2024, isn't it?  \t\n x", "<|im_start|>user\nHi<|im_end|>\n<s></s>",
                        "caf\xc3\xa9 \xf0\x9f\x98\x80 \xe4\xbd\xa0\xe5\xa5\xbd 12345 \xe2\x84\xa6", ""}) {
    exercise(tok, s);
  }
  exercise(tok, input.substr(input.size() > 96 ? input.size() - 96 : 0));
  (void)tok.fingerprint();
  (void)tok.token_id("a");
  (void)tok.token_bytes(-1);
  (void)tok.token_bytes(tok.vocab_size());
  for (int32_t id = 0; id < tok.vocab_size() && id < 64; ++id) (void)tok.is_special(id);
  return 0;
}
