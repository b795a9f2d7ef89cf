#include "app/figure4_print.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "app/common.h"
#include "core/eval/synth_metrics.h"
#include "datasets/synthetic.h"

namespace ftx::app {

// Target letters bold and coloured, noise dimmed, the rest plain.
std::string render(const std::string& text) {
  auto split = split_generation(text);
  if (!split) return text;
  std::string out = style(text.substr(0, 2), "1");
  for (char ch : split->body) {
    if (ch == split->letter)
      out += style(std::string(1, ch), "1;33");
    else if (ch == '!')
      out += style("!", "2");
    else
      out += ch;
  }
  return out;
}

std::string group_title(const GroupResult& g, int size) {
  char buf[160];
  if (!g.fixed)
    std::snprintf(buf, sizeof buf, "independent Z (a new Z for each of %d sequences)", size);
  else
    std::snprintf(buf, sizeof buf, "fixed Z, group %d (one Z for all %d sequences)", g.group, size);
  return buf;
}

void print_group(const GroupResult& g, const Tokenizer& tokenizer) {
  const int n = static_cast<int>(g.gens.size());
  std::printf("\n%s\n", style(group_title(g, n), "1;36").c_str());
  if (!std::isnan(g.valid))  // synthetic-task metrics; other tasks have none
    std::printf("  valid %.2f   agreement %.2f   noise agreement %.2f\n", g.valid, g.agreement, g.noise_agreement);
  for (const auto& gen : g.gens) {
    const std::string text = tokenizer.decode(gen.tokens);
    auto split = split_generation(text);
    std::string mark;
    if (split) {
      SynthAnalysis an = analyze_body(split->body, split->letter);
      mark = an.valid ? "" : "  " + style("invalid: " + an.reason, "31");
    }
    std::printf("  %s%s\n", render(text).c_str(), mark.c_str());
  }
}

namespace {
// Where the training data's targets start, as analyze_body sees them (uniform by construction).
std::vector<double> data_start_distribution() {
  SyntheticDataset data(1);
  std::vector<SynthAnalysis> bodies;
  for (int i = 0; i < 20000; ++i) {
    auto t = split_generation(SyntheticDataset::make_text(data.training_spec(i)));
    if (t) bodies.push_back(analyze_body(t->body, t->letter));
  }
  return start_distribution(bodies);
}
}  // namespace

void print_by_start(const std::vector<GroupResult>& groups, const Tokenizer& tokenizer) {
  std::vector<AgreementAt> fixed;
  std::vector<SynthAnalysis> independent;
  for (const GroupResult& g : groups) {
    if (std::isnan(g.valid)) return;  // not the synthetic task
    if (g.fixed) {
      fixed.insert(fixed.end(), g.agreement_at.begin(), g.agreement_at.end());
      continue;
    }
    for (const auto& gen : g.gens)
      if (auto t = split_generation(tokenizer.decode(gen.tokens)))
        independent.push_back(analyze_body(t->body, t->letter));
  }
  if (!fixed.empty()) {
    std::printf("\n%s\n", style("agreement within the fixed-Z groups by target start (per sequence)", "1;36").c_str());
    for (const StartBin& b : agreement_by_start(fixed))
      if (b.generations > 0)
        std::printf("  starts %2d-%2d   sequences %4d   agreement %.2f ± %.2f\n", b.lo, b.hi, b.generations,
                    b.agreement, b.stderr_);
    const StartBin late = agreement_from(fixed, kLateStart);
    if (late.generations > 0)
      std::printf("  starts >= %d   sequences %4d   agreement %.2f ± %.2f\n", kLateStart, late.generations,
                  late.agreement, late.stderr_);
  }
  const auto valid = std::count_if(independent.begin(), independent.end(), [](const auto& a) { return a.valid; });
  if (valid > 0)
    std::printf(
        "starts of the %ld valid of %zu independent-Z sequences: total variation %.2f from the training data's%s\n",
        static_cast<long>(valid), independent.size(),
        total_variation(start_distribution(independent), data_start_distribution()),
        independent.size() < 1000 ? " (under 1,000 sequences the histogram's own noise dominates)" : "");
}

}  // namespace ftx::app
