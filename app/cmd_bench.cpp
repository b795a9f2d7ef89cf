// ftx bench train: training throughput of one configuration as JSON (median over timed steps
// after warm-up) with peak memory. Nothing is written to disk.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>
#include <omp.h>

#include "app/commands.h"
#include "app/common.h"
#include "core/train/trainer.h"

namespace ftx::app {

void add_bench_options(CLI::App& app, BenchArgs& a) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* c = bench->add_subcommand("train", "Training throughput (tokens/s) on the synthetic task");
  c->add_option("--preset", a.preset, "tiny | small")->capture_default_str();
  c->add_option("--latent-bits", a.latent_bits, "H (0 = baseline decoder)")->capture_default_str();
  c->add_option("--batch", a.batch, "Sequences per step")->capture_default_str();
  c->add_option("--warmup", a.warmup, "Untimed steps first")->capture_default_str();
  c->add_option("--steps", a.steps, "Timed steps")->capture_default_str();
  c->add_option("--device", a.device, "cpu | cuda")->capture_default_str();
}

int run_bench(const BenchArgs& a) {
  if (a.steps <= 0 || a.warmup < 0 || a.batch <= 0) return fail("bench: --steps and --batch must be positive");
  Error err;
  auto backend = make_backend(a.device, &err);
  if (!backend) return fail(err);
  auto mcfg = model_preset(a.preset);
  if (!mcfg) return fail(mcfg.error());
  mcfg->latent_bits = a.latent_bits;
  TrainConfig t;
  t.batch = a.batch, t.lr = 1e-3f, t.steps = a.warmup + a.steps, t.eval_every = 0, t.checkpoint_every = 0;
  auto trainer = Trainer::start(*backend, *mcfg, t, make_dataset(t)->seq_len(), ":memory:", "bench");
  if (!trainer) return fail(trainer.error());
  auto data = make_dataset(t);
  std::vector<double> secs;
  for (int i = 0; i < a.warmup + a.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)(*trainer)->step_once(*data);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= a.warmup) secs.push_back(s);
  }
  std::sort(secs.begin(), secs.end());
  const double median = secs[secs.size() / 2];
  const int T = data->seq_len() - 1;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  nlohmann::json out{{"device", backend->name()},
                     {"threads", omp_get_max_threads()},
                     {"preset", a.preset},
                     {"latent_bits", a.latent_bits},
                     {"params", (*trainer)->model().num_params()},
                     {"batch", a.batch},
                     {"seq_len", T},
                     {"tokens_per_step", a.batch * T},
                     {"timed_steps", a.steps},
                     {"step_ms_median", median * 1e3},
                     {"step_ms_min", secs.front() * 1e3},
                     {"tokens_per_s", a.batch * T / median},
                     {"peak_rss_mb", ru.ru_maxrss / 1024.0}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace ftx::app
