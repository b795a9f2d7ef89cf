// CurvesView: the Curves dock. A grid of Qt Charts, three a row (cross-entropy, KL with the kappa
// line, loss, learning rate, tokens/s, synthetic-task agreement, and routing: a routed run's mean
// gate, its two surprise parts and the gates' event AUROCs) overlaying several runs, one colour per
// run and one line style per metric key; optional debiased EMA smoothing (raw drawn faint under
// it), log y, rubber-band / wheel / drag / arrow-key zoom and pan, a hover read-out, PNG and CSV
// export. Reads a MetricCache the owner fills; refresh() redraws only what changed and hands Qt
// Charts at most 4 * 1000 + 2 points per series (min/max downsampling of the visible x-range).
// Deliberately not here: reading the store (the owner tails it into the cache and calls
// refresh()), run selection (set_runs), OpenGL series (they drop dash patterns, which the kappa
// line and the key styles need, and the downsampled point counts do not need them).
#pragma once
#include <QColor>
#include <QString>
#include <QWidget>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

class QCheckBox;
class QLabel;
class QSlider;
class QTimer;
class QVBoxLayout;

namespace ftx {

class MetricCache;
class CurvePanel;

struct CurveRun {
  int64_t id = 0;
  QString name;
  QColor color;
  QString note = {};   // after the name in the run legend: kappa and the free-bits form of a Free Transformer
  bool latent = true;  // the run has a latent Z: false hides its kappa line (a plain decoder has no free bits)
};

class CurvesView : public QWidget {
  Q_OBJECT

 public:
  // `cache` must outlive the view; it is only read, in refresh() and the exports.
  explicit CurvesView(const MetricCache* cache, QWidget* parent = nullptr);
  ~CurvesView() override;

  // The runs to overlay, in drawing order (later on top). Zoom states are kept.
  void set_runs(const std::vector<CurveRun>& runs);
  // Steps where kappa was changed live and the new kappa in nats (the unit of the `kappa` key),
  // drawn as dots on the KL chart in the run's colour. Replaces the run's earlier list.
  void set_events(int64_t run_id, const std::vector<std::pair<int64_t, double>>& kappa_changes);
  // Re-reads the cache. Cheap when nothing changed; a chart at auto range follows new data, a
  // zoomed chart keeps its range and re-downsamples only series whose data changed.
  void refresh();
  // The same, one chart per turn of the event loop: Qt Charts lays out and paints each chart in
  // its own events, so seven charts redrawn at once would hold the UI thread for one long stretch
  // (60 ms measured with a live run on two cores). What a live run and user actions call.
  void schedule_refresh();
  bool save_png(const QString& path);  // the charts and the run legend, as shown
  bool save_csv(const QString& path);  // run,key,step,value: every cached series of the shown runs

 private:
  void build_toolbar(QVBoxLayout* layout);
  void build_charts(QVBoxLayout* layout);
  void showEvent(QShowEvent* e) override;  // a hidden view is not refreshed: it catches up here
  void schedule_refresh(size_t panel);     // one chart (its zoom or size changed)
  void post_refresh();
  void refresh_next_stale();
  void update_run_legend();
  void update_alpha_label();
  void choose_and_save_png();
  void choose_and_save_csv();

  const MetricCache* cache_;
  std::vector<CurveRun> runs_;
  std::vector<std::unique_ptr<CurvePanel>> panels_;
  QCheckBox* smooth_box_ = nullptr;
  QSlider* alpha_slider_ = nullptr;
  QLabel* alpha_label_ = nullptr;
  QCheckBox* log_box_ = nullptr;
  QWidget* charts_box_ = nullptr;
  QLabel* run_legend_ = nullptr;
  QLabel* hover_label_ = nullptr;
  std::vector<char> stale_;  // per panel: new data or options since it was last refreshed
  size_t next_panel_ = 0;    // where the round robin of refresh_next_stale() goes on
  QTimer* refresh_timer_ = nullptr;
};

}  // namespace ftx
