// FrontierChart: validation cross-entropy against training FLOPs per predicted token, one point per
// run at its latest evaluation (docs/subjective_depth.md, "the claim in miniature"). Dense runs are
// joined by a line in FLOPs order (the compute frontier); routed runs are points, one colour per
// router, so a router below the line buys its quality for fewer FLOPs. Hovering a point names the
// run. frontier_points() picks the numbers out of the studio's metric cache: runs without
// `model/flops_per_token` (trained before it was stored) are left out.
//
// Deliberately not here: reading the store (the owner's cache), choosing which runs (the owner
// passes the runs of one dataset).
#pragma once
#include <QString>
#include <QWidget>
#include <vector>

#include "views/metric_cache.h"
#include "views/store_poller.h"

QT_BEGIN_NAMESPACE
class QChart;
class QChartView;
QT_END_NAMESPACE

namespace ftx {

struct FrontierPoint {
  QString run;
  QString router;  // "dense", or the routing column's router: "random", "mod", "sdt", "stt"
  double mflop_per_token = 0, val_ce = 0;
  int64_t step = 0;  // of the evaluation
};
// One point per run of `runs` with both model/flops_per_token and val/ce_prior in `cache`: the CE
// at the run's latest evaluation and the FLOPs stored with it.
std::vector<FrontierPoint> frontier_points(const MetricCache& cache, const std::vector<RunSummary>& runs);

class FrontierChart : public QWidget {
  Q_OBJECT

 public:
  explicit FrontierChart(QWidget* parent = nullptr);
  void set_points(std::vector<FrontierPoint> points, const QString& dataset);
  QChart* chart() const { return chart_; }
  const std::vector<FrontierPoint>& points() const { return points_; }

 private:
  QChart* chart_ = nullptr;
  QChartView* view_ = nullptr;
  std::vector<FrontierPoint> points_;
};

}  // namespace ftx
