// ftx bench generate: generation throughput with the KV cache (Model::decode_step) of a preset,
// maybe reshaped, with random weights: B sequences over --len positions, greedy, Z from the prior.
// With --checkpoint (any model file) or --random-init (the preset's shape in bf16): a language
// model's prefill (--prompt-len tokens through GEMMs) and decode (--decode-len tokens, --batch
// sequences), the weight and KV bytes each decoded token reads, and the machine's read bandwidth
// measured by the same command with the same threads: the fraction of the memory bound reached.
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <omp.h>

#include "app/bench_common.h"
#include "app/common.h"
#include "core/model/flops.h"
#include "core/train/trainer.h"
#include "kernels/base/philox.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/isa.h"
#include "kernels/membw.h"

namespace ftx::app {
namespace {

using nlohmann::json;

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

// A routed model after a generation run over positions 0..len-1 of d (the student path): the share
// of the routed blocks' tokens computed, and the bytes its KV caches hold (dense blocks every
// position, routed blocks their chosen tokens).
struct RoutedDecode {
  double share = 1.0, kv_bytes = 0;
};
RoutedDecode routed_decode(const Model& model, const DecodeState& d, int len) {
  const ModelConfig& m = model.config();
  const double row = 2.0 * m.n_kv_heads * m.head_dim * sizeof(float);  // K and V of one token
  RoutedDecode r;
  int64_t computed = 0, total = 0;
  for (int l = 0; l < m.n_layers; ++l)
    for (int b = 0; b < d.B; ++b) {
      const int64_t n = m.routed(l) ? int64_t(model.decode_route_positions(d, l, b).size()) : len;
      r.kv_bytes += row * double(n);
      if (m.routed(l)) computed += n, total += len;
    }
  if (total > 0) r.share = double(computed) / double(total);
  return r;
}

// A routed preset against the dense model of the same shape (routing none, same weights where they
// exist), timed in turn run by run: tokens/s, FLOPs per token and KV bytes of each, and the ratios.
json routed_against_dense(const BenchArgs& a, Backend& be, Model& routed, DecodeState& d, std::vector<double>& ms) {
  const ModelConfig& m = routed.config();
  const int B = a.batch, len = a.generate.len;
  ModelConfig dc = m;
  dc.routing = RoutingConfig{};
  Model dense(be, dc);
  dense.init_weights(kGenerateSeed, InitConfig{});
  auto dd = dense.make_decode_state(B, len);
  std::vector<int32_t> tok(size_t(B), 0);
  std::vector<uint32_t> codes(static_cast<size_t>(B));
  std::vector<float> logits(size_t(B) * m.vocab_size);
  std::vector<double> dense_ms;
  ms.clear();
  for (int i = 0; i < a.generate.steps; ++i) {
    const int warm = i == 0 ? a.generate.warmup : 0;
    ms.push_back(time_calls(be, warm, 1, [&] { generate_run(routed, d, len, tok, codes, logits); })[0]);
    dense_ms.push_back(time_calls(be, warm, 1, [&] { generate_run(dense, *dd, len, tok, codes, logits); })[0]);
  }
  const RoutedDecode r = routed_decode(routed, d, len), rd = routed_decode(dense, *dd, len);
  const double tps = double(B) * len / (median(ms) * 1e-3), dense_tps = double(B) * len / (median(dense_ms) * 1e-3);
  const double flops = decode_flops_per_token(m, len, r.share), dense_flops = decode_flops_per_token(dc, len, 1.0);
  return {{"routing", routing_name(m.routing.kind)},
          {"router", "student"},
          {"routed_blocks", routed_blocks_text(m)},
          {"routed_share", r.share},
          {"decode_flops_per_token", flops},
          {"kv_bytes", r.kv_bytes},
          {"dense", {{"tokens_per_s", dense_tps}, {"decode_flops_per_token", dense_flops}, {"kv_bytes", rd.kv_bytes}}},
          {"speed_vs_dense", tps / dense_tps},
          {"flops_vs_dense", flops / dense_flops},
          {"kv_bytes_vs_dense", r.kv_bytes / rd.kv_bytes}};
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
  const char* held_back = cpu::blas_core_held_back();
  json j{{"bench", "generate"},
         {"model", lm->file->info().name},
         {"format", lm->file->info().format},
         {"architecture", m.architecture},
         {"free_transformer", m.is_free()},
         {"latent_bits", m.latent_bits},
         {"parameters", model.num_params()},
         {"device", lm->backend->name()},
         {"cpu_isa", cpu::cpu_isa_name(cpu::cpu_isa())},
         {"blas_core", cpu::blas_core()},
         {"blas_core_held_back", held_back ? nlohmann::json(held_back) : nlohmann::json()},
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

}  // namespace

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
  if (mcfg->routing.kind != Routing::None) {  // the student path, against the dense model in turn
    std::vector<double> ms;
    const json vs = routed_against_dense(a, *backend, model, *state, ms);
    json j = generate_report(a, *backend, model, ms);
    j.update(vs);
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::vector<int32_t> tok(B);
  std::vector<uint32_t> codes(B);
  std::vector<float> logits(size_t(B) * mcfg->vocab_size);  // (B, V)
  const auto ms = time_calls(*backend, a.generate.warmup, a.generate.steps,
                             [&] { generate_run(model, *state, len, tok, codes, logits); });
  json j = generate_report(a, *backend, model, ms);
  j["decode_flops_per_token"] = decode_flops_per_token(*mcfg, len, 1.0);
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

}  // namespace ftx::app
