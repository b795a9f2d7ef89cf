// StorePoller: reads the run store for the studio, on its own thread, a few times a second, and
// hands the UI what changed through queued signals. The UI thread never touches SQLite, so a
// locked or slow database cannot freeze the window. New metric and event rows are found by rowid,
// so a run trained by another process (`ftx train`) appears and grows live; benchmark values the
// same way (their rowids grow also when a step is re-evaluated), and the items behind one value on
// request. A store of an older schema is migrated once through a short-lived writer connection.
//
// Deliberately not here: caching for display (MetricCache, on the UI side), writes of any kind
// (renames and deletes go through StudioController), interpretation of the rows.
#pragma once
#include <QObject>
#include <QString>
#include <QTimer>
#include <memory>
#include <optional>
#include <vector>

#include "core/model/free_bits.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"

namespace ftx {

// One run as the Runs dock lists it.
struct RunSummary {
  ftx::RunInfo info;
  QString dataset, preset;
  int latent_bits = 0, steps = 0;
  double kappa_bits = 0;
  QString free_bits_label = ftx::free_bits_label(ftx::FreeBitsForm::PerPair);  // a row without the key: per pair
  QString routing = "–";  // a routed model's router and capacity, "sdt 0.5" (docs/subjective_depth.md)
  std::vector<int> checkpoint_steps;
  QString config_error;  // why the row's config did not read (the other fields keep their defaults)
};

// The summary of a run row: its config read by parse_run_config (core/train/run_config.h).
RunSummary summarize_run(const ftx::RunInfo& info);

using MetricBatch = std::vector<std::pair<int64_t, ftx::MetricRow>>;    // (run id, row)
using EventBatch = std::vector<std::pair<int64_t, ftx::EventRow>>;      // (run id, row)
using BenchBatch = std::vector<std::pair<int64_t, ftx::BenchmarkRow>>;  // (run id, row)
using ReferenceRows = std::vector<ftx::ReferenceRow>;
using BenchItems = std::vector<ftx::BenchItemRow>;

// At most this many items of one (run, step, task) reach the view: a bounded read and table.
inline constexpr int64_t kMaxItemsShown = 2000;

class StorePoller : public QObject {
  Q_OBJECT
 public:
  explicit StorePoller(QString db_path, int interval_ms = 250);
  ~StorePoller() override;

 public slots:
  void start();                    // call on the poller's thread (connect to QThread::started)
  void poll();                     // one round now
  void reload_run(qint64 run_id);  // re-send every metric and benchmark row of a run (after a resume)
  // Reads the items behind one benchmark point (at most kMaxItemsShown); answers items_loaded.
  void load_items(quint64 request, qint64 run_id, qint64 step, QString task);

 signals:
  void runs_changed(std::vector<RunSummary> runs);
  void metrics_arrived(MetricBatch rows);
  void events_arrived(EventBatch rows);
  void run_reset(qint64 run_id, MetricBatch rows);        // drop the run's cached curve, use these rows
  void benchmarks_arrived(BenchBatch rows);               // new or rewritten benchmark values
  void benchmarks_reset(qint64 run_id, BenchBatch rows);  // the run's whole benchmark history
  void reference_loaded(ReferenceRows rows);              // the paper's tables, once per opened store
  void items_loaded(quint64 request, qint64 run_id, qint64 step, QString task, BenchItems items, QString error);
  void store_error(QString message);  // empty: the store is readable again

 private:
  bool ensure_open();
  ftx::Status poll_runs();
  ftx::Status poll_rows();  // one round of reads; the first error ends it

  QString path_;
  int interval_ms_;
  QTimer* timer_ = nullptr;
  std::optional<ftx::RunStore> store_;
  int64_t last_metric_ = 0, last_event_ = 0, last_bench_ = 0;
  QString last_error_;
  std::string last_runs_key_;  // what was last sent, to emit runs_changed only on change
};

}  // namespace ftx

Q_DECLARE_METATYPE(ftx::RunSummary)
Q_DECLARE_METATYPE(std::vector<ftx::RunSummary>)
Q_DECLARE_METATYPE(ftx::MetricBatch)
Q_DECLARE_METATYPE(ftx::EventBatch)
Q_DECLARE_METATYPE(ftx::BenchBatch)
Q_DECLARE_METATYPE(ftx::ReferenceRows)
Q_DECLARE_METATYPE(ftx::BenchItems)
