// tokenizer_to_json / tokenizer_from_json: one branch per tokenizer type.
#include "core/text/tokenizer_json.h"

#include "core/text/char_tokenizer.h"

namespace ftx {

nlohmann::json tokenizer_to_json(const Tokenizer& t) {
  const auto* chars = dynamic_cast<const CharTokenizer*>(&t);
  FT_ASSERT(chars != nullptr, "tokenizer type '%s' has no config.json form", t.type().c_str());
  return {{"type", "chars"}, {"alphabet", chars->alphabet()}};
}

Result<std::shared_ptr<const Tokenizer>> tokenizer_from_json(const nlohmann::json& j, const std::string& path) {
  auto err = [&](const std::string& key, const std::string& problem) {
    return make_error(path + ": key 'tokenizer." + key + "': " + problem);
  };
  if (!j.is_object()) return make_error(path + ": key 'tokenizer': must be an object, got " + j.type_name());
  auto type = j.find("type");
  if (type == j.end() || !type->is_string()) return err("type", "missing or not a string (expected \"chars\")");
  if (type->get<std::string>() != "chars")
    return err("type", type->dump() + " is not supported (only the chars tokenizer is stored in config.json)");
  auto alphabet = j.find("alphabet");
  if (alphabet == j.end() || !alphabet->is_string() || alphabet->get<std::string>().empty())
    return err("alphabet", "missing, empty or not a string");
  return std::shared_ptr<const Tokenizer>(std::make_shared<CharTokenizer>(alphabet->get<std::string>()));
}

}  // namespace ftx
