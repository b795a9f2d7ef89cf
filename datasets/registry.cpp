// The registered datasets and their options (see registry.h).
#include "datasets/registry.h"

#include <cmath>

#include "datasets/coinflip.h"
#include "datasets/synthetic.h"
#include "datasets/text.h"

namespace ftx {

namespace {

using Opened = Result<std::unique_ptr<BatchSource>>;

Opened open_synthetic(const TrainConfig& t, FieldName name) {
  auto noise = read_dataset_option(t.dataset_options, SyntheticDataset::noise_option(), name);
  if (!noise) return noise.error();
  const double sixteenths = *noise * 16;
  if (sixteenths != std::round(sixteenths))
    return make_error(name(SyntheticDataset::noise_option().field) + ": " + std::to_string(*noise) +
                      " is not a multiple of 1/16 (0, 0.0625, 0.125, ..., 1)");
  return std::unique_ptr<BatchSource>(std::make_unique<SyntheticDataset>(t.seed, static_cast<int>(sixteenths)));
}

Opened open_coinflip(const TrainConfig& t, FieldName name) {
  auto eps = read_dataset_option(t.dataset_options, CoinflipDataset::eps_option(), name);
  if (!eps) return eps.error();
  auto len = read_dataset_option(t.dataset_options, CoinflipDataset::len_option(), name);
  if (!len) return len.error();
  return std::unique_ptr<BatchSource>(std::make_unique<CoinflipDataset>(static_cast<int>(*len), *eps, t.seed));
}

Opened open_text(const TrainConfig& t, FieldName name) {
  auto path = read_dataset_text_option(t.dataset_options, TextDataset::data_option(), name);
  if (!path) return path.error();
  if (path->empty())
    return make_error(name(TextDataset::data_option().field) + ": required by dataset text (a file from ftx tokenize)");
  auto len = read_dataset_option(t.dataset_options, TextDataset::seq_len_option(), name);
  if (!len) return len.error();
  auto windows_text = read_dataset_text_option(t.dataset_options, TextDataset::windows_option(), name);
  if (!windows_text) return windows_text.error();
  auto windows = TextDataset::parse_windows(*windows_text, name);
  if (!windows) return windows.error();
  auto file = TokenFile::open(*path);
  if (!file) return file.error();
  return std::unique_ptr<BatchSource>(
      std::make_unique<TextDataset>(std::move(*file), static_cast<int>(*len), t.seed, *windows));
}

}  // namespace

const std::vector<DatasetInfo>& registered_datasets() {
  static const std::vector<DatasetInfo> list = {
      {"synthetic",
       "Letter targets in underscores with '!' noise (the paper's section 5)",
       {SyntheticDataset::noise_option()},
       open_synthetic},
      {"coinflip",
       "A latent coin flip, then noisy copies of it (the paper's section 1)",
       {CoinflipDataset::eps_option(), CoinflipDataset::len_option()},
       open_coinflip},
      {"text",
       "Documents of a token data file packed into sequences (ftx tokenize)",
       {TextDataset::data_option(), TextDataset::seq_len_option(), TextDataset::windows_option()},
       open_text},
  };
  return list;
}

std::string dataset_name_list(const char* separator) {
  std::string out;
  for (const DatasetInfo& d : registered_datasets()) out += (out.empty() ? "" : separator) + d.name;
  return out;
}

nlohmann::json default_dataset_options() {
  nlohmann::json j = nlohmann::json::object();
  for (const DatasetInfo& d : registered_datasets())
    for (const DatasetOption& o : d.options) j[o.field.key] = dataset_option_json(o, o.default_value);
  return j;
}

Result<std::unique_ptr<BatchSource>> open_dataset(const TrainConfig& t, FieldName name) {
  for (const DatasetInfo& d : registered_datasets())
    if (d.name == t.dataset) return d.open(t, name);
  return make_error(name(find_field<TrainConfig>("dataset")) + " '" + t.dataset + "': unknown (expected " +
                    dataset_name_list(" or ") + ")");
}

std::unique_ptr<BatchSource> make_dataset(const TrainConfig& t) {
  auto d = open_dataset(t);
  return d ? std::move(*d) : nullptr;
}

}  // namespace ftx
