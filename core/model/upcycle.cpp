#include "core/model/upcycle.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/model/model.h"
#include "core/model/params.h"

namespace ftx {

Result<Upcycled> upcycle(Backend& be, const ModelConfig& src, const std::vector<float>& src_params,
                         const UpcycleOptions& opt) {
  if (src.is_free())
    return make_error("the source is already a Free Transformer (H = " + std::to_string(src.latent_bits) +
                      "); upcycle a plain decoder");
  if (opt.latent_bits < 0 || opt.latent_bits > kMaxLatentBits)
    return make_error("latent bits must be in 0.." + std::to_string(kMaxLatentBits) + ", got " +
                      std::to_string(opt.latent_bits));
  const std::vector<ParamSpec> src_specs = param_specs(src);
  if (int64_t(src_params.size()) != param_count(src_specs))
    return make_error("the source has " + std::to_string(src_params.size()) + " parameters where its shape needs " +
                      std::to_string(param_count(src_specs)));
  Upcycled out;
  out.config = src;
  out.config.latent_bits = opt.latent_bits;
  out.config.routing = opt.routing;
  if (opt.latent_bits == 0 && opt.routing.kind == Routing::None) {
    out.params = src_params;
    return out;
  }
  if (opt.latent_bits > 0 && src.n_layers < 2)
    return make_error("a Free Transformer needs at least 2 blocks to inject Z in the middle, the source has " +
                      std::to_string(src.n_layers));
  out.config.inject_after = src.n_layers / 2;
  out.config.readout_bias = false;
  FTX_TRY(out.config.validate());

  // The new tensors as Model::init_weights makes them (one Philox stream per tensor), with the
  // matrix std chosen for the readout: every other matrix is overwritten below.
  auto model = Model::create(be, out.config);
  if (!model) return model.error();
  InitConfig init;
  init.std = opt.readout_logit_std / std::sqrt(float(src.dim));  // the readout reads RMS-normed rows
  init.post_sampler_std = opt.post_sampler_std;
  init.post_sampler_bitlinear = opt.bitlinear_post_sampler;
  (*model)->init_weights(opt.seed, init);
  out.params.resize(size_t((*model)->num_params()));
  (*model)->save_params(out.params.data());
  const std::vector<ParamSpec> specs = (*model)->specs();
  model->reset();

  auto copy = [&](const std::string& to, const std::string& from) {
    const ParamSpec* d = find_param(specs, to);
    const ParamSpec* s = find_param(src_specs, from);
    FT_ASSERT(d && s && d->numel == s->numel, "upcycle: %s <- %s", to.c_str(), from.c_str());
    std::memcpy(out.params.data() + d->offset, src_params.data() + s->offset, size_t(s->numel) * sizeof(float));
  };
  for (const ParamSpec& s : src_specs) copy(s.name, s.name);  // the decoder, unchanged
  const std::string inj = "model.layers." + std::to_string(out.config.inject_after) + ".";
  for (const ParamSpec& s : specs)
    if (s.name.starts_with("free.encoder.")) copy(s.name, inj + s.name.substr(std::string("free.encoder.").size()));
  if (opt.latent_bits > 0 && !opt.bitlinear_post_sampler) {
    const ParamSpec* ps = find_param(specs, "free.post_sampler.weight");
    std::fill_n(out.params.data() + ps->offset, size_t(ps->numel), 0.0f);
  }
  return out;
}

}  // namespace ftx
