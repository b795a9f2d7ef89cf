#include "views/model_worker.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <QElapsedTimer>
#include <algorithm>

#include "views/meta_types.h"

namespace ftx {

namespace {

constexpr qint64 kProgressIntervalMs = 33;  // load_progress at most ~30 times a second
constexpr qint64 kTextIntervalMs = 33;      // text_arrived at most once a frame

// Sampling of the Latent view's regenerations (original and edited share the token seed).
ftx::SampleConfig latent_sampling() {
  ftx::SampleConfig sc;
  sc.temperature = 0.8f, sc.top_p = 0.95f;
  return sc;
}

QString qs(const std::string& s) { return QString::fromStdString(s); }

}  // namespace

ModelWorker::ModelWorker() : be_(ftx::make_cpu_backend()) {}

ModelWorker::~ModelWorker() {
  for (auto& [id, e] : models_) e.model.reset();  // before the files whose memory they read
}

void ModelWorker::register_meta_types() {
  register_view_meta_types();
  qRegisterMetaType<std::shared_ptr<const ftx::ModelInfo>>("std::shared_ptr<const ftx::ModelInfo>");
  qRegisterMetaType<TextJob>("ftx::TextJob");
  qRegisterMetaType<TextJobPlan>("ftx::TextJobPlan");
  qRegisterMetaType<TextPieces>("ftx::TextPieces");
  qRegisterMetaType<TextJobResult>("ftx::TextJobResult");
  qRegisterMetaType<ftx::ModelConfig>("ftx::ModelConfig");
  qRegisterMetaType<std::vector<std::string>>("std::vector<std::string>");
}

void ModelWorker::cancel(quint64 job) {
  quint64 seen = cancelled_up_to_.load();
  while (seen < job && !cancelled_up_to_.compare_exchange_weak(seen, job)) {
  }
}

void ModelWorker::start() {
  // Loading and generation yield to the UI thread, as training does (core/session): SCHED_IDLE,
  // else a higher nice value. OpenMP's threads, started from this one, inherit it.
  sched_param idle{};
  if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle) != 0)
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
}

void ModelWorker::open(int id, QString path) {
  auto file = ftx::ModelFile::open(path.toStdString());
  if (!file) return emit open_failed(id, qs(file.error().message));
  Entry e;
  e.info = std::make_shared<const ftx::ModelInfo>((*file)->info());
  e.file = std::move(*file);
  load(id, std::move(e));
}

void ModelWorker::open_random(int id, ftx::ModelConfig config, int tokenizer_of, quint64 seed) {
  auto src = models_.find(tokenizer_of);
  if (src == models_.end() || !src->second.info->tokenizer)
    return emit open_failed(id, "a random Free Transformer needs an open model with a tokenizer to borrow");
  const ftx::ModelInfo& from = *src->second.info;
  config.vocab_size = std::max(config.vocab_size, from.tokenizer->vocab_size());
  if (ftx::Status st = config.validate(); !st) return emit open_failed(id, qs(st.error().message));
  Entry e;
  e.file = ftx::random_model_file(config, from.tokenizer, seed);
  auto info = std::make_shared<ftx::ModelInfo>(e.file->info());
  // The prompt conventions of the model whose tokenizer it borrows.
  info->add_bos = from.add_bos, info->eos_ids = from.eos_ids, info->chat_template = from.chat_template;
  info->name = "random Free Transformer (" + std::to_string(config.n_layers) + " layers, dim " +
               std::to_string(config.dim) + ", H " + std::to_string(config.latent_bits) + ", seed " +
               std::to_string(seed) + ")";
  e.info = std::move(info);
  load(id, std::move(e));
}

void ModelWorker::load(int id, Entry e) {
  emit opened(id, e.info);
  QElapsedTimer clock, since_progress;
  clock.start(), since_progress.start();
  auto model = e.file->load(*be_, [&](int64_t done, int64_t total) {
    if (done == total || since_progress.elapsed() >= kProgressIntervalMs) {
      since_progress.restart();
      emit load_progress(id, done, total);
    }
  });
  if (!model) return emit open_failed(id, qs(model.error().message));
  e.model = std::move(*model);
  models_.erase(id);
  models_.emplace(id, std::move(e));
  emit loaded(id, static_cast<double>(clock.elapsed()) / 1000.0);
}

void ModelWorker::close(int id) {
  auto it = models_.find(id);
  if (it == models_.end()) return;
  it->second.model.reset();
  models_.erase(it);
  if (inspected_ && inspected_->model == id) inspected_.reset();
}

void ModelWorker::generate(TextJob job) {
  TextJobResult result;
  result.id = job.id;
  auto it = models_.find(job.model);
  if (cancelled(job.id)) {
    result.cancelled = true;
  } else if (it == models_.end()) {
    result.error = "the model is not loaded (still loading, failed or closed)";
  } else {
    auto r = run_job(job, it->second);
    if (r)
      result = std::move(*r);
    else
      result.error = qs(r.error().message);
  }
  emit finished(std::move(result));
}

ftx::Result<TextJobResult> ModelWorker::run_job(const TextJob& job, Entry& e) {
  const ftx::ModelInfo& info = *e.info;
  if (!info.tokenizer) return ftx::make_error(info.path + ": no tokenizer: text generation needs one");
  TextJobPlan plan;
  plan.id = job.id;
  plan.prompt_text = job.chat ? ftx::apply_chat(ftx::chat_format(info.chat_template), job.prompt) : job.prompt;
  auto prompt = ftx::prompt_tokens(*info.tokenizer, info.add_bos, plan.prompt_text);
  if (!prompt) return prompt.error();
  auto groups = ftx::plan_text_groups(e.model->config(), *prompt, job.groups);
  if (!groups) return groups.error();
  plan.has_latent = groups->has_latent, plan.groups = groups->groups, plan.latent_seeds = groups->latent_seeds;
  for (const ftx::GenerationRequest& r : groups->requests) plan.sample_seeds.push_back(r.spec.sample_seed);
  plan.prompt_tokens = static_cast<int>(prompt->size());
  emit planned(plan);

  TextPieces pending;
  QElapsedTimer clock, since_batch;
  clock.start(), since_batch.start();
  int new_tokens = 0;
  const ftx::TokenSink sink = [&](int seq, int32_t, const std::string& text) {
    ++new_tokens;
    if (!text.empty()) pending.emplace_back(seq, text);
    if (!pending.empty() && since_batch.elapsed() >= kTextIntervalMs) {
      since_batch.restart();
      emit text_arrived(job.id, std::exchange(pending, {}));
    }
    return !cancelled(job.id);
  };
  ftx::StopRule stop;
  stop.eos_ids = info.eos_ids;
  auto gens = ftx::generate_text(*e.model, info.tokenizer.get(), groups->requests, job.groups.sample, stop, sink);
  if (!pending.empty()) emit text_arrived(job.id, std::move(pending));
  if (!gens) return gens.error();
  TextJobResult result;
  result.id = job.id;
  result.new_tokens = new_tokens;
  result.seconds = static_cast<double>(clock.elapsed()) / 1000.0;
  for (const ftx::TextGeneration& g : *gens) {
    result.texts.push_back(g.text);
    result.finish.emplace_back(ftx::finish_reason_name(g.finish));
    result.cancelled |= g.finish == ftx::FinishReason::Cancelled;
  }
  return result;
}

void ModelWorker::inspect(quint64 request, int id, QString text, int prompt_bytes, quint64 seed) {
  auto it = models_.find(id);
  if (it == models_.end())
    return emit latent_failed(request, "the model is not loaded (still loading, failed or closed)");
  const ftx::ModelInfo& info = *it->second.info;
  if (!info.tokenizer) return emit latent_failed(request, qs(info.path + ": no tokenizer: the latent view needs text"));
  const std::string all = text.toStdString();
  auto tokens = ftx::prompt_tokens(*info.tokenizer, info.add_bos, all);
  if (!tokens) return emit latent_failed(request, qs(tokens.error().message));
  // The prompt's tokens, when they begin the text's (a generation's prompt always does).
  int prompt_len = 0;
  if (prompt_bytes > 0 && prompt_bytes < static_cast<int>(all.size())) {
    auto prompt = ftx::prompt_tokens(*info.tokenizer, info.add_bos, all.substr(0, size_t(prompt_bytes)));
    if (prompt && prompt->size() < tokens->size() && std::equal(prompt->begin(), prompt->end(), tokens->begin()))
      prompt_len = static_cast<int>(prompt->size());
  }
  auto li = ftx::inspect_text_latent(*it->second.model, *info.tokenizer, *tokens, seed, prompt_len, latent_sampling());
  if (!li) return emit latent_failed(request, qs(li.error().message));
  if (prompt_len > 0)
    inspected_ = Inspected{id, *tokens, prompt_len, *li};
  else
    inspected_.reset();
  emit latent_ready(request, std::move(*li), qs(info.name));
}

void ModelWorker::request_edit(const std::vector<std::pair<int, int>>& flips) {
  {
    std::lock_guard lk(edit_mu_);
    pending_flips_ = flips;
    ++edit_requested_;
  }
  QMetaObject::invokeMethod(this, "process_edit", Qt::QueuedConnection);
}

void ModelWorker::process_edit() {
  std::vector<std::pair<int, int>> flips;
  {
    std::lock_guard lk(edit_mu_);
    if (edit_done_ == edit_requested_) return;  // a newer request was already computed
    edit_done_ = edit_requested_;
    flips = pending_flips_;
  }
  auto it = inspected_ ? models_.find(inspected_->model) : models_.end();
  if (it == models_.end()) return emit edit_failed("nothing to regenerate: inspect a generation first");
  auto ids = ftx::regenerate_text_latent(*it->second.model, inspected_->tokens, inspected_->prompt_len, inspected_->li,
                                         flips, latent_sampling());
  if (!ids) return emit edit_failed(qs(ids.error().message));
  const ftx::Tokenizer& t = *it->second.info->tokenizer;
  std::vector<std::string> tokens;
  for (int32_t id : *ids) tokens.emplace_back(t.token_bytes(id));
  emit edited_ready(std::move(tokens), qs(t.decode(*ids)));
}

}  // namespace ftx
