#include "app/figure4_print.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "app/common.h"
#include "core/eval/synth_metrics.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"
#include "core/train/trainer.h"
#include "datasets/registry.h"
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

void print_by_start(const std::vector<GroupResult>& groups, const Tokenizer& tokenizer) {
  std::vector<AgreementAt> fixed;
  std::vector<SynthAnalysis> independent;
  for (const GroupResult& g : groups) {
    if (std::isnan(g.valid)) return;  // not the synthetic task
    if (g.fixed) {
      fixed.insert(fixed.end(), g.agreement_at.begin(), g.agreement_at.end());
      continue;
    }
    const std::vector<SynthAnalysis> bodies = analyze_generations(g, tokenizer);
    independent.insert(independent.end(), bodies.begin(), bodies.end());
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
        total_variation(start_distribution(independent), SyntheticDataset::start_distribution()),
        independent.size() < 1000 ? " (under 1,000 sequences the histogram's own noise dominates)" : "");
}

namespace {

double last_value(RunStore& store, int64_t run, const char* key) {
  auto rows = store.metrics(run, key);
  return rows && !rows->empty() ? rows->back().value : std::nan("");
}

}  // namespace

Result<Figure4Row> figure4_row(const std::string& db, const std::string& run, const Figure4Protocol& protocol) {
  auto store = RunStore::open(db);
  if (!store) return store.error();
  auto info = store->find_run(run);
  if (!info) return info.error();
  auto train = read_train_config(*store, run);
  if (!train) return train.error();
  if (train->dataset != "synthetic")
    return make_error("run '" + run + "': trained on '" + train->dataset + "', Figure 4 needs the synthetic task");
  auto ref = find_run_checkpoint(*store, run, std::nullopt);
  if (!ref) return ref.error();
  Figure4Row row{run,
                 nats_to_bits(train->kappa_nats),
                 ref->step,
                 last_value(*store, info->id, "val/ce_prior"),
                 last_value(*store, info->id, "val/kl"),
                 {}};
  auto rows = store->metrics(info->id, "");
  if (!rows) return rows.error();
  const std::optional<Figure4Numbers> stored = stored_figure4(*rows, ref->step);
  if (stored && !stored->kl.at.empty()) {
    row.numbers = *stored;
    return row;
  }
  // Measured now; a run measured before the KL profile existed keeps its numbers and gets the profile.
  auto lm = load_run_model(db, run, ref->step, "cpu", "");
  if (!lm) return lm.error();
  if (!lm->tokenizer) return make_error(lm->dir + ": config.json has no tokenizer (Figure 4 needs its text)");
  Figure4Numbers f;
  if (stored) {
    f = *stored;
  } else {
    auto measured = measure_figure4(*lm->model, *lm->tokenizer, SyntheticDataset::kSeqLen,
                                    SyntheticDataset::start_distribution(), protocol);
    if (!measured) return make_error("run '" + run + "': " + measured.error().message);
    f = std::move(*measured);
  }
  auto data = open_dataset(*train);
  if (!data) return make_error("run '" + run + "': " + data.error().message);
  auto kl = kl_profile(*lm->model, **data, kFigure4KlSequences);
  if (!kl) return make_error("run '" + run + "': " + kl.error().message);
  f.kl = std::move(*kl);
  row.numbers = f;
  for (const auto& [key, value] : figure4_metrics(f))
    if (!stored || key.rfind("fig4/kl", 0) == 0 || key.rfind("fig4/bits", 0) == 0)
      store->add_metric(info->id, ref->step, key, value);
  FTX_TRY(store->flush());
  return row;
}

void print_figure4_table(const std::vector<Figure4Row>& rows) {
  auto value = [](double v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.2f", v);
    return std::isnan(v) ? std::string("-") : std::string(buf);
  };
  auto cell = [&](const Estimate& e) { return std::isnan(e.mean) ? "-" : value(e.mean) + "±" + value(e.se); };
  // Right-aligned in `width` characters (printf counts the two bytes of '±' as two).
  auto right = [](const std::string& text, size_t width) {
    size_t chars = 0;
    for (unsigned char c : text) chars += (c & 0xC0) != 0x80;
    return std::string(width > chars ? width - chars : 0, ' ') + text;
  };
  std::printf("%-16s %-9s %6s %7s %7s %10s %10s %10s %10s %10s %11s %6s\n", "run", "kappa", "step", "CE", "KL", "valid",
              "agree fix", "agree ind", "late>=32", "noise fix", "noise ind", "TV");
  for (const Figure4Row& r : rows) {
    const Figure4Numbers& f = r.numbers;
    std::printf("%-16s %-9s %6d %7.3f %7.3f %s %s %s %s %s %11s %6s\n", r.run.c_str(),
                kappa_bits_text(r.kappa_bits).c_str(), r.step, r.ce_prior, r.kl, right(cell(f.valid), 10).c_str(),
                right(cell(f.agree_fixed), 10).c_str(), right(cell(f.agree_indep), 10).c_str(),
                right(cell(f.agree_late), 10).c_str(), right(cell(f.noise_fixed), 10).c_str(),
                value(f.noise_indep.mean).c_str(), value(f.start_tv).c_str());
  }
  std::printf(
      "CE: validation cross-entropy with Z from the prior (nats/token); KL: nats/token. The rest: Z from the\n"
      "prior, temperature 1; agreement of fixed-Z groups and of independent sequences, fixed-Z sequences whose\n"
      "target starts at %d or later, noise agreement, and TV of the independent targets' starts from the data's\n"
      "(docs/figure4.md). ± one standard error.\n",
      kLateStart);
  print_kl_profiles(rows);
}

void print_kl_profiles(const std::vector<Figure4Row>& rows) {
  bool any = false;
  for (const Figure4Row& r : rows) any = any || !r.numbers.kl.at.empty();
  if (!any) return;
  // Body positions in bins of 8 (input positions s + 1), the position code's cost beside them.
  const int width = 8, bins = (kSynthBodyLen + width - 1) / width;
  auto bin_mean = [&](const std::vector<double>& at, int k, bool budget) {
    double s = 0;
    int n = 0;
    for (int body = k * width; body < std::min((k + 1) * width, kSynthBodyLen); ++body, ++n)
      s += budget ? start_code_cost(body + 1) : (size_t(body + 1) < at.size() ? at[size_t(body + 1)] : std::nan(""));
    return s / n;
  };
  std::printf("\nKL per position (nats, held-out data, Z from the encoder), by body position:\n%-16s", "run");
  for (int k = 0; k < bins; ++k) std::printf(" %2d-%-3d", k * width, std::min((k + 1) * width, kSynthBodyLen) - 1);
  std::printf(" | at start-1/0/+1    else | bits start/else\n");
  std::printf("%-16s", "position code");
  for (int k = 0; k < bins; ++k) std::printf(" %6.3f", bin_mean({}, k, true));
  std::printf(" | P(not started) h(1/(57-s))\n");
  for (const Figure4Row& r : rows) {
    const KlProfile& p = r.numbers.kl;
    if (p.at.empty()) continue;
    std::printf("%-16s", r.run.c_str());
    for (int k = 0; k < bins; ++k) std::printf(" %6.3f", bin_mean(p.at, k, false));
    if (p.around_start.size() == size_t(2 * kStartWindow + 1))
      std::printf(" | %5.3f %5.3f %5.3f %6.3f | %4.1f / %4.1f", p.around_start[kStartWindow - 1],
                  p.around_start[kStartWindow], p.around_start[kStartWindow + 1], p.elsewhere, p.bits_at_start,
                  p.bits_elsewhere);
    std::printf("\n");
  }
  std::printf(
      "Position code: what telling at each body position whether the target starts there costs on average\n"
      "(the batch-mean budget it needs). At start: KL at the input whose next token is the target's first\n"
      "letter, one before and after; bits: latent bits decided (p < 0.1 or > 0.9) there and elsewhere.\n");
}

}  // namespace ftx::app
