// CoinflipDataset: the paper's latent coin flip (docs/design.md section 3). Per sequence Z ~ B(0.5), then
// X_1..X_T each equal to Z, flipped independently with probability eps. Tokens: '>' (start), then
// the bits as '0'/'1' over the alphabet ">01", so seq_len() = T + 1. Sequence i is a pure function
// of (seed, stream, i) through Philox, like the synthetic task.
// Also the two exact next-bit probabilities a model can be compared against: given Z (what a Free
// Transformer that drew Z may use) and given only the past bits (what a plain decoder must infer).
// Deliberately not here: anything learned; argument checking beyond check_args().
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/data/batch_source.h"
#include "core/data/dataset_options.h"
#include "core/eval/coinflip_exact.h"
#include "kernels/base/philox.h"
#include "kernels/base/result.h"

namespace ftx {

inline constexpr uint64_t kStreamCoinflipTrain = kStreamData + 2;
inline constexpr uint64_t kStreamCoinflipValidation = kStreamData + 3;

struct CoinflipSample {
  int z = 0;              // latent bit
  std::vector<int> bits;  // (T,) X_1..X_T in {0, 1}
};

class CoinflipDataset final : public BatchSource {
 public:
  static constexpr int kMaxT = 1 << 16;
  // The options it reads from TrainConfig::dataset_options: "coinflip_eps" (default 0.1) and
  // "coinflip_len" (T, default 32). Keys and defaults of every coin-flip run so far.
  static const DatasetOption& eps_option();
  static const DatasetOption& len_option();
  // T in [1, kMaxT], eps in [0, 1]: call before constructing from user input.
  static Status check_args(int T, double eps);
  CoinflipDataset(int T, double eps, uint64_t seed);  // asserts check_args(T, eps).ok()

  std::string name() const override { return "coinflip"; }
  int seq_len() const override { return T_ + 1; }
  const Tokenizer& tokenizer() const override;                            // chars ">01"
  void next(int32_t* tokens, int B) override;                             // tokens (B, T+1)
  void validation(int32_t* tokens, int64_t first, int B) const override;  // tokens (B, T+1)
  int64_t position() const override { return position_; }
  void seek(int64_t position) override;     // position >= 0
  nlohmann::json options() const override;  // {"coinflip_eps": eps, "coinflip_len": T}

  CoinflipSample training_sample(int64_t index) const { return draw(kStreamCoinflipTrain, index); }
  CoinflipSample validation_sample(int64_t index) const { return draw(kStreamCoinflipValidation, index); }

 private:
  // ceil((T+1)/4) Philox blocks per sequence: word 0 gives Z (its top bit), word t flips X_t
  // when it is below eps * 2^32.
  CoinflipSample draw(uint64_t stream, int64_t index) const;
  void write_tokens(const CoinflipSample& s, int32_t* tokens) const;  // tokens (T+1,)

  int T_;
  double eps_;
  uint64_t seed_;
  int64_t position_ = 0;
};

}  // namespace ftx
