#include "core/train/run_config.h"

#include <nlohmann/json.hpp>

#include "core/io/config_json.h"
#include "core/store/run_store.h"

namespace ftx {

int64_t RunConfig::tokens_at(int64_t step) const {
  if (!train || train->dataset != "text" || train->batch <= 0) return -1;
  const auto it = train->dataset_options.find("text_seq_len");
  if (it == train->dataset_options.end() || !it->is_number_integer()) return -1;
  const int64_t seq = it->get<int64_t>();
  return seq > 1 ? step * train->batch * (seq - 1) : -1;
}

std::string run_config_json(const ModelConfig& m, const Tokenizer* tokenizer, const TrainConfig& t) {
  return nlohmann::json{{"model", config_to_json(m, tokenizer)}, {"train", train_config_to_json(t)}}.dump();
}

Result<RunConfig> parse_run_config(const std::string& config_json, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(config_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error(where + ": its config is not a JSON object");
  RunConfig c;
  if (const auto t = j.find("train"); t != j.end()) {
    if (!t->is_object()) return make_error(where + ": \"train\": expected an object");
    auto train = train_config_from_json(*t, where);
    if (!train) return train.error();
    c.train = std::move(*train);
  }
  if (const auto m = j.find("model"); m != j.end()) {
    if (!m->is_object()) return make_error(where + ": \"model\": expected an object");
    auto model = config_from_json(*m, where + ": model");
    if (!model) return model.error();
    c.model = std::move(*model);
  }
  return c;
}

Result<RunConfig> read_run_config(RunStore& store, const std::string& run) {
  auto info = store.find_run(run);
  if (!info) return info.error();
  return parse_run_config(info->config_json, store.path() + ": run '" + run + "'");
}

Result<TrainConfig> read_train_config(RunStore& store, const std::string& run) {
  auto c = read_run_config(store, run);
  if (!c) return c.error();
  if (!c->train) return make_error(store.path() + ": run '" + run + "' has no training config (not a trained run)");
  return std::move(*c->train);
}

}  // namespace ftx
