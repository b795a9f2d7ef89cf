// ftx: the Free Transformer Studio command line. Argument parsing and dispatch only; every
// command lives in its own cmd_<name>.cpp. Bad input: one line on stderr, exit code 1.
#include <cstdio>

#include "app/commands.h"
#include "app/common.h"

int main(int argc, char** argv) {
  using namespace ftx::app;
  CLI::App app{"ftx: train, sample and inspect Free Transformers (Fleuret, 2025)"};
  app.require_subcommand(1);
  TrainArgs train;
  GenerateArgs gen;
  ScoreArgs score;
  StoreArgs runs, metrics;
  BenchArgs bench;
  DemoArgs demo;
  InspectArgs inspect;
  TokenizeArgs tokenize;
  EvalArgs eval;
  UpcycleArgs upcycle;
  SweepArgs sweep;
  BundleArgs exp, imp;
  add_train_options(app, train);
  add_generate_options(app, gen);
  add_score_options(app, score);
  add_runs_options(app, runs);
  add_metrics_options(app, metrics);
  add_bench_options(app, bench);
  add_demo_options(app, demo);
  add_inspect_options(app, inspect);
  add_tokenize_options(app, tokenize);
  add_eval_options(app, eval);
  add_upcycle_options(app, upcycle);
  add_sweep_options(app, sweep);
  add_export_options(app, exp);
  add_import_options(app, imp);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(std::string(e.what()) + " (see ftx --help)");
  }
  if (app.got_subcommand("train")) return run_train(train);
  if (app.got_subcommand("generate")) return run_generate(gen);
  if (app.got_subcommand("score")) return run_score(score);
  if (app.got_subcommand("runs")) return run_runs(runs);
  if (app.got_subcommand("metrics")) return run_metrics(metrics);
  if (app.got_subcommand("bench")) return run_bench(bench);
  if (app.got_subcommand("demo")) return run_demo(demo);
  if (app.got_subcommand("inspect")) return run_inspect(inspect);
  if (app.got_subcommand("tokenize")) return run_tokenize(tokenize);
  if (app.got_subcommand("eval")) return run_eval(eval);
  if (app.got_subcommand("upcycle")) return run_upcycle(upcycle);
  if (app.got_subcommand("sweep")) return run_sweep(sweep);
  if (app.got_subcommand("export")) return run_export(exp);
  if (app.got_subcommand("import")) return run_import(imp);
  return fail("no command given (see ftx --help)");
}
