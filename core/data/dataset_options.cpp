// Reading one dataset option from TrainConfig::dataset_options (see dataset_options.h).
#include "core/data/dataset_options.h"

#include <cstdint>

namespace ftx {

Result<double> read_dataset_option(const nlohmann::json& options, const DatasetOption& o, FieldName name) {
  if (!options.is_object())
    return make_error(std::string("dataset options must be a JSON object, got ") + options.type_name());
  auto it = options.find(o.field.key);
  if (it == options.end() || it->is_null()) return o.default_value;
  double x = 0;
  if (o.integer) {
    int v = 0;
    if (std::string e = fields_detail::read_value(*it, v); !e.empty()) return make_error(name(o.field) + ": " + e);
    FTX_TRY(check_field(v, o.field, name));
    x = v;
  } else {
    if (std::string e = fields_detail::read_value(*it, x); !e.empty()) return make_error(name(o.field) + ": " + e);
    FTX_TRY(check_field(x, o.field, name));
  }
  return x;
}

Result<std::string> read_dataset_text_option(const nlohmann::json& options, const DatasetOption& o, FieldName name) {
  if (!options.is_object())
    return make_error(std::string("dataset options must be a JSON object, got ") + options.type_name());
  auto it = options.find(o.field.key);
  if (it == options.end() || it->is_null()) return std::string();
  if (!it->is_string()) return make_error(name(o.field) + ": must be a string, got " + it->dump());
  return it->get<std::string>();
}

nlohmann::json dataset_option_json(const DatasetOption& o, double value) {
  if (o.text) return std::string();
  return o.integer ? nlohmann::json(static_cast<int64_t>(value)) : nlohmann::json(value);
}

}  // namespace ftx
