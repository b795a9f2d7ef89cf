#include "core/train/train_config.h"

#include <cmath>

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

}  // namespace ftx
