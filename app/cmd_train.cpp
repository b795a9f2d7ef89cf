// ftx train: one training run on a registered dataset, recorded in the run store; --init starts
// it from a checkpoint or model file (shape, weights, tokenizer) instead of a random preset.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include <filesystem>

#include "app/commands.h"
#include "app/common.h"
#include "app/job.h"
#include "core/dist/comm.h"
#include "core/store/run_store.h"
#include "core/train/run_start.h"
#include "core/train/trainer.h"
#include "datasets/registry.h"

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

void add_train_flags(CLI::App* c, TrainArgs& a) {
  add_shape_options(c, a.shape);
  add_field_options(c, a.train);
  c->get_option("--dataset")->description("Task to train on: " + dataset_name_list(" | "));
  c->get_option("--steps")->each([&a](const std::string&) { a.steps_given = true; });
  ShapeOverrides::for_each_field(a.shape, [&](auto&, const Field& f) {
    const std::string name = option_name(f);
    if (CLI::Option* o = c->get_option_no_throw(name))
      o->each([&a, name](const std::string&) { a.shape_flag_given = name; });
  });
  c->get_option("--kappa-nats")->each([&a](const std::string&) { a.kappa_given = true; });
  auto* kb =
      add_kappa_bits_option(c, "--kappa-bits", a.kappa_bits, "Free bits per token, in bits: 1/8, 0.125 (default 1/8)");
  kb->excludes(c->get_option("--kappa-nats"));
  kb->each([&a](const std::string&) { a.kappa_given = true; });
  add_kappa_bits_option(c, "--kappa-start-bits", a.kappa_start_bits, "Anneal kappa linearly from this value (bits)");
  add_dataset_options(c, a.train);
  add_db_option(c, a.db);
  add_device_options(c, a.device, a.precision);
  c->add_flag("--quiet", a.quiet, "No progress line");
}

void add_train_options(CLI::App& app, TrainArgs& a) {
  auto* c = app.add_subcommand("train", "Train a Free Transformer (or the baseline with --latent-bits 0)");
  add_train_flags(c, a);
  c->add_option("--run", a.run, "Run name")->required();
  c->add_flag("--resume", a.resume, "Continue the run from its latest checkpoint");
  c->add_flag("--shard-optimizer", a.shard_optimizer,
              "Under mpirun or srun: each rank keeps AdamW's moments for its share of the parameters (ZeRO-1)");
  c->add_option("--bucket-mb", a.bucket_mb,
                "Under mpirun or srun, on the CPU or with NCCL: sum the gradients in buckets of this many MB while "
                "the backward runs (0: after it)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--hang-timeout", a.hang_timeout_s,
                "Under mpirun or srun: end the job when a rank has not reached a collective for this many "
                "seconds (0: wait forever)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

namespace {

// One rank's training (the only one outside a job).
int train_as_rank(TrainArgs& a, Comm& comm) {
  std::string scratch;
  if (comm.size() > 1) {
    if (!comm.root()) {
      scratch = (std::filesystem::temp_directory_path() /
                 ("ftx-rank" + std::to_string(comm.rank()) + "-" + std::to_string(::getpid()) + ".db"))
                    .string();
      a.db = scratch, a.quiet = true;
    }
  }
  struct RemoveScratch {
    const std::string& db;
    ~RemoveScratch() {
      if (db.empty()) return;
      std::error_code ec;
      for (const char* tail : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(db + tail, ec);
      std::filesystem::remove_all(std::filesystem::path(db).replace_extension(".checkpoints"), ec);
    }
  } remove_scratch{scratch};
  a.device = rank_device(comm, a.device);  // in a job on CUDA: one GPU per rank of a host
  auto made_backend = make_backend(a.device, a.precision);
  if (!made_backend) return fail(made_backend.error());
  std::unique_ptr<Backend> backend = std::move(*made_backend);
  if (a.kappa_bits) a.train.kappa_nats = static_cast<float>(bits_to_nats(*a.kappa_bits));
  if (a.kappa_start_bits) a.train.kappa_start_nats = static_cast<float>(bits_to_nats(*a.kappa_start_bits));
  a.train.preset = a.shape.preset;
  if (!a.train.bench_tasks.empty() && a.train.bench_data.empty()) a.train.bench_data = data_cache_dir();
  if (auto s = a.train.validate(option_name); !s) return fail(s.error());

  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<BatchSource> data;
  if (a.resume) {
    const std::optional<int> steps = a.steps_given ? std::optional<int>(a.train.steps) : std::nullopt;
    auto t = comm.root() ? Trainer::resume(*backend, a.db, a.run, steps) : Result<std::unique_ptr<Trainer>>(nullptr);
    // In a job, rank 0 names the checkpoint it resumes from and every other rank loads the same
    // one into its scratch store (empty: rank 0 failed, and says why).
    if (comm.size() > 1) {
      auto dir = broadcast_text(comm, t && *t ? (*t)->resumed_from() : std::string());
      if (!dir) return fail(dir.error());
      if (!comm.root()) {
        if (dir->empty()) return 1;
        t = Trainer::follow(*backend, *dir, a.db, a.run, steps);
      }
    }
    if (!t) return fail(t.error());
    trainer = std::move(*t);
    if (trainer->thread_count_changed() && comm.root())
      std::fprintf(stderr,
                   "ftx: note: thread count differs from the checkpoint's; the curve continues within rounding\n");
    auto opened = open_dataset(trainer->train_config());
    if (!opened) return fail(opened.error());
    data = std::move(*opened);
  } else {  // checked as the studio checks a run (core/train/run_start.h), nothing written on a refusal
    auto opened = open_dataset(a.train, option_name);
    if (!opened) return fail(opened.error());
    auto prepared = prepare_run(NewRun{a.db, a.run, a.shape, a.shape_flag_given, a.train, a.kappa_given},
                                std::move(*opened), option_name);
    if (!prepared) return fail(prepared.error());
    auto t = start_run(*backend, *prepared);
    if (!t) return fail(t.error());
    trainer = std::move(*t);
    data = std::move(prepared->data);
  }
  auto gradients = gradient_path(comm, *backend, a.device);  // on GPUs with NCCL they stay there
  if (!gradients) return fail(gradients.error());
  if (auto joined = trainer->use_comm(comm, std::move(gradients->device), {a.shard_optimizer, a.bucket_mb}); !joined)
    return fail(joined.error());
  const ModelConfig& m = trainer->model_config();
  const TrainConfig& tc = trainer->train_config();
  std::printf("run '%s' in %s: %s, %d layers, D=%d, H=%d, kappa %.4g bit (%.4g nats), %lld parameters, %s %d/%d\n",
              a.run.c_str(), a.db.c_str(), tc.dataset.c_str(), m.n_layers, m.dim, m.latent_bits,
              nats_to_bits(tc.kappa_nats), tc.kappa_nats, static_cast<long long>(trainer->model().num_params()),
              a.resume ? "resuming at step" : "starting at step", trainer->step(), tc.steps);
  // "block 1 computes", "blocks 1, 3 compute"
  const std::string routed = routed_blocks_text(m);
  const std::string blocks =
      (routed.find(',') == std::string::npos ? "block " + routed + " computes" : "blocks " + routed + " compute");
  if (m.routing.kind != Routing::None && m.routing.mode == RouteMode::Threshold)
    std::printf("routing %s: %s every token whose gate reaches %.4g (threshold mode)\n", routing_name(m.routing.kind),
                blocks.c_str(), m.routing.g_th);
  else if (m.routing.kind != Routing::None)
    std::printf("routing %s: %s %d of every %d tokens (capacity %.4g)\n", routing_name(m.routing.kind), blocks.c_str(),
                m.route_k(data->seq_len() - 1), data->seq_len() - 1, m.routing.capacity);
  if (comm.size() > 1)
    std::printf("data-parallel: %d processes (%s), %d of the %d sequences of each batch per process; gradients: %s\n",
                comm.size(), comm.engine().c_str(), tc.batch / comm.size(), tc.batch, gradients->text.c_str());
  if (const char* engine = cpu_bf16_engine(*backend)) std::printf("precision bf16, GEMMs: %s\n", engine);
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

}  // namespace

int run_train(TrainArgs& a) {
  // Under mpirun or srun: one rank of a data-parallel job (docs/distributed.md). Rank 0 writes the
  // run store; the other ranks train into a scratch store of their own, removed at the end.
  return run_as_job(a.hang_timeout_s, [&a](Comm& comm) { return train_as_rank(a, comm); });
}

}  // namespace ftx::app
