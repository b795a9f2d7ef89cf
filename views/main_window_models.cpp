// MainWindow's model files: File → Open model (or --open), the Models list, the Generations page
// for models and the Latent dock's model sources, all through the ModelWorker on its thread; and
// the kinds lesson's "Generate in Models (text)", which opens its model and generates there.
#include <QComboBox>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QLineEdit>
#include <QSignalBlocker>
#include <QStatusBar>
#include <QTabWidget>
#include <algorithm>

#include "core/model/config.h"
#include "views/latent_view.h"
#include "views/lessons_view.h"
#include "views/main_window.h"
#include "views/model_worker.h"
#include "views/models_view.h"
#include "views/run_list_model.h"
#include "views/text_generations_view.h"
#include "views/text_groups_grid.h"

namespace ftx {

namespace {

constexpr int kRandomLayers = 4, kRandomDim = 128, kRandomLatentBits = 8, kRandomContext = 1024;
constexpr quint64 kRandomSeed = 1;
// The kinds lesson's generation: the measurement's neutral prompt and temperature (core/eval/kind_groups.h),
// three fixed-Z groups beside the independent one.
const char* const kKindsPrompt = "<|endoftext|>";
constexpr int kKindsFixedGroups = 3, kKindsGroupSize = 4, kKindsNewTokens = 200;
constexpr double kKindsTemperature = 1.0, kKindsTopP = 1.0;
const char* const kNoLatent =
    "This model has no latent Z (plain decoder): nothing to inspect here. Its Generations "
    "differ only by token sampling.";

QString model_name(const ftx::ModelInfo& info) {
  return QString::fromStdString(info.name.empty() ? info.path : info.name);
}

}  // namespace

void MainWindow::connect_models() {
  model_worker_ = new ModelWorker;
  model_worker_->moveToThread(&model_thread_);
  connect(&model_thread_, &QThread::started, model_worker_, &ModelWorker::start);
  connect(&model_thread_, &QThread::finished, model_worker_, &QObject::deleteLater);
  connect(model_worker_, &ModelWorker::opened, this, &MainWindow::on_model_opened);
  connect(model_worker_, &ModelWorker::load_progress, models_view_, &ModelsView::set_progress);
  connect(model_worker_, &ModelWorker::loaded, this, &MainWindow::on_model_loaded);
  connect(model_worker_, &ModelWorker::open_failed, this, &MainWindow::on_model_failed);
  connect(model_worker_, &ModelWorker::planned, text_generations_, &TextGenerationsView::on_planned);
  connect(model_worker_, &ModelWorker::text_arrived, text_generations_, &TextGenerationsView::on_text);
  connect(model_worker_, &ModelWorker::finished, text_generations_, &TextGenerationsView::on_finished);
  connect(model_worker_, &ModelWorker::finished, this, [this](const TextJobResult& r) {
    if (!r.error.isEmpty()) {
      statusBar()->showMessage(r.error, 8000);
      qWarning("generations: %s", qPrintable(r.error));
    } else {
      qInfo("generations: generated %d tokens in %zu sequences in %.1f s%s", r.new_tokens, r.texts.size(), r.seconds,
            r.cancelled ? " (stopped)" : "");
    }
    kinds_in_front_ = false;
    if (kinds_pending_ >= 0) generate_kinds_lesson();  // the job it waited for has ended
  });
  connect(model_worker_, &ModelWorker::latent_ready, this,
          [this](quint64 request, const ftx::LatentInspection& li, const QString& model) {
            if (request != latent_request_) return;  // an older request answered after a newer one was sent
            latent_->set_inspection(li, model, -1);
            latent_text_->setText(QString::fromStdString(latent_model_text_));  // as sent (li.text may add BOS)
            qInfo("latent: shown %d positions x %d bits of model '%s'", li.T, li.H, qPrintable(model));
          });
  connect(model_worker_, &ModelWorker::latent_failed, this, [this](quint64 request, const QString& message) {
    if (request != latent_request_) return;
    latent_->set_message(message);
    statusBar()->showMessage(message, 8000);
    qWarning("latent: %s", qPrintable(message));
  });
  connect(model_worker_, &ModelWorker::edited_ready, latent_, &LatentView::set_edited_tokens);
  connect(model_worker_, &ModelWorker::edit_failed, latent_, &LatentView::set_message);
  connect_model_views();
  model_thread_.start();

  for (const QString& path : opts_.open) auto_generate_ = open_model(path);
  if (opts_.random_ft && !opts_.open.isEmpty()) random_pending_ = auto_generate_;
}

// The Models list, the Generations page for models and the Latent dock's model sources.
void MainWindow::connect_model_views() {
  connect(models_view_, &ModelsView::open_requested, this, &MainWindow::open_model_dialog);
  connect(models_view_, &ModelsView::random_requested, this, [this](int id) { open_random_model(id); });
  connect(models_view_, &ModelsView::close_requested, this, &MainWindow::close_model);
  connect(models_view_, &ModelsView::generations_requested, this, &MainWindow::show_model_generations);
  connect(models_view_, &ModelsView::latent_requested, this, [this](int id) { show_model_latent(id, QString()); });
  connect(text_generations_, &TextGenerationsView::generate_requested, model_worker_, &ModelWorker::generate);
  connect(text_generations_, &TextGenerationsView::stop_requested, this,
          [this](quint64 job) { model_worker_->cancel(job); });
  connect(text_generations_, &TextGenerationsView::inspect_requested, this,
          [this](int id, const QString& text, int prompt_bytes) { show_model_latent(id, text, prompt_bytes); });
  // A Free Transformer's latent follows its newest generation (prompt + the first sequence).
  connect(text_generations_, &TextGenerationsView::generation_done, this, [this](int id) {
    auto it = models_.find(id);
    if (it == models_.end() || !it->second->config.is_free() || !text_generations_->last_plan()) return;
    const std::string& prompt = text_generations_->last_plan()->prompt_text;
    show_model_latent(id, QString::fromStdString(prompt) + text_generations_->grid()->text(0),
                      static_cast<int>(prompt.size()), !kinds_in_front_);
  });
  connect(latent_run_, &QComboBox::currentIndexChanged, this, [this] {
    if (latent_model() >= 0) show_model_latent(latent_model(), QString());
  });
  connect(latent_text_, &QLineEdit::textEdited, this, [this](const QString& t) {
    latent_model_text_ = t.toStdString();
    latent_model_prompt_ = 0;  // typed text: no prompt to regenerate from
  });
}

void MainWindow::open_model_dialog() {
  // One dialog for both kinds: pick a .gguf file, or a checkpoint directory's config.json (or any
  // file in it); the directory is what opens then.
  const QString path = QFileDialog::getOpenFileName(this, "Open model", QString(),
                                                    "Models (*.gguf config.json *.safetensors);;All files (*)");
  if (path.isEmpty()) return;
  const QFileInfo fi(path);
  open_model(fi.suffix().compare("gguf", Qt::CaseInsensitive) == 0 ? path : fi.absolutePath());
}

int MainWindow::open_model(const QString& path) {
  const int id = ++next_model_;
  models_view_->add_model(id, path);
  statusBar()->showMessage("Opening " + path + "…", 5000);
  QMetaObject::invokeMethod(model_worker_, "open", Qt::QueuedConnection, Q_ARG(int, id), Q_ARG(QString, path));
  return id;
}

int MainWindow::open_random_model(int tokenizer_of) {
  auto src = models_.find(tokenizer_of);
  if (src == models_.end() || !models_view_->loaded(tokenizer_of) || !src->second->tokenizer) {
    statusBar()->showMessage("Select a loaded model with a tokenizer first: the random Free Transformer borrows it",
                             8000);
    return -1;
  }
  ftx::ShapeOverrides o;
  o.layers = kRandomLayers, o.dim = kRandomDim, o.latent_bits = kRandomLatentBits;
  auto cfg = ftx::shape_model_config(o, src->second->tokenizer->vocab_size(), kRandomContext);
  if (!cfg) {
    statusBar()->showMessage(QString::fromStdString(cfg.error().message), 8000);
    return -1;
  }
  const int id = ++next_model_;
  models_view_->add_model(id, QString());
  QMetaObject::invokeMethod(model_worker_, "open_random", Qt::QueuedConnection, Q_ARG(int, id),
                            Q_ARG(ftx::ModelConfig, *cfg), Q_ARG(int, tokenizer_of), Q_ARG(quint64, kRandomSeed));
  return id;
}

void MainWindow::on_model_opened(int id, std::shared_ptr<const ftx::ModelInfo> info) {
  models_[id] = info;
  models_view_->set_info(id, info);
  qInfo("models: opened '%s' (%s, %s, %lld parameters, %s)", qPrintable(model_name(*info)), info->format.c_str(),
        info->config.architecture.c_str(), static_cast<long long>(info->n_params),
        info->config.is_free() ? "Free Transformer" : "plain decoder");
}

void MainWindow::on_model_loaded(int id, double seconds) {
  auto it = models_.find(id);
  if (it == models_.end() || models_view_->row_of(id) < 0) return;  // closed meanwhile
  models_view_->set_loaded(id, seconds);
  text_generations_->add_model(id, it->second);
  if (runs_model_->runs().empty()) generations_tabs_->setCurrentWidget(text_generations_);
  fill_latent_sources(latent_free_runs_);
  statusBar()->showMessage(QString("Loaded %1 in %2 s").arg(model_name(*it->second)).arg(seconds, 0, 'f', 1), 5000);
  qInfo("models: loaded '%s' in %.1f s", qPrintable(model_name(*it->second)), seconds);
  if (id == random_pending_) {
    random_pending_ = -1;
    auto_generate_ = open_random_model(id);
    return;
  }
  if (latent_model() < 0 || latent_model() == id) show_model_latent(id, QString());
  if (id == kinds_pending_) return generate_kinds_lesson();
  if (id == auto_generate_ && !opts_.prompt.isEmpty()) {
    auto_generate_ = -1;
    generations_tabs_->setCurrentWidget(text_generations_);
    text_generations_->select_model(id);
    text_generations_->set_prompt(opts_.prompt);
    text_generations_->generate();
  }
}

void MainWindow::on_model_failed(int id, const QString& message) {
  if (id == kinds_pending_) {
    kinds_pending_ = -1;
    lessons_->show_kinds_error(message);
  }
  models_.erase(id);
  models_view_->set_failed(id, message);
  text_generations_->remove_model(id);
  fill_latent_sources(latent_free_runs_);
  statusBar()->showMessage(message, 15000);
  qWarning("models: %s", qPrintable(message));
}

void MainWindow::close_model(int id) {
  if (id < 0) return;
  models_.erase(id);
  models_view_->remove_model(id);
  text_generations_->remove_model(id);
  fill_latent_sources(latent_free_runs_);
  QMetaObject::invokeMethod(model_worker_, "close", Qt::QueuedConnection, Q_ARG(int, id));
}

void MainWindow::show_model_generations(int id) {
  raise_view("generations");
  generations_tabs_->setCurrentWidget(text_generations_);
  text_generations_->select_model(id);
}

void MainWindow::show_model_latent(int id, const QString& text, int prompt_bytes, bool raise) {
  auto it = models_.find(id);
  if (it == models_.end()) return;
  const int i = latent_run_->findData(id);
  if (i >= 0 && latent_run_->currentIndex() != i) {
    const QSignalBlocker block(latent_run_);
    latent_run_->setCurrentIndex(i);
  }
  if (!text.isEmpty() && raise) raise_view("latent");
  if (!it->second->config.is_free()) {
    latent_->clear(QString("%1: ").arg(model_name(*it->second)) + kNoLatent);
    qInfo("latent: model '%s' has no latent Z (plain decoder)", qPrintable(model_name(*it->second)));
    return;
  }
  if (!text.isEmpty()) latent_model_text_ = text.toStdString(), latent_model_prompt_ = prompt_bytes;
  inspect_model_latent(id, latent_seed_);
}

void MainWindow::inspect_model_latent(int id, quint64 seed) {
  auto it = models_.find(id);
  if (it == models_.end()) return;
  if (!it->second->config.is_free()) return latent_->clear(kNoLatent);
  if (!models_view_->loaded(id)) return latent_->clear("Loading " + model_name(*it->second) + "…");
  if (latent_model_text_.empty()) {
    latent_model_text_ = text_generations_->last_plan() ? text_generations_->last_plan()->prompt_text
                                                        : std::string("The sea was calm, and the boat moved slowly.");
    latent_model_prompt_ = 0;
  }
  QMetaObject::invokeMethod(model_worker_, "inspect", Qt::QueuedConnection, Q_ARG(quint64, ++latent_request_),
                            Q_ARG(int, id), Q_ARG(QString, QString::fromStdString(latent_model_text_)),
                            Q_ARG(int, latent_model_prompt_), Q_ARG(quint64, seed));
}

int MainWindow::latent_model() const {
  const QVariant v = latent_run_->currentData();
  return v.isValid() ? v.toInt() : -1;
}

// The Latent dock's sources: the Free Transformer runs with a checkpoint, then the opened models
// (loaded; plain decoders too, which say they have no Z).
void MainWindow::fill_latent_sources(const QStringList& free_runs) {
  latent_free_runs_ = free_runs;
  const QString keep = latent_run_->currentText();
  const QSignalBlocker block(latent_run_);
  latent_run_->clear();
  latent_run_->addItems(free_runs);
  for (const auto& [id, info] : models_)
    if (models_view_->loaded(id)) latent_run_->addItem("model: " + model_name(*info), id);
  if (latent_run_->findText(keep) >= 0) latent_run_->setCurrentText(keep);
}

void MainWindow::open_kinds_model(const QString& path) {
  if (path.isEmpty()) return;
  const QString canonical = QFileInfo(path).canonicalFilePath();
  int id = kinds_model_ >= 0 && models_view_->row_of(kinds_model_) >= 0 ? kinds_model_ : -1;
  for (const auto& [mid, info] : models_)  // opened before (File → Open model, --open)
    if (id < 0 && QFileInfo(QString::fromStdString(info->path)).canonicalFilePath() == canonical) id = mid;
  if (id < 0) id = open_model(path);
  kinds_model_ = kinds_pending_ = id;
  models_view_->select(id);
  if (models_view_->loaded(id))
    generate_kinds_lesson();
  else
    statusBar()->showMessage("Loading " + path + " for the kinds lesson…", 8000);
}

void MainWindow::generate_kinds_lesson() {
  const int id = kinds_pending_;
  auto it = models_.find(id);
  if (it == models_.end() || !models_view_->loaded(id)) return;     // on_model_loaded calls again
  if (text_generations_->busy()) return text_generations_->stop();  // the finished handler calls again
  kinds_pending_ = -1;
  models_view_->select(id);
  raise_view("generations");
  generations_tabs_->setCurrentWidget(text_generations_);
  text_generations_->select_model(id);
  text_generations_->set_prompt(kKindsPrompt);
  text_generations_->set_kinds_shown(true);
  text_generations_->set_groups(kKindsFixedGroups, kKindsGroupSize);
  // The prompt (and a BOS) must fit in the context beside the new tokens.
  text_generations_->set_max_new_tokens(std::min(kKindsNewTokens, it->second->config.max_seq_len - 2));
  text_generations_->set_sampling(kKindsTemperature, kKindsTopP);
  kinds_in_front_ = text_generations_->generate();  // the badges, not the Latent dock, in front when it ends
  qInfo("lessons: the kinds lesson generates with model '%s'", qPrintable(model_name(*it->second)));
}

}  // namespace ftx
