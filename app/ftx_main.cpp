// ftx: the Free Transformer Studio command line. Argument parsing and dispatch only; every
// command lives in its own cmd_<name>.cpp and is one row of the table below. Bad input: one line
// on stderr, exit code 1.
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include "app/commands.h"
#include "app/common.h"
#include "kernels/cpu/blas_core.h"

namespace {

using namespace ftx::app;

// The commands: each row declares its subcommand's options into the app (add_<name>_options) and
// runs it from the parsed arguments (run_<name>) when it was the one given.
class CommandTable {
 public:
  explicit CommandTable(CLI::App& app) : app_(app) {}

  template <class Args, class Declare, class Run>
  void add(Declare declare, Run run) {
    auto args = std::make_shared<Args>();
    declare(app_, *args);
    CLI::App* command = app_.get_subcommands([](CLI::App*) { return true; }).back();
    rows_.push_back({command, [args, run] { return run(*args); }});
  }

  int run_given() const {
    for (const Row& row : rows_)
      if (row.command->parsed()) return row.run();
    return fail("no command given (see ftx --help)");
  }

 private:
  struct Row {
    CLI::App* command;
    std::function<int()> run;
  };
  CLI::App& app_;
  std::vector<Row> rows_;
};

}  // namespace

int main(int argc, char** argv) {
  ftx::cpu::restart_with_right_blas_core(argv);  // before OpenMP's and OpenBLAS's threads exist
  CLI::App app{"ftx: train, sample and inspect Free Transformers (Fleuret, 2025)"};
  app.require_subcommand(1);
  CommandTable commands(app);
  commands.add<TrainArgs>(add_train_options, run_train);
  commands.add<GenerateArgs>(add_generate_options, run_generate);
  commands.add<ScoreArgs>(add_score_options, run_score);
  commands.add<StoreArgs>(add_runs_options, run_runs);
  commands.add<StoreArgs>(add_metrics_options, run_metrics);
  commands.add<BenchArgs>(add_bench_options, run_bench);
  commands.add<DemoArgs>(add_demo_options, run_demo);
  commands.add<InspectArgs>(add_inspect_options, run_inspect);
  commands.add<TokenizeArgs>(add_tokenize_options, run_tokenize);
  commands.add<EvalArgs>(add_eval_options, run_eval);
  commands.add<UpcycleArgs>(add_upcycle_options, run_upcycle);
  commands.add<SweepArgs>(add_sweep_options, run_sweep);
  commands.add<BundleArgs>(add_export_options, run_export);
  commands.add<BundleArgs>(add_import_options, run_import);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(std::string(e.what()) + " (see ftx --help)");
  }
  return commands.run_given();
}
