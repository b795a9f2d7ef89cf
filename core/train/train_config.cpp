#include "core/train/train_config.h"

#include <cmath>
#include <exception>

namespace ftx {

Status TrainConfig::validate() const {
  auto bad = [](const std::string& m) { return make_error(m); };
  if (dataset != "synthetic" && dataset != "coinflip")
    return bad("--dataset '" + dataset + "': unknown (expected synthetic or coinflip)");
  if (steps <= 0) return bad("--steps must be positive, got " + std::to_string(steps));
  if (batch <= 0) return bad("--batch must be positive, got " + std::to_string(batch));
  if (!(lr > 0) || !std::isfinite(lr)) return bad("--lr must be a positive number, got " + std::to_string(lr));
  if (!(kappa_nats >= 0) || !std::isfinite(kappa_nats))
    return bad("kappa must be >= 0 (free bits per token), got " + std::to_string(kappa_nats) + " nats");
  if (kappa_start_nats >= 0 && !std::isfinite(kappa_start_nats)) return bad("kappa start must be finite");
  if (kappa_anneal_steps < 0) return bad("kappa anneal steps must be >= 0");
  if (warmup < 0) return bad("--warmup must be >= 0");
  if (!(min_lr_frac >= 0 && min_lr_frac <= 1)) return bad("min lr fraction must be in [0, 1]");
  if (!(weight_decay >= 0)) return bad("weight decay must be >= 0");
  if (!(grad_clip >= 0)) return bad("gradient clip must be >= 0");
  if (eval_every < 0) return bad("--eval-every must be >= 0 (0 = never)");
  if (checkpoint_every < 0) return bad("--checkpoint-every must be >= 0 (0 = only at the end)");
  if (!(coinflip_eps >= 0 && coinflip_eps <= 1)) return bad("coin-flip eps must be in [0, 1]");
  if (coinflip_len <= 0) return bad("coin-flip length must be positive");
  return {};
}

float TrainConfig::kappa_at(int step) const {
  if (kappa_start_nats < 0 || kappa_anneal_steps <= 0 || step >= kappa_anneal_steps) return kappa_nats;
  const float f = static_cast<float>(step) / kappa_anneal_steps;
  return kappa_start_nats + f * (kappa_nats - kappa_start_nats);
}

float TrainConfig::lr_at(int step) const {
  if (step < warmup) return lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  const int span = steps - warmup;
  if (span <= 0) return lr;
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  const double cosine = 0.5 * (1.0 + std::cos(3.14159265358979 * progress));
  return static_cast<float>(lr * (min_lr_frac + (1.0 - min_lr_frac) * cosine));
}

nlohmann::json train_config_to_json(const TrainConfig& t) {
  return nlohmann::json{{"dataset", t.dataset},
              {"preset", t.preset},
              {"steps", t.steps},
              {"batch", t.batch},
              {"lr", t.lr},
              {"min_lr_frac", t.min_lr_frac},
              {"warmup", t.warmup},
              {"weight_decay", t.weight_decay},
              {"beta1", t.beta1},
              {"beta2", t.beta2},
              {"adam_eps", t.adam_eps},
              {"grad_clip", t.grad_clip},
              {"kappa_nats", t.kappa_nats},
              {"kappa_start_nats", t.kappa_start_nats},
              {"kappa_anneal_steps", t.kappa_anneal_steps},
              {"seed", t.seed},
              {"eval_every", t.eval_every},
              {"checkpoint_every", t.checkpoint_every},
              {"coinflip_eps", t.coinflip_eps},
              {"coinflip_len", t.coinflip_len},
              {"init_std", t.init.std},
              {"init_scale_residual", t.init.scale_residual},
              {"init_post_sampler_std", t.init.post_sampler_std},
              {"init_zeta_std", t.init.zeta_std},
              {"init_post_sampler_bitlinear", t.init.post_sampler_bitlinear}};
}

// Reads what train_config_to_json wrote; missing keys keep their defaults (older runs).
Result<TrainConfig> train_config_from_json(const nlohmann::json& j, const std::string& where) {
  TrainConfig t;
  try {
    auto get = [&](const char* key, auto& field) {
      if (j.contains(key)) field = j.at(key).get<std::decay_t<decltype(field)>>();
    };
    get("dataset", t.dataset), get("preset", t.preset), get("steps", t.steps), get("batch", t.batch);
    get("lr", t.lr), get("min_lr_frac", t.min_lr_frac), get("warmup", t.warmup);
    get("weight_decay", t.weight_decay), get("beta1", t.beta1), get("beta2", t.beta2);
    get("adam_eps", t.adam_eps), get("grad_clip", t.grad_clip), get("kappa_nats", t.kappa_nats);
    get("kappa_start_nats", t.kappa_start_nats), get("kappa_anneal_steps", t.kappa_anneal_steps);
    get("seed", t.seed), get("eval_every", t.eval_every), get("checkpoint_every", t.checkpoint_every);
    get("coinflip_eps", t.coinflip_eps), get("coinflip_len", t.coinflip_len);
    get("init_std", t.init.std), get("init_scale_residual", t.init.scale_residual);
    get("init_post_sampler_std", t.init.post_sampler_std), get("init_zeta_std", t.init.zeta_std);
    get("init_post_sampler_bitlinear", t.init.post_sampler_bitlinear);
  } catch (const std::exception& e) {
    return make_error(where + ": training config: " + e.what());
  }
  FTX_TRY(t.validate());
  return t;
}

}  // namespace ftx
