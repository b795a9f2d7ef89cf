// CoinflipDataset and the exact coin-flip next-bit probabilities. Not here: any estimate from a
// model (the evaluator compares a model's probabilities against these).
#include "datasets/coinflip.h"

#include <cmath>
#include <limits>

#include "core/text/char_tokenizer.h"
#include "kernels/base/assert.h"

namespace ftx {

const DatasetOption& CoinflipDataset::eps_option() {
  static const DatasetOption o{
      Field{.key = "coinflip_eps", .help = "Flip probability of the coin-flip task", .bounds = closed_range(0, 1)}, 0.1,
      false};
  return o;
}

const DatasetOption& CoinflipDataset::len_option() {
  static const DatasetOption o{
      Field{.key = "coinflip_len", .help = "Bits per coin-flip sequence (T)", .bounds = closed_range(1, kMaxT)}, 32,
      true};
  return o;
}

nlohmann::json CoinflipDataset::options() const {
  return {{eps_option().field.key, dataset_option_json(eps_option(), eps_)},
          {len_option().field.key, dataset_option_json(len_option(), T_)}};
}

Status CoinflipDataset::check_args(int T, double eps) {
  if (T < 1 || T > kMaxT)
    return make_error("coinflip: T must be in 1.." + std::to_string(kMaxT) + ", got " + std::to_string(T));
  if (!(eps >= 0.0 && eps <= 1.0)) return make_error("coinflip: eps must be in [0, 1], got " + std::to_string(eps));
  return {};
}

CoinflipDataset::CoinflipDataset(int T, double eps, uint64_t seed) : T_(T), eps_(eps), seed_(seed) {
  FT_ASSERT(check_args(T, eps).ok(), "coinflip T=%d eps=%g (check_args first)", T, eps);
}

const Tokenizer& CoinflipDataset::tokenizer() const {
  static const CharTokenizer kTokenizer(">01");
  return kTokenizer;
}

CoinflipSample CoinflipDataset::draw(uint64_t stream, int64_t index) const {
  const uint64_t blocks = (static_cast<uint64_t>(T_) + 1 + 3) / 4;
  const uint64_t base = blocks * static_cast<uint64_t>(index);
  const double threshold = eps_ * 4294967296.0;  // flip iff word < eps * 2^32: eps 0 never, 1 always
  CoinflipSample s;
  s.bits.resize(T_);
  Philox4 r{};
  for (int w = 0; w <= T_; ++w) {
    if (w % 4 == 0) r = philox_block(seed_, stream, base + w / 4);
    uint32_t word = r.v[w % 4];
    if (w == 0) {
      s.z = static_cast<int>(word >> 31);
    } else {
      s.bits[w - 1] = static_cast<double>(word) < threshold ? 1 - s.z : s.z;
    }
  }
  return s;
}

void CoinflipDataset::write_tokens(const CoinflipSample& s, int32_t* tokens) const {
  tokens[0] = 0;                                               // '>'
  for (int t = 0; t < T_; ++t) tokens[1 + t] = 1 + s.bits[t];  // '0' -> 1, '1' -> 2
}

void CoinflipDataset::next(int32_t* tokens, int B) {
  for (int b = 0; b < B; ++b) write_tokens(training_sample(position_ + b), tokens + int64_t{b} * (T_ + 1));
  position_ += B;
}

void CoinflipDataset::validation(int32_t* tokens, int64_t first, int B) const {
  for (int b = 0; b < B; ++b) write_tokens(validation_sample(first + b), tokens + int64_t{b} * (T_ + 1));
}

void CoinflipDataset::seek(int64_t position) {
  FT_ASSERT(position >= 0, "seek to negative position %lld", static_cast<long long>(position));
  position_ = position;
}

}  // namespace ftx
