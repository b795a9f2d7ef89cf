#include "core/util/json_strict.h"

#include <set>
#include <vector>

namespace ftx {

using json = nlohmann::json;

Result<json> parse_json_strict(std::string_view text, const std::string& path) {
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore what follows it.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    return make_error(path + ": invalid JSON: NUL byte at offset " + std::to_string(nul));
  try {
    std::vector<std::set<std::string>> open_objects;
    std::string duplicate;
    bool found_duplicate = false;
    auto cb = [&](int, json::parse_event_t ev, json& parsed) {
      if (ev == json::parse_event_t::object_start) {
        open_objects.emplace_back();
      } else if (ev == json::parse_event_t::object_end) {
        if (!open_objects.empty()) open_objects.pop_back();
      } else if (ev == json::parse_event_t::key && !open_objects.empty()) {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!open_objects.back().insert(k).second && !found_duplicate) found_duplicate = true, duplicate = k;
      }
      return true;
    };
    json j = json::parse(text.begin(), text.end(), cb);
    if (found_duplicate) return make_error(path + ": duplicate key " + json(duplicate).dump());
    return j;
  } catch (const std::exception& e) {
    return make_error(path + ": invalid JSON: " + [](std::string s) {
      for (char& ch : s)
        if (ch == '\n' || ch == '\r') ch = ' ';
      return s;
    }(e.what()));
  }
}

}  // namespace ftx
