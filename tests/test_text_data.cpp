// test_text_data: token data files (core/data/token_file.h) and the text dataset (datasets/text.h):
// round trips with chars and BPE tokenizers, every corruption of a file refused in one line naming
// it, the document-level split, packed batches (deterministic in (seed, position), inside the
// training documents only, documents separated by the end-of-text token), and ftx tokenize / ftx
// train --dataset text end to end on the real SmolLM2 tokenizer.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "core/data/token_file.h"
#include "core/io/checkpoint.h"
#include "core/model/params.h"
#include "core/text/bpe_tokenizer.h"
#include "core/text/char_tokenizer.h"
#include "core/text/tokenizer_json.h"
#include "core/text/unicode_text.h"
#include "datasets/registry.h"
#include "datasets/text.h"
#include "tests/real_model.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

namespace fs = std::filesystem;

// 95 printable ASCII tokens: id 0 (' ') is the end of text; document d is made of tokens equal to
// 1 + d % 94, so below 94 documents every token tells which document it came from.
constexpr int kVocab = 95;
std::string alphabet() {
  std::string a;
  for (int c = 0x20; c < 0x20 + kVocab; ++c) a += static_cast<char>(c);
  return a;
}

struct Corpus {
  std::vector<std::vector<int32_t>> docs;
};

Corpus make_docs(int n) {
  Corpus c;
  for (int d = 0; d < n; ++d) c.docs.emplace_back(3 + (d * 7) % 23, 1 + d % (kVocab - 1));
  return c;
}

uint64_t splitmix_like(uint64_t d) { return document_hash(std::to_string(d)); }

TokenFileSummary write_file(const std::string& path, const Tokenizer& t, const Corpus& c, double val_frac) {
  auto w = TokenFileWriter::create(path, t, 0);
  EXPECT_TRUE(w.ok()) << (w.ok() ? "" : w.error().message);
  for (size_t d = 0; d < c.docs.size(); ++d) EXPECT_TRUE((*w)->add_document(c.docs[d], splitmix_like(d)).ok());
  auto s = (*w)->finish(val_frac);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? *s : TokenFileSummary{};
}

class TextData : public test::TempDirTest {
 protected:
  TextData() : TempDirTest("ftx_text_data_") {}
  const CharTokenizer chars_{alphabet()};
};

TEST_F(TextData, RoundTripWithCharsTokenizer) {
  const Corpus c = make_docs(200);
  const std::string path = in_dir("a.tok");
  const TokenFileSummary s = write_file(path, chars_, c, 0.1);
  EXPECT_EQ(s.documents, 200);
  EXPECT_FALSE(fs::exists(path + ".tmp-" + std::to_string(::getpid())));
  auto f = TokenFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  const TokenFile& tf = **f;
  EXPECT_EQ(tf.documents(), 200);
  EXPECT_EQ(tf.token_width(), 2);
  EXPECT_EQ(tf.vocab_size(), kVocab);
  EXPECT_EQ(tf.eot(), 0);
  EXPECT_EQ(tf.fingerprint(), chars_.fingerprint());
  EXPECT_EQ(tf.tokenizer().fingerprint(), chars_.fingerprint());
  int64_t val = 0, total = 0;
  for (int d = 0; d < 200; ++d) {
    std::vector<int32_t> got(tf.doc_end(d) - tf.doc_begin(d));
    tf.copy_tokens(tf.doc_begin(d), static_cast<int64_t>(got.size()), got.data());
    EXPECT_EQ(got, c.docs[d]) << d;
    total += static_cast<int64_t>(got.size());
    val += tf.is_validation(d);
    EXPECT_EQ(tf.is_validation(d), token_file_is_validation(splitmix_like(d), 0.1)) << d;
  }
  EXPECT_EQ(tf.tokens(), total);
  EXPECT_EQ(tf.validation_documents(), val);
  EXPECT_EQ(s.validation_documents, val);
  EXPECT_GT(val, 5);  // about 20 of 200
  EXPECT_LT(val, 45);
}

TEST_F(TextData, AtLeastOneDocumentOfEachSplit) {
  for (double frac : {0.0, 1.0}) {
    const std::string path = in_dir("s.tok");
    const TokenFileSummary s = write_file(path, chars_, make_docs(5), frac);
    EXPECT_EQ(s.validation_documents, frac == 0.0 ? 1 : 4);
  }
  auto w = TokenFileWriter::create(in_dir("one.tok"), chars_, 0);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->add_document(std::vector<int32_t>{1, 2, 3}, 1).ok());
  auto s = (*w)->finish(0.5);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("at least two"), std::string::npos) << s.error().message;
  w->reset();
  EXPECT_FALSE(fs::exists(in_dir("one.tok")));
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos);
}

TEST_F(TextData, BpeTokenizerIsEmbedded) {
  auto bpe = bpe_from_tokenizer_json(FTX_FIXTURE_DIR "/real/tok_smollm2.json");
  ASSERT_TRUE(bpe.ok()) << bpe.error().message;
  ASSERT_EQ(end_of_text_id(**bpe), 0);
  const std::string path = in_dir("b.tok");
  auto w = TokenFileWriter::create(path, **bpe, 0);
  ASSERT_TRUE(w.ok());
  const std::vector<std::string> texts = {"def f(x):\n    return x", "import os\n", "Café déjà vu."};
  for (const std::string& text : texts)
    ASSERT_TRUE((*w)->add_document(*(*bpe)->encode(text), document_hash(text)).ok());
  ASSERT_TRUE((*w)->finish(0.3).ok());
  auto f = TokenFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ((*f)->tokenizer().fingerprint(), (*bpe)->fingerprint());
  for (int d = 0; d < 3; ++d) {
    std::vector<int32_t> ids((*f)->doc_end(d) - (*f)->doc_begin(d));
    (*f)->copy_tokens((*f)->doc_begin(d), static_cast<int64_t>(ids.size()), ids.data());
    EXPECT_EQ((*f)->tokenizer().decode(ids), texts[d]);
  }
}

// The file with `edit` applied to its bytes must be refused in one line starting with its path.
void expect_refused(const std::string& good, const std::string& path, const std::function<void(std::string&)>& edit,
                    const std::string& want) {
  std::string bytes = good;
  edit(bytes);
  {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto f = TokenFile::open(path);
  ASSERT_FALSE(f.ok()) << want;
  const std::string& m = f.error().message;
  EXPECT_EQ(m.rfind(path + ": ", 0), 0u) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_NE(m.find(want), std::string::npos) << "want '" << want << "' in: " << m;
}

TEST_F(TextData, CorruptFilesAreOneLineErrors) {
  const std::string path = in_dir("g.tok");
  write_file(path, chars_, make_docs(10), 0.3);
  const std::string good = test::read_file(path);
  ASSERT_FALSE(good.empty());
  const std::string bad = in_dir("bad.tok");
  const size_t n = good.size();
  // Layout of this file: 128-byte header, tokenizer text, tokens, 10 document ends, 10 flags (+6
  // padding), 32-byte trailer.
  const size_t split_at = n - 32 - 16, ends_at = split_at - 80;
  expect_refused(
      good, bad, [](std::string& b) { b.resize(b.size() - 1); }, "trailer");
  expect_refused(
      good, bad, [](std::string& b) { b.resize(b.size() / 2); }, "");
  expect_refused(
      good, bad, [](std::string& b) { b.resize(10); }, "not a token data file");
  expect_refused(
      good, bad, [](std::string& b) { b[0] = 'X'; }, "not a token data file");
  expect_refused(
      good, bad, [](std::string& b) { b[8] = 2; }, "version 2");
  expect_refused(
      good, bad, [](std::string& b) { b[12] = 3; }, "token width 3");
  expect_refused(
      good, bad, [](std::string& b) { b[20] = 0x7f; }, "end-of-text id");
  expect_refused(
      good, bad, [&](std::string& b) { b.insert(split_at, 8, '\0'); }, "bytes, its header and trailer say");
  expect_refused(
      good, bad,
      [&](std::string& b) {
        b[ends_at + 8 * 3] = 0;
        b[ends_at + 8 * 3 + 1] = 0;
      },
      "corrupt index");
  expect_refused(
      good, bad, [&](std::string& b) { b[split_at + 2] = 7; }, "split flag 7");
  expect_refused(
      good, bad, [&](std::string& b) { b[split_at + 2] ^= 1; }, "the trailer says");
  expect_refused(
      good, bad,
      [](std::string& b) {
        b[128 + 200] = 'a';
        b[128 + 201] = 'b';
      },
      "");  // tokenizer text
  expect_refused(
      good, bad, [](std::string& b) { b[40] ^= 1; }, "fingerprint");
  // A token id beyond the vocabulary (95): the first token made 0x0100 = 256.
  const size_t tok_at = 128 + ((good.find('\n', 128) - 128 + 1 + 7) & ~size_t{7});
  expect_refused(
      good, bad,
      [&](std::string& b) {
        b[tok_at] = 0;
        b[tok_at + 1] = 1;
      },
      "outside the vocabulary");
  auto missing = TokenFile::open(in_dir("nope.tok"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message.rfind(in_dir("nope.tok"), 0), 0u);
}

std::unique_ptr<TextDataset> open_text(const std::string& path, int seq_len, uint64_t seed,
                                       TextWindows windows = TextWindows::Packed) {
  auto f = TokenFile::open(path);
  EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
  return std::make_unique<TextDataset>(std::move(*f), seq_len, seed, windows);
}

TEST_F(TextData, BatchesAreAFunctionOfSeedAndPosition) {
  const std::string path = in_dir("d.tok");
  write_file(path, chars_, make_docs(60), 0.1);
  const int S = 33, B = 5;
  auto a = open_text(path, S, 7), b = open_text(path, S, 7), other = open_text(path, S, 8);
  std::vector<int32_t> x(B * S * 4), y(B * S * 4), z(B * S);
  for (int k = 0; k < 4; ++k) a->next(x.data() + k * B * S, B);
  b->next(y.data(), 2 * B);  // batch sizes do not matter, only positions
  b->next(y.data() + 2 * B * S, 2 * B);
  EXPECT_EQ(x, y);
  EXPECT_EQ(a->position(), 4 * B);
  // Resume: seek to a position gives the sequences from there.
  auto c = open_text(path, S, 7);
  c->seek(2 * B);
  c->next(z.data(), B);
  EXPECT_TRUE(std::equal(z.begin(), z.end(), x.begin() + 2 * B * S));
  other->next(z.data(), B);
  EXPECT_FALSE(std::equal(z.begin(), z.end(), x.begin()));
  // Validation does not depend on the position.
  std::vector<int32_t> v1(B * S), v2(B * S);
  a->validation(v1.data(), 3, B);
  c->validation(v2.data(), 3, B);
  EXPECT_EQ(v1, v2);
  // Offsets spread over the whole training stream.
  std::set<int64_t> offsets;
  for (int i = 0; i < 200; ++i) offsets.insert(a->training_offset(i) * 10 / a->training_stream_length());
  EXPECT_EQ(offsets.size(), 10u);
}

// Every token of `seqs` belongs to a document of the wanted split (or is the end of text), a run
// of one document's token never exceeds that document's length, and two documents always have an
// end-of-text token between them.
void expect_packed_from(const TokenFile& f, const std::vector<int32_t>& seqs, int S, bool validation) {
  std::map<int32_t, int64_t> len_of;  // token value -> its document's length, wanted split only (< 94 documents)
  for (int64_t d = 0; d < f.documents(); ++d) {
    const int32_t v = 1 + static_cast<int32_t>(d % (kVocab - 1));
    if (f.is_validation(d) == validation) len_of[v] = f.doc_end(d) - f.doc_begin(d);
  }
  int64_t eots = 0;
  for (size_t r = 0; r < seqs.size() / S; ++r) {
    int32_t prev = -1;
    int64_t run = 0;
    for (int t = 0; t < S; ++t) {
      const int32_t v = seqs[r * S + t];
      if (v == 0) {
        ++eots, prev = 0, run = 0;
        continue;
      }
      ASSERT_TRUE(len_of.count(v)) << "token " << v << " of a " << (validation ? "training" : "validation")
                                   << " document in row " << r;
      ASSERT_TRUE(prev <= 0 || prev == v) << "documents " << prev << " and " << v << " without end of text";
      run = prev == v ? run + 1 : 1;
      ASSERT_LE(run, len_of[v]);
      prev = v;
    }
  }
  EXPECT_GT(eots, 0);
}

TEST_F(TextData, TrainingNeverSeesValidationDocuments) {
  const std::string path = in_dir("p.tok");
  write_file(path, chars_, make_docs(90), 0.2);
  const int S = 64, B = 50;
  auto ds = open_text(path, S, 3);
  std::vector<int32_t> seqs(B * S);
  for (int k = 0; k < 4; ++k) {
    ds->next(seqs.data(), B);
    expect_packed_from(ds->file(), seqs, S, false);
  }
  ds->validation(seqs.data(), 0, B);
  expect_packed_from(ds->file(), seqs, S, true);
}

// --windows document: every sequence is the end-of-text token, then one document of the wanted
// split; a document at least seq_len - 1 long is cut inside it (never past its end), a shorter one
// repeats after end-of-text tokens; offsets reach both the start and the end of long documents.
TEST_F(TextData, DocumentWindowsHoldOneDocument) {
  const std::string path = in_dir("w.tok");
  Corpus c = make_docs(60);
  for (int d = 0; d < 60; d += 3) c.docs[d].resize(40 + d, c.docs[d][0]);  // some long documents
  write_file(path, chars_, c, 0.2);
  const int S = 33, B = 64;
  auto ds = open_text(path, S, 5, TextWindows::Document);
  const TokenFile& f = ds->file();
  std::map<int32_t, int64_t> len_of;
  for (int64_t d = 0; d < f.documents(); ++d) len_of[1 + int32_t(d % (kVocab - 1))] = f.doc_end(d) - f.doc_begin(d);
  std::vector<int32_t> seqs(B * S);
  int long_rows = 0, short_rows = 0;
  for (int k = 0; k < 6; ++k) {
    const bool validation = k == 5;
    if (validation)
      ds->validation(seqs.data(), 0, B);
    else
      ds->next(seqs.data(), B);
    expect_packed_from(f, seqs, S, validation);
    for (int r = 0; r < B; ++r) {
      const int32_t* row = seqs.data() + r * S;
      ASSERT_EQ(row[0], 0) << "row " << r << " does not open with the end-of-text token";
      const int32_t v = row[1];
      ASSERT_NE(v, 0);
      for (int t = 1; t < S; ++t) ASSERT_TRUE(row[t] == v || row[t] == 0) << "row " << r << " holds two documents";
      const int64_t eots = std::count(row, row + S, 0);
      if (len_of[v] >= S - 1) {
        EXPECT_EQ(eots, 1) << "row " << r;
        ++long_rows;
      } else {
        EXPECT_EQ(eots, 1 + (S - 1) / (len_of[v] + 1)) << "row " << r << ": a short document repeats";
        ++short_rows;
      }
    }
  }
  EXPECT_GT(long_rows, 0);
  EXPECT_GT(short_rows, 0);
  EXPECT_EQ(ds->options()["text_windows"], "document");
  EXPECT_EQ(open_text(path, S, 5)->options()["text_windows"], "packed");

  // Document-window validation spreads over the held-out stream: its first 16 offsets fall in 16
  // different sixteenths of it (consecutive windows would stay in the first documents), and 64
  // windows reach every held-out document of at least 1/32 of the stream.
  const int64_t n = ds->validation_stream_length();
  std::set<int64_t> sixteenths;
  for (int j = 0; j < 16; ++j) sixteenths.insert(ds->validation_offset(j) * 16 / n);
  EXPECT_EQ(sixteenths.size(), 16u);
  std::set<int32_t> seen, big;
  ds->validation(seqs.data(), 0, B);
  for (int r = 0; r < B; ++r) seen.insert(seqs[r * S + 1]);
  for (int64_t d = 0; d < f.documents(); ++d)
    if (f.is_validation(d) && (f.doc_end(d) - f.doc_begin(d) + 1) * 32 >= n) big.insert(1 + int32_t(d % (kVocab - 1)));
  ASSERT_FALSE(big.empty());
  for (int32_t v : big) EXPECT_TRUE(seen.count(v)) << "held-out document " << v << " never validated";
}

TEST_F(TextData, RegistryOptions) {
  const std::string path = in_dir("r.tok");
  write_file(path, chars_, make_docs(20), 0.2);
  TrainConfig t;
  t.dataset = "text";
  t.dataset_options = default_dataset_options();
  EXPECT_EQ(t.dataset_options["text_data"], "");
  EXPECT_EQ(t.dataset_options["text_seq_len"], 256);
  EXPECT_EQ(t.dataset_options["text_windows"], "");  // packed
  auto none = open_dataset(t);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("text_data: required"), std::string::npos) << none.error().message;
  t.dataset_options["text_data"] = path;
  t.dataset_options["text_seq_len"] = 17;
  auto ds = open_dataset(t);
  ASSERT_TRUE(ds.ok()) << ds.error().message;
  EXPECT_EQ((*ds)->seq_len(), 17);
  EXPECT_EQ((*ds)->name(), "text (" + path + ")");
  EXPECT_EQ((*ds)->options()["text_data"], path);
  t.dataset_options["text_windows"] = "document";
  ds = open_dataset(t);
  ASSERT_TRUE(ds.ok()) << ds.error().message;
  EXPECT_EQ((*ds)->options()["text_windows"], "document");
  t.dataset_options["text_windows"] = "documents";
  auto bad = open_dataset(t);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "text_windows 'documents': must be packed or document");
  t.dataset_options["text_windows"] = "";
  t.dataset_options["text_seq_len"] = 1;
  EXPECT_FALSE(open_dataset(t).ok());
  t.dataset_options["text_seq_len"] = 17;
  t.dataset_options["text_data"] = in_dir("missing.tok");
  auto missing = open_dataset(t);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message.rfind(in_dir("missing.tok"), 0), 0u) << missing.error().message;
}

TEST_F(TextData, TokenizeADirectoryAndTrainOnIt) {
  const std::string gguf = test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(gguf);
  fs::create_directories(in_dir("src/pkg"));
  const std::vector<std::pair<std::string, std::string>> files = {{"src/a.py", "def f(x):\n    return x + 1\n"},
                                                                  {"src/pkg/b.py", "import os\nprint(os.getcwd())\n"},
                                                                  {"src/pkg/c.py", "class A:\n    pass\n"},
                                                                  {"src/d.py", "x = 1\n"},
                                                                  {"src/notes.txt", "not python\n"},
                                                                  {"src/bad.py", "bytes \xff\xfe here\n"}};
  for (const auto& [name, text] : files) std::ofstream(in_dir(name), std::ios::binary) << text;
  const std::string data = in_dir("corpus.tok");
  auto r = test::run_ftx(
      {"tokenize", "--checkpoint", gguf, "--input", in_dir("src"), "--out", data, "--ext", ".py", "--val-frac", "0.3"},
      dir_);
  ASSERT_EQ(r.code, 0) << test::describe(r);
  EXPECT_NE(r.out.find("4 documents"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 not UTF-8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("id 0 '<|endoftext|>'"), std::string::npos) << r.out;
  auto f = TokenFile::open(data);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ((*f)->documents(), 4);
  EXPECT_EQ((*f)->eot(), 0);
  EXPECT_EQ((*f)->vocab_size(), 49152);
  // Sorted walk: a.py, d.py, pkg/b.py, pkg/c.py.
  std::vector<int32_t> ids((*f)->doc_end(0));
  (*f)->copy_tokens(0, (*f)->doc_end(0), ids.data());
  EXPECT_EQ((*f)->tokenizer().decode(ids), files[0].second);

  const std::string db = in_dir("runs.db");
  r = test::run_ftx({"train", "--dataset", "text", "--data",  data, "--seq-len",    "16", "--preset",
                     "tiny",  "--steps",   "2",    "--batch", "2",  "--eval-every", "2",  "--checkpoint-every",
                     "2",     "--db",      db,     "--run",   "t",  "--quiet"},
                    dir_);
  ASSERT_EQ(r.code, 0) << test::describe(r);
  // The data file replaced by one from another tokenizer: resuming refuses it, naming the file.
  write_file(data, chars_, make_docs(5), 0.3);
  r = test::run_ftx({"train", "--db", db, "--run", "t", "--resume", "--steps", "3", "--quiet"}, dir_);
  test::expect_one_line_error(r, {data, "is not the one run 't' was trained with"});

  r = test::run_ftx({"tokenize", "--checkpoint", gguf, "--input", in_dir("nothing"), "--out", data}, dir_);
  test::expect_one_line_error(r, {in_dir("nothing") + ": no such file or directory"});
}

TEST_F(TextData, WideVocabulariesUseFourByteTokens) {
  // A vocabulary of 70000 tokens (bytes, then made-up words) does not fit uint16.
  BpeVocab v;
  for (int i = 0; i < 256; ++i) v.tokens.push_back(std::string(text::byte_spelling(static_cast<uint8_t>(i))));
  while (v.tokens.size() < 70000) v.tokens.push_back("w" + std::to_string(v.tokens.size()));
  v.tokens.push_back("<|endoftext|>");
  v.token_types.assign(v.tokens.size(), 1);
  v.token_types.back() = 3;
  v.pre = "gpt2";
  auto t = bpe_from_vocab(v, "wide.gguf");
  ASSERT_TRUE(t.ok()) << t.error().message;
  const std::string path = in_dir("w.tok");
  auto w = TokenFileWriter::create(path, **t, 70000);
  ASSERT_TRUE(w.ok()) << w.error().message;
  const std::vector<int32_t> a = {1, 65535, 65536, 69999}, b = {70000, 3};
  ASSERT_TRUE((*w)->add_document(a, 1).ok());
  ASSERT_TRUE((*w)->add_document(b, 2).ok());
  EXPECT_FALSE((*w)->add_document(std::vector<int32_t>{70001}, 3).ok());
  ASSERT_TRUE((*w)->finish(0.5).ok());
  auto f = TokenFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ((*f)->token_width(), 4);
  EXPECT_EQ((*f)->eot(), 70000);
  std::vector<int32_t> all(6);
  (*f)->copy_tokens(0, 6, all.data());
  EXPECT_EQ(all, (std::vector<int32_t>{1, 65535, 65536, 69999, 70000, 3}));
  EXPECT_EQ((*f)->tokenizer().fingerprint(), (*t)->fingerprint());
}

TEST_F(TextData, TokenizeNeedsAnEndOfTextToken) {
  // A checkpoint whose chars tokenizer has no end-of-text token: refused, naming the checkpoint.
  CheckpointData ck;
  ck.config.vocab_size = kVocab, ck.config.dim = 8, ck.config.n_layers = 1, ck.config.n_heads = 1;
  ck.config.n_kv_heads = 1, ck.config.head_dim = 8, ck.config.ffn_hidden = 8, ck.config.max_seq_len = 16;
  ck.tokenizer = chars_.clone();
  ck.params.assign(static_cast<size_t>(param_count(param_specs(ck.config))), 0.01f);
  const std::string dir = in_dir("chars_model");
  ASSERT_TRUE(save_checkpoint(dir, ck).ok());
  std::ofstream(in_dir("doc.txt")) << "hello\n";
  auto r =
      test::run_ftx({"tokenize", "--checkpoint", dir, "--input", in_dir("doc.txt"), "--out", in_dir("x.tok")}, dir_);
  test::expect_one_line_error(r, {dir + ": its tokenizer has no end-of-text token"});
  EXPECT_FALSE(fs::exists(in_dir("x.tok")));
}

}  // namespace
}  // namespace ftx
