// core/text: the Tokenizer interface through the chars tokenizer and a test tokenizer with
// multi-byte tokens: encode/decode, the encode error, ids outside the vocabulary, the streaming
// decoder's UTF-8 hold-back, fingerprints, the JSON form, and config.json files in the form
// written by earlier versions.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/io/checkpoint.h"
#include "core/io/config_json.h"
#include "core/text/char_tokenizer.h"
#include "core/text/tokenizer.h"
#include "core/text/tokenizer_json.h"
#include "tests/test_util.h"

using namespace ftx;

namespace {

using nlohmann::json;

constexpr const char* kAlphabet = "_!>ABCDEFGHIJKLMNOPQRSTUVWXYZ";  // the synthetic task's

// Tokens are arbitrary byte strings (some halves of UTF-8 characters), like a byte-level BPE
// vocabulary; encode is not needed by these tests.
class PiecesTokenizer final : public Tokenizer {
 public:
  explicit PiecesTokenizer(std::vector<std::string> pieces, SpecialTokens special = {})
      : pieces_(std::move(pieces)), special_(special) {}
  std::string type() const override { return "test-pieces"; }
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  Result<std::vector<int32_t>> encode(std::string_view) const override { return make_error("no encoder"); }
  std::string_view token_bytes(int32_t id) const override {
    return id >= 0 && id < vocab_size() ? std::string_view(pieces_[id]) : std::string_view("\xEF\xBF\xBD");
  }
  SpecialTokens special_tokens() const override { return special_; }
  std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<PiecesTokenizer>(*this); }

 private:
  std::vector<std::string> pieces_;
  SpecialTokens special_;
};

// "é" = C3 A9, "€" = E2 82 AC, "😀" = F0 9F 98 80, each split across tokens.
const std::vector<std::string> kPieces = {"a", "\xC3", "\xA9", "\xE2\x82", "\xAC", "b", "\xF0\x9F", "\x98\x80", "\xF0"};

std::string feed_all(const Tokenizer& t, const std::vector<int32_t>& ids, std::vector<std::string>* steps) {
  StreamDecoder d(t);
  std::string out;
  for (int32_t id : ids) {
    steps->push_back(d.feed(id));
    out += steps->back();
  }
  return out + d.finish();
}

TEST(Tokenizer, CharsEncodeDecodeThroughTheInterface) {
  const CharTokenizer chars(kAlphabet);
  const Tokenizer& t = chars;
  EXPECT_EQ(t.type(), "chars");
  EXPECT_EQ(t.vocab_size(), 29);
  auto ids = t.encode("K>__!");
  ASSERT_TRUE(ids.ok()) << ids.error().message;
  EXPECT_EQ(*ids, (std::vector<int32_t>{13, 2, 0, 0, 1}));
  EXPECT_EQ(t.decode(*ids), "K>__!");
  EXPECT_EQ(t.token_bytes(13), "K");
  auto empty = t.encode("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_FALSE(t.special_tokens().bos || t.special_tokens().eos || t.special_tokens().pad);
}

TEST(Tokenizer, CharsRepeatedCharacterEncodesToItsFirstId) {
  const CharTokenizer t("abca");
  EXPECT_EQ(t.vocab_size(), 4);
  EXPECT_EQ(*t.encode("a"), std::vector<int32_t>{0});
  EXPECT_EQ(t.decode(std::vector<int32_t>{3, 0}), "aa");
}

TEST(Tokenizer, EncodeErrorNamesTheCharacterAndItsPosition) {
  const CharTokenizer synthetic(kAlphabet);
  auto bad = synthetic.encode("K>a");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "character 'a' at position 2 is not in the vocabulary _!>A..Z");
  auto bad2 = CharTokenizer(">01").encode(">012");
  ASSERT_FALSE(bad2.ok());
  EXPECT_EQ(bad2.error().message, "character '2' at position 3 is not in the vocabulary >01");
  auto control = synthetic.encode("K\n");
  ASSERT_FALSE(control.ok());
  EXPECT_EQ(control.error().message, "character '\\x0a' at position 1 is not in the vocabulary _!>A..Z");
}

TEST(Tokenizer, CharsDescribeFoldsRunsOfThree) {
  EXPECT_EQ(CharTokenizer("abXYZ").describe(), "abX..Z");
  EXPECT_EQ(CharTokenizer("abXY").describe(), "abXY");
  EXPECT_EQ(CharTokenizer(kAlphabet).describe(), "_!>A..Z");
}

TEST(Tokenizer, IdsOutsideTheVocabularyDecodeToAPlaceholder) {
  const CharTokenizer t(kAlphabet);
  EXPECT_EQ(t.decode(std::vector<int32_t>{0, 28, 29, -1, 1000}), "_Z???");
  EXPECT_EQ(t.token_bytes(29), "?");
  EXPECT_EQ(t.token_bytes(-1), "?");
}

TEST(Tokenizer, StreamDecoderHoldsBackASplitCharacterUntilComplete) {
  const PiecesTokenizer t(kPieces);
  std::vector<std::string> steps;
  const std::string text = feed_all(t, {0, 1, 2, 3, 4, 5, 6, 7}, &steps);
  EXPECT_EQ(steps, (std::vector<std::string>{"a", "", "\xC3\xA9", "", "\xE2\x82\xAC", "b", "", "\xF0\x9F\x98\x80"}));
  EXPECT_EQ(text,
            "a\xC3\xA9\xE2\x82\xAC"
            "b\xF0\x9F\x98\x80");
}

TEST(Tokenizer, StreamDecoderFlushesAnIncompleteTailAtTheEnd) {
  const PiecesTokenizer t(kPieces);
  StreamDecoder d(t);
  EXPECT_EQ(d.feed(0), "a");
  EXPECT_EQ(d.feed(6), "");  // F0 9F: two of four bytes
  EXPECT_EQ(d.finish(), "\xF0\x9F");
  EXPECT_EQ(d.finish(), "");  // nothing twice
}

TEST(Tokenizer, StreamDecoderPassesBrokenSequencesThrough) {
  const PiecesTokenizer t(kPieces);
  StreamDecoder d(t);
  EXPECT_EQ(d.feed(1), "");  // C3 waits for its continuation byte...
  EXPECT_EQ(d.feed(5),
            "\xC3"
            "b");                // ...which never comes: both go out as they are
  EXPECT_EQ(d.feed(2), "\xA9");  // a stray continuation byte is not held
  EXPECT_EQ(d.feed(8), "");
  EXPECT_EQ(d.feed(8), "\xF0");  // a new start ends the previous one
  EXPECT_EQ(d.finish(), "\xF0");
}

TEST(Tokenizer, StreamDecoderAgreesWithDecode) {
  const PiecesTokenizer t(kPieces);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> pick(-1, static_cast<int32_t>(kPieces.size()));
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids(static_cast<size_t>(trial % 13));
    for (int32_t& id : ids) id = pick(rng);
    std::vector<std::string> steps;
    EXPECT_EQ(feed_all(t, ids, &steps), t.decode(ids)) << "trial " << trial;
  }
}

TEST(Tokenizer, StreamDecoderOverACharsAlphabetHoldingUtf8Bytes) {
  const CharTokenizer t("ab\xC3\xA9");  // "é" is two tokens
  auto ids = t.encode("a\xC3\xA9");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{0, 2, 3}));
  StreamDecoder d(t);
  EXPECT_EQ(d.feed(0), "a");
  EXPECT_EQ(d.feed(2), "");
  EXPECT_EQ(d.feed(3), "\xC3\xA9");
  EXPECT_EQ(d.finish(), "");
}

TEST(Tokenizer, FingerprintsTellTokenizersApart) {
  const std::string fp = CharTokenizer(kAlphabet).fingerprint();
  EXPECT_EQ(fp.size(), 64u);
  EXPECT_EQ(fp.find_first_not_of("0123456789abcdef"), std::string::npos) << fp;
  EXPECT_EQ(CharTokenizer(std::string(kAlphabet)).fingerprint(), fp);
  EXPECT_EQ(CharTokenizer(kAlphabet).clone()->fingerprint(), fp);
  EXPECT_NE(CharTokenizer("_!>ABCDEFGHIJKLMNOPQRSTUVWXYz").fingerprint(), fp);  // one character
  EXPECT_NE(CharTokenizer("!_>ABCDEFGHIJKLMNOPQRSTUVWXYZ").fingerprint(), fp);  // order
  EXPECT_NE(CharTokenizer("_!>ABCDEFGHIJKLMNOPQRSTUVWXY").fingerprint(), fp);   // one fewer
  // The same bytes under another type, or other special ids, encode differently.
  const std::vector<std::string> letters = {"a", "b"};
  EXPECT_NE(PiecesTokenizer(letters).fingerprint(), CharTokenizer("ab").fingerprint());
  SpecialTokens eos1, bos1;
  eos1.eos = 1, bos1.bos = 1;
  EXPECT_NE(PiecesTokenizer(letters, eos1).fingerprint(), PiecesTokenizer(letters).fingerprint());
  EXPECT_NE(PiecesTokenizer(letters, eos1).fingerprint(), PiecesTokenizer(letters, bos1).fingerprint());
  // Token boundaries count: "ab" + "c" is not "a" + "bc".
  EXPECT_NE(PiecesTokenizer({"ab", "c"}).fingerprint(), PiecesTokenizer({"a", "bc"}).fingerprint());
}

TEST(Tokenizer, JsonRoundTrip) {
  const CharTokenizer t(">01");
  const json j = tokenizer_to_json(t);
  EXPECT_EQ(j, (json{{"type", "chars"}, {"alphabet", ">01"}}));
  auto back = tokenizer_from_json(j, "c.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ((*back)->type(), "chars");
  EXPECT_EQ((*back)->fingerprint(), t.fingerprint());
}

TEST(Tokenizer, JsonErrorsNameTheFileAndKey) {
  auto expect_bad = [](const json& j, const std::string& want) {
    auto r = tokenizer_from_json(j, "/x/config.json");
    ASSERT_FALSE(r.ok()) << j.dump();
    EXPECT_EQ(r.error().message.rfind("/x/config.json: ", 0), 0u) << r.error().message;
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
  };
  expect_bad(json{{"type", "bpe"}}, "key 'tokenizer.file': missing");
  expect_bad(json{{"type", "bpe"}, {"file", "../tokenizer.json"}}, "key 'tokenizer.file': must be a file name");
  expect_bad(json{{"type", "words"}}, "key 'tokenizer.type': \"words\" is not supported");
  expect_bad(json{{"alphabet", "ab"}}, "key 'tokenizer.type': missing");
  expect_bad(json{{"type", "chars"}}, "key 'tokenizer.alphabet': missing");
  expect_bad(json{{"type", "chars"}, {"alphabet", ""}}, "key 'tokenizer.alphabet'");
  expect_bad(json{{"type", "chars"}, {"alphabet", 3}}, "key 'tokenizer.alphabet'");
  expect_bad(json::array(), "key 'tokenizer': must be an object");
}

// config.json as the first checkpoints and run stores wrote it, by hand: it loads with its chars
// tokenizer, and the tokenizer writes back to the same object.
constexpr const char* kTodayConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 3, "hidden_size": 8,
  "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
  "head_dim": 4, "hidden_act": "silu", "max_position_embeddings": 17, "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0, "tie_word_embeddings": false, "attention_bias": false, "mlp_bias": false,
  "torch_dtype": "float32", "tokenizer": {"type": "chars", "alphabet": ">01"},
  "free_transformer": {"latent_bits": 1, "inject_after_layer": 1}
})";

TEST(Tokenizer, ConfigJsonInTheFirstFormLoadsWithItsTokenizer) {
  test::TempDir dir("ftx_tok_");
  std::ofstream(dir / "config.json") << kTodayConfig;
  std::shared_ptr<const Tokenizer> tokenizer;
  auto cfg = load_checkpoint_config(dir.path(), &tokenizer);
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_EQ(cfg->vocab_size, 3);
  EXPECT_EQ(cfg->latent_bits, 1);
  ASSERT_TRUE(tokenizer);
  EXPECT_EQ(tokenizer->type(), "chars");
  EXPECT_EQ(tokenizer->fingerprint(), CharTokenizer(">01").fingerprint());
  EXPECT_EQ(*tokenizer->encode(">10"), (std::vector<int32_t>{0, 2, 1}));
  EXPECT_EQ(config_to_json(*cfg, tokenizer.get())["tokenizer"], json::parse(kTodayConfig)["tokenizer"]);
}

TEST(Tokenizer, ConfigJsonWithoutTokenizerLoadsWithNone) {
  json j = json::parse(kTodayConfig);
  j.erase("tokenizer");
  std::shared_ptr<const Tokenizer> tokenizer = std::make_shared<CharTokenizer>("ab");
  auto cfg = config_from_json(j, "c.json", &tokenizer);
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_FALSE(tokenizer);
  EXPECT_FALSE(config_to_json(*cfg).contains("tokenizer"));
}

}  // namespace
