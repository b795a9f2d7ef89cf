// ftx upcycle: a Llama-family model file as a Free Transformer checkpoint that starts with
// exactly the Llama's logits (core/model/upcycle.h), or with --latent-bits 0 the plain model as
// an ftx checkpoint (the baseline of a fine-tune).
#include <cstdio>

#include "app/commands.h"
#include "app/common.h"
#include "app/options.h"
#include "core/io/model_params.h"
#include "core/train/train_config.h"

namespace ftx::app {

void add_upcycle_options(CLI::App& app, UpcycleArgs& a) {
  auto* c = app.add_subcommand("upcycle", "Turn a Llama-family model into a Free Transformer checkpoint");
  c->add_option("--from", a.from, "Model file: a .gguf file or a checkpoint directory")->required();
  c->add_option("--latent-bits", a.latent_bits, "H: latent bits per position (0 = the plain model)")->required();
  add_kappa_bits_option(c, "--kappa-bits", a.kappa_bits, "Free bits per token, in bits, that train --init starts with");
  c->add_option("--out", a.out, "Checkpoint directory to write")->required();
  c->add_option("--post-sampler", a.post_sampler, "Post-sampler init: zero (exact logits) | bitlinear")
      ->check(CLI::IsMember({"zero", "bitlinear"}))
      ->capture_default_str();
  c->add_option("--seed", a.seed, "Seed of zeta, the readout and a bit-linear post-sampler")->capture_default_str();
  add_field_options(c, a.routing);
}

int run_upcycle(const UpcycleArgs& a) {
  if (a.latent_bits < 0 || a.latent_bits > kMaxLatentBits)
    return fail("--latent-bits must be in 0.." + std::to_string(kMaxLatentBits) + ", got " +
                std::to_string(a.latent_bits));
  auto routing = routing_config(a.routing, [](const Field& f) { return option_name(f); });
  if (!routing) return fail(routing.error());
  UpcycleOptions opt;
  opt.latent_bits = a.latent_bits;
  opt.routing = *routing;
  opt.bitlinear_post_sampler = a.post_sampler == "bitlinear";
  opt.seed = a.seed;
  const float kappa = a.kappa_bits ? static_cast<float>(bits_to_nats(*a.kappa_bits)) : -1.0f;
  auto written = upcycle_model_file(a.from, opt, kappa, a.out);
  if (!written) return fail(written.error());
  std::string what = a.latent_bits > 0 ? "Free Transformer, H = " + std::to_string(a.latent_bits) : "plain decoder";
  if (opt.routing.kind != Routing::None)
    what += std::string(", routing ") + routing_name(opt.routing.kind) + " on blocks " + routed_blocks_text(*written);
  std::printf("wrote %s: %s from %s\n", a.out.c_str(), what.c_str(), a.from.c_str());
  return 0;
}

}  // namespace ftx::app
