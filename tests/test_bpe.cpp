// test_bpe: the byte-level BPE tokenizer (core/text/bpe_tokenizer.h) against Hugging Face
// tokenizers' ids on the same tokenizer.json files, and against the GGUF vocabulary of SmolLM2.
// The fixtures (tests/fixtures/real/tok_*) are written by make_tokenizer_fixtures.py with
// `tokenizers` as the independent reference: SmolLM2's tokenizer.json rebuilt from its GGUF
// metadata, small tokenizers trained with each family's exact pipeline (Llama 3, GPT-2, Qwen2,
// SmolLM) and variants exercising Split behaviours, added-token flags, prefix spaces and unk.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/io/gguf.h"
#include "core/io/gguf_llama.h"
#include "core/text/bpe_tokenizer.h"
#include "core/text/tokenizer_json.h"
#include "core/text/unicode_text.h"
#include "tests/real_model.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

using json = nlohmann::json;

const std::string kRealDir = FTX_FIXTURE_DIR "/real/";

json load_json(const std::string& name) {
  const std::string text = test::read_file(kRealDir + name);
  EXPECT_FALSE(text.empty()) << kRealDir + name << ": missing (run make_tokenizer_fixtures.py)";
  return text.empty() ? json() : json::parse(text);
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> c = load_json("tok_corpus.json").get<std::vector<std::string>>();
  return c;
}

const json& fixture_ids() {
  static const json ids = load_json("tok_ids.json");
  return ids;
}

std::vector<int32_t> expected_ids(const std::string& tokenizer, size_t sample) {
  return fixture_ids()["ids"][tokenizer][sample].get<std::vector<int32_t>>();
}

// A sample for a failure message: control bytes escaped, cut after 80 bytes.
std::string show(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += c < 0x20 || c == 0x7F ? std::string(buf) : std::string(1, static_cast<char>(c));
  }
  return out + (s.size() > 80 ? "..." : "");
}

std::unique_ptr<BpeTokenizer> load_tokenizer_json(const std::string& name) {
  auto t = bpe_from_tokenizer_json(kRealDir + "tok_" + name + ".json");
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return t.ok() ? std::move(*t) : nullptr;
}

BpeVocab smollm2_vocab() {
  const json j = load_json("tok_smollm2_vocab.json");
  BpeVocab v;
  v.tokens = j["tokens"].get<std::vector<std::string>>();
  v.token_types = j["token_types"].get<std::vector<int32_t>>();
  v.merges = j["merges"].get<std::vector<std::string>>();
  v.pre = j["pre"].get<std::string>();
  v.special = {j["bos"].get<int32_t>(), j["eos"].get<int32_t>(), j["pad"].get<int32_t>()};
  v.add_bos = j["add_bos"].get<bool>();
  return v;
}

std::unique_ptr<BpeTokenizer> smollm2_from_vocab() {
  auto t = bpe_from_vocab(smollm2_vocab(), "SmolLM2-135M-Instruct.Q4_1.gguf");
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<int32_t> encode_ok(const Tokenizer& t, const std::string& text) {
  auto r = t.encode(text);
  EXPECT_TRUE(r.ok()) << show(text) << ": " << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : std::vector<int32_t>{};
}

// Every corpus sample gives the reference's ids, except the samples in `skip` (text -> why).
void expect_corpus_ids(const Tokenizer& t, const std::string& reference,
                       const std::map<std::string, std::string>& skip = {}) {
  size_t compared = 0;
  for (size_t i = 0; i < corpus().size(); ++i) {
    if (skip.count(corpus()[i])) continue;
    EXPECT_EQ(encode_ok(t, corpus()[i]), expected_ids(reference, i))
        << reference << " sample " << i << ": \"" << show(corpus()[i]) << "\"";
    ++compared;
  }
  EXPECT_GT(compared, 60u);
}

// SmolLM2's tokenizer test vectors (docs/reference_formats.md, E4): parse_special on, no BOS;
// checked against tokenizers.
const std::vector<std::pair<std::string, std::vector<int32_t>>> kSmolLM2Vectors = {
    {"Hello, we can use", {19556, 28, 392, 416, 722}},
    {"The capital of France is", {504, 3575, 282, 4649, 314}},
    {"Hello world! 123", {19556, 905, 17, 216, 33, 34, 35}},
    {"  multiple   spaces", {216, 2701, 256, 5600}},
    {"a   1", {81, 333, 33}},
    {"x=12345;\n\n  y", {104, 45, 33, 34, 35, 36, 37, 43, 8866, 329}},
    {"Café déjà vu.", {51, 1939, 2756, 32564, 90, 16739, 386, 101, 30}},
    {"<|im_start|>user\nHi<|im_end|>\n", {1, 4093, 198, 26843, 2, 198}},
    {"😀 emoji", {10813, 242, 218, 649, 33777}},
    {"\x04"
     "ctrl",
     {39673}},
};

TEST(Bpe, SmolLM2TokenizerJsonMatchesTokenizers) {
  auto t = load_tokenizer_json("smollm2");
  ASSERT_TRUE(t);
  expect_corpus_ids(*t, "smollm2");
  for (const auto& [text, ids] : kSmolLM2Vectors) EXPECT_EQ(encode_ok(*t, text), ids) << show(text);
}

TEST(Bpe, SmolLM2GgufVocabularyMatchesTokenizers) {
  auto t = smollm2_from_vocab();
  ASSERT_TRUE(t);
  // Where llama.cpp (whose rules bpe_from_vocab follows) and tokenizers differ: a byte without a
  // token stays a symbol that merges with nothing in llama.cpp, while tokenizers drops it first
  // and lets its neighbours merge ("!\x04!" -> "!!").
  const std::string tokenless = "Wow!\x04!\x04! and !!\x13!!";
  expect_corpus_ids(*t, "smollm2", {{tokenless, "bytes without a token"}});
  EXPECT_EQ(encode_ok(*t, tokenless), (std::vector<int32_t>{32373, 17, 17, 17, 284, 5728, 17, 10095}));
  for (const auto& [text, ids] : kSmolLM2Vectors) EXPECT_EQ(encode_ok(*t, text), ids) << show(text);
}

TEST(Bpe, SmolLM2GgufVocabularyMatchesLlamaCpp) {
  // llama.cpp's own ids for the GGUF file (llama-tokenize, parse_special on, no BOS): every sample,
  // the tokenless bytes included.
  auto t = smollm2_from_vocab();
  ASSERT_TRUE(t);
  const json llama = load_json("tok_ids_llamacpp.json");
  ASSERT_EQ(llama["ids"].size(), corpus().size());
  for (size_t i = 0; i < corpus().size(); ++i)
    EXPECT_EQ(encode_ok(*t, corpus()[i]), llama["ids"][i].get<std::vector<int32_t>>())
        << "sample " << i << ": \"" << show(corpus()[i]) << "\"";
}

// A trained tokenizer.json as GGUF vocabulary lists, as make_tokenizer_fixtures.py's gguf_vocab_of
// makes them: tokens by id, added special tokens CONTROL, other added tokens USER_DEFINED.
BpeVocab vocab_of_tokenizer_json(const std::string& name) {
  const json j = load_json("tok_" + name + ".json");
  std::map<int32_t, std::pair<std::string, int32_t>> by_id;  // id -> (token, type)
  for (const auto& [token, id] : j["model"]["vocab"].items()) by_id[id.get<int32_t>()] = {token, 1};
  for (const json& a : j["added_tokens"])
    by_id[a["id"].get<int32_t>()] = {a["content"].get<std::string>(), a["special"].get<bool>() ? 3 : 4};
  BpeVocab v;
  for (const auto& [id, tt] : by_id) {
    EXPECT_EQ(id, static_cast<int32_t>(v.tokens.size()));
    v.tokens.push_back(tt.first);
    v.token_types.push_back(tt.second);
  }
  for (const json& m : j["model"]["merges"])
    v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  return v;
}

TEST(Bpe, GgufPreTypesMatchLlamaCpp) {
  // Vocab-only GGUF files with other tokenizer.ggml.pre values, tokenized by llama.cpp: each pre
  // type's regexes, llama3's ignore_merges (the trained llama3 vocabulary has whole words without
  // merges), and CONTROL / USER_DEFINED tokens of the trained families.
  const json fixture = load_json("tok_ids_llamacpp_pre.json");
  ASSERT_GE(fixture["cases"].size(), 10u);
  for (const json& c : fixture["cases"]) {
    const std::string vocab_name = c["vocab"].get<std::string>(), pre = c["pre"].get<std::string>();
    SCOPED_TRACE(vocab_name + " with pre " + pre);
    BpeVocab v = vocab_name == "smollm2" ? smollm2_vocab() : vocab_of_tokenizer_json(vocab_name);
    v.pre = pre;
    v.special = {};
    v.add_bos = false;
    auto t = bpe_from_vocab(v, vocab_name + ".gguf");
    ASSERT_TRUE(t.ok()) << t.error().message;
    ASSERT_EQ(c["ids"].size(), corpus().size());
    for (size_t i = 0; i < corpus().size(); ++i)
      EXPECT_EQ(encode_ok(**t, corpus()[i]), c["ids"][i].get<std::vector<int32_t>>())
          << "sample " << i << ": \"" << show(corpus()[i]) << "\"";
  }
}

TEST(Bpe, SmolLM2SpecialTokens) {
  auto from_json = load_tokenizer_json("smollm2");
  auto from_vocab = smollm2_from_vocab();
  ASSERT_TRUE(from_json && from_vocab);
  for (const BpeTokenizer* t : {from_json.get(), from_vocab.get()}) {
    EXPECT_EQ(t->type(), "bpe");
    EXPECT_EQ(t->vocab_size(), 49152);
    EXPECT_FALSE(t->add_bos());
    EXPECT_EQ(t->token_id("<|im_end|>"), 2);
    EXPECT_EQ(t->token_id("Ġt"), 252);  // the first merge's result
    EXPECT_EQ(t->token_id("no such token"), std::nullopt);
    for (int32_t id = 0; id < 17; ++id) EXPECT_TRUE(t->is_special(id)) << id;
    EXPECT_FALSE(t->is_special(17));
    EXPECT_FALSE(t->is_special(-1));
    EXPECT_FALSE(t->is_special(49152));
    EXPECT_EQ(t->token_bytes(1), "<|im_start|>");
    EXPECT_EQ(t->token_bytes(252), " t");
    EXPECT_EQ(t->token_bytes(198), "\n");
    EXPECT_EQ(t->token_bytes(49152), "\xEF\xBF\xBD");
    EXPECT_EQ(t->token_bytes(-5), "\xEF\xBF\xBD");
  }
  EXPECT_EQ(from_vocab->special_tokens(), (SpecialTokens{1, 2, 2}));
  // tokenizer.json has no bos/eos of its own and no tokenizer_config.json lies beside the
  // fixture: EOS is the first usual end-of-text token.
  EXPECT_EQ(from_json->special_tokens(), (SpecialTokens{std::nullopt, 0, std::nullopt}));
}

TEST(Bpe, TrainedFamiliesMatchTokenizers) {
  for (const auto& [name, ids] : fixture_ids()["ids"].items()) {
    if (name == "smollm2") continue;
    SCOPED_TRACE(name);
    auto t = load_tokenizer_json(name);
    ASSERT_TRUE(t);
    expect_corpus_ids(*t, name);
  }
}

TEST(Bpe, PostProcessorTemplateGivesBos) {
  for (const auto& [name, bos] : fixture_ids()["bos"].items()) {
    SCOPED_TRACE(name);
    auto t = load_tokenizer_json(name);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->add_bos(), !bos.is_null());
    if (!bos.is_null()) {
      EXPECT_EQ(t->special_tokens().bos, bos.get<int32_t>());
    }
  }
  auto llama3 = load_tokenizer_json("llama3");
  ASSERT_TRUE(llama3);
  EXPECT_TRUE(llama3->add_bos());
  EXPECT_EQ(llama3->special_tokens().bos, llama3->token_id("<|begin_of_text|>"));
  EXPECT_EQ(llama3->special_tokens().eos, llama3->token_id("<|end_of_text|>"));
}

TEST(Bpe, TokenizerConfigBesideTheFileNamesSpecialTokens) {
  test::TempDir dir;
  ASSERT_TRUE(test::write_file(dir / "tokenizer.json", test::read_file(kRealDir + "tok_smollm2.json")));
  ASSERT_TRUE(test::write_file(dir / "tokenizer_config.json",
                               R"({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"},
                                   "pad_token": "<|im_end|>"})"));
  auto t = bpe_from_tokenizer_json(dir / "tokenizer.json");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ((*t)->special_tokens(), (SpecialTokens{1, 2, 2}));
  EXPECT_FALSE((*t)->add_bos());
  ASSERT_TRUE(test::write_file(dir / "tokenizer_config.json", "{not json"));
  auto bad = bpe_from_tokenizer_json(dir / "tokenizer.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("tokenizer_config.json"), std::string::npos) << bad.error().message;
}

TEST(Bpe, LegacyAndPairMergesLoadAlike) {
  json j = load_json("tok_llama3.json");
  ASSERT_TRUE(j["model"]["merges"][0].is_array());
  json legacy = j;
  for (json& m : legacy["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  test::TempDir dir;
  ASSERT_TRUE(test::write_file(dir / "pairs.json", j.dump()));
  ASSERT_TRUE(test::write_file(dir / "legacy.json", legacy.dump()));
  auto pairs = bpe_from_tokenizer_json(dir / "pairs.json");
  auto strings = bpe_from_tokenizer_json(dir / "legacy.json");
  ASSERT_TRUE(pairs.ok() && strings.ok());
  EXPECT_EQ((*pairs)->fingerprint(), (*strings)->fingerprint());
  for (const std::string& s : corpus()) EXPECT_EQ(encode_ok(**strings, s), encode_ok(**pairs, s)) << show(s);
  expect_corpus_ids(**strings, "llama3");
}

// The samples whose every byte has a token in `t` (the others lose bytes by design).
bool every_byte_has_a_token(const BpeTokenizer& t, const std::string& s) {
  for (char c : s)
    if (!t.token_id(text::byte_spelling(static_cast<uint8_t>(c)))) return false;
  return true;
}

TEST(Bpe, DecodeInvertsEncode) {
  // Not the variants whose pre-tokenizer removes or adds text or whose added tokens strip spaces.
  for (const char* name : {"smollm2", "llama3", "gpt2", "qwen2", "smollm"}) {
    SCOPED_TRACE(name);
    auto t = load_tokenizer_json(name);
    ASSERT_TRUE(t);
    size_t checked = 0;
    for (const std::string& s : corpus()) {
      if (!every_byte_has_a_token(*t, s)) continue;
      std::string want = std::string(name) == "qwen2" ? text::nfc(s) : s;  // qwen2 normalizes to NFC
      EXPECT_EQ(t->decode(encode_ok(*t, s)), want) << show(s);
      ++checked;
    }
    EXPECT_GT(checked, 60u);
  }
  auto smollm2 = smollm2_from_vocab();
  ASSERT_TRUE(smollm2);
  EXPECT_EQ(smollm2->decode(encode_ok(*smollm2,
                                      "\x04"
                                      "ctrl")),
            "ctrl");  // 0x04 has no token
}

TEST(Bpe, StreamDecoderYieldsSplitCharactersWhole) {
  auto t = smollm2_from_vocab();
  ASSERT_TRUE(t);
  const std::string text = "Emoji 👨‍👩‍👧‍👦🇫🇷 and 你好，世界 and Ελληνικά 🤖!";
  const std::vector<int32_t> ids = encode_ok(*t, text);
  size_t partial = 0;  // tokens that are not whole UTF-8 on their own: what the decoder must hold back
  StreamDecoder dec(*t);
  std::string streamed;
  for (int32_t id : ids) {
    partial += text::utf8_invalid_offset(t->token_bytes(id)) != std::string_view::npos;
    const std::string piece = dec.feed(id);
    EXPECT_EQ(text::utf8_invalid_offset(piece), std::string_view::npos) << "token " << id;
    streamed += piece;
  }
  streamed += dec.finish();
  EXPECT_GT(partial, 3u);
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(t->decode(ids), text);
}

TEST(Bpe, SpecialTokensAreHardBoundaries) {
  // Encoding pieces joined by a special token equals encoding each piece: also exercises the
  // per-call cache of repeated pieces across fragments.
  auto t = smollm2_from_vocab();
  ASSERT_TRUE(t);
  std::string joined;
  std::vector<int32_t> want;
  for (int rep = 0; rep < 3; ++rep) {
    for (size_t i = 0; i < corpus().size(); ++i) {
      joined += corpus()[i] + "<|endoftext|>";
      const auto ids = encode_ok(*t, corpus()[i]);
      want.insert(want.end(), ids.begin(), ids.end());
      want.push_back(0);
    }
  }
  EXPECT_EQ(encode_ok(*t, joined), want);
}

TEST(Bpe, EncodeIsThreadSafe) {
  auto t = load_tokenizer_json("qwen2");
  ASSERT_TRUE(t);
  std::vector<std::vector<int32_t>> want;
  for (const std::string& s : corpus()) want.push_back(encode_ok(*t, s));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < corpus().size(); ++i) {
          auto r = t->encode(corpus()[i]);
          mismatches[k] += !r.ok() || *r != want[i];
        }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(Bpe, AddedTokenFlags) {
  auto t = load_tokenizer_json("added_tokens");
  ASSERT_TRUE(t);
  const int32_t mask = *t->token_id("<mask>"), sep = *t->token_id("[SEP]"), ing = *t->token_id("ing");
  const int32_t hello_world = *t->token_id("hello world"), omega = *t->token_id("\u03a9mega");
  // lstrip takes the spaces before <mask>, rstrip those after [SEP].
  EXPECT_EQ(encode_ok(*t, "   <mask>"), std::vector<int32_t>{mask});
  EXPECT_EQ(encode_ok(*t, "[SEP] \t "), std::vector<int32_t>{sep});
  EXPECT_EQ(t->token_bytes(hello_world), "hello world");  // a raw space: the content as it is
  EXPECT_EQ(encode_ok(*t, "hello world"), std::vector<int32_t>{hello_world});
  EXPECT_EQ(encode_ok(*t, "ing"), std::vector<int32_t>{ing});  // single_word: alone
  const auto singing = encode_ok(*t, "singing");
  EXPECT_EQ(std::count(singing.begin(), singing.end(), ing), 0);        // not inside a word
  EXPECT_EQ(encode_ok(*t, "\u2126mega"), std::vector<int32_t>{omega});  // normalized: matched after NFC
  // A normalized token whose content is not NFC is matched, and decoded, as its NFC form.
  const int32_t ohm = *t->token_id("\u2126hm");
  EXPECT_EQ(encode_ok(*t, "\u2126hm"), std::vector<int32_t>{ohm});
  EXPECT_EQ(encode_ok(*t, "\u03a9hm"), std::vector<int32_t>{ohm});
  EXPECT_EQ(t->token_bytes(ohm), "\u03a9hm");
  EXPECT_FALSE(t->is_special(hello_world));
  EXPECT_TRUE(t->is_special(mask));
}

TEST(Bpe, EncodeRefusesInvalidUtf8) {
  auto t = load_tokenizer_json("gpt2");
  ASSERT_TRUE(t);
  const std::pair<std::string, std::string> cases[] = {
      {"ab\xff", "byte 0xff at position 2"},          {"\xc0\x80", "byte 0xc0 at position 0"},
      {"ok \xed\xa0\x80", "byte 0xed at position 3"}, {"\xe4\xb8", "byte 0xe4 at position 0"},
      {"x\x80", "byte 0x80 at position 1"},           {"\xf4\x90\x80\x80", "byte 0xf4 at position 0"}};
  for (const auto& [text, want] : cases) {
    auto r = t->encode(text);
    ASSERT_FALSE(r.ok()) << show(text);
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
  }
  EXPECT_TRUE(encode_ok(*t, "").empty());
}

TEST(Bpe, FingerprintsTellTokenizersApart) {
  auto a = load_tokenizer_json("gpt2");
  auto b = load_tokenizer_json("gpt2");
  auto c = load_tokenizer_json("prefix_space");  // same vocabulary and merges, another pre-tokenizer
  auto d = load_tokenizer_json("llama3");
  auto v = smollm2_from_vocab();
  auto j = load_tokenizer_json("smollm2");
  ASSERT_TRUE(a && b && c && d && v && j);
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  EXPECT_EQ(a->clone()->fingerprint(), a->fingerprint());
  EXPECT_NE(a->fingerprint(), c->fingerprint());
  EXPECT_NE(a->fingerprint(), d->fingerprint());
  EXPECT_NE(v->fingerprint(), j->fingerprint());  // llama.cpp's rules and tokenizers' differ at the edges
  auto copy = v->clone();
  EXPECT_EQ(copy->encode("Hello world! 123").value(), v->encode("Hello world! 123").value());
}

// ---- bad files --------------------------------------------------------------------------------

// A small valid tokenizer.json: bytes a b c and space, merges a+b, ab+c, one special token.
json tiny_tokenizer() {
  return json::parse(R"({
    "version": "1.0",
    "added_tokens": [{"id": 6, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null,
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "fuse_unk": false, "byte_fallback": false,
              "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "Ġ": 5},
              "merges": [["a", "b"], ["ab", "c"]]}})");
}

TEST(Bpe, TinyTokenizerWorks) {
  test::TempDir dir;
  ASSERT_TRUE(test::write_file(dir / "t.json", tiny_tokenizer().dump()));
  auto t = bpe_from_tokenizer_json(dir / "t.json");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ((*t)->vocab_size(), 7);
  EXPECT_EQ(encode_ok(**t, "abc ab<s>cab"), (std::vector<int32_t>{4, 5, 3, 6, 2, 3}));
  EXPECT_EQ(encode_ok(**t, "xyz"), std::vector<int32_t>{});  // bytes without tokens are dropped
}

TEST(Bpe, PathologicalRegexIsAnEncodeErrorNotAHang) {
  json j = tiny_tokenizer();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "(x+x+)+y"}}}, {"behavior", "Isolated"}, {"invert", false}},
        j["pre_tokenizer"]}}};
  test::TempDir dir;
  ASSERT_TRUE(test::write_file(dir / "t.json", j.dump()));
  auto t = bpe_from_tokenizer_json(dir / "t.json");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_TRUE((*t)->encode("xxy abc").ok());
  auto r = (*t)->encode(std::string(40, 'x') + "z y");  // exponential backtracking: PCRE2's match limit
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("pre-tokenizer regex '(x+x+)+y' gave up"), std::string::npos) << r.error().message;
}

TEST(Bpe, BadTokenizerJsonIsOneLineError) {
  using Edit = std::function<void(json&)>;
  const std::vector<std::tuple<std::string, Edit, std::string>> cases = {
      {"merge of one part", [](json& j) { j["model"]["merges"][0] = "ab"; }, "model.merges[0]"},
      {"merge of three parts", [](json& j) { j["model"]["merges"][0] = "a b c"; }, "not two tokens"},
      {"merge part not in vocab",
       [](json& j) {
         j["model"]["merges"][1] = {"ab", "z"};
       },
       "'z' is not in model.vocab"},
      {"merged token not in vocab",
       [](json& j) {
         j["model"]["merges"].push_back({"c", "a"});
       },
       "the merged 'ca'"},
      {"mixed merge forms", [](json& j) { j["model"]["merges"][1] = "ab c"; }, "mixes"},
      {"missing model", [](json& j) { j.erase("model"); }, "model: missing"},
      {"WordPiece model", [](json& j) { j["model"]["type"] = "WordPiece"; }, "model type 'WordPiece'"},
      {"byte fallback", [](json& j) { j["model"]["byte_fallback"] = true; }, "SentencePiece-style"},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, "dropout"},
      {"Metaspace",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       "pre-tokenizer type 'Metaspace'"},
      {"no ByteLevel",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", true}};
       },
       "no ByteLevel step"},
      {"invalid regex",
       [](json& j) {
         j["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}, {"invert", false}},
               j["pre_tokenizer"]}}};
       },
       "pre_tokenizer.pretokenizers[0].pattern: invalid regex '(unclosed'"},
      {"bad behavior",
       [](json& j) {
         j["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              {{{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Sideways"}}, j["pre_tokenizer"]}}};
       },
       "behavior"},
      {"duplicate ids", [](json& j) { j["model"]["vocab"]["c"] = 1; }, "is also the id of"},
      {"non-contiguous ids", [](json& j) { j["model"]["vocab"]["Ġ"] = 1000000; }, "no token has id 5"},
      {"huge id", [](json& j) { j["added_tokens"][0]["id"] = 4000000000LL; }, "id must be an integer"},
      {"added token disagrees with vocab",
       [](json& j) {
         j["added_tokens"].push_back({{"id", 7}, {"content", "ab"}, {"special", true}});
       },
       "model.vocab gives it 3"},
      {"added token takes a vocab id", [](json& j) { j["added_tokens"][0]["id"] = 2; }, "is also the id of 'c'"},
      {"normalizer",
       [](json& j) {
         j["normalizer"] = {{"type", "Lowercase"}};
       },
       "normalizer type 'Lowercase'"},
      {"decoder",
       [](json& j) {
         j["decoder"] = {{"type", "Metaspace"}};
       },
       "decoder type 'Metaspace'"},
      {"no decoder", [](json& j) { j.erase("decoder"); }, "decoder: missing"},
      {"post-processor",
       [](json& j) {
         j["post_processor"] = {{"type", "BertProcessing"}};
       },
       "'BertProcessing'"},
      {"template without ids",
       [](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}},
                                {"special_tokens", json::object()}};
       },
       "has no single id"},
      {"version", [](json& j) { j["version"] = "2.0"; }, "version"},
      {"not an object", [](json& j) { j = json::array(); }, "must be a JSON object"},
      {"vocab not an object", [](json& j) { j["model"]["vocab"] = json::array(); }, "model.vocab"},
      {"flag not a bool", [](json& j) { j["model"]["ignore_merges"] = "yes"; }, "model.ignore_merges"},
  };
  test::TempDir dir;
  for (const auto& [what, edit, want] : cases) {
    SCOPED_TRACE(what);
    json j = tiny_tokenizer();
    edit(j);
    const std::string path = dir / "tokenizer.json";
    ASSERT_TRUE(test::write_file(path, j.dump()));
    auto t = bpe_from_tokenizer_json(path);
    ASSERT_FALSE(t.ok());
    const std::string& m = t.error().message;
    EXPECT_EQ(m.rfind(path + ": ", 0), 0u) << m;
    EXPECT_NE(m.find(want), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  for (const std::string& text : {std::string("{\"model\": "), std::string("not json at all"), std::string()}) {
    ASSERT_TRUE(test::write_file(dir / "broken.json", text));
    auto t = bpe_from_tokenizer_json(dir / "broken.json");
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().message.find(dir / "broken.json"), std::string::npos) << t.error().message;
    EXPECT_EQ(t.error().message.find('\n'), std::string::npos) << t.error().message;
  }
  auto missing = bpe_from_tokenizer_json(dir / "absent.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find(dir / "absent.json"), std::string::npos);
}

TEST(Bpe, BadVocabIsOneLineError) {
  const BpeVocab good = [] {
    BpeVocab v;
    v.tokens = {"<|endoftext|>", "a", "b", "ab", "Ġ"};
    v.token_types = {3, 1, 1, 1, 1};
    v.merges = {"a b"};
    v.pre = "smollm";
    v.special = {0, 0, std::nullopt};
    return v;
  }();
  ASSERT_TRUE(bpe_from_vocab(good, "m.gguf").ok());
  using Edit = std::function<void(BpeVocab&)>;
  const std::vector<std::tuple<std::string, Edit, std::string>> cases = {
      {"unknown pre type", [](BpeVocab& v) { v.pre = "mystery-7b"; }, "pre-tokenizer type 'mystery-7b'"},
      {"merge without a space", [](BpeVocab& v) { v.merges = {"ab"}; }, "merge 0 'ab': not two tokens"},
      {"merge of a missing token", [](BpeVocab& v) { v.merges.push_back("ab z"); },
       "merge 1 'ab z': 'z' is not a token"},
      {"merged token missing", [](BpeVocab& v) { v.merges.push_back("b a"); }, "the merged 'ba'"},
      {"duplicate token", [](BpeVocab& v) { v.tokens[2] = v.tokens[1]; }, "token 2 'a': also token 1"},
      {"empty token", [](BpeVocab& v) { v.tokens[4].clear(); }, "token 4 is empty"},
      {"invalid UTF-8 token", [](BpeVocab& v) { v.tokens[4] = std::string(1, static_cast<char>(0xff)); },
       "not valid UTF-8"},
      {"type count", [](BpeVocab& v) { v.token_types.pop_back(); }, "4 token types for 5 tokens"},
      {"bos outside", [](BpeVocab& v) { v.special.bos = 5; }, "bos id 5 is outside"},
      {"no tokens", [](BpeVocab& v) { v.tokens.clear(); }, "no tokens"},
      {"add_bos without bos",
       [](BpeVocab& v) {
         v.special.bos.reset();
         v.add_bos = true;
       },
       "add_bos"},
  };
  for (const auto& [what, edit, want] : cases) {
    SCOPED_TRACE(what);
    BpeVocab v = good;
    edit(v);
    auto t = bpe_from_vocab(v, "m.gguf");
    ASSERT_FALSE(t.ok());
    const std::string& m = t.error().message;
    EXPECT_EQ(m.rfind("m.gguf: tokenizer: ", 0), 0u) << m;
    EXPECT_NE(m.find(want), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(Bpe, PreTypesOfTheGgufReader) {
  BpeVocab v = smollm2_vocab();
  for (const char* pre : {"default", "", "gpt2", "gpt-2", "llama-bpe", "llama3", "qwen2", "smollm", "starcoder"}) {
    v.pre = pre;
    auto t = bpe_from_vocab(v, "m.gguf");
    ASSERT_TRUE(t.ok()) << pre << ": " << t.error().message;
    EXPECT_FALSE(encode_ok(**t, "Hello world 12345 it's here").empty());
  }
  // The pre type decides the pieces: the digit pass of smollm and llama3's 1-3 digit groups.
  v.pre = "smollm";
  auto smollm = std::move(*bpe_from_vocab(v, "m.gguf"));
  v.pre = "gpt2";
  auto gpt2 = std::move(*bpe_from_vocab(v, "m.gguf"));
  EXPECT_EQ(encode_ok(*smollm, "a   1"), (std::vector<int32_t>{81, 333, 33}));
  EXPECT_EQ(encode_ok(*gpt2, "a   1"), (std::vector<int32_t>{81, 256, 216, 33}));  // no digit pass
}

// ---- writing a tokenizer back (BpeTokenizer::to_tokenizer_json) --------------------------------

// `t` written and read back: the same fingerprint, special ids, add_bos and ids on every corpus
// sample; writing the copy gives the same text.
void expect_round_trip(const BpeTokenizer& t, const std::string& what) {
  SCOPED_TRACE(what);
  const std::string text = t.to_tokenizer_json();
  auto back = bpe_from_tokenizer_json_text(text, what + ".json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ((*back)->fingerprint(), t.fingerprint());
  EXPECT_EQ((*back)->special_tokens(), t.special_tokens());
  EXPECT_EQ((*back)->add_bos(), t.add_bos());
  EXPECT_EQ((*back)->vocab_size(), t.vocab_size());
  for (size_t i = 0; i < corpus().size(); ++i) {
    auto a = t.encode(corpus()[i]), b = (*back)->encode(corpus()[i]);
    ASSERT_EQ(a.ok(), b.ok()) << "sample " << i;
    if (a.ok()) {
      EXPECT_EQ(*a, *b) << "sample " << i << ": \"" << show(corpus()[i]) << "\"";
    }
  }
  EXPECT_EQ((*back)->to_tokenizer_json(), text);
}

TEST(BpeWrite, TokenizerJsonFixturesRoundTrip) {
  for (const std::string name :
       {"gpt2", "llama3", "qwen2", "smollm", "smollm2", "added_tokens", "prefix_space", "prefix_space_split",
        "split_contiguous_removed", "split_invert", "split_lines_anchors", "split_merged_next", "split_merged_previous",
        "unk_fused", "unk_unfused"}) {
    auto t = load_tokenizer_json(name);
    ASSERT_TRUE(t);
    expect_round_trip(*t, name);
  }
}

TEST(BpeWrite, GgufVocabulariesRoundTripWithLlamaCppRules) {
  auto smol = smollm2_from_vocab();
  ASSERT_TRUE(smol);
  expect_round_trip(*smol, "smollm2 gguf");
  for (const auto& [text, ids] : kSmolLM2Vectors) {
    auto back = bpe_from_tokenizer_json_text(smol->to_tokenizer_json(), "s.json");
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(encode_ok(**back, text), ids) << show(text);
  }
  for (const std::string pre : {"llama-bpe", "gpt2", "qwen2", "falcon", "default"}) {
    BpeVocab v = vocab_of_tokenizer_json("added_tokens");
    v.pre = pre;
    auto t = bpe_from_vocab(v, pre + ".gguf");
    ASSERT_TRUE(t.ok()) << t.error().message;
    expect_round_trip(**t, "gguf pre " + pre);
  }
}

TEST(BpeWrite, TheFlavourFlagIsWhatKeepsLlamaCppRules) {
  // Without its model.ftx object the file is read with tokenizers' rules: a different tokenizer.
  auto smol = smollm2_from_vocab();
  ASSERT_TRUE(smol);
  json j = json::parse(smol->to_tokenizer_json());
  EXPECT_EQ(j["model"]["ftx"]["flavor"], "llama.cpp");
  EXPECT_EQ(j["model"]["ftx"]["pre"], "smollm");
  j["model"].erase("ftx");
  auto hf = bpe_from_tokenizer_json_text(j.dump(), "plain.json");
  ASSERT_TRUE(hf.ok()) << hf.error().message;
  EXPECT_NE((*hf)->fingerprint(), smol->fingerprint());
}

TEST(BpeWrite, BadFtxObjectIsOneLineError) {
  auto smol = smollm2_from_vocab();
  ASSERT_TRUE(smol);
  const json good = json::parse(smol->to_tokenizer_json());
  auto expect_bad = [&](const std::function<void(json&)>& edit, const std::string& want) {
    json j = good;
    edit(j);
    auto r = bpe_from_tokenizer_json_text(j.dump(), "t.json");
    ASSERT_FALSE(r.ok()) << want;
    EXPECT_EQ(r.error().message.rfind("t.json: ", 0), 0u) << r.error().message;
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
  };
  expect_bad([](json& j) { j["model"]["ftx"] = 3; }, "model.ftx: must be an object");
  expect_bad([](json& j) { j["model"]["ftx"]["flavor"] = "sp"; }, "model.ftx.flavor");
  expect_bad([](json& j) { j["model"]["ftx"]["eos"] = 1 << 20; }, "model.ftx.eos");
  expect_bad([](json& j) { j["model"]["ftx"].erase("pre"); }, "model.ftx.pre");
  expect_bad([](json& j) { j["model"]["ftx"]["pre"] = "klingon"; }, "klingon");
  expect_bad(
      [](json& j) {
        j["model"]["ftx"]["token_types"] = json::array({json::array({99999999, 3})});
      },
      "model.ftx.token_types[0]");
  expect_bad([](json& j) { j["model"]["vocab"]["Ġthe"] = 0; }, "model.vocab");
}

TEST(BpeWrite, RealSmolLM2GgufRoundTrips) {
  const std::string path = test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(path);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f) << f.error().message;
  auto m = read_gguf_llama(*f);
  ASSERT_TRUE(m) << m.error().message;
  auto t = bpe_from_vocab(m->vocab, path);
  ASSERT_TRUE(t.ok()) << t.error().message;
  expect_round_trip(**t, "SmolLM2 GGUF");
  // Documents are separated by <|endoftext|> (id 0), not by the chat's eos <|im_end|> (id 2).
  EXPECT_EQ((*t)->special_tokens().eos, 2);
  EXPECT_EQ(end_of_text_id(**t), 0);
}

}  // namespace
}  // namespace ftx
