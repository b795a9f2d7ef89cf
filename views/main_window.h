// MainWindow: ftx-studio's window and the studio's wiring. It owns the core objects the widgets
// must not hold (the training Session, the store poller, explorer and model worker threads, the
// metric cache) and connects the docks to them: Runs (and the opened Models), Train, Curves,
// Benchmarks, Generations (of runs and of models), Latent, Compute, Lessons.
// Polls the session snapshot at 10 Hz; the store arrives through the poller's queued signals.
// Settings (geometry, dock layout, run colours) persist in QSettings between launches.
//
// Deliberately not here: drawing (each dock is its own widget), numerics (core), argument
// parsing (app/studio_main.cpp).
#pragma once
#include <QElapsedTimer>
#include <QMainWindow>
#include <QStringList>
#include <QThread>
#include <map>
#include <memory>

#include "core/io/model_file.h"
#include "core/session/session.h"
#include "views/metric_cache.h"
#include "views/store_poller.h"

class QDockWidget;
class QLabel;
class QComboBox;
class QLineEdit;
class QTimer;
class QTabWidget;

namespace ftx {

class RunListModel;
class RunsView;
class TrainView;
class GenerationsView;
class LatentView;
class ComputeView;
class FrontierChart;
class LessonsView;
class ExploreWorker;
class ModelWorker;
class ModelsView;
class TextGenerationsView;
class CurvesView;
class BenchmarksView;

struct StudioOptions {
  QString db_path;
  QString view;  // dock to raise: runs|train|curves|benchmarks|generations|latent|compute|lessons, compute-student
                 // (the Compute dock on the student path), or figure4|kinds (a lesson)
  ftx::DatasetFactory datasets;
  QStringList open;        // model files to open at start (a checkpoint directory or a .gguf file)
  bool random_ft = false;  // also a random-weight Free Transformer with the first one's tokenizer
  QString prompt;          // generate this once the last of them is loaded
};

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(StudioOptions opts);
  ~MainWindow() override;
  // Shows a dock (runs, train, ...), or two split one above the other ("generations+latent"), or a
  // lesson: figure4 (the whole window) or kinds ("Z picks the document"); false for an unknown name.
  bool raise_view(const QString& name);
  bool save_view_png(const QString& path);
  void start_training(const QString& run, int steps);  // the form's settings under this name
  // Event-loop latency: the worst lateness of a 10 ms timer between the probe's start and stop.
  void start_latency_probe();
  void stop_latency_probe();
  double worst_latency_ms() const { return worst_latency_ms_; }
  int trained_steps() const { return session_->snapshot().step; }  // of the session's current run
  // Opens a model file (a checkpoint directory or a .gguf file) on the model worker; its id.
  int open_model(const QString& path);
  // A random-weight Free Transformer (4 layers, dim 128, H = 8) with model `tokenizer_of`'s tokenizer.
  int open_random_model(int tokenizer_of);

 protected:
  void closeEvent(QCloseEvent* e) override;

 private:
  void build_docks();
  void build_menus();
  void connect_store();
  void connect_explorer();
  QWidget* build_latent_dock();
  QWidget* build_compute_dock();
  void on_runs_changed(std::vector<RunSummary> runs);
  void on_metrics(const MetricBatch& rows);
  void on_store_error(const QString& message);
  void on_session_tick();
  void update_overlay();
  void delete_run(qint64 id, const QString& name);
  void rename_run(qint64 id, const QString& name);
  void inspect_latent(quint64 seed);
  void inspect_compute(quint64 seed);  // the Compute dock's run on its text (empty: a held-out sequence)
  void update_frontier();              // the Compute dock's chart: the runs of its run's dataset
  void open_database();
  // Model files (main_window_models.cpp).
  void connect_models();
  void connect_model_views();
  void open_model_dialog();
  void on_model_opened(int id, std::shared_ptr<const ftx::ModelInfo> info);
  void on_model_loaded(int id, double seconds);
  void on_model_failed(int id, const QString& message);
  void close_model(int id);
  void show_model_generations(int id);
  // The Latent dock on model `id`: its no-Z message for a plain decoder, else the encoder over
  // `text` (empty: the text last inspected) whose first prompt_bytes bytes are its prompt (0: none).
  // A text brings the Latent dock to the front unless `raise` is false.
  void show_model_latent(int id, const QString& text, int prompt_bytes = 0, bool raise = true);
  void inspect_model_latent(int id, quint64 seed);
  int latent_model() const;  // the model chosen in the Latent dock, -1 for a run
  void fill_latent_sources(const QStringList& free_runs);
  // The "Z picks the document" lesson's button: opens `path` as a model file (or takes the one
  // already open), then generates the lesson's groups in Generations -> Models (text) once it is
  // loaded and the view is idle.
  void open_kinds_model(const QString& path);
  void generate_kinds_lesson();

  StudioOptions opts_;
  ftx::MetricCache cache_;
  std::unique_ptr<ftx::Session> session_;
  QThread poll_thread_, explore_thread_, model_thread_;
  StorePoller* poller_ = nullptr;
  ExploreWorker* explorer_ = nullptr;
  ModelWorker* model_worker_ = nullptr;
  ModelsView* models_view_ = nullptr;
  TextGenerationsView* text_generations_ = nullptr;
  QTabWidget* generations_tabs_ = nullptr;
  std::map<int, std::shared_ptr<const ftx::ModelInfo>> models_;  // opened (headers read)
  int next_model_ = 0;
  int auto_generate_ = -1;         // the model that generates opts_.prompt once loaded
  int random_pending_ = -1;        // the model whose tokenizer a --random-ft model borrows, once loaded
  int kinds_model_ = -1;           // the model the kinds lesson opened
  int kinds_pending_ = -1;         // the model that generates the kinds lesson's groups once loaded and idle
  QString kinds_runs_;             // the kinds pair's runs and checkpoints last asked about (a change asks again)
  bool kinds_in_front_ = false;    // the running job is the kinds lesson's: Generations stays in front when it ends
  std::string latent_model_text_;  // the exact text of a model inspection (the line edit flattens it)
  int latent_model_prompt_ = 0;    // bytes of it that are a prompt (a generation's), 0: none
  quint64 latent_request_ = 0;     // the newest model inspection asked for
  QStringList latent_free_runs_;
  RunListModel* runs_model_ = nullptr;
  RunsView* runs_view_ = nullptr;
  TrainView* train_view_ = nullptr;
  CurvesView* curves_ = nullptr;
  BenchmarksView* benchmarks_ = nullptr;
  GenerationsView* generations_ = nullptr;
  LatentView* latent_ = nullptr;
  LessonsView* lessons_ = nullptr;
  QComboBox* latent_run_ = nullptr;
  QLineEdit* latent_text_ = nullptr;
  ComputeView* compute_ = nullptr;     // the Compute dock: a routed run's blocks x tokens
  FrontierChart* frontier_ = nullptr;  // and under it, CE against FLOPs across runs
  QComboBox* compute_run_ = nullptr;
  QComboBox* compute_path_ = nullptr;  // teacher | student
  QLineEdit* compute_text_ = nullptr;
  quint64 compute_seed_ = 1;
  std::map<QString, QDockWidget*> docks_;
  QLabel *store_status_ = nullptr, *session_status_ = nullptr;
  QTimer* session_timer_ = nullptr;
  uint64_t session_version_ = 0, cache_revision_ = 0;
  quint64 latent_seed_ = 1;
  bool first_runs_ = true;
  QElapsedTimer latency_clock_;
  QTimer* latency_probe_ = nullptr;
  double worst_latency_ms_ = 0;
  std::map<int64_t, std::vector<std::pair<int64_t, double>>> kappa_events_;  // run -> (step, kappa nats)
};

}  // namespace ftx
