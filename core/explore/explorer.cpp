#include "core/explore/explorer.h"

#include <cmath>

#include "core/eval/coinflip_exact.h"
#include "core/eval/kind_groups.h"
#include "core/eval/route_metrics.h"
#include "core/eval/synth_metrics.h"
#include "core/io/checkpoint.h"
#include "core/sample/sampler.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"
#include "core/train/trainer.h"
#include "kernels/base/philox.h"

namespace ftx {

Result<std::vector<int32_t>> encode_text(const ExplorerModel& m, const std::string& text, const std::string& what) {
  auto tokens = m.tokenizer->encode(text);
  if (!tokens) return make_error(what + " '" + text + "': " + tokens.error().message);
  return tokens;
}

bool labels_tokens(const ExplorerModel& m) { return m.tokenizer->type() != "chars"; }

namespace {

// Seed lanes of derive_seed for the explorer (distinct from the evaluator's 10..21).
enum : uint64_t { kLaneFreeze = 40, kLaneLatentSample = 41 };

// Rows of a generated group with the synthetic task's per-row validity and the group metrics.
GroupView to_group_view(const GroupResult& g, const Tokenizer& tokenizer, bool synthetic) {
  GroupView v;
  v.group = g.group, v.fixed = g.fixed;
  v.valid = g.valid, v.agreement = g.agreement, v.noise_agreement = g.noise_agreement, v.start = g.start;
  v.agreement_at = g.agreement_at;
  for (size_t i = 0; i < g.gens.size(); ++i) {
    GroupRow row;
    row.text = tokenizer.decode(g.gens[i].tokens);
    for (int32_t id : g.gens[i].tokens) row.tokens.emplace_back(tokenizer.token_bytes(id));
    row.codes = g.gens[i].codes;
    row.latent_seed = i < g.latent_seeds.size() ? g.latent_seeds[i] : 0;
    row.sample_seed = g.gens[i].sample_seed;
    row.valid = true;
    if (synthetic) {
      auto split = split_generation(row.text);
      SynthAnalysis a = split ? analyze_body(split->body, split->letter) : SynthAnalysis{};
      row.valid = a.valid, row.starts = a.starts;
    }
    v.rows.push_back(std::move(row));
  }
  return v;
}

Result<std::vector<int32_t>> check_prompt(const ExplorerModel& m, Result<std::vector<int32_t>> prompt) {
  if (!prompt) return prompt;
  if (prompt->empty()) return make_error("the prompt is empty");
  if (static_cast<int>(prompt->size()) >= m.seq_len)
    return make_error("the prompt has " + std::to_string(prompt->size()) + " tokens; this run's sequences have " +
                      std::to_string(m.seq_len));
  return prompt;
}

Result<std::vector<int32_t>> encode_prompt(const ExplorerModel& m, const std::string& prompt) {
  return check_prompt(m, encode_text(m, prompt, "prompt"));
}

SampleConfig sample_config(const ExplorerModel& m, size_t prompt_len, float temperature,
                           const std::string& router = "student") {
  SampleConfig sc;
  sc.temperature = temperature;
  sc.max_new_tokens = m.seq_len - static_cast<int>(prompt_len);
  if (m.model->config().routing.kind != Routing::None && !router.empty()) sc.router = router;
  return sc;
}

// Names the router of a routed run's groups (GroupView::router, route_path).
void name_router(const ExplorerModel& m, const SampleConfig& sc, std::vector<GroupView>& groups) {
  const RoutingConfig& ro = m.model->config().routing;
  if (ro.kind == Routing::None) return;
  for (GroupView& g : groups) g.router = sc.router, g.route_path = route_path_text(ro, sc.router == "student");
}

}  // namespace

Result<ExplorerModel> load_explorer_model(Backend& be, const DatasetFactory& datasets, const std::string& db_path,
                                          const std::string& run, std::optional<int> step) {
  auto store = RunStore::open_readonly(db_path);
  if (!store) return store.error();
  auto ref = find_run_checkpoint(*store, run, step);
  if (!ref) return ref.error();
  auto train = read_train_config(*store, run);
  if (!train) return train.error();
  auto data = datasets(*train);
  if (!data) return make_error("run '" + run + "': dataset '" + train->dataset + "' is not known to this build");
  auto ck = load_checkpoint(ref->dir, false);
  if (!ck) return ck.error();
  ExplorerModel m;
  m.run = run, m.step = ref->step, m.train = *train;
  m.seq_len = data->seq_len();
  m.tokenizer = ck->tokenizer ? ck->tokenizer : std::shared_ptr<const Tokenizer>(data->tokenizer().clone());
  if (m.tokenizer->fingerprint() != data->tokenizer().fingerprint())
    return make_error(ref->dir + ": the checkpoint's tokenizer is not dataset " + data->name() + "'s");
  if (auto fits = check_tokenizer_fits(*m.tokenizer, ck->config.vocab_size); !fits)
    return make_error(ref->dir + ": dataset " + data->name() + ": " + fits.error().message);
  if (m.seq_len - 1 > ck->config.max_seq_len)
    return make_error(ref->dir + ": the model's context " + std::to_string(ck->config.max_seq_len) +
                      " is shorter than the run's sequences");
  auto model = Model::create(be, ck->config);
  if (!model) return model.error();
  m.model = std::move(*model);
  m.model->load_params(ck->params.data());
  return m;
}

Result<std::vector<GroupView>> explore_figure4(ExplorerModel& m, const Figure4Request& req) {
  auto prompt = encode_prompt(m, req.prompt);
  if (!prompt) return prompt.error();
  if (req.fixed_groups < 0 || req.fixed_groups > 16 || req.group_size < 1 || req.group_size > 64)
    return make_error("groups: 0..16 fixed groups of 1..64 sequences");
  const SampleConfig sc = sample_config(m, prompt->size(), req.temperature, req.router);
  FTX_TRY(check_generation_request(m.model->config(), static_cast<int>(prompt->size()), sc, {}));
  auto groups =
      figure4_groups(*m.model, *prompt, req.group_size, req.fixed_groups, req.group_size, req.seed, sc, *m.tokenizer);
  std::vector<GroupView> out;
  for (const GroupResult& g : groups) out.push_back(to_group_view(g, *m.tokenizer, m.train.dataset == "synthetic"));
  name_router(m, sc, out);
  return out;
}

Result<std::vector<GroupView>> explore_freeze(ExplorerModel& m, const std::string& prompt_text,
                                              const std::vector<GroupView>& groups, uint64_t sample_seed,
                                              float temperature) {
  auto prompt = encode_prompt(m, prompt_text);
  if (!prompt) return prompt.error();
  const SampleConfig sc = sample_config(m, prompt->size(), temperature, groups.empty() ? "" : groups[0].router);
  std::vector<SequenceSpec> specs;
  for (const GroupView& g : groups)
    for (const GroupRow& r : g.rows)
      specs.push_back({LatentPolicy::fixed(r.codes), derive_seed(sample_seed, kLaneFreeze, specs.size())});
  FTX_TRY(check_generation_request(m.model->config(), static_cast<int>(prompt->size()), sc, specs));
  std::vector<Generation> gens = generate(*m.model, *prompt, specs, sc);
  std::vector<GroupView> out;
  size_t k = 0;
  for (const GroupView& g : groups) {
    GroupResult r;
    r.group = g.group, r.fixed = g.fixed;
    for (const GroupRow& row : g.rows) {
      r.gens.push_back(std::move(gens[k++]));
      r.latent_seeds.push_back(row.latent_seed);
    }
    score_group(r, *m.tokenizer);
    out.push_back(to_group_view(r, *m.tokenizer, m.train.dataset == "synthetic"));
  }
  name_router(m, sc, out);
  return out;
}

Result<LatentInspection> inspect_latent(ExplorerModel& m, const std::string& text, int prompt_len, uint64_t seed) {
  const ModelConfig& cfg = m.model->config();
  if (!cfg.is_free()) return make_error("run '" + m.run + "' has no latent (H = 0): pick a Free Transformer run");
  auto tokens = encode_text(m, text, "sequence");
  if (!tokens) return tokens.error();
  const int n = static_cast<int>(tokens->size());
  if (n < 2 || n > m.seq_len)
    return make_error("the sequence must have 2.." + std::to_string(m.seq_len) + " tokens, got " + std::to_string(n));
  if (prompt_len < 1 || prompt_len >= n) return make_error("bad prompt length");
  LatentInspection li;
  li.text = text, li.T = n - 1, li.H = cfg.latent_bits;
  li.kappa_nats = m.train.kappa_at(m.step);
  li.free_bits = m.train.free_bits;
  li.judges_kinds = m.judges_kinds;
  if (labels_tokens(m))
    for (int32_t id : *tokens) li.tokens.emplace_back(m.tokenizer->token_bytes(id));
  auto state = m.model->make_state(1, li.T);
  (void)m.model->forward(*state, tokens->data(), tokens->data() + 1, nullptr, seed, kStreamEval, float(li.kappa_nats),
                         m.train.free_bits_form());
  li.bit_probs.resize(size_t(li.T) * li.H), li.kl.resize(li.T), li.codes.resize(li.T);
  m.model->read_bit_probs(*state, li.bit_probs.data());
  m.model->read_kl(*state, li.kl.data());
  m.model->read_codes(*state, li.codes.data());
  li.sample_seed = derive_seed(seed, kLaneLatentSample, 0);
  auto regen = regenerate_edited(m, li, prompt_len, {});
  if (!regen) return regen.error();
  li.regenerated = std::move(regen->text);
  li.regenerated_tokens = std::move(regen->tokens);
  li.regenerated_kind = regen->kind;
  return li;
}

Result<LatentGeneration> regenerate_edited(ExplorerModel& m, const LatentInspection& base, int prompt_len,
                                           const std::vector<std::pair<int, int>>& flips) {
  auto prompt = encode_text(m, base.text, "sequence");
  if (prompt && prompt_len >= 0 && prompt_len < static_cast<int>(prompt->size())) prompt->resize(prompt_len);
  prompt = check_prompt(m, std::move(prompt));
  if (!prompt) return prompt.error();
  for (auto [t, h] : flips)
    if (t < 0 || t >= base.T || h < 0 || h >= base.H)
      return make_error("bit flip (" + std::to_string(t) + ", " + std::to_string(h) + ") is outside the latent");
  const SampleConfig sc = sample_config(m, prompt->size(), 1.0f);
  // The inspected sequence may be shorter than the generation: later positions draw from the prior.
  const int n_in = m.seq_len - 1;
  std::vector<uint32_t> codes = uniform_codes(base.sample_seed, n_in, base.H);
  std::copy(base.codes.begin(), base.codes.begin() + std::min<size_t>(base.codes.size(), n_in), codes.begin());
  std::vector<SequenceSpec> specs{{LatentPolicy::edited(std::move(codes), flips), base.sample_seed}};
  FTX_TRY(check_generation_request(m.model->config(), static_cast<int>(prompt->size()), sc, specs));
  const Generation gen = std::move(generate(*m.model, *prompt, specs, sc)[0]);
  LatentGeneration out;
  out.text = m.tokenizer->decode(gen.tokens);
  if (!base.tokens.empty())
    for (int32_t id : gen.tokens) out.tokens.emplace_back(m.tokenizer->token_bytes(id));
  if (base.judges_kinds) out.kind = classify_text_kind(generated_text(gen, prompt->size(), *m.tokenizer));
  return out;
}

CoinflipLesson coinflip_example(uint64_t seed, int T, double eps) {
  CoinflipLesson l;
  Philox4 head = philox_block(seed, kStreamEval + 50, 0);
  l.z = static_cast<int>(head.v[0] >> 31);
  const auto threshold = static_cast<uint64_t>(eps * 4294967296.0);
  for (int t = 0; t < T; ++t) {
    Philox4 r = philox_block(seed, kStreamEval + 51, static_cast<uint64_t>(t));
    l.bits.push_back(r.v[0] < threshold ? 1 - l.z : l.z);
  }
  return l;
}

namespace {

// P(next token = '1') at every position of the coin-flip sequence ">bits", one forward with the
// encoder's codes (a Free Transformer) or none (the baseline).
Result<std::vector<double>> coinflip_predictions(ExplorerModel& m, const std::vector<int>& bits, uint64_t seed) {
  if (m.train.dataset != "coinflip") return make_error("run '" + m.run + "' was not trained on the coin-flip task");
  const int T = static_cast<int>(bits.size());
  if (T + 1 > m.seq_len)
    return make_error("run '" + m.run + "' has sequences of " + std::to_string(m.seq_len - 1) + " bits");
  std::string text = ">";
  for (int b : bits) text += b ? '1' : '0';
  auto tok = encode_text(m, text, "coin-flip sequence");
  if (!tok) return tok.error();
  const int V = m.model->config().vocab_size;
  auto one_id = encode_text(m, "1", "coin-flip bit");
  if (!one_id) return one_id.error();
  const int one = (*one_id)[0];
  auto state = m.model->make_state(1, T);
  (void)m.model->forward(*state, tok->data(), tok->data() + 1, nullptr, seed, kStreamEval, 0.0f);
  std::vector<float> logits(size_t(T) * V);
  m.model->read_logits(*state, logits.data());
  std::vector<double> p(T);
  for (int t = 0; t < T; ++t) {
    const float* l = logits.data() + size_t(t) * V;
    double mx = l[0], sum = 0;
    for (int v = 1; v < V; ++v) mx = std::max<double>(mx, l[v]);
    for (int v = 0; v < V; ++v) sum += std::exp(l[v] - mx);
    p[t] = std::exp(l[one] - mx) / sum;
  }
  return p;
}

}  // namespace

Status coinflip_lesson(CoinflipLesson& lesson, double eps, ExplorerModel* baseline, ExplorerModel* free_model,
                       uint64_t seed) {
  const int T = static_cast<int>(lesson.bits.size());
  lesson.exact_posterior.assign(T, 0), lesson.exact_given_z.assign(T, coinflip_conditional_next(lesson.z, eps));
  std::vector<int> past;
  for (int t = 0; t < T; ++t) {
    lesson.exact_posterior[t] = coinflip_posterior_next(past, eps);
    past.push_back(lesson.bits[t]);
  }
  lesson.baseline.clear(), lesson.free_z.clear();
  if (baseline) {
    auto p = coinflip_predictions(*baseline, lesson.bits, seed);
    if (!p) return p.error();
    lesson.baseline = std::move(*p);
  }
  if (free_model) {
    auto p = coinflip_predictions(*free_model, lesson.bits, seed);
    if (!p) return p.error();
    lesson.free_z = std::move(*p);
  }
  return {};
}

std::vector<StartBin> fixed_groups_by_start(const std::vector<GroupView>& groups) {
  std::vector<AgreementAt> fixed;
  for (const GroupView& g : groups)
    if (g.fixed) fixed.insert(fixed.end(), g.agreement_at.begin(), g.agreement_at.end());
  std::vector<StartBin> bins = agreement_by_start(fixed);
  bins.push_back(agreement_from(fixed, kLateStart));
  return bins;
}

}  // namespace ftx
