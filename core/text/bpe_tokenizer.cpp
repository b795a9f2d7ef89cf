// BpeTokenizer: encoding (added tokens cut out, normalizer, pre-tokenizer, merges by rank) and the
// Tokenizer interface over the loaded vocabulary. The readers that fill an Impl are in
// bpe_vocab.cpp (GGUF metadata) and bpe_tokenizer_json.cpp (tokenizer.json). Merging is
// tokenizers' word.rs: a heap of adjacent pairs by (rank, position), stale entries skipped, so a
// piece of n bytes costs O(n log n); each encode() call caches the ids of the pieces it has seen.
#include "core/text/bpe_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <deque>

#include "core/text/bpe_impl.h"
#include "core/text/unicode_text.h"

namespace ftx {
namespace {

using Impl = BpeTokenizer::Impl;

// What an id outside the vocabulary decodes to: U+FFFD, the replacement character.
constexpr std::string_view kUnknownIdBytes = "\xEF\xBF\xBD";

// A part of the text: an added token (id >= 0) or text still to encode (id < 0).
struct Fragment {
  std::string_view text;
  int32_t id;
};

struct Symbol {
  int32_t id;  // < 0 (kLlamaCpp): the byte -1 - id, which has no token and merges with nothing
  int32_t prev, next;
  bool alive;
};

struct Candidate {
  int32_t rank, pos, left, right, id;
  // std::*_heap keeps the largest on top: the largest is the lowest rank, then the leftmost.
  bool operator<(const Candidate& o) const { return rank > o.rank || (rank == o.rank && pos > o.pos); }
};

// The scratch of one encode() call. Pieces are views into the text or the arena, both alive until
// the call returns, so the cache (piece -> its ids' range in the output) may key on them.
struct Session {
  std::deque<std::string> arena;
  std::vector<std::string_view> pieces;
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> cache;
  std::string spelled;
};

uint32_t char_before(std::string_view s, size_t pos, size_t* start) {
  size_t i = pos - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  uint32_t cp = 0;
  text::utf8_decode(s, i, &cp);
  *start = i;
  return cp;
}

uint32_t char_at(std::string_view s, size_t pos, size_t* end) {
  uint32_t cp = 0;
  *end = pos + static_cast<size_t>(std::max(text::utf8_decode(s, pos, &cp), 1));
  return cp;
}

// tokenizers' single_word: the match neither follows nor precedes a word character.
bool is_single_word(std::string_view s, size_t start, size_t stop) {
  size_t k;
  if (start > 0 && text::is_word_char(char_before(s, start, &k))) return false;
  return stop == s.size() || !text::is_word_char(char_at(s, stop, &k));
}

size_t spaces_before(std::string_view s, size_t pos) {
  size_t k;
  while (pos > 0 && text::is_whitespace(char_before(s, pos, &k))) pos = k;
  return pos;
}

size_t spaces_after(std::string_view s, size_t pos) {
  size_t k;
  while (pos < s.size() && text::is_whitespace(char_at(s, pos, &k))) pos = k;
  return pos;
}

// tokenizers' AddedVocabulary::find_matches with one pass's tokens: leftmost match, longest at
// that position; the search goes on after it. After an rstrip token it goes on after the stripped
// spaces (tokenizers resumes at the token's end and can then cut a token out of spaces it already
// gave away: only for an added token that starts with a space; deliberately not reproduced).
void split_added_hf(const Impl& im, int pass, std::string_view s, std::vector<Fragment>& out) {
  size_t done = 0, i = 0;
  while (i < s.size()) {
    const AddedToken* hit = nullptr;
    for (uint32_t k : im.added_index[pass][static_cast<unsigned char>(s[i])]) {
      if (s.substr(i).starts_with(im.added[k].match)) {
        hit = &im.added[k];
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + hit->match.size();
    i = stop;
    if (hit->single_word && !is_single_word(s, start, stop)) continue;
    if (hit->lstrip) start = std::max(spaces_before(s, start), done);
    if (hit->rstrip) i = stop = spaces_after(s, stop);
    if (done < start) out.push_back({s.substr(done, start - done), -1});
    out.push_back({s.substr(start, stop - start), hit->id});
    done = stop;
  }
  if (done < s.size()) out.push_back({s.substr(done), -1});
}

// llama.cpp's tokenizer_st_partition: each special token (longest first) cut out everywhere.
void split_added_llama(const Impl& im, std::string_view text, std::vector<Fragment>& frags) {
  frags.assign(1, {text, -1});
  std::vector<Fragment> next;
  for (const AddedToken& t : im.added) {
    if (text.find(t.content) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t from = 0;
      for (size_t at; (at = f.text.find(t.content, from)) != std::string_view::npos; from = at + t.content.size()) {
        if (at > from) next.push_back({f.text.substr(from, at - from), -1});
        next.push_back({f.text.substr(at, t.content.size()), t.id});
      }
      if (from < f.text.size()) next.push_back({f.text.substr(from), -1});
    }
    frags.swap(next);
  }
}

void push_candidate(const Impl& im, Session& ss, int32_t pos) {
  const Symbol& l = ss.symbols[pos];
  if (l.next < 0) return;
  const Symbol& r = ss.symbols[l.next];
  if (l.id < 0 || r.id < 0) return;
  const auto it = im.merges.find(Impl::pair_key(l.id, r.id));
  if (it == im.merges.end()) return;
  ss.heap.push_back({it->second.rank, pos, l.id, r.id, it->second.id});
  std::push_heap(ss.heap.begin(), ss.heap.end());
}

// Merges the adjacent pair of lowest rank (leftmost among equals) until none applies.
void merge_symbols(const Impl& im, Session& ss) {
  auto& sy = ss.symbols;
  ss.heap.clear();
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sy.size()); ++i) push_candidate(im, ss, i);
  while (!ss.heap.empty()) {
    std::pop_heap(ss.heap.begin(), ss.heap.end());
    const Candidate c = ss.heap.back();
    ss.heap.pop_back();
    Symbol& l = sy[c.pos];
    if (!l.alive || l.id != c.left || l.next < 0 || sy[l.next].id != c.right) continue;  // stale
    Symbol& r = sy[l.next];
    l.id = c.id;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) sy[r.next].prev = c.pos;
    if (l.prev >= 0) push_candidate(im, ss, l.prev);
    push_candidate(im, ss, c.pos);
  }
}

void build_symbols(const Impl& im, std::string_view piece, Session& ss) {
  auto& sy = ss.symbols;
  sy.clear();
  bool unk_open = false;
  for (char ch : piece) {
    const auto b = static_cast<unsigned char>(ch);
    int32_t id = im.byte_id[b];
    if (id < 0) {
      if (im.flavor == Impl::Flavor::kLlamaCpp) {
        id = -1 - static_cast<int32_t>(b);
      } else if (!im.unk || (im.fuse_unk && unk_open)) {
        continue;  // dropped, or fused into the unk before it
      } else {
        id = *im.unk;
      }
    }
    unk_open = im.flavor == Impl::Flavor::kHuggingFace && im.byte_id[b] < 0;
    const auto n = static_cast<int32_t>(sy.size());
    sy.push_back({id, n - 1, -1, true});
    if (n > 0) sy[n - 1].next = n;
  }
}

void encode_piece(const Impl& im, std::string_view piece, Session& ss, std::vector<int32_t>& out) {
  if (im.ignore_merges) {
    ss.spelled.clear();
    for (char c : piece) ss.spelled += text::byte_spelling(static_cast<uint8_t>(c));
    const auto it = im.id_of.find(ss.spelled);
    if (it != im.id_of.end() && im.in_model[it->second]) {
      out.push_back(it->second);
      return;
    }
  }
  build_symbols(im, piece, ss);
  merge_symbols(im, ss);
  for (const Symbol& s : ss.symbols) {
    if (!s.alive) continue;
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    // llama.cpp's fallback: the tokens spelled by each raw byte of the character, if any.
    for (char c : text::byte_spelling(static_cast<uint8_t>(-1 - s.id))) {
      const auto it = im.id_of.find(std::string(1, c));
      if (it != im.id_of.end()) out.push_back(it->second);
    }
  }
}

Status encode_text(const Impl& im, std::string_view t, Session& ss, std::vector<int32_t>& out) {
  ss.pieces.clear();
  FTX_TRY(text::pre_tokenize(im.pre, t, ss.arena, ss.pieces));
  for (std::string_view p : ss.pieces) {
    const auto [it, fresh] = ss.cache.try_emplace(p, out.size(), 0);
    if (!fresh) {
      for (size_t k = 0; k < it->second.second; ++k) {
        const int32_t id = out[it->second.first + k];
        out.push_back(id);
      }
      continue;
    }
    encode_piece(im, p, ss, out);
    it->second.second = out.size() - it->second.first;
  }
  return {};
}

std::string describe_byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

}  // namespace

void BpeTokenizer::Impl::index_bytes() {
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of.find(std::string(text::byte_spelling(static_cast<uint8_t>(b))));
    byte_id[b] = it != id_of.end() && in_model[it->second] ? it->second : -1;
  }
}

void BpeTokenizer::Impl::index_added() {
  for (AddedToken& t : added) {
    t.match = t.normalized && nfc ? text::nfc(t.content) : t.content;
    bytes[t.id] = text::unspell(t.match);  // tokenizers decodes an added token from its normalized form
  }
  for (auto& pass : added_index)
    for (auto& bucket : pass) bucket.clear();
  std::vector<uint32_t> order(added.size());
  for (uint32_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return added[a].match.size() > added[b].match.size(); });
  for (uint32_t k : order) {
    const AddedToken& t = added[k];
    if (t.match.empty()) continue;
    added_index[t.normalized ? 1 : 0][static_cast<unsigned char>(t.match[0])].push_back(k);
  }
}

BpeTokenizer::BpeTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::~BpeTokenizer() = default;

int BpeTokenizer::vocab_size() const { return impl_->vocab_size(); }

Result<std::vector<int32_t>> BpeTokenizer::encode(std::string_view text) const {
  if (const size_t bad = text::utf8_invalid_offset(text); bad != std::string_view::npos)
    return make_error("byte " + describe_byte(static_cast<unsigned char>(text[bad])) + " at position " +
                      std::to_string(bad) + " is not valid UTF-8");
  const Impl& im = *impl_;
  Session ss;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  std::vector<Fragment> frags, inner;
  if (im.flavor == Impl::Flavor::kLlamaCpp) {
    split_added_llama(im, text, frags);
    for (const Fragment& f : frags) {
      if (f.id >= 0) {
        out.push_back(f.id);
      } else {
        FTX_TRY(encode_text(im, f.text, ss, out));
      }
    }
    return out;
  }
  split_added_hf(im, 0, text, frags);
  for (const Fragment& f : frags) {
    if (f.id >= 0) {
      out.push_back(f.id);
      continue;
    }
    std::string_view t = f.text;
    if (im.nfc) t = ss.arena.emplace_back(text::nfc(t));
    inner.clear();
    split_added_hf(im, 1, t, inner);
    for (const Fragment& g : inner) {
      if (g.id >= 0) {
        out.push_back(g.id);
      } else {
        FTX_TRY(encode_text(im, g.text, ss, out));
      }
    }
  }
  return out;
}

std::string_view BpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= impl_->vocab_size()) return kUnknownIdBytes;
  return impl_->bytes[id];
}

SpecialTokens BpeTokenizer::special_tokens() const { return impl_->specials; }

std::unique_ptr<Tokenizer> BpeTokenizer::clone() const { return std::unique_ptr<Tokenizer>(new BpeTokenizer(impl_)); }

bool BpeTokenizer::add_bos() const { return impl_->add_bos; }

std::optional<int32_t> BpeTokenizer::token_id(std::string_view text) const {
  const auto it = impl_->id_of.find(std::string(text));
  if (it == impl_->id_of.end()) return std::nullopt;
  return it->second;
}

bool BpeTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < impl_->vocab_size() && impl_->special[id] != 0;
}

std::string BpeTokenizer::canonical_form() const {
  const Impl& im = *impl_;
  std::string s = Tokenizer::canonical_form();
  s += im.flavor == Impl::Flavor::kLlamaCpp ? "flavor llama.cpp\n" : "flavor tokenizers\n";
  s += "merges " + std::to_string(im.merge_list.size()) + "\n";
  for (const auto& [l, r] : im.merge_list) s += std::to_string(l) + " " + std::to_string(r) + "\n";
  s += "ignore_merges " + std::to_string(im.ignore_merges) + " unk " + (im.unk ? std::to_string(*im.unk) : "-") +
       " fuse_unk " + std::to_string(im.fuse_unk) + " nfc " + std::to_string(im.nfc) + "\n";
  for (const text::PreStep& p : im.pre) s += "pre " + p.describe() + "\n";
  for (const AddedToken& t : im.added) {
    s += "added " + std::to_string(t.id) + " " + std::to_string(t.single_word) + std::to_string(t.lstrip) +
         std::to_string(t.rstrip) + std::to_string(t.normalized) + std::to_string(t.special) + " " +
         std::to_string(t.content.size()) + ":" + t.content + "\n";
  }
  s += "add_bos " + std::to_string(im.add_bos) + "\n";
  return s;
}

}  // namespace ftx
