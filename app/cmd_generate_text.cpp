// ftx generate --checkpoint: free text from a model file. One prompt; for a Free Transformer the
// independent-Z group and the fixed-Z groups of Figure 4 (docs/figure4.md), for a plain decoder
// samples that differ only by their sampling seeds. One sequence streams as it is generated;
// several are printed group by group as they finish. --json prints one object per sequence.
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/common.h"
#include "core/eval/evaluator.h"
#include "core/explore/text_explorer.h"
#include "core/sample/generator.h"

namespace ftx::app {
namespace {

// The prompt in the file's chat format (ChatML or Llama 3, recognised from the template's text);
// any other template is named, not rendered.
Result<std::string> chat_prompt(const ModelInfo& info, const std::string& user) {
  const std::string& t = info.chat_template;
  if (t.empty()) return make_error(info.path + ": --chat: the model file has no chat template");
  const ChatFormat f = chat_format(t);
  if (f != ChatFormat::None) return apply_chat(f, user);
  return make_error(info.path + ": --chat: the chat template is neither ChatML nor Llama 3 (its first 60 bytes: " +
                    nlohmann::json(t.substr(0, 60)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                    "); give the formatted prompt without --chat");
}

}  // namespace

int run_generate_text(const GenerateArgs& a) {
  auto lm = load_model(a.source, a.device, a.precision);
  if (!lm) return fail(lm.error());
  Model& model = *lm->model;
  const ModelConfig& m = model.config();
  const ModelInfo& info = lm->file->info();
  if (!lm->tokenizer) return fail(lm->dir + ": has no tokenizer: --prompt cannot be encoded");
  const Tokenizer& tokenizer = *lm->tokenizer;
  if (a.prompt.empty()) return fail("--prompt: empty");
  std::string text = a.prompt;
  if (a.chat) {
    auto c = chat_prompt(info, a.prompt);
    if (!c) return fail(c.error());
    text = *c;
  }
  auto ids = tokenizer.encode(text);
  if (!ids) return fail("--prompt: " + ids.error().message);
  if (info.add_bos && tokenizer.special_tokens().bos &&
      (ids->empty() || ids->front() != *tokenizer.special_tokens().bos))
    ids->insert(ids->begin(), *tokenizer.special_tokens().bos);

  const bool free = m.is_free();
  const int independent = a.independent.value_or(free ? 4 : 1), fixed_groups = a.fixed_groups.value_or(free ? 2 : 0),
            group_size = a.group_size.value_or(free ? 4 : 1);
  if (!free && fixed_groups > 0)
    return fail("--fixed-groups: " + lm->dir + " is a plain decoder (no latent Z): only --independent samples apply");
  if (auto s = check_groups(independent, fixed_groups, group_size); !s) return fail(s.error());
  SampleConfig sc = a.sample;
  if (auto s = sc.validate(option_name); !s) return fail(s.error());
  const int n_in = int(ids->size()) + sc.max_new_tokens - 1;
  std::vector<uint64_t> latent_seeds;
  std::vector<int> group_of;
  const std::vector<SequenceSpec> specs = figure4_specs(independent, fixed_groups, group_size, a.seed, a.seed, n_in,
                                                        m.latent_bits, &latent_seeds, &group_of);
  std::vector<GenerationRequest> requests;
  for (const SequenceSpec& s : specs) requests.push_back({*ids, s});
  if (auto s = check_text_requests(m, requests, sc); !s) return fail(s.error());

  if (const std::string r = generation_router_text(m, sc); !r.empty()) std::fprintf(stderr, "%s\n", r.c_str());
  const bool stream = requests.size() == 1 && !a.json;
  auto t0 = std::chrono::steady_clock::now();
  auto gens = generate_text(model, &tokenizer, requests, sc, StopRule{info.eos_ids, a.stop},
                            [&](int, int32_t, const std::string& piece) {
                              if (stream) {
                                std::fwrite(piece.data(), 1, piece.size(), stdout);
                                std::fflush(stdout);
                              }
                              return true;
                            });
  if (!gens) return fail(gens.error());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t generated = 0;
  for (const TextGeneration& g : *gens) generated += int64_t(g.tokens.size()) - g.prompt_len;
  if (stream) std::printf("\n");
  for (size_t i = 0; i < gens->size() && !stream; ++i) {
    const TextGeneration& g = (*gens)[i];
    const int group = group_of[i];
    if (a.json) {
      nlohmann::json j{{"group", group},
                       {"policy", group == 0 ? (free ? "independent" : "sample") : "fixed"},
                       {"seed", latent_seeds[i]},
                       {"sample_seed", specs[i].sample_seed},
                       {"prompt", text},
                       {"text", g.text},
                       {"tokens", std::vector<int32_t>(g.tokens.begin() + g.prompt_len, g.tokens.end())},
                       {"finish", finish_reason_name(g.finish)}};
      if (free) j["codes"] = g.codes;
      if (m.routing.kind != Routing::None) j["router"] = sc.router;
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      continue;
    }
    if (i == 0 || group_of[i - 1] != group)
      std::printf("%s\n", style(group == 0 ? (free ? "== independent Z (a new Z per sequence)" : "== samples (no Z)")
                                           : "== fixed Z, group " + std::to_string(group) + " (one Z for the group)",
                                "1")
                              .c_str());
    std::printf("[%zu] %s\n", i, g.text.c_str());
  }
  std::fprintf(stderr, "%lld tokens in %.2f s (%.1f tokens/s, %zu sequences)\n", static_cast<long long>(generated),
               secs, double(generated) / secs, gens->size());
  return 0;
}

}  // namespace ftx::app
