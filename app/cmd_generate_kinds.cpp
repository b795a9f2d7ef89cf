// ftx generate --kinds: the text-kinds measurement (core/eval/kind_groups.h, docs/text_latent.md)
// of a Free Transformer trained on the text-kinds corpus, a run of the store (--run) or a model
// file (--checkpoint). Prints each group's generations with their kinds, each group's validity and
// kind agreement, the independent group against the chance level, and where along the sequence
// the encoder spends KL (on the corpus's held-out windows, when the token file is at hand). For a
// run, the first measurement of a checkpoint is stored as its "kinds/..." metrics at that step
// (what export ships and the studio shows); later ones are printed only. --json: one object per
// sequence with its "kind", then a summary.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/common.h"
#include "core/eval/figure4.h"
#include "core/eval/kind_groups.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"
#include "datasets/registry.h"
#include "datasets/text.h"

namespace ftx::app {
namespace {

// The token file a run was trained on, with its windows ("" when the run is not on text).
struct RunData {
  std::string path;
  TextWindows windows = TextWindows::Packed;
  int seq_len = 0;
};
Result<RunData> run_text_data(const std::string& db, const std::string& run) {
  auto store = RunStore::open_readonly(db);
  if (!store) return store.error();
  auto t = read_train_config(*store, run);
  if (!t) return t.error();
  if (t->dataset != "text") return make_error("run '" + run + "' was not trained on text (dataset " + t->dataset + ")");
  RunData d;
  auto path = read_dataset_text_option(t->dataset_options, TextDataset::data_option());
  auto windows = read_dataset_text_option(t->dataset_options, TextDataset::windows_option());
  auto len = read_dataset_option(t->dataset_options, TextDataset::seq_len_option());
  if (!path || !windows || !len) return make_error(db + ": run '" + run + "': its text options do not read back");
  auto w = TextDataset::parse_windows(*windows);
  if (!w) return w.error();
  d.path = *path, d.windows = *w, d.seq_len = static_cast<int>(*len);
  return d;
}

void print_numbers(const KindsNumbers& k) {
  auto pm = [](const Estimate& e) {
    char b[64];
    std::snprintf(b, sizeof b, "%.2f +- %.2f (n %d)", e.mean, e.se, e.n);
    return std::string(b);
  };
  std::printf("\n  valid (a kind named)        %s\n", pm(k.valid).c_str());
  std::printf(
      "  independent Z: agreement    %s   chance %s\n", pm(k.agree_indep).c_str(),
      std::isnan(k.chance) ? "unknown (--kinds-data DATA.tok)" : (std::to_string(k.chance).substr(0, 4)).c_str());
  std::printf("  fixed Z: agreement          %s   (groups; valid %.2f)\n", pm(k.agree_fixed).c_str(),
              k.valid_fixed.mean);
  std::printf("  independent Z's kinds      ");
  for (TextKind kind : kAllTextKinds) std::printf(" %s %.2f", text_kind_name(kind), k.indep_share[size_t(kind)]);
  std::printf("\n");
  if (k.kl_at.empty()) return;
  double total = 0;
  for (double x : k.kl_at) total += x;
  std::printf("  KL along the sequence (held-out windows, nats per token; share of the sequence's KL):\n   ");
  for (size_t lo = 0; lo < k.kl_at.size(); lo = lo == 0 ? 1 : lo * 2) {
    const size_t hi = std::min(lo == 0 ? size_t{0} : lo * 2 - 1, k.kl_at.size() - 1);
    double part = 0;
    for (size_t t = lo; t <= hi; ++t) part += k.kl_at[t];
    std::printf(" [%zu-%zu] %.3f %.0f%%", lo, hi, part / double(hi - lo + 1), total > 0 ? 100 * part / total : 0.0);
  }
  std::printf("\n");
}

}  // namespace

int run_generate_kinds(const GenerateArgs& a) {
  const bool file = !a.source.checkpoint.empty() || a.source.random_init;
  if (file && !a.run.empty()) return fail("--run and --checkpoint: give one");
  if (!file && a.run.empty()) return fail("--run or --checkpoint: one is required");
  if (a.prompt.empty()) return fail("--kinds: give a neutral prompt, e.g. --prompt \"<|endoftext|>\"");
  if (a.chat) return fail("--kinds and --chat: the kinds are judged from a neutral prompt, not a chat turn");
  KindsProtocol p;
  p.prompt = a.prompt, p.seed = a.seed;
  p.independent = a.independent.value_or(p.independent), p.fixed_groups = a.fixed_groups.value_or(p.fixed_groups);
  p.group_size = a.group_size.value_or(p.group_size);
  if (auto s = check_groups(p.independent, p.fixed_groups, p.group_size); !s) return fail(s.error());

  // The model, and the corpus (for the chance level and the KL profile) when known.
  auto lm =
      file ? load_model(a.source, a.device, a.precision) : load_run_model(a.db, a.run, a.step, a.device, a.precision);
  if (!lm) return fail(lm.error());
  if (!lm->tokenizer) return fail(lm->dir + ": has no tokenizer: --prompt cannot be encoded");
  RunData data;
  if (!file) {
    auto d = run_text_data(a.db, a.run);
    if (!d) return fail(d.error());
    data = *d;
    p.new_tokens =
        data.seq_len - static_cast<int>(lm->tokenizer->encode(a.prompt).value_or(std::vector<int32_t>{}).size());
  }
  if (!a.kinds_data.empty()) data.path = a.kinds_data, data.windows = TextWindows::Document;
  auto m = measure_kind_groups(*lm->model, *lm->tokenizer, p);
  if (!m) return fail(m.error());
  KindsNumbers& k = m->numbers;
  std::error_code ec;
  const bool have_data = !data.path.empty() && std::filesystem::exists(data.path, ec);
  if (!a.kinds_data.empty() && !have_data) return fail(a.kinds_data + ": no such file");
  if (have_data) {
    auto chance = read_kinds_chance(kinds_json_path(data.path));
    if (!chance) return fail(chance.error());
    k.chance = *chance;
    auto tf = TokenFile::open(data.path);
    if (!tf) return fail(tf.error());
    if ((*tf)->fingerprint() != lm->tokenizer->fingerprint())
      return fail(data.path + ": its tokenizer is not the model's");
    const int seq_len = data.seq_len > 0 ? data.seq_len : std::min(lm->model->config().max_seq_len, 256);
    TextDataset ds(std::move(*tf), seq_len, 1, data.windows);
    auto kl = kl_profile(*lm->model, ds, 64);
    if (!kl) return fail(kl.error());
    k.kl_at = kl->at;
  } else if (!file) {
    // An imported run: its corpus is elsewhere; the chance level it was measured with is stored.
    if (auto store = RunStore::open_readonly(a.db); store)
      if (auto info = store->find_run(a.run); info)
        if (auto rows = store->metrics(info->id, "kinds/chance"); rows && !rows->empty()) k.chance = rows->back().value;
  }

  const Tokenizer& tokenizer = *lm->tokenizer;
  if (a.json) {
    for (size_t g = 0; g < m->groups.size(); ++g)
      for (size_t i = 0; i < m->groups[g].gens.size(); ++i) {
        const GroupResult& gr = m->groups[g];
        const auto& kind = m->kinds[g][i];
        nlohmann::json j = {{"group", gr.group},
                            {"policy", gr.fixed ? "fixed" : "independent"},
                            {"seed", gr.latent_seeds[i]},
                            {"sample_seed", gr.gens[i].sample_seed},
                            {"text", generated_text(gr.gens[i], m->prompt_len, tokenizer)},
                            {"kind", kind ? nlohmann::json(text_kind_name(*kind)) : nlohmann::json(nullptr)}};
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      }
    nlohmann::json summary = nlohmann::json::object();
    for (const auto& [key, value] : kinds_metrics(k))
      if (key.rfind("kinds/kl_at/", 0) != 0)
        summary[key.substr(6)] = std::isnan(value) ? nlohmann::json(nullptr) : nlohmann::json(value);
    if (!k.kl_at.empty()) summary["kl_at"] = k.kl_at;
    std::printf("%s\n", nlohmann::json{{"kinds", summary}}.dump().c_str());
  } else {
    std::printf("%s (H=%d), prompt \"%s\", seed %llu: kinds of text (core/eval/text_kind.h; '-' unknown)\n",
                file ? lm->dir.c_str() : ("run '" + a.run + "', step " + std::to_string(lm->step)).c_str(),
                lm->model->config().latent_bits, a.prompt.c_str(), static_cast<unsigned long long>(a.seed));
    for (size_t g = 0; g < m->groups.size(); ++g) {
      const GroupResult& gr = m->groups[g];
      std::string line;
      for (const auto& kind : m->kinds[g]) line += std::string(" ") + (kind ? text_kind_name(*kind) : "-");
      const KindAgreement ka = kind_agreement(m->kinds[g]);
      std::printf("  %-16s valid %.2f  agreement %5.2f |%s\n",
                  gr.fixed ? ("fixed group " + std::to_string(gr.group)).c_str() : "independent", ka.validity(),
                  ka.agreement(), line.c_str());
    }
    print_numbers(k);
  }
  if (!file) {  // the first measurement of a checkpoint becomes the run's metrics at its step
    auto store = RunStore::open(a.db);
    if (!store) return fail(store.error());
    auto info = store->find_run(a.run);
    if (!info) return fail(info.error());
    auto rows = store->metrics(info->id, "kinds/valid");
    if (!rows) return fail(rows.error());
    if (stored_kinds(*rows, lm->step)) return 0;
    for (const auto& [key, value] : kinds_metrics(k)) store->add_metric(info->id, lm->step, key, value);
    if (auto s = store->flush(); !s) return fail(s.error());
  }
  return 0;
}

}  // namespace ftx::app
