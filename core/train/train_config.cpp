#include "core/train/train_config.h"

#include <cmath>
#include <cstdio>

namespace ftx {

Status TrainConfig::validate(FieldName name) const {
  FTX_TRY(check_fields(*this, name));
  if (dataset.empty())
    return make_error(name(find_field<TrainConfig>("dataset")) + ": empty (a dataset must be named)");
  if (auto f = parse_free_bits(free_bits); !f)
    return make_error(name(find_field<TrainConfig>("free_bits")) + " " + f.error().message);
  if (!dataset_options.is_object())
    return make_error(std::string("dataset options must be a JSON object, got ") + dataset_options.type_name());
  return {};
}

FreeBitsForm TrainConfig::free_bits_form() const {
  auto f = parse_free_bits(free_bits);
  FT_ASSERT(f.ok(), "free_bits \"%s\" was not validated", free_bits.c_str());
  return *f;
}

float TrainConfig::kappa_at(int step) const {
  if (kappa_start_nats < 0 || kappa_anneal_steps <= 0 || step >= kappa_anneal_steps) return kappa_nats;
  const float f = static_cast<float>(step) / kappa_anneal_steps;
  return kappa_start_nats + f * (kappa_nats - kappa_start_nats);
}

float TrainConfig::lr_at(int step) const {
  if (step < warmup) return lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  const int span = steps - warmup;
  if (span <= 0) return lr;
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  const double cosine = 0.5 * (1.0 + std::cos(3.14159265358979 * progress));
  return static_cast<float>(lr * (min_lr_frac + (1.0 - min_lr_frac) * cosine));
}

nlohmann::json train_config_to_json(const TrainConfig& t) {
  nlohmann::json j = nlohmann::json::object();
  fields_to_json(t, j);
  for (const auto& [key, value] : t.dataset_options.items()) {
    FT_ASSERT(!j.contains(key), "dataset option '%s' has the key of a training field", key.c_str());
    j[key] = value;
  }
  return j;
}

// Reads what train_config_to_json wrote; missing keys keep their defaults (older runs).
Result<TrainConfig> train_config_from_json(const nlohmann::json& j, const std::string& where) {
  TrainConfig t;
  if (j.is_object() && !j.contains("free_bits")) t.free_bits = free_bits_name(FreeBitsForm::PerPair);  // older runs
  FTX_TRY(fields_from_json(j, t, where + ": training config"));
  nlohmann::json fields;
  fields_to_json(TrainConfig{}, fields);
  for (const auto& [key, value] : j.items())
    if (!fields.contains(key)) t.dataset_options[key] = value;
  if (auto v = t.validate(); !v) return make_error(where + ": training config: " + v.error().message);
  return t;
}

}  // namespace ftx
