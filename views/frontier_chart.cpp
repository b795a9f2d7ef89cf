#include "views/frontier_chart.h"

#include <QToolTip>
#include <QVBoxLayout>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QLegendMarker>
#include <QtCharts/QLineSeries>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QValueAxis>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace ftx {
namespace {

// One colour per router, the dense line in dark grey.
QColor router_colour(const QString& router) {
  static const std::map<QString, QColor> colours = {{"dense", QColor(60, 60, 60)},
                                                    {"random", QColor(150, 150, 150)},
                                                    {"mod", QColor(60, 110, 200)},
                                                    {"sdt", QColor(220, 90, 60)},
                                                    {"stt", QColor(60, 160, 100)}};
  auto it = colours.find(router);
  return it == colours.end() ? QColor(120, 80, 160) : it->second;
}

}  // namespace

std::vector<FrontierPoint> frontier_points(const MetricCache& cache, const std::vector<RunSummary>& runs) {
  std::vector<FrontierPoint> out;
  for (const RunSummary& r : runs) {
    const Series* flops = cache.series(r.info.id, "model/flops_per_token");
    const Series* ce = cache.series(r.info.id, "val/ce_prior");
    if (!flops || !ce || flops->x.empty() || ce->x.empty()) continue;
    FrontierPoint p;
    p.run = QString::fromStdString(r.info.name);
    p.router = r.routing == "–" ? QString("dense") : r.routing.section(' ', 0, 0);
    p.step = int64_t(ce->x.back()), p.val_ce = ce->y.back();
    p.mflop_per_token = flops->y.back() / 1e6;
    if (std::isfinite(p.val_ce) && std::isfinite(p.mflop_per_token)) out.push_back(p);
  }
  return out;
}

FrontierChart::FrontierChart(QWidget* parent) : QWidget(parent) {
  setObjectName("frontier");
  chart_ = new QChart;
  chart_->setTitle("Validation CE against training FLOPs per token");
  chart_->legend()->setAlignment(Qt::AlignRight);
  view_ = new QChartView(chart_);
  view_->setRenderHint(QPainter::Antialiasing);
  view_->setMinimumHeight(220);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(view_);
  set_points({}, {});
}

void FrontierChart::set_points(std::vector<FrontierPoint> points, const QString& dataset) {
  points_ = std::move(points);
  chart_->removeAllSeries();
  for (QAbstractAxis* a : chart_->axes()) chart_->removeAxis(a), delete a;
  chart_->setTitle(points_.empty() ? "Validation CE against training FLOPs per token: no run of " +
                                         (dataset.isEmpty() ? QString("this task") : dataset) +
                                         " has both (runs trained before FLOPs were stored have none)"
                                   : "Validation CE against training FLOPs per token, " + dataset +
                                         " runs at their latest evaluation (dense runs: the line)");
  if (points_.empty()) return;
  auto *x = new QValueAxis, *y = new QValueAxis;
  x->setTitleText("MFLOP per predicted token (training)");
  y->setTitleText("val CE (nats)");
  x->setLabelFormat("%.3g"), y->setLabelFormat("%.4g");
  chart_->addAxis(x, Qt::AlignBottom);
  chart_->addAxis(y, Qt::AlignLeft);
  std::map<QString, std::vector<const FrontierPoint*>> by_router;
  for (const FrontierPoint& p : points_) by_router[p.router].push_back(&p);
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (auto& [router, list] : by_router) {
    std::sort(list.begin(), list.end(),
              [](const FrontierPoint* a, const FrontierPoint* b) { return a->mflop_per_token < b->mflop_per_token; });
    const QColor colour = router_colour(router);
    auto* dots = new QScatterSeries;
    dots->setName(router);
    dots->setColor(colour);
    dots->setBorderColor(colour.darker(130));
    dots->setMarkerSize(router == "dense" ? 7.0 : 9.0);
    QLineSeries* line = nullptr;
    if (router == "dense") {
      line = new QLineSeries;
      line->setPen(QPen(colour, 1.5));
      chart_->addSeries(line);
      line->attachAxis(x), line->attachAxis(y);
      chart_->legend()->markers(line).front()->setVisible(false);
    }
    for (const FrontierPoint* p : list) {
      dots->append(p->mflop_per_token, p->val_ce);
      if (line) line->append(p->mflop_per_token, p->val_ce);
      x_lo = std::min(x_lo, p->mflop_per_token), x_hi = std::max(x_hi, p->mflop_per_token);
      y_lo = std::min(y_lo, p->val_ce), y_hi = std::max(y_hi, p->val_ce);
    }
    chart_->addSeries(dots);
    dots->attachAxis(x), dots->attachAxis(y);
    const std::vector<const FrontierPoint*> named = list;
    connect(dots, &QScatterSeries::hovered, this, [this, named](const QPointF& at, bool on) {
      if (!on) return QToolTip::hideText();
      for (const FrontierPoint* p : named)
        if (std::abs(p->mflop_per_token - at.x()) < 1e-9 && std::abs(p->val_ce - at.y()) < 1e-9)
          return QToolTip::showText(QCursor::pos(),
                                    QString("%1 (%2): CE %3 at step %4, %5 MFLOP per token")
                                        .arg(p->run, p->router)
                                        .arg(p->val_ce, 0, 'f', 4)
                                        .arg(p->step)
                                        .arg(p->mflop_per_token, 0, 'f', 3),
                                    this);
    });
  }
  const double dx = std::max(1e-3, (x_hi - x_lo) * 0.08), dy = std::max(1e-4, (y_hi - y_lo) * 0.1);
  x->setRange(std::max(0.0, x_lo - dx), x_hi + dx);
  y->setRange(y_lo - dy, y_hi + dy);
}

}  // namespace ftx
