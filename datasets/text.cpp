// TextDataset: packing a token file's documents into sequences (see text.h).
#include "datasets/text.h"

#include <algorithm>

#include "kernels/base/assert.h"

namespace ftx {

const DatasetOption& TextDataset::data_option() {
  static const DatasetOption o{
      Field{.key = "text_data", .help = "Token data file (ftx tokenize --out)", .option = "data"}, 0, false, true};
  return o;
}

const DatasetOption& TextDataset::seq_len_option() {
  static const DatasetOption o{Field{.key = "text_seq_len",
                                     .help = "Tokens per packed training sequence",
                                     .bounds = closed_range(2, kMaxSeqLen),
                                     .option = "seq_len"},
                               256, true};
  return o;
}

const DatasetOption& TextDataset::windows_option() {
  static const DatasetOption o{Field{.key = "text_windows",
                                     .help = "packed (sequences cross documents) or document (one document per "
                                             "sequence, after the end-of-text token)",
                                     .option = "windows"},
                               0, false, true};
  return o;
}

const char* text_windows_name(TextWindows w) { return w == TextWindows::Document ? "document" : "packed"; }

Result<TextWindows> TextDataset::parse_windows(const std::string& value, FieldName name) {
  if (value.empty() || value == "packed") return TextWindows::Packed;
  if (value == "document") return TextWindows::Document;
  return make_error(name(windows_option().field) + " '" + value + "': must be packed or document");
}

TextDataset::TextDataset(std::shared_ptr<const TokenFile> file, int seq_len, uint64_t seed, TextWindows windows)
    : file_(std::move(file)), seq_len_(seq_len), seed_(seed), windows_(windows) {
  FT_ASSERT(seq_len >= 2 && seq_len <= kMaxSeqLen, "text seq_len %d", seq_len);
  for (int64_t d = 0; d < file_->documents(); ++d) {
    Stream& s = file_->is_validation(d) ? val_ : train_;
    s.docs.push_back(d);
    s.starts.push_back(s.length);
    s.length += file_->doc_end(d) - file_->doc_begin(d) + 1;
  }
  FT_ASSERT(train_.length > 0 && val_.length > 0, "TokenFile::open guarantees both splits");
}

nlohmann::json TextDataset::options() const {
  return {{data_option().field.key, file_->path()},
          {seq_len_option().field.key, dataset_option_json(seq_len_option(), seq_len_)},
          {windows_option().field.key, text_windows_name(windows_)}};
}

int64_t TextDataset::training_offset(int64_t i) const {
  const Philox4 r = philox_block(seed_, kStreamTextTrain, static_cast<uint64_t>(i));
  const uint64_t x = (static_cast<uint64_t>(r.v[1]) << 32) | r.v[0];
  return static_cast<int64_t>(x % static_cast<uint64_t>(train_.length));
}

void TextDataset::fill(const Stream& s, int64_t offset, int32_t* out) const {
  if (windows_ == TextWindows::Document)
    fill_document(s, offset, out);
  else
    fill_packed(s, offset, out);
}

void TextDataset::fill_document(const Stream& s, int64_t offset, int32_t* out) const {
  const int64_t k = std::upper_bound(s.starts.begin(), s.starts.end(), offset) - s.starts.begin() - 1;
  const int64_t d = s.docs[k], begin = file_->doc_begin(d), len = file_->doc_end(d) - begin;
  const int64_t need = seq_len_ - 1;
  out[0] = file_->eot();
  if (len >= need) {
    file_->copy_tokens(begin + std::min(offset - s.starts[k], len - need), need, out + 1);
    return;
  }
  for (int n = 1; n < seq_len_;) {  // a short document, repeated after an end-of-text token
    const int64_t take = std::min<int64_t>(len, seq_len_ - n);
    file_->copy_tokens(begin, take, out + n);
    n += static_cast<int>(take);
    if (n < seq_len_) out[n++] = file_->eot();
  }
}

void TextDataset::fill_packed(const Stream& s, int64_t offset, int32_t* out) const {
  int64_t k = std::upper_bound(s.starts.begin(), s.starts.end(), offset) - s.starts.begin() - 1;
  int64_t local = offset - s.starts[k];
  for (int n = 0; n < seq_len_;) {
    const int64_t d = s.docs[k];
    const int64_t len = file_->doc_end(d) - file_->doc_begin(d);
    if (local < len) {
      const int64_t take = std::min<int64_t>(len - local, seq_len_ - n);
      file_->copy_tokens(file_->doc_begin(d) + local, take, out + n);
      n += static_cast<int>(take);
      local += take;
      continue;
    }
    out[n++] = file_->eot();  // the separator after the document, then the next one (circular)
    local = 0;
    k = (k + 1) % static_cast<int64_t>(s.docs.size());
  }
}

void TextDataset::next(int32_t* tokens, int B) {
  for (int b = 0; b < B; ++b) fill(train_, training_offset(position_ + b), tokens + int64_t{b} * seq_len_);
  position_ += B;
}

int64_t TextDataset::validation_offset(int64_t j) const {
  const auto n = static_cast<uint64_t>(val_.length);
  if (windows_ == TextWindows::Packed) return static_cast<int64_t>((static_cast<unsigned __int128>(j) * seq_len_) % n);
  // frac((j + 1) / golden ratio) of the stream: any first J windows spread evenly over it.
  const uint64_t weyl = static_cast<uint64_t>(j + 1) * 0x9E3779B97F4A7C15ull;
  return static_cast<int64_t>((static_cast<unsigned __int128>(weyl) * n) >> 64);
}

void TextDataset::validation(int32_t* tokens, int64_t first, int B) const {
  for (int b = 0; b < B; ++b) fill(val_, validation_offset(first + b), tokens + int64_t{b} * seq_len_);
}

void TextDataset::seek(int64_t position) {
  FT_ASSERT(position >= 0, "seek to negative position %lld", static_cast<long long>(position));
  position_ = position;
}

}  // namespace ftx
