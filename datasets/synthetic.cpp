// SyntheticDataset: Philox draws -> SyntheticSpec -> characters or token ids. No state besides the
// stream position, no buffering, no threads (a batch of 64 sequences costs microseconds).
#include "datasets/synthetic.h"

#include "core/eval/synth_metrics.h"
#include "core/text/char_tokenizer.h"
#include "kernels/base/assert.h"

namespace ftx {
namespace {

// Token ids by position in kSyntheticAlphabet; checked against it at compile time.
constexpr int32_t kTokUnderscore = 0, kTokBang = 1, kTokArrow = 2, kTokA = 3;
static_assert(kSyntheticAlphabet[kTokUnderscore] == '_' && kSyntheticAlphabet[kTokBang] == '!' &&
              kSyntheticAlphabet[kTokArrow] == '>' && kSyntheticAlphabet[kTokA] == 'A' &&
              kSyntheticAlphabet[kTokA + 25] == 'Z' && kSyntheticAlphabet[kTokA + 26] == '\0');

uint32_t uniform_below(uint32_t r, uint32_t n) {  // floor(r * n / 2^32), in [0, n)
  return static_cast<uint32_t>((static_cast<uint64_t>(r) * n) >> 32);
}

bool in_target(const SyntheticSpec& s, int p) { return p >= s.start && p < s.start + SyntheticDataset::kTargetLen; }
bool is_noise(const SyntheticSpec& s, int p) { return (s.noise >> p) & 1u; }

}  // namespace

const DatasetOption& SyntheticDataset::noise_option() {
  static const DatasetOption o{Field{.key = "synthetic_noise",
                                     .help = "Probability that a body character is '!' (a multiple of 1/16)",
                                     .bounds = closed_range(0, 1)},
                               kDefaultNoise16ths / 16.0, false};
  return o;
}

nlohmann::json SyntheticDataset::options() const {
  return {{noise_option().field.key, dataset_option_json(noise_option(), noise_16ths_ / 16.0)}};
}

const Tokenizer& SyntheticDataset::tokenizer() const {
  static const CharTokenizer kTokenizer(kSyntheticAlphabet);
  return kTokenizer;
}

SyntheticSpec SyntheticDataset::draw_spec(uint64_t seed, uint64_t stream, int64_t index, int noise_16ths) {
  const uint64_t base = 4 * static_cast<uint64_t>(index);
  Philox4 head = philox_block(seed, stream, base);
  SyntheticSpec s;
  s.letter = static_cast<char>('A' + uniform_below(head.v[0], 26));
  s.start = static_cast<int>(uniform_below(head.v[1], kNumStarts));
  for (int b = 0; b < 2; ++b) {  // 2 blocks x 4 words x 8 nibbles = 64 body positions
    Philox4 r = philox_block(seed, stream, base + 1 + b);
    for (int w = 0; w < 4; ++w)
      for (int k = 0; k < 8; ++k) {
        int p = 32 * b + 8 * w + k;
        if (int((r.v[w] >> (4 * k)) & 0xFu) < noise_16ths) s.noise |= uint64_t{1} << p;
      }
  }
  return s;
}

void SyntheticDataset::make_tokens(const SyntheticSpec& spec, int32_t* tokens) {
  FT_ASSERT(spec.letter >= 'A' && spec.letter <= 'Z', "letter '%c' is not A-Z", spec.letter);
  FT_ASSERT(spec.start >= 0 && spec.start < kNumStarts, "target start %d not in [0, 56]", spec.start);
  const int32_t letter = kTokA + (spec.letter - 'A');
  tokens[0] = letter;
  tokens[1] = kTokArrow;
  for (int p = 0; p < kBodyLen; ++p)
    tokens[kPromptLen + p] = is_noise(spec, p) ? kTokBang : in_target(spec, p) ? letter : kTokUnderscore;
}

std::string SyntheticDataset::make_text(const SyntheticSpec& spec) {
  int32_t tokens[kSeqLen];
  make_tokens(spec, tokens);
  std::string text(kSeqLen, '?');
  for (int i = 0; i < kSeqLen; ++i) text[i] = kSyntheticAlphabet[tokens[i]];
  return text;
}

void SyntheticDataset::next(int32_t* tokens, int B) {
  for (int b = 0; b < B; ++b) make_tokens(training_spec(position_ + b), tokens + int64_t{b} * kSeqLen);
  position_ += B;
}

void SyntheticDataset::validation(int32_t* tokens, int64_t first, int B) const {
  for (int b = 0; b < B; ++b) make_tokens(validation_spec(first + b), tokens + int64_t{b} * kSeqLen);
}

void SyntheticDataset::seek(int64_t position) {
  FT_ASSERT(position >= 0, "seek to negative position %lld", static_cast<long long>(position));
  position_ = position;
}

std::vector<double> SyntheticDataset::start_distribution(int n) {
  SyntheticDataset data(1);
  std::vector<SynthAnalysis> bodies;
  for (int i = 0; i < n; ++i)
    if (auto t = split_generation(make_text(data.training_spec(i)))) bodies.push_back(analyze_body(t->body, t->letter));
  return ftx::start_distribution(bodies);
}

}  // namespace ftx
