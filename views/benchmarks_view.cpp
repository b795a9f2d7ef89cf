#include "views/benchmarks_view.h"

#include <QComboBox>
#include <QFontDatabase>
#include <QGraphicsItem>
#include <QGraphicsSimpleTextItem>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPainter>
#include <QPlainTextEdit>
#include <QScrollArea>
#include <QSplitter>
#include <QTableWidget>
#include <QTimer>
#include <QToolTip>
#include <QVBoxLayout>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QLineSeries>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QValueAxis>
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/eval/bench/task.h"
#include "core/model/kappa.h"

namespace ftx {
namespace {

constexpr int kColumns = 3;              // charts per row of the grid
constexpr int kChartMinHeight = 210;     // pixels: axis labels and a few ticks stay readable
constexpr int kRefLabelMargin = 58;      // right margin of a chart with reference labels
constexpr int kRefreshDelayMs = 100;     // rows arriving together are drawn once
constexpr int kGenerationPreview = 100;  // characters of a generation in the items table

// The paper's table choices: (label, model size, training tokens); an empty size draws none.
struct PaperChoice {
  const char* label;
  const char* size;
  const char* tokens;
};
constexpr PaperChoice kPaperChoices[] = {
    {"Paper 1.5B (47B tokens)", "1.5B", "47B"},
    {"Paper 8B (200B tokens)", "8B", "200B"},
    {"Paper 8B (1T tokens)", "8B", "1T"},
    {"Paper 1.5B and 8B (200B)", "*", ""},
    {"No paper values", "", ""},
};

bool paper_row_selected(const ReferenceRow& r, const PaperChoice& c) {
  if (r.statistic != "final" || c.size[0] == '\0') return false;
  if (c.size[0] == '*') return r.train_tokens == "47B" || r.train_tokens == "200B";
  return r.model_size == c.size && r.train_tokens == c.tokens;
}

QString kappa_text(double bits) { return QString::fromStdString(ftx::kappa_short_text(bits)); }

QString value_text(double v) {
  if (std::isnan(v)) return "n/a";
  return std::fabs(v) < 10 ? QString::number(v, 'f', 3) : QString::number(v, 'g', 4);
}

// The round number (1, 2, 2.5 or 5 times a power of ten) at or above `raw`: tick spacing.
double nice_step(double raw) {
  if (!(raw > 0)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0})
    if (m * p >= raw * 0.999) return m * p;
  return 10 * p;
}

bool passed(const std::string& verdict) { return verdict.rfind("pass", 0) == 0 || verdict.rfind("correct", 0) == 0; }

// Tasks in the documented order (core/eval/bench/task.cpp), unknown ones after, by name.
int task_rank(const std::string& task) {
  const auto& infos = bench::task_infos();
  for (size_t i = 0; i < infos.size(); ++i)
    if (infos[i].name == task) return static_cast<int>(i);
  return static_cast<int>(infos.size());
}

// +-1 standard error bars of a chart's points, drawn over the plot in the runs' colours. Stored
// in data coordinates and mapped at paint time, so they follow resizes and axis changes.
class ErrorBars : public QGraphicsItem {
 public:
  struct Bar {
    QPointF lo, hi;
    QColor color;
    QAbstractSeries* series;  // the series whose axes map the bar
  };
  explicit ErrorBars(QChart* chart) : QGraphicsItem(chart), chart_(chart) { setZValue(100); }
  void set_bars(std::vector<Bar> bars) {
    bars_ = std::move(bars);
    update();
  }
  size_t size() const { return bars_.size(); }
  QRectF boundingRect() const override { return QRectF(QPointF(0, 0), chart_->size()); }
  void paint(QPainter* p, const QStyleOptionGraphicsItem*, QWidget*) override {
    p->setClipRect(chart_->plotArea().adjusted(-1, -1, 1, 1));
    p->setRenderHint(QPainter::Antialiasing);
    for (const Bar& b : bars_) {
      const QPointF lo = chart_->mapToPosition(b.lo, b.series), hi = chart_->mapToPosition(b.hi, b.series);
      p->setPen(QPen(b.color, 1.4));
      p->drawLine(lo, hi);
      p->drawLine(lo + QPointF(-3, 0), lo + QPointF(3, 0));
      p->drawLine(hi + QPointF(-3, 0), hi + QPointF(3, 0));
    }
  }

 private:
  QChart* chart_;
  std::vector<Bar> bars_;
};

}  // namespace

// One task's chart: a header (task name, the paper's name, a metric combo) over a QChartView.
class BenchChart {
 public:
  BenchChart(BenchmarksView* owner, const QString& task) : owner_(owner), task_(task) {
    frame_ = new QWidget;
    frame_->setObjectName("bench_chart:" + task);
    auto* layout = new QVBoxLayout(frame_);
    layout->setContentsMargins(2, 2, 2, 2);
    layout->setSpacing(0);
    auto* head = new QHBoxLayout;
    title_ = new QLabel;
    QFont bold = title_->font();
    bold.setBold(true);
    title_->setFont(bold);
    metric_ = new QComboBox;
    metric_->setObjectName("bench_metric:" + task);
    metric_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    head->addWidget(title_, 1);
    head->addWidget(metric_);
    layout->addLayout(head);
    chart_ = new QChart;
    chart_->legend()->hide();
    chart_->setMargins(QMargins(2, 2, 2, 2));
    chart_->setBackgroundRoundness(0);
    x_axis_ = new QValueAxis;
    y_axis_ = new QValueAxis;
    QFont small = frame_->font();
    small.setPointSizeF(small.pointSizeF() * 0.85);
    for (QValueAxis* a : {x_axis_, y_axis_}) {
      a->setLabelsFont(small);
      a->setTitleFont(small);
      a->setGridLineColor(QColor(0xe4e4e4));
    }
    x_axis_->setTickType(QValueAxis::TicksDynamic);
    x_axis_->setTickAnchor(0);
    y_axis_->setTickCount(5);
    y_axis_->setLabelFormat("%.3g");
    chart_->addAxis(x_axis_, Qt::AlignBottom);
    chart_->addAxis(y_axis_, Qt::AlignLeft);
    view_ = new QChartView(chart_);
    view_->setObjectName("bench_view:" + task);
    view_->setRenderHint(QPainter::Antialiasing);
    view_->setMinimumHeight(kChartMinHeight);
    layout->addWidget(view_, 1);
    bars_ = new ErrorBars(chart_);
    QObject::connect(chart_, &QChart::plotAreaChanged, frame_, [this] { layout_labels(); });
    QObject::connect(metric_, &QComboBox::activated, frame_,
                     [this](int) { owner_->set_metric(task_, metric_->currentText()); });
  }

  QWidget* widget() const { return frame_; }
  QChart* chart() const { return chart_; }

  // Redraws from the owner's data: every overlaid run's points of `metric`, bars, paper lines.
  void update(const std::string& metric, const std::vector<std::string>& metrics, bool tokens,
              const std::vector<const ReferenceRow*>& refs, bool multi_size) {
    const std::string task = task_.toStdString();
    const bench::TaskInfo* info = bench::find_task_info(task);
    title_->setText(task_);
    title_->setToolTip(info && !info->paper_name.empty() ? QString("Paper: %1 (%2)")
                                                               .arg(QString::fromStdString(info->paper_name),
                                                                    QString::fromStdString(info->paper_metric))
                                                         : QString("Not in the paper's tables"));
    metric_->blockSignals(true);
    metric_->clear();
    for (const std::string& m : metrics) metric_->addItem(QString::fromStdString(m));
    metric_->setCurrentText(QString::fromStdString(metric));
    metric_->blockSignals(false);

    chart_->removeAllSeries();
    for (QGraphicsSimpleTextItem* l : labels_) delete l;
    labels_.clear();
    ref_series_.clear();
    // x values of this chart, and its scale (tokens in K, M or B).
    double x_max = 0;
    bool any = false, has_rows = false;
    for (const CurveRun& run : owner_->runs_)
      if (const auto* s = owner_->series(run.id, task, metric))
        for (const auto& [step, row] : *s) {
          has_rows = true;
          const double x = tokens ? double(row.tokens) : double(step);
          if (tokens && row.tokens < 0) continue;
          x_max = std::max(x_max, x), any = true;
        }
    double scale = 1;
    QString x_title = "step";
    if (tokens) {
      x_title = "tokens";
      for (auto [div, unit] : {std::pair{1e9, "B"}, std::pair{1e6, "M"}, std::pair{1e3, "K"}})
        if (x_max >= div) {
          scale = div, x_title = QString("tokens (%1)").arg(unit);
          break;
        }
    }
    x_axis_->setTitleText(x_title);
    x_axis_->setLabelFormat(x_max / scale >= 100 || !tokens ? "%.0f" : "%.3g");

    double lo = std::numeric_limits<double>::infinity(), hi = -lo, x_lo = lo, x_hi = -lo;
    std::vector<ErrorBars::Bar> bars;
    points_.clear();
    for (const CurveRun& run : owner_->runs_) {
      const auto* s = owner_->series(run.id, task, metric);
      if (!s) continue;
      auto* line = new QLineSeries;
      auto* dots = new QScatterSeries;
      line->setName(run.name);
      dots->setName(run.name);
      line->setPen(QPen(run.color, 2));
      dots->setColor(run.color);
      dots->setBorderColor(run.color.darker(130));
      dots->setMarkerSize(7.5);
      for (const auto& [step, row] : *s) {
        if (std::isnan(row.value) || (tokens && row.tokens < 0)) continue;
        const double x = (tokens ? double(row.tokens) : double(step)) / scale;
        line->append(x, row.value);
        dots->append(x, row.value);
        points_.push_back({run.id, step, x, row.value});
        lo = std::min(lo, row.value - row.stderr_), hi = std::max(hi, row.value + row.stderr_);
        x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x);
        if (row.stderr_ > 0)
          bars.push_back({{x, row.value - row.stderr_}, {x, row.value + row.stderr_}, run.color, dots});
      }
      for (QAbstractSeries* a : {static_cast<QAbstractSeries*>(line), static_cast<QAbstractSeries*>(dots)}) {
        chart_->addSeries(a);
        a->attachAxis(x_axis_);
        a->attachAxis(y_axis_);
      }
      const int64_t run_id = run.id;
      QObject::connect(dots, &QScatterSeries::clicked, frame_,
                       [this, run_id](const QPointF& p) { clicked(run_id, p); });
      QObject::connect(dots, &QScatterSeries::hovered, frame_,
                       [this, run_id, metric](const QPointF& p, bool on) { hovered(run_id, metric, p, on); });
    }
    add_selection_ring(metric, tokens, scale);
    for (const ReferenceRow* r : refs) lo = std::min(lo, r->value), hi = std::max(hi, r->value);
    chart_->setTitle(tokens && !any && has_rows ? "no token counts stored" : QString());
    if (!any || !std::isfinite(lo)) {
      x_lo = 0, x_hi = 1;
      if (!std::isfinite(lo)) lo = 0, hi = 1;
    }
    if (x_hi - x_lo <= 0) x_lo -= 1, x_hi += 1;  // one point: a window around it
    const double pad_x = 0.05 * (x_hi - x_lo);   // room for the end points' markers
    x_axis_->setRange(x_lo - pad_x, x_hi + pad_x);
    x_axis_->setTickInterval(nice_step((x_hi - x_lo) / 4));
    if (hi - lo <= 0) lo -= 0.05, hi += 0.05;
    const double pad = 0.08 * (hi - lo);
    y_axis_->setRange(lo >= 0 && lo - pad < 0 ? 0 : lo - pad, hi + pad);
    y_axis_->applyNiceNumbers();
    // Horizontal paper lines across the x range, labelled to the right of the plot.
    static const Qt::PenStyle kStyles[] = {Qt::DashLine, Qt::DotLine, Qt::DashDotLine, Qt::DashDotDotLine};
    int ft_index = 0;
    for (const ReferenceRow* r : refs) {
      auto* line = new QLineSeries;
      const bool base = !r->kappa_bits.has_value();
      const QColor c = base ? QColor(0x404040) : QColor(0x8a8a8a);
      line->setPen(QPen(c, base ? 1.3 : 1.1, base ? Qt::SolidLine : kStyles[ft_index++ % 4]));
      QString label = base ? "base" : "\u03ba " + kappa_text(*r->kappa_bits);
      if (multi_size) label = QString::fromStdString(r->model_size) + " " + label;
      line->setName("paper " + QString::fromStdString(r->model_size) + " " + label);
      line->append(x_axis_->min(), r->value);
      line->append(x_axis_->max(), r->value);
      chart_->addSeries(line);
      line->attachAxis(x_axis_);
      line->attachAxis(y_axis_);
      auto* text = new QGraphicsSimpleTextItem(label, chart_);
      QFont f = frame_->font();
      f.setPointSizeF(f.pointSizeF() * 0.8);
      text->setFont(f);
      text->setBrush(c.darker(120));
      text->setToolTip(
          QString("Paper, %1 trained on %2 tokens, %3: %4")
              .arg(QString::fromStdString(r->model_size), QString::fromStdString(r->train_tokens),
                   base ? QString("baseline") : "Free Transformer \u03ba = " + kappa_text(*r->kappa_bits) + " bit",
                   value_text(r->value)));
      labels_.push_back(text);
      ref_series_.push_back({line, r->value});
    }
    // Reference lines under the runs: they are context, the runs are the subject.
    chart_->setMargins(QMargins(2, 2, refs.empty() ? 6 : kRefLabelMargin, 2));
    bars_->set_bars(std::move(bars));
    layout_labels();
  }

  size_t bar_count() const { return bars_->size(); }

  // A ring around the point whose items are listed, when it is on this chart.
  void add_selection_ring(const std::string& metric, bool tokens, double scale) {
    if (owner_->selected_task_ != task_) return;
    const auto* s = owner_->series(owner_->selected_run_, task_.toStdString(), metric);
    if (!s) return;
    const auto it = s->find(owner_->selected_step_);
    if (it == s->end() || std::isnan(it->second.value) || (tokens && it->second.tokens < 0)) return;
    QScatterSeries* anchor = nullptr;  // the run's dots: the ring is drawn only for an overlaid run
    for (QAbstractSeries* a : chart_->series())
      if (auto* d = qobject_cast<QScatterSeries*>(a); d && d->name() == owner_->run_name(owner_->selected_run_))
        anchor = d;
    if (!anchor) return;
    auto* ring = new QScatterSeries;
    ring->setName("selected");
    ring->setMarkerSize(15);
    ring->setColor(Qt::transparent);
    ring->setBorderColor(QColor(0x202020));
    ring->append((tokens ? double(it->second.tokens) : double(it->first)) / scale, it->second.value);
    chart_->addSeries(ring);
    ring->attachAxis(x_axis_);
    ring->attachAxis(y_axis_);
  }

 private:
  struct Point {
    int64_t run, step;
    double x, y;
  };

  // Labels at their lines' heights; labels closer than a label is tall form a stack centred on
  // their lines' mean height (merged until no two stacks overlap).
  void layout_labels() {
    if (labels_.empty()) return;
    const QRectF area = chart_->plotArea();
    std::vector<std::pair<double, size_t>> want;
    for (size_t i = 0; i < labels_.size(); ++i) {
      const QPointF p = chart_->mapToPosition(QPointF(x_axis_->max(), ref_series_[i].second), ref_series_[i].first);
      want.emplace_back(p.y(), i);
    }
    std::sort(want.begin(), want.end());
    const double h = labels_[0]->boundingRect().height() * 0.85;
    struct Stack {
      double sum;
      int count;
      double top() const { return sum / count - count * h_ / 2; }
      double h_;
    };
    std::vector<Stack> stacks;
    for (const auto& w : want) {
      stacks.push_back({w.first, 1, h});
      while (stacks.size() >= 2) {
        Stack& a = stacks[stacks.size() - 2];
        const Stack& b = stacks.back();
        if (a.top() + a.count * h <= b.top()) break;
        a.sum += b.sum, a.count += b.count;
        stacks.pop_back();
      }
    }
    size_t k = 0;
    for (const Stack& st : stacks)
      for (int j = 0; j < st.count; ++j, ++k) labels_[want[k].second]->setPos(area.right() + 4, st.top() + j * h);
  }

  // The stored point of `run` nearest to where it was clicked.
  void clicked(int64_t run, const QPointF& p) {
    const Point* best = nearest(run, p);
    if (best) owner_->select_point(task_, best->run, best->step);
  }

  void hovered(int64_t run, const std::string& metric, const QPointF& p, bool on) {
    if (!on) return QToolTip::hideText();
    const Point* best = nearest(run, p);
    const auto* s = best ? owner_->series(run, task_.toStdString(), metric) : nullptr;
    if (!s || !s->count(best->step)) return;
    const BenchmarkRow& r = s->at(best->step);
    QString text = QString("%1\nstep %2%3\n%4 = %5 \u00b1 %6 (n = %7)\nclick: list the items")
                       .arg(owner_->run_name(run))
                       .arg(r.step)
                       .arg(r.tokens >= 0 ? QString(", %1 tokens").arg(r.tokens) : QString())
                       .arg(QString::fromStdString(metric), value_text(r.value), value_text(r.stderr_))
                       .arg(r.n);
    QToolTip::showText(QCursor::pos(), text, view_);
  }

  const Point* nearest(int64_t run, const QPointF& p) const {
    const Point* best = nullptr;
    double best_d = std::numeric_limits<double>::infinity();
    const double sx = std::max(1e-12, x_axis_->max() - x_axis_->min()),
                 sy = std::max(1e-12, y_axis_->max() - y_axis_->min());
    for (const Point& q : points_) {
      if (q.run != run) continue;
      const double d = std::hypot((q.x - p.x()) / sx, (q.y - p.y()) / sy);
      if (d < best_d) best_d = d, best = &q;
    }
    return best;
  }

  BenchmarksView* owner_;
  QString task_;
  QWidget* frame_ = nullptr;
  QLabel* title_ = nullptr;
  QComboBox* metric_ = nullptr;
  QChart* chart_ = nullptr;
  QChartView* view_ = nullptr;
  QValueAxis *x_axis_ = nullptr, *y_axis_ = nullptr;
  ErrorBars* bars_ = nullptr;
  std::vector<QGraphicsSimpleTextItem*> labels_;
  std::vector<std::pair<QLineSeries*, double>> ref_series_;
  std::vector<Point> points_;
};

BenchmarksView::BenchmarksView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* bar = new QHBoxLayout;
  x_axis_ = new QComboBox;
  x_axis_->setObjectName("bench_x_axis");
  x_axis_->addItems({"x: checkpoint step", "x: training tokens"});
  paper_ = new QComboBox;
  paper_->setObjectName("bench_paper");
  for (const PaperChoice& c : kPaperChoices) paper_->addItem(c.label);
  run_legend_ = new QLabel;
  run_legend_->setTextFormat(Qt::RichText);
  bar->addWidget(x_axis_);
  bar->addWidget(paper_);
  bar->addSpacing(12);
  bar->addWidget(run_legend_, 1);
  layout->addLayout(bar);
  connect(x_axis_, &QComboBox::currentIndexChanged, this, [this](int i) { set_x_tokens(i == 1); });
  connect(paper_, &QComboBox::currentIndexChanged, this, [this] { schedule_refresh(); });

  auto* split = new QSplitter(Qt::Vertical);
  auto* scroll = new QScrollArea;
  scroll->setWidgetResizable(true);
  grid_box_ = new QWidget;
  auto* box_layout = new QVBoxLayout(grid_box_);
  box_layout->setContentsMargins(0, 0, 0, 0);
  empty_label_ = new QLabel(
      "No benchmark results for the overlaid runs yet.\nRun `ftx eval --checkpoint DIR --task T --data FILE`, or "
      "train with --bench-tasks and --bench-every;\ntick runs in the Runs dock to overlay them.");
  empty_label_->setAlignment(Qt::AlignCenter);
  empty_label_->setStyleSheet("color: #777;");
  box_layout->addWidget(empty_label_);
  grid_ = new QGridLayout;
  grid_->setSpacing(6);
  box_layout->addLayout(grid_, 1);  // charts share the height (at least kChartMinHeight each)
  scroll->setWidget(grid_box_);
  split->addWidget(scroll);

  auto* bottom = new QSplitter(Qt::Horizontal);
  latest_ = new QTableWidget;
  latest_->setObjectName("bench_latest");
  latest_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  latest_->setSelectionMode(QAbstractItemView::NoSelection);
  latest_->verticalHeader()->hide();
  latest_->verticalHeader()->setDefaultSectionSize(latest_->fontMetrics().height() + 8);
  latest_->horizontalHeader()->setStretchLastSection(true);
  bottom->addWidget(latest_);
  auto* items_page = new QWidget;
  auto* items_layout = new QVBoxLayout(items_page);
  items_layout->setContentsMargins(0, 0, 0, 0);
  items_title_ = new QLabel("Click a point to list the items scored at that step.");
  items_title_->setObjectName("bench_items_title");
  items_title_->setWordWrap(true);
  items_layout->addWidget(items_title_);
  auto* items_split = new QSplitter(Qt::Vertical);
  items_table_ = new QTableWidget(0, 4);
  items_table_->setObjectName("bench_items");
  items_table_->setHorizontalHeaderLabels({"Item", "Verdict", "Score", "Generation"});
  items_table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  items_table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  items_table_->setSelectionMode(QAbstractItemView::SingleSelection);
  items_table_->verticalHeader()->hide();
  items_table_->setWordWrap(false);
  items_table_->verticalHeader()->setDefaultSectionSize(items_table_->fontMetrics().height() + 6);
  items_table_->horizontalHeader()->setStretchLastSection(true);
  item_text_ = new QPlainTextEdit;
  item_text_->setObjectName("bench_item_text");
  item_text_->setReadOnly(true);
  item_text_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  item_text_->setPlaceholderText("Select an item to read its prompt, generation and target.");
  items_split->addWidget(items_table_);
  items_split->addWidget(item_text_);
  items_layout->addWidget(items_split, 1);
  bottom->addWidget(items_page);
  bottom->setStretchFactor(0, 2);
  bottom->setStretchFactor(1, 3);
  split->addWidget(bottom);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setSizes({640, 300});  // the charts first: a scroll area's size hint is small
  bottom->setSizes({500, 500});
  items_split->setSizes({200, 120});
  layout->addWidget(split, 1);
  connect(items_table_, &QTableWidget::currentCellChanged, this, [this](int row) { show_item_detail(row); });
  update_run_legend();
}

BenchmarksView::~BenchmarksView() = default;

void BenchmarksView::set_runs(const std::vector<CurveRun>& runs) {
  runs_ = runs;
  update_run_legend();
  schedule_refresh();
}

void BenchmarksView::add_rows(const BenchBatch& rows) {
  for (const auto& [run, row] : rows) data_[run][{row.task, row.metric}][row.step] = row;
  if (!rows.empty()) schedule_refresh();
}

void BenchmarksView::reset_run(int64_t run_id, const BenchBatch& rows) {
  data_.erase(run_id);
  add_rows(rows);
  schedule_refresh();
}

void BenchmarksView::keep_runs(const std::vector<int64_t>& alive) {
  const std::set<int64_t> keep(alive.begin(), alive.end());
  const size_t before = data_.size();
  std::erase_if(data_, [&](const auto& kv) { return !keep.count(kv.first); });
  if (data_.size() != before) schedule_refresh();
}

void BenchmarksView::set_reference(const ReferenceRows& rows) {
  reference_ = rows;
  schedule_refresh();
}

void BenchmarksView::set_x_tokens(bool tokens) {
  if (x_axis_->currentIndex() != (tokens ? 1 : 0)) x_axis_->setCurrentIndex(tokens ? 1 : 0);
  if (x_tokens_ == tokens) return;
  x_tokens_ = tokens;
  schedule_refresh();
}

bool BenchmarksView::set_metric(const QString& task, const QString& metric) {
  const auto metrics = metrics_of(task.toStdString());
  if (std::find(metrics.begin(), metrics.end(), metric.toStdString()) == metrics.end()) return false;
  chosen_metric_[task.toStdString()] = metric.toStdString();
  schedule_refresh();
  return true;
}

size_t BenchmarksView::error_bars(const QString& task) const {
  const qsizetype i = chart_tasks_.indexOf(task);
  return i < 0 ? 0 : charts_[i]->bar_count();
}

QStringList BenchmarksView::tasks() const {
  std::set<std::string> names;
  for (const CurveRun& run : runs_) {
    auto it = data_.find(run.id);
    if (it == data_.end()) continue;
    for (const auto& [key, s] : it->second) names.insert(key.first);
  }
  std::vector<std::string> order(names.begin(), names.end());
  std::stable_sort(order.begin(), order.end(),
                   [](const std::string& a, const std::string& b) { return task_rank(a) < task_rank(b); });
  QStringList out;
  for (const std::string& t : order) out << QString::fromStdString(t);
  return out;
}

const BenchmarksView::Series* BenchmarksView::series(int64_t run_id, const std::string& task,
                                                     const std::string& metric) const {
  auto it = data_.find(run_id);
  if (it == data_.end()) return nullptr;
  auto s = it->second.find({task, metric});
  return s == it->second.end() || s->second.empty() ? nullptr : &s->second;
}

std::vector<std::string> BenchmarksView::metrics_of(const std::string& task) const {
  std::set<std::string> names;
  for (const CurveRun& run : runs_) {
    auto it = data_.find(run.id);
    if (it == data_.end()) continue;
    for (const auto& [key, s] : it->second)
      if (key.first == task) names.insert(key.second);
  }
  return {names.begin(), names.end()};
}

std::string BenchmarksView::metric_for(const std::string& task) const {
  const auto metrics = metrics_of(task);
  if (metrics.empty()) return {};
  auto has = [&](const std::string& m) { return std::find(metrics.begin(), metrics.end(), m) != metrics.end(); };
  if (auto it = chosen_metric_.find(task); it != chosen_metric_.end() && has(it->second)) return it->second;
  const bench::TaskInfo* info = bench::find_task_info(task);
  if (info && has(info->main_metric)) return info->main_metric;
  return metrics.front();
}

QString BenchmarksView::run_name(int64_t run_id) const {
  for (const CurveRun& r : runs_)
    if (r.id == run_id) return r.name;
  return QString("run %1").arg(run_id);
}

void BenchmarksView::schedule_refresh() {
  if (refresh_pending_) return;
  refresh_pending_ = true;
  QTimer::singleShot(kRefreshDelayMs, this, [this] { refresh(); });
}

void BenchmarksView::refresh() {
  refresh_pending_ = false;
  const QStringList tasks = this->tasks();
  if (tasks != chart_tasks_) rebuild_grid(tasks);
  empty_label_->setVisible(tasks.isEmpty());
  const PaperChoice& choice = kPaperChoices[std::max(0, paper_->currentIndex())];
  for (int i = 0; i < tasks.size(); ++i) {
    const std::string task = tasks[i].toStdString(), metric = metric_for(task);
    std::vector<const ReferenceRow*> refs;
    const bench::TaskInfo* info = bench::find_task_info(task);
    if (info && !info->paper_name.empty() && metric == info->main_metric)
      for (const ReferenceRow& r : reference_)
        if (r.benchmark == info->paper_name && r.metric == info->paper_metric && paper_row_selected(r, choice))
          refs.push_back(&r);
    charts_[i]->update(metric, metrics_of(task), x_tokens_, refs, choice.size[0] == '*');
  }
  update_latest_table(tasks);
  // Something in the items panel from the start: the first chart's latest point of its first run.
  if (request_ == 0 && !tasks.isEmpty())
    for (const CurveRun& run : runs_)
      if (const Series* s = series(run.id, tasks[0].toStdString(), metric_for(tasks[0].toStdString())))
        return select_point(tasks[0], run.id, s->rbegin()->first);
}

void BenchmarksView::rebuild_grid(const QStringList& tasks) {
  charts_.clear();  // deletes their widgets with them
  while (QLayoutItem* item = grid_->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  for (int i = 0; i < tasks.size(); ++i) {
    auto chart = std::make_unique<BenchChart>(this, tasks[i]);
    grid_->addWidget(chart->widget(), i / kColumns, i % kColumns);
    charts_.push_back(std::move(chart));
  }
  for (int c = 0; c < kColumns; ++c) grid_->setColumnStretch(c, 1);
  for (int r = 0; r < grid_->rowCount(); ++r) grid_->setRowStretch(r, 1);
  chart_tasks_ = tasks;
}

void BenchmarksView::update_latest_table(const QStringList& tasks) {
  latest_->clear();
  latest_->setRowCount(static_cast<int>(tasks.size()));
  latest_->setColumnCount(2 + static_cast<int>(runs_.size()));
  QStringList headers{"Task", "Metric"};
  for (const CurveRun& r : runs_) headers << r.name;
  latest_->setHorizontalHeaderLabels(headers);
  for (int c = 0; c < static_cast<int>(runs_.size()); ++c)
    latest_->horizontalHeaderItem(2 + c)->setForeground(runs_[c].color.darker(120));
  for (int row = 0; row < tasks.size(); ++row) {
    const std::string task = tasks[row].toStdString(), metric = metric_for(task);
    latest_->setItem(row, 0, new QTableWidgetItem(tasks[row]));
    latest_->setItem(row, 1, new QTableWidgetItem(QString::fromStdString(metric)));
    for (int c = 0; c < static_cast<int>(runs_.size()); ++c) {
      const Series* s = series(runs_[c].id, task, metric);
      if (!s) continue;
      const BenchmarkRow& last = s->rbegin()->second;
      auto* item = new QTableWidgetItem(value_text(last.value) +
                                        (last.stderr_ > 0 ? " \u00b1 " + value_text(last.stderr_) : QString()));
      item->setToolTip(QString("step %1, n = %2").arg(last.step).arg(last.n));
      item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      latest_->setItem(row, 2 + c, item);
    }
  }
  latest_->resizeColumnsToContents();
}

void BenchmarksView::update_run_legend() {
  QString html;
  for (const CurveRun& r : runs_)
    html += QString("<span style='color:%1'>\u25cf</span> %2&nbsp;&nbsp; ").arg(r.color.name(), r.name.toHtmlEscaped());
  run_legend_->setText(runs_.empty() ? "No run overlaid (tick runs in the Runs dock)" : html);
}

void BenchmarksView::select_point(const QString& task, int64_t run_id, int64_t step) {
  ++request_;
  selected_task_ = task, selected_run_ = run_id, selected_step_ = step;
  schedule_refresh();
  items_.clear();
  items_table_->setRowCount(0);
  item_text_->clear();
  items_title_->setText(QString("%1 · %2 · step %3: loading items…").arg(task, run_name(run_id)).arg(step));
  emit items_requested(request_, run_id, step, task);
}

void BenchmarksView::show_items(quint64 request, qint64 run_id, qint64 step, const QString& task,
                                const BenchItems& items, const QString& error) {
  if (request != request_) return;  // the user clicked another point meanwhile
  items_ = items;
  if (!error.isEmpty()) {
    items_title_->setText(error);
    return;
  }
  int pass = 0;
  for (const BenchItemRow& it : items) pass += passed(it.verdict);
  QString title = QString("%1 · %2 · step %3: %4 items, %5 passed or correct")
                      .arg(task, run_name(run_id))
                      .arg(step)
                      .arg(items.size())
                      .arg(pass);
  if (static_cast<int64_t>(items.size()) >= kMaxItemsShown) title += QString(" (first %1 shown)").arg(kMaxItemsShown);
  if (items.empty()) title = QString("%1 · %2 · step %3: no items stored").arg(task, run_name(run_id)).arg(step);
  items_title_->setText(title);
  items_table_->setRowCount(static_cast<int>(items.size()));
  for (int i = 0; i < static_cast<int>(items.size()); ++i) {
    const BenchItemRow& it = items[i];
    QString gen = QString::fromStdString(it.output).simplified();
    if (gen.size() > kGenerationPreview) gen = gen.left(kGenerationPreview) + "…";
    auto* verdict = new QTableWidgetItem(QString::fromStdString(it.verdict));
    verdict->setForeground(passed(it.verdict) ? QColor(0x2e7d32) : QColor(0xc62828));
    items_table_->setItem(i, 0, new QTableWidgetItem(QString::fromStdString(it.item_id)));
    items_table_->setItem(i, 1, verdict);
    items_table_->setItem(i, 2, new QTableWidgetItem(QString::number(it.score, 'g', 4)));
    items_table_->setItem(i, 3, new QTableWidgetItem(gen));
  }
  items_table_->resizeColumnsToContents();
  items_table_->horizontalHeader()->setStretchLastSection(true);
  if (!items.empty()) items_table_->selectRow(0);
}

void BenchmarksView::show_item_detail(int row) {
  if (row < 0 || row >= static_cast<int>(items_.size())) return item_text_->clear();
  const BenchItemRow& it = items_[row];
  QString text =
      QString("── %1 · %2 · score %3\n\n── prompt\n%4\n\n── generation\n%5\n\n── target\n%6")
          .arg(QString::fromStdString(it.item_id), QString::fromStdString(it.verdict))
          .arg(it.score)
          .arg(QString::fromStdString(it.prompt), QString::fromStdString(it.output), QString::fromStdString(it.target));
  if (!it.detail_json.empty() && it.detail_json != "{}") {
    const nlohmann::json j = nlohmann::json::parse(it.detail_json, nullptr, false);
    text += "\n\n── detail\n" + QString::fromStdString(j.is_discarded() ? it.detail_json : j.dump(2));
  }
  item_text_->setPlainText(text);
}

}  // namespace ftx
