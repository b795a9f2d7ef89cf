// Datasets: the synthetic task's exact format and statistics, determinism and seek, a validation
// stream disjoint from training; the coin flip's statistics and its exact posterior; each
// dataset's tokenizer (the Tokenizer interface itself: test_tokenizer); the registry: datasets by
// name with the options each declares, read from TrainConfig::dataset_options.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "core/text/char_tokenizer.h"
#include "datasets/coinflip.h"
#include "datasets/registry.h"
#include "datasets/synthetic.h"

using namespace ftx;

namespace {

constexpr uint64_t kSeed = 20251017;
constexpr int kStatSequences = 20000;
// Statistical checks allow 5 standard deviations: a fixed seed makes them deterministic, and a
// correct generator passes at 5 sigma with overwhelming probability for any seed.
constexpr double kSigmas = 5.0;

std::string training_text(const SyntheticDataset& d, int64_t i) {
  return SyntheticDataset::make_text(d.training_spec(i));
}

auto spec_key(const SyntheticSpec& s) { return std::make_tuple(s.letter, s.start, s.noise); }

// Chi-square statistic of counts against a uniform expectation.
double chi_square_uniform(const std::vector<int>& counts, int total) {
  double expected = static_cast<double>(total) / counts.size(), chi = 0;
  for (int c : counts) chi += (c - expected) * (c - expected) / expected;
  return chi;
}

}  // namespace

TEST(SyntheticDataset, InterfaceBasics) {
  SyntheticDataset d(kSeed);
  EXPECT_EQ(d.name(), "synthetic");
  EXPECT_EQ(d.seq_len(), 66);
  EXPECT_EQ(d.tokenizer().fingerprint(), CharTokenizer("_!>ABCDEFGHIJKLMNOPQRSTUVWXYZ").fingerprint());
  EXPECT_EQ(d.tokenizer().vocab_size(), 29);
  EXPECT_EQ(d.position(), 0);
}

TEST(SyntheticDataset, EverySequenceHasTheExactFormat) {
  SyntheticDataset d(kSeed);
  constexpr int kB = 50, kBatches = 40;
  std::vector<int32_t> tokens(kB * 66);
  for (int batch = 0; batch < kBatches; ++batch) {
    d.next(tokens.data(), kB);
    for (int b = 0; b < kB; ++b) {
      const int64_t index = int64_t{batch} * kB + b;
      const SyntheticSpec spec = d.training_spec(index);
      const std::string text = d.tokenizer().decode(std::span(tokens).subspan(b * 66, 66));
      ASSERT_EQ(text, SyntheticDataset::make_text(spec)) << index;
      ASSERT_EQ(text.size(), 66u);
      ASSERT_GE(spec.letter, 'A');
      ASSERT_LE(spec.letter, 'Z');
      ASSERT_GE(spec.start, 0);
      ASSERT_LE(spec.start, 56);
      ASSERT_EQ(text[0], spec.letter) << text;  // prompt letter = target letter
      ASSERT_EQ(text[1], '>') << text;
      for (int p = 0; p < 64; ++p) {
        const char c = text[2 + p];
        const bool noise = (spec.noise >> p) & 1, target = p >= spec.start && p < spec.start + 8;
        const char expected = noise ? '!' : target ? spec.letter : '_';
        ASSERT_EQ(c, expected) << text << " position " << p;
      }
    }
  }
  EXPECT_EQ(d.position(), kB * kBatches);
}

TEST(SyntheticDataset, MakeTextBuildsAGivenSequence) {
  SyntheticSpec s{'K', 3, (uint64_t{1} << 0) | (uint64_t{1} << 5) | (uint64_t{1} << 63)};
  EXPECT_EQ(SyntheticDataset::make_text(s), "K>!__KK!KKKKK" + std::string(52, '_') + "!");
  EXPECT_EQ(SyntheticDataset::make_text(SyntheticSpec{'Z', 56, 0}), "Z>" + std::string(56, '_') + "ZZZZZZZZ");
}

TEST(SyntheticDataset, StatisticsOver20000Sequences) {
  SyntheticDataset d(kSeed);
  std::vector<int> starts(57, 0), letters(26, 0);
  int64_t noise = 0, noise_in_target = 0;
  for (int i = 0; i < kStatSequences; ++i) {
    SyntheticSpec s = d.training_spec(i);
    ++starts[s.start];
    ++letters[s.letter - 'A'];
    noise += __builtin_popcountll(s.noise);
    noise_in_target += __builtin_popcountll(s.noise & (uint64_t{0xFF} << s.start));
  }
  const double p = 1.0 / 16, n = 64.0 * kStatSequences, nt = 8.0 * kStatSequences;
  EXPECT_NEAR(noise / n, p, kSigmas * std::sqrt(p * (1 - p) / n));
  EXPECT_NEAR(noise_in_target / nt, p, kSigmas * std::sqrt(p * (1 - p) / nt));  // target is noised too
  for (int s = 0; s <= 56; ++s) EXPECT_GT(starts[s], 0) << "start " << s << " never drawn";
  // Chi-square with k-1 degrees of freedom: mean k-1, standard deviation sqrt(2(k-1)).
  EXPECT_LT(chi_square_uniform(starts, kStatSequences), 56 + kSigmas * std::sqrt(2.0 * 56));
  EXPECT_LT(chi_square_uniform(letters, kStatSequences), 25 + kSigmas * std::sqrt(2.0 * 25));
  for (int c : starts) EXPECT_NEAR(c, kStatSequences / 57.0, kSigmas * std::sqrt(kStatSequences / 57.0));
}

TEST(SyntheticDataset, DeterministicAndSeekable) {
  SyntheticDataset a(kSeed), b(kSeed), other(kSeed + 1);
  std::vector<int32_t> ta(7 * 66), tb(7 * 66), to(7 * 66);
  a.next(ta.data(), 7);
  b.next(tb.data(), 7);
  other.next(to.data(), 7);
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, to);

  SyntheticDataset walk(kSeed);  // consume 3 batches of 7, keep every sequence
  std::vector<int32_t> all(21 * 66);
  for (int k = 0; k < 3; ++k) walk.next(all.data() + k * 7 * 66, 7);
  EXPECT_EQ(walk.position(), 21);
  for (int64_t k : {0, 1, 6, 7, 13, 20}) {
    SyntheticDataset s(kSeed);
    s.seek(k);
    EXPECT_EQ(s.position(), k);
    std::vector<int32_t> one(66);
    s.next(one.data(), 1);
    EXPECT_EQ(s.position(), k + 1);
    EXPECT_EQ(one, std::vector<int32_t>(all.begin() + k * 66, all.begin() + (k + 1) * 66)) << k;
  }
  SyntheticDataset far(kSeed);  // O(1) seek far into the endless stream
  far.seek(int64_t{1} << 40);
  std::vector<int32_t> one(66);
  far.next(one.data(), 1);
  EXPECT_EQ(far.tokenizer().decode(one), training_text(far, int64_t{1} << 40));
}

TEST(SyntheticDataset, ValidationIsDisjointFromTraining) {
  SyntheticDataset d(kSeed);
  std::vector<int32_t> v1(10 * 66), v2(10 * 66);
  d.validation(v1.data(), 100, 10);
  std::vector<int32_t> scratch(500 * 66);
  d.next(scratch.data(), 500);  // training position does not move validation
  d.validation(v2.data(), 100, 10);
  EXPECT_EQ(v1, v2);
  EXPECT_EQ(d.tokenizer().decode(std::span(v1).first(66)), SyntheticDataset::make_text(d.validation_spec(100)));

  // Same index, different sequence (identical only by chance: about 2e-7 per pair).
  int same_index = 0;
  for (int i = 0; i < 2000; ++i) same_index += spec_key(d.validation_spec(i)) == spec_key(d.training_spec(i));
  EXPECT_LE(same_index, 1);
  // Not a shifted copy either: the first 16 validation sequences never line up with training.
  std::map<std::tuple<char, int, uint64_t>, std::vector<int64_t>> where;
  for (int64_t i = 0; i < kStatSequences; ++i) where[spec_key(d.training_spec(i))].push_back(i);
  int aligned_runs = 0;
  for (int64_t i0 : where[spec_key(d.validation_spec(0))]) {
    bool run = true;
    for (int k = 1; k < 16 && run; ++k) run = spec_key(d.training_spec(i0 + k)) == spec_key(d.validation_spec(k));
    aligned_runs += run;
  }
  EXPECT_EQ(aligned_runs, 0);
}

TEST(SyntheticDataset, TokenizerEncodesItsTextToItsTokens) {
  SyntheticDataset d(kSeed);
  for (int64_t i = 0; i < 20; ++i) {
    const SyntheticSpec spec = d.training_spec(i);
    std::vector<int32_t> tokens(66);
    SyntheticDataset::make_tokens(spec, tokens.data());
    auto encoded = d.tokenizer().encode(SyntheticDataset::make_text(spec));
    ASSERT_TRUE(encoded.ok()) << encoded.error().message;
    EXPECT_EQ(*encoded, tokens) << i;
  }
}

TEST(CoinflipDataset, FormatAndArguments) {
  CoinflipDataset d(16, 0.1, kSeed);
  EXPECT_EQ(d.name(), "coinflip");
  EXPECT_EQ(d.seq_len(), 17);
  EXPECT_EQ(d.tokenizer().fingerprint(), CharTokenizer(">01").fingerprint());
  std::vector<int32_t> tokens(3 * 17);
  d.next(tokens.data(), 3);
  EXPECT_EQ(d.position(), 3);
  for (int b = 0; b < 3; ++b) {
    CoinflipSample s = d.training_sample(b);
    ASSERT_EQ(s.bits.size(), 16u);
    EXPECT_EQ(tokens[b * 17], 0);  // '>'
    for (int t = 0; t < 16; ++t) EXPECT_EQ(tokens[b * 17 + 1 + t], 1 + s.bits[t]);
  }
  d.seek(1);
  std::vector<int32_t> one(17);
  d.next(one.data(), 1);
  EXPECT_EQ(one, std::vector<int32_t>(tokens.begin() + 17, tokens.begin() + 34));
  EXPECT_TRUE(CoinflipDataset::check_args(1, 0.0).ok());
  EXPECT_TRUE(CoinflipDataset::check_args(64, 1.0).ok());
  EXPECT_FALSE(CoinflipDataset::check_args(0, 0.1).ok());
  EXPECT_FALSE(CoinflipDataset::check_args(16, -0.1).ok());
  EXPECT_FALSE(CoinflipDataset::check_args(16, 1.5).ok());
  EXPECT_FALSE(CoinflipDataset::check_args(16, std::nan("")).ok());
}

TEST(CoinflipDataset, StatisticsOver20000Sequences) {
  const double eps = 0.1;
  const int T = 16;
  CoinflipDataset d(T, eps, kSeed);
  int64_t ones_z = 0, flips = 0, equal_first = 0;
  for (int i = 0; i < kStatSequences; ++i) {
    CoinflipSample s = d.training_sample(i);
    ones_z += s.z;
    for (int t = 0; t < T; ++t) flips += s.bits[t] != s.z;
    for (int t = 1; t < T; ++t) equal_first += s.bits[t] == s.bits[0];
  }
  const double n = kStatSequences, nb = n * T, np = n * (T - 1);
  EXPECT_NEAR(ones_z / n, 0.5, kSigmas * std::sqrt(0.25 / n));
  EXPECT_NEAR(flips / nb, eps, kSigmas * std::sqrt(eps * (1 - eps) / nb));
  // P(X_t = X_1) = (1-eps)^2 + eps^2; pairs within a sequence are correlated, hence the wider
  // tolerance (T-1 pairs share X_1).
  const double q = (1 - eps) * (1 - eps) + eps * eps;
  EXPECT_NEAR(equal_first / np, q, kSigmas * std::sqrt(q * (1 - q) / n));

  CoinflipDataset exact(T, 0.0, kSeed), flipped(T, 1.0, kSeed);
  for (int i = 0; i < 100; ++i) {
    CoinflipSample a = exact.training_sample(i), b = flipped.training_sample(i);
    for (int t = 0; t < T; ++t) {
      EXPECT_EQ(a.bits[t], a.z);
      EXPECT_EQ(b.bits[t], 1 - b.z);
    }
  }
  // Validation differs from training. Two independent sequences of 64 bits at eps 0.1 are
  // identical with probability about 0.5 * 0.82^64 = 1.5e-6.
  CoinflipDataset long_seq(64, eps, kSeed);
  int same = 0;
  for (int i = 0; i < 1000; ++i) {
    CoinflipSample a = long_seq.training_sample(i), v = long_seq.validation_sample(i);
    same += a.z == v.z && a.bits == v.bits;
  }
  EXPECT_LE(same, 1);
}

TEST(CoinflipDataset, ConditionalNext) {
  EXPECT_DOUBLE_EQ(coinflip_conditional_next(1, 0.1), 0.9);
  EXPECT_DOUBLE_EQ(coinflip_conditional_next(0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(coinflip_conditional_next(1, 0.0), 1.0);
}

TEST(CoinflipDataset, PosteriorMatchesBruteForceEnumeration) {
  // P(x) = sum_z P(z) P(x | z); P(X_{t+1} = 1 | x) = P(x, 1) / P(x).
  auto joint = [](const std::vector<int>& x, double eps) {
    double total = 0;
    for (int z = 0; z <= 1; ++z) {
      double p = 0.5;
      for (int b : x) p *= b == z ? 1 - eps : eps;
      total += p;
    }
    return total;
  };
  constexpr double kTol = 1e-12;  // double arithmetic on products of at most 9 factors
  for (double eps : {0.01, 0.1, 0.25, 0.5, 0.7, 0.99}) {
    for (int t = 0; t <= 8; ++t) {
      for (int mask = 0; mask < (1 << t); ++mask) {
        std::vector<int> x(t);
        for (int i = 0; i < t; ++i) x[i] = (mask >> i) & 1;
        std::vector<int> x1 = x;
        x1.push_back(1);
        const double brute = joint(x1, eps) / joint(x, eps);
        ASSERT_NEAR(coinflip_posterior_next(x, eps), brute, kTol) << "eps " << eps << " t " << t << " mask " << mask;
      }
    }
  }
}

TEST(CoinflipDataset, PosteriorEdgeCases) {
  EXPECT_DOUBLE_EQ(coinflip_posterior_next({}, 0.1), 0.5);
  std::vector<int> ones(5000, 1);  // underflows a naive product; the log form stays exact
  EXPECT_NEAR(coinflip_posterior_next(ones, 0.1), 0.9, 1e-12);
  std::vector<int> balanced(4000, 0);
  for (int i = 0; i < 2000; ++i) balanced[2 * i] = 1;
  EXPECT_NEAR(coinflip_posterior_next(balanced, 0.1), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(coinflip_posterior_next({1, 1, 1}, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(coinflip_posterior_next({0, 0}, 0.0), 0.0);
  EXPECT_TRUE(std::isnan(coinflip_posterior_next({0, 1}, 0.0)));  // impossible history
  EXPECT_DOUBLE_EQ(coinflip_posterior_next({1, 1}, 1.0), 1.0);    // Z = 0, every bit flipped to 1
  EXPECT_DOUBLE_EQ(coinflip_posterior_next({0}, 1.0), 0.0);
  // The posterior agrees with the data: after a first bit 1, the next bit is 1 with
  // probability ((1-eps)^2 + eps^2) = 0.82 at eps 0.1.
  CoinflipDataset d(2, 0.1, kSeed);
  int after_one = 0, next_one = 0;
  for (int i = 0; i < kStatSequences; ++i) {
    CoinflipSample s = d.training_sample(i);
    if (s.bits[0] == 1) ++after_one, next_one += s.bits[1];
  }
  const double p = coinflip_posterior_next({1}, 0.1);
  EXPECT_NEAR(p, 0.82, 1e-12);
  EXPECT_NEAR(static_cast<double>(next_one) / after_one, p, kSigmas * std::sqrt(p * (1 - p) / after_one));
}

// Dataset options live beside TrainConfig's fields in one JSON object: no key may be both.
TEST(DatasetRegistry, OptionKeysAreNoTrainingFieldKeys) {
  const nlohmann::json fields = train_config_to_json(TrainConfig{});
  std::set<std::string> seen;
  for (const DatasetInfo& d : registered_datasets())
    for (const DatasetOption& o : d.options) {
      EXPECT_FALSE(fields.contains(o.field.key)) << o.field.key;
      EXPECT_TRUE(seen.insert(o.field.key).second) << "declared twice: " << o.field.key;
      EXPECT_FALSE(o.field.help.empty()) << o.field.key;
    }
  EXPECT_EQ(dataset_name_list(" | "), "synthetic | coinflip | text");
  EXPECT_EQ(default_dataset_options(), (nlohmann::json{{"coinflip_eps", 0.1},
                                                       {"coinflip_len", 32},
                                                       {"synthetic_noise", 0.0625},
                                                       {"text_data", ""},
                                                       {"text_seq_len", 256},
                                                       {"text_windows", ""}}));
}

TEST(DatasetRegistry, CoinflipReadsItsOptionsAndReportsThem) {
  TrainConfig t;
  t.dataset = "coinflip";
  auto d = open_dataset(t);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ((*d)->seq_len(), 33) << "default length 32";
  EXPECT_EQ((*d)->options(), (nlohmann::json{{"coinflip_eps", 0.1}, {"coinflip_len", 32}}));
  t.dataset_options = {{"coinflip_eps", 0.25}, {"coinflip_len", 16}, {"unrelated", "kept"}};
  d = open_dataset(t);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ((*d)->seq_len(), 17);
  EXPECT_EQ((*d)->options(), (nlohmann::json{{"coinflip_eps", 0.25}, {"coinflip_len", 16}}));
  t.dataset = "synthetic";
  d = open_dataset(t);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ((*d)->options(), (nlohmann::json{{"synthetic_noise", 0.0625}})) << "the paper's 1/16";
}

TEST(DatasetRegistry, SyntheticNoiseIsAMultipleOfASixteenth) {
  // The default draws exactly the paper's task (the same sequences as before the option
  // existed); 0 removes the noise and keeps letters and starts; other multiples of 1/16 scale it.
  TrainConfig t;
  t.dataset = "synthetic";
  auto plain = open_dataset(t);
  t.dataset_options = {{"synthetic_noise", 0.0}};
  auto clean = open_dataset(t);
  t.dataset_options = {{"synthetic_noise", 0.25}};
  auto noisy = open_dataset(t);
  ASSERT_TRUE(plain.ok() && clean.ok() && noisy.ok());
  EXPECT_EQ((*clean)->options(), (nlohmann::json{{"synthetic_noise", 0.0}}));
  const SyntheticDataset ref(t.seed);
  std::vector<int32_t> a(64 * SyntheticDataset::kSeqLen), b(a.size()), c(a.size());
  (*plain)->next(a.data(), 64), (*clean)->next(b.data(), 64), (*noisy)->next(c.data(), 64);
  int bangs_a = 0, bangs_b = 0, bangs_c = 0;
  for (int i = 0; i < 64; ++i) {
    const SyntheticSpec s = ref.training_spec(i), raw = SyntheticDataset::draw_spec(t.seed, kStreamSyntheticTrain, i);
    EXPECT_EQ(s.noise, raw.noise) << "the default is the paper's draw";
    EXPECT_EQ(SyntheticDataset::draw_spec(t.seed, kStreamSyntheticTrain, i, 0).noise, 0u);
    EXPECT_EQ(SyntheticDataset::draw_spec(t.seed, kStreamSyntheticTrain, i, 0).start, s.start);
    EXPECT_EQ(raw.noise & ~SyntheticDataset::draw_spec(t.seed, kStreamSyntheticTrain, i, 4).noise, 0u)
        << "more noise keeps the default's";
  }
  const int32_t bang = ref.tokenizer().encode("!")->front();
  for (size_t i = 0; i < a.size(); ++i) bangs_a += a[i] == bang, bangs_b += b[i] == bang, bangs_c += c[i] == bang;
  EXPECT_EQ(bangs_b, 0);
  EXPECT_NEAR(bangs_a / (64.0 * 64), 1.0 / 16, 0.015);
  EXPECT_NEAR(bangs_c / (64.0 * 64), 0.25, 0.03);
  t.dataset_options = {{"synthetic_noise", 0.1}};
  auto bad = open_dataset(t);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("synthetic_noise: 0.100000 is not a multiple of 1/16"), std::string::npos)
      << bad.error().message;
}

TEST(DatasetRegistry, BadNamesAndOptionsAreNamed) {
  TrainConfig t;
  t.dataset = "imagenet";
  auto d = open_dataset(t);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().message, "dataset 'imagenet': unknown (expected synthetic or coinflip or text)");
  EXPECT_EQ(make_dataset(t), nullptr);
  t.dataset = "coinflip";
  const std::vector<std::pair<nlohmann::json, std::string>> bad = {
      {{{"coinflip_eps", 2.0}}, "coinflip_eps 2: must be in [0, 1]"},
      {{{"coinflip_len", 0}}, "coinflip_len 0: must be in 1..65536"},
      {{{"coinflip_len", 16.5}}, "coinflip_len: must be an integer, got number 16.5"},
      {{{"coinflip_eps", "high"}}, "coinflip_eps: must be a number, got string \"high\""},
  };
  for (const auto& [options, message] : bad) {
    t.dataset_options = options;
    d = open_dataset(t);
    ASSERT_FALSE(d.ok()) << options;
    EXPECT_EQ(d.error().message, message);
    EXPECT_EQ(make_dataset(t), nullptr);
  }
  t.dataset_options = {{"coinflip_eps", 2.0}};
  d = open_dataset(t, [](const Field& f) { return "--" + std::string(f.key); });
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().message.rfind("--coinflip_eps 2", 0), 0u) << d.error().message;
}
