// Token data files: a corpus tokenized once (ftx tokenize --input ... --out DATA) and read by the
// text dataset (datasets/text.h) through a memory map, so a corpus of any length is never loaded
// whole. docs/design.md, "Token data files", describes the layout:
//
//   header (128 bytes)  magic "FTXTOKS1", version 1, token width (2: uint16 when vocab <= 65536,
//                       else 4: uint32), vocab size, end-of-text id, tokenizer text length, the
//                       tokenizer's fingerprint (64 hex characters), zeros
//   tokenizer text      tokenizer_to_text (core/text/tokenizer_json.h): the file carries its
//                       tokenizer, so a dataset needs no model to decode it; zero-padded to 8
//   tokens              every document's ids, concatenated (no separators); zero-padded to 8
//   document ends       uint64 per document: the end of document i in tokens (cumulative)
//   split               uint8 per document: 0 training, 1 validation; zero-padded to 8
//   trailer (32 bytes)  uint64 tokens, uint64 documents, uint64 validation documents, "FTXTOKE1"
//
// All integers little-endian. The counts are in a trailer so that the writer streams (tokens are
// never held in memory) and renames a finished temporary file into place.
//
// Deliberately not here: walking directories and encoding text (app/, ftx tokenize), packing
// documents into training sequences (datasets/text.h).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/io/mapped_file.h"
#include "core/text/tokenizer.h"
#include "core/util/fs.h"
#include "kernels/base/result.h"

namespace ftx {

// Whether a document with this content hash goes to validation: a deterministic function of the
// hash alone (so the split does not depend on the order documents are added).
bool token_file_is_validation(uint64_t content_hash, double val_frac);
// FNV-1a 64 of a document's bytes: the content hash writers pass to add_document.
uint64_t document_hash(std::string_view bytes);

struct TokenFileSummary {
  int64_t documents = 0, validation_documents = 0;
  int64_t tokens = 0, validation_tokens = 0;
};

// Writes a token file to PATH.tmp-PID, then renames it to PATH on finish(); destroyed before
// finish() (or after an error) it removes the temporary file.
class TokenFileWriter {
 public:
  // `eot` is the end-of-text id that separates documents when they are packed.
  static Result<std::unique_ptr<TokenFileWriter>> create(const std::string& path, const Tokenizer& tokenizer,
                                                         int32_t eot);
  ~TokenFileWriter();
  // One document's ids (each in [0, vocab)); `content_hash` decides its split (document_hash of
  // its text). An empty document is skipped.
  Status add_document(std::span<const int32_t> ids, uint64_t content_hash);
  // Splits documents by token_file_is_validation(hash, val_frac), at least one of each (error
  // with fewer than two documents), writes the index and renames into place.
  Result<TokenFileSummary> finish(double val_frac);

 private:
  TokenFileWriter() = default;
  std::string path_, tmp_;
  std::unique_ptr<FileWriter> out_;
  int width_ = 2;
  int32_t vocab_ = 0;
  uint64_t tokens_ = 0;
  std::vector<uint64_t> ends_, hashes_;
  std::vector<uint8_t> buf_;
  bool done_ = false;
};

// A token file opened for reading: memory-mapped, every part checked on open (magic, version,
// sizes against the file's length, document ends in order and in range, split flags, token ids
// below the vocabulary size, the embedded tokenizer's fingerprint). Errors: "PATH: <problem>".
class TokenFile {
 public:
  static Result<std::shared_ptr<const TokenFile>> open(const std::string& path);

  const std::string& path() const { return map_.path(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  std::shared_ptr<const Tokenizer> shared_tokenizer() const { return tokenizer_; }
  const std::string& fingerprint() const { return fingerprint_; }
  int32_t vocab_size() const { return vocab_; }
  int32_t eot() const { return eot_; }
  int token_width() const { return width_; }
  int64_t tokens() const { return n_tokens_; }
  int64_t documents() const { return n_docs_; }
  int64_t validation_documents() const { return n_val_; }
  int64_t doc_begin(int64_t d) const { return d == 0 ? 0 : static_cast<int64_t>(ends_[d - 1]); }
  int64_t doc_end(int64_t d) const { return static_cast<int64_t>(ends_[d]); }
  bool is_validation(int64_t d) const { return split_[d] != 0; }
  // Tokens [begin, begin + n) of the concatenation, widened to int32.
  void copy_tokens(int64_t begin, int64_t n, int32_t* out) const;

 private:
  TokenFile() = default;
  MappedFile map_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::string fingerprint_;
  int32_t vocab_ = 0, eot_ = 0;
  int width_ = 2;
  int64_t n_tokens_ = 0, n_docs_ = 0, n_val_ = 0;
  const uint8_t* tokens_ = nullptr;
  const uint64_t* ends_ = nullptr;  // 8-aligned in the map
  const uint8_t* split_ = nullptr;
};

}  // namespace ftx
