#include "app/common.h"

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/io/checkpoint.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "datasets/coinflip.h"
#include "datasets/synthetic.h"

namespace ftx::app {

int fail(const Error& e) { return fail(e.message); }

int fail(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "ftx: %s\n", message.c_str());
  return 1;
}

void add_device_options(CLI::App* c, std::string& device, std::string& precision) {
  c->add_option("--device", device, "cpu | cuda | cuda:N")->capture_default_str();
  c->add_option("--precision", precision, "GEMM inputs: fp32 | tf32 | bf16 (default: fp32 on cpu, tf32 on cuda)");
}

Result<std::unique_ptr<Backend>> make_backend(const std::string& device, const std::string& precision) {
  auto be = make_backend_for(device);
  if (!be) return make_error("--device " + device + ": " + be.error().message);
  if (precision.empty()) return be;
  auto prec = parse_matmul_precision(precision);
  Status set = prec ? (*be)->set_matmul_precision(*prec) : Status(prec.error());
  if (!set) return make_error("--precision " + precision + ": " + set.error().message);
  return be;
}

Result<LoadedModel> load_model_dir(const std::string& dir, const std::string& device, const std::string& precision) {
  LoadedModel lm;
  auto backend = make_backend(device, precision);
  if (!backend) return backend.error();
  lm.backend = std::move(*backend);
  auto ck = load_checkpoint(dir, false);
  if (!ck) return ck.error();
  auto model = Model::create(*lm.backend, ck->config);
  if (!model) return model.error();
  lm.model = std::move(*model);
  lm.model->load_params(ck->params.data());
  lm.tokenizer = ck->tokenizer;
  lm.dir = dir;
  return lm;
}

Result<LoadedModel> load_run_model(const std::string& db, const std::string& run, std::optional<int> step,
                                   const std::string& device, const std::string& precision) {
  auto store = RunStore::open_readonly(db);
  if (!store) return store.error();
  auto ref = find_run_checkpoint(*store, run, step);
  if (!ref) return ref.error();
  auto lm = load_model_dir(ref->dir, device, precision);
  if (!lm) return lm.error();
  lm->step = ref->step;
  return lm;
}

bool use_color() {
  static const bool on = isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
  return on;
}

std::string style(const std::string& text, const char* ansi) {
  if (!use_color()) return text;
  return std::string("\033[") + ansi + "m" + text + "\033[0m";
}

std::string format_duration(double s) {
  if (!(s >= 0) || s > 1e7) return "--";
  char buf[32];
  const int t = static_cast<int>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%dh%02dm", t / 3600, t / 60 % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%dm%02ds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ds", t);
  return buf;
}

}  // namespace ftx::app
