// ftx sweep: one experiment over kappa. Each entry of --kappas is a run <name>-<kappa> trained
// with the ftx train options given (a finished run is kept, an unfinished one resumed), then
// every run is measured with the Figure 4 protocol at its latest checkpoint (once: the numbers
// are stored with it) and the table is printed.
#include <cmath>
#include <cstdio>

#include "app/commands.h"
#include "app/common.h"
#include "app/figure4_print.h"
#include "core/model/kappa.h"
#include "core/store/run_store.h"

namespace ftx::app {
namespace {

struct SweepEntry {
  double bits = 0;
  std::optional<int> steps;
};

// A --kappas entry: a kappa in bits (core/model/kappa.h), optionally ":STEPS".
Result<SweepEntry> parse_entry(const std::string& text) {
  auto bad = [&] { return make_error("--kappas '" + text + "': expected BITS[:STEPS], e.g. 1/8:2000 or 0.5"); };
  SweepEntry e;
  const size_t colon = text.find(':');
  if (colon != std::string::npos) {
    try {
      size_t used = 0;
      const int steps = std::stoi(text.substr(colon + 1), &used);
      if (used != text.size() - colon - 1 || steps <= 0) return bad();
      e.steps = steps;
    } catch (const std::exception&) {
      return bad();
    }
  }
  auto bits = parse_kappa_bits(std::string_view(text).substr(0, colon));
  if (!bits) return bad();
  e.bits = *bits;
  return e;
}

}  // namespace

std::string sweep_run_name(const std::string& name, const std::string& kappa) {
  auto e = parse_entry(kappa);
  return e ? name + "-" + kappa_run_suffix(e->bits) : name + "-" + kappa;
}

void add_sweep_options(CLI::App& app, SweepArgs& a) {
  auto* c = app.add_subcommand("sweep", "Train one run per kappa (Figure 4), then measure and tabulate them");
  add_train_flags(c, a.train);
  c->remove_option(c->get_option("--kappa-bits"));
  c->remove_option(c->get_option("--kappa-nats"));
  c->add_option("--name", a.name, "Runs are named NAME-<kappa>, e.g. sweep-1_8bit")->capture_default_str();
  auto* kappas = c->add_option("--kappas", a.kappas, "Kappas in bits, each BITS[:STEPS] (e.g. 1/64:1000,1/8:2000,1,8)")
                     ->delimiter(',');
  auto* runs = c->add_option("--runs", a.runs, "Instead of --kappas: measure and tabulate these runs (any names)")
                   ->delimiter(',')
                   ->excludes(kappas);
  c->callback([kappas, runs] {
    if (kappas->count() == 0 && runs->count() == 0) throw CLI::ValidationError("--kappas or --runs is required");
  });
  c->add_option("--prompts", a.prompts, "Measurement prompts")->delimiter(',')->capture_default_str();
  c->add_option("--independent", a.independent, "Independent-Z sequences per prompt")->capture_default_str();
  c->add_option("--fixed-groups", a.fixed_groups, "Fixed-Z groups per prompt")->capture_default_str();
  c->add_option("--group-size", a.group_size, "Sequences per fixed-Z group")->capture_default_str();
  c->add_option("--measure-seed", a.measure_seed, "Seed of the measurement's latents and samples")
      ->capture_default_str();
  c->add_flag("--measure-only", a.measure_only, "Measure the runs that exist; train nothing");
}

int run_sweep(SweepArgs& a) {
  std::vector<SweepEntry> entries;
  std::vector<std::string> names = a.runs;  // the runs to measure, in order
  for (const std::string& k : a.kappas) {
    auto e = parse_entry(k);
    if (!e) return fail(e.error());
    entries.push_back(*e);
    names.push_back(a.name + "-" + kappa_run_suffix(e->bits));
  }
  if (a.train.train.dataset != "synthetic") return fail("--dataset: a Figure 4 sweep trains on the synthetic task");
  Figure4Protocol protocol;
  protocol.prompts = a.prompts, protocol.independent = a.independent, protocol.fixed_groups = a.fixed_groups;
  protocol.group_size = a.group_size, protocol.seed = a.measure_seed;
  if (auto s = check_groups(a.independent, a.fixed_groups, a.group_size); !s) return fail(s.error());

  if (auto s = make_store_folder(a.train.db); !s) return fail(s.error());
  if (!a.measure_only) {
    for (const SweepEntry& e : entries) {  // empty with --runs
      TrainArgs t = a.train;
      t.run = a.name + "-" + kappa_run_suffix(e.bits);
      t.kappa_bits = e.bits;
      if (e.steps) t.train.steps = *e.steps, t.steps_given = true;
      if (auto store = RunStore::open_readonly(t.db); store) {
        if (auto info = store->find_run(t.run)) {
          if (info->status == "done") {
            std::printf("%s: done, kept\n", t.run.c_str());
            continue;
          }
          t.resume = true;
        }
      }
      if (const int rc = run_train(t); rc != 0) return rc;
    }
  }
  std::vector<Figure4Row> rows;
  for (const std::string& run : names) {
    std::printf("measuring %s ...\n", run.c_str());
    std::fflush(stdout);
    auto row = figure4_row(a.train.db, run, protocol);
    if (!row) return fail(row.error());
    rows.push_back(*row);
  }
  std::printf("\n");
  print_figure4_table(rows);
  return 0;
}

}  // namespace ftx::app
