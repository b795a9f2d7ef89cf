// Byte-level BPE training (core/text/bpe_train.h): the merges against a brute-force trainer that
// recounts every pair after every merge (same tie rule) on real text, the trained tokenizer's
// round trip and compression on held-out text, independence from the order of the texts, and
// bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/text/bpe_train.h"
#include "core/text/pretokenize.h"
#include "core/text/unicode_text.h"

namespace ftx {
namespace {

std::string read(const std::string& path, size_t max) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str().substr(0, max);
}

// Real text of three kinds from files every Debian has (base-files, libpython3.11-minimal,
// libc6-dev); the test skips without them.
std::vector<std::string> sample_texts(size_t bytes_each) {
  std::vector<std::string> t;
  for (const char* p : {"/usr/share/common-licenses/GPL-3", "/usr/lib/python3.11/os.py", "/usr/include/stdio.h"})
    if (std::filesystem::exists(p)) t.push_back(read(p, bytes_each));
  return t;
}

// The merges by brute force: every pair recounted over every piece after every merge.
std::vector<std::string> brute_force_merges(const std::vector<std::string>& texts, int merges) {
  auto re = text::Regex::compile(text::kGpt2Pattern, false);
  std::map<std::string, int64_t> pieces;
  for (const std::string& t : texts) {
    std::vector<text::Span> spans;
    EXPECT_TRUE((*re)->find_matches(t, spans).ok());
    for (const auto& s : spans)
      if (s.end > s.begin) ++pieces[t.substr(s.begin, s.end - s.begin)];
  }
  std::vector<std::pair<std::vector<int>, int64_t>> words;
  for (const auto& [p, n] : pieces) {
    std::vector<int> s;
    for (unsigned char c : p) s.push_back(c);
    words.push_back({s, n});
  }
  std::vector<std::string> tok;
  for (int b = 0; b < 256; ++b) tok.emplace_back(text::byte_spelling(uint8_t(b)));
  std::vector<std::string> out;
  for (int m = 0; m < merges; ++m) {
    std::map<std::pair<int, int>, int64_t> count;
    for (const auto& [s, n] : words)
      for (size_t i = 0; i + 1 < s.size(); ++i) count[{s[i], s[i + 1]}] += n;
    std::pair<int, int> best{-1, -1};
    int64_t bn = 1;
    for (const auto& [p, n] : count)
      if (n > bn) best = p, bn = n;  // map order: ties go to the smallest pair
    if (best.first < 0) break;
    const int z = int(tok.size());
    out.push_back(tok[size_t(best.first)] + " " + tok[size_t(best.second)]);
    tok.push_back(tok[size_t(best.first)] + tok[size_t(best.second)]);
    for (auto& [s, n] : words) {
      std::vector<int> m2;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == best.first && s[i + 1] == best.second) {
          m2.push_back(z);
          ++i;
        } else {
          m2.push_back(s[i]);
        }
      }
      s = m2;
    }
  }
  return out;
}

TEST(BpeTrain, MergesEqualBruteForceOnRealText) {
  const auto texts = sample_texts(12000);
  if (texts.size() < 3) GTEST_SKIP() << "the sample files are not installed";
  BpeTrainer t;
  for (size_t i = 0; i < texts.size(); ++i) ASSERT_TRUE(t.add_text(texts[i], "text " + std::to_string(i)).ok());
  auto v = t.train(257 + 300);
  ASSERT_TRUE(v.ok()) << v.error().message;
  const auto expect = brute_force_merges(texts, 300);
  ASSERT_EQ(v->merges.size(), expect.size());
  for (size_t i = 0; i < expect.size(); ++i) ASSERT_EQ(v->merges[i], expect[i]) << "merge " << i;
  EXPECT_EQ(v->tokens.size(), 557u);
  EXPECT_EQ(v->tokens.back(), kBpeEndOfText);
  EXPECT_EQ(v->special.eos, 556);
}

TEST(BpeTrain, TrainedTokenizerRoundTripsAndCompressesHeldOutText) {
  const auto texts = sample_texts(200000);
  if (texts.size() < 3) GTEST_SKIP() << "the sample files are not installed";
  BpeTrainer t;
  // Train on the first three quarters of each text, test on the last quarter.
  std::vector<std::string> held;
  for (const std::string& s : texts) {
    size_t cut = s.size() * 3 / 4;
    while (cut < s.size() && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) ++cut;  // a character boundary
    ASSERT_TRUE(t.add_text(s.substr(0, cut), "train").ok());
    held.push_back(s.substr(cut));
  }
  auto v = t.train(1024);
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_EQ(v->tokens.size(), 1024u);
  auto tok = bpe_from_vocab(*v, "trained");
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ((*tok)->vocab_size(), 1024);
  for (const std::string& h : held) {
    auto ids = (*tok)->encode(h);
    ASSERT_TRUE(ids.ok()) << ids.error().message;
    std::string back;
    for (int32_t id : *ids) back += (*tok)->token_bytes(id);
    EXPECT_EQ(back, h) << "round trip";
    // Bytes per token on text the trainer did not see: well above 1 (bytes alone); 2.35-2.72 here.
    const double per_token = double(h.size()) / double(ids->size());
    std::printf("held-out %zu bytes: %zu tokens, %.2f bytes per token\n", h.size(), ids->size(), per_token);
    EXPECT_GT(per_token, 2.0);
  }
  auto eot = (*tok)->encode(std::string("x") + kBpeEndOfText);
  ASSERT_TRUE(eot.ok());
  EXPECT_EQ(eot->back(), 1023) << "end of text is one control token";
}

TEST(BpeTrain, TheOrderOfTheTextsDoesNotMatter) {
  const auto texts = sample_texts(20000);
  if (texts.size() < 3) GTEST_SKIP() << "the sample files are not installed";
  BpeTrainer a, b;
  for (size_t i = 0; i < texts.size(); ++i) ASSERT_TRUE(a.add_text(texts[i], "a").ok());
  for (size_t i = texts.size(); i-- > 0;) ASSERT_TRUE(b.add_text(texts[i], "b").ok());
  EXPECT_EQ(a.train(600)->merges, b.train(600)->merges);
}

TEST(BpeTrain, BadInputIsAnError) {
  BpeTrainer t;
  auto st = t.add_text("ok \xff no", "corpus/x.txt");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("corpus/x.txt"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("byte 3"), std::string::npos) << st.error().message;
  ASSERT_TRUE(t.add_text("abab", "y").ok());
  EXPECT_FALSE(t.train(256).ok());
  auto v = t.train(300);  // "ab" occurs twice in one piece: one merge, then none occurs twice
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->merges.size(), 1u);
  EXPECT_EQ(v->tokens.size(), 258u);
}

}  // namespace
}  // namespace ftx
