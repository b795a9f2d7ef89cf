// ftx demo: the main job of ./run.sh without a display. Trains the `small` Free Transformer at
// kappa = 1/64, 1/8 and 1 bit on the synthetic task with the default recipe, showing progress
// and, at every evaluation, a few generations of an independent and a fixed-Z group so that a
// person watches Z take effect; then prints the Figure 4 comparison for each kappa with the
// measured agreements. Models are kept in the workspace: a second run shows the result at once,
// an interrupted one (Ctrl-C) resumes where it stopped.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "app/commands.h"
#include "app/common.h"
#include "app/figure4_print.h"
#include "core/train/trainer.h"
#include "datasets/registry.h"

namespace ftx::app {
namespace {

std::atomic<bool> g_demo_stop{false};
extern "C" void on_demo_sigint(int) {
  if (g_demo_stop.exchange(true)) std::_Exit(130);
}

// Steps per kappa (batch 64, cosine decay over the run): at 1 bit a fixed Z pins the target
// position more and more (agree fixed 0.16 at 400 steps, 0.31 at 600, 0.46 at 1,400 with valid
// 0.96); 1/64 bit converges fast either way. (At batch 32 and 2,000 steps the 1-bit run packed so
// much into Z that samples from the prior turned invalid: keep the schedule short.)
struct DemoRun {
  const char* name;
  const char* label;
  double kappa_bits;
  int steps;
};
constexpr DemoRun kDemoRuns[] = {{"demo-kappa-1_64", "1/64 bit", 1.0 / 64, 1000},
                                 {"demo-kappa-1_8", "1/8 bit", 1.0 / 8, 2000},
                                 {"demo-kappa-1", "1 bit", 1.0, 1400}};

// "K>" in the synthetic task's tokens (the demo's runs are synthetic-task runs).
std::vector<int32_t> demo_prompt(const Tokenizer& tokenizer) {
  auto p = tokenizer.encode("K>");
  FT_ASSERT(p.ok(), "demo prompt: %s", p.error().message.c_str());
  return *p;
}

// A few generations of one independent and two fixed-Z groups, redrawn at every evaluation.
void show_live_groups(Model& model, const Tokenizer& tokenizer, const EvalReport& e, const DemoRun& r) {
  SampleConfig sc;
  sc.max_new_tokens = 64;
  auto groups = figure4_groups(model, demo_prompt(tokenizer), 3, 2, 3, 4242, sc, tokenizer);
  auto metric = [&](const char* key) {
    for (const auto& [k, v] : e.metrics)
      if (k == key) return v;
    return std::nan("");
  };
  std::printf("\r\033[K%s\n", style("-- " + std::string(r.label) + ", step " + std::to_string(e.step), "1;36").c_str());
  std::printf(
      "   val CE (Z from prior) %.3f   KL %.3f nats/token   valid %.2f   agreement fixed %.2f / independent %.2f\n",
      metric("val/ce_prior"), metric("val/kl"), metric("synth/valid"), metric("synth/agree_fixed"),
      metric("synth/agree_indep"));
  for (const auto& g : groups)
    for (const auto& gen : g.gens)
      std::printf("   %-8s %s\n", g.fixed ? ("fixed " + std::to_string(g.group)).c_str() : "indep",
                  render(tokenizer.decode(gen.tokens)).c_str());
  std::fflush(stdout);
}

// Trains (or resumes) one demo run until its recipe's steps are done.
Status train_demo_run(const std::string& db, const DemoRun& r, int steps) {
  auto store = RunStore::open(db);
  if (!store) return store.error();
  auto info = store->find_run(r.name);
  auto backend = make_cpu_backend();
  std::unique_ptr<Trainer> trainer;
  if (info) {
    if (info->status == "done") return {};
    auto t = Trainer::resume(*backend, db, r.name, std::nullopt);
    if (!t) return t.error();
    trainer = std::move(*t);
  } else {
    TrainConfig tc;
    tc.dataset_options = default_dataset_options();  // the run row holds every dataset's options, as ftx train's
    tc.kappa_nats = static_cast<float>(bits_to_nats(r.kappa_bits));
    tc.steps = steps > 0 ? steps : r.steps;
    tc.eval_every = std::max(1, tc.steps / 8);
    tc.checkpoint_every = tc.eval_every;
    auto data = make_dataset(tc);
    auto mcfg = shape_model_config(ShapeOverrides{}, data->tokenizer().vocab_size(), data->seq_len());
    if (!mcfg) return mcfg.error();
    auto t = Trainer::start(*backend, *mcfg, data->tokenizer().clone(), tc, data->seq_len(), db, r.name);
    if (!t) return t.error();
    trainer = std::move(*t);
  }
  std::printf("\n%s\n", style("training the small Free Transformer at kappa = " + std::string(r.label) + " (" +
                                  std::to_string(trainer->train_config().steps) + " steps)",
                              "1")
                            .c_str());
  auto data = make_dataset(trainer->train_config());
  TrainerCallbacks cb;
  const bool tty = isatty(STDOUT_FILENO);
  cb.on_step = [tty](const StepReport& s) {
    if (!tty && s.step % 100 != 0) return;
    std::printf("%sstep %5d/%d  ce %.4f  kl %.4f  %6.0f tok/s  ETA %s%s", tty ? "\r\033[K" : "", s.step, s.total_steps,
                s.stats.ce, s.stats.kl, s.tokens_per_s, format_duration(s.eta_s).c_str(), tty ? "" : "\n");
    std::fflush(stdout);
  };
  Trainer* tp = trainer.get();
  const Tokenizer& tokenizer = data->tokenizer();
  cb.on_eval = [tp, &tokenizer, &r](const EvalReport& e) { show_live_groups(tp->model(), tokenizer, e, r); };
  return trainer->run(*data, g_demo_stop, cb);
}

double final_metric(RunStore& store, int64_t run, const char* key) {
  auto rows = store.metrics(run, key);
  return rows && !rows->empty() ? rows->back().value : std::nan("");
}

Status show_result(const std::string& db, const DemoRun& r) {
  auto lm = load_run_model(db, r.name, std::nullopt, "cpu", "");
  if (!lm) return lm.error();
  if (!lm->tokenizer) return make_error(lm->dir + ": config.json has no tokenizer (the demo needs its text)");
  const Tokenizer& tokenizer = *lm->tokenizer;
  SampleConfig sc;
  sc.max_new_tokens = 64;
  auto groups = figure4_groups(*lm->model, demo_prompt(tokenizer), 8, 2, 8, 1, sc, tokenizer);
  std::printf(
      "\n%s\n",
      style("==== kappa = " + std::string(r.label) + "  (step " + std::to_string(lm->step) + ")", "1;35").c_str());
  for (const auto& g : groups) print_group(g, tokenizer);
  return {};
}

void print_summary(const std::string& db) {
  auto store = RunStore::open_readonly(db);
  if (!store) return;
  std::printf("\n%s\n",
              style("Figure 4 as numbers (evaluation at the last step: 16 prompts, groups of 8)", "1").c_str());
  std::printf("  %-9s %8s %8s %7s %12s %12s %12s %12s\n", "kappa", "val CE", "KL", "valid", "agree fixed",
              "agree indep", "noise fixed", "noise indep");
  for (const DemoRun& r : kDemoRuns) {
    auto info = store->find_run(r.name);
    if (!info) continue;
    const int64_t id = info->id;
    std::printf("  %-9s %8.4f %8.4f %7.2f %12.2f %12.2f %12.2f %12.2f\n", r.label,
                final_metric(*store, id, "val/ce_prior"), final_metric(*store, id, "val/kl"),
                final_metric(*store, id, "synth/valid"), final_metric(*store, id, "synth/agree_fixed"),
                final_metric(*store, id, "synth/agree_indep"), final_metric(*store, id, "synth/noise_agree_fixed"),
                final_metric(*store, id, "synth/noise_agree_indep"));
  }
  std::printf(
      "\nThe paper (Figure 4): at 1/64 bit Z is ignored; at 1/8 bit a fixed Z pins the target position\n"
      "while the noise stays random; at 1 bit a fixed Z pins the noise pattern too.\n");
}

}  // namespace

void add_demo_options(CLI::App& app, DemoArgs& a) {
  auto* c = app.add_subcommand("demo", "Train small models at kappa = 1/64, 1/8 and 1 bit and show Figure 4");
  c->add_option("--workspace", a.workspace, "Where trained models are kept")->capture_default_str();
  c->add_option("--steps", a.steps, "Training steps per model (default: the recipe's)");
  c->add_flag("--fresh", a.fresh, "Retrain even when the workspace has the models");
}

int run_demo(const DemoArgs& a) {
  std::error_code ec;
  std::filesystem::create_directories(a.workspace, ec);
  if (ec) return fail(a.workspace + ": cannot create the workspace: " + ec.message());
  const std::string db = (std::filesystem::path(a.workspace) / "demo.db").string();
  if (a.fresh) {
    std::filesystem::remove(db, ec);
    std::filesystem::remove(db + "-wal", ec);
    std::filesystem::remove(db + "-shm", ec);
    std::filesystem::remove_all(std::filesystem::path(a.workspace) / "demo.checkpoints", ec);
  }
  std::printf("%s\n", style("Free Transformer Studio: the paper's Figure 4 on the synthetic task", "1").c_str());
  std::printf(
      "Each sequence is 'K>' then 64 characters: underscores, one 8-letter target at a random place,\n"
      "and '!' noise. The latent Z can carry where the target goes; kappa sets how much it may carry.\n"
      "Workspace: %s (delete it, or pass --fresh, to retrain)\n",
      db.c_str());
  std::signal(SIGINT, on_demo_sigint);
  for (const DemoRun& r : kDemoRuns) {
    if (Status s = train_demo_run(db, r, a.steps); !s) return fail(s.error());
    if (g_demo_stop) {
      std::printf("\nstopped; run ./run.sh again to continue where it stopped\n");
      return 130;
    }
  }
  for (const DemoRun& r : kDemoRuns)
    if (Status s = show_result(db, r); !s) return fail(s.error());
  print_summary(db);
  return 0;
}

}  // namespace ftx::app
