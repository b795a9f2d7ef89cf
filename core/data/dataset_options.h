// Options that belong to one dataset (the coin flip's eps and length): each dataset declares its
// own (datasets/registry.h), and TrainConfig::dataset_options carries their values by key without
// knowing them. A declaration is a Field (key, help, bounds: core/util/fields.h) with a default.
//
// Deliberately not here: the list of datasets or of their options (datasets/ owns both; core
// cannot see datasets/).
#pragma once
#include <nlohmann/json.hpp>

#include "core/util/fields.h"
#include "kernels/base/result.h"

namespace ftx {

struct DatasetOption {
  Field field;
  double default_value = 0;
  bool integer = false;  // a count or a length; else a real number
  bool text = false;     // a string (a file path); default_value unused, the default is ""
};

// The value of `o` in the object `options` (its default when the key is absent), checked for its
// JSON type and its bounds; errors name the option through `name`.
Result<double> read_dataset_option(const nlohmann::json& options, const DatasetOption& o, FieldName name = field_key);

// A text option's value ("" when absent); an error when it is not a string.
Result<std::string> read_dataset_text_option(const nlohmann::json& options, const DatasetOption& o,
                                             FieldName name = field_key);

// `value` as the JSON the option is stored as: an integer for integer options, "" for text options.
nlohmann::json dataset_option_json(const DatasetOption& o, double value);

}  // namespace ftx
