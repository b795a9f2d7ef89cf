#include "core/eval/kind_groups.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/util/fs.h"

namespace ftx {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct KindsField {
  const char* key;
  Estimate KindsNumbers::*member;
};
constexpr KindsField kFields[] = {{"valid", &KindsNumbers::valid},
                                  {"agree_indep", &KindsNumbers::agree_indep},
                                  {"agree_fixed", &KindsNumbers::agree_fixed},
                                  {"valid_fixed", &KindsNumbers::valid_fixed}};

}  // namespace

std::string generated_text(const Generation& gen, size_t prompt_len, const Tokenizer& tokenizer) {
  const size_t from = std::min(prompt_len, gen.tokens.size());
  return tokenizer.decode(std::vector<int32_t>(gen.tokens.begin() + std::ptrdiff_t(from), gen.tokens.end()));
}

Result<KindsMeasurement> measure_kind_groups(Model& model, const Tokenizer& tokenizer, const KindsProtocol& p) {
  const ModelConfig& m = model.config();
  if (!m.is_free()) return make_error("kinds: the model has no latent Z (a plain decoder)");
  if (p.independent < 2 || p.fixed_groups < 1 || p.group_size < 2)
    return make_error("kinds: needs at least 2 independent sequences and one fixed group of at least 2");
  auto prompt = tokenizer.encode(p.prompt);
  if (!prompt) return make_error("prompt '" + p.prompt + "': " + prompt.error().message);
  if (prompt->empty()) return make_error("prompt: empty");
  SampleConfig sc;
  sc.max_new_tokens = p.new_tokens > 0 ? p.new_tokens : m.max_seq_len - static_cast<int>(prompt->size());
  if (sc.max_new_tokens <= 0 || int(prompt->size()) + sc.max_new_tokens > m.max_seq_len)
    return make_error("prompt '" + p.prompt + "': " + std::to_string(prompt->size()) + " tokens and " +
                      std::to_string(sc.max_new_tokens) + " new ones do not fit the model's " +
                      std::to_string(m.max_seq_len) + " positions");
  KindsMeasurement out;
  out.prompt_len = prompt->size();
  out.groups = figure4_groups(model, *prompt, p.independent, p.fixed_groups, p.group_size, p.seed, sc, tokenizer);
  std::vector<double> valid, valid_fixed, agree_indep, agree_fixed;
  KindsNumbers& k = out.numbers;
  for (const GroupResult& g : out.groups) {
    auto& kinds = out.kinds.emplace_back();
    for (const Generation& gen : g.gens) {
      kinds.push_back(classify_text_kind(generated_text(gen, out.prompt_len, tokenizer)));
      valid.push_back(kinds.back() ? 1.0 : 0.0);
      if (g.fixed) valid_fixed.push_back(valid.back());
    }
    const KindAgreement a = kind_agreement(kinds);
    if (g.fixed) {
      if (a.pairs > 0) agree_fixed.push_back(a.agreement());
      continue;
    }
    // Each valid sequence's share of the other valid ones of its kind: their mean is the pair agreement.
    std::array<int, kTextKinds> per{};
    for (const auto& kind : kinds)
      if (kind) ++per[size_t(*kind)];
    for (const auto& kind : kinds)
      if (kind && a.valid > 1) agree_indep.push_back(double(per[size_t(*kind)] - 1) / (a.valid - 1));
    for (int i = 0; i < kTextKinds; ++i)
      k.indep_share[size_t(i)] = a.valid > 0 ? double(per[size_t(i)]) / a.valid : kNaN;
  }
  k.valid = estimate(valid);
  k.valid_fixed = estimate(valid_fixed);
  k.agree_indep = estimate(agree_indep);
  k.agree_fixed = estimate(agree_fixed);
  return out;
}

std::vector<std::pair<std::string, double>> kinds_metrics(const KindsNumbers& k) {
  std::vector<std::pair<std::string, double>> out;
  for (const KindsField& f : kFields) append_estimate(&out, std::string("kinds/") + f.key, k.*f.member);
  for (TextKind kind : kAllTextKinds)
    out.emplace_back(std::string("kinds/share/") + text_kind_name(kind), k.indep_share[size_t(kind)]);
  if (!std::isnan(k.chance)) out.emplace_back("kinds/chance", k.chance);
  for (size_t t = 0; t < k.kl_at.size(); ++t) out.emplace_back("kinds/kl_at/" + std::to_string(t), k.kl_at[t]);
  return out;
}

KindsNumbers kinds_from_metrics(const std::vector<std::pair<std::string, double>>& metrics) {
  KindsNumbers k;
  for (const KindsField& f : kFields) k.*f.member = Estimate{kNaN, kNaN, 0};
  k.indep_share.fill(kNaN);
  for (const auto& [key, value] : metrics) {
    if (key == "kinds/chance") k.chance = value;
    for (TextKind kind : kAllTextKinds)
      if (key == std::string("kinds/share/") + text_kind_name(kind)) k.indep_share[size_t(kind)] = value;
    read_numbered(key, value, "kinds/kl_at/", 0, 1 << 20, &k.kl_at);
    for (const KindsField& f : kFields) read_estimate(key, value, std::string("kinds/") + f.key, &(k.*f.member));
  }
  return k;
}

std::optional<KindsNumbers> stored_kinds(const std::vector<MetricRow>& rows, int64_t step) {
  std::vector<std::pair<std::string, double>> at_step;
  for (const MetricRow& r : rows)
    if (r.step == step && r.key.rfind("kinds/", 0) == 0) at_step.emplace_back(r.key, r.value);
  if (at_step.empty()) return std::nullopt;
  return kinds_from_metrics(at_step);
}

std::string kinds_json_path(const std::string& token_file) { return token_file + ".kinds.json"; }

Result<double> read_kinds_chance(const std::string& kinds_json) {
  auto text = read_small_file(kinds_json, 1 << 20);
  if (!text) return text.error();
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  const auto it = j.is_object() ? j.find("chance_agreement") : j.end();
  if (j.is_discarded() || it == j.end() || !it->is_number() || *it < 0 || *it > 1)
    return make_error(kinds_json + ": no chance_agreement in [0, 1] (a file of ftx tokenize --kinds?)");
  return it->get<double>();
}

}  // namespace ftx
