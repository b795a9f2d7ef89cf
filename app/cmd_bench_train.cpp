// ftx bench train: training throughput of one configuration (a preset, optionally reshaped) as
// JSON: median step time over timed steps after warm-up, peak memory, and model FLOP/s with the
// model FLOPs utilization when the GPU's peak is known (core/model/flops.h).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "app/bench_common.h"
#include "app/common.h"
#include "core/model/flops.h"
#include "core/train/trainer.h"

namespace ftx::app {
namespace {

using nlohmann::json;

json train_report(const BenchArgs& a, Backend& be, Trainer& trainer, const BatchSource& data,
                  const std::vector<double>& secs) {
  const ModelConfig& m = trainer.model_config();
  const int T = data.seq_len() - 1;
  const double med = median(secs), tokens_per_s = double(a.batch) * T / med;
  // Threshold mode computes a share of its own: the last timed step's.
  const std::optional<double> measured = trainer.routed_share();
  const std::optional<double> share = m.routing.mode == RouteMode::Threshold ? measured : std::nullopt;
  const double flops = train_flops_per_token(m, T, share), tflops = flops * tokens_per_s / 1e12;
  const std::optional<double> peak = peak_tflops(be, be.matmul_precision());
  json j = common_report(a, be, m, trainer.model().num_params());
  j.update({{"data", data.name()},
            {"seq_len", T},
            {"tokens_per_step", a.batch * T},
            {"timed_steps", a.steps},
            {"step_ms_median", med * 1e3},
            {"step_ms_min", *std::min_element(secs.begin(), secs.end()) * 1e3},
            {"tokens_per_s", tokens_per_s},
            {"model_flops_per_token", flops},
            {"routed_share", measured ? json(*measured) : json(nullptr)},  // routed blocks' tokens computed
            {"model_tflops", tflops},
            {"peak_tflops", peak ? json(*peak) : json(nullptr)},
            {"mfu", peak ? json(tflops / *peak) : json(nullptr)},
            {"flops_convention", kFlopsConvention},
            // Step graphs recorded and replayed (CUDA; 0 and 0 on the CPU, or with FTX_CUDA_GRAPHS=0)
            {"graph_captures", be.graph_stats().captures},
            {"graph_replays", be.graph_stats().replays}});
  return j;
}

}  // namespace

int run_bench_train(const BenchArgs& a) {
  auto setup = bench_training(a);
  if (!setup) return fail(setup.error());
  auto made_backend = make_backend(a.device, a.precision);
  if (!made_backend) return fail(made_backend.error());
  std::unique_ptr<Backend> backend = std::move(*made_backend);
  auto trainer = start_bench_trainer(*backend, *setup);
  if (!trainer) return fail(trainer.error());
  const auto secs = time_train_steps(*backend, **trainer, *setup->data, a.warmup, a.steps);
  std::printf("%s\n", train_report(a, *backend, **trainer, *setup->data, secs).dump(2).c_str());
  return 0;
}

}  // namespace ftx::app
