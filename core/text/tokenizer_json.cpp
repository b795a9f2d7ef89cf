// The tokenizer's JSON forms: one branch per tokenizer type.
#include "core/text/tokenizer_json.h"

#include <filesystem>

#include "core/text/bpe_tokenizer.h"
#include "core/text/char_tokenizer.h"
#include "core/util/fs.h"
#include "core/util/json_strict.h"

namespace ftx {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxTokenizerFile = 512ull << 20;

Result<std::shared_ptr<const Tokenizer>> chars_from_json(const json& j, const std::string& path) {
  auto alphabet = j.find("alphabet");
  if (alphabet == j.end() || !alphabet->is_string() || alphabet->get<std::string>().empty())
    return make_error(path + ": key 'tokenizer.alphabet': missing, empty or not a string");
  return std::shared_ptr<const Tokenizer>(std::make_shared<CharTokenizer>(alphabet->get<std::string>()));
}

// "chars" or "bpe"; an error naming the key otherwise.
Result<std::string> type_of(const json& j, const std::string& path) {
  if (!j.is_object()) return make_error(path + ": key 'tokenizer': must be an object, got " + j.type_name());
  auto type = j.find("type");
  if (type == j.end() || !type->is_string())
    return make_error(path + ": key 'tokenizer.type': missing or not a string (expected \"chars\" or \"bpe\")");
  const std::string t = type->get<std::string>();
  if (t != "chars" && t != "bpe")
    return make_error(path + ": key 'tokenizer.type': " + type->dump() + " is not supported (\"chars\" or \"bpe\")");
  return t;
}

bool is_plain_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos && f.find('\0') == std::string::npos;
}

}  // namespace

json tokenizer_to_json(const Tokenizer& t) {
  if (const auto* chars = dynamic_cast<const CharTokenizer*>(&t))
    return {{"type", "chars"}, {"alphabet", chars->alphabet()}};
  FT_ASSERT(dynamic_cast<const BpeTokenizer*>(&t) != nullptr, "tokenizer type '%s' has no JSON form", t.type().c_str());
  return {{"type", "bpe"}, {"fingerprint", t.fingerprint()}, {"vocab_size", t.vocab_size()}};
}

Result<std::shared_ptr<const Tokenizer>> tokenizer_from_json(const json& j, const std::string& path) {
  return load_tokenizer(j, std::filesystem::path(path).parent_path().string(), path);
}

Status save_tokenizer(const Tokenizer& t, const std::string& dir, json& config_tokenizer_obj) {
  config_tokenizer_obj = tokenizer_to_json(t);
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(&t);
  if (!bpe) return {};
  FTX_TRY(write_file_durable((std::filesystem::path(dir) / kTokenizerFileName).string(), bpe->to_tokenizer_json()));
  // "file" first for a reader's eye; nlohmann sorts keys anyway.
  config_tokenizer_obj["file"] = kTokenizerFileName;
  return {};
}

Result<std::shared_ptr<const Tokenizer>> load_tokenizer(const json& obj, const std::string& dir,
                                                        const std::string& where) {
  auto type = type_of(obj, where);
  if (!type) return type.error();
  if (*type == "chars") return chars_from_json(obj, where);
  const auto file = obj.find("file");
  if (file == obj.end())
    return make_error(where +
                      ": key 'tokenizer.file': missing (a bpe tokenizer is kept in its own file; a run's "
                      "stored reference cannot be loaded)");
  if (!file->is_string() || !is_plain_name(file->get<std::string>()))
    return make_error(where + ": key 'tokenizer.file': must be a file name in the same directory, got " + file->dump());
  const std::string path = (std::filesystem::path(dir) / file->get<std::string>()).string();
  auto t = bpe_from_tokenizer_json(path);
  if (!t) return t.error();
  std::shared_ptr<const Tokenizer> tok(std::move(*t));
  if (const auto fp = obj.find("fingerprint"); fp != obj.end()) {
    if (!fp->is_string()) return make_error(where + ": key 'tokenizer.fingerprint': must be a string");
    if (fp->get<std::string>() != tok->fingerprint())
      return make_error(where + ": key 'tokenizer.fingerprint': " + path + " is a different tokenizer (fingerprint " +
                        tok->fingerprint().substr(0, 12) + "..., expected " + fp->get<std::string>().substr(0, 12) +
                        "...)");
  }
  if (const auto n = obj.find("vocab_size"); n != obj.end()) {
    if (!n->is_number_integer() || n->get<int64_t>() != tok->vocab_size())
      return make_error(where + ": key 'tokenizer.vocab_size': " + n->dump() + " but " + path + " has " +
                        std::to_string(tok->vocab_size()) + " tokens");
  }
  return tok;
}

std::string tokenizer_to_text(const Tokenizer& t) {
  if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(&t)) return bpe->to_tokenizer_json();
  return tokenizer_to_json(t).dump() + "\n";
}

Result<std::shared_ptr<const Tokenizer>> tokenizer_from_text(std::string_view text, const std::string& source) {
  auto j = parse_json_strict(text, source);
  if (!j) return j.error();
  if (j->is_object() && j->contains("type") && (*j)["type"] == "chars") return chars_from_json(*j, source);
  auto t = bpe_from_tokenizer_json_text(text, source);
  if (!t) return t.error();
  return std::shared_ptr<const Tokenizer>(std::move(*t));
}

std::optional<int32_t> end_of_text_id(const Tokenizer& t) {
  if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(&t)) {
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>"})
      if (auto id = bpe->token_id(name)) return id;
  }
  return t.special_tokens().eos;
}

}  // namespace ftx
