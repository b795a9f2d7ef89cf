#include "views/text_groups_grid.h"

#include <QEvent>
#include <QFrame>
#include <QHBoxLayout>
#include <QLabel>
#include <QMouseEvent>
#include <QVBoxLayout>

namespace ftx {

namespace {

constexpr int kFrameMs = 33;  // cells redraw at most this often while text streams
constexpr int kCellMinWidth = 260;
const char* const kIndependentColour = "#3b82c4";  // Figure 4: blue for independent Z
const char* const kFixedColour = "#2f9e44";        // green for fixed Z
const char* const kPlainColour = "#868e96";
const char* const kCellStyle =
    "QLabel { background: palette(base); border: 1px solid palette(mid); border-radius: 3px; padding: 4px; }";

QString seed_text(uint64_t s) { return QString::number(static_cast<qulonglong>(s)); }

QString group_title(const ftx::TextGroup& g, bool has_latent) {
  if (!has_latent) return QObject::tr("Samples · token sampling only (no Z)");
  if (!g.fixed) return QObject::tr("Independent Z · each sequence its own Z");
  return QObject::tr("Fixed Z #%1 · one Z shared by the group").arg(g.group);
}

const char* group_colour(const ftx::TextGroup& g, bool has_latent) {
  return !has_latent ? kPlainColour : g.fixed ? kFixedColour : kIndependentColour;
}

}  // namespace

TextGroupsGrid::TextGroupsGrid(QWidget* parent) : QWidget(parent) {
  caption_ = new QLabel;
  caption_->setWordWrap(true);
  caption_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  placeholder_ = new QLabel;
  placeholder_->setAlignment(Qt::AlignCenter);
  placeholder_->setWordWrap(true);
  groups_box_ = new QWidget;
  groups_layout_ = new QHBoxLayout(groups_box_);
  groups_layout_->setContentsMargins(0, 0, 0, 0);
  groups_layout_->setSpacing(10);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(caption_);
  layout->addWidget(placeholder_);
  layout->addWidget(groups_box_);
  layout->addStretch(1);
  frame_.setSingleShot(true);
  frame_.setInterval(kFrameMs);
  connect(&frame_, &QTimer::timeout, this, &TextGroupsGrid::flush);
  set_placeholder(tr("No generations yet: open a model (File → Open model), type a prompt and press Generate."));
}

void TextGroupsGrid::clear_groups() {
  while (QLayoutItem* item = groups_layout_->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  cells_.clear(), texts_.clear(), dirty_.clear();
  frame_.stop();
}

void TextGroupsGrid::set_placeholder(const QString& text) {
  clear_groups();
  caption_->clear();
  placeholder_->setText(text);
  placeholder_->show();
  groups_box_->hide();
}

void TextGroupsGrid::set_caption(const QString& caption) { caption_->setText(caption); }

QWidget* TextGroupsGrid::make_group(const ftx::TextGroup& g, const TextJobPlan& plan) {
  auto* box = new QFrame;
  box->setMinimumWidth(kCellMinWidth);
  auto* v = new QVBoxLayout(box);
  v->setContentsMargins(0, 0, 0, 0);
  v->setSpacing(6);
  auto* title = new QLabel(QString("<b style='color:%1'>%2</b>")
                               .arg(group_colour(g, plan.has_latent), group_title(g, plan.has_latent).toHtmlEscaped()));
  title->setWordWrap(true);
  if (plan.has_latent && g.fixed && g.first < static_cast<int>(plan.latent_seeds.size()))
    title->setToolTip(tr("Z seed %1").arg(seed_text(plan.latent_seeds[size_t(g.first)])));
  v->addWidget(title);
  for (int i = g.first; i < g.first + g.size; ++i) {
    auto* cell = new QLabel;
    cell->setWordWrap(true);
    cell->setTextFormat(Qt::PlainText);
    cell->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    cell->setStyleSheet(kCellStyle);
    cell->setMinimumHeight(cell->fontMetrics().height() * 2 + 10);
    cell->setTextInteractionFlags(Qt::NoTextInteraction);
    cell->setCursor(Qt::PointingHandCursor);
    cell->setProperty("seq", i);
    QString tip;
    if (plan.has_latent && !g.fixed && i < static_cast<int>(plan.latent_seeds.size()))
      tip += tr("Z seed %1, ").arg(seed_text(plan.latent_seeds[size_t(i)]));
    if (i < static_cast<int>(plan.sample_seeds.size()))
      tip += tr("token seed %1").arg(seed_text(plan.sample_seeds[size_t(i)]));
    cell->setToolTip(tip + tr("\nclick: show this text in Latent"));
    cell->installEventFilter(this);
    cells_[size_t(i)] = cell;
    v->addWidget(cell);
  }
  v->addStretch(1);
  return box;
}

void TextGroupsGrid::set_plan(const TextJobPlan& plan, const QString& caption) {
  clear_groups();
  int n = 0;
  for (const ftx::TextGroup& g : plan.groups) n = std::max(n, g.first + g.size);
  cells_.assign(size_t(n), nullptr);
  texts_.assign(size_t(n), QString());
  for (const ftx::TextGroup& g : plan.groups) groups_layout_->addWidget(make_group(g, plan), 1);
  caption_->setText(caption);
  placeholder_->hide();
  groups_box_->show();
}

void TextGroupsGrid::append(const TextPieces& pieces) {
  for (const auto& [seq, piece] : pieces) {
    if (seq < 0 || seq >= sequences()) continue;
    texts_[size_t(seq)] += QString::fromStdString(piece);
    dirty_.insert(seq);
  }
  if (!dirty_.empty() && !frame_.isActive()) frame_.start();
}

void TextGroupsGrid::set_result(const TextJobResult& result) {
  for (size_t i = 0; i < result.texts.size() && i < texts_.size(); ++i) {
    texts_[i] = QString::fromStdString(result.texts[i]);
    dirty_.insert(static_cast<int>(i));
    if (cells_[i] && i < result.finish.size())
      cells_[i]->setToolTip(cells_[i]->toolTip() + tr("\nended: %1").arg(QString::fromStdString(result.finish[i])));
  }
  flush();
}

void TextGroupsGrid::flush() {
  frame_.stop();
  if (dirty_.empty()) return;
  for (int seq : dirty_)
    if (cells_[size_t(seq)]) cells_[size_t(seq)]->setText(texts_[size_t(seq)]);
  dirty_.clear();
  ++redraws_;
}

QString TextGroupsGrid::text(int seq) const { return seq >= 0 && seq < sequences() ? texts_[size_t(seq)] : QString(); }

QString TextGroupsGrid::cell_text(int seq) const {
  return seq >= 0 && seq < sequences() && cells_[size_t(seq)] ? cells_[size_t(seq)]->text() : QString();
}

bool TextGroupsGrid::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::MouseButtonRelease && static_cast<QMouseEvent*>(event)->button() == Qt::LeftButton) {
    const QVariant seq = watched->property("seq");
    if (seq.isValid()) emit row_activated(seq.toInt());
  }
  return QWidget::eventFilter(watched, event);
}

}  // namespace ftx
