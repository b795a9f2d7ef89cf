// ftx bench train: training throughput of one configuration (a preset, optionally reshaped) as
// JSON: median step time over timed steps after warm-up, peak memory, and model FLOP/s with the
// model FLOPs utilization when the GPU's peak is known, or on the CPU as a fraction of the GEMM
// peak measured after the steps (core/model/flops.h).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "app/bench_common.h"
#include "app/common.h"
#include "app/job.h"
#include "core/model/flops.h"
#include "core/train/trainer.h"

namespace ftx::app {
namespace {

using nlohmann::json;

// In a job of P processes, besides: tokens/s per process, and the share of the step spent in the
// collectives (waits for a slower rank included), with how the gradients travel. gemm_peak: the
// CPU's, measured (none on a GPU, in a job, or with --gemm-peak-seconds 0).
json train_report(const BenchArgs& a, Backend& be, Trainer& trainer, const BatchSource& data,
                  const std::vector<double>& secs, const Comm& comm, double collective_s, const std::string& gradients,
                  const std::optional<GemmPeak>& gemm_peak) {
  const ModelConfig& m = trainer.model_config();
  const int T = data.seq_len() - 1;
  const double med = median(secs), tokens_per_s = double(a.batch) * T / med;
  // Threshold mode computes a share of its own: the last timed step's.
  const std::optional<double> measured = trainer.routed_share();
  const std::optional<double> share = m.routing.mode == RouteMode::Threshold ? measured : std::nullopt;
  const double flops = train_flops_per_token(m, T, share), tflops = flops * tokens_per_s / 1e12;
  const std::optional<double> peak = peak_tflops(be, be.matmul_precision());
  const char* bf16_engine = cpu_bf16_engine(be);  // the CPU at bf16: the tiles or software rounding
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
            // The CPU: the model TFLOP/s against the GEMM peak this machine reached at this precision
            {"gemm_peak_tflops", gemm_peak ? json(gemm_peak->tflops) : json(nullptr)},
            {"gemm_peak_shape", gemm_peak ? json({gemm_peak->N, gemm_peak->IC, gemm_peak->OC}) : json(nullptr)},
            {"fraction_of_gemm_peak", gemm_peak ? json(tflops / gemm_peak->tflops) : json(nullptr)},
            {"bf16_gemms", bf16_engine ? json(bf16_engine) : json(nullptr)},
            {"flops_convention", kFlopsConvention},
            // Step graphs recorded and replayed (CUDA; 0 and 0 on the CPU, or with FTX_CUDA_GRAPHS=0)
            {"graph_captures", be.graph_stats().captures},
            {"graph_replays", be.graph_stats().replays}});
  double total = 0;
  for (double x : secs) total += x;
  j.update({{"processes", comm.size()},
            {"engine", comm.engine()},
            {"tokens_per_s_per_process", tokens_per_s / comm.size()},
            {"gradients", comm.size() > 1 ? json(gradients) : json(nullptr)},
            {"gradient_bytes", trainer.model().num_params() * int64_t(sizeof(float))},
            {"collective_ms_per_step", collective_s / double(secs.size()) * 1e3},
            {"collective_share", total > 0 ? collective_s / total : 0.0}});
  return j;
}

// One rank's benchmark (the only one outside a job); rank 0 prints the report.
int bench_as_rank(const BenchArgs& a, Comm& comm) {
  auto setup = bench_training(a);
  if (!setup) return fail(setup.error());
  const std::string device = rank_device(comm, a.device);
  auto made_backend = make_backend(device, a.precision);
  if (!made_backend) return fail(made_backend.error());
  std::unique_ptr<Backend> backend = std::move(*made_backend);
  auto trainer = start_bench_trainer(*backend, *setup);
  if (!trainer) return fail(trainer.error());
  auto gradients = gradient_path(comm, *backend, device);
  if (!gradients) return fail(gradients.error());
  if (Status joined = (*trainer)->use_comm(comm, std::move(gradients->device), {false, a.bucket_mb}); !joined)
    return fail(joined.error());
  (*trainer)->time_collectives(comm.size() > 1);
  (void)time_train_steps(*backend, **trainer, *setup->data, a.warmup, 0);
  const double before = (*trainer)->collective_seconds();
  const auto secs = time_train_steps(*backend, **trainer, *setup->data, 0, a.steps);
  const double collective_s = (*trainer)->collective_seconds() - before;
  std::optional<GemmPeak> gemm_peak;
  if (backend->kind() == DeviceKind::Cpu && comm.size() == 1 && a.gemm_peak_seconds > 0)
    gemm_peak = measure_gemm_peak(*backend, a.gemm_peak_seconds);
  std::printf("%s\n",
              train_report(a, *backend, **trainer, *setup->data, secs, comm, collective_s, gradients->text, gemm_peak)
                  .dump(2)
                  .c_str());
  return 0;
}

}  // namespace

int run_bench_train(const BenchArgs& a) {
  // --processes N: this command again as N ranks under mpirun (does not return when it starts).
  if (Status job = relaunch_as_job(a.processes); !job) return fail(job.error());
  return run_as_job(0, [&a](Comm& comm) { return bench_as_rank(a, comm); });
}

}  // namespace ftx::app
