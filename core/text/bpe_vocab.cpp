// bpe_from_vocab: a GGUF file's tokenizer.ggml.* vocabulary as llama.cpp reads and encodes it
// (src/llama-vocab.cpp): the pre-tokenizer regexes by tokenizer.ggml.pre, merges "left right"
// split at the first space after the first byte, CONTROL / USER_DEFINED / UNKNOWN tokens cut out
// of the text longest first.
#include <algorithm>
#include <climits>

#include "core/text/bpe_impl.h"
#include "core/text/unicode_text.h"

namespace ftx {
namespace {

using Impl = BpeTokenizer::Impl;

constexpr int32_t kTypeUnknown = 2, kTypeControl = 3, kTypeUserDefined = 4;

const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// llama.cpp's pre-tokenizer types (llm_tokenizer_bpe): the regexes applied in turn, each one's
// matches and the gaps between them becoming pieces.
struct PreType {
  std::vector<std::string> names;
  std::vector<std::string> regexes;
  bool ignore_merges = false;
};

const std::vector<PreType>& pre_types() {
  static const std::vector<PreType> types = {
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", text::kGpt2Pattern, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"gpt2", "gpt-2", "phi-2", "mpt", "olmo"}, {text::kGpt2Pattern}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"}, {kLlama3Pattern}, true},
      {{"dbrx", "smaug-bpe"}, {kLlama3Pattern}},
      {{"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"}, {kQwen2Pattern}},
      {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
       {R"(\p{N})", text::kGpt2Pattern}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", text::kGpt2Pattern, "[0-9][0-9][0-9]"}},
  };
  return types;
}

std::string supported_pre_types() {
  std::string s;
  for (const PreType& t : pre_types())
    for (const std::string& n : t.names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

Status read_tokens(const BpeVocab& v, Impl& im, const std::string& prefix) {
  const size_t n = v.tokens.size();
  im.spelling = v.tokens;
  im.bytes.resize(n);
  im.special.assign(n, 0);
  im.in_model.assign(n, 1);
  im.id_of.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = v.tokens[i];
    const std::string where = prefix + "token " + std::to_string(i) + " " + quote_token(t);
    if (t.empty()) return make_error(prefix + "token " + std::to_string(i) + " is empty");
    if (text::utf8_invalid_offset(t) != std::string::npos) return make_error(where + ": not valid UTF-8");
    const auto [it, fresh] = im.id_of.emplace(t, static_cast<int32_t>(i));
    if (!fresh) return make_error(where + ": also token " + std::to_string(it->second));
    const int32_t type = v.token_types.empty() ? 1 : v.token_types[i];
    im.special[i] = type == kTypeControl;
    const bool plain_text = type == kTypeControl || type == kTypeUserDefined;
    im.bytes[i] = plain_text ? t : text::unspell(t);
    if (type == kTypeControl || type == kTypeUserDefined || type == kTypeUnknown) {
      AddedToken& a = im.added.emplace_back();
      a.content = a.match = t;
      a.id = static_cast<int32_t>(i);
      a.special = type == kTypeControl;
    }
  }
  // Longest first; among equals, lower ids first (llama.cpp leaves that order unspecified).
  std::stable_sort(im.added.begin(), im.added.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  return {};
}

Status read_merges(const BpeVocab& v, Impl& im, const std::string& prefix) {
  im.merges.reserve(v.merges.size());
  im.merge_list.reserve(v.merges.size());
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& m = v.merges[r];
    const std::string where = prefix + "merge " + std::to_string(r) + " " + quote_token(m);
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos || sp + 1 >= m.size()) return make_error(where + ": not two tokens");
    const std::string left = m.substr(0, sp), right = m.substr(sp + 1);
    const auto l = im.id_of.find(left), rt = im.id_of.find(right), res = im.id_of.find(left + right);
    if (l == im.id_of.end()) return make_error(where + ": " + quote_token(left) + " is not a token");
    if (rt == im.id_of.end()) return make_error(where + ": " + quote_token(right) + " is not a token");
    if (res == im.id_of.end())
      return make_error(where + ": the merged " + quote_token(left + right) + " is not a token");
    // A repeated pair keeps its first rank (llama.cpp's bpe_ranks.emplace).
    if (im.merges.emplace(Impl::pair_key(l->second, rt->second), BpeMerge{static_cast<int32_t>(r), res->second}).second)
      im.merge_list.emplace_back(l->second, rt->second);
  }
  return {};
}

Status check_special(const char* name, std::optional<int32_t> id, size_t n, const std::string& prefix) {
  if (id && (*id < 0 || static_cast<size_t>(*id) >= n))
    return make_error(prefix + name + " id " + std::to_string(*id) + " is outside the vocabulary of " +
                      std::to_string(n) + " tokens");
  return {};
}

}  // namespace

Result<std::unique_ptr<BpeTokenizer>> bpe_from_vocab(const BpeVocab& vocab, const std::string& source) {
  const std::string prefix = source + ": tokenizer: ";
  const std::string pre_name = vocab.pre.empty() ? "default" : vocab.pre;  // llama.cpp's fallback
  const auto& types = pre_types();
  const auto pt = std::find_if(types.begin(), types.end(), [&](const PreType& t) {
    return std::find(t.names.begin(), t.names.end(), pre_name) != t.names.end();
  });
  if (pt == types.end())
    return make_error(prefix + "pre-tokenizer type " + quote_token(pre_name) +
                      " is not supported (supported: " + supported_pre_types() + ")");
  if (vocab.tokens.empty()) return make_error(prefix + "no tokens");
  if (vocab.tokens.size() > static_cast<size_t>(INT32_MAX)) return make_error(prefix + "too many tokens");
  if (!vocab.token_types.empty() && vocab.token_types.size() != vocab.tokens.size())
    return make_error(prefix + std::to_string(vocab.token_types.size()) + " token types for " +
                      std::to_string(vocab.tokens.size()) + " tokens");

  auto im = std::make_shared<Impl>();
  im->flavor = Impl::Flavor::kLlamaCpp;
  FTX_TRY(read_tokens(vocab, *im, prefix));
  FTX_TRY(read_merges(vocab, *im, prefix));
  FTX_TRY(check_special("bos", vocab.special.bos, vocab.tokens.size(), prefix));
  FTX_TRY(check_special("eos", vocab.special.eos, vocab.tokens.size(), prefix));
  FTX_TRY(check_special("pad", vocab.special.pad, vocab.tokens.size(), prefix));
  if (vocab.add_bos && !vocab.special.bos) return make_error(prefix + "add_bos is set but there is no bos id");
  im->specials = vocab.special;
  im->add_bos = vocab.add_bos;
  im->ignore_merges = pt->ignore_merges;
  im->gguf_pre = pre_name;
  im->gguf_types = vocab.token_types;
  for (const std::string& pattern : pt->regexes) {
    auto re = text::Regex::compile(pattern, false);
    FT_ASSERT(re.ok(), "built-in pattern %s: %s", pattern.c_str(), re.error().message.c_str());
    text::PreStep step;
    step.regex = std::move(*re);
    im->pre.push_back(std::move(step));
  }
  text::PreStep byte_level;
  byte_level.kind = text::PreStep::Kind::kByteLevel;
  im->pre.push_back(byte_level);
  im->index_bytes();
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(im)));
}

}  // namespace ftx
