// Typed field access for the task loaders of choice_tasks.cpp and generative_tasks.cpp: every
// failure is one line "<path>: line N: field 'x' <problem>", so that a file of another task names
// the first field it lacks. Internal to core/eval/bench.
#pragma once
#include <string>
#include <vector>

#include "core/eval/bench/task.h"

namespace ftx::bench {

inline std::string field_where(const std::string& path, int line, const std::string& field) {
  return path + ": line " + std::to_string(line) + ": field '" + field + "'";
}

inline Result<const nlohmann::json*> get_field(const nlohmann::json& obj, const std::string& field,
                                               const std::string& path, int line) {
  auto it = obj.find(field);
  if (it == obj.end()) return make_error(field_where(path, line, field) + " missing");
  return &*it;
}

// An index written as a JSON integer or as a string of digits (HellaSwag's "label": "3",
// WinoGrande's "answer": "1"; PIQA, BoolQ and MMLU use integers).
inline Result<int> get_index(const nlohmann::json& obj, const std::string& field, const std::string& path, int line) {
  auto f = get_field(obj, field, path, line);
  if (!f) return f.error();
  const nlohmann::json& v = **f;
  if (v.is_number_integer()) return v.get<int>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (!s.empty() && s.size() < 9 && s.find_first_not_of("0123456789") == std::string::npos) return std::stoi(s);
  }
  return make_error(field_where(path, line, field) + " is not an integer (got " + v.dump() + ")");
}

inline Result<std::vector<std::string>> get_string_list(const nlohmann::json& obj, const std::string& field,
                                                        const std::string& path, int line) {
  auto f = get_field(obj, field, path, line);
  if (!f) return f.error();
  const nlohmann::json& v = **f;
  if (!v.is_array()) return make_error(field_where(path, line, field) + " is not a list");
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string()) return make_error(field_where(path, line, field) + " holds a non-string");
    out.push_back(e.get<std::string>());
  }
  if (out.empty()) return make_error(field_where(path, line, field) + " is an empty list");
  return out;
}

// `choices: {"text": [...], "label": [...]}` (ARC, OpenBookQA, CommonsenseQA).
struct LabelledChoices {
  std::vector<std::string> text, label;
};
inline Result<LabelledChoices> get_labelled_choices(const nlohmann::json& obj, const std::string& path, int line) {
  auto f = get_field(obj, "choices", path, line);
  if (!f) return f.error();
  if (!(*f)->is_object()) return make_error(field_where(path, line, "choices") + " is not an object {text, label}");
  auto text = get_string_list(**f, "text", path, line);
  if (!text) return make_error(field_where(path, line, "choices.text") + " missing or not a list of strings");
  auto label = get_string_list(**f, "label", path, line);
  if (!label) return make_error(field_where(path, line, "choices.label") + " missing or not a list of strings");
  if (text->size() != label->size())
    return make_error(field_where(path, line, "choices") + ": " + std::to_string(text->size()) + " texts but " +
                      std::to_string(label->size()) + " labels");
  return LabelledChoices{std::move(*text), std::move(*label)};
}

}  // namespace ftx::bench
