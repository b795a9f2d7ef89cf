// BenchmarksView: the Benchmarks dock. Small multiples, one chart per task, of a metric (the
// task's main metric, another from the chart's combo) against the checkpoint step or the training
// tokens, for every overlaid run in its colour, with +-1 standard error bars and the paper's values
// (core/store reference table, through the task's paper name and metric) as labelled horizontal
// lines; a table of each run's latest value per task; and the items behind a point: clicking it
// asks the owner for that step's items (items_requested) and lists them (verdict, generation),
// the selected one in full (prompt, generation, target, detail).
// Deliberately not here: reading the store (the owner's StorePoller tails benchmark rows into
// add_rows and answers items_requested off the UI thread), run selection and colours (set_runs,
// from the Runs dock like the Curves dock), numerics (values are drawn as stored).
#pragma once
#include <QString>
#include <QStringList>
#include <QWidget>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "views/curves_view.h"
#include "views/store_poller.h"

class QComboBox;
class QLabel;
class QPlainTextEdit;
class QGridLayout;
class QTableWidget;

namespace ftx {

class BenchChart;

class BenchmarksView : public QWidget {
  Q_OBJECT

 public:
  explicit BenchmarksView(QWidget* parent = nullptr);
  ~BenchmarksView() override;

  void set_runs(const std::vector<CurveRun>& runs);  // overlaid runs, in drawing order
  void add_rows(const BenchBatch& rows);             // new values; a row of a known key replaces it
  void reset_run(int64_t run_id, const BenchBatch& rows);
  void keep_runs(const std::vector<int64_t>& alive);  // forget runs that left the store
  void set_reference(const ReferenceRows& rows);
  // The answer to items_requested; answers to an older request than the last are ignored.
  void show_items(quint64 request, qint64 run_id, qint64 step, const QString& task, const BenchItems& items,
                  const QString& error);
  void refresh();  // redraw now (add_rows and the controls schedule it)

  // What a click on a point does (and what tests call): select (task, run, step), ask for items.
  void select_point(const QString& task, int64_t run_id, int64_t step);
  void set_x_tokens(bool tokens);
  bool set_metric(const QString& task, const QString& metric);  // false: no such metric stored
  QStringList tasks() const;                                    // charted tasks, in order
  size_t error_bars(const QString& task) const;                 // bars drawn on a task's chart (tests)

 signals:
  void items_requested(quint64 request, qint64 run_id, qint64 step, QString task);

 private:
  using Series = std::map<int64_t, BenchmarkRow>;  // by step
  friend class BenchChart;
  void schedule_refresh();
  void rebuild_grid(const QStringList& tasks);
  void update_latest_table(const QStringList& tasks);
  void update_run_legend();
  void show_item_detail(int row);
  const Series* series(int64_t run_id, const std::string& task, const std::string& metric) const;
  std::vector<std::string> metrics_of(const std::string& task) const;  // over the overlaid runs
  std::string metric_for(const std::string& task) const;               // chosen or main metric
  QString run_name(int64_t run_id) const;

  // run -> (task, metric) -> step -> row
  std::map<int64_t, std::map<std::pair<std::string, std::string>, Series>> data_;
  std::vector<CurveRun> runs_;
  ReferenceRows reference_;
  std::map<std::string, std::string> chosen_metric_;  // task -> metric picked in its combo
  bool x_tokens_ = false;
  bool refresh_pending_ = false;
  quint64 request_ = 0;
  QString selected_task_;  // the point whose items are listed, ringed on its chart
  int64_t selected_run_ = -1, selected_step_ = -1;
  BenchItems items_;

  QComboBox* x_axis_ = nullptr;
  QComboBox* paper_ = nullptr;
  QLabel* run_legend_ = nullptr;
  QLabel* empty_label_ = nullptr;
  QWidget* grid_box_ = nullptr;
  QGridLayout* grid_ = nullptr;
  std::vector<std::unique_ptr<BenchChart>> charts_;
  QStringList chart_tasks_;
  QTableWidget* latest_ = nullptr;
  QLabel* items_title_ = nullptr;
  QTableWidget* items_table_ = nullptr;
  QPlainTextEdit* item_text_ = nullptr;
};

}  // namespace ftx
