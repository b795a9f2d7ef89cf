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

std::unique_ptr<Backend> make_backend(const std::string& device, const std::string& precision, Error* err) {
  MatmulPrecision prec = MatmulPrecision::Fp32;
  if (!precision.empty() && !parse_matmul_precision(precision, &prec)) {
    *err = make_error("--precision " + precision + ": unknown (expected fp32, tf32 or bf16)");
    return nullptr;
  }
  std::string why;
  auto be = make_backend_for(device, &why);
  if (!be) {
    *err = make_error("--device " + device + ": " + why);
  } else if (!precision.empty() && !be->set_matmul_precision(prec, &why)) {
    *err = make_error("--precision " + precision + ": " + why);
    return nullptr;
  }
  return be;
}

void add_shape_options(CLI::App* c, ShapeOverrides& s) {
  c->add_option("--preset", s.preset, "tiny | small")->capture_default_str();
  c->add_option("--layers", s.layers, "Override the preset's number of blocks");
  c->add_option("--dim", s.dim, "Override the model width");
  c->add_option("--heads", s.heads, "Override the number of query heads");
  c->add_option("--kv-heads", s.kv_heads, "Override the number of key/value heads (GQA)");
  c->add_option("--ffn", s.ffn, "Override the SwiGLU hidden width");
  c->add_option("--latent-bits", s.latent_bits, "H: latent bits per position (0 = plain decoder)")
      ->capture_default_str();
}

Result<ModelConfig> shaped_model_config(const ShapeOverrides& o, int vocab_size, int seq_len) {
  auto cfg = model_preset(o.preset);
  if (!cfg) return make_error("--" + cfg.error().message);  // "--preset 'x': unknown ..."
  if (o.latent_bits < 0 || o.latent_bits > kMaxLatentBits)
    return make_error("--latent-bits " + std::to_string(o.latent_bits) + ": H must be in 0.." +
                      std::to_string(kMaxLatentBits));
  if (o.layers) cfg->n_layers = *o.layers;
  if (o.dim) cfg->dim = *o.dim;
  if (o.heads) cfg->n_heads = *o.heads, cfg->n_kv_heads = *o.heads;
  if (o.kv_heads) cfg->n_kv_heads = *o.kv_heads;
  if (o.ffn) cfg->ffn_hidden = *o.ffn;
  if (cfg->n_heads > 0 && cfg->dim % cfg->n_heads != 0)
    return make_error("--dim " + std::to_string(cfg->dim) + " is not a multiple of --heads " +
                      std::to_string(cfg->n_heads));
  if (cfg->n_heads > 0) cfg->head_dim = cfg->dim / cfg->n_heads;
  cfg->latent_bits = o.latent_bits;
  if (cfg->is_free() && cfg->n_layers < 2)
    return make_error("--layers " + std::to_string(cfg->n_layers) +
                      ": a Free Transformer needs at least 2 blocks (Z enters at the middle one)");
  cfg->inject_after = cfg->n_layers / 2;
  cfg->vocab_size = vocab_size;
  cfg->max_seq_len = std::max(cfg->max_seq_len, seq_len);
  FTX_TRY(cfg->validate());
  return cfg;
}

Result<LoadedModel> load_model_dir(const std::string& dir, const std::string& device, const std::string& precision) {
  LoadedModel lm;
  Error err;
  lm.backend = make_backend(device, precision, &err);
  if (!lm.backend) return err;
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
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%dh%02dm", t / 3600, t / 60 % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%dm%02ds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ds", t);
  return buf;
}

}  // namespace ftx::app
