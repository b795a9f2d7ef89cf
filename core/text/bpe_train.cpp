// Byte-level BPE training (core/text/bpe_train.h).
#include "core/text/bpe_train.h"

#include <algorithm>
#include <cstdint>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "core/text/pretokenize.h"
#include "core/text/unicode_text.h"

namespace ftx {

struct BpeTrainer::Impl {
  std::shared_ptr<const text::Regex> regex;
  std::unordered_map<std::string, int64_t> pieces;  // piece bytes -> occurrences
};

BpeTrainer::BpeTrainer() : impl_(new Impl) {
  auto re = text::Regex::compile(text::kGpt2Pattern, false);
  FT_ASSERT(re.ok(), "GPT-2 pre-tokenizer pattern: %s", re.ok() ? "" : re.error().message.c_str());
  impl_->regex = *re;
}

BpeTrainer::~BpeTrainer() { delete impl_; }

size_t BpeTrainer::distinct_pieces() const { return impl_->pieces.size(); }

Status BpeTrainer::add_text(std::string_view t, const std::string& source) {
  if (const size_t bad = text::utf8_invalid_offset(t); bad != std::string_view::npos)
    return make_error(source + ": not UTF-8 (byte " + std::to_string(bad) + ")");
  std::vector<text::Span> spans;
  if (auto st = impl_->regex->find_matches(t, spans); !st) return make_error(source + ": " + st.error().message);
  for (const text::Span& s : spans)
    if (s.end > s.begin) ++impl_->pieces[std::string(t.substr(s.begin, s.end - s.begin))];
  return {};
}

namespace {

using Pair = uint64_t;  // left id << 32 | right id
Pair pair_of(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

struct Word {
  std::vector<int32_t> sym;
  int64_t count = 0;
};

}  // namespace

Result<BpeVocab> BpeTrainer::train(int vocab_size) const {
  if (vocab_size < 257) return make_error("BPE vocabulary size " + std::to_string(vocab_size) + ": at least 257");
  // The pieces in a fixed order (their bytes), so that ties and ids do not depend on hashing.
  std::vector<std::pair<std::string, int64_t>> sorted(impl_->pieces.begin(), impl_->pieces.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words(sorted.size());
  std::unordered_map<Pair, int64_t> count;
  std::unordered_map<Pair, std::unordered_set<int32_t>> where;
  for (size_t w = 0; w < sorted.size(); ++w) {
    for (unsigned char c : sorted[w].first) words[w].sym.push_back(int32_t(c));
    words[w].count = sorted[w].second;
    for (size_t i = 0; i + 1 < words[w].sym.size(); ++i) {
      const Pair p = pair_of(words[w].sym[i], words[w].sym[i + 1]);
      count[p] += words[w].count;
      where[p].insert(int32_t(w));
    }
  }
  // Most frequent first; among equals the smallest (left, right). Entries go stale as counts
  // change and are skipped when their count is no longer the pair's.
  using Entry = std::pair<int64_t, Pair>;
  auto worse = [](const Entry& x, const Entry& y) {
    return x.first != y.first ? x.first < y.first : x.second > y.second;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
  for (const auto& [p, n] : count) heap.push({n, p});

  BpeVocab v;
  for (int b = 0; b < 256; ++b) v.tokens.emplace_back(text::byte_spelling(uint8_t(b)));
  const int merges_wanted = vocab_size - 257;
  std::unordered_map<Pair, int64_t> delta;
  while (int(v.merges.size()) < merges_wanted && !heap.empty()) {
    const auto [n, p] = heap.top();
    heap.pop();
    const auto it = count.find(p);
    if (it == count.end() || it->second != n) continue;  // stale
    if (n < 2) break;                                    // no pair occurs twice
    const int32_t a = int32_t(p >> 32), b = int32_t(p & 0xFFFFFFFFu), z = int32_t(v.tokens.size());
    v.merges.push_back(v.tokens[size_t(a)] + " " + v.tokens[size_t(b)]);
    v.tokens.push_back(v.tokens[size_t(a)] + v.tokens[size_t(b)]);
    delta.clear();
    const std::unordered_set<int32_t> holders = std::move(where[p]);
    where.erase(p);
    for (int32_t w : holders) {
      Word& word = words[size_t(w)];
      std::vector<int32_t>& s = word.sym;
      for (size_t i = 0; i + 1 < s.size(); ++i) delta[pair_of(s[i], s[i + 1])] -= word.count;
      std::vector<int32_t> merged;
      merged.reserve(s.size());
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          merged.push_back(z);
          ++i;
        } else {
          merged.push_back(s[i]);
        }
      }
      s = std::move(merged);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const Pair q = pair_of(s[i], s[i + 1]);
        delta[q] += word.count;
        where[q].insert(w);
      }
    }
    for (const auto& [q, d] : delta) {
      if (d == 0) continue;
      int64_t& c = count[q];
      c += d;
      if (c <= 0) {
        count.erase(q);
      } else {
        heap.push({c, q});
      }
    }
    count.erase(p);
  }
  v.tokens.emplace_back(kBpeEndOfText);
  v.token_types.assign(v.tokens.size(), 1);
  v.token_types.back() = 3;  // control
  v.pre = "gpt2";
  v.special.eos = int32_t(v.tokens.size() - 1);
  return v;
}

}  // namespace ftx
