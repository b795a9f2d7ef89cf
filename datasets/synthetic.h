// SyntheticDataset: the Free Transformer's synthetic task (docs/figure4.md). A sequence is the
// prompt "<letter>>" followed by a 64-character body of '_' holding the letter 8 times in a row
// (the target) at a uniform start in [0, 56], after which every body character, target included,
// independently becomes '!' with probability 1/16. Characters kSyntheticAlphabet, one token each.
// Sequence i of either stream is a pure function of (seed, stream, i) through Philox, so the stream
// is endless, seek() is O(1) and resume is exact; validation draws from a second stream.
// Deliberately not here: batching policy, shuffling (there is nothing to shuffle), any file I/O.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/data/batch_source.h"
#include "core/data/dataset_options.h"
#include "kernels/base/philox.h"

namespace ftx {

// The chars tokenizer's alphabet: token id = index.
inline constexpr const char* kSyntheticAlphabet = "_!>ABCDEFGHIJKLMNOPQRSTUVWXYZ";

inline constexpr uint64_t kStreamSyntheticTrain = kStreamData;
inline constexpr uint64_t kStreamSyntheticValidation = kStreamData + 1;

// Everything random about one sequence.
struct SyntheticSpec {
  char letter = 'A';   // target letter, 'A'..'Z'
  int start = 0;       // first body position of the target, 0..56
  uint64_t noise = 0;  // bit p set: body position p (0..63) is '!', target included
};

class SyntheticDataset final : public BatchSource {
 public:
  static constexpr int kPromptLen = 2;  // letter, '>'
  static constexpr int kBodyLen = 64;
  static constexpr int kTargetLen = 8;
  static constexpr int kNumStarts = kBodyLen - kTargetLen + 1;  // 57
  static constexpr int kSeqLen = kPromptLen + kBodyLen;         // 66

  // noise_16ths: each body character becomes '!' with probability noise_16ths / 16 (the paper's
  // task: 1). Other values are for experiments (docs/figure4.md: the task without noise).
  static constexpr int kDefaultNoise16ths = 1;
  static const DatasetOption& noise_option();  // "synthetic_noise", a probability, multiple of 1/16
  explicit SyntheticDataset(uint64_t seed, int noise_16ths = kDefaultNoise16ths)
      : seed_(seed), noise_16ths_(noise_16ths) {}

  std::string name() const override { return "synthetic"; }
  nlohmann::json options() const override;  // {"synthetic_noise": p}
  int seq_len() const override { return kSeqLen; }
  const Tokenizer& tokenizer() const override;
  void next(int32_t* tokens, int B) override;                             // tokens (B, 66)
  void validation(int32_t* tokens, int64_t first, int B) const override;  // tokens (B, 66)
  int64_t position() const override { return position_; }
  void seek(int64_t position) override;  // position >= 0 (the caller validates checkpoint input)

  SyntheticSpec training_spec(int64_t index) const {
    return draw_spec(seed_, kStreamSyntheticTrain, index, noise_16ths_);
  }
  SyntheticSpec validation_spec(int64_t index) const {
    return draw_spec(seed_, kStreamSyntheticValidation, index, noise_16ths_);
  }

  // Philox blocks 4i, 4i+1, 4i+2 of `stream`: letter and start by multiply-shift of a uint32
  // (bias below 2^-26), noise bit p iff 4-bit nibble p is below noise_16ths (exactly 1/16 each).
  static SyntheticSpec draw_spec(uint64_t seed, uint64_t stream, int64_t index, int noise_16ths = kDefaultNoise16ths);
  static std::string make_text(const SyntheticSpec& spec);              // 66 characters
  static void make_tokens(const SyntheticSpec& spec, int32_t* tokens);  // tokens (66,)
  // Where targets start in the training data as core/eval/synth_metrics reads bodies (noise can
  // hide a target's end, so it is not exactly uniform), over `n` training sequences: the
  // reference of the Figure 4 start spread.
  static std::vector<double> start_distribution(int n = 20000);

 private:
  uint64_t seed_;
  int noise_16ths_;
  int64_t position_ = 0;
};

}  // namespace ftx
