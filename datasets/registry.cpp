#include "datasets/registry.h"

#include "datasets/coinflip.h"
#include "datasets/synthetic.h"

namespace ftx {

std::unique_ptr<BatchSource> make_dataset(const TrainConfig& t) {
  if (t.dataset == "coinflip") {
    if (!CoinflipDataset::check_args(t.coinflip_len, t.coinflip_eps).ok()) return nullptr;
    return std::make_unique<CoinflipDataset>(t.coinflip_len, t.coinflip_eps, t.seed);
  }
  if (t.dataset == "synthetic") return std::make_unique<SyntheticDataset>(t.seed);
  return nullptr;
}

}  // namespace ftx
