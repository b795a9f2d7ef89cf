// ftx export / ftx import: a run as a folder to ship or share (core/train/run_bundle.h). The
// Figure 4 and coin-flip models in resources/ were written by ftx export; ./run.sh and ftx demo
// bring them into the workspace with ftx import.
#include <cstdio>

#include "app/commands.h"
#include "app/common.h"
#include "core/train/run_bundle.h"

namespace ftx::app {

void add_export_options(CLI::App& app, BundleArgs& a) {
  auto* c = app.add_subcommand("export", "Write a run (one checkpoint's model, its config and metrics) as a folder");
  add_db_option(c, a.db);
  c->add_option("--run", a.run, "Run name")->required();
  c->add_option("--step", a.step, "Checkpoint step (default: the latest)");
  c->add_option("--out", a.out, "Folder to write (replaced if it exists)")->required();
  c->add_option("--as", a.as, "The run's name in the folder (default: its own)");
  c->add_flag("--f32", a.f32, "Weights as F32 (default BF16: half the size)");
}

void add_import_options(CLI::App& app, BundleArgs& a) {
  auto* c = app.add_subcommand("import", "Add exported runs (ftx export folders) to a run store");
  add_db_option(c, a.db, "created if missing");
  c->add_option("dirs", a.dirs, "Folders written by ftx export")->required();
}

int run_export(const BundleArgs& a) {
  if (auto s = export_run(a.db, a.run, a.out, ExportOptions{a.step, !a.f32, a.as}); !s) return fail(s.error());
  std::printf("run '%s' written to %s\n", a.run.c_str(), a.out.c_str());
  return 0;
}

int run_import(const BundleArgs& a) {
  if (auto s = make_store_folder(a.db); !s) return fail(s.error());
  for (const std::string& dir : a.dirs) {
    bool imported = false;
    if (auto s = import_run(a.db, dir, &imported); !s) return fail(s.error());
    std::printf("%s: %s\n", dir.c_str(), imported ? "imported" : "a run of that name is already in the store, kept");
  }
  return 0;
}

}  // namespace ftx::app
