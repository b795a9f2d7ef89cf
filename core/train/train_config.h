// TrainConfig: everything a training run needs besides the model shape. Plain struct, validated
// once; the CLI and (later) the studio's Train form both produce it. Serialised into the run row
// of the store and into every checkpoint's trainer.json.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/model/model.h"
#include "core/util/result.h"

namespace ftx {

// The recipe's latent size (the CLI's --latent-bits default and the demo's).
inline constexpr int kDefaultLatentBits = 8;

struct TrainConfig {
  std::string dataset = "synthetic";  // synthetic | coinflip
  std::string preset = "small";
  int steps = 3000;
  int batch = 64;
  float lr = 1e-3f;
  float min_lr_frac = 0.1f;     // cosine decays to lr * min_lr_frac at the last step
  int warmup = 100;             // linear warm-up steps
  float weight_decay = 0.1f;    // AdamW, matrices only
  float beta1 = 0.9f, beta2 = 0.95f, adam_eps = 1e-8f;
  float grad_clip = 1.0f;       // global L2 norm; 0 = off
  float kappa_nats = 0.08664340f;  // free bits per token (1/8 bit)
  float kappa_start_nats = -1;  // < 0: constant kappa; else linear from this to kappa_nats
  int kappa_anneal_steps = 0;   //   over this many steps
  uint64_t seed = 1;
  int eval_every = 500;
  int checkpoint_every = 500;
  double coinflip_eps = 0.1;
  int coinflip_len = 32;
  InitConfig init;

  Status validate() const;
  float kappa_at(int step) const;  // the schedule
  float lr_at(int step) const;     // warm-up then cosine
};

// The "train" object of run rows and trainer.json. Reading is tolerant of missing keys (older
// runs keep the defaults) and strict about types and values (validate()); `where` names the file.
nlohmann::json train_config_to_json(const TrainConfig& t);
Result<TrainConfig> train_config_from_json(const nlohmann::json& j, const std::string& where);

inline double bits_to_nats(double bits) { return bits * std::log(2.0); }
inline double nats_to_bits(double nats) { return nats / std::log(2.0); }

}  // namespace ftx
