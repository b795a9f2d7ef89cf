#include "core/eval/figure4.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "kernels/base/philox.h"

namespace ftx {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kStateBudget = int64_t{2} << 30;  // bytes of activations kl_profile holds at once

// The per-sequence shares of a group (agreement_at) as plain values.
void append_shares(const GroupResult& g, std::vector<double>* out) {
  for (const AgreementAt& a : g.agreement_at) out->push_back(a.second);
}

}  // namespace

Result<KlProfile> kl_profile(Model& model, const BatchSource& data, int n_seq) {
  const int H = model.config().latent_bits;
  if (H == 0) return make_error("KL profile: the model has no latent (H = 0)");
  if (n_seq < 1) return make_error("KL profile: needs at least one sequence");
  const int S = data.seq_len(), T = S - 1;
  // Up to 64 sequences a forward, fewer where their activations would pass kStateBudget (a 135M
  // model's 64 x 255 tokens would take 24 GiB).
  int B = std::min(n_seq, 64);
  while (B > 1 && Model::state_bytes(model.config(), B, T) > kStateBudget) B /= 2;
  auto state = model.make_state(B, T);
  std::vector<int32_t> tok(size_t(B) * S), in(size_t(B) * T), tg(size_t(B) * T);
  std::vector<float> kl(size_t(B) * T), p(size_t(B) * T * H);
  const int W = 2 * kStartWindow + 1;
  std::vector<double> at(T, 0.0), around(W, 0.0);
  double elsewhere = 0, bits_start = 0, bits_else = 0;
  int64_t n_else = 0;
  KlProfile out;
  auto decided = [&](size_t row) {
    int k = 0;
    for (int h = 0; h < H; ++h) k += p[row * H + h] < 0.1f || p[row * H + h] > 0.9f;
    return k;
  };
  for (int first = 0; first < n_seq; first += B) {
    const int n = std::min(B, n_seq - first);
    data.validation(tok.data(), first, B);
    split_inputs_targets(tok.data(), B, S, in.data(), tg.data());
    (void)model.forward(*state, in.data(), tg.data(), nullptr, 0, kStreamEval, 0.0f);
    model.read_kl(*state, kl.data());
    model.read_bit_probs(*state, p.data());
    for (int b = 0; b < n; ++b) {
      const size_t row0 = size_t(b) * T;
      for (int t = 0; t < T; ++t) at[t] += kl[row0 + t];
      ++out.sequences;
      auto text = split_generation(
          data.tokenizer().decode(std::vector<int32_t>(tok.begin() + size_t(b) * S, tok.begin() + size_t(b + 1) * S)));
      if (!text) continue;
      const SynthAnalysis a = analyze_body(text->body, text->letter);
      if (!a.valid || a.starts.size() != 1) continue;
      ++out.with_start;
      const int anchor = a.starts[0] + 1;  // the input position whose next token is the first letter
      for (int t = 0; t < T; ++t) {
        const int d = t - anchor;
        if (d >= -kStartWindow && d <= kStartWindow) {
          around[d + kStartWindow] += kl[row0 + t];
        } else {
          elsewhere += kl[row0 + t], bits_else += decided(row0 + t), ++n_else;
        }
      }
      bits_start += decided(row0 + anchor);
    }
  }
  for (double& x : at) x /= out.sequences;
  out.at = std::move(at);
  if (out.with_start > 0) {
    for (double& x : around) x /= out.with_start;
    out.around_start = std::move(around);
    out.elsewhere = elsewhere / double(n_else);
    out.bits_at_start = bits_start / out.with_start;
    out.bits_elsewhere = bits_else / double(n_else);
  }
  return out;
}

Result<Figure4Numbers> measure_figure4(Model& model, const Tokenizer& tokenizer, int seq_len,
                                       const std::vector<double>& data_starts, const Figure4Protocol& p) {
  if (p.prompts.empty() || p.independent < 0 || p.fixed_groups < 0 || p.group_size < 2 ||
      p.independent + p.fixed_groups == 0)
    return make_error("Figure 4 protocol: needs prompts, and sequences (groups of at least 2)");
  std::vector<double> valid, agree_fixed, noise_fixed, agree_indep, noise_indep;
  std::vector<AgreementAt> fixed_at;
  std::vector<SynthAnalysis> independent;
  for (size_t i = 0; i < p.prompts.size(); ++i) {
    const std::string& text = p.prompts[i];
    if (text.size() != 2 || text[1] != '>' || text[0] < 'A' || text[0] > 'Z')
      return make_error("prompt '" + text + "': not a synthetic-task prompt (a capital letter, then '>')");
    auto prompt = tokenizer.encode(text);
    if (!prompt) return make_error("prompt '" + text + "': " + prompt.error().message);
    SampleConfig sc;
    sc.max_new_tokens = seq_len - static_cast<int>(prompt->size());
    auto groups = figure4_groups(model, *prompt, p.independent, p.fixed_groups, p.group_size, p.seed + 1000003 * i, sc,
                                 tokenizer);
    for (const GroupResult& g : groups) {
      if (g.gens.empty()) continue;
      const long n = static_cast<long>(g.gens.size()), n_valid = std::lround(g.valid * n);  // valid = n_valid / n
      for (long k = 0; k < n; ++k) valid.push_back(k < n_valid ? 1.0 : 0.0);
      if (g.fixed) {
        agree_fixed.push_back(g.agreement), noise_fixed.push_back(g.noise_agreement);
        fixed_at.insert(fixed_at.end(), g.agreement_at.begin(), g.agreement_at.end());
        continue;
      }
      append_shares(g, &agree_indep);
      noise_indep.push_back(g.noise_agreement);
      const std::vector<SynthAnalysis> bodies = analyze_generations(g, tokenizer);
      independent.insert(independent.end(), bodies.begin(), bodies.end());
    }
  }
  Figure4Numbers f;
  f.valid = estimate(valid);
  f.agree_fixed = estimate(agree_fixed);
  f.noise_fixed = estimate(noise_fixed);
  f.agree_indep = estimate(agree_indep);
  f.noise_indep = estimate(noise_indep);
  f.noise_indep.se = 0;  // one value per prompt, each over all pairs: no spread to speak of
  const StartBin late = agreement_from(fixed_at, kLateStart);
  f.agree_late = Estimate{late.agreement, late.stderr_, late.generations};
  f.by_start = agreement_by_start(fixed_at);
  const bool any_valid = std::any_of(independent.begin(), independent.end(), [](const auto& a) { return a.valid; });
  f.start_tv = any_valid ? total_variation(start_distribution(independent), data_starts) : kNaN;
  return f;
}

namespace {

struct Fig4Field {
  const char* key;
  Estimate Figure4Numbers::*member;
};
constexpr Fig4Field kFields[] = {{"valid", &Figure4Numbers::valid},
                                 {"agree_fixed", &Figure4Numbers::agree_fixed},
                                 {"noise_fixed", &Figure4Numbers::noise_fixed},
                                 {"agree_indep", &Figure4Numbers::agree_indep},
                                 {"noise_indep", &Figure4Numbers::noise_indep},
                                 {"agree_late", &Figure4Numbers::agree_late}};

}  // namespace

std::vector<std::pair<std::string, double>> figure4_metrics(const Figure4Numbers& f) {
  std::vector<std::pair<std::string, double>> out;
  for (const Fig4Field& k : kFields) append_estimate(&out, std::string("fig4/") + k.key, f.*k.member);
  out.emplace_back("fig4/start_tv", f.start_tv);
  for (size_t t = 0; t < f.kl.at.size(); ++t) out.emplace_back("fig4/kl_at/" + std::to_string(t), f.kl.at[t]);
  for (size_t i = 0; i < f.kl.around_start.size(); ++i)
    out.emplace_back("fig4/kl_start/" + std::to_string(int(i) - kStartWindow), f.kl.around_start[i]);
  if (!f.kl.around_start.empty()) {
    out.emplace_back("fig4/kl_elsewhere", f.kl.elsewhere);
    out.emplace_back("fig4/bits_start", f.kl.bits_at_start);
    out.emplace_back("fig4/bits_elsewhere", f.kl.bits_elsewhere);
  }
  return out;
}

Figure4Numbers figure4_from_metrics(const std::vector<std::pair<std::string, double>>& metrics) {
  Figure4Numbers f;
  for (const Fig4Field& k : kFields) f.*k.member = Estimate{kNaN, kNaN, 0};
  f.start_tv = kNaN;
  for (const auto& [key, value] : metrics) {
    if (key == "fig4/start_tv") f.start_tv = value;
    if (key == "fig4/kl_elsewhere") f.kl.elsewhere = value;
    if (key == "fig4/bits_start") f.kl.bits_at_start = value;
    if (key == "fig4/bits_elsewhere") f.kl.bits_elsewhere = value;
    read_numbered(key, value, "fig4/kl_at/", 0, 4096, &f.kl.at);
    read_numbered(key, value, "fig4/kl_start/", kStartWindow, 4096, &f.kl.around_start);
    for (const Fig4Field& k : kFields) read_estimate(key, value, std::string("fig4/") + k.key, &(f.*k.member));
  }
  return f;
}

std::optional<Figure4Numbers> stored_figure4(const std::vector<MetricRow>& rows, int64_t step) {
  std::vector<std::pair<std::string, double>> at_step;
  for (const MetricRow& r : rows)
    if (r.step == step && r.key.rfind("fig4/", 0) == 0) at_step.emplace_back(r.key, r.value);
  if (at_step.empty()) return std::nullopt;
  return figure4_from_metrics(at_step);
}

}  // namespace ftx
