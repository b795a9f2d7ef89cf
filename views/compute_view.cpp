#include "views/compute_view.h"

#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <algorithm>
#include <cmath>

#include "views/token_label.h"

namespace ftx {
namespace {

constexpr int kTokensH = 20, kStripH = 36, kMargin = 8;

// The gate's colour: dark blue at 0, green at 1/2, yellow at 1.
QColor gate_colour(float g) {
  const double x = std::clamp(double(g), 0.0, 1.0);
  const double lo[3] = {40, 50, 140}, mid[3] = {50, 160, 130}, hi[3] = {250, 220, 50};
  const double* a = x < 0.5 ? lo : mid;
  const double* b = x < 0.5 ? mid : hi;
  const double f = x < 0.5 ? x * 2 : (x - 0.5) * 2;
  return QColor(int(a[0] + f * (b[0] - a[0])), int(a[1] + f * (b[1] - a[1])), int(a[2] + f * (b[2] - a[2])));
}

QString num(double v, int prec = 3) { return std::isfinite(v) ? QString::number(v, 'f', prec) : QString("–"); }

// The lowest and highest of some values (0, 1 for none): the colour and bar scales of a block,
// since a trained gate can vary by a few hundredths along a sequence.
std::pair<float, float> range_of(const std::vector<float>& a, const std::vector<float>& b = {}) {
  if (a.empty() && b.empty()) return {0.0f, 1.0f};
  float lo = a.empty() ? b[0] : a[0], hi = lo;
  for (const auto* v : {&a, &b})
    for (float x : *v) lo = std::min(lo, x), hi = std::max(hi, x);
  return {lo, hi};
}
// x in [lo, hi] as 0..1 (1/2 when the range is empty).
double unit(float x, std::pair<float, float> r) {
  return r.second - r.first > 1e-6f ? (double(x) - r.first) / (double(r.second) - r.first) : 0.5;
}

}  // namespace

ComputeView::ComputeView(QWidget* parent) : QWidget(parent) {
  setObjectName("compute");
  setMouseTracking(true);
  setMinimumSize(480, 240);
  message_ = "Pick a routed run (--routing) with a checkpoint and press Inspect";
}

void ComputeView::set_inspection(const ftx::ComputeInspection& ci, QString run, int step) {
  ci_ = ci, run_ = std::move(run), step_ = step, message_.clear();
  layout_.reset();
  update();
}

void ComputeView::set_message(QString message) {
  message_ = std::move(message);
  update();
}

QStringList ComputeView::header_lines() const {
  if (!ci_) return {};
  const ComputeInspection& ci = *ci_;
  QStringList routed, ranges;
  for (const BlockCompute& b : ci.blocks)
    if (b.routed) {
      routed << QString::number(b.layer);
      const auto r = range_of(b.gate);
      ranges << QString("block %1 %2–%3").arg(b.layer).arg(num(r.first, 4), num(r.second, 4));
    }
  return {QString("Run '%1' at step %2: router %3, capacity %4 (this sequence: %5 of the routed blocks' tokens "
                  "computed), routed blocks %6")
              .arg(run_)
              .arg(step_)
              .arg(QString::fromStdString(ci.router), num(ci.capacity, 2), num(ci.realised, 3), routed.join(", ")),
          "Path: " + QString::fromStdString(ci.path) + ". Hover a cell for its numbers.",
          "Colour: each routed block's gate from its lowest (blue) to its highest (yellow) on this sequence: " +
              ranges.join(", ")};
}

// Height of `lines` drawn one under another, each wrapped to `width`.
static int wrapped_height(const QFontMetrics& fm, const QStringList& lines, int width) {
  int h = 0;
  for (const QString& line : lines) h += fm.boundingRect(QRect(0, 0, width, 100000), Qt::TextWordWrap, line).height();
  return h;
}

ComputeView::Layout ComputeView::layout() const {
  if (layout_ && layout_->first == width()) return layout_->second;
  Layout l;
  if (!ci_ || ci_->T <= 0) return l;
  const int header_h = kMargin + wrapped_height(fontMetrics(), header_lines(), width() - 2 * kMargin) + 8;
  l.label_w = fontMetrics().horizontalAdvance("block 00 routed") + 12;
  l.cell_w = std::clamp((width() - l.label_w - 2 * kMargin) / ci_->T, 4, 28);
  l.cell_h = 20;
  l.grid = QRect(kMargin + l.label_w, header_h, l.cell_w * ci_->T, l.cell_h * int(ci_->blocks.size()));
  layout_.emplace(width(), l);
  return l;
}

std::optional<std::pair<int, int>> ComputeView::cell_at(QPoint p) const {
  const Layout l = layout();
  if (!ci_ || !l.grid.contains(p)) return std::nullopt;
  return std::make_pair((p.y() - l.grid.top()) / l.cell_h, (p.x() - l.grid.left()) / l.cell_w);
}

QString ComputeView::token_label(int pos) const {
  if (!ci_) return {};
  if (!ci_->tokens.empty())
    return pos < int(ci_->tokens.size()) ? QString::fromStdString(printable_token(ci_->tokens[size_t(pos)]))
                                         : QString();
  return pos < int(ci_->text.size()) ? QString::fromStdString(printable_token(ci_->text.substr(size_t(pos), 1)))
                                     : QString();
}

QString ComputeView::cell_text(int block, int pos) const {
  if (!ci_ || block < 0 || block >= int(ci_->blocks.size()) || pos < 0 || pos >= ci_->T) return {};
  const BlockCompute& b = ci_->blocks[size_t(block)];
  QString s = QString("block %1, position %2, token '%3'\n").arg(b.layer).arg(pos).arg(token_label(pos));
  if (!b.routed) return s + "dense block: computed";
  const size_t i = size_t(pos);
  s += b.computed[i] ? "computed" : "skipped (passed on unchanged, no K/V)";
  s += "\ngate g = " + num(b.gate[i]);
  if (!b.student.empty())
    s += QString("\nstudent: p(compute) %1, %2 the teacher")
             .arg(num(b.student[i]), (b.student[i] > 0.5f) == (b.computed[i] != 0) ? "agrees with" : "differs from");
  if (!b.d_st.empty())
    s += QString("\nD_st %1, D_ch %2, MA(D_st) %3\ns_ce %4 (expected change), s_cu %5 (unexpected)")
             .arg(num(b.d_st[i], 4), num(b.d_ch[i], 4), num(b.ma[i], 4), num(b.s_ce[i]), num(b.s_cu[i]));
  return s;
}

void ComputeView::mouseMoveEvent(QMouseEvent* e) {
  const auto cell = cell_at(e->position().toPoint());
  if (cell)
    QToolTip::showText(e->globalPosition().toPoint(), cell_text(cell->first, cell->second), this);
  else
    QToolTip::hideText();
}

void ComputeView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().window());
  const QFontMetrics fm = fontMetrics();
  if (!ci_) {
    p.drawText(rect().adjusted(kMargin, kMargin, -kMargin, -kMargin), Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap,
               message_);
    return;
  }
  const ComputeInspection& ci = *ci_;
  const Layout l = layout();
  {
    int hy = kMargin;
    const QStringList lines = header_lines();
    for (int i = 0; i < lines.size(); ++i) {
      p.setPen(palette().color(i == 0 ? QPalette::WindowText : QPalette::PlaceholderText));
      const QRect r(kMargin, hy, width() - 2 * kMargin, 100000);
      p.drawText(r, Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap, lines[i]);
      hy += fm.boundingRect(r, Qt::TextWordWrap, lines[i]).height();
    }
  }
  // the grid
  for (size_t r = 0; r < ci.blocks.size(); ++r) {
    const BlockCompute& b = ci.blocks[r];
    const auto g_range = range_of(b.gate);
    const int y = l.grid.top() + int(r) * l.cell_h;
    p.setPen(palette().color(QPalette::WindowText));
    p.drawText(QRect(kMargin, y, l.label_w - 6, l.cell_h), Qt::AlignRight | Qt::AlignVCenter,
               QString("block %1 %2").arg(b.layer).arg(b.routed ? "routed" : "dense"));
    for (int t = 0; t < ci.T; ++t) {
      const QRect cell(l.grid.left() + t * l.cell_w, y, l.cell_w - 1, l.cell_h - 2);
      if (!b.routed)
        p.fillRect(cell, QColor(200, 200, 205));
      else if (b.computed[size_t(t)])
        p.fillRect(cell, gate_colour(float(unit(b.gate[size_t(t)], g_range))));
      else {
        p.setPen(QColor(190, 190, 190));
        p.drawRect(cell.adjusted(0, 0, -1, -1));
      }
    }
  }
  // the tokens
  int y = l.grid.bottom() + 4;
  p.setPen(palette().color(QPalette::WindowText));
  p.drawText(QRect(kMargin, y, l.label_w - 6, kTokensH), Qt::AlignRight | Qt::AlignVCenter, "token");
  if (l.cell_w >= 7)
    for (int t = 0; t < ci.T; ++t)
      p.drawText(QRect(l.grid.left() + t * l.cell_w, y, l.cell_w, kTokensH), Qt::AlignCenter, token_label(t).left(3));
  y += kTokensH + 4;
  // one surprise strip per SDT/STT block: s_ce (blue) left, s_cu (orange) right of each column,
  // scaled from the strip's lowest to its highest value (a tenth of the height at the lowest)
  QStringList strip_ranges;
  for (const BlockCompute& b : ci.blocks) {
    if (b.s_ce.empty()) continue;
    const auto s_range = range_of(b.s_ce, b.s_cu);
    strip_ranges << QString("block %1 %2–%3").arg(b.layer).arg(num(s_range.first), num(s_range.second));
    p.setPen(palette().color(QPalette::WindowText));
    p.drawText(QRect(kMargin, y, l.label_w - 6, kStripH), Qt::AlignRight | Qt::AlignVCenter,
               QString("surprise %1").arg(b.layer));
    p.fillRect(QRect(l.grid.left(), y, l.grid.width(), kStripH), QColor(245, 245, 245));
    const int half = std::max(1, (l.cell_w - 1) / 2);
    for (int t = 0; t < ci.T; ++t) {
      const int x = l.grid.left() + t * l.cell_w;
      const int hce = int(std::lround((0.1 + 0.9 * unit(b.s_ce[size_t(t)], s_range)) * kStripH));
      const int hcu = int(std::lround((0.1 + 0.9 * unit(b.s_cu[size_t(t)], s_range)) * kStripH));
      p.fillRect(QRect(x, y + kStripH - hce, half, hce), QColor(60, 110, 200));
      p.fillRect(QRect(x + half, y + kStripH - hcu, half, hcu), QColor(240, 140, 40));
    }
    y += kStripH + 4;
  }
  if (!strip_ranges.isEmpty()) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    const QString legend =
        "bars: s_ce = sigmoid(beta_ce CE), the expected change (blue); s_cu = sigmoid(beta_cu CU), "
        "the unexpected change (orange); each strip from its lowest to its highest: " +
        strip_ranges.join(", ");
    const QRect r(kMargin, y, width() - 2 * kMargin, 100000);
    p.drawText(r, Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap, legend);
    y += fm.boundingRect(r, Qt::TextWordWrap, legend).height() + 4;
  }
  // the synthetic task's events
  if (!ci.events.empty()) {
    p.setPen(palette().color(QPalette::WindowText));
    p.drawText(kMargin, y + fm.ascent(),
               QString("Gate AUROC against '_' over %1 held-out sequences (share computed):").arg(ci.event_sequences));
    y += fm.height() + 2;
    int layer = -1;
    QString line;
    auto flush = [&] {
      if (line.isEmpty()) return;
      p.drawText(kMargin + 12, y + fm.ascent(), line);
      y += fm.height() + 2;
      line.clear();
    };
    for (const EventAuroc& a : ci.events) {
      if (a.layer != layer) {
        flush();
        layer = a.layer;
        line = QString("block %1: '_' %2 computed").arg(layer).arg(num(100 * a.computed_background, 0) + "%");
      }
      line += QString(";  %1 %2 (%3)").arg(synth_event_name(a.event), num(a.auroc, 2), num(100 * a.computed, 0) + "%");
    }
    flush();
  }
  if (!message_.isEmpty()) {
    p.setPen(palette().color(QPalette::WindowText));
    p.drawText(kMargin, height() - kMargin - fm.descent(), message_);
  }
}

}  // namespace ftx
