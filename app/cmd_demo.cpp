// ftx demo: placeholder until the recipe is settled (see the demo issue notes).
#include "app/commands.h"
#include "app/common.h"

namespace ftx::app {

void add_demo_options(CLI::App& app, DemoArgs& a) {
  auto* c = app.add_subcommand("demo", "Train small models at kappa = 1/64, 1/8 and 1 bit and show Figure 4");
  c->add_option("--workspace", a.workspace, "Where trained models are kept")->capture_default_str();
  c->add_option("--steps", a.steps, "Training steps per model (default: the recipe's)");
  c->add_flag("--fresh", a.fresh, "Retrain even when the workspace has the models");
}

int run_demo(const DemoArgs&) { return fail("demo: not built yet"); }

}  // namespace ftx::app
