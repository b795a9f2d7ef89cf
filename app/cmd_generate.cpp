// ftx generate: the paper's Figure 4 in the terminal. One prompt; an independent group (a new Z
// per sequence) and fixed-Z groups (one Z reused by every sequence of the group), with the
// group metrics of docs/figure4.md. --json prints one object per generated sequence.
#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/common.h"
#include "app/figure4_print.h"
#include "core/eval/evaluator.h"
#include "core/eval/synth_metrics.h"
#include "core/eval/text_kind.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"
#include "datasets/registry.h"

namespace ftx::app {
namespace {

constexpr int64_t kMaxSequences = 4096;  // one call's batch of sequences through the KV cache

// The generated part of a sequence (after the prompt) as text.
std::string generated_text(const Generation& gen, size_t prompt_len, const Tokenizer& tokenizer) {
  const size_t from = std::min(prompt_len, gen.tokens.size());
  return tokenizer.decode(std::vector<int32_t>(gen.tokens.begin() + std::ptrdiff_t(from), gen.tokens.end()));
}

std::optional<TextKind> kind_of(const Generation& gen, size_t prompt_len, const Tokenizer& tokenizer) {
  return classify_text_kind(generated_text(gen, prompt_len, tokenizer));
}

nlohmann::json to_json(const GroupResult& g, size_t i, const Tokenizer& tokenizer, size_t prompt_len, bool kinds) {
  const Generation& gen = g.gens[i];
  nlohmann::json j = {{"group", g.group},
                      {"policy", g.fixed ? "fixed" : "independent"},
                      {"seed", g.latent_seeds[i]},
                      {"sample_seed", gen.sample_seed},
                      {"text", tokenizer.decode(gen.tokens)},
                      {"codes", gen.codes}};
  if (kinds) {
    const auto k = kind_of(gen, prompt_len, tokenizer);
    j["kind"] = k ? nlohmann::json(text_kind_name(*k)) : nlohmann::json(nullptr);
  }
  return j;
}

// --kinds: each group's kinds, validity and kind agreement, then the fixed groups' mean against
// the independent group's (docs/text_latent.md).
void print_kinds(const std::vector<GroupResult>& groups, size_t prompt_len, const Tokenizer& tokenizer) {
  std::printf("\nkinds of text (core/eval/text_kind.h; '-' unknown):\n");
  double fixed_agree = 0.0, fixed_valid = 0.0;
  int fixed_n = 0;
  for (const GroupResult& g : groups) {
    if (g.gens.empty()) continue;
    std::vector<std::optional<TextKind>> kinds;
    std::string line;
    for (const Generation& gen : g.gens) {
      kinds.push_back(kind_of(gen, prompt_len, tokenizer));
      line += std::string(" ") + (kinds.back() ? text_kind_name(*kinds.back()) : "-");
    }
    const KindAgreement k = kind_agreement(kinds);
    std::printf("  %-18s valid %.2f  agreement %5.2f |%s\n",
                g.fixed ? ("fixed group " + std::to_string(g.group)).c_str() : "independent", k.validity(),
                k.agreement(), line.c_str());
    if (g.fixed && k.pairs > 0) fixed_agree += k.agreement(), fixed_valid += k.validity(), ++fixed_n;
  }
  if (fixed_n > 0)
    std::printf("  fixed groups' mean: agreement %.2f, valid %.2f (%d groups)\n", fixed_agree / fixed_n,
                fixed_valid / fixed_n, fixed_n);
}

void record(const GenerateArgs& a, int step, const std::vector<GroupResult>& groups, const Tokenizer& tokenizer) {
  auto store = RunStore::open(a.db);
  if (!store) return;
  auto info = store->find_run(a.run);
  if (!info) return;
  for (const auto& g : groups)
    for (size_t i = 0; i < g.gens.size(); ++i) {
      GenerationRow row;
      row.run_id = info->id, row.step = step, row.prompt = a.prompt, row.group_id = g.group;
      row.policy = g.fixed ? "fixed" : "independent";
      row.seed = g.latent_seeds[i];
      row.codes = g.gens[i].codes;
      row.text = tokenizer.decode(g.gens[i].tokens);
      if (auto s = store->add_generation(row); !s)
        std::fprintf(stderr, "ftx: warning: generations not recorded: %s\n", s.error().message.c_str());
    }
}

// The sequence length the run was trained on, from its configuration in the store.
Result<int> training_seq_len(const std::string& db, const std::string& run) {
  auto store = RunStore::open_readonly(db);
  if (!store) return store.error();
  auto t = read_train_config(*store, run);
  if (!t) return t.error();
  auto data = open_dataset(*t);
  if (!data) return make_error(db + ": run '" + run + "': " + data.error().message);
  return (*data)->seq_len();
}

}  // namespace

void add_generate_options(CLI::App& app, GenerateArgs& a) {
  auto* c = app.add_subcommand("generate", "Figure 4: independent vs fixed-Z groups from one prompt");
  add_db_option(c, a.db);
  c->add_option("--run", a.run, "Run name (a trained run of the store), or give --checkpoint");
  c->add_option("--step", a.step, "Checkpoint step (default: the latest)");
  c->add_option("--prompt", a.prompt, "Prompt, e.g. \"K>\" for the synthetic task, free text for a model file")
      ->required();
  add_model_source_options(c, a.source, true);
  c->add_flag("--chat", a.chat, "Wrap the prompt in the model's chat format (ChatML or Llama 3)");
  c->add_option("--stop", a.stop, "Stop a sequence at this text (repeatable)");
  c->add_option("--independent", a.independent,
                "Sequences in the independent group (default 8 for a run, 4 for a Free Transformer file)");
  c->add_option("--fixed-groups", a.fixed_groups, "Number of fixed-Z groups (default 3 for a run, 2 for a file)");
  c->add_option("--group-size", a.group_size, "Sequences per fixed-Z group (default 8 for a run, 4 for a file)");
  c->add_option("--seed", a.seed, "Seed of the latents and the samples")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  add_field_options(c, a.sample);
  add_device_options(c, a.device, a.precision);
  c->add_flag("--json", a.json, "One JSON object per generated sequence");
  c->add_flag("--kinds", a.kinds,
              "A run on text: judge each sequence's kind (python, c, perl, prose) and each group's kind agreement");
}

Status check_groups(int independent, int fixed_groups, int group_size) {
  if (independent < 0 || fixed_groups < 0 || group_size <= 0 || independent + fixed_groups == 0)
    return make_error("--independent, --fixed-groups must be >= 0 (not both 0) and --group-size positive");
  if (int64_t{independent} + int64_t{fixed_groups} * group_size > kMaxSequences)
    return make_error("--independent + --fixed-groups x --group-size: at most " + std::to_string(kMaxSequences) +
                      " sequences per call");
  return {};
}

int run_generate(const GenerateArgs& a) {
  if (!a.source.checkpoint.empty() || a.source.random_init) {
    if (!a.run.empty()) return fail("--run and --checkpoint: give one");
    if (a.kinds) return fail("--kinds: for a run of the store (--run); not yet for a model file");
    return run_generate_text(a);
  }
  if (a.run.empty()) return fail("--run or --checkpoint: one is required");
  if (a.chat || !a.stop.empty()) return fail("--chat and --stop are for model files (--checkpoint)");
  if (a.kinds && a.prompt.empty()) return fail("--kinds: give a neutral prompt, e.g. --prompt \"<|endoftext|>\"");
  const int independent = a.independent.value_or(8), fixed_groups = a.fixed_groups.value_or(3),
            group_size = a.group_size.value_or(8);
  if (auto s = check_groups(independent, fixed_groups, group_size); !s) return fail(s.error());
  if (a.prompt.empty()) return fail("--prompt: empty (the synthetic task's prompts look like \"K>\")");
  auto lm = load_run_model(a.db, a.run, a.step, a.device, a.precision);
  if (!lm) return fail(lm.error());
  const ModelConfig& m = lm->model->config();
  if (!lm->tokenizer) return fail(lm->dir + ": config.json has no tokenizer: --prompt cannot be encoded");
  const Tokenizer& tokenizer = *lm->tokenizer;
  auto prompt = tokenizer.encode(a.prompt);
  if (!prompt) return fail("--prompt '" + a.prompt + "': " + prompt.error().message);
  SampleConfig sc = a.sample;
  // Sequences as long as the run's training sequences (66 for the synthetic task).
  auto length_or = training_seq_len(a.db, a.run);
  if (!length_or) return fail(length_or.error());
  const int length = *length_or;
  sc.max_new_tokens = length - static_cast<int>(prompt->size());
  if (sc.max_new_tokens <= 0)
    return fail("--prompt: " + std::to_string(prompt->size()) + " tokens leave nothing to generate in a " +
                std::to_string(length) + "-token sequence");
  if (auto s = sc.validate(option_name); !s) return fail(s.error());
  if (auto s = check_generation_request(m, static_cast<int>(prompt->size()), sc, {}); !s) return fail(s.error());
  auto groups = figure4_groups(*lm->model, *prompt, independent, fixed_groups, group_size, a.seed, sc, tokenizer);
  if (a.json) {
    for (const auto& g : groups)
      for (size_t i = 0; i < g.gens.size(); ++i)
        std::printf("%s\n", to_json(g, i, tokenizer, prompt->size(), a.kinds)
                                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)  // a cut character
                                .c_str());
  } else {
    std::printf("run '%s', checkpoint step %d (H=%d), prompt \"%s\", seed %llu\n", a.run.c_str(), lm->step,
                m.latent_bits, a.prompt.c_str(), static_cast<unsigned long long>(a.seed));
    for (const auto& g : groups)
      if (!g.gens.empty()) print_group(g, tokenizer);
    print_by_start(groups, tokenizer);
    if (a.kinds) print_kinds(groups, prompt->size(), tokenizer);
  }
  record(a, lm->step, groups, tokenizer);
  return 0;
}

}  // namespace ftx::app
