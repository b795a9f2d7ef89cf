// MainWindow: ftx-studio's window and the studio's wiring. It owns the core objects the widgets
// must not hold (the training Session, the store poller and explorer worker threads, the metric
// cache) and connects the docks to them: Runs, Train, Curves, Generations, Latent, Lessons.
// Polls the session snapshot at 10 Hz; the store arrives through the poller's queued signals.
// Settings (geometry, dock layout, run colours) persist in QSettings between launches.
//
// Deliberately not here: drawing (each dock is its own widget), numerics (core), argument
// parsing (app/studio_main.cpp).
#pragma once
#include <QElapsedTimer>
#include <QMainWindow>
#include <QThread>
#include <map>
#include <memory>

#include "core/session/session.h"
#include "views/metric_cache.h"
#include "views/store_poller.h"

class QDockWidget;
class QLabel;
class QComboBox;
class QLineEdit;
class QTimer;
class RunListModel;
class RunsView;
class TrainView;
class GenerationsView;
class LatentView;
class LessonsView;
class ExploreWorker;
namespace ftx {
class CurvesView;
}

struct StudioOptions {
  QString db_path;
  QString view;  // dock to raise: runs|train|curves|generations|latent|lessons
  ftx::DatasetFactory datasets;
};

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(StudioOptions opts);
  ~MainWindow() override;
  bool raise_view(const QString& name);  // false for an unknown name
  bool save_view_png(const QString& path);
  void start_training(const QString& run, int steps);  // the form's settings under this name
  // Event-loop latency: the worst lateness of a 10 ms timer since the probe started.
  void start_latency_probe();
  double worst_latency_ms() const { return worst_latency_ms_; }
  int trained_steps() const { return session_->snapshot().step; }  // of the session's current run

 protected:
  void closeEvent(QCloseEvent* e) override;

 private:
  void build_docks();
  void build_menus();
  void connect_store();
  void connect_explorer();
  QWidget* build_latent_dock();
  void on_runs_changed(std::vector<RunSummary> runs);
  void on_metrics(const MetricBatch& rows);
  void on_store_error(const QString& message);
  void on_session_tick();
  void update_overlay();
  void delete_run(qint64 id, const QString& name);
  void rename_run(qint64 id, const QString& name);
  void inspect_latent(quint64 seed);
  void open_database();

  StudioOptions opts_;
  ftx::MetricCache cache_;
  std::unique_ptr<ftx::Session> session_;
  QThread poll_thread_, explore_thread_;
  StorePoller* poller_ = nullptr;
  ExploreWorker* explorer_ = nullptr;
  RunListModel* runs_model_ = nullptr;
  RunsView* runs_view_ = nullptr;
  TrainView* train_view_ = nullptr;
  ftx::CurvesView* curves_ = nullptr;
  GenerationsView* generations_ = nullptr;
  LatentView* latent_ = nullptr;
  LessonsView* lessons_ = nullptr;
  QComboBox* latent_run_ = nullptr;
  QLineEdit* latent_text_ = nullptr;
  std::map<QString, QDockWidget*> docks_;
  QLabel *store_status_ = nullptr, *session_status_ = nullptr;
  QTimer* session_timer_ = nullptr;
  uint64_t session_version_ = 0, cache_revision_ = 0;
  quint64 latent_seed_ = 1;
  bool first_runs_ = true;
  QElapsedTimer latency_clock_;
  double worst_latency_ms_ = 0;
  std::map<int64_t, std::vector<std::pair<int64_t, double>>> kappa_events_;  // run -> (step, kappa nats)
};
