// ftx runs / ftx metrics [--benchmarks]: read the run store (read-only; safe while a run is training).
#include <cmath>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/common.h"
#include "core/io/config_json.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"

namespace ftx::app {
namespace {

double last_value(RunStore& s, int64_t run, const std::string& key, int64_t* step = nullptr) {
  auto rows = s.metrics(run, key);
  if (!rows || rows->empty()) return std::nan("");
  if (step) *step = rows->back().step;
  return rows->back().value;
}

}  // namespace

void add_runs_options(CLI::App& app, StoreArgs& a) {
  auto* c = app.add_subcommand("runs", "List the runs of a run store");
  add_db_option(c, a.db);
}

void add_metrics_options(CLI::App& app, StoreArgs& a) {
  auto* c = app.add_subcommand("metrics", "Print the metrics of a run");
  add_db_option(c, a.db);
  c->add_option("--run", a.run, "Run name")->required();
  c->add_option("--key", a.key, "Only this metric (e.g. train/kl)");
  c->add_flag("--csv", a.csv, "CSV output: step,key,value,wall_time");
  c->add_flag("--benchmarks", a.benchmarks,
              "Print the run's benchmark values instead: task, metric, step, value +- stderr, n "
              "(with --csv: task,metric,step,tokens,value,stderr,n; --key: only this task)");
}

int run_runs(const StoreArgs& a) {
  auto store = RunStore::open_readonly(a.db);
  if (!store) return fail(store.error());
  auto runs = store->list_runs();
  if (!runs) return fail(runs.error());
  std::printf("%-24s %-8s %-7s %3s %9s %7s %8s %8s %8s\n", "run", "status", "preset", "H", "kappa_bit", "step",
              "train_ce", "train_kl", "val_ce_pr");
  for (const RunInfo& r : *runs) {
    std::string preset = "?";
    int H = 0;
    double kappa_bits = std::nan("");
    if (auto c = parse_run_config(r.config_json, a.db); c) {  // a row we cannot read still gets listed
      if (c->train) preset = c->train->preset, kappa_bits = nats_to_bits(c->train->kappa_nats);
      if (c->model) H = c->model->latent_bits;
    }
    int64_t step = 0;
    const double ce = last_value(*store, r.id, "train/ce", &step);
    std::printf("%-24s %-8s %-7s %3d %9.4g %7lld %8.4f %8.4f %8.4f\n", r.name.c_str(), r.status.c_str(), preset.c_str(),
                H, kappa_bits, static_cast<long long>(step), ce, last_value(*store, r.id, "train/kl"),
                last_value(*store, r.id, "val/ce_prior"));
  }
  return 0;
}

namespace {

int print_benchmarks(RunStore& store, const RunInfo& run, const StoreArgs& a) {
  auto rows = store.benchmarks(run.id);
  if (!rows) return fail(rows.error());
  std::erase_if(*rows, [&](const BenchmarkRow& b) { return !a.key.empty() && b.task != a.key; });
  if (rows->empty())
    return fail("run '" + a.run + "' has no benchmark values" + (a.key.empty() ? "" : " of task '" + a.key + "'"));
  if (a.csv)
    std::printf("task,metric,step,tokens,value,stderr,n\n");
  else
    std::printf("%-16s %-22s %7s %10s   %-9s %6s\n", "task", "metric", "step", "value", "stderr", "n");
  for (const BenchmarkRow& b : *rows) {
    if (a.csv)
      std::printf("%s,%s,%lld,%lld,%.9g,%.9g,%lld\n", b.task.c_str(), b.metric.c_str(), static_cast<long long>(b.step),
                  static_cast<long long>(b.tokens), b.value, b.stderr_, static_cast<long long>(b.n));
    else
      std::printf("%-16s %-22s %7lld %10.4f \u00b1 %-9.4f %6lld\n", b.task.c_str(), b.metric.c_str(),
                  static_cast<long long>(b.step), b.value, b.stderr_, static_cast<long long>(b.n));
  }
  return 0;
}

}  // namespace

int run_metrics(const StoreArgs& a) {
  auto store = RunStore::open_readonly(a.db);
  if (!store) return fail(store.error());
  auto info = store->find_run(a.run);
  if (!info) return fail(info.error());
  if (a.benchmarks) return print_benchmarks(*store, *info, a);
  auto rows = store->metrics(info->id, a.key);
  if (!rows) return fail(rows.error());
  if (rows->empty() && !a.key.empty()) return fail("run '" + a.run + "' has no metric '" + a.key + "'");
  if (a.csv) std::printf("step,key,value,wall_time\n");
  for (const MetricRow& m : *rows) {
    if (a.csv)
      std::printf("%lld,%s,%.9g,%.3f\n", static_cast<long long>(m.step), m.key.c_str(), m.value, m.wall_time);
    else
      std::printf("%7lld  %-24s %.6g\n", static_cast<long long>(m.step), m.key.c_str(), m.value);
  }
  return 0;
}

}  // namespace ftx::app
