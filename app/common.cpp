#include "app/common.h"

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/io/checkpoint.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "datasets/coinflip.h"
#include "datasets/synthetic.h"
#include "kernels/cpu/ops_matmul_bf16.h"

namespace ftx::app {

std::string data_cache_dir() {
  if (const char* d = std::getenv("FTX_DATA_CACHE"); d && *d) return d;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/ftx/data";
}

int fail(const Error& e) { return fail(e.message); }

int fail(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "ftx: %s\n", message.c_str());
  return 1;
}

void add_db_option(CLI::App* c, std::string& db, const std::string& note) {
  c->add_option("--db", db, "Run store (SQLite" + (note.empty() ? std::string() : "; " + note) + ")")
      ->capture_default_str();
}

CLI::Option* add_kappa_bits_option(CLI::App* c, const std::string& flag, std::optional<double>& bits,
                                   const std::string& help) {
  const auto check = [](std::string& text) {
    auto v = parse_kappa_bits(text);
    return v ? std::string() : v.error().message;
  };
  return c
      ->add_option_function<std::string>(
          flag, [&bits](const std::string& text) { bits = parse_kappa_bits(text).value_or(0); }, help)
      ->check(CLI::Validator(check, "BITS"));
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

const char* cpu_bf16_engine(const Backend& be) {
  const bool cpu_bf16 = be.kind() == DeviceKind::Cpu && be.matmul_precision() == MatmulPrecision::Bf16;
  return cpu_bf16 ? cpu::bf16_inputs_engine() : nullptr;
}

namespace {
// Loads `file` onto the backend of --device, with a progress line for models that take a while.
Result<LoadedModel> load_file(std::unique_ptr<Backend> backend, std::unique_ptr<ModelFile> file) {
  LoadedModel lm;
  lm.backend = std::move(backend);
  const bool show = isatty(STDERR_FILENO) && file->info().n_params > 200'000'000;
  int last = -1;
  auto progress = [&](int64_t done, int64_t total) {
    const int pct = int(100 * done / std::max<int64_t>(total, 1));
    if (!show || pct == last) return;
    last = pct;
    std::fprintf(stderr, "\rloading %s: %d%%", file->info().name.c_str(), pct);
    if (done == total) std::fprintf(stderr, "\n");
  };
  auto model = file->load(*lm.backend, progress);
  if (!model) return model.error();
  lm.model = std::move(*model);
  lm.tokenizer = file->info().tokenizer;
  lm.dir = file->info().path;
  lm.file = std::move(file);
  return lm;
}
}  // namespace

Result<LoadedModel> load_model_dir(const std::string& dir, const std::string& device, const std::string& precision) {
  auto backend = make_backend(device, precision);  // bad options first, before any file is read
  if (!backend) return backend.error();
  auto file = ModelFile::open(dir);
  if (!file) return file.error();
  return load_file(std::move(*backend), std::move(*file));
}

void add_model_source_options(CLI::App* c, ModelSourceArgs& a, bool random) {
  auto* ck = c->add_option("--checkpoint", a.checkpoint, "Model: a checkpoint directory or a .gguf file");
  if (!random) {
    ck->required();
    return;
  }
  c->add_flag("--random-init", a.random_init,
              "Random bf16 weights: of --preset's shape, or of --checkpoint's shape with its tokenizer");
  c->add_option("--preset", a.preset, "With --random-init: a preset shape (" + ShapeOverrides::preset_list(", ") + ")");
  c->add_option("--latent-bits", a.latent_bits, "With --random-init: H latent bits (0 = plain decoder)")
      ->check(CLI::Range(0, kMaxLatentBits));
}

Result<LoadedModel> load_model(const ModelSourceArgs& a, const std::string& device, const std::string& precision) {
  if (!a.random_init) {
    if (a.checkpoint.empty()) return make_error("--checkpoint: required (or --random-init with --preset)");
    if (!a.preset.empty() || a.latent_bits) return make_error("--preset and --latent-bits need --random-init");
    return load_model_dir(a.checkpoint, device, precision);
  }
  if (a.checkpoint.empty() == a.preset.empty())
    return make_error("--random-init: give either --preset NAME or --checkpoint PATH (the shape to use)");
  auto backend = make_backend(device, precision);
  if (!backend) return backend.error();
  ModelConfig cfg;
  std::shared_ptr<const Tokenizer> tokenizer;
  if (!a.preset.empty()) {
    auto p = model_preset(a.preset);
    if (!p) return make_error("--preset " + p.error().message);
    cfg = *p;
  } else {
    auto f = ModelFile::open(a.checkpoint);
    if (!f) return f.error();
    cfg = (*f)->info().config;
    tokenizer = (*f)->info().tokenizer;
  }
  if (a.latent_bits) cfg.latent_bits = *a.latent_bits;
  cfg.inject_after = cfg.n_layers / 2;
  if (auto v = cfg.validate(); !v) return make_error("--random-init: " + v.error().message);
  return load_file(std::move(*backend), random_model_file(cfg, tokenizer, a.seed));
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

Status make_store_folder(const std::string& db) {
  const std::filesystem::path parent = std::filesystem::path(db).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return make_error(parent.string() + ": cannot create the run store's folder: " + ec.message());
  return {};
}

}  // namespace ftx::app
