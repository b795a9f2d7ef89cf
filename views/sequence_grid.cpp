#include "views/sequence_grid.h"

#include <QEvent>
#include <QFontDatabase>
#include <QFontMetricsF>
#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QPixmap>
#include <QStringList>
#include <QToolTip>
#include <algorithm>
#include <cmath>

namespace ftx {

namespace {

constexpr double kMargin = 10;                  // around the whole grid
constexpr double kGap = 16;                     // between blocks side by side, and between stacked groups
constexpr double kPad = 8;                      // inside a group's frame
constexpr double kMarker = 8;                   // left of each row's text: room for the invalid marker
constexpr int kMinColumns = 66;                 // a synthetic sequence: 2 prompt + 64 body tokens
const QColor kIndependentAccent(28, 126, 214);  // blue, like the paper's independent group
const QColor kFixedAccent(47, 158, 68);         // green, like the paper's fixed-Z groups
const QColor kInvalid(224, 49, 49);

QColor with_alpha(QColor c, int alpha) {
  c.setAlpha(alpha);
  return c;
}

// A stable colour per letter A..Z: hues spread by the golden ratio so that letters next to each
// other in the alphabet never get similar colours; light enough to carry dark text.
QColor letter_colour(char letter) {
  const double hue = std::fmod((letter - 'A') * 0.618033988749895, 1.0);
  return QColor::fromHsvF(hue, 0.50, 0.97);
}

QColor readable_on(const QColor& bg) {
  const double luma = 0.299 * bg.redF() + 0.587 * bg.greenF() + 0.114 * bg.blueF();
  return luma > 0.6 ? QColor(20, 20, 20) : QColor(250, 250, 250);
}

// The prompt is "<letter>>": the tokens up to the first '>' token near the start.
int prompt_length(const std::vector<std::string>& tokens) {
  const auto gt = std::find(tokens.begin(), tokens.end(), ">") - tokens.begin();
  return gt < static_cast<std::ptrdiff_t>(tokens.size()) && gt < 8 ? static_cast<int>(gt) + 1 : 0;
}

QString fraction_text(double v) { return std::isnan(v) ? QStringLiteral("–") : QString::number(v, 'f', 2); }
QString percent_text(double v) {
  return std::isnan(v) ? QStringLiteral("–") : QString::number(v * 100.0, 'f', 0) + QStringLiteral(" %");
}

QString group_title(const ftx::GroupView& g) {
  return g.fixed ? SequenceGrid::tr("Fixed Z #%1").arg(g.group) : SequenceGrid::tr("Independent Z");
}
// A fixed-Z group's agreement depends on where its target starts (docs/figure4.md): it says where.
// Compact: the same in fewer words, for narrow columns.
QString group_metrics_text(const ftx::GroupView& g, bool compact) {
  const QString text = (compact ? SequenceGrid::tr("valid %1 · agree %2 · noise %3")
                                : SequenceGrid::tr("valid %1   agreement %2   noise agreement %3"))
                           .arg(percent_text(g.valid), fraction_text(g.agreement), fraction_text(g.noise_agreement));
  if (!g.fixed || g.start < 0) return text;
  return text + (compact ? SequenceGrid::tr(" · at %1") : SequenceGrid::tr("   target at %1")).arg(g.start);
}

QString validity_text(const ftx::GroupRow& row) {
  if (!row.valid)
    return SequenceGrid::tr(
        "invalid: not a synthetic sequence (64 characters of '_', '!' and the\n"
        "prompt's letter, at least 4 letters, all inside one window of 8)");
  QStringList starts;
  for (int s : row.starts) starts << QString::number(s);
  if (starts.size() == 1) return SequenceGrid::tr("valid, target starts at body position %1").arg(starts[0]);
  return SequenceGrid::tr("valid, target may start at body position %1").arg(starts.join(QStringLiteral(" or ")));
}

// One token's cell: the synthetic task's letters, noise and blanks (one-character tokens) styled,
// any other token drawn as its text.
void paint_cell(QPainter& p, const QRectF& cell, const std::string& token, bool in_prompt, const QPalette& pal) {
  const QColor ink = pal.color(QPalette::Text);
  const char ch = token.size() == 1 ? token[0] : '\0';
  QColor pen = ink;
  if (in_prompt) {
    pen = pal.color(QPalette::PlaceholderText);
  } else if (ch >= 'A' && ch <= 'Z') {
    const QColor bg = letter_colour(ch);
    p.fillRect(cell.adjusted(0, 1, 0, -1), bg);
    pen = readable_on(bg);
  } else if (ch == '!') {
    pen = with_alpha(ink, 120);
  } else if (ch == '_') {
    pen = with_alpha(ink, 60);
  }
  p.setPen(pen);
  p.drawText(cell, Qt::AlignCenter, QString::fromUtf8(token.data(), static_cast<qsizetype>(token.size())));
}

}  // namespace

SequenceGrid::SequenceGrid(QWidget* parent) : QWidget(parent) {
  cell_font_ = QFontDatabase::systemFont(QFontDatabase::FixedFont);
  cell_font_.setStyleHint(QFont::Monospace);
  cell_font_.setFixedPitch(true);
  cell_font_.setPointSizeF(std::max(10.0, font().pointSizeF()));
  placeholder_ = tr("No generations yet.");
  QSizePolicy policy(QSizePolicy::Preferred, QSizePolicy::Preferred);
  policy.setHeightForWidth(true);
  setSizePolicy(policy);
  setMouseTracking(true);
}

void SequenceGrid::set_groups(const std::vector<ftx::GroupView>& groups, const QString& caption) {
  blocks_.clear();
  for (const ftx::GroupView& g : groups) blocks_.push_back({QString(), {g}});
  caption_ = caption;
  relayout();
}

void SequenceGrid::set_columns(const GroupColumns& columns, const QString& caption) {
  blocks_.clear();
  for (const auto& [column_caption, groups] : columns) blocks_.push_back({column_caption, groups});
  caption_ = caption;
  relayout();
}

void SequenceGrid::set_placeholder(const QString& text) {
  blocks_.clear();
  caption_.clear();
  placeholder_ = text;
  relayout();
}

void SequenceGrid::set_compact(bool compact) {
  compact_ = compact;
  relayout();
}

void SequenceGrid::set_cell_point_size(double points) {
  cell_font_.setPointSizeF(points);
  relayout();
}

bool SequenceGrid::save_png(const QString& path) {
  if (width() <= 0 || height() <= 0) resize(sizeHint());
  const QPixmap pixmap = grab();
  return !pixmap.isNull() && pixmap.save(path, "PNG");
}

SequenceGrid::Metrics SequenceGrid::metrics() const {
  const QFontMetricsF cell(cell_font_);
  QFont bold = font();
  bold.setBold(true);
  const QFontMetricsF ui(bold);
  Metrics m;
  m.cell_w = cell.horizontalAdvance(QLatin1Char('M'));
  m.cell_h = std::ceil(cell.height()) + 3;
  m.header_h = std::ceil(2 * ui.height()) + kPad + 6;
  m.caption_h = std::ceil(ui.height()) + 8;
  ftx::GroupView widest;
  widest.fixed = true, widest.valid = 1, widest.start = 56;
  const double metrics_w = ui.horizontalAdvance(group_metrics_text(widest, compact_));
  m.block_w = 2 * kPad + kMarker + std::max(text_columns_ * m.cell_w, metrics_w);
  return m;
}

double SequenceGrid::place_block(const Block& block, double x, double y, const Metrics& m, Layout& out) const {
  const double top = y;
  if (!block.caption.isEmpty()) {
    out.captions.push_back({QRectF(x, y, m.block_w, m.caption_h), block.caption});
    y += m.caption_h;
  }
  for (size_t gi = 0; gi < block.groups.size(); ++gi) {
    const ftx::GroupView& g = block.groups[gi];
    if (gi > 0) y += kGap;
    const double h = m.header_h + static_cast<double>(g.rows.size()) * m.cell_h + kPad;
    out.groups.push_back({QRectF(x, y, m.block_w, h), &g});
    double row_y = y + m.header_h;
    for (size_t ri = 0; ri < g.rows.size(); ++ri, row_y += m.cell_h) {
      const QRectF rect(x + 1, row_y, m.block_w - 2, m.cell_h);
      out.rows.push_back({rect, x + kPad + kMarker, &g.rows[ri], static_cast<int>(ri)});
    }
    y += h;
  }
  return y - top;
}

SequenceGrid::Layout SequenceGrid::layout_for_width(int width) const {
  Layout out;
  out.width = width;
  const Metrics m = metrics();
  double y = kMargin;
  if (!caption_.isEmpty()) {
    out.captions.push_back({QRectF(kMargin, y, std::max(0.0, width - 2 * kMargin), m.caption_h), caption_});
    y += m.caption_h;
  }
  double x = kMargin, line_h = 0;
  for (const Block& block : blocks_) {
    if (x > kMargin && x + m.block_w > width - kMargin) {  // wrap to the next line of blocks
      x = kMargin;
      y += line_h + kGap;
      line_h = 0;
    }
    line_h = std::max(line_h, place_block(block, x, y, m, out));
    x += m.block_w + kGap;
  }
  out.height = static_cast<int>(std::ceil(y + line_h + kMargin));
  return out;
}

void SequenceGrid::relayout() {
  text_columns_ = kMinColumns;
  for (const Block& block : blocks_)
    for (const ftx::GroupView& g : block.groups)
      for (const ftx::GroupRow& row : g.rows)
        text_columns_ = std::max(text_columns_, static_cast<int>(row.tokens.size()));
  layout_ = layout_for_width(width());
  hovered_ = -1;
  updateGeometry();
  update();
}

QSize SequenceGrid::sizeHint() const {
  const Metrics m = metrics();
  const int n = std::clamp(static_cast<int>(blocks_.size()), 1, 3);
  const int w = static_cast<int>(std::ceil(2 * kMargin + n * m.block_w + (n - 1) * kGap));
  return {w, heightForWidth(w)};
}

QSize SequenceGrid::minimumSizeHint() const {
  const Metrics m = metrics();
  return {static_cast<int>(std::ceil(2 * kMargin + m.block_w)), static_cast<int>(2 * m.caption_h)};
}

bool SequenceGrid::hasHeightForWidth() const { return true; }

int SequenceGrid::heightForWidth(int width) const {
  if (blocks_.empty()) return static_cast<int>(4 * metrics().caption_h);
  return layout_for_width(width).height;
}

void SequenceGrid::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  layout_ = layout_for_width(width());
  hovered_ = -1;
}

void SequenceGrid::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::FontChange || event->type() == QEvent::PaletteChange) relayout();
}

void SequenceGrid::paintEvent(QPaintEvent*) {
  QPainter p(this);
  const QPalette& pal = palette();
  p.fillRect(rect(), pal.color(QPalette::Base));
  if (blocks_.empty()) {
    p.setPen(pal.color(QPalette::PlaceholderText));
    p.drawText(rect().adjusted(20, 20, -20, -20), Qt::AlignCenter | Qt::TextWordWrap, placeholder_);
    return;
  }
  const Metrics m = metrics();
  QFont bold = font();
  bold.setBold(true);
  p.setFont(bold);
  p.setPen(pal.color(QPalette::Text));
  const QFontMetricsF fm(bold);
  for (const PlacedText& c : layout_.captions)
    p.drawText(c.rect, Qt::AlignLeft | Qt::AlignVCenter, fm.elidedText(c.text, Qt::ElideRight, c.rect.width()));
  for (const PlacedGroup& g : layout_.groups) paint_group(p, g, m);
  for (size_t i = 0; i < layout_.rows.size(); ++i) paint_row(p, layout_.rows[i], m, static_cast<int>(i) == hovered_);
}

void SequenceGrid::paint_group(QPainter& p, const PlacedGroup& pg, const Metrics& m) const {
  const ftx::GroupView& g = *pg.group;
  const QPalette& pal = palette();
  const QColor accent = g.fixed ? kFixedAccent : kIndependentAccent;
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setPen(QPen(pal.color(QPalette::Mid), 1));
  p.setBrush(pal.color(QPalette::AlternateBase));
  p.drawRoundedRect(pg.rect.adjusted(0.5, 0.5, -0.5, -0.5), 4, 4);
  p.setPen(Qt::NoPen);
  p.setBrush(accent);
  p.drawRoundedRect(QRectF(pg.rect.left() + 3, pg.rect.top() + kPad / 2, 4, m.header_h - kPad), 2, 2);
  p.setRenderHint(QPainter::Antialiasing, false);

  QFont title = font();
  title.setBold(true);
  const double line_h = QFontMetricsF(title).height();
  QRectF line(pg.rect.left() + kPad + kMarker, pg.rect.top() + kPad / 2 + 1, pg.rect.width() - 2 * kPad - kMarker,
              line_h);
  p.setFont(title);
  p.setPen(pal.color(QPalette::Text));
  p.drawText(line, Qt::AlignLeft | Qt::AlignVCenter, group_title(g));
  p.setFont(font());
  p.setPen(pal.color(QPalette::PlaceholderText));
  p.drawText(line, Qt::AlignRight | Qt::AlignVCenter,
             (compact_ ? tr("%1 seq.") : tr("%1 sequences")).arg(g.rows.size()));
  line.translate(0, line_h + 2);
  p.setPen(pal.color(QPalette::Text));
  p.drawText(line, Qt::AlignLeft | Qt::AlignVCenter, group_metrics_text(g, compact_));
}

void SequenceGrid::paint_row(QPainter& p, const PlacedRow& r, const Metrics& m, bool hovered) const {
  const QPalette& pal = palette();
  if (hovered) p.fillRect(r.rect, with_alpha(pal.color(QPalette::Highlight), 60));
  const std::vector<std::string>& tokens = r.row->tokens;
  const int prompt_len = prompt_length(tokens);
  QFont prompt_font = cell_font_;
  prompt_font.setBold(true);
  for (int i = 0; i < static_cast<int>(tokens.size()); ++i) {
    // Cell edges snapped to whole pixels so that the fills of neighbouring letters touch.
    const double left = std::round(r.text_x + i * m.cell_w), right = std::round(r.text_x + (i + 1) * m.cell_w);
    p.setFont(i < prompt_len ? prompt_font : cell_font_);
    paint_cell(p, QRectF(left, r.rect.top(), right - left, m.cell_h), tokens[i], i < prompt_len, pal);
  }
  if (prompt_len > 0) {  // a hairline between the prompt and the body
    const double x = r.text_x + prompt_len * m.cell_w;
    p.setPen(with_alpha(pal.color(QPalette::Text), 50));
    p.drawLine(QPointF(x, r.rect.top() + 2), QPointF(x, r.rect.bottom() - 2));
  }
  if (!r.row->valid) {
    p.fillRect(QRectF(r.text_x - kMarker + 1, r.rect.top() + 2, 4, m.cell_h - 4), kInvalid);
    const double mid = r.rect.center().y();
    p.setPen(QPen(with_alpha(kInvalid, 190), 1.5));
    p.drawLine(QPointF(r.text_x + prompt_len * m.cell_w, mid), QPointF(r.text_x + tokens.size() * m.cell_w, mid));
  }
}

const SequenceGrid::PlacedRow* SequenceGrid::row_at(const QPointF& pos) const {
  for (const PlacedRow& r : layout_.rows)
    if (r.rect.contains(pos)) return &r;
  return nullptr;
}

QString SequenceGrid::tooltip_at(const QPointF& pos, QRect* area) const {
  const PlacedRow* r = row_at(pos);
  if (!r) return {};
  const ftx::GroupRow& row = *r->row;
  QStringList lines;
  lines << tr("Row %1: %2").arg(r->index + 1).arg(validity_text(row));
  lines << tr("latent seed %1   sample seed %2").arg(row.latent_seed).arg(row.sample_seed);
  const double cell_w = metrics().cell_w;
  const int i = static_cast<int>(std::floor((pos.x() - r->text_x) / cell_w));
  *area = r->rect.toAlignedRect();
  if (i >= 0 && i < static_cast<int>(row.tokens.size())) {
    *area = QRectF(r->text_x + i * cell_w, r->rect.top(), cell_w, r->rect.height()).toAlignedRect();
    QString at = tr("position %1 '%2'").arg(i).arg(QString::fromStdString(row.tokens[static_cast<size_t>(i)]));
    if (i < static_cast<int>(row.codes.size()))
      at += tr("   code Z_%1 = 0x%2").arg(i).arg(QString::number(row.codes[static_cast<size_t>(i)], 16).toUpper());
    lines << at;
  }
  return lines.join(QLatin1Char('\n'));
}

bool SequenceGrid::event(QEvent* event) {
  if (event->type() != QEvent::ToolTip) return QWidget::event(event);
  auto* help = static_cast<QHelpEvent*>(event);
  QRect area;  // the tooltip follows the mouse from one character to the next
  const QString text = tooltip_at(help->pos(), &area);
  if (text.isEmpty()) {
    QToolTip::hideText();
    event->ignore();
  } else {
    QToolTip::showText(help->globalPos(), text, this, area);
  }
  return true;
}

void SequenceGrid::mouseMoveEvent(QMouseEvent* event) {
  const PlacedRow* r = row_at(event->position());
  const int index = r ? static_cast<int>(r - layout_.rows.data()) : -1;
  if (index != hovered_) {
    hovered_ = index;
    update();
  }
  QWidget::mouseMoveEvent(event);
}

void SequenceGrid::leaveEvent(QEvent* event) {
  if (hovered_ != -1) {
    hovered_ = -1;
    update();
  }
  QWidget::leaveEvent(event);
}

}  // namespace ftx
