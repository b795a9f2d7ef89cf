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
#include "core/eval/route_metrics.h"
#include "core/eval/synth_metrics.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"
#include "datasets/registry.h"

namespace ftx::app {
namespace {

constexpr int64_t kMaxSequences = 4096;  // one call's batch of sequences through the KV cache

nlohmann::json to_json(const GroupResult& g, size_t i, const Tokenizer& tokenizer) {
  const Generation& gen = g.gens[i];
  return {{"group", g.group},
          {"policy", g.fixed ? "fixed" : "independent"},
          {"seed", g.latent_seeds[i]},
          {"sample_seed", gen.sample_seed},
          {"text", tokenizer.decode(gen.tokens)},
          {"codes", gen.codes}};
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
              "A Free Transformer on the text-kinds corpus: judge each sequence's kind (python, c, perl, prose), "
              "each group's kind agreement against the chance level, and where KL is spent "
              "(docs/text_latent.md)");
  c->add_option("--kinds-data", a.kinds_data,
                "With --kinds: the corpus's token file (ftx tokenize --kinds; default: the run's), for the chance "
                "level and the KL profile");
}

Status check_groups(int independent, int fixed_groups, int group_size) {
  if (independent < 0 || fixed_groups < 0 || group_size <= 0 || independent + fixed_groups == 0)
    return make_error("--independent, --fixed-groups must be >= 0 (not both 0) and --group-size positive");
  if (int64_t{independent} + int64_t{fixed_groups} * group_size > kMaxSequences)
    return make_error("--independent + --fixed-groups x --group-size: at most " + std::to_string(kMaxSequences) +
                      " sequences per call");
  return {};
}

std::string generation_router_text(const ModelConfig& m, const SampleConfig& sc) {
  if (m.routing.kind == Routing::None) return {};
  const bool student = sc.router == "student";
  return std::string("routing ") + routing_name(m.routing.kind) + " on blocks " + routed_blocks_text(m) + ": " +
         route_path_text(m.routing, student) +
         (student ? ", its KV caches holding the chosen tokens" : ", recomputed over the sequence so far at each step");
}

int run_generate(const GenerateArgs& a) {
  if (a.kinds) return run_generate_kinds(a);
  if (!a.kinds_data.empty()) return fail("--kinds-data: only with --kinds");
  if (!a.source.checkpoint.empty() || a.source.random_init) {
    if (!a.run.empty()) return fail("--run and --checkpoint: give one");
    return run_generate_text(a);
  }
  if (a.run.empty()) return fail("--run or --checkpoint: one is required");
  if (a.chat || !a.stop.empty()) return fail("--chat and --stop are for model files (--checkpoint)");
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
      for (size_t i = 0; i < g.gens.size(); ++i) {
        nlohmann::json j = to_json(g, i, tokenizer);
        if (m.routing.kind != Routing::None) j["router"] = sc.router;
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)  // a cut character
                                .c_str());
      }
  } else {
    std::printf("run '%s', checkpoint step %d (H=%d), prompt \"%s\", seed %llu\n", a.run.c_str(), lm->step,
                m.latent_bits, a.prompt.c_str(), static_cast<unsigned long long>(a.seed));
    if (const std::string r = generation_router_text(m, sc); !r.empty()) std::printf("%s\n", r.c_str());
    for (const auto& g : groups)
      if (!g.gens.empty()) print_group(g, tokenizer);
    print_by_start(groups, tokenizer);
  }
  record(a, lm->step, groups, tokenizer);
  return 0;
}

}  // namespace ftx::app
