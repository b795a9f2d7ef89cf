// CurvesView (see curves_view.h). Three parts: CurveChartView (mouse and keys: rubber band, wheel
// zoom, right/middle-drag pan), CurvePanel (one chart: its series, axes, zoom state and what was
// last drawn) and CurvesView (toolbar, grid, legend of runs, exports).
// A series is redrawn only when its RenderKey changes: the cache revision of its data, the x-range,
// the bucket count (the plot's width in pixels), smoothing or the log flag. At auto range the x
// axis snaps outward to 1-2-5 steps, so a live run changes the range (and redraws every run) only
// when it crosses a step, not on every refresh.
#include "views/curves_view.h"

#include <QApplication>
#include <QCheckBox>
#include <QFile>
#include <QFileDialog>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLegendMarker>
#include <QLineF>
#include <QMessageBox>
#include <QMouseEvent>
#include <QPixmap>
#include <QPushButton>
#include <QScrollArea>
#include <QSlider>
#include <QTextStream>
#include <QTimer>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QLineSeries>
#include <QtCharts/QLogValueAxis>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QValueAxis>
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "views/curve_data.h"
#include "views/metric_cache.h"

namespace ftx {

namespace {

constexpr double kLn2 = 0.69314718055994530942;  // nats per bit
constexpr int kMinBuckets = 200;                 // before the first layout the plot is 0 pixels wide
constexpr int kMaxBuckets = 1000;                // so at most 4 * 1000 + 2 points per series reach Qt Charts
constexpr double kYPad = 0.04;                   // auto range: this fraction of the span above and below
constexpr double kLogYPad = 1.2;                 // the same on a log axis, as a factor
constexpr double kXDivisions = 5;                // auto x snaps to a 1-2-5 step of about span / 5
constexpr double kMinTickSpacingPx = 64;         // a narrow chart gets fewer ticks: "12000" fits whole
constexpr double kWheelStep = 1.25;              // zoom factor per wheel notch
constexpr double kKeyPan = 0.1;                  // arrow keys pan by this fraction of the plot
constexpr int kFaintAlpha = 70;                  // the raw curve under its EMA
constexpr double kHoverRadiusPx = 40;
constexpr int kLegendRunsMax = 40;
// Past this many drawn lines a chart is painted without antialiasing: 100 runs at a few thousand
// points each paint in about 2/3 of the time, and overlaid that densely the smoothing is not seen.
constexpr int kAntialiasMaxLines = 24;  // the run legend names this many, then "and N more"
constexpr int kGridColumns = 3;
constexpr size_t kMarkedPointsMax = 8;  // a series this short also shows its points
constexpr size_t kLegendRowMax = 3;
constexpr double kLegendFontScale = 0.85;  // six line-style keys fit under a 280-pixel chart
constexpr QSize kMinChartSize(240, 230);   // pixels; below this the axis labels crowd the plot out
constexpr double kDefaultAlpha = 0.6;      // TensorBoard's default smoothing weight
constexpr int kAlphaSteps = 99;            // the slider: alpha = value / 100, at most 0.99
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct KeySpec {
  std::string key;
  Qt::PenStyle style;
  bool smooth;         // schedules (lr, kappa) are drawn as they are
  QString label = {};  // the chart legend's name for the key, when the key itself is too long
};

struct ChartSpec {
  QString title, y_title;
  std::vector<KeySpec> keys;
  bool kappa_events = false;
  bool fraction = false;  // values in [0, 1]: the y axis shows at least that range
};

std::vector<ChartSpec> chart_specs() {
  return {
      {"Cross-entropy",
       "nats per token",
       {{"train/ce", Qt::SolidLine, true, "train"},
        {"val/ce_prior", Qt::DashLine, true, "val, Z prior"},
        {"val/ce_posterior", Qt::DotLine, true, "val, Z post."}}},
      {"KL and kappa",
       "nats (1 bit = ln 2 = 0.693 nats)",
       {{"train/kl", Qt::SolidLine, true, "train"},
        {"val/kl", Qt::DotLine, true, "val"},
        {"kappa", Qt::DashLine, false, "κ"}},
       true},
      {"Loss",
       "nats per token",
       {{"train/loss", Qt::SolidLine, true, "loss"},
        {"train/kl_excess", Qt::DotLine, true, "free-bits term (the KL penalised)"}}},
      {"Learning rate", "lr", {{"lr", Qt::SolidLine, false}}},
      {"Tokens/s", "tokens per second", {{"perf/tokens_per_s", Qt::SolidLine, true}}},
      {"Synthetic task",
       "fraction",
       {{"synth/valid", Qt::SolidLine, true, "valid"},
        {"synth/agree_fixed", Qt::DashLine, true, "agree, Z"},
        {"synth/agree_fixed_late", Qt::CustomDashLine, true, "late, Z"},
        {"synth/agree_indep", Qt::DotLine, true, "agree"},
        {"synth/noise_agree_fixed", Qt::DashDotLine, true, "noise, Z"},
        {"synth/noise_agree_indep", Qt::DashDotDotLine, true, "noise"}},
       false,
       true},
      {"Routing",
       "gate, s_ce, s_cu, AUROC",
       {{"route/gate", Qt::SolidLine, true, "gate"},
        {"route/s_ce", Qt::DashLine, true, "s_ce"},
        {"route/s_cu", Qt::DotLine, true, "s_cu"},
        {"route/auroc/start", Qt::DashDotLine, true, "AUROC start"},
        {"route/auroc/noise", Qt::DashDotDotLine, true, "AUROC noise"}},
       false,
       true},
      {"Routed share: teacher and student",
       "share of tokens",
       {{"route/capacity", Qt::SolidLine, true, "teacher"},
        {"route/student/capacity", Qt::DashLine, true, "student"},
        {"route/student/agree", Qt::DotLine, true, "agree"},
        {"route/student/recall", Qt::DashDotLine, true, "recall"}},
       false,
       true},
  };
}

// The smallest 1, 2 or 5 times a power of ten that is >= v (v > 0).
double nice_step(double v) {
  const double mag = std::pow(10.0, std::floor(std::log10(v)));
  const double r = v / mag;
  return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * mag;
}

// Steps are integers: their ticks are at least 1 apart. `divisions`: about how many intervals.
double tick_interval(double span, bool steps, double divisions) {
  const double step = nice_step(span / divisions);
  return steps ? std::max(1.0, step) : step;
}

std::pair<double, double> snap_outward(double lo, double hi, double divisions) {
  if (!(hi > lo)) return {lo - 1, hi + 1};
  const double step = nice_step((hi - lo) / divisions);
  return {std::floor(lo / step) * step, std::ceil(hi / step) * step};
}

QList<QPointF> to_points(const Series& s) {
  QList<QPointF> out;
  out.reserve(static_cast<qsizetype>(s.x.size()));
  for (size_t i = 0; i < s.x.size(); ++i) out.append(QPointF(s.x[i], s.y[i]));
  return out;
}

// Qt::CustomDashLine is drawn as long dashes with short gaps (the late-target agreement).
QPen make_pen(const QColor& color, double width, Qt::PenStyle style) {
  QPen pen(color, width, style);
  pen.setCapStyle(Qt::FlatCap);
  if (style == Qt::CustomDashLine) pen.setDashPattern({8, 2});
  return pen;
}

bool is_nats_key(const std::string& key) {
  return key == "train/kl" || key == "val/kl" || key == "kappa" || key == "train/kl_excess";
}

QString csv_field(const QString& s) {
  if (!s.contains(',') && !s.contains('"') && !s.contains('\n')) return s;
  return '"' + QString(s).replace("\"", "\"\"") + '"';
}

// What a series shows now; it is redrawn when any of this changes.
struct RenderKey {
  uint64_t revision = 0;  // MetricCache revisions start at 1, so a default key never matches
  double x_lo = 0, x_hi = 0;
  int buckets = 0;
  bool smooth = false;
  double alpha = 0;
  bool log_y = false;
  bool operator==(const RenderKey&) const = default;
};

struct DisplayOptions {
  bool smooth = false;
  double alpha = kDefaultAlpha;
  bool log_y = false;
};

// One (run, key) of a chart. Its series are created when the cache first has data for it.
struct CurveLine {
  CurveRun run;
  const KeySpec* spec = nullptr;
  QLineSeries* raw = nullptr;
  QLineSeries* smooth = nullptr;  // only for keys with spec->smooth
  RenderKey drawn;
  std::vector<double> ema;  // (n,) the smoothed cache series, for ema_revision and ema_alpha
  uint64_t ema_revision = 0;
  double ema_alpha = -1;
  size_t nonpositive = 0;  // points <= 0 in the cache series, for count_revision
  uint64_t count_revision = 0;
  double shown_lo = kNaN, shown_hi = kNaN;  // y extent of the drawn points inside the x-range
};

// The chart view: left-drag rubber band (Qt's), wheel zoom around the cursor (shift: x only),
// right/middle-drag pan, arrow keys pan, +/- zoom, double-click resets. Reports hover positions.
class CurveChartView : public QChartView {
 public:
  explicit CurveChartView(QChart* chart) : QChartView(chart) {
    setRubberBand(QChartView::RectangleRubberBand);
    setRenderHint(QPainter::Antialiasing);
    setMouseTracking(true);
    viewport()->setMouseTracking(true);
    setFocusPolicy(Qt::WheelFocus);
    setMinimumSize(kMinChartSize);
  }
  std::function<void(QPoint)> on_hover;
  std::function<void()> on_leave, on_reset;
  std::function<void()> on_user_zoom;  // the user changed an axis range (zoom or pan)

 protected:
  void mousePressEvent(QMouseEvent* e) override {
    if (e->button() != Qt::RightButton && e->button() != Qt::MiddleButton) return QChartView::mousePressEvent(e);
    panning_ = true;
    last_ = e->position().toPoint();
    e->accept();
  }
  void mouseMoveEvent(QMouseEvent* e) override {
    const QPoint p = e->position().toPoint();
    if (panning_) {
      user_change([&] { chart()->scroll(last_.x() - p.x(), p.y() - last_.y()); });
      last_ = p;
    }
    if (on_hover) on_hover(p);
    QChartView::mouseMoveEvent(e);
  }
  void mouseReleaseEvent(QMouseEvent* e) override {
    // Qt's rubber band zooms out on a right click; here the right button pans.
    if (e->button() != Qt::RightButton && e->button() != Qt::MiddleButton) {
      return user_change([&] { QChartView::mouseReleaseEvent(e); });  // the rubber band zooms here
    }
    panning_ = false;
    e->accept();
  }
  void mouseDoubleClickEvent(QMouseEvent* e) override {
    if (on_reset) on_reset();
    e->accept();
  }
  void wheelEvent(QWheelEvent* e) override {
    e->accept();
    const double notches = e->angleDelta().y() / 120.0;
    const QRectF plot = chart()->plotArea();
    const QPointF c = chart()->mapFromScene(mapToScene(e->position().toPoint()));
    if (notches == 0 || !plot.contains(c)) return;
    const double fx = std::pow(kWheelStep, notches);
    const double fy = (e->modifiers() & Qt::ShiftModifier) ? 1.0 : fx;
    user_change([&] {
      chart()->zoomIn(QRectF(c.x() - (c.x() - plot.left()) / fx, c.y() - (c.y() - plot.top()) / fy, plot.width() / fx,
                             plot.height() / fy));
    });
  }
  void keyPressEvent(QKeyEvent* e) override {
    if (e->key() == Qt::Key_0 || e->key() == Qt::Key_Home) {
      if (on_reset) on_reset();
      return e->accept();
    }
    bool handled = false;
    user_change([&] { handled = pan_or_zoom_key(e->key()); });
    if (!handled) return QChartView::keyPressEvent(e);
    e->accept();
  }
  void leaveEvent(QEvent* e) override {
    if (on_leave) on_leave();
    QChartView::leaveEvent(e);
  }

 private:
  bool pan_or_zoom_key(int key) {
    const QRectF plot = chart()->plotArea();
    switch (key) {
      case Qt::Key_Left:
        chart()->scroll(-plot.width() * kKeyPan, 0);
        break;
      case Qt::Key_Right:
        chart()->scroll(plot.width() * kKeyPan, 0);
        break;
      case Qt::Key_Up:
        chart()->scroll(0, plot.height() * kKeyPan);
        break;
      case Qt::Key_Down:
        chart()->scroll(0, -plot.height() * kKeyPan);
        break;
      case Qt::Key_Plus:
      case Qt::Key_Equal:
        chart()->zoom(kWheelStep);
        break;
      case Qt::Key_Minus:
        chart()->zoom(1.0 / kWheelStep);
        break;
      default:
        return false;
    }
    return true;
  }
  // Every axis range, to tell whether an input event zoomed or panned. Qt also moves the ranges
  // itself (attaching series), so the axes' rangeChanged signals cannot say who did it.
  std::vector<double> ranges() const {
    std::vector<double> out;
    for (QAbstractAxis* a : chart()->axes()) {
      if (auto* v = qobject_cast<QValueAxis*>(a)) out.insert(out.end(), {v->min(), v->max()});
      if (auto* l = qobject_cast<QLogValueAxis*>(a)) out.insert(out.end(), {l->min(), l->max()});
    }
    return out;
  }
  void user_change(const std::function<void()>& f) {
    const std::vector<double> before = ranges();
    f();
    if (ranges() != before && on_user_zoom) on_user_zoom();
  }
  bool panning_ = false;
  QPoint last_;
};

}  // namespace

// One chart of the grid.
class CurvePanel {
 public:
  CurvePanel(ChartSpec spec, const MetricCache* cache);
  ~CurvePanel() {
    context_.reset();  // no signal of the dying chart may reach this panel
    delete view_;      // takes the chart, its series and axes with it
  }
  CurveChartView* view() const { return view_; }
  void set_runs(const std::vector<CurveRun>& runs);
  void set_events(int64_t run_id, std::vector<std::pair<int64_t, double>> events);
  void refresh(const DisplayOptions& opt);
  void reset_zoom() { auto_ = true; }
  QString hover_text(QPoint view_pos, const DisplayOptions& opt);
  std::function<void()> on_needs_refresh;  // the owner schedules a refresh (zoom, resize)

 private:
  struct EventSet {
    std::vector<std::pair<int64_t, double>> points;  // (step, kappa in nats)
    QScatterSeries* series = nullptr;
    bool dirty = true;
  };
  void attach(QXYSeries* s, bool in_legend);
  void remove(QXYSeries* s);
  void create_series(CurveLine& line);
  QChart* build_chart(bool log_y);
  void make_axes(bool log_y);
  void set_log_y(bool log_y);
  void set_range(QAbstractAxis* axis, double lo, double hi);
  void on_axis_range();
  void follow_data_x();
  void render(CurveLine& line, const Series& s, const RenderKey& key);
  void render_smooth(CurveLine& line, const Series& s, const RenderKey& key);
  void render_events(bool log_y);
  void fit_y();
  double divisions(const QValueAxis* axis) const;  // about how many tick intervals fit the plot
  void update_title(bool log_y);

  ChartSpec spec_;
  const MetricCache* cache_;
  QChart* chart_ = nullptr;
  CurveChartView* view_ = nullptr;
  QValueAxis* x_axis_ = nullptr;
  QAbstractAxis* y_axis_ = nullptr;  // QValueAxis, or QLogValueAxis when log_y
  bool y_log_ = false;
  std::vector<CurveLine> lines_;  // (runs x keys), run-major
  std::map<int64_t, EventSet> events_;
  bool auto_ = true;    // follow the data; cleared by any zoom or pan
  bool fit_y_ = false;  // one refit of y (after the scale changed) while zoomed
  std::unique_ptr<QObject> context_ = std::make_unique<QObject>();  // connections die with the panel
};

CurvePanel::CurvePanel(ChartSpec spec, const MetricCache* cache) : spec_(std::move(spec)), cache_(cache) {
  view_ = new CurveChartView(build_chart(false));
  view_->on_user_zoom = [this] {
    auto_ = false;
    if (on_needs_refresh) on_needs_refresh();  // downsample the new x-range
  };
}

// A new chart with its axes and the legend's key entries. Toggling log y builds a new chart rather
// than swapping the y axis: Qt Charts leaves a removed axis drawn and brings back the legend
// markers of every series when axes change. The line series come back lazily in refresh().
QChart* CurvePanel::build_chart(bool log_y) {
  chart_ = new QChart;
  chart_->setTitle(spec_.title);
  QFont title_font = chart_->titleFont();
  title_font.setBold(true);
  chart_->setTitleFont(title_font);
  chart_->setMargins(QMargins(4, 4, 4, 4));
  chart_->legend()->setMarkerShape(QLegend::MarkerShapeFromSeries);
  // Up to three keys fit in a row under the plot; more are listed beside it.
  chart_->legend()->setAlignment(spec_.keys.size() > kLegendRowMax ? Qt::AlignRight : Qt::AlignBottom);
  chart_->legend()->setVisible(spec_.keys.size() > 1);
  chart_->legend()->setShowToolTips(true);  // the full name of an entry cut short
  QFont legend_font = chart_->legend()->font();
  legend_font.setPointSizeF(legend_font.pointSizeF() * kLegendFontScale);
  chart_->legend()->setFont(legend_font);
  make_axes(log_y);
  for (const KeySpec& k : spec_.keys) {  // legend entries: one per key, in the key's line style
    auto* proxy = new QLineSeries;
    proxy->setName(k.label.isEmpty() ? QString::fromStdString(k.key) : k.label);
    proxy->setPen(make_pen(QColor(90, 90, 90), 2.0, k.style));
    attach(proxy, true);
  }
  QObject::connect(chart_, &QChart::plotAreaChanged, context_.get(), [this] {
    if (on_needs_refresh) on_needs_refresh();  // the bucket count follows the plot's width
  });
  for (CurveLine& line : lines_) {
    line.raw = line.smooth = nullptr;
    line.drawn = RenderKey{};
    line.shown_lo = line.shown_hi = kNaN;
  }
  for (auto& [id, set] : events_) {
    set.series = nullptr;
    set.dirty = true;
  }
  return chart_;
}

void CurvePanel::make_axes(bool log_y) {
  x_axis_ = new QValueAxis;
  x_axis_->setTitleText("step");
  x_axis_->setLabelFormat("%.0f");  // ticks are at least 1 step apart
  x_axis_->setTickType(QValueAxis::TicksDynamic);
  x_axis_->setTickAnchor(0);
  chart_->addAxis(x_axis_, Qt::AlignBottom);
  QObject::connect(x_axis_, &QValueAxis::rangeChanged, context_.get(), [this] { on_axis_range(); });
  if (log_y) {
    auto* a = new QLogValueAxis;
    a->setBase(10);
    a->setLabelFormat("%g");
    QObject::connect(a, &QLogValueAxis::rangeChanged, context_.get(), [this] { on_axis_range(); });
    y_axis_ = a;
  } else {
    auto* a = new QValueAxis;
    a->setLabelFormat("%g");
    a->setTickType(QValueAxis::TicksDynamic);
    a->setTickAnchor(0);
    QObject::connect(a, &QValueAxis::rangeChanged, context_.get(), [this] { on_axis_range(); });
    y_axis_ = a;
  }
  y_axis_->setTitleText(spec_.y_title + (log_y ? ", log" : ""));
  chart_->addAxis(y_axis_, Qt::AlignLeft);
  y_log_ = log_y;
}

void CurvePanel::set_log_y(bool log_y) {
  const double x_lo = x_axis_->min(), x_hi = x_axis_->max();
  QChart* old = chart_;
  view_->setChart(build_chart(log_y));  // the view releases the old chart: ours to delete
  delete old;
  set_range(x_axis_, x_lo, x_hi);  // a zoomed chart keeps its x-range; y is refitted
  fit_y_ = true;
}

void CurvePanel::attach(QXYSeries* s, bool in_legend) {
  chart_->addSeries(s);
  s->attachAxis(x_axis_);
  s->attachAxis(y_axis_);
  for (QLegendMarker* m : chart_->legend()->markers(s)) m->setVisible(in_legend);
}

void CurvePanel::remove(QXYSeries* s) {
  if (s == nullptr) return;
  chart_->removeSeries(s);
  delete s;
}

void CurvePanel::set_runs(const std::vector<CurveRun>& runs) {
  for (CurveLine& line : lines_) {
    remove(line.raw);
    remove(line.smooth);
  }
  for (auto& [id, set] : events_) {
    remove(set.series);
    set.series = nullptr;
    set.dirty = true;
  }
  lines_.clear();
  for (const CurveRun& run : runs) {
    for (const KeySpec& k : spec_.keys) {
      if (k.key == "kappa" && !run.latent) continue;
      CurveLine line;
      line.run = run;
      line.spec = &k;
      lines_.push_back(std::move(line));
    }
  }
}

void CurvePanel::set_events(int64_t run_id, std::vector<std::pair<int64_t, double>> events) {
  if (!spec_.kappa_events) return;
  EventSet& set = events_[run_id];
  set.points = std::move(events);
  set.dirty = true;
}

void CurvePanel::create_series(CurveLine& line) {
  const QString name = line.run.name + ' ' + QString::fromStdString(line.spec->key);
  line.raw = new QLineSeries;
  line.raw->setName(name);
  attach(line.raw, false);
  if (!line.spec->smooth) return;
  line.smooth = new QLineSeries;
  line.smooth->setName(name + " (EMA)");
  attach(line.smooth, false);
}

// A dynamic-tick axis lays out span / interval ticks as soon as its range changes, before
// on_axis_range runs: a jump from [0, 1] to [0, 1e5] at interval 0.2 would build 500,000 tick
// items. So the interval grows before the range does (it shrinks after, in on_axis_range).
void CurvePanel::set_range(QAbstractAxis* axis, double lo, double hi) {
  auto* v = qobject_cast<QValueAxis*>(axis);
  if (v != nullptr && hi > lo) {
    const double interval = tick_interval(hi - lo, v == x_axis_, divisions(v));
    if (interval > v->tickInterval()) v->setTickInterval(interval);
  }
  axis->setRange(lo, hi);
}

// Keeps the ticks at 1-2-5 multiples of the visible span.
void CurvePanel::on_axis_range() {
  for (QValueAxis* v : {x_axis_, qobject_cast<QValueAxis*>(y_axis_)}) {
    if (v != nullptr && v->max() > v->min())
      v->setTickInterval(tick_interval(v->max() - v->min(), v == x_axis_, divisions(v)));
  }
}

double CurvePanel::divisions(const QValueAxis* axis) const {
  const QRectF plot = chart_->plotArea();
  const double room = axis == x_axis_ ? plot.width() / kMinTickSpacingPx : plot.height() / (kMinTickSpacingPx / 2);
  return std::clamp(room, 2.0, kXDivisions);
}

void CurvePanel::follow_data_x() {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const CurveLine& line : lines_) {
    const Series* s = cache_->series(line.run.id, line.spec->key);
    if (s == nullptr || s->x.empty()) continue;
    lo = std::min(lo, s->x.front());
    hi = std::max(hi, s->x.back());
  }
  if (!(lo <= hi)) return;
  lo = std::min(lo, 0.0);  // every chart starts at step 0, so the grid's x-axes line up
  // The range snaps as in every chart (the grid's x-axes line up); only the ticks follow the width.
  const auto [snap_lo, snap_hi] = snap_outward(lo, hi, kXDivisions);
  if (snap_lo != x_axis_->min() || snap_hi != x_axis_->max()) set_range(x_axis_, snap_lo, snap_hi);
}

void CurvePanel::render(CurveLine& line, const Series& s, const RenderKey& key) {
  Series raw = downsample_minmax(s.x, s.y, key.x_lo, key.x_hi, key.buckets);
  if (key.log_y) drop_nonpositive(raw);
  line.raw->replace(to_points(raw));
  line.shown_lo = line.shown_hi = kNaN;
  for (size_t i = 0; i < raw.x.size(); ++i) {
    if (raw.x[i] < key.x_lo || raw.x[i] > key.x_hi) continue;
    line.shown_lo = std::isnan(line.shown_lo) ? raw.y[i] : std::min(line.shown_lo, raw.y[i]);
    line.shown_hi = std::isnan(line.shown_hi) ? raw.y[i] : std::max(line.shown_hi, raw.y[i]);
  }
  render_smooth(line, s, key);
  QColor color = line.run.color;
  if (key.smooth) color.setAlpha(kFaintAlpha);
  line.raw->setPen(make_pen(color, key.smooth ? 1.0 : 1.6, line.spec->style));
  line.raw->setPointsVisible(raw.x.size() <= kMarkedPointsMax);  // one evaluation is a dot, not nothing
  if (key.log_y && line.count_revision != s.revision) {
    line.nonpositive = count_nonpositive(s.y);
    line.count_revision = s.revision;
  }
  line.drawn = key;
}

void CurvePanel::render_smooth(CurveLine& line, const Series& s, const RenderKey& key) {
  if (line.smooth == nullptr) return;
  line.smooth->setVisible(key.smooth);
  if (!key.smooth) {
    line.smooth->clear();
    return;
  }
  if (line.ema_revision != s.revision || line.ema_alpha != key.alpha) {
    line.ema = ema(s.y, key.alpha);
    line.ema_revision = s.revision;
    line.ema_alpha = key.alpha;
  }
  Series smooth = downsample_minmax(s.x, line.ema, key.x_lo, key.x_hi, key.buckets);
  if (key.log_y) drop_nonpositive(smooth);
  line.smooth->replace(to_points(smooth));
  line.smooth->setPen(make_pen(line.run.color, 2.2, line.spec->style));
}

void CurvePanel::render_events(bool log_y) {
  for (CurveLine& line : lines_) {
    if (line.spec->key != "kappa") continue;  // one kappa line per run: its run owns the dots
    auto it = events_.find(line.run.id);
    if (it == events_.end() || !it->second.dirty) continue;
    EventSet& set = it->second;
    if (set.series == nullptr) {
      set.series = new QScatterSeries;
      set.series->setName(line.run.name + " kappa changed");
      set.series->setMarkerSize(9);
      set.series->setColor(line.run.color);
      set.series->setBorderColor(Qt::white);
      attach(set.series, false);
    }
    QList<QPointF> points;
    for (const auto& [step, kappa] : set.points) {
      if (!log_y || kappa > 0) points.append(QPointF(static_cast<double>(step), kappa));
    }
    set.series->replace(points);
    set.dirty = false;
  }
}

void CurvePanel::fit_y() {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const CurveLine& line : lines_) {
    if (line.raw == nullptr || std::isnan(line.shown_lo)) continue;
    lo = std::min(lo, line.shown_lo);
    hi = std::max(hi, line.shown_hi);
  }
  for (const auto& [id, set] : events_) {
    if (set.series == nullptr) continue;
    for (const QPointF& p : set.series->points()) {
      if (p.x() < x_axis_->min() || p.x() > x_axis_->max()) continue;
      lo = std::min(lo, p.y());
      hi = std::max(hi, p.y());
    }
  }
  if (!(lo <= hi)) {
    lo = y_log_ ? 0.1 : 0.0;
    hi = 1.0;
  }
  if (y_log_) {
    set_range(y_axis_, lo / kLogYPad, hi * kLogYPad);
    return;
  }
  if (spec_.fraction) lo = std::min(lo, 0.0), hi = std::max(hi, 1.0);  // 0 agreement reads as 0 of 1
  // A flat curve (all synthetic metrics still 0, a constant lr) gets a readable band around it,
  // not an axis of +-1e-12.
  const double pad = hi > lo ? (hi - lo) * kYPad : std::max(std::abs(hi) * kYPad, 0.5);
  const auto [snap_lo, snap_hi] = snap_outward(lo - pad, hi + pad, 2 * kXDivisions);
  set_range(y_axis_, snap_lo, snap_hi);
}

void CurvePanel::update_title(bool log_y) {
  size_t hidden = 0;
  for (const CurveLine& line : lines_) {
    if (log_y && line.raw != nullptr && line.count_revision == line.drawn.revision) hidden += line.nonpositive;
  }
  QString title = spec_.title;
  if (hidden > 0) title += QString("  (%1 points \u2264 0 hidden)").arg(hidden);  // plain text: '<' starts a tag
  if (chart_->title() != title) chart_->setTitle(title);
}

void CurvePanel::refresh(const DisplayOptions& opt) {
  if (opt.log_y != y_log_) set_log_y(opt.log_y);
  int drawn_lines = 0;
  for (CurveLine& line : lines_) {
    if (line.raw == nullptr && cache_->series(line.run.id, line.spec->key) != nullptr) create_series(line);
    drawn_lines += line.raw != nullptr;
  }
  view_->setRenderHint(QPainter::Antialiasing, drawn_lines <= kAntialiasMaxLines);
  if (auto_) follow_data_x();
  const double x_lo = x_axis_->min(), x_hi = x_axis_->max();
  const int buckets = std::clamp(static_cast<int>(chart_->plotArea().width()), kMinBuckets, kMaxBuckets);
  for (CurveLine& line : lines_) {
    if (line.raw == nullptr) continue;
    const Series* s = cache_->series(line.run.id, line.spec->key);
    if (s == nullptr) {  // the run was dropped from the cache
      line.raw->clear();
      if (line.smooth != nullptr) line.smooth->clear();
      line.drawn = RenderKey{};
      line.shown_lo = line.shown_hi = kNaN;
      continue;
    }
    const bool smooth = opt.smooth && line.spec->smooth;
    const RenderKey key{s->revision, x_lo, x_hi, buckets, smooth, smooth ? opt.alpha : 0.0, opt.log_y};
    if (!(key == line.drawn)) render(line, *s, key);
  }
  render_events(opt.log_y);
  if (auto_ || fit_y_) fit_y();
  fit_y_ = false;
  on_axis_range();  // the tick count follows the plot's size too
  update_title(opt.log_y);
}

QString CurvePanel::hover_text(QPoint view_pos, const DisplayOptions& opt) {
  const QPointF pos = chart_->mapFromScene(view_->mapToScene(view_pos));
  if (!chart_->plotArea().contains(pos)) return {};
  double best = kHoverRadiusPx;
  const CurveLine* hit = nullptr;
  size_t hit_index = 0;
  for (const CurveLine& line : lines_) {
    const Series* s = line.raw != nullptr ? cache_->series(line.run.id, line.spec->key) : nullptr;
    if (s == nullptr) continue;
    const auto i = nearest_point(s->x, s->y, chart_->mapToValue(pos, line.raw).x());
    if (!i || (opt.log_y && s->y[*i] <= 0)) continue;
    double d = QLineF(chart_->mapToPosition(QPointF(s->x[*i], s->y[*i]), line.raw), pos).length();
    if (line.drawn.smooth && *i < line.ema.size()) {
      const QPointF e = chart_->mapToPosition(QPointF(s->x[*i], line.ema[*i]), line.raw);
      d = std::min(d, QLineF(e, pos).length());
    }
    if (d < best) {
      best = d;
      hit = &line;
      hit_index = *i;
    }
  }
  if (hit == nullptr) return {};
  const Series* s = cache_->series(hit->run.id, hit->spec->key);
  const double value = s->y[hit_index];
  QString text = QString("%1  |  %2  |  step %3  |  %4")
                     .arg(hit->run.name, QString::fromStdString(hit->spec->key))
                     .arg(static_cast<qint64>(s->x[hit_index]))
                     .arg(value, 0, 'g', 6);
  if (is_nats_key(hit->spec->key)) text += QString(" nats = %1 bits").arg(value / kLn2, 0, 'g', 4);
  if (hit->drawn.smooth && hit_index < hit->ema.size())
    text += QString("  (EMA %1)").arg(hit->ema[hit_index], 0, 'g', 6);
  return text;
}

CurvesView::CurvesView(const MetricCache* cache, QWidget* parent) : QWidget(parent), cache_(cache) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  build_toolbar(layout);
  build_charts(layout);
  hover_label_ = new QLabel(this);
  hover_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(hover_label_);
  update_run_legend();
  refresh();
}

CurvesView::~CurvesView() = default;

void CurvesView::build_toolbar(QVBoxLayout* layout) {
  auto* bar = new QHBoxLayout;
  smooth_box_ = new QCheckBox("Smoothing", this);
  smooth_box_->setToolTip("Debiased exponential moving average (as TensorBoard); the raw curve stays faint");
  alpha_slider_ = new QSlider(Qt::Horizontal, this);
  alpha_slider_->setRange(0, kAlphaSteps);
  alpha_slider_->setValue(static_cast<int>(std::lround(kDefaultAlpha * 100)));
  alpha_slider_->setMaximumWidth(160);
  alpha_slider_->setToolTip("EMA weight: s = w s + (1 - w) y");
  alpha_label_ = new QLabel(this);
  log_box_ = new QCheckBox("Log y", this);
  auto* reset = new QPushButton("Reset zoom", this);
  reset->setToolTip("Back to auto range on every chart (double-click or Home resets one chart)");
  auto* png = new QPushButton("PNG...", this);
  auto* csv = new QPushButton("CSV...", this);
  bar->addWidget(smooth_box_);
  bar->addWidget(alpha_slider_);
  bar->addWidget(alpha_label_);
  bar->addSpacing(12);
  bar->addWidget(log_box_);
  bar->addWidget(reset);
  bar->addStretch(1);
  bar->addWidget(png);
  bar->addWidget(csv);
  layout->addLayout(bar);
  update_alpha_label();
  connect(smooth_box_, &QCheckBox::toggled, this, [this] { schedule_refresh(); });
  connect(alpha_slider_, &QSlider::valueChanged, this, [this] {
    update_alpha_label();
    schedule_refresh();
  });
  connect(log_box_, &QCheckBox::toggled, this, [this] { schedule_refresh(); });
  connect(reset, &QPushButton::clicked, this, [this] {
    for (auto& panel : panels_) panel->reset_zoom();
    schedule_refresh();
  });
  connect(png, &QPushButton::clicked, this, [this] { choose_and_save_png(); });
  connect(csv, &QPushButton::clicked, this, [this] { choose_and_save_csv(); });
}

void CurvesView::build_charts(QVBoxLayout* layout) {
  charts_box_ = new QWidget(this);
  auto* box_layout = new QVBoxLayout(charts_box_);
  box_layout->setContentsMargins(0, 0, 0, 0);
  run_legend_ = new QLabel(charts_box_);
  run_legend_->setWordWrap(true);
  run_legend_->setTextFormat(Qt::RichText);
  box_layout->addWidget(run_legend_);
  auto* grid = new QGridLayout;
  grid->setSpacing(2);
  box_layout->addLayout(grid, 1);
  const std::vector<ChartSpec> specs = chart_specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    auto panel = std::make_unique<CurvePanel>(specs[i], cache_);
    CurvePanel* p = panel.get();
    p->on_needs_refresh = [this, i] { schedule_refresh(i); };
    p->view()->on_hover = [this, p](QPoint pos) {
      const DisplayOptions opt{smooth_box_->isChecked(), alpha_slider_->value() / 100.0, log_box_->isChecked()};
      hover_label_->setText(p->hover_text(pos, opt));
    };
    p->view()->on_leave = [this] { hover_label_->clear(); };
    p->view()->on_reset = [this, p, i] {
      p->reset_zoom();
      schedule_refresh(i);
    };
    grid->addWidget(p->view(), static_cast<int>(i) / kGridColumns, static_cast<int>(i) % kGridColumns);
    panels_.push_back(std::move(panel));
  }
  stale_.assign(panels_.size(), 1);
  // A timer, not a queued call: queued calls posted while Qt sends posted events run in the same
  // pass, so the seven charts (and their layout and paint events) would again form one stretch.
  refresh_timer_ = new QTimer(this);
  refresh_timer_->setSingleShot(true);
  refresh_timer_->setInterval(0);
  connect(refresh_timer_, &QTimer::timeout, this, &CurvesView::refresh_next_stale);
  // In a scroll area: the charts keep their minimum size without making the dock (and every
  // dock tabbed with it) at least as tall as all their rows.
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setWidget(charts_box_);
  layout->addWidget(scroll, 1);
}

void CurvesView::set_runs(const std::vector<CurveRun>& runs) {
  runs_ = runs;
  for (auto& panel : panels_) panel->set_runs(runs);
  update_run_legend();
  schedule_refresh();
}

void CurvesView::set_events(int64_t run_id, const std::vector<std::pair<int64_t, double>>& kappa_changes) {
  for (auto& panel : panels_) panel->set_events(run_id, kappa_changes);
  schedule_refresh();
}

void CurvesView::refresh() {
  const DisplayOptions opt{smooth_box_->isChecked(), alpha_slider_->value() / 100.0, log_box_->isChecked()};
  for (auto& panel : panels_) panel->refresh(opt);
  stale_.assign(panels_.size(), 0);
}

void CurvesView::schedule_refresh() {
  stale_.assign(panels_.size(), 1);
  post_refresh();
}

void CurvesView::schedule_refresh(size_t panel) {
  stale_[panel] = 1;
  post_refresh();
}

void CurvesView::post_refresh() {
  if (!refresh_timer_->isActive()) refresh_timer_->start();
}

// Round robin from the chart after the last one redrawn: a chart whose refresh asks for another
// (its axes moved) or a run that keeps adding rows cannot starve the charts behind it.
void CurvesView::refresh_next_stale() {
  for (size_t k = 0; k < stale_.size(); ++k) {
    const size_t i = (next_panel_ + k) % stale_.size();
    if (!stale_[i]) continue;
    stale_[i] = 0;
    next_panel_ = (i + 1) % stale_.size();
    panels_[i]->refresh({smooth_box_->isChecked(), alpha_slider_->value() / 100.0, log_box_->isChecked()});
    if (std::find(stale_.begin(), stale_.end(), 1) != stale_.end()) post_refresh();
    return;
  }
}

void CurvesView::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  schedule_refresh();
}

void CurvesView::update_run_legend() {
  if (runs_.empty()) {
    run_legend_->setText(
        "<i>No runs selected.</i> Drag: zoom; wheel: zoom (shift: x only); right-drag or "
        "arrows: pan; double-click: reset.");
    return;
  }
  QStringList parts;
  const size_t shown = std::min(runs_.size(), static_cast<size_t>(kLegendRunsMax));
  for (size_t i = 0; i < shown; ++i) {
    parts << QString("<span style=\"color:%1; font-size:large\">&#9632;</span>&nbsp;%2%3")
                 .arg(runs_[i].color.name(), runs_[i].name.toHtmlEscaped(),
                      runs_[i].note.isEmpty()
                          ? QString()
                          : " <span style=\"color:gray\">(" + runs_[i].note.toHtmlEscaped() + ")</span>");
  }
  if (runs_.size() > shown) parts << QString("and %1 more").arg(runs_.size() - shown);
  run_legend_->setText(parts.join("&nbsp;&nbsp;&nbsp; "));
}

void CurvesView::update_alpha_label() {
  alpha_label_->setText(QString::number(alpha_slider_->value() / 100.0, 'f', 2));
}

bool CurvesView::save_png(const QString& path) {
  refresh();
  // Qt Charts lays out axes and titles in posted events: without them a grab right after a
  // change (log y, new runs) shows the old layout.
  QCoreApplication::processEvents(QEventLoop::ExcludeUserInputEvents);
  return charts_box_->grab().save(path, "PNG");
}

bool CurvesView::save_csv(const QString& path) {
  QFile file(path);
  if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) return false;
  QTextStream out(&file);
  out << "run,key,step,value\n";
  for (const CurveRun& run : runs_) {
    const QString name = csv_field(run.name);
    for (const std::string& key : cache_->keys(run.id)) {
      const Series* s = cache_->series(run.id, key);
      const QString k = csv_field(QString::fromStdString(key));
      for (size_t i = 0; i < s->x.size(); ++i) {
        out << name << ',' << k << ',' << static_cast<qint64>(s->x[i]) << ',' << QString::number(s->y[i], 'g', 17)
            << '\n';
      }
    }
  }
  out.flush();
  file.close();
  return out.status() == QTextStream::Ok && file.error() == QFileDevice::NoError;
}

void CurvesView::choose_and_save_png() {
  const QString path = QFileDialog::getSaveFileName(this, "Save curves as PNG", "curves.png", "PNG images (*.png)");
  if (!path.isEmpty() && !save_png(path)) QMessageBox::warning(this, "Curves", "Could not write " + path);
}

void CurvesView::choose_and_save_csv() {
  const QString path = QFileDialog::getSaveFileName(this, "Save curves as CSV", "curves.csv", "CSV files (*.csv)");
  if (!path.isEmpty() && !save_csv(path)) QMessageBox::warning(this, "Curves", "Could not write " + path);
}

}  // namespace ftx
