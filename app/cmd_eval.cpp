// ftx eval: one benchmark task (core/eval/bench) on a model file or a run's checkpoint, or on
// generations made elsewhere (--score-samples). Results go to the run store's benchmark tables:
// a run's own checkpoint at its step, an external file into a run named after it (docs/benchmarks.md).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/common.h"
#include "core/eval/bench/model_lm.h"
#include "core/eval/bench/record.h"
#include "core/eval/bench/task.h"
#include "core/io/config_json.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"

namespace ftx::app {
namespace {

using nlohmann::json;

std::string task_list() {
  std::string s;
  for (const auto& t : bench::task_infos()) s += (s.empty() ? "" : " | ") + t.name;
  return s;
}

Status write_samples(const std::string& path, const std::vector<bench::Sample>& samples) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return make_error(path + ": cannot write");
    for (const auto& s : samples) f << json{{"task_id", s.task_id}, {"completion", s.completion}}.dump() << "\n";
    f.flush();
    if (!f) return make_error(path + ": write failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_error(path + ": " + ec.message());
  return {};
}

void print_result(const bench::TaskResult& r, double seconds) {
  std::printf("%-16s %-22s %10s %10s %6s\n", "task", "metric", "value", "stderr", "n");
  for (const auto& m : r.metrics)
    std::printf("%-16s %-22s %10.4f %10.4f %6lld\n", r.task.c_str(), m.metric.c_str(), m.value, m.stderr_,
                static_cast<long long>(m.n));
  std::printf("%zu items in %.1f s\n", r.items.size(), seconds);
}

json result_json(const bench::TaskResult& r) {
  json metrics = json::array(), items = json::array();
  for (const auto& m : r.metrics)
    metrics.push_back({{"metric", m.metric}, {"value", m.value}, {"stderr", m.stderr_}, {"n", m.n}});
  for (const auto& it : r.items)
    items.push_back({{"item_id", it.item_id},
                     {"verdict", it.verdict},
                     {"score", it.score},
                     {"output", it.output},
                     {"target", it.target},
                     {"detail", it.detail}});
  return {{"task", r.task}, {"metrics", metrics}, {"items", items}};
}

// The run the results belong to: --run, else one named after the file (created as "done").
struct Target {
  std::string run;
  int step = 0;
  int64_t tokens = -1;
  json config = json::object();
};

Status store_result(const std::string& db, const Target& t, const bench::TaskResult& r) {
  FTX_TRY(make_store_folder(db));  // as ftx train: a fresh checkout has no workspace/ yet
  auto store = RunStore::open(db);
  if (!store) return store.error();
  auto run = store->find_or_create_run(t.run, t.config.dump(), "done");
  if (!run) return run.error();
  return bench::record_task_result(*store, run->id, t.step, t.tokens, r);
}

}  // namespace

void add_eval_options(CLI::App& app, EvalArgs& a) {
  auto* c = app.add_subcommand("eval", "Score a benchmark task (code pass@k, multiple choice, exact match)");
  add_model_source_options(c, a.source, /*random=*/true);
  c->get_option("--checkpoint")->description("Model: a checkpoint directory, a Hugging Face directory or a .gguf file");
  c->add_option("--task", a.task, "Task: " + task_list())->required();
  c->add_option("--data", a.data, "The task's JSONL (the Hugging Face datasets export)")->required();
  c->add_option("--fewshot", a.fewshot, "Few-shot examples (same format); default: the first --shots items of --data");
  c->add_option("--limit", a.limit, "Score only the first N items (0 = all)")->check(CLI::NonNegativeNumber);
  c->add_option("--shots", a.shots, "Few-shot examples (default: the task's)")->check(CLI::NonNegativeNumber);
  c->add_option("--num-samples", a.num_samples, "Generations per item: 1 = greedy; n > 1 sampled, pass@k for k <= n")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--temperature", a.temperature, "Sampling temperature when --num-samples > 1")->capture_default_str();
  c->add_option("--max-new-tokens", a.max_new_tokens, "Tokens per generation (0 = the task's default)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--latent-draws", a.latent_draws, "Free Transformer: prior draws of Z averaged per log-likelihood")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--parallel", a.parallel, "Sandboxed programs at once (0 = the core count)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--seed", a.seed, "Seed of sampling and of Z")->capture_default_str();
  c->add_option("--samples", a.samples_out, "Write every generation as JSONL {task_id, completion}");
  c->add_option("--score-samples", a.score_samples, "Score a samples JSONL without a model");
  add_db_option(c, a.db);
  c->add_option("--run", a.run,
                "Run for the results (default: named after the model file); without --checkpoint, evaluate that "
                "run's checkpoint");
  c->add_option("--step", a.step, "With --run alone: the checkpoint at this step (default: the latest)");
  c->add_flag("--no-store", a.no_store, "Print only, write nothing to the run store");
  c->add_flag("--json", a.json, "Print the metrics and items as JSON");
  add_device_options(c, a.device, a.precision);
}

int run_eval(const EvalArgs& a) {
  auto task = bench::load_task(a.task, a.data, a.fewshot, a.shots.value_or(-1));
  if (!task) return fail(task.error());
  std::vector<size_t> items((*task)->size());
  std::iota(items.begin(), items.end(), size_t{0});
  if (a.limit > 0 && static_cast<size_t>(a.limit) < items.size()) items.resize(a.limit);
  bench::EvalOptions o;
  if (a.shots) o.shots = *a.shots;
  o.samples = a.num_samples;
  o.temperature = a.temperature;
  o.max_new_tokens = a.max_new_tokens;
  o.seed = a.seed;
  o.parallel = a.parallel;

  const auto t0 = std::chrono::steady_clock::now();
  Result<bench::TaskResult> result = make_error("");
  Target target;
  auto named_after = [](const std::string& path) {
    std::filesystem::path p(path);
    if (!p.has_filename()) p = p.parent_path();  // "dir/"
    return p.stem().string();
  };
  if (!a.score_samples.empty()) {
    target.run = a.run.empty() ? named_after(a.score_samples) : a.run;
    target.config = {{"samples", a.score_samples}};
    if (!a.source.checkpoint.empty() || a.source.random_init)
      return fail("--score-samples scores generations without a model: drop --checkpoint/--random-init");
    auto samples = bench::read_samples(a.score_samples);
    if (!samples) return fail(samples.error());
    result = (*task)->score_samples(*samples, o);
  } else {
    Result<LoadedModel> lm = make_error("");
    const bool own_run = a.source.checkpoint.empty() && !a.source.random_init && !a.run.empty();
    if (a.step && !own_run) return fail("--step picks a checkpoint of --run: give --run without --checkpoint");
    if (own_run)
      lm = load_run_model(a.db, a.run, a.step, a.device, a.precision);
    else
      lm = load_model(a.source, a.device, a.precision);
    if (!lm) return fail(lm.error());
    target.step = lm->step;
    if (own_run) {
      target.run = a.run;
      if (auto store = RunStore::open_readonly(a.db); store)
        if (auto c = read_run_config(*store, a.run); c) target.tokens = c->tokens_at(lm->step);
    } else {
      target.run =
          a.run.empty() ? named_after(a.source.random_init ? "random-" + a.source.preset : a.source.checkpoint) : a.run;
      target.config = {{"model", config_to_json(lm->model->config(), lm->tokenizer.get())},
                       {"source", a.source.random_init ? "random init" : a.source.checkpoint}};
    }
    if (!lm->tokenizer) return fail(lm->dir + ": the model has no tokenizer; benchmarks need text");
    const ModelInfo& info = lm->file->info();
    const bench::TokenRoles roles = bench::token_roles(*lm->tokenizer);
    // The file's end ids and the tokenizer's end-of-text: a model fine-tuned on documents ends a
    // completion with the separator it was trained on.
    std::vector<int32_t> eos = info.eos_ids;
    for (int32_t id : roles.eos_ids)
      if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
    bench::ModelLm model_lm(*lm->model, *lm->tokenizer, info.add_bos, roles.prefix_id, eos,
                            bench::ModelLmOptions{.latent_draws = a.latent_draws, .seed = a.seed});
    result = (*task)->evaluate(model_lm, items, o);
  }
  if (!result) return fail(result.error());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!a.samples_out.empty())
    if (auto s = write_samples(a.samples_out, result->samples); !s) return fail(s.error());
  if (!a.no_store)
    if (auto s = store_result(a.db, target, *result); !s) return fail(s.error());
  if (a.json)
    std::printf("%s\n", result_json(*result).dump().c_str());
  else {
    print_result(*result, seconds);
    if (!a.no_store) std::printf("stored in %s, run '%s', step %d\n", a.db.c_str(), target.run.c_str(), target.step);
  }
  return 0;
}

}  // namespace ftx::app
