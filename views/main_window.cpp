#include "views/main_window.h"

#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDockWidget>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <filesystem>
#include <limits>

#include "views/benchmarks_view.h"
#include "views/compute_view.h"
#include "views/curves_view.h"
#include "views/explore_worker.h"
#include "views/frontier_chart.h"
#include "views/generations_view.h"
#include "views/latent_view.h"
#include "views/lessons_view.h"
#include "views/meta_types.h"
#include "views/model_worker.h"
#include "views/models_view.h"
#include "views/run_list_model.h"
#include "views/runs_view.h"
#include "views/text_generations_view.h"
#include "views/train_view.h"

namespace ftx {

MainWindow::MainWindow(StudioOptions opts) : opts_(std::move(opts)) {
  register_view_meta_types();
  qRegisterMetaType<RunSummary>();
  qRegisterMetaType<std::vector<RunSummary>>();
  qRegisterMetaType<MetricBatch>();
  qRegisterMetaType<EventBatch>();
  qRegisterMetaType<BenchBatch>();
  qRegisterMetaType<ReferenceRows>();
  qRegisterMetaType<BenchItems>();
  qRegisterMetaType<BitFlips>();
  ModelWorker::register_meta_types();
  setWindowTitle("Free Transformer Studio — " + opts_.db_path);
  session_ = std::make_unique<ftx::Session>(opts_.datasets);
  build_docks();
  build_menus();
  store_status_ = new QLabel, session_status_ = new QLabel;
  statusBar()->addWidget(store_status_, 1);
  statusBar()->addPermanentWidget(session_status_);
  connect_store();
  connect_explorer();
  connect_models();
  session_timer_ = new QTimer(this);
  connect(session_timer_, &QTimer::timeout, this, &MainWindow::on_session_tick);
  session_timer_->start(100);
  QSettings settings;
  restoreGeometry(settings.value("window/geometry").toByteArray());
  restoreState(settings.value("window/state").toByteArray());
  if (!opts_.view.isEmpty()) raise_view(opts_.view);
}

MainWindow::~MainWindow() {
  session_.reset();                                            // stops and checkpoints a run in progress
  model_worker_->cancel(std::numeric_limits<quint64>::max());  // a generation in progress stops at its next token
  poll_thread_.quit(), explore_thread_.quit(), model_thread_.quit();
  poll_thread_.wait(), explore_thread_.wait(), model_thread_.wait();
}

void MainWindow::closeEvent(QCloseEvent* e) {
  QSettings settings;
  settings.setValue("window/geometry", saveGeometry());
  settings.setValue("window/state", saveState());
  settings.setValue("store/path", opts_.db_path);
  for (const RunSummary& r : runs_model_->runs())
    settings.setValue("colours/" + QString::fromStdString(r.info.name), runs_model_->colour(r.info.id).name());
  QMainWindow::closeEvent(e);
}

void MainWindow::build_docks() {
  runs_model_ = new RunListModel(&cache_, this);
  runs_view_ = new RunsView(runs_model_);
  train_view_ = new TrainView;
  train_view_->set_db_path(opts_.db_path);
  curves_ = new ftx::CurvesView(&cache_);
  benchmarks_ = new ftx::BenchmarksView;
  generations_ = new GenerationsView;
  text_generations_ = new TextGenerationsView;
  generations_tabs_ = new QTabWidget;
  generations_tabs_->addTab(generations_, "Runs (synthetic tasks)");
  generations_tabs_->addTab(text_generations_, "Models (text)");
  models_view_ = new ModelsView;
  auto* runs_page = new QSplitter(Qt::Vertical);
  runs_page->addWidget(runs_view_);
  runs_page->addWidget(models_view_);
  runs_page->setStretchFactor(0, 3);
  runs_page->setStretchFactor(1, 2);
  lessons_ = new LessonsView;
  auto add = [this](const QString& key, const QString& title, QWidget* w, Qt::DockWidgetArea area) {
    auto* dock = new QDockWidget(title, this);
    dock->setObjectName("dock_" + key);
    dock->setWidget(w);
    addDockWidget(area, dock);
    docks_[key] = dock;
    return dock;
  };
  QDockWidget* runs = add("runs", "Runs", runs_page, Qt::LeftDockWidgetArea);
  tabifyDockWidget(runs, add("train", "Train", train_view_, Qt::LeftDockWidgetArea));
  QDockWidget* curves = add("curves", "Curves", curves_, Qt::RightDockWidgetArea);
  for (auto [key, title, w] :
       {std::tuple{"benchmarks", "Benchmarks", static_cast<QWidget*>(benchmarks_)},
        std::tuple{"generations", "Generations", static_cast<QWidget*>(generations_tabs_)},
        std::tuple{"latent", "Latent", build_latent_dock()}, std::tuple{"compute", "Compute", build_compute_dock()},
        std::tuple{"lessons", "Lessons", static_cast<QWidget*>(lessons_)}})
    tabifyDockWidget(curves, add(key, title, w, Qt::RightDockWidgetArea));
  setCentralWidget(nullptr);
  setDockNestingEnabled(true);
  resizeDocks({runs, curves}, {480, 900}, Qt::Horizontal);
  runs->raise(), curves->raise();

  connect(runs_model_, &RunListModel::overlay_changed, this, &MainWindow::update_overlay);
  connect(runs_model_, &RunListModel::rename_requested, this, &MainWindow::rename_run);
  connect(runs_view_, &RunsView::delete_requested, this, &MainWindow::delete_run);
  connect(runs_view_, &RunsView::open_generations, this, [this](const QString& run) {
    raise_view("generations");
    generations_tabs_->setCurrentWidget(generations_);
    generations_->select_run(run);
  });
  connect(runs_view_, &RunsView::open_latent, this, [this](const QString& run) {
    raise_view("latent");
    if (latent_run_->findText(run) < 0)
      return latent_->set_message("Run '" + run + "' has no latent to inspect (H = 0) or no checkpoint yet");
    latent_run_->setCurrentText(run);
    inspect_latent(latent_seed_);
  });
  connect(train_view_, &TrainView::start_requested, this, [this](std::vector<ftx::TrainRequest> reqs) {
    if (ftx::Status st = session_->start(std::move(reqs)); !st)
      train_view_->show_error(QString::fromStdString(st.error().message));
  });
  connect(train_view_, &TrainView::pause_requested, this, [this] { session_->pause(); });
  connect(train_view_, &TrainView::resume_requested, this, [this] { session_->resume(); });
  connect(train_view_, &TrainView::stop_requested, this, [this] { session_->stop(); });
  connect(train_view_, &TrainView::step_requested, this, [this] { session_->step_once(); });
  connect(train_view_, &TrainView::kappa_requested, this, [this](float k) { session_->set_kappa(k); });
}

QWidget* MainWindow::build_latent_dock() {
  auto* page = new QWidget;
  latent_run_ = new QComboBox;
  latent_run_->setMinimumContentsLength(18);
  latent_text_ = new QLineEdit;
  latent_text_->setPlaceholderText("sequence to inspect (empty: a held-out sequence of the run's task)");
  auto* inspect = new QPushButton("Inspect");
  auto* next = new QPushButton("New sequence");
  latent_ = new LatentView;
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel("Source"));
  bar->addWidget(latent_run_);
  bar->addWidget(latent_text_, 1);
  bar->addWidget(inspect);
  bar->addWidget(next);
  auto* layout = new QVBoxLayout(page);
  layout->addLayout(bar);
  layout->addWidget(latent_, 1);
  connect(inspect, &QPushButton::clicked, this, [this] { inspect_latent(latent_seed_); });
  connect(next, &QPushButton::clicked, this, [this] {
    latent_text_->clear();
    inspect_latent(++latent_seed_);
  });
  connect(latent_, &LatentView::resample_requested, this, [this] { inspect_latent(++latent_seed_); });
  return page;
}

QWidget* MainWindow::build_compute_dock() {
  auto* page = new QWidget;
  compute_run_ = new QComboBox;
  compute_run_->setObjectName("compute_run");
  compute_run_->setMinimumContentsLength(18);
  compute_text_ = new QLineEdit;
  compute_text_->setPlaceholderText("sequence to run (empty: a held-out sequence of the run's task)");
  compute_path_ = new QComboBox;
  compute_path_->setObjectName("compute_path");
  compute_path_->addItems({"teacher", "student"});
  compute_path_->setToolTip(
      "Who chooses the tokens: the teacher (training's choice: top-k over the whole sequence, or threshold "
      "mode) or the student router (causal, what generation would run)");
  auto* inspect = new QPushButton("Inspect");
  auto* next = new QPushButton("New sequence");
  compute_ = new ComputeView;
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel("Routed run"));
  bar->addWidget(compute_run_);
  bar->addWidget(compute_text_, 1);
  bar->addWidget(compute_path_);
  bar->addWidget(inspect);
  bar->addWidget(next);
  frontier_ = new FrontierChart;
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(compute_);
  split->addWidget(frontier_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  auto* layout = new QVBoxLayout(page);
  layout->addLayout(bar);
  layout->addWidget(split, 1);
  connect(inspect, &QPushButton::clicked, this, [this] { inspect_compute(compute_seed_); });
  connect(next, &QPushButton::clicked, this, [this] {
    compute_text_->clear();
    inspect_compute(++compute_seed_);
  });
  connect(compute_run_, &QComboBox::textActivated, this, [this] {
    inspect_compute(compute_seed_);
    update_frontier();
  });
  connect(compute_path_, &QComboBox::currentIndexChanged, this, [this] { inspect_compute(compute_seed_); });
  return page;
}

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("Open &model… (.gguf file or checkpoint directory)", QKeySequence::Open, this,
                  &MainWindow::open_model_dialog);
  file->addAction("New &random Free Transformer (selected model's tokenizer)", this,
                  [this] { open_random_model(models_view_->current_model()); });
  file->addAction("Open run &store…", this, &MainWindow::open_database);
  file->addAction("Save view as &PNG…", this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, "Save view", "view.png", "PNG (*.png)");
    if (!path.isEmpty() && !save_view_png(path)) QMessageBox::warning(this, "Save view", "Could not write " + path);
  });
  file->addSeparator();
  file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);
  QMenu* view = menuBar()->addMenu("&View");
  for (const auto& [key, dock] : docks_) view->addAction(dock->toggleViewAction());
}

bool MainWindow::raise_view(const QString& name) {
  if (name == "figure4") {  // the Figure 4 lesson, four panels side by side in the whole window
    lessons_->show_figure4_tab();
    docks_.at("runs")->hide(), docks_.at("train")->hide();  // back from the View menu
    return raise_view("lessons");
  }
  if (name == "kinds") {  // the "Z picks the document" lesson
    lessons_->show_kinds_tab();
    return raise_view("lessons");
  }
  if (name == "compute-student") {  // the Compute dock on the student router's path
    compute_path_->setCurrentIndex(1);
    return raise_view("compute");
  }
  // "generations+latent": the second dock split off below the first, both shown.
  const QStringList parts = name.split('+');
  std::vector<QDockWidget*> docks;
  for (const QString& part : parts) {
    auto it = docks_.find(part);
    if (it == docks_.end() || parts.size() > 2) return false;
    docks.push_back(it->second);
  }
  if (docks.size() == 2 && docks[0] != docks[1]) {
    // Out of its tab group, then back into the first one's area below what is there
    // (splitDockWidget would only add it as another tab of a tabbed dock).
    removeDockWidget(docks[1]);
    addDockWidget(dockWidgetArea(docks[0]), docks[1], Qt::Vertical);
    resizeDocks({docks[0], docks[1]}, {1, 1}, Qt::Vertical);
  }
  for (QDockWidget* dock : docks) dock->show(), dock->raise();
  return true;
}

bool MainWindow::save_view_png(const QString& path) { return grab().save(path); }

}  // namespace ftx
