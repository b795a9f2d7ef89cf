// MainWindow's connections to the store poller, the explorer worker and the training session.
#include <QComboBox>
#include <QCoreApplication>
#include <QFileDialog>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QProcess>
#include <QSettings>
#include <QStatusBar>
#include <QTimer>
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/store/run_store.h"
#include "core/train/train_config.h"
#include "views/benchmarks_view.h"
#include "views/compute_view.h"
#include "views/curves_view.h"
#include "views/explore_worker.h"
#include "views/frontier_chart.h"
#include "views/generations_view.h"
#include "views/latent_view.h"
#include "views/lessons_view.h"
#include "views/main_window.h"
#include "views/model_worker.h"
#include "views/run_list_model.h"
#include "views/train_view.h"

namespace ftx {

void MainWindow::connect_store() {
  poller_ = new StorePoller(opts_.db_path);
  poller_->moveToThread(&poll_thread_);
  connect(&poll_thread_, &QThread::started, poller_, &StorePoller::start);
  connect(&poll_thread_, &QThread::finished, poller_, &QObject::deleteLater);
  connect(poller_, &StorePoller::runs_changed, this, &MainWindow::on_runs_changed);
  connect(poller_, &StorePoller::metrics_arrived, this, &MainWindow::on_metrics);
  connect(poller_, &StorePoller::store_error, this, &MainWindow::on_store_error);
  connect(poller_, &StorePoller::run_reset, this, [this](qint64 id, const MetricBatch& rows) {
    cache_.drop_run(id);
    on_metrics(rows);
  });
  connect(poller_, &StorePoller::benchmarks_arrived, benchmarks_, &ftx::BenchmarksView::add_rows);
  connect(poller_, &StorePoller::benchmarks_reset, benchmarks_, &ftx::BenchmarksView::reset_run);
  connect(poller_, &StorePoller::reference_loaded, benchmarks_, &ftx::BenchmarksView::set_reference);
  connect(benchmarks_, &ftx::BenchmarksView::items_requested, poller_, &StorePoller::load_items);
  connect(poller_, &StorePoller::items_loaded, benchmarks_, &ftx::BenchmarksView::show_items);
  connect(poller_, &StorePoller::events_arrived, this, [this](const EventBatch& rows) {
    for (const auto& [run, e] : rows) {
      if (e.kind != "kappa") continue;
      nlohmann::json j = nlohmann::json::parse(e.payload_json, nullptr, false);
      if (j.is_object() && j.contains("to_nats") && j["to_nats"].is_number())
        kappa_events_[run].emplace_back(e.step, j["to_nats"].get<double>());
      curves_->set_events(run, kappa_events_[run]);
    }
  });
  poll_thread_.start();
}

void MainWindow::connect_explorer() {
  explorer_ = new ExploreWorker(opts_.db_path, opts_.datasets);
  explorer_->moveToThread(&explore_thread_);
  connect(&explore_thread_, &QThread::finished, explorer_, &QObject::deleteLater);
  connect(generations_, &GenerationsView::figure4_requested, explorer_, &ExploreWorker::figure4);
  connect(generations_, &GenerationsView::freeze_requested, explorer_, &ExploreWorker::freeze);
  connect(generations_, &GenerationsView::comparison_requested, explorer_, &ExploreWorker::comparison);
  // The prompt is checked with the chosen run's tokenizer while it is typed.
  connect(generations_, &GenerationsView::run_changed, this, [this](const QString& run) {
    for (const RunSummary& r : runs_model_->runs()) {
      if (QString::fromStdString(r.info.name) != run) continue;
      ftx::TrainConfig t;
      t.dataset = r.dataset.toStdString();
      if (auto data = opts_.datasets(t)) generations_->set_tokenizer(data->tokenizer().clone());
      return;
    }
  });
  connect(explorer_, &ExploreWorker::groups_ready, generations_, &GenerationsView::show_groups);
  connect(explorer_, &ExploreWorker::groups_ready, this,
          [](const QString& run, int step, const std::vector<ftx::GroupView>& g) {
            qInfo("generations: shown %zu groups of run '%s' at step %d", g.size(), qPrintable(run), step);
          });
  connect(explorer_, &ExploreWorker::comparison_ready, generations_, &GenerationsView::show_comparison);
  connect(explorer_, &ExploreWorker::busy_changed, generations_, &GenerationsView::set_busy);
  connect(explorer_, &ExploreWorker::latent_ready, this,
          [this](const ftx::LatentInspection& li, QString run, int step) {
            latent_->set_inspection(li, run, step);
            qInfo("latent: shown %d positions x %d bits of run '%s' at step %d", li.T, li.H, qPrintable(run), step);
            latent_text_->setText(QString::fromStdString(li.text));
          });
  connect(explorer_, &ExploreWorker::edited_ready, latent_, &LatentView::set_edited_generation);
  connect(explorer_, &ExploreWorker::compute_ready, this,
          [this](const ftx::ComputeInspection& ci, QString run, int step) {
            compute_->set_inspection(ci, run, step);
            qInfo("compute: shown %zu blocks x %d positions of run '%s' at step %d", ci.blocks.size(), ci.T,
                  qPrintable(run), step);
            compute_text_->setText(QString::fromStdString(ci.text));
          });
  connect(latent_, &LatentView::flips_changed, this, [this](const BitFlips& f) {
    if (latent_model() >= 0)
      model_worker_->request_edit(f);
    else
      explorer_->request_edit(f);
  });
  connect(lessons_, &LessonsView::coinflip_requested, explorer_, &ExploreWorker::coinflip);
  connect(lessons_, &LessonsView::kappa_lesson_requested, explorer_, [this] {
    QMetaObject::invokeMethod(explorer_, "kappa_lesson", Qt::QueuedConnection, Q_ARG(quint64, ++latent_seed_));
  });
  connect(explorer_, &ExploreWorker::coinflip_ready, lessons_, &LessonsView::show_coinflip);
  connect(explorer_, &ExploreWorker::kappa_lesson_ready, lessons_, &LessonsView::show_kappa_lesson);
  connect(explorer_, &ExploreWorker::kinds_lesson_ready, lessons_, &LessonsView::show_kinds_lesson);
  connect(lessons_, &LessonsView::kinds_generate_requested, this, &MainWindow::open_kinds_model);
  connect(explorer_, &ExploreWorker::failed, this, [this](const QString& view, const QString& message) {
    if (view == "generations")
      generations_->show_error(message);
    else if (view == "latent")
      latent_->set_message(message);
    else if (view == "compute")
      compute_->set_message(message);
    else if (view == "kinds")
      lessons_->show_kinds_error(message);
    else
      lessons_->show_error(message);
    statusBar()->showMessage(message, 8000);
    qWarning("%s: %s", qPrintable(view), qPrintable(message));
  });
  explore_thread_.start();
  QMetaObject::invokeMethod(explorer_, "kinds_lesson", Qt::QueuedConnection);  // says so when the pair is absent
}

void MainWindow::on_runs_changed(std::vector<RunSummary> runs) {
  QSettings settings;
  std::set<int64_t> alive;
  for (const RunSummary& r : runs) alive.insert(r.info.id);
  for (int64_t id : cache_.run_ids())
    if (!alive.count(id)) cache_.drop_run(id);
  benchmarks_->keep_runs({alive.begin(), alive.end()});
  runs_model_->set_runs(runs);
  for (const RunSummary& r : runs) {
    const QVariant c = settings.value("colours/" + QString::fromStdString(r.info.name));
    if (c.isValid()) runs_model_->set_colour(r.info.id, QColor(c.toString()));
  }
  QStringList all, free_runs, sweep, routed;
  QString first_synthetic;  // the first synthetic-task Free Transformer: what Generations opens on
  QString kinds_runs;       // the kinds lesson's pair and their checkpoints: a change reads them again
  const QString keep = latent_run_->currentText();
  for (const RunSummary& r : runs) {
    if (r.checkpoint_steps.empty()) continue;
    const QString name = QString::fromStdString(r.info.name);
    if (name == "kinds-free" || name == "kinds-baseline")
      kinds_runs += QString("%1@%2;").arg(name).arg(r.checkpoint_steps.back());
    all << name;
    generations_->set_steps(name, QList<int>(r.checkpoint_steps.begin(), r.checkpoint_steps.end()));
    if (r.latent_bits > 0) free_runs << name;
    if (r.routing != "–") routed << name;
    if (r.latent_bits > 0 && r.dataset == "synthetic" && runs_model_->overlaid(r.info.id)) sweep << name;
    if (r.latent_bits > 0 && r.dataset == "synthetic" && first_synthetic.isEmpty()) first_synthetic = name;
  }
  generations_->set_runs(all);
  generations_->set_sweep_runs(sweep);
  if (kinds_runs != kinds_runs_) {
    kinds_runs_ = kinds_runs;
    QMetaObject::invokeMethod(explorer_, "kinds_lesson", Qt::QueuedConnection);
  }
  fill_latent_sources(free_runs);
  const QString keep_routed = compute_run_->currentText();
  compute_run_->clear();
  compute_run_->addItems(routed);
  if (compute_run_->findText(keep_routed) >= 0) compute_run_->setCurrentText(keep_routed);
  if (keep_routed.isEmpty() && !routed.isEmpty()) inspect_compute(compute_seed_);  // the first routed run
  update_frontier();
  if (latent_run_->findText(keep) >= 0) latent_run_->setCurrentText(keep);
  if (first_runs_ && !all.isEmpty()) {  // something to look at in every view from the first frame
    first_runs_ = false;
    generations_->select_run(!first_synthetic.isEmpty() ? first_synthetic
                             : free_runs.isEmpty()      ? all.front()
                                                        : free_runs.front());
    if (!first_synthetic.isEmpty()) latent_run_->setCurrentText(first_synthetic);
    if (!free_runs.isEmpty() && latent_model() < 0) inspect_latent(latent_seed_);
    QMetaObject::invokeMethod(explorer_, "coinflip", Qt::QueuedConnection, Q_ARG(quint64, 1));
    QMetaObject::invokeMethod(explorer_, "kappa_lesson", Qt::QueuedConnection, Q_ARG(quint64, 1));
  }
}

void MainWindow::on_metrics(const MetricBatch& rows) {
  std::map<int64_t, std::vector<ftx::MetricRow>> by_run;
  for (const auto& [run, row] : rows) by_run[run].push_back(row);
  for (const auto& [run, list] : by_run) cache_.append(run, list);
  if (cache_.revision() == cache_revision_) return;
  cache_revision_ = cache_.revision();
  if (curves_->isVisible()) curves_->schedule_refresh();  // a hidden view catches up when shown
  runs_model_->refresh_values();
  update_frontier();
}

void MainWindow::on_store_error(const QString& message) {
  store_status_->setStyleSheet(message.isEmpty() ? "" : "color: #d33;");
  store_status_->setText(message.isEmpty() ? "Run store: " + opts_.db_path : message);
  if (!message.isEmpty()) qWarning("store: %s", qPrintable(message));
}

void MainWindow::update_overlay() {
  std::vector<ftx::CurveRun> runs;
  for (int64_t id : runs_model_->overlaid_ids())
    for (const RunSummary& r : runs_model_->runs())
      if (r.info.id == id)
        runs.push_back({id, QString::fromStdString(r.info.name), runs_model_->colour(id),
                        r.latent_bits > 0 ? QString::fromStdString("κ " + ftx::kappa_bits_text(r.kappa_bits)) + ", " +
                                                r.free_bits_label
                                          : QString(),
                        r.latent_bits > 0});
  curves_->set_runs(runs);  // redrawn chart by chart
  benchmarks_->set_runs(runs);
}

void MainWindow::on_session_tick() {
  const ftx::SessionSnapshot s = session_->snapshot();
  if (s.version == session_version_) return;
  session_version_ = s.version;
  train_view_->show_snapshot(s);
  session_status_->setText(s.run.empty() ? "idle"
                                         : QString("%1: %2, step %3/%4")
                                               .arg(QString::fromStdString(s.run), ftx::session_state_name(s.state))
                                               .arg(s.step)
                                               .arg(s.total_steps));
}

namespace {

constexpr int kUiBusyTimeoutMs = 200;  // a write from the UI thread waits at most this long on a lock

// The session's run can't be renamed or deleted under it.
bool session_owns(const ftx::Session& s, const QString& name) {
  const ftx::SessionSnapshot snap = s.snapshot();
  return s.busy() && QString::fromStdString(snap.run) == name;
}

}  // namespace

void MainWindow::delete_run(qint64 id, const QString& name) {
  if (session_owns(*session_, name))
    return statusBar()->showMessage("Stop run '" + name + "' before deleting it", 8000);
  auto store = ftx::RunStore::open(opts_.db_path.toStdString(), kUiBusyTimeoutMs);
  ftx::Status st = store ? store->delete_run(id) : ftx::Status(store.error());
  if (!st) return QMessageBox::warning(this, "Delete run", QString::fromStdString(st.error().message)), void();
  const std::filesystem::path db(opts_.db_path.toStdString());
  std::error_code ec;  // checkpoint files: best effort, the rows are gone already
  std::filesystem::remove_all(db.parent_path() / (db.stem().string() + ".checkpoints") / name.toStdString(), ec);
  cache_.drop_run(id);
  benchmarks_->keep_runs([&] {
    std::vector<int64_t> alive;
    for (const RunSummary& r : runs_model_->runs())
      if (r.info.id != id) alive.push_back(r.info.id);
    return alive;
  }());
  QMetaObject::invokeMethod(poller_, "poll", Qt::QueuedConnection);
  statusBar()->showMessage("Deleted run '" + name + "'", 5000);
}

void MainWindow::rename_run(qint64 id, const QString& name) {
  for (const RunSummary& r : runs_model_->runs())
    if (r.info.id == id && session_owns(*session_, QString::fromStdString(r.info.name)))
      return statusBar()->showMessage("Stop the run before renaming it", 8000);
  auto store = ftx::RunStore::open(opts_.db_path.toStdString(), kUiBusyTimeoutMs);
  ftx::Status st = store ? store->rename_run(id, name.toStdString()) : ftx::Status(store.error());
  if (!st) return statusBar()->showMessage(QString::fromStdString(st.error().message), 8000);
  QMetaObject::invokeMethod(poller_, "poll", Qt::QueuedConnection);
}

void MainWindow::inspect_latent(quint64 seed) {
  if (latent_model() >= 0) return inspect_model_latent(latent_model(), seed);
  const QString run = latent_run_->currentText();
  if (run.isEmpty())
    return latent_->set_message("No Free Transformer run (H > 0) with a checkpoint yet: train one in Train");
  QMetaObject::invokeMethod(explorer_, "inspect", Qt::QueuedConnection, Q_ARG(QString, run), Q_ARG(int, -1),
                            Q_ARG(QString, latent_text_->text()), Q_ARG(quint64, seed));
}

void MainWindow::update_frontier() {
  QString dataset = "synthetic";  // the Compute run's task, else the synthetic task
  for (const RunSummary& r : runs_model_->runs())
    if (QString::fromStdString(r.info.name) == compute_run_->currentText()) dataset = r.dataset;
  std::vector<RunSummary> same;
  for (const RunSummary& r : runs_model_->runs())
    if (r.dataset == dataset) same.push_back(r);
  std::vector<ftx::FrontierPoint> points = ftx::frontier_points(cache_, same);
  if (points.size() == frontier_->points().size() &&
      std::equal(points.begin(), points.end(), frontier_->points().begin(),
                 [](const ftx::FrontierPoint& a, const ftx::FrontierPoint& b) {
                   return a.run == b.run && a.step == b.step && a.val_ce == b.val_ce;
                 }))
    return;  // nothing new: keep the chart (and a hover) as it is
  frontier_->set_points(std::move(points), dataset);
}

void MainWindow::inspect_compute(quint64 seed) {
  const QString run = compute_run_->currentText();
  if (run.isEmpty())
    return compute_->set_message("No routed run with a checkpoint yet: train one with a router in Train (Routing)");
  QMetaObject::invokeMethod(explorer_, "compute", Qt::QueuedConnection, Q_ARG(QString, run), Q_ARG(int, -1),
                            Q_ARG(QString, compute_text_->text()), Q_ARG(quint64, seed),
                            Q_ARG(bool, compute_path_->currentIndex() == 1));
}

// Another store opens in a new studio window (a process of its own, like "open in new window"):
// this window keeps its store, its threads and any training in progress.
void MainWindow::open_database() {
  const QString path =
      QFileDialog::getOpenFileName(this, "Open run store", opts_.db_path, "Run store (*.db);;All files (*)");
  if (path.isEmpty()) return;
  if (QProcess::startDetached(QCoreApplication::applicationFilePath(), {"--db", path}))
    statusBar()->showMessage("Opened " + path + " in a new window", 5000);
  else
    QMessageBox::warning(this, "Open run store", "Could not start a new studio window for " + path);
}

void MainWindow::start_training(const QString& run, int steps) {
  train_view_->set_run_name(run);
  train_view_->set_steps(steps);
  train_view_->start();
}

void MainWindow::start_latency_probe() {
  if (latency_probe_ != nullptr) return;
  latency_probe_ = new QTimer(this);
  latency_probe_->setTimerType(Qt::PreciseTimer);
  latency_clock_.start();
  connect(latency_probe_, &QTimer::timeout, this, [this] {
    const double late = static_cast<double>(latency_clock_.restart()) - 10.0;
    worst_latency_ms_ = std::max(worst_latency_ms_, late);
  });
  latency_probe_->start(10);
}

void MainWindow::stop_latency_probe() {
  if (latency_probe_ != nullptr) latency_probe_->stop();
}

}  // namespace ftx
