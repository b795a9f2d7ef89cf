// TokenFileWriter and TokenFile (see token_file.h for the layout).
#include "core/data/token_file.h"

#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstring>

#include "core/text/tokenizer_json.h"

namespace ftx {
namespace {

static_assert(std::endian::native == std::endian::little, "token files are read in place: little-endian hosts only");

constexpr char kMagic[8] = {'F', 'T', 'X', 'T', 'O', 'K', 'S', '1'};
constexpr char kTrailerMagic[8] = {'F', 'T', 'X', 'T', 'O', 'K', 'E', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 128, kTrailerBytes = 32;
constexpr uint64_t kMaxTokenizerText = 512ull << 20;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t width;
  uint32_t vocab;
  int32_t eot;
  uint64_t tokenizer_bytes;
  char fingerprint[64];
  uint8_t reserved[kHeaderBytes - 96];
};
static_assert(sizeof(Header) == kHeaderBytes);

struct Trailer {
  uint64_t tokens, docs, val_docs;
  char magic[8];
};
static_assert(sizeof(Trailer) == kTrailerBytes);

uint64_t pad8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The hash as a number in [0, 1).
double unit(uint64_t hash) { return static_cast<double>(splitmix64(hash) >> 11) * 0x1.0p-53; }

Status write_zeros(FileWriter& w, uint64_t n) {
  static const char zeros[8] = {};
  return n ? w.write(zeros, n) : Status{};
}

}  // namespace

uint64_t document_hash(std::string_view bytes) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return h;
}

bool token_file_is_validation(uint64_t content_hash, double val_frac) { return unit(content_hash) < val_frac; }

// ---- writing -----------------------------------------------------------------------------------

Result<std::unique_ptr<TokenFileWriter>> TokenFileWriter::create(const std::string& path, const Tokenizer& tokenizer,
                                                                 int32_t eot) {
  if (eot < 0 || eot >= tokenizer.vocab_size())
    return make_error(path + ": end-of-text id " + std::to_string(eot) + " is outside the tokenizer's " +
                      std::to_string(tokenizer.vocab_size()) + " tokens");
  std::unique_ptr<TokenFileWriter> w(new TokenFileWriter());
  w->path_ = path;
  w->tmp_ = path + ".tmp-" + std::to_string(::getpid());
  w->vocab_ = tokenizer.vocab_size();
  w->width_ = tokenizer.vocab_size() <= 65536 ? 2 : 4;
  auto f = FileWriter::create(w->tmp_);
  if (!f) return f.error();
  w->out_ = std::make_unique<FileWriter>(std::move(*f));
  const std::string text = tokenizer_to_text(tokenizer);
  const std::string fp = tokenizer.fingerprint();
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.width = static_cast<uint32_t>(w->width_);
  h.vocab = static_cast<uint32_t>(w->vocab_);
  h.eot = eot;
  h.tokenizer_bytes = text.size();
  FT_ASSERT(fp.size() == 64, "fingerprint of %zu characters", fp.size());
  std::memcpy(h.fingerprint, fp.data(), 64);
  FTX_TRY(w->out_->write(&h, sizeof h));
  FTX_TRY(w->out_->write(text.data(), text.size()));
  FTX_TRY(write_zeros(*w->out_, pad8(text.size()) - text.size()));
  return w;
}

TokenFileWriter::~TokenFileWriter() = default;  // out_'s destructor removes an unfinished file

Status TokenFileWriter::add_document(std::span<const int32_t> ids, uint64_t content_hash) {
  if (ids.empty()) return {};
  buf_.resize(ids.size() * width_);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_)
      return make_error(path_ + ": token id " + std::to_string(id) + " is outside the vocabulary of " +
                        std::to_string(vocab_));
    if (width_ == 2) {
      const auto v = static_cast<uint16_t>(id);
      std::memcpy(&buf_[i * 2], &v, 2);
    } else {
      const auto v = static_cast<uint32_t>(id);
      std::memcpy(&buf_[i * 4], &v, 4);
    }
  }
  FTX_TRY(out_->write(buf_.data(), buf_.size()));
  tokens_ += ids.size();
  ends_.push_back(tokens_);
  hashes_.push_back(content_hash);
  return {};
}

Result<TokenFileSummary> TokenFileWriter::finish(double val_frac) {
  FT_ASSERT(!done_, "TokenFileWriter::finish called twice");
  done_ = true;
  const size_t n = ends_.size();
  if (n < 2)
    return make_error(path_ + ": " + std::to_string(n) +
                      " non-empty document(s): at least two are needed (one for training, one for validation)");
  std::vector<uint8_t> split(n);
  size_t n_val = 0, lowest = 0, highest = 0;
  for (size_t d = 0; d < n; ++d) {
    split[d] = token_file_is_validation(hashes_[d], val_frac);
    n_val += split[d];
    if (unit(hashes_[d]) < unit(hashes_[lowest])) lowest = d;
    if (unit(hashes_[d]) > unit(hashes_[highest])) highest = d;
  }
  // At least one of each: the document nearest to the other side moves.
  if (n_val == 0) split[lowest] = 1, n_val = 1;
  if (n_val == n) split[highest] = 0, --n_val;
  TokenFileSummary s;
  s.documents = static_cast<int64_t>(n);
  s.validation_documents = static_cast<int64_t>(n_val);
  s.tokens = static_cast<int64_t>(tokens_);
  for (size_t d = 0; d < n; ++d)
    if (split[d]) s.validation_tokens += static_cast<int64_t>(ends_[d] - (d ? ends_[d - 1] : 0));

  const uint64_t token_bytes = tokens_ * static_cast<uint64_t>(width_);
  FTX_TRY(write_zeros(*out_, pad8(token_bytes) - token_bytes));
  FTX_TRY(out_->write(ends_.data(), n * sizeof(uint64_t)));
  FTX_TRY(out_->write(split.data(), n));
  FTX_TRY(write_zeros(*out_, pad8(n) - n));
  Trailer t{tokens_, n, n_val, {}};
  std::memcpy(t.magic, kTrailerMagic, 8);
  FTX_TRY(out_->write(&t, sizeof t));
  FTX_TRY(out_->finish());
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp_.c_str());
    return make_error(path_ + ": cannot rename " + tmp_ + " into place: " + std::strerror(e));
  }
  return s;
}

// ---- reading -----------------------------------------------------------------------------------

Result<std::shared_ptr<const TokenFile>> TokenFile::open(const std::string& path) {
  auto m = MappedFile::open(path);
  if (!m) return m.error();
  std::shared_ptr<TokenFile> f(new TokenFile());
  f->map_ = std::move(*m);
  const uint8_t* p = f->map_.data();
  const uint64_t size = f->map_.size();
  auto fail = [&](const std::string& problem) { return make_error(path + ": " + problem); };
  if (size < kHeaderBytes + kTrailerBytes || std::memcmp(p, kMagic, 8) != 0)
    return fail("not a token data file (no FTXTOKS1 header; make one with ftx tokenize)");
  Header h;
  std::memcpy(&h, p, sizeof h);
  if (h.version != kVersion)
    return fail("token file version " + std::to_string(h.version) + " is not supported (only 1)");
  if (h.width != 2 && h.width != 4) return fail("token width " + std::to_string(h.width) + " is not 2 or 4");
  if (h.vocab == 0 || h.vocab > static_cast<uint32_t>(INT32_MAX) || (h.width == 2 && h.vocab > 65536))
    return fail("vocabulary size " + std::to_string(h.vocab) + " does not fit token width " + std::to_string(h.width));
  if (h.eot < 0 || static_cast<uint32_t>(h.eot) >= h.vocab)
    return fail("end-of-text id " + std::to_string(h.eot) + " is outside the vocabulary of " + std::to_string(h.vocab));
  if (h.tokenizer_bytes > kMaxTokenizerText || kHeaderBytes + pad8(h.tokenizer_bytes) + kTrailerBytes > size)
    return fail("tokenizer text of " + std::to_string(h.tokenizer_bytes) + " bytes does not fit in the file (" +
                std::to_string(size) + " bytes): truncated?");
  Trailer t;
  std::memcpy(&t, p + size - kTrailerBytes, sizeof t);
  if (std::memcmp(t.magic, kTrailerMagic, 8) != 0) return fail("no FTXTOKE1 trailer at the end: truncated?");
  const uint64_t tok_off = kHeaderBytes + pad8(h.tokenizer_bytes);
  // Bounds before products, so that no count can overflow the sums below.
  if (t.tokens > (size / h.width) || t.docs > size / 9 || t.val_docs > t.docs)
    return fail("counts (" + std::to_string(t.tokens) + " tokens, " + std::to_string(t.docs) + " documents, " +
                std::to_string(t.val_docs) + " validation) do not fit a file of " + std::to_string(size) + " bytes");
  const uint64_t ends_off = tok_off + pad8(t.tokens * h.width);
  const uint64_t split_off = ends_off + t.docs * 8;
  const uint64_t expected = split_off + pad8(t.docs) + kTrailerBytes;
  if (expected != size)
    return fail("is " + std::to_string(size) + " bytes, its header and trailer say " + std::to_string(expected) +
                " (truncated or corrupt)");
  if (t.docs < 2 || t.val_docs < 1 || t.val_docs == t.docs)
    return fail("needs at least one training and one validation document, has " + std::to_string(t.docs - t.val_docs) +
                " and " + std::to_string(t.val_docs));
  f->vocab_ = static_cast<int32_t>(h.vocab);
  f->eot_ = h.eot;
  f->width_ = static_cast<int>(h.width);
  f->n_tokens_ = static_cast<int64_t>(t.tokens);
  f->n_docs_ = static_cast<int64_t>(t.docs);
  f->n_val_ = static_cast<int64_t>(t.val_docs);
  f->tokens_ = p + tok_off;
  f->ends_ = reinterpret_cast<const uint64_t*>(p + ends_off);
  f->split_ = p + split_off;
  uint64_t prev = 0, val = 0;
  for (uint64_t d = 0; d < t.docs; ++d) {
    if (f->ends_[d] <= prev || f->ends_[d] > t.tokens)
      return fail("document " + std::to_string(d) + " ends at token " + std::to_string(f->ends_[d]) +
                  " (after " + std::to_string(prev) + ", of " + std::to_string(t.tokens) + "): corrupt index");
    if (f->split_[d] > 1) return fail("document " + std::to_string(d) + " has split flag " + std::to_string(f->split_[d]));
    prev = f->ends_[d];
    val += f->split_[d];
  }
  if (t.docs > 0 && prev != t.tokens)
    return fail("the documents end at token " + std::to_string(prev) + ", the file has " + std::to_string(t.tokens));
  if (val != t.val_docs)
    return fail(std::to_string(val) + " documents are marked validation, the trailer says " +
                std::to_string(t.val_docs));
  for (uint64_t k = 0; k < t.tokens; ++k) {
    const uint32_t id = h.width == 2 ? reinterpret_cast<const uint16_t*>(f->tokens_)[k]
                                     : reinterpret_cast<const uint32_t*>(f->tokens_)[k];
    if (id >= h.vocab)
      return fail("token " + std::to_string(k) + " is id " + std::to_string(id) + ", outside the vocabulary of " +
                  std::to_string(h.vocab));
  }
  const std::string_view text(reinterpret_cast<const char*>(p + kHeaderBytes), h.tokenizer_bytes);
  auto tok = tokenizer_from_text(text, path + " (embedded tokenizer)");
  if (!tok) return tok.error();
  f->tokenizer_ = std::move(*tok);
  f->fingerprint_.assign(h.fingerprint, 64);
  if (f->tokenizer_->fingerprint() != f->fingerprint_)
    return fail("the embedded tokenizer's fingerprint differs from the header's (corrupt)");
  if (f->tokenizer_->vocab_size() != f->vocab_)
    return fail("the embedded tokenizer has " + std::to_string(f->tokenizer_->vocab_size()) +
                " tokens, the header says " + std::to_string(f->vocab_));
  return std::shared_ptr<const TokenFile>(std::move(f));
}

void TokenFile::copy_tokens(int64_t begin, int64_t n, int32_t* out) const {
  FT_ASSERT(begin >= 0 && n >= 0 && begin + n <= n_tokens_, "tokens [%lld, +%lld) of %lld",
            static_cast<long long>(begin), static_cast<long long>(n), static_cast<long long>(n_tokens_));
  if (width_ == 2) {
    const auto* s = reinterpret_cast<const uint16_t*>(tokens_) + begin;
    for (int64_t k = 0; k < n; ++k) out[k] = s[k];
  } else {
    const auto* s = reinterpret_cast<const uint32_t*>(tokens_) + begin;
    for (int64_t k = 0; k < n; ++k) out[k] = static_cast<int32_t>(s[k]);
  }
}

}  // namespace ftx
