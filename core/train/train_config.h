// TrainConfig: everything a training run needs besides the model shape. Plain struct; its fields
// are declared once in for_each_field (core/util/fields.h), which drives validate(), the JSON and
// the command line's options. The CLI and the studio's Train form both produce it. Serialised
// into the run row of the store and into every checkpoint's trainer.json.
//
// Deliberately not here: the options of one dataset (the coin flip's eps and length). Datasets
// declare their own (datasets/registry.h) and read them from dataset_options, which core carries
// without looking inside.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/model/free_bits.h"
#include "core/model/kappa.h"  // kappa_nats: bits_to_nats and the text of a kappa
#include "core/model/model.h"
#include "core/util/fields.h"
#include "kernels/base/result.h"

namespace ftx {

struct TrainConfig {
  std::string dataset = "synthetic";  // a registered dataset (datasets/registry.h)
  std::string preset = "small";       // the model's preset, "custom" from the studio's form
  int steps = 3000;
  int batch = 64;
  float lr = 1e-3f;
  float min_lr_frac = 0.1f;   // cosine decays to lr * min_lr_frac at the last step
  int warmup = 100;           // linear warm-up steps
  float weight_decay = 0.1f;  // AdamW, matrices only
  float beta1 = 0.9f, beta2 = 0.95f, adam_eps = 1e-8f;
  float grad_clip = 1.0f;          // global L2 norm; 0 = off
  float kappa_nats = 0.08664340f;  // free bits per token (1/8 bit)
  float kappa_start_nats = -1;     // < 0: constant kappa; else linear from this to kappa_nats
  int kappa_anneal_steps = 0;      //   over this many steps
  // How kappa meets the KL (core/model/free_bits.h): "batch-mean" or "per-pair". A stored run
  // without the key was trained per pair and reads as "per-pair" (train_config_from_json).
  std::string free_bits = "batch-mean";
  uint64_t seed = 1;
  int eval_every = 500;
  int checkpoint_every = 500;
  int keep_checkpoints = 0;  // keep the last N and the best by val/ce_prior; 0 = keep all
  int val_sequences = 256;   // held-out sequences per evaluation
  std::string init_from;     // a checkpoint or model file the weights start from (empty: random init)
  // Benchmarks scored during training (core/eval/bench): "humaneval:40,gsm8k:50" (task:items, a
  // fixed subset), at step 0, every bench_every steps and at the end; data files <task>.jsonl in
  // bench_data (the app fills in the data cache when empty).
  std::string bench_tasks;
  int bench_every = 0;  // 0: at the start and the end only
  std::string bench_data;
  int bench_max_new_tokens = 0;  // 0: each task's default
  InitConfig init;
  // The dataset's own options by key (e.g. "coinflip_eps"): a JSON object, written beside the
  // fields above in the same "train" object, and read back from every key that is no field.
  nlohmann::json dataset_options = nlohmann::json::object();

  // Keys are the JSON keys of run rows and trainer.json: never rename one (old runs must load).
  // Fields with help text are options of `ftx train`.
  template <class Self, class V>
  static void for_each_field(Self& t, V&& v) {
    v(t.dataset, Field{.key = "dataset", .help = "Task to train on"});
    v(t.preset, Field{.key = "preset"});  // set from the model's shape
    v(t.steps, Field{.key = "steps", .help = "Optimizer steps", .bounds = kPositive});
    v(t.batch, Field{.key = "batch", .help = "Sequences per step", .bounds = kPositive});
    v(t.lr, Field{.key = "lr", .help = "Peak learning rate (AdamW)", .bounds = kPositive});
    v(t.min_lr_frac, Field{.key = "min_lr_frac", .bounds = closed_range(0, 1)});
    v(t.warmup, Field{.key = "warmup", .help = "Linear warm-up steps", .bounds = kNonNegative});
    v(t.weight_decay, Field{.key = "weight_decay", .help = "AdamW weight decay", .bounds = kNonNegative});
    v(t.beta1, Field{.key = "beta1", .bounds = half_open_range(0, 1)});
    v(t.beta2, Field{.key = "beta2", .bounds = half_open_range(0, 1)});
    v(t.adam_eps, Field{.key = "adam_eps", .bounds = kPositive});
    v(t.grad_clip,
      Field{.key = "grad_clip", .help = "Clip the global gradient norm (0 = off)", .bounds = kNonNegative});
    v(t.kappa_nats, Field{.key = "kappa_nats",
                          .help = "Free bits per token, in nats",
                          .bounds = kNonNegative,
                          .note = "(free bits per token)"});
    v(t.kappa_start_nats, Field{.key = "kappa_start_nats", .note = "(< 0: constant kappa)"});
    v(t.kappa_anneal_steps,
      Field{.key = "kappa_anneal_steps", .help = "Steps of the kappa anneal", .bounds = kNonNegative});
    v(t.free_bits, Field{.key = "free_bits",
                         .help = "Free-bits form: batch-mean (the KL averaged over the batch at each position before "
                                 "kappa, Kingma et al.) or per-pair (each sequence's position alone)"});
    v(t.seed, Field{.key = "seed", .help = "Seed of data, init and latents"});
    v(t.eval_every,
      Field{.key = "eval_every", .help = "Evaluate every N steps (0 = only at the end)", .bounds = kNonNegative});
    v(t.checkpoint_every,
      Field{
          .key = "checkpoint_every", .help = "Checkpoint every N steps (0 = only at the end)", .bounds = kNonNegative});
    v(t.keep_checkpoints, Field{.key = "keep_checkpoints",
                                .help = "Keep the last N checkpoints and the best by validation CE (0 = keep all)",
                                .bounds = kNonNegative});
    v(t.val_sequences, Field{.key = "val_sequences", .help = "Held-out sequences per evaluation", .bounds = kPositive});
    v(t.init_from, Field{.key = "init_from",
                         .help = "Start from this checkpoint directory or model file (shape, weights, tokenizer)",
                         .option = "init"});
    v(t.bench_tasks,
      Field{.key = "bench_tasks",
            .help = "Benchmarks to score during training: TASK[:ITEMS],... (e.g. humaneval:40,gsm8k:50)"});
    v(t.bench_every, Field{.key = "bench_every",
                           .help = "Score the benchmarks every N steps (0 = at the start and the end only)",
                           .bounds = kNonNegative});
    v(t.bench_data,
      Field{.key = "bench_data", .help = "Directory of the benchmarks' <task>.jsonl files (default: the data cache)"});
    v(t.bench_max_new_tokens, Field{.key = "bench_max_new_tokens",
                                    .help = "Tokens per benchmark generation (0 = each task's default)",
                                    .bounds = kNonNegative});
    v(t.init.std, Field{.key = "init_std", .bounds = kNonNegative});
    v(t.init.scale_residual, Field{.key = "init_scale_residual"});
    v(t.init.post_sampler_std, Field{.key = "init_post_sampler_std",
                                     .help = "Init std of the post-sampler",
                                     .bounds = kNonNegative,
                                     .option = "post-sampler-std"});
    v(t.init.zeta_std, Field{.key = "init_zeta_std", .bounds = kNonNegative});
    v(t.init.post_sampler_bitlinear,
      Field{.key = "init_post_sampler_bitlinear",
            .help = "Post-sampler columns as sums of one random direction per bit (default on)",
            .option = "bitlinear-init"});
  }

  Status validate(FieldName name = field_key) const;  // messages name the fields through `name`
  float kappa_at(int step) const;                     // the schedule
  FreeBitsForm free_bits_form() const;                // free_bits, which validate() has checked
  float lr_at(int step) const;                        // warm-up then cosine
};

// The "train" object of run rows and trainer.json: the fields by key, then dataset_options' keys.
// Reading is tolerant of missing keys (older runs keep the defaults) and strict about types and
// values (validate()); `where` names the file. Keys that are no field (the coin flip's
// "coinflip_eps" and "coinflip_len" of every run so far) go to dataset_options.
nlohmann::json train_config_to_json(const TrainConfig& t);
Result<TrainConfig> train_config_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace ftx
