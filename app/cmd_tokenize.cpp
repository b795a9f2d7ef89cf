// ftx tokenize: a model's tokenizer on text (ids, or ids back to text), or a corpus of files
// tokenized into a token data file (core/data/token_file.h).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/common.h"
#include "core/data/token_file.h"
#include "core/eval/kind_groups.h"
#include "core/io/model_file.h"
#include "core/text/bpe_train.h"
#include "core/text/tokenizer_json.h"
#include "core/text/unicode_text.h"
#include "core/util/fs.h"

namespace ftx::app {

using nlohmann::json;

void add_tokenize_options(CLI::App& app, TokenizeArgs& a) {
  auto* c = app.add_subcommand("tokenize", "Text to token ids with a model's tokenizer, or ids back to text");
  c->add_option("--checkpoint", a.checkpoint, "A checkpoint directory or a .gguf file (its tokenizer)");
  c->add_option("--text", a.text, "The input (default: standard input)");
  c->add_flag("--decode", a.decode, "The input is token ids (space-separated): print their text");
  c->add_flag("--no-bos", a.no_bos, "Do not prepend BOS even where the model wants it");
  c->add_flag("--json", a.json, "{\"ids\": [...], \"text\": \"...\"}");
  c->add_option("--input", a.inputs, "Files or directories (walked recursively) to tokenize into --out");
  c->add_option("--out", a.out, "Token data file to write (one document per input file)");
  c->add_option("--val-frac", a.val_frac, "Fraction of documents held out for validation (by content hash)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  c->add_option("--ext", a.ext, "Extensions of the files taken from directories, e.g. .py,.txt (default: all)");
  c->add_option("--kinds", a.kinds,
                "The --input folder holds one subfolder per kind (e.g. python,c,perl,prose): every file must be "
                "UTF-8 text; writes DATA.kinds.json with each kind's documents and tokens");
  c->add_option("--bpe-vocab", a.bpe_vocab,
                "Instead of --checkpoint: train a byte-level BPE of N tokens on --input's training documents; "
                "the token file carries it")
      ->check(CLI::Range(257, 1 << 20));
}

namespace {

// "a,b,,c" -> {"a", "b", "", "c"}: the entries of a comma-separated option, empty ones kept.
std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// --kinds: the names, and the kind of each file (its first folder under the corpus).
struct KindCorpus {
  std::vector<std::string> names;
  std::vector<int> file_kind;  // per file of corpus_files, an index into names
};

Result<KindCorpus> kind_corpus(const std::string& list, const std::string& root,
                               const std::vector<std::string>& files) {
  namespace fs = std::filesystem;
  KindCorpus k;
  for (const std::string& name : split_commas(list)) {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      return make_error("--kinds \"" + list + "\": kinds are folder names separated by commas");
    k.names.push_back(name);
  }
  std::vector<int> count(k.names.size(), 0);
  for (const std::string& f : files) {
    const std::string first = fs::path(f).lexically_relative(root).begin()->string();
    const auto it = std::find(k.names.begin(), k.names.end(), first);
    if (it == k.names.end()) return make_error(f + ": not in a kind folder (" + list + ")");
    k.file_kind.push_back(int(it - k.names.begin()));
    ++count[k.file_kind.back()];
  }
  for (size_t i = 0; i < k.names.size(); ++i)
    if (count[i] == 0) return make_error(join(root, k.names[i]) + ": no files of kind " + k.names[i]);
  return k;
}

}  // namespace

// The files the inputs name: a file as given, a directory's regular files (recursively, sorted,
// filtered by extension). Error: an input that does not exist.
Result<std::vector<std::string>> corpus_files(const std::vector<std::string>& inputs, const std::string& ext_list,
                                              int64_t* unreadable) {
  namespace fs = std::filesystem;
  std::vector<std::string> exts;
  for (std::string& e : split_commas(ext_list))
    if (!e.empty()) exts.push_back(std::move(e));
  const auto wanted = [&](const fs::path& p) {
    if (exts.empty()) return true;
    const std::string name = p.filename().string();
    return std::any_of(exts.begin(), exts.end(), [&](const std::string& e) { return name.ends_with(e); });
  };
  std::vector<std::string> out;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      fs::recursive_directory_iterator it(in, fs::directory_options::skip_permission_denied, ec), end;
      if (ec) return make_error(in + ": cannot list: " + ec.message());
      for (; it != end; it.increment(ec)) {
        if (ec) {
          ++*unreadable;
          break;
        }
        std::error_code fe;
        if (it->is_regular_file(fe) && wanted(it->path())) found.push_back(it->path().string());
      }
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    } else if (fs::exists(in, ec)) {
      out.push_back(in);
    } else {
      return make_error(in + ": no such file or directory");
    }
  }
  return out;
}

// ftx tokenize --input ... --out DATA: files read and encoded a batch at a time on every core,
// written in order; nothing of the corpus is kept but the document index.
int tokenize_corpus(const TokenizeArgs& a, const Tokenizer& t) {
  if (a.inputs.empty()) return fail("--out needs --input FILE|DIR");
  const auto eot = end_of_text_id(t);
  if (!eot)
    return fail((a.checkpoint.empty() ? std::string("--bpe-vocab") : a.checkpoint) +
                ": its tokenizer has no end-of-text token (<|endoftext|>, <|end_of_text|>, </s> or eos)");
  int64_t unreadable = 0, not_utf8 = 0, not_encodable = 0, empty = 0, bytes = 0;
  const bool strict = !a.kinds.empty();  // --kinds: a bad file is an error, not skipped
  if (strict && (a.inputs.size() != 1 || !std::filesystem::is_directory(a.inputs[0])))
    return fail("--kinds needs one --input folder with a subfolder per kind");
  auto files = corpus_files(a.inputs, a.ext, &unreadable);
  if (!files) return fail(files.error());
  if (files->empty()) return fail(a.inputs[0] + ": no files to tokenize" + (a.ext.empty() ? "" : " with " + a.ext));
  if (strict && unreadable) return fail(a.inputs[0] + ": a folder of the corpus cannot be listed");
  KindCorpus kinds;
  if (strict) {
    auto k = kind_corpus(a.kinds, a.inputs[0], *files);
    if (!k) return fail(k.error());
    kinds = std::move(*k);
  }
  struct KindCount {
    int64_t documents = 0, tokens = 0, validation_documents = 0, validation_tokens = 0;
  };
  std::vector<KindCount> per_kind(kinds.names.size());
  auto w = TokenFileWriter::create(a.out, t, *eot);
  if (!w) return fail(w.error());
  const auto t0 = std::chrono::steady_clock::now();
  struct Doc {
    std::vector<int32_t> ids;
    uint64_t hash = 0;
    int status = 0;   // 0 ok, 1 unreadable, 2 not UTF-8, 3 not encodable, 4 binary
    std::string why;  // the reason, for --kinds
    int64_t bytes = 0;
  };
  const size_t kBatch = 256;
  const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<Doc> docs;
  for (size_t first = 0; first < files->size(); first += kBatch) {
    const size_t n = std::min(kBatch, files->size() - first);
    docs.assign(n, Doc{});
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t k; (k = next.fetch_add(1)) < n;) {
        Doc& d = docs[k];
        auto text = read_small_file((*files)[first + k], 1ull << 30);
        if (!text) {
          d.status = 1, d.why = text.error().message;
          continue;
        }
        d.bytes = static_cast<int64_t>(text->size());
        if (const size_t nul = text->find('\0'); strict && nul != std::string::npos) {
          d.status = 4, d.why = (*files)[first + k] + ": binary (a NUL byte at offset " + std::to_string(nul) + ")";
          continue;
        }
        if (const size_t bad = text::utf8_invalid_offset(*text); bad != std::string_view::npos) {
          d.status = 2, d.why = (*files)[first + k] + ": not UTF-8 (byte " + std::to_string(bad) + ")";
          continue;
        }
        auto ids = t.encode(*text);
        if (!ids) {
          d.status = 3, d.why = (*files)[first + k] + ": " + ids.error().message;
          continue;
        }
        d.ids = std::move(*ids);
        d.hash = document_hash(*text);
      }
    };
    std::vector<std::thread> pool;
    for (unsigned i = 1; i < std::min<size_t>(workers, n); ++i) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
    for (size_t k = 0; k < n; ++k) {
      Doc& d = docs[k];
      if (strict && d.status) return fail(d.why);  // the temporary token file is removed
      if (strict && d.ids.empty()) return fail((*files)[first + k] + ": empty");
      unreadable += d.status == 1, not_utf8 += d.status == 2, not_encodable += d.status == 3;
      if (d.status) continue;
      if (d.ids.empty()) {
        ++empty;
        continue;
      }
      bytes += d.bytes;
      if (strict) {
        KindCount& c = per_kind[size_t(kinds.file_kind[first + k])];
        const bool val = token_file_is_validation(d.hash, a.val_frac);
        c.documents += 1, c.tokens += int64_t(d.ids.size());
        c.validation_documents += val, c.validation_tokens += val ? int64_t(d.ids.size()) : 0;
      }
      if (auto st = (*w)->add_document(d.ids, d.hash); !st) return fail(st.error());
    }
  }
  // The kinds' counts go next to the token file before it is put in place: both or neither.
  if (strict) {
    json j = {{"corpus", a.inputs[0]}, {"val_frac", a.val_frac}, {"kinds", json::array()}};
    int64_t total = 0;
    for (const KindCount& c : per_kind) total += c.tokens;
    double chance = 0.0;
    for (size_t i = 0; i < per_kind.size(); ++i) {
      const KindCount& c = per_kind[i];
      const double share = total ? double(c.tokens) / double(total) : 0.0;
      chance += share * share;
      j["kinds"].push_back({{"kind", kinds.names[i]},
                            {"documents", c.documents},
                            {"tokens", c.tokens},
                            {"token_share", share},
                            {"validation_documents", c.validation_documents},
                            {"validation_tokens", c.validation_tokens}});
    }
    j["chance_agreement"] = chance;  // sum of squared token shares: two sequences of the same kind by chance
    if (auto st = write_file_durable(kinds_json_path(a.out), j.dump(2) + "\n"); !st) return fail(st.error());
  }
  auto sum = (*w)->finish(a.val_frac);
  if (!sum) {
    if (strict) std::filesystem::remove(kinds_json_path(a.out));
    return fail(sum.error());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "%s: %lld documents (%.2f MiB), %lld tokens; training %lld documents / %lld tokens, validation %lld / "
      "%lld\n",
      a.out.c_str(), static_cast<long long>(sum->documents), double(bytes) / double(1 << 20),
      static_cast<long long>(sum->tokens), static_cast<long long>(sum->documents - sum->validation_documents),
      static_cast<long long>(sum->tokens - sum->validation_tokens), static_cast<long long>(sum->validation_documents),
      static_cast<long long>(sum->validation_tokens));
  for (size_t i = 0; i < per_kind.size(); ++i)
    std::printf("  %-10s %6lld documents %10lld tokens (validation %lld / %lld)\n", kinds.names[i].c_str(),
                static_cast<long long>(per_kind[i].documents), static_cast<long long>(per_kind[i].tokens),
                static_cast<long long>(per_kind[i].validation_documents),
                static_cast<long long>(per_kind[i].validation_tokens));
  std::printf("skipped %lld files: %lld unreadable, %lld not UTF-8, %lld not encodable, %lld empty\n",
              static_cast<long long>(unreadable + not_utf8 + not_encodable + empty), static_cast<long long>(unreadable),
              static_cast<long long>(not_utf8), static_cast<long long>(not_encodable), static_cast<long long>(empty));
  std::printf("end of text: id %d %s; %.0f tokens/s (%.1f s)\n", *eot,
              text::quote_token(std::string(t.token_bytes(*eot))).c_str(), secs > 0 ? double(sum->tokens) / secs : 0.0,
              secs);
  return 0;
}

namespace {

// --bpe-vocab: a byte-level BPE trained on the training documents of the corpus (the ones the
// token file's split keeps for training); files that cannot be read or are not UTF-8 are left to
// tokenize_corpus, which skips or refuses them.
Result<std::unique_ptr<BpeTokenizer>> train_corpus_bpe(const TokenizeArgs& a) {
  int64_t unreadable = 0;
  auto files = corpus_files(a.inputs, a.ext, &unreadable);
  if (!files) return files.error();
  const auto t0 = std::chrono::steady_clock::now();
  BpeTrainer trainer;
  int64_t docs = 0, bytes = 0;
  for (const std::string& f : *files) {
    auto text = read_small_file(f, 1ull << 30);
    if (!text || token_file_is_validation(document_hash(*text), a.val_frac)) continue;
    if (!trainer.add_text(*text, f)) continue;
    ++docs, bytes += int64_t(text->size());
  }
  auto vocab = trainer.train(a.bpe_vocab);
  if (!vocab) return vocab.error();
  auto tok = bpe_from_vocab(*vocab, "--bpe-vocab " + std::to_string(a.bpe_vocab));
  if (!tok) return tok.error();
  std::printf("BPE: %zu tokens (%zu merges) from %lld training documents (%.2f MiB, %zu distinct pieces), %.1f s\n",
              vocab->tokens.size(), vocab->merges.size(), static_cast<long long>(docs), double(bytes) / double(1 << 20),
              trainer.distinct_pieces(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return tok;
}

}  // namespace

int run_tokenize(const TokenizeArgs& a) {
  if (a.bpe_vocab > 0) {
    if (!a.checkpoint.empty()) return fail("--bpe-vocab trains its own tokenizer: give it or --checkpoint, not both");
    if (a.inputs.empty() || a.out.empty()) return fail("--bpe-vocab needs --input and --out");
    auto tok = train_corpus_bpe(a);
    if (!tok) return fail(tok.error());
    return tokenize_corpus(a, **tok);
  }
  if (a.checkpoint.empty()) return fail("--checkpoint is required (or --bpe-vocab N with --input and --out)");
  auto f = ModelFile::open(a.checkpoint);
  if (!f) return fail(f.error());
  const ModelInfo& info = (*f)->info();
  if (!info.tokenizer) return fail(a.checkpoint + ": has no tokenizer (token ids only)");
  const Tokenizer& t = *info.tokenizer;
  if (!a.out.empty() || !a.inputs.empty()) {
    if (a.out.empty()) return fail("--input needs --out DATA");
    if (a.decode || !a.text.empty()) return fail("--input/--out cannot be combined with --text or --decode");
    return tokenize_corpus(a, t);
  }
  std::string input = a.text;
  if (input.empty() && !isatty(STDIN_FILENO))
    input.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  std::vector<int32_t> ids;
  if (a.decode) {
    std::istringstream in(input);
    std::string word;
    while (in >> word) {
      char* end = nullptr;
      const long v = std::strtol(word.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || v >= t.vocab_size())
        return fail("--decode: '" + word + "' is not a token id in 0.." + std::to_string(t.vocab_size() - 1));
      ids.push_back(int32_t(v));
    }
  } else {
    auto enc = t.encode(input);
    if (!enc) return fail("input: " + enc.error().message);
    if (info.add_bos && !a.no_bos && t.special_tokens().bos) ids.push_back(*t.special_tokens().bos);
    ids.insert(ids.end(), enc->begin(), enc->end());
  }
  if (a.json) {
    std::printf(
        "%s\n",
        json{{"ids", ids}, {"text", t.decode(ids)}}.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
  }
  if (a.decode) {
    const std::string text = t.decode(ids);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
  } else {
    std::string line;
    for (int32_t id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace ftx::app
