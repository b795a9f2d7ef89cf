// ftx demo: the main job of ./run.sh without a display. Brings the shipped Figure 4 models
// (resources/models, written by ftx export) into the workspace's run store, then prints the
// paper's Figure 4 from them in seconds: for each kappa an independent group and fixed-Z groups
// from one prompt, and the measured table (the numbers stored with the models). --retrain trains
// the four models again with the recipe (figure4_recipe, as documented in docs/figure4.md) and
// shows those instead.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "app/commands.h"
#include "app/common.h"
#include "app/figure4_print.h"
#include "core/train/run_bundle.h"

namespace ftx::app {
namespace {

// Where the shipped models are: --models, or when the default is not there (ftx run from another
// folder), resources/models of the source tree this binary was built in (build/app/ftx).
std::string models_dir(const std::string& given) {
  std::error_code ec;
  if (given != DemoArgs{}.models || std::filesystem::exists(given, ec)) return given;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto beside = exe.parent_path().parent_path().parent_path() / "resources" / "models";
  return !ec && std::filesystem::exists(beside, ec) ? beside.string() : given;
}

// Imports every bundle under `models` (sorted by name) that the store does not have yet.
Status import_shipped(const std::string& db, const std::string& models) {
  std::error_code ec;
  std::vector<std::string> dirs;
  for (const auto& e : std::filesystem::directory_iterator(models, ec))
    if (std::filesystem::exists(e.path() / kRunBundleFileName)) dirs.push_back(e.path().string());
  if (ec) return make_error(models + ": cannot list the shipped models: " + ec.message());
  std::sort(dirs.begin(), dirs.end());
  for (const std::string& dir : dirs) {
    bool imported = false;
    FTX_TRY(import_run(db, dir, &imported));
    if (imported) std::printf("imported %s\n", dir.c_str());
  }
  return {};
}

Status show_groups(const std::string& db, const Figure4Row& row) {
  auto lm = load_run_model(db, row.run, row.step, "cpu", "");
  if (!lm) return lm.error();
  if (!lm->tokenizer) return make_error(lm->dir + ": config.json has no tokenizer (the demo needs its text)");
  auto prompt = lm->tokenizer->encode("K>");
  if (!prompt) return make_error(lm->dir + ": cannot encode the prompt: " + prompt.error().message);
  SampleConfig sc;
  sc.max_new_tokens = 64;
  auto groups = figure4_groups(*lm->model, *prompt, 8, 2, 8, 1, sc, *lm->tokenizer);
  std::printf("\n%s\n", style("==== kappa = " + kappa_bits_text(row.kappa_bits) + "  (run " + row.run + ", step " +
                                  std::to_string(row.step) + ")",
                              "1;35")
                            .c_str());
  for (const auto& g : groups) print_group(g, *lm->tokenizer);
  return {};
}

}  // namespace

SweepArgs figure4_recipe(const std::string& db, const std::string& name) {
  SweepArgs s;
  s.train.db = db;
  // The run row holds every dataset's options, as ftx train's does.
  s.train.train.dataset_options = default_dataset_options();
  s.name = name;
  s.kappas = {"1/64:1000", "1/8:2000", "1:3000", "8:1000"};
  s.train.train.eval_every = 250;
  s.train.train.checkpoint_every = 250;
  return s;
}

void add_demo_options(CLI::App& app, DemoArgs& a) {
  auto* c = app.add_subcommand("demo", "Figure 4 from the shipped models at four kappas (in seconds)");
  c->add_option("--workspace", a.workspace, "Where the run store (runs.db) is kept")->capture_default_str();
  c->add_option("--models", a.models, "The shipped models (ftx export folders)")->capture_default_str();
  c->add_flag("--retrain", a.retrain,
              "Train the four models again with the recipe as runs retrained-* (about 30 minutes on 2 cores; "
              "an interrupted call resumes, finished runs are kept)");
}

int run_demo(const DemoArgs& a) {
  const std::string db = (std::filesystem::path(a.workspace) / "runs.db").string();
  if (Status s = make_store_folder(db); !s) return fail(s.error());
  std::printf("%s\n", style("Free Transformer Studio: the paper's Figure 4 on the synthetic task", "1").c_str());
  std::printf(
      "Each sequence is a prompt such as 'K>' then 64 characters: underscores, one 8-letter target at a\n"
      "random place, and '!' noise. The latent Z can carry where the target goes; kappa sets how much it\n"
      "may carry per token. Run store: %s\n",
      db.c_str());
  SweepArgs recipe = figure4_recipe(db, a.retrain ? "retrained" : "fig4");
  if (a.retrain) {
    recipe.measure_only = false;
    if (const int rc = run_sweep(recipe); rc != 0) return rc;
  } else if (Status s = import_shipped(db, models_dir(a.models)); !s) {
    return fail(s.error());
  }
  Figure4Protocol protocol;
  std::vector<Figure4Row> rows;
  for (const std::string& k : recipe.kappas) {
    auto row = figure4_row(db, sweep_run_name(recipe.name, k), protocol);
    if (!row) return fail(row.error().message + (a.retrain ? "" : " (ftx demo --retrain trains the models)"));
    if (Status s = show_groups(db, *row); !s) return fail(s.error());
    rows.push_back(*row);
  }
  std::printf("\n%s\n", style("Figure 4 as numbers (prompts K> and Q>; per prompt 32 fixed-Z groups of 8 and "
                              "1,000 independent sequences)",
                              "1")
                            .c_str());
  print_figure4_table(rows);
  std::printf(
      "\nThe paper (Figure 4): at 1/64 bit Z is ignored; at 1/8 bit a fixed Z pins the target position\n"
      "while the noise stays random; at 1 bit a fixed Z pins the noise pattern too; at 8 bits samples\n"
      "from the prior go wrong. docs/figure4.md says what this reproduces and what not yet.\n");
  return 0;
}

}  // namespace ftx::app
