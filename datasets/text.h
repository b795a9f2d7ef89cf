// TextDataset: training on a token data file (core/data/token_file.h, made by ftx tokenize).
// Documents are packed: the training documents, each followed by the end-of-text token, form one
// circular stream, and training sequence i is the seq_len tokens of that stream starting at an
// offset drawn by Philox from (seed, i): a pure function of (seed, i), so position() is all a
// resumed run needs to see the same batches. Validation sequence j is cut at validation_offset(j)
// of the validation documents' stream, never a training token: packed, the j-th consecutive
// seq_len-token window (wrapping); document windows, the point frac((j + 1) / golden ratio) of the
// stream, so that any number of validation sequences spreads over all held-out documents (in a
// file ordered by kind, consecutive windows would hold the first kind's documents only).
// The file is memory-mapped; only the per-document offsets (8 bytes a document) are in memory.
//
// Two ways to cut windows (--windows, dataset option "text_windows"):
//   packed    (the default) the seq_len tokens at the offset, across document boundaries;
//   document  one document per window: the end-of-text token, then seq_len - 1 tokens of the
//             document holding the offset, moved back so they end inside it; a document shorter
//             than that repeats (document, end-of-text, document, ...). Every window is then of one
//             document's kind, and the end-of-text token is a neutral prompt that opens a window
//             anywhere in a document (docs/text_latent.md: what Z must decide is the kind).
//
// Deliberately not here: tokenizing (ftx tokenize), document-aware attention masks (a packed
// sequence may span documents; the end-of-text token between them is what the model sees).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data/batch_source.h"
#include "core/data/dataset_options.h"
#include "core/data/token_file.h"
#include "kernels/base/philox.h"

namespace ftx {

inline constexpr uint64_t kStreamTextTrain = kStreamData + 4;

enum class TextWindows { Packed, Document };
const char* text_windows_name(TextWindows w);  // "packed", "document"

class TextDataset final : public BatchSource {
 public:
  static constexpr int kMaxSeqLen = 1 << 20;
  // "text_data" (--data: the token file) and "text_seq_len" (--seq-len, default 256).
  static const DatasetOption& data_option();
  static const DatasetOption& seq_len_option();
  // "text_windows" (--windows): "packed" (also when empty) or "document".
  static const DatasetOption& windows_option();
  // The value of windows_option() ("" is packed); the error names the option and both words.
  static Result<TextWindows> parse_windows(const std::string& value, FieldName name = field_key);

  // seq_len in [2, kMaxSeqLen]
  TextDataset(std::shared_ptr<const TokenFile> file, int seq_len, uint64_t seed,
              TextWindows windows = TextWindows::Packed);

  // "text (PATH)": the trainer's messages name the data file through it.
  std::string name() const override { return "text (" + file_->path() + ")"; }
  int seq_len() const override { return seq_len_; }
  const Tokenizer& tokenizer() const override { return file_->tokenizer(); }
  void next(int32_t* tokens, int B) override;
  void validation(int32_t* tokens, int64_t first, int B) const override;
  int64_t position() const override { return position_; }
  void seek(int64_t position) override;
  nlohmann::json options() const override;

  // Where training sequence i starts in the training stream (for tests).
  int64_t training_offset(int64_t i) const;
  // Where validation sequence j is cut in the validation stream (see the top of this file).
  int64_t validation_offset(int64_t j) const;
  int64_t training_stream_length() const { return train_.length; }
  int64_t validation_stream_length() const { return val_.length; }
  const TokenFile& file() const { return *file_; }

 private:
  // The documents of one split as a circular stream: document k of `docs` starts at starts[k]
  // and spans its tokens then one end-of-text token.
  struct Stream {
    std::vector<int64_t> docs, starts;
    int64_t length = 0;
  };
  void fill(const Stream& s, int64_t offset, int32_t* out) const;
  void fill_packed(const Stream& s, int64_t offset, int32_t* out) const;
  void fill_document(const Stream& s, int64_t offset, int32_t* out) const;

  std::shared_ptr<const TokenFile> file_;
  int seq_len_;
  uint64_t seed_;
  TextWindows windows_;
  int64_t position_ = 0;
  Stream train_, val_;
};

}  // namespace ftx
