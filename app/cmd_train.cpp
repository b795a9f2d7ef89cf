// ftx train: one training run on the synthetic or coin-flip task, recorded in the run store.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include "app/commands.h"
#include "app/common.h"
#include "core/train/trainer.h"

namespace ftx::app {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_sigint(int) {
  if (g_stop.exchange(true)) std::_Exit(130);  // second Ctrl-C: leave at once
}

void print_progress(const StepReport& r, bool tty) {
  const bool line_due = r.step == r.total_steps || r.step % 50 == 0;
  if (!tty && !line_due) return;
  std::printf("%sstep %5d/%d  ce %.4f  kl %.4f  loss %.4f  |g| %.2f  lr %.2e  %6.0f tok/s  ETA %s%s",
              tty ? "\r\033[K" : "", r.step, r.total_steps, r.stats.ce, r.stats.kl, r.stats.loss, r.grad_norm, r.lr,
              r.tokens_per_s, format_duration(r.eta_s).c_str(), tty ? "" : "\n");
  std::fflush(stdout);
}

void print_eval(const EvalReport& e, bool tty) {
  std::printf("%seval @ %d:", tty ? "\r\033[K" : "", e.step);
  for (const auto& [k, v] : e.metrics) std::printf("  %s %.4f", k.c_str(), v);
  std::printf("\n");
}

}  // namespace

void add_train_options(CLI::App& app, TrainArgs& a) {
  auto* c = app.add_subcommand("train", "Train a Free Transformer (or the baseline with --latent-bits 0)");
  c->add_option("--dataset", a.train.dataset, "synthetic | coinflip")->capture_default_str();
  add_shape_options(c, a.shape);
  auto* kb = c->add_option("--kappa-bits", a.kappa_bits, "Free bits per token, in bits (default 1/8)");
  auto* kn = c->add_option("--kappa-nats", a.kappa_nats, "Free bits per token, in nats");
  kb->excludes(kn);
  c->add_option("--kappa-start-bits", a.kappa_start_bits, "Anneal kappa linearly from this value (bits)");
  c->add_option("--kappa-anneal-steps", a.train.kappa_anneal_steps, "Steps of the kappa anneal");
  c->add_option_function<int>(
       "--steps", [&a](const int& v) { a.steps = v, a.steps_given = true; }, "Optimizer steps (default 3000)");
  c->add_option("--batch", a.train.batch, "Sequences per step")->capture_default_str();
  c->add_option("--lr", a.train.lr, "Peak learning rate (AdamW)")->capture_default_str();
  c->add_option("--warmup", a.train.warmup, "Linear warm-up steps")->capture_default_str();
  c->add_option("--weight-decay", a.train.weight_decay, "AdamW weight decay")->capture_default_str();
  c->add_option("--grad-clip", a.train.grad_clip, "Clip the global gradient norm (0 = off)")->capture_default_str();
  c->add_option("--post-sampler-std", a.train.init.post_sampler_std, "Init std of the post-sampler")->capture_default_str();
  c->add_flag("--bitlinear-init,!--no-bitlinear-init", a.train.init.post_sampler_bitlinear,
              "Post-sampler columns as sums of one random direction per bit (default on)");
  c->add_option("--coinflip-eps", a.train.coinflip_eps, "Flip probability of the coin-flip task")->capture_default_str();
  c->add_option("--seed", a.train.seed, "Seed of data, init and latents")->capture_default_str()->check(CLI::NonNegativeNumber);
  c->add_option("--db", a.db, "Run store (SQLite)")->capture_default_str();
  c->add_option("--run", a.run, "Run name")->required();
  c->add_flag("--resume", a.resume, "Continue the run from its latest checkpoint");
  c->add_option("--eval-every", a.train.eval_every, "Evaluate every N steps (0 = only at the end)")->capture_default_str();
  c->add_option("--checkpoint-every", a.train.checkpoint_every, "Checkpoint every N steps")->capture_default_str();
  add_device_options(c, a.device, a.precision);
  c->add_flag("--quiet", a.quiet, "No progress line");
}

int run_train(TrainArgs& a) {
  Error err;
  auto backend = make_backend(a.device, a.precision, &err);
  if (!backend) return fail(err);
  if (a.kappa_bits) a.train.kappa_nats = static_cast<float>(bits_to_nats(*a.kappa_bits));
  if (a.kappa_nats) a.train.kappa_nats = *a.kappa_nats;
  if (a.kappa_start_bits) a.train.kappa_start_nats = static_cast<float>(bits_to_nats(*a.kappa_start_bits));
  if (a.kappa_bits && !(*a.kappa_bits >= 0)) return fail("--kappa-bits must be >= 0, got " + std::to_string(*a.kappa_bits));
  if (a.kappa_nats && !(*a.kappa_nats >= 0)) return fail("--kappa-nats must be >= 0, got " + std::to_string(*a.kappa_nats));
  if (a.kappa_start_bits && !(*a.kappa_start_bits >= 0))
    return fail("--kappa-start-bits must be >= 0, got " + std::to_string(*a.kappa_start_bits));
  a.train.preset = a.shape.preset;
  a.train.steps = a.steps;
  if (auto s = a.train.validate(); !s) return fail(s.error());

  std::unique_ptr<Trainer> trainer;
  if (a.resume) {
    auto t = Trainer::resume(*backend, a.db, a.run, a.steps_given ? std::optional<int>(a.steps) : std::nullopt);
    if (!t) return fail(t.error());
    trainer = std::move(*t);
    if (trainer->thread_count_changed())
      std::fprintf(stderr, "ftx: note: thread count differs from the checkpoint's; the curve continues within rounding\n");
  } else {
    auto probe = make_dataset(a.train);
    auto mcfg = shaped_model_config(a.shape, probe->tokenizer().vocab_size(), probe->seq_len());
    if (!mcfg) return fail(mcfg.error());
    auto t = Trainer::start(*backend, *mcfg, probe->tokenizer().clone(), a.train, probe->seq_len(), a.db, a.run);
    if (!t) return fail(t.error());
    trainer = std::move(*t);
  }
  auto data = make_dataset(trainer->train_config());
  const ModelConfig& m = trainer->model_config();
  const TrainConfig& tc = trainer->train_config();
  std::printf("run '%s' in %s: %s, %d layers, D=%d, H=%d, kappa %.4g bit (%.4g nats), %lld parameters, %s %d/%d\n",
              a.run.c_str(), a.db.c_str(), tc.dataset.c_str(), m.n_layers, m.dim, m.latent_bits,
              nats_to_bits(tc.kappa_nats), tc.kappa_nats, static_cast<long long>(trainer->model().num_params()),
              a.resume ? "resuming at step" : "starting at step", trainer->step(), tc.steps);
  std::fflush(stdout);

  std::signal(SIGINT, on_sigint);
  std::signal(SIGTERM, on_sigint);
  const bool tty = !a.quiet && isatty(STDOUT_FILENO);
  TrainerCallbacks cb;
  if (!a.quiet) {
    cb.on_step = [tty](const StepReport& r) { print_progress(r, tty); };
    cb.on_eval = [tty](const EvalReport& e) { print_eval(e, tty); };
  }
  Status st = trainer->run(*data, g_stop, cb);
  if (tty) std::printf("\n");
  std::signal(SIGINT, SIG_DFL);
  if (!st) return fail(st.error());
  std::printf("%s at step %d; checkpoint %s\n", g_stop ? "stopped" : "done", trainer->step(),
              checkpoint_dir(a.db, a.run, trainer->step()).c_str());
  return g_stop ? 130 : 0;
}

}  // namespace ftx::app
