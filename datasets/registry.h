// Datasets by name, as a TrainConfig names them: the one list of datasets and of their options.
// make_dataset is the DatasetFactory both ftx and ftx-studio hand to core (which cannot see
// datasets/); the command line adds one option per declared dataset option.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/data/batch_source.h"
#include "core/data/dataset_options.h"
#include "core/train/train_config.h"

namespace ftx {

struct DatasetInfo {
  std::string name;                    // TrainConfig::dataset
  std::string help;                    // one line
  std::vector<DatasetOption> options;  // read from TrainConfig::dataset_options
  // Makes the source, reading its options (errors name them through the FieldName).
  Result<std::unique_ptr<BatchSource>> (*open)(const TrainConfig&, FieldName);
};
// "synthetic" (no options), "coinflip" (coinflip_eps, coinflip_len), "text" (text_data, text_seq_len).
const std::vector<DatasetInfo>& registered_datasets();
std::string dataset_name_list(const char* separator);  // "synthetic | coinflip"
// Every registered dataset's options at their defaults: what a run row holds when nothing is set.
nlohmann::json default_dataset_options();

// The dataset the config names, with its options read and checked; errors name the dataset field
// and the options through `name` (the command line passes its flags).
Result<std::unique_ptr<BatchSource>> open_dataset(const TrainConfig& t, FieldName name = field_key);
// open_dataset as a DatasetFactory: null for an unknown name or bad options.
std::unique_ptr<BatchSource> make_dataset(const TrainConfig& t);

}  // namespace ftx
