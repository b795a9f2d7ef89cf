// ftx bench train: training throughput of one configuration (a preset, optionally reshaped) as
// JSON: median step time over timed steps after warm-up, peak memory, and model FLOP/s with the
// model FLOPs utilization when the GPU's peak is known.
// ftx bench mapper: Backend::binary_mapper_backward against the GEMM of the same
// (N x C)(C x 2^H) shape on the same backend, as JSON.
// ftx bench generate: generation throughput with the KV cache (Model::decode_step) of a preset,
// maybe reshaped, with random weights: B sequences over --len positions, greedy, Z from the prior.
// With --checkpoint (any model file) or --random-init (the preset's shape in bf16): a language
// model's prefill (--prompt-len tokens through GEMMs) and decode (--decode-len tokens, --batch
// sequences), the weight and KV bytes each decoded token reads, and the machine's read bandwidth
// measured by the same command with the same threads: the fraction of the memory bound reached.
//
// Deliberately not here: anything written to disk (the run store is ":memory:"), and data or
// weights that matter (a reshaped model trains on uniform random tokens, generation runs random
// weights: throughput depends on neither).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <omp.h>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/common.h"
#include "core/train/trainer.h"
#include "kernels/cpu/isa.h"
#include "kernels/membw.h"
#include "kernels/philox.h"

namespace ftx::app {
namespace {

using nlohmann::json;

constexpr uint64_t kGenerateSeed = 1;  // random weights and prior codes of `bench generate`

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

// Training FLOPs per predicted token, PaLM's convention (Chowdhery et al. 2022, appendix B):
//   6 per weight of every GEMM (2 forward, 4 backward for the input and weight gradients): the
//   decoder blocks, the encoder block and its readout, the LM head; not the embedding gather,
//   the norms or the post-sampler (a gather),
// + 12 * L_att * T * D_att for the attention scores and weighted sums, forward and backward, over
//   the full T x T (not halved for causal masking); L_att counts the encoder block too,
// + for a Free Transformer the binary mapper backward: dG = dR W^T over all 2^H codes
//   (2 * 2^H * D) and the per-bit reduction of dG * G (2 * 2^H * H), as `ftx bench mapper` counts.
double train_flops_per_token(const ModelConfig& c, int T) {
  const double D = c.dim, Q = double(c.n_heads) * c.head_dim, KV = double(c.n_kv_heads) * c.head_dim;
  const double block = D * Q + 2 * D * KV + Q * D + 3 * D * c.ffn_hidden;  // q, k, v, o; gate, up, down
  const int blocks = c.n_layers + (c.is_free() ? 1 : 0);
  double gemm_params = blocks * block + double(c.vocab_size) * D;
  if (c.is_free()) gemm_params += double(c.latent_bits) * D;
  double flops = 6 * gemm_params + 12.0 * blocks * T * Q;
  if (c.is_free()) flops += 2.0 * double(c.num_codes()) * (D + c.latent_bits);
  return flops;
}
constexpr const char* kFlopsConvention =
    "PaLM: 6 x GEMM weights + 12 x L_att x T x D_att (+ mapper backward 2 x 2^H x (D + H)) per token";

// Dense peak TFLOP/s (no sparsity: half the datasheets' starred figures) by substring of the CUDA
// device name, e.g. "cuda:0 (NVIDIA H100 80GB HBM3)". Source: NVIDIA H100, H200 and A100
// datasheets. NVL boards run at other clocks and are left unknown; so is anything not listed.
struct PeakRow {
  const char* name_part;
  double fp32, tf32, bf16;  // fp32: CUDA cores, no tensor cores
};
constexpr PeakRow kPeaks[] = {
    {"H100 PCIe", 51.2, 378.0, 756.0}, {"H100 80GB HBM3", 66.9, 494.7, 989.4},  // SXM5
    {"H100 SXM", 66.9, 494.7, 989.4},  {"H200", 66.9, 494.7, 989.4},           {"A100", 19.5, 156.0, 312.0},
};

json peak_tflops(const Backend& be, MatmulPrecision p) {
  const std::string name = be.name();
  if (be.kind() != DeviceKind::Cuda || name.find("NVL") != std::string::npos) return nullptr;
  for (const PeakRow& r : kPeaks)
    if (name.find(r.name_part) != std::string::npos)
      return p == MatmulPrecision::Fp32 ? r.fp32 : p == MatmulPrecision::Tf32 ? r.tf32 : r.bf16;
  return nullptr;
}

// The synthetic task when the shape is its own (vocabulary 29, T = 65), else random tokens.
Result<std::unique_ptr<BatchSource>> bench_data(const BenchArgs& a, const TrainConfig& t) {
  if (a.seq_len && *a.seq_len <= 0) return make_error("--seq-len must be positive, got " + std::to_string(*a.seq_len));
  if (a.vocab && *a.vocab <= 0) return make_error("--vocab must be positive, got " + std::to_string(*a.vocab));
  auto synthetic = make_dataset(t);
  const int vocab = synthetic->tokenizer().vocab_size(), T = synthetic->seq_len() - 1;
  if (a.vocab.value_or(vocab) == vocab && a.seq_len.value_or(T) == T) return synthetic;
  return std::unique_ptr<BatchSource>(
      std::make_unique<RandomTokens>(a.vocab.value_or(vocab), a.seq_len.value_or(T) + 1, t.seed));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per step of `steps` timed steps after `warmup` untimed ones.
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

// What every bench report says: where it ran, the model's shape, the batch and the peak memory.
json common_report(const BenchArgs& a, const Backend& be, const ModelConfig& m, int64_t params) {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return json{{"device", be.name()},
              {"threads", omp_get_max_threads()},
              {"precision", matmul_precision_name(be.matmul_precision())},
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

json train_report(const BenchArgs& a, Backend& be, Trainer& trainer, const BatchSource& data,
                  const std::vector<double>& secs) {
  const ModelConfig& m = trainer.model_config();
  const int T = data.seq_len() - 1;
  const double med = median(secs), tokens_per_s = double(a.batch) * T / med;
  const double flops = train_flops_per_token(m, T), tflops = flops * tokens_per_s / 1e12;
  const json peak = peak_tflops(be, be.matmul_precision());
  json j = common_report(a, be, m, trainer.model().num_params());
  j.update({{"data", data.name()},
            {"seq_len", T},
            {"tokens_per_step", a.batch * T},
            {"timed_steps", a.steps},
            {"step_ms_median", med * 1e3},
            {"step_ms_min", *std::min_element(secs.begin(), secs.end()) * 1e3},
            {"tokens_per_s", tokens_per_s},
            {"model_flops_per_token", flops},
            {"model_tflops", tflops},
            {"peak_tflops", peak},
            {"mfu", peak.is_null() ? json(nullptr) : json(tflops / peak.get<double>())},
            {"flops_convention", kFlopsConvention},
            // Step graphs recorded and replayed (CUDA; 0 and 0 on the CPU, or with FTX_CUDA_GRAPHS=0)
            {"graph_captures", be.graph_stats().captures},
            {"graph_replays", be.graph_stats().replays}});
  return j;
}

int run_bench_train(const BenchArgs& a) {
  if (a.steps <= 0 || a.warmup < 0 || a.batch <= 0) return fail("bench: --steps and --batch must be positive");
  TrainConfig t;
  t.preset = a.shape.preset, t.batch = a.batch, t.lr = 1e-3f, t.steps = a.warmup + a.steps;
  t.eval_every = 0, t.checkpoint_every = 0;
  auto data = bench_data(a, t);
  if (!data) return fail(data.error());
  const BatchSource& src = **data;
  auto mcfg = shape_model_config(a.shape, src.tokenizer().vocab_size(), src.seq_len(), option_name);
  if (!mcfg) return fail(mcfg.error());
  auto made_backend = make_backend(a.device, a.precision);
  if (!made_backend) return fail(made_backend.error());
  std::unique_ptr<Backend> backend = std::move(*made_backend);
  // No tokenizer stored: the run lives in ":memory:" and its tokens are never read as text.
  auto trainer = Trainer::start(*backend, *mcfg, nullptr, t, src.seq_len(), ":memory:", "bench");
  if (!trainer) return fail(trainer.error());
  const auto secs = time_train_steps(*backend, **trainer, **data, a.warmup, a.steps);
  std::printf("%s\n", train_report(a, *backend, **trainer, **data, secs).dump(2).c_str());
  return 0;
}

// Backend buffers released together (also on the early returns of a refused allocation).
class DeviceBuffers {
 public:
  explicit DeviceBuffers(Backend& be) : be_(be) {}
  ~DeviceBuffers() {
    for (void* p : ptrs_) be_.release(p);
  }
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  float* floats(size_t n) {  // null when out of memory: the caller says what did not fit
    void* p = be_.try_alloc(n * sizeof(float)).value_or(nullptr);
    if (p) ptrs_.push_back(p);
    return static_cast<float*>(p);
  }

 private:
  Backend& be_;
  std::vector<void*> ptrs_;
};

// Uploads n values lo + (hi - lo) * u, u uniform from Philox(seed, stream).
void upload_uniform(Backend& be, float* dst, size_t n, uint64_t stream, float lo, float hi) {
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = lo + (hi - lo) * philox_uniform(1, stream, i);
  be.upload(dst, host.data(), n * sizeof(float));
}

// Milliseconds of each of `steps` calls of f after `warmup` untimed ones.
template <class F>
std::vector<double> time_calls(Backend& be, int warmup, int steps, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    be.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    be.synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return ms;
}

double physical_memory_gib() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE)) / (1 << 30);
}

Status check_mapper_args(const BenchArgs::Mapper& m) {
  if (m.tokens <= 0) return make_error("--tokens must be positive, got " + std::to_string(m.tokens));
  if (m.dim <= 0) return make_error("--dim must be positive, got " + std::to_string(m.dim));
  if (m.latent_bits < 1 || m.latent_bits > kMaxLatentBits)
    return make_error("--latent-bits " + std::to_string(m.latent_bits) + ": H must be in 1.." +
                      std::to_string(kMaxLatentBits));
  if (m.steps <= 0 || m.warmup < 0) return make_error("bench mapper: --steps must be positive, --warmup >= 0");
  return {};
}

int run_bench_mapper(const BenchArgs::Mapper& m) {
  if (auto s = check_mapper_args(m); !s) return fail(s.error());
  auto made_backend = make_backend(m.device, m.precision);
  if (!made_backend) return fail(made_backend.error());
  std::unique_ptr<Backend> backend = std::move(*made_backend);
  Backend& be = *backend;
  const int N = m.tokens, C = m.dim, H = m.latent_bits, K = 1 << H;
  const double out_gib = double(N) * K * sizeof(float) / (1 << 30);
  char too_big[256];
  std::snprintf(too_big, sizeof too_big,
                "bench mapper: the GEMM output (%d x 2^%d floats, %.1f GiB) does not fit on %s: lower --tokens or "
                "--latent-bits",
                N, H, out_gib, be.name());
  // The CPU backend zero-fills what it allocates: refuse before touching more than the machine has
  // (the output, plus the inputs twice: on the backend and staged on the host).
  const double host_gib = (double(N) * C + double(C) * K + 2.0 * N * H) * sizeof(float) / (1 << 30);
  if (be.kind() == DeviceKind::Cpu && out_gib + 2 * host_gib > 0.9 * physical_memory_gib()) return fail(too_big);
  DeviceBuffers buf(be);
  float* out = buf.floats(size_t(N) * K);  // (N, 2^H) the GEMM's output, the largest: first
  if (!out) return fail(too_big);
  float* dR = buf.floats(size_t(N) * C);       // (N, C)
  float* W = buf.floats(size_t(C) * K);        // (C, 2^H) post-sampler; the GEMM reads it as (2^H, C)
  float* p = buf.floats(size_t(N) * H);        // (N, H) bit probabilities
  float* dlogits = buf.floats(size_t(N) * H);  // (N, H)
  if (!dR || !W || !p || !dlogits) return fail("bench mapper: out of memory on " + std::string(be.name()));
  upload_uniform(be, dR, size_t(N) * C, 1, -1.0f, 1.0f);
  upload_uniform(be, W, size_t(C) * K, 2, -0.05f, 0.05f);
  upload_uniform(be, p, size_t(N) * H, 3, 0.05f, 0.95f);
  be.track_weights(W, size_t(C) * K);  // W is a weight, as in the model: at bf16 both read its bf16 copy
  const double mapper_ms =
      median(time_calls(be, m.warmup, m.steps, [&] { be.binary_mapper_backward(dlogits, dR, W, p, N, C, H); }));
  const double gemm_ms =
      median(time_calls(be, m.warmup, m.steps, [&] { be.matmul_forward(out, dR, f32_weight(W), N, C, K, false); }));
  const double gemm_flops = 2.0 * N * C * K, mapper_flops = 2.0 * N * K * (C + H);
  const json j{{"device", be.name()},
               {"threads", omp_get_max_threads()},
               {"precision", matmul_precision_name(be.matmul_precision())},
               {"tokens", N},
               {"dim", C},
               {"latent_bits", H},
               {"codes", K},
               {"timed_steps", m.steps},
               {"mapper_ms_median", mapper_ms},
               {"gemm_ms_median", gemm_ms},
               {"mapper_flops", mapper_flops},
               {"gemm_flops", gemm_flops},
               {"mapper_tflops", mapper_flops / mapper_ms / 1e9},  // flops / (ms * 1e-3) / 1e12
               {"gemm_tflops", gemm_flops / gemm_ms / 1e9},
               {"mapper_vs_gemm", gemm_ms / mapper_ms}};
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

Status check_generate_args(const BenchArgs& a) {
  const BenchArgs::Generate& g = a.generate;
  if (a.batch <= 0) return make_error("bench generate: --batch must be positive, got " + std::to_string(a.batch));
  if (g.len <= 0) return make_error("bench generate: --len must be positive, got " + std::to_string(g.len));
  if (g.steps <= 0) return make_error("bench generate: --steps must be positive, got " + std::to_string(g.steps));
  if (g.warmup < 0) return make_error("bench generate: --warmup must be >= 0, got " + std::to_string(g.warmup));
  if (a.vocab && *a.vocab <= 0) return make_error("--vocab must be positive, got " + std::to_string(*a.vocab));
  return {};
}

// Bytes generation holds on the backend, from below: the weights and the KV cache of every block
// (the decode state's scratch for one position is small next to it).
double generate_bytes(const ModelConfig& m, int B, int len) {
  const double kv = 2.0 * m.n_layers * B * len * double(m.n_kv_heads) * m.head_dim;  // (L, 2, B, len, KD)
  return 4.0 * (double(param_count(param_specs(m))) + kv);
}

// Refuses (B, len) when the weights and the cache do not fit: against the physical memory on the
// CPU (its allocations are zero-filled, so trying could exhaust the machine), by a trial
// allocation elsewhere.
Status check_generate_memory(Backend& be, const ModelConfig& m, int B, int len) {
  const double need = generate_bytes(m, B, len);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "bench generate: the weights and the KV cache for --batch %d and --len %d (%.1f GiB) do not fit on "
                "%s: lower --batch or --len",
                B, len, need / (1 << 30), be.name());
  if (be.kind() == DeviceKind::Cpu) return need > 0.9 * physical_memory_gib() * (1 << 30) ? make_error(buf) : Status{};
  if (need >= 0x1p62) return make_error(buf);
  auto p = be.try_alloc(size_t(need));
  if (!p) return make_error(buf);
  be.release(*p);
  return {};
}

// One generation run over positions 0..len-1 of the B sequences of `d` (position 0 restarts its
// cache): each sequence is fed the argmax of its previous logits (the first token 0, ties to the
// lowest id) and, for a Free Transformer, a code drawn uniformly per sequence and position, as Z
// is sampled from the prior at generation. tok (B), codes (B), logits (B, V) are host scratch.
void generate_run(Model& model, DecodeState& d, int len, std::vector<int32_t>& tok, std::vector<uint32_t>& codes,
                  std::vector<float>& logits) {
  const ModelConfig& m = model.config();
  const int B = d.B, V = m.vocab_size;
  const uint32_t mask = static_cast<uint32_t>(m.num_codes() - 1);  // 0 for the plain decoder
  std::fill(tok.begin(), tok.end(), 0);
  for (int pos = 0; pos < len; ++pos) {
    for (int b = 0; b < B; ++b) codes[b] = philox_block(kGenerateSeed, kStreamPrior + b, pos).v[0] & mask;
    model.decode_step(d, tok.data(), codes.data(), pos, logits.data());
    for (int b = 0; b < B; ++b) {
      const float* row = logits.data() + size_t(b) * V;  // (V)
      tok[b] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    }
  }
}

json generate_report(const BenchArgs& a, Backend& be, Model& model, const std::vector<double>& ms) {
  const ModelConfig& m = model.config();
  const int len = a.generate.len;
  const double med = median(ms);
  json j = common_report(a, be, m, model.num_params());
  j.update({{"max_seq_len", m.max_seq_len},
            {"len", len},
            {"kv_cache", true},
            {"timed_runs", a.generate.steps},
            {"run_ms_median", med},
            {"run_ms_min", *std::min_element(ms.begin(), ms.end())},
            {"tokens_per_s", double(a.batch) * len / (med * 1e-3)},
            {"ms_per_position", med / len}});
  return j;
}

// Weight bytes one decode step reads: every GEMM weight once (the embedding only as one row; a
// tied head reads it whole as the head) and the fp32 norms.
double decode_weight_bytes(const Model& model) {
  const ModelConfig& m = model.config();
  double bytes = 0;
  for (size_t i = 0; i < model.specs().size(); ++i) {
    const ParamSpec& s = model.specs()[i];
    const double size = double(s.numel) * double(dtype_size(s.dtype));
    if (s.name == "model.embed_tokens.weight")
      bytes += m.tie_embeddings ? size : size / double(m.vocab_size);
    else if (s.name != "free.post_sampler.weight" && s.name.rfind("free.encoder", 0) != 0 && s.name != "free.zeta")
      bytes += size;  // the encoder does not run at generation; the post-sampler is one column
  }
  return bytes;
}

int run_bench_lm(const BenchArgs& a) {
  const auto& g = a.generate;
  if (g.prompt_len <= 0 || g.decode_len <= 0 || a.batch <= 0 || g.steps <= 0 || g.warmup < 0)
    return fail("--prompt-len, --decode-len, --batch and --steps must be positive, --warmup >= 0");
  ModelSourceArgs src;
  src.checkpoint = g.checkpoint;
  src.random_init = g.random_init;
  if (g.random_init && g.checkpoint.empty()) src.preset = a.shape.preset;
  if (g.random_init) src.latent_bits = a.shape.latent_bits;
  src.seed = kGenerateSeed;
  auto lm = load_model(src, a.device, a.precision);
  if (!lm) return fail(lm.error());
  Model& model = *lm->model;
  const ModelConfig& m = model.config();
  const int V = m.vocab_size, B = a.batch;
  const int len = std::max(g.prompt_len, g.decode_len);
  if (len > m.max_seq_len)
    return fail("--prompt-len / --decode-len: " + std::to_string(len) + " positions exceed the model's context of " +
                std::to_string(m.max_seq_len));
  auto state = model.try_make_decode_state(B, len);
  if (!state) return fail(state.error());
  DecodeState& d = **state;
  std::vector<int32_t> prompt(static_cast<size_t>(g.prompt_len));
  for (int i = 0; i < g.prompt_len; ++i)
    prompt[size_t(i)] = int32_t(philox_block(kGenerateSeed, kStreamData, i).v[0] % uint32_t(V));
  std::vector<float> logits(size_t(B) * V);
  std::vector<uint32_t> codes(static_cast<size_t>(std::max(B, g.prompt_len)));
  for (size_t i = 0; i < codes.size(); ++i)
    codes[i] = philox_block(kGenerateSeed, kStreamPrior, i).v[0] & uint32_t(m.num_codes() - 1);
  // Prefill: the prompt through GEMMs, logits of its last position only.
  const auto prefill_ms = time_calls(*lm->backend, g.warmup, g.steps, [&] {
    model.prefill(d, 0, prompt.data(), codes.data(), g.prompt_len, 0, Model::PrefillLogits::Last, logits.data());
  });
  // Decode: --decode-len greedy steps of B sequences from an empty cache (llama-bench's tg).
  std::vector<int32_t> tok(static_cast<size_t>(B));
  const auto decode_ms = time_calls(*lm->backend, g.warmup, g.steps, [&] {
    std::fill(tok.begin(), tok.end(), 0);
    for (int pos = 0; pos < g.decode_len; ++pos) {
      model.decode_step(d, tok.data(), codes.data(), pos, logits.data());
      for (int b = 0; b < B; ++b) {
        const float* row = logits.data() + size_t(b) * V;
        tok[size_t(b)] = int32_t(std::max_element(row, row + V) - row);
      }
    }
  });
  const int threads = omp_get_max_threads();
  const BandwidthMeasure bw = measure_read_bandwidth(size_t(g.bandwidth_gib * double(1 << 30)), threads, 1.0);
  // Per token of one sequence: the weights, and the K and V rows 0..pos of every layer read at
  // position pos, averaged over the positions decoded ((decode_len + 1) / 2 rows).
  const double weights = decode_weight_bytes(model);
  const double kv = double(m.n_layers) * 2.0 * m.n_kv_heads * m.head_dim * sizeof(float) * (g.decode_len + 1) / 2.0;
  const double bytes = weights + kv;
  const double decode_tps = double(B) * g.decode_len / (median(decode_ms) * 1e-3);
  const double prefill_tps = double(g.prompt_len) / (median(prefill_ms) * 1e-3);
  // B sequences share one read of the weights per step; the KV rows are per sequence.
  const double step_bytes = weights + kv * B;
  const double achieved = step_bytes * decode_tps / B;
  json j{{"bench", "generate"},
         {"model", lm->file->info().name},
         {"format", lm->file->info().format},
         {"architecture", m.architecture},
         {"free_transformer", m.is_free()},
         {"latent_bits", m.latent_bits},
         {"parameters", model.num_params()},
         {"device", lm->backend->name()},
         {"cpu_isa", cpu::cpu_isa_name(cpu::cpu_isa())},
         {"threads", threads},
         {"batch", B},
         {"prompt_len", g.prompt_len},
         {"decode_len", g.decode_len},
         {"prefill_tokens_per_s", prefill_tps},
         {"prefill_ms_median", median(prefill_ms)},
         {"decode_tokens_per_s", decode_tps},
         {"decode_ms_per_step", median(decode_ms) / g.decode_len},
         {"bytes_per_token", bytes},
         {"weight_bytes_per_step", weights},
         {"read_bandwidth_gb_s", bw.bytes_per_s * 1e-9},
         {"bandwidth_buffer_bytes", bw.buffer_bytes},
         {"achieved_gb_s", achieved * 1e-9},
         {"fraction_of_bandwidth", achieved / bw.bytes_per_s},
         {"timed_runs", g.steps}};
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

int run_bench_generate(const BenchArgs& args) {
  const bool lm = !args.generate.checkpoint.empty() || args.generate.random_init;
  BenchArgs a = args;
  a.batch = args.generate.batch.value_or(lm ? 1 : 64);
  if (lm) return run_bench_lm(a);
  if (auto s = check_generate_args(a); !s) return fail(s.error());
  const int B = a.batch, len = a.generate.len;
  // The synthetic task's vocabulary unless --vocab names another. --len only sizes the cache.
  const int vocab = a.vocab.value_or(make_dataset(TrainConfig{})->tokenizer().vocab_size());
  auto mcfg = shape_model_config(a.shape, vocab, len, option_name);
  if (!mcfg) return fail(mcfg.error());
  auto made_backend = make_backend(a.device, a.precision);
  if (!made_backend) return fail(made_backend.error());
  std::unique_ptr<Backend> backend = std::move(*made_backend);
  if (auto s = check_generate_memory(*backend, *mcfg, B, len); !s) return fail(s.error());
  auto made = Model::create(*backend, *mcfg);
  if (!made) return fail(made.error());
  Model& model = **made;
  model.init_weights(kGenerateSeed, InitConfig{});
  auto state = model.make_decode_state(B, len);
  std::vector<int32_t> tok(B);
  std::vector<uint32_t> codes(B);
  std::vector<float> logits(size_t(B) * mcfg->vocab_size);  // (B, V)
  const auto ms = time_calls(*backend, a.generate.warmup, a.generate.steps,
                             [&] { generate_run(model, *state, len, tok, codes, logits); });
  std::printf("%s\n", generate_report(a, *backend, model, ms).dump(2).c_str());
  return 0;
}

}  // namespace

void add_bench_options(CLI::App& app, BenchArgs& a) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* c = bench->add_subcommand("train", "Training throughput (tokens/s, model TFLOP/s) of a preset, maybe reshaped");
  c->callback([&a] { a.command = "train"; });
  add_shape_options(c, a.shape);
  c->add_option("--vocab", a.vocab, "Vocabulary size (other than 29: uniform random tokens)");
  c->add_option("--seq-len", a.seq_len, "Predicted positions T (other than 65: uniform random tokens)");
  c->add_option("--batch", a.batch, "Sequences per step")->capture_default_str();
  c->add_option("--warmup", a.warmup, "Untimed steps first")->capture_default_str();
  c->add_option("--steps", a.steps, "Timed steps")->capture_default_str();
  add_device_options(c, a.device, a.precision);

  auto* mp = bench->add_subcommand("mapper", "Binary mapper backward against the GEMM of the same shape");
  mp->callback([&a] { a.command = "mapper"; });
  mp->add_option("--tokens", a.mapper.tokens, "Rows N")->capture_default_str();
  mp->add_option("--dim", a.mapper.dim, "Model width C")->capture_default_str();
  mp->add_option("--latent-bits", a.mapper.latent_bits, "H (2^H codes)")->capture_default_str();
  mp->add_option("--warmup", a.mapper.warmup, "Untimed calls first")->capture_default_str();
  mp->add_option("--steps", a.mapper.steps, "Timed calls")->capture_default_str();
  add_device_options(mp, a.mapper.device, a.mapper.precision);

  auto* g = bench->add_subcommand("generate", "Generation throughput (tokens/s) with the KV cache, random weights");
  g->callback([&a] { a.command = "generate"; });
  add_shape_options(g, a.shape);
  g->add_option("--vocab", a.vocab, "Vocabulary size (default: the preset's)");
  g->add_option("--batch", a.generate.batch, "Sequences generated together (default 64; 1 for a language model)");
  g->add_option("--len", a.generate.len, "Positions per run (raises the model's max_seq_len if needed)")
      ->capture_default_str();
  g->add_option("--warmup", a.generate.warmup, "Untimed runs first")->capture_default_str();
  g->add_option("--steps", a.generate.steps, "Timed runs")->capture_default_str();
  g->add_option("--checkpoint", a.generate.checkpoint,
                "A language model file (directory or .gguf): prefill and decode against the memory bandwidth");
  g->add_flag("--random-init", a.generate.random_init,
              "A language model with random bf16 weights of --preset's shape (or --checkpoint's)");
  g->add_option("--prompt-len", a.generate.prompt_len, "Language model: prompt tokens prefilled")
      ->capture_default_str();
  g->add_option("--decode-len", a.generate.decode_len, "Language model: tokens decoded")->capture_default_str();
  g->add_option("--bandwidth-gib", a.generate.bandwidth_gib, "Buffer of the read-bandwidth measurement (GiB)")
      ->capture_default_str();
  add_device_options(g, a.device, a.precision);
}

int run_bench(const BenchArgs& a) {
  if (a.command == "mapper") return run_bench_mapper(a.mapper);
  if (a.command == "generate") return run_bench_generate(a);
  return run_bench_train(a);
}

}  // namespace ftx::app
