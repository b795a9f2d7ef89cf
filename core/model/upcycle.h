// Upcycling (docs/design.md section 14): a trained plain decoder (a Llama) turned into a Free
// Transformer that computes exactly the same logits, so that fine-tuning starts from the
// Llama's quality and learns to use Z:
//   - every decoder tensor is copied;
//   - the encoder block is a copy of the injection block (block inject_after, the one whose
//     keys/values receive Z), a block that already reads the residual stream at that depth;
//   - the encoder norm is ones, zeta is N(0, 1) (it goes through RMSNorm);
//   - the readout is small and random: bit logits of std readout_logit_std (0.1: the KL to the
//     uniform prior starts near H * 0.1^2 / 8 nats, far below any useful kappa, so the free bits
//     leave the encoder alone until the decoder asks for Z). Not zero: a zero readout gives the
//     encoder no gradient until the readout has grown, and every Z would be pure noise meanwhile;
//   - the post-sampler is zero (Z adds nothing: the logits are the Llama's, bit for bit), or
//     the bit-linear init of InitConfig (the logits then differ by what Z adds).
// With a zero post-sampler the decoder's gradient still reaches the post-sampler (its gradient
// is the residual gradient at the injection block gathered by code), so training moves it at the
// first step and the encoder's pass-through gradient follows from the second.
//
// Deliberately not here: reading and writing files (core/io/model_params.h, checkpoint.h).
#pragma once
#include <cstdint>
#include <vector>

#include "core/model/config.h"
#include "kernels/backend.h"
#include "kernels/base/result.h"

namespace ftx {

struct UpcycleOptions {
  int latent_bits = 16;  // H; 0: the plain decoder unchanged (the baseline)
  bool bitlinear_post_sampler = false;
  float post_sampler_std = 0.02f;  // only with bitlinear_post_sampler
  float readout_logit_std = 0.1f;  // std of the bit logits at the start (see above)
  uint64_t seed = 1;               // Philox seed of zeta, the readout and a bit-linear post-sampler
  // Routed compute on the odd blocks (docs/subjective_depth.md): the router's new tensors start as
  // a fresh model's; the blocks keep the source's weights. At capacity 1 with a hard gate the logits
  // are the source's.
  RoutingConfig routing;
};

struct Upcycled {
  ModelConfig config;
  std::vector<float> params;  // arena order of param_specs(config)
};

// `src` must be a plain decoder (latent_bits == 0) and src_params its arena. Errors: a source
// that is already a Free Transformer, H out of 0..kMaxLatentBits, a model too shallow for a
// middle block (n_layers < 2). `be` makes the random tensors (any backend; they come back to host).
Result<Upcycled> upcycle(Backend& be, const ModelConfig& src, const std::vector<float>& src_params,
                         const UpcycleOptions& opt);

}  // namespace ftx
