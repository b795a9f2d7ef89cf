#include "app/bench_common.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

#include <omp.h>

#include "app/common.h"
#include "kernels/base/philox.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/isa.h"

namespace ftx::app {
namespace {

// The tokenizer of random tokens: a vocabulary size and no text (encode refuses, every id
// decodes to "?").
class IdsOnlyTokenizer final : public Tokenizer {
 public:
  explicit IdsOnlyTokenizer(int vocab) : vocab_(vocab) {}
  std::string type() const override { return "ids"; }
  int vocab_size() const override { return vocab_; }
  Result<std::vector<int32_t>> encode(std::string_view) const override {
    return make_error("random tokens have no text");
  }
  std::string_view token_bytes(int32_t) const override { return "?"; }
  std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<IdsOnlyTokenizer>(vocab_); }

 private:
  int vocab_;
};

// Uniform random tokens for shapes the synthetic task does not have (another vocabulary or
// length). Sequence i is a pure function of (seed, i); validation sequences start at 2^40.
class RandomTokens final : public BatchSource {
 public:
  RandomTokens(int vocab, int seq_len, uint64_t seed)
      : vocab_(vocab), seq_len_(seq_len), seed_(seed), tokenizer_(vocab) {}
  std::string name() const override { return "random"; }
  int seq_len() const override { return seq_len_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  void next(int32_t* tokens, int B) override {
    fill(tokens, pos_, B);
    pos_ += B;
  }
  void validation(int32_t* tokens, int64_t first, int B) const override { fill(tokens, (int64_t{1} << 40) + first, B); }
  int64_t position() const override { return pos_; }
  void seek(int64_t position) override { pos_ = position; }

 private:
  void fill(int32_t* tokens, int64_t first, int B) const {
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < seq_len_; ++t) {
        const float u = philox_uniform(seed_, kStreamData + static_cast<uint64_t>(first + b), static_cast<uint64_t>(t));
        tokens[int64_t{b} * seq_len_ + t] = std::min(vocab_ - 1, static_cast<int32_t>(u * static_cast<float>(vocab_)));
      }
  }
  int32_t vocab_;
  int seq_len_;
  uint64_t seed_;
  int64_t pos_ = 0;
  IdsOnlyTokenizer tokenizer_;
};

}  // namespace

Result<std::unique_ptr<BatchSource>> bench_data(const BenchArgs& a, const TrainConfig& t) {
  if (a.seq_len && *a.seq_len <= 0) return make_error("--seq-len must be positive, got " + std::to_string(*a.seq_len));
  if (a.vocab && *a.vocab <= 0) return make_error("--vocab must be positive, got " + std::to_string(*a.vocab));
  auto synthetic = make_dataset(t);
  const int vocab = synthetic->tokenizer().vocab_size(), T = synthetic->seq_len() - 1;
  if (a.vocab.value_or(vocab) == vocab && a.seq_len.value_or(T) == T) return synthetic;
  return std::unique_ptr<BatchSource>(
      std::make_unique<RandomTokens>(a.vocab.value_or(vocab), a.seq_len.value_or(T) + 1, t.seed));
}

Result<BenchTraining> bench_training(const BenchArgs& a) {
  if (a.steps <= 0 || a.warmup < 0 || a.batch <= 0) return Error{"bench: --steps and --batch must be positive"};
  BenchTraining b;
  b.train.preset = a.shape.preset, b.train.batch = a.batch, b.train.lr = 1e-3f, b.train.steps = a.warmup + a.steps;
  b.train.eval_every = 0, b.train.checkpoint_every = 0;
  auto data = bench_data(a, b.train);
  if (!data) return data.error();
  b.data = std::move(*data);
  auto mcfg = shape_model_config(a.shape, b.data->tokenizer().vocab_size(), b.data->seq_len(), option_name);
  if (!mcfg) return mcfg.error();
  b.model = *mcfg;
  return b;
}

Result<std::unique_ptr<Trainer>> start_bench_trainer(Backend& be, const BenchTraining& t) {
  // No tokenizer stored: the run lives in ":memory:" and its tokens are never read as text.
  return Trainer::start(be, t.model, nullptr, t.train, t.data->seq_len(), ":memory:", "bench");
}

std::vector<double> time_train_steps(Backend& be, Trainer& trainer, BatchSource& data, int warmup, int steps) {
  std::vector<double> secs;
  for (int i = 0; i < warmup + steps; ++i) {
    be.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    (void)trainer.step_once(data);
    be.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) secs.push_back(s);
  }
  return secs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

nlohmann::json common_report(const BenchArgs& a, const Backend& be, const ModelConfig& m, int64_t params) {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const char* held_back = cpu::blas_core_held_back();
  return nlohmann::json{{"device", be.name()},
                        {"threads", omp_get_max_threads()},
                        {"precision", matmul_precision_name(be.matmul_precision())},
                        {"cpu_isa", cpu::cpu_isa_name(cpu::cpu_isa())},
                        {"blas_core", cpu::blas_core()},
                        {"blas_core_held_back", held_back ? nlohmann::json(held_back) : nlohmann::json()},
                        {"preset", a.shape.preset},
                        {"layers", m.n_layers},
                        {"dim", m.dim},
                        {"heads", m.n_heads},
                        {"kv_heads", m.n_kv_heads},
                        {"head_dim", m.head_dim},
                        {"ffn", m.ffn_hidden},
                        {"vocab", m.vocab_size},
                        {"latent_bits", m.latent_bits},
                        {"params", params},
                        {"batch", a.batch},
                        {"peak_rss_mb", ru.ru_maxrss / 1024.0}};
}

void upload_uniform(Backend& be, float* dst, size_t n, uint64_t stream, float lo, float hi) {
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = lo + (hi - lo) * philox_uniform(1, stream, i);
  be.upload(dst, host.data(), n * sizeof(float));
}

double physical_memory_gib() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE)) / (1 << 30);
}

}  // namespace ftx::app
