#include "core/eval/figure4.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ftx {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The per-sequence shares of a group (agreement_at) as plain values.
void append_shares(const GroupResult& g, std::vector<double>* out) {
  for (const AgreementAt& a : g.agreement_at) out->push_back(a.second);
}

}  // namespace

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
  for (const Fig4Field& k : kFields) {
    const Estimate& e = f.*k.member;
    out.emplace_back(std::string("fig4/") + k.key, e.mean);
    out.emplace_back(std::string("fig4/") + k.key + "_se", e.se);
    out.emplace_back(std::string("fig4/") + k.key + "_n", e.n);
  }
  out.emplace_back("fig4/start_tv", f.start_tv);
  return out;
}

Figure4Numbers figure4_from_metrics(const std::vector<std::pair<std::string, double>>& metrics) {
  Figure4Numbers f;
  for (const Fig4Field& k : kFields) f.*k.member = Estimate{kNaN, kNaN, 0};
  f.start_tv = kNaN;
  for (const auto& [key, value] : metrics) {
    if (key == "fig4/start_tv") f.start_tv = value;
    for (const Fig4Field& k : kFields) {
      const std::string base = std::string("fig4/") + k.key;
      Estimate& e = f.*k.member;
      if (key == base) e.mean = value;
      if (key == base + "_se") e.se = value;
      if (key == base + "_n") e.n = static_cast<int>(value);
    }
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
