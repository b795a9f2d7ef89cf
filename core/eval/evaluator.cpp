#include "core/eval/evaluator.h"

#include <cmath>

#include "core/eval/route_metrics.h"
#include "core/eval/synth_metrics.h"
#include "kernels/base/philox.h"

namespace ftx {
namespace {

// Validation CE with the given codes (nullptr: sampled from the encoder) over held-out data.
struct ValStats {
  double ce = 0, kl = 0;
};

// `state` holds activations for (B, T) with B <= n_seq, T = seq_len - 1; batches of B sequences.
ValStats validation_pass(Model& model, ModelState& state, const BatchSource& data, int n_seq, bool prior, uint64_t seed,
                         float kappa) {
  const int S = data.seq_len(), T = S - 1, B = state.B;
  const int H = model.config().latent_bits;
  std::vector<int32_t> tok(size_t(B) * S), in(size_t(B) * T), tg(size_t(B) * T);
  std::vector<uint32_t> codes(size_t(B) * T);
  ValStats v;
  int batches = 0;
  for (int first = 0; first + B <= n_seq; first += B, ++batches) {
    data.validation(tok.data(), first, B);
    split_inputs_targets(tok.data(), B, S, in.data(), tg.data());
    if (prior)
      for (int b = 0; b < B; ++b) {
        auto c = uniform_codes(derive_seed(seed, 1, uint64_t(first + b)), T, H);
        std::copy(c.begin(), c.end(), codes.begin() + size_t(b) * T);
      }
    StepStats st = model.forward(state, in.data(), tg.data(), prior && H > 0 ? codes.data() : nullptr, seed,
                                 kStreamEval + 2 + uint64_t(first), kappa);
    v.ce += st.ce, v.kl += st.kl;
  }
  if (batches > 0) v.ce /= batches, v.kl /= batches;
  return v;
}

}  // namespace

void score_group(GroupResult& g, const Tokenizer& tokenizer) {
  std::vector<std::string> bodies;
  char letter = 0;
  for (const Generation& gen : g.gens) {
    auto split = split_generation(tokenizer.decode(gen.tokens));
    if (!split) continue;  // not a synthetic-task prompt: no group metrics
    letter = split->letter;
    bodies.push_back(split->body);
  }
  if (bodies.empty()) {
    g.valid = g.agreement = g.noise_agreement = std::nan("");
    return;
  }
  GroupMetrics m = group_metrics(bodies, letter);
  g.valid = m.valid, g.agreement = m.agreement, g.noise_agreement = m.noise_agreement, g.start = m.start;
  g.agreement_at = std::move(m.agreement_at);
}

std::vector<SynthAnalysis> analyze_generations(const GroupResult& g, const Tokenizer& tokenizer) {
  std::vector<SynthAnalysis> out;
  for (const Generation& gen : g.gens)
    if (auto t = split_generation(tokenizer.decode(gen.tokens))) out.push_back(analyze_body(t->body, t->letter));
  return out;
}

std::vector<SequenceSpec> figure4_specs(int independent, int fixed_groups, int group_size, uint64_t latent_seed,
                                        uint64_t sample_seed, int n_in, int H, std::vector<uint64_t>* latent_seeds,
                                        std::vector<int>* group_of) {
  std::vector<SequenceSpec> specs;
  auto add = [&](SequenceSpec s, uint64_t zs, int g) {
    specs.push_back(std::move(s));
    if (latent_seeds) latent_seeds->push_back(zs);
    if (group_of) group_of->push_back(g);
  };
  for (int i = 0; i < independent; ++i) {
    const uint64_t zs = derive_seed(latent_seed, 10, uint64_t(i));
    add({LatentPolicy::uniform(zs), derive_seed(sample_seed, 11, uint64_t(i))}, zs, 0);
  }
  for (int g = 1; g <= fixed_groups; ++g) {
    const uint64_t zs = derive_seed(latent_seed, 12, uint64_t(g));
    std::vector<uint32_t> z = H > 0 ? uniform_codes(zs, n_in, H) : std::vector<uint32_t>(n_in, 0);
    for (int i = 0; i < group_size; ++i)
      add({LatentPolicy::fixed(z), derive_seed(sample_seed, 13, uint64_t(g) * 100003 + uint64_t(i))}, zs, g);
  }
  return specs;
}

std::vector<GroupResult> figure4_groups(Model& model, const std::vector<int32_t>& prompt, int independent,
                                        int fixed_groups, int group_size, uint64_t seed, const SampleConfig& cfg,
                                        const Tokenizer& tokenizer) {
  const int H = model.config().latent_bits;
  const int n_in = static_cast<int>(prompt.size()) + cfg.max_new_tokens - 1;
  std::vector<uint64_t> latent_seeds;
  std::vector<int> group_of;
  const std::vector<SequenceSpec> specs =
      figure4_specs(independent, fixed_groups, group_size, seed, seed, n_in, H, &latent_seeds, &group_of);
  std::vector<GroupResult> groups(1 + fixed_groups);
  for (size_t i = 0; i < specs.size(); ++i) groups[size_t(group_of[i])].latent_seeds.push_back(latent_seeds[i]);
  std::vector<Generation> gens = generate(model, prompt, specs, cfg);
  size_t k = 0;
  for (int g = 0; g <= fixed_groups; ++g) {
    groups[g].group = g;
    groups[g].fixed = g > 0;
    const int n = g == 0 ? independent : group_size;
    for (int i = 0; i < n; ++i) groups[g].gens.push_back(std::move(gens[k++]));
    score_group(groups[g], tokenizer);
  }
  return groups;
}

Metrics evaluate(Model& model, const BatchSource& data, const EvalConfig& cfg, float kappa,
                 std::vector<GroupResult>* samples) {
  Metrics out;
  const bool free = model.config().is_free();
  auto state = model.make_state(std::min(cfg.val_sequences, cfg.batch), data.seq_len() - 1);  // one for both passes
  ValStats post = validation_pass(model, *state, data, cfg.val_sequences, false, cfg.seed, kappa);
  out.emplace_back("val/ce_posterior", post.ce);
  if (free) {
    ValStats prior = validation_pass(model, *state, data, cfg.val_sequences, true, cfg.seed, kappa);
    out.emplace_back("val/ce_prior", prior.ce);
    out.emplace_back("val/kl", post.kl);
    out.emplace_back("val/elbo", post.ce + post.kl);  // per-token bound on -log p (nats)
  } else {
    out.emplace_back("val/ce_prior", post.ce);  // no latent: both are the plain CE
  }
  // A routed model's evaluation measures its gates instead of generating (docs/subjective_depth.md),
  // on the synthetic task scored against the task's events; ftx generate runs either router.
  if (model.config().routing.kind != Routing::None) {
    const Metrics route = route_eval_metrics(model, data, std::min(cfg.val_sequences, cfg.batch), cfg.synthetic);
    out.insert(out.end(), route.begin(), route.end());
    return out;
  }
  if (!cfg.synthetic) return out;

  // Figure 4 as numbers: per prompt one independent group and one fixed-Z group.
  const Tokenizer& tokenizer = data.tokenizer();
  SampleConfig sc;
  sc.temperature = cfg.temperature;
  sc.max_new_tokens = data.seq_len() - 2;
  std::vector<double> valid, agree_fixed, agree_indep, noise_fixed, noise_indep;
  std::vector<AgreementAt> fixed_at;  // the fixed-Z generations, for the agreement of late targets
  for (int p = 0; p < cfg.prompts; ++p) {
    const char letter = static_cast<char>('A' + derive_seed(cfg.seed, 20, uint64_t(p)) % 26);
    auto prompt = tokenizer.encode(std::string{letter, '>'});
    FT_ASSERT(prompt.ok(), "synthetic-task metrics on dataset %s: %s", data.name().c_str(),
              prompt.error().message.c_str());
    auto groups = figure4_groups(model, *prompt, cfg.group_size, 1, cfg.group_size,
                                 derive_seed(cfg.seed, 21, uint64_t(p)), sc, tokenizer);
    if (p == 0 && samples) *samples = groups;
    for (const auto& g : groups) {
      valid.push_back(g.valid);
      (g.fixed ? agree_fixed : agree_indep).push_back(g.agreement);
      (g.fixed ? noise_fixed : noise_indep).push_back(g.noise_agreement);
      if (g.fixed) fixed_at.insert(fixed_at.end(), g.agreement_at.begin(), g.agreement_at.end());
    }
  }
  out.emplace_back("synth/valid", mean_defined(valid));
  out.emplace_back("synth/agree_fixed", mean_defined(agree_fixed));
  out.emplace_back("synth/agree_indep", mean_defined(agree_indep));
  out.emplace_back("synth/noise_agree_fixed", mean_defined(noise_fixed));
  out.emplace_back("synth/noise_agree_indep", mean_defined(noise_indep));
  out.emplace_back("synth/agree_fixed_late", agreement_from(fixed_at, kLateStart).agreement);
  return out;
}

}  // namespace ftx
