// Datasets by name, as a TrainConfig names them: the one DatasetFactory both ftx and ftx-studio
// hand to core (which cannot see datasets/).
#pragma once
#include <memory>

#include "core/data/batch_source.h"
#include "core/train/train_config.h"

namespace ftx {

// "synthetic" or "coinflip" (with the config's coin-flip length and eps); null for other names.
std::unique_ptr<BatchSource> make_dataset(const TrainConfig& t);

}  // namespace ftx
