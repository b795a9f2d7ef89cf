#include "views/text_groups_grid.h"

#include <QEvent>
#include <QFontMetrics>
#include <QFrame>
#include <QHBoxLayout>
#include <QLabel>
#include <QMouseEvent>
#include <QVBoxLayout>
#include <cmath>

#include "views/kind_style.h"

namespace ftx {

namespace {

constexpr int kFrameMs = 33;        // cells redraw at most this often while text streams
constexpr int kCellMinWidth = 200;  // four groups (the kinds lesson's) fit beside the Runs dock at 1400 pixels
const char* const kIndependentColour = "#3b82c4";  // Figure 4: blue for independent Z
const char* const kFixedColour = "#2f9e44";        // green for fixed Z
const char* const kPlainColour = "#868e96";
const char* const kCellStyle =
    "QLabel { background: palette(base); border: 1px solid palette(mid); border-radius: 3px; padding: 4px; }";

// A judged kind: white bold words on the kind's colour (legible on light and dark palettes, the
// badge brings its own background). Before the sequence ends: a dashed outline with "…".
const char* const kBadgeStyle = "QLabel { background: %1; color: #ffffff; border-radius: 3px; padding: 1px 4px; }";
const char* const kPendingBadgeStyle =
    "QLabel { color: palette(mid); border: 1px dashed palette(mid); border-radius: 3px; padding: 0px 3px; }";
const char* const kPendingBadge = "…";
constexpr int kBadgeInset = 4;  // from the cell's corner (inside its 1-pixel border)

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
  legend_ = new QLabel;
  legend_->setWordWrap(true);
  legend_->setTextFormat(Qt::RichText);
  QString legend = tr("Kinds, judged by rules on each generated text when it ends:");
  for (ftx::TextKind k : ftx::kAllTextKinds) legend += " " + kind_badge_html(k);
  legend += " " + kind_badge_html(std::nullopt) +
            tr(" unknown. Each group: validity (the share given a kind) and "
               "agreement (the share of pairs of valid sequences of one kind).");
  legend_->setText(legend);
  legend_->hide();
  placeholder_ = new QLabel;
  placeholder_->setAlignment(Qt::AlignCenter);
  placeholder_->setWordWrap(true);
  groups_box_ = new QWidget;
  groups_layout_ = new QHBoxLayout(groups_box_);
  groups_layout_->setContentsMargins(0, 0, 0, 0);
  groups_layout_->setSpacing(10);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(caption_);
  layout->addWidget(legend_);
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
  cells_.clear(), badges_.clear(), texts_.clear(), dirty_.clear();
  groups_.clear(), kinds_.clear();
  frame_.stop();
}

void TextGroupsGrid::set_placeholder(const QString& text) {
  clear_groups();
  caption_->clear();
  placeholder_->setText(text);
  placeholder_->show();
  groups_box_->hide();
  legend_->hide();
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
  GroupCells cells{g.first, g.size, new QLabel};
  cells.kinds_line->setWordWrap(true);
  cells.kinds_line->setTextFormat(Qt::RichText);
  cells.kinds_line->hide();
  v->addWidget(cells.kinds_line);
  groups_.push_back(cells);
  QFont badge_font = font();
  badge_font.setBold(true);
  const QFontMetrics badge_metrics(badge_font);
  const QSize badge_size(badge_metrics.horizontalAdvance(kind_label(ftx::TextKind::Python)) + 10,
                         badge_metrics.height() + 2);
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
    // The badge sits in the cell's top-left corner, above the text (update_kinds makes room for
    // it): the cells keep their width, however many groups stand side by side.
    auto* badge = new QLabel(cell);
    badge->setFont(badge_font);
    badge->setAlignment(Qt::AlignCenter);
    badge->setFixedSize(badge_size);
    badge->move(kBadgeInset, kBadgeInset);
    badge->setCursor(Qt::PointingHandCursor);  // a click goes on to the cell (row_activated once)
    badge->hide();
    badges_[size_t(i)] = badge;
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
  badges_.assign(size_t(n), nullptr);
  texts_.assign(size_t(n), QString());
  kinds_.assign(size_t(n), std::nullopt);
  for (const ftx::TextGroup& g : plan.groups) groups_layout_->addWidget(make_group(g, plan), 1);
  caption_->setText(caption);
  placeholder_->hide();
  groups_box_->show();
  update_kinds();
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
    kinds_[i] = ftx::classify_text_kind(result.texts[i]);  // the generated part only, as it ended
    if (cells_[i] && i < result.finish.size())
      cells_[i]->setToolTip(cells_[i]->toolTip() + tr("\nended: %1").arg(QString::fromStdString(result.finish[i])));
  }
  flush();
  update_kinds();
}

void TextGroupsGrid::set_kinds_shown(bool shown) {
  if (shown == kinds_shown_) return;
  kinds_shown_ = shown;
  update_kinds();
}

void TextGroupsGrid::update_kinds() {
  legend_->setVisible(kinds_shown_ && !groups_box_->isHidden());
  for (size_t i = 0; i < badges_.size(); ++i) {
    QLabel* badge = badges_[i];
    if (!badge) continue;
    badge->setVisible(kinds_shown_);
    cells_[i]->setContentsMargins(0, kinds_shown_ ? badge->height() + 2 : 0, 0, 0);  // the text below the badge
    if (!kinds_shown_) continue;
    if (kinds_[i]) {
      badge->setText(kind_label(*kinds_[i]));
      badge->setStyleSheet(QString::fromLatin1(kBadgeStyle).arg(kind_colour(*kinds_[i])));
      badge->setToolTip(*kinds_[i] ? tr("Judged %1 by rules on its syntax").arg(kind_label(*kinds_[i]))
                                   : tr("Unknown: the rules name no kind (too short, garbled or mixed)"));
    } else {
      badge->setText(QString::fromUtf8(kPendingBadge));
      badge->setStyleSheet(QString::fromLatin1(kPendingBadgeStyle));
      badge->setToolTip(tr("Judged when the sequence ends"));
    }
  }
  for (const GroupCells& g : groups_) {
    g.kinds_line->setVisible(kinds_shown_);
    if (!kinds_shown_) continue;
    std::vector<std::optional<ftx::TextKind>> judged;
    for (int i = g.first; i < g.first + g.size && i < static_cast<int>(kinds_.size()); ++i)
      if (kinds_[size_t(i)]) judged.push_back(*kinds_[size_t(i)]);
    if (judged.empty()) {
      g.kinds_line->setText(tr("<i>kinds: judged when the sequences end</i>"));
      continue;
    }
    const ftx::KindAgreement a = ftx::kind_agreement(judged);
    const double agree = a.agreement();
    QString line = tr("<b>valid %1/%2</b> · <b>agreement %3</b>")
                       .arg(a.valid)
                       .arg(a.sequences)
                       .arg(std::isnan(agree) ? QStringLiteral("–") : QString::number(agree, 'f', 2));
    if (a.sequences < g.size) line += tr(" · %1 still running").arg(g.size - a.sequences);
    g.kinds_line->setText(line);
    g.kinds_line->setToolTip(
        tr("validity: the share of the group's sequences given a kind; agreement: the share "
           "of pairs of valid sequences of the same kind (– under two valid)"));
  }
  // Badges and lines change the cells' heights for their width: the scroll area must size the grid
  // again (a word-wrapped label's new height does not always reach it by itself).
  layout()->invalidate();
  updateGeometry();
}

std::optional<std::optional<ftx::TextKind>> TextGroupsGrid::kind(int seq) const {
  return seq >= 0 && seq < sequences() ? kinds_[size_t(seq)] : std::nullopt;
}

QString TextGroupsGrid::badge_text(int seq) const {
  if (seq < 0 || seq >= sequences() || !badges_[size_t(seq)] || badges_[size_t(seq)]->isHidden()) return QString();
  return badges_[size_t(seq)]->text();
}

QString TextGroupsGrid::group_kinds_text(int group) const {
  if (group < 0 || group >= groups() || groups_[size_t(group)].kinds_line->isHidden()) return QString();
  return groups_[size_t(group)].kinds_line->text();
}

QString TextGroupsGrid::kind_label(std::optional<ftx::TextKind> kind) {
  return QString::fromLatin1(ftx::kind_badge_text(kind));
}

QString TextGroupsGrid::kind_colour(std::optional<ftx::TextKind> kind) {
  return QStringLiteral("#%1").arg(ftx::kind_rgb(kind), 6, 16, QLatin1Char('0'));
}

QString TextGroupsGrid::kind_badge_html(std::optional<ftx::TextKind> kind) {
  return QStringLiteral("<span style='background-color:%1; color:#ffffff; font-weight:bold;'>&nbsp;%2&nbsp;</span>")
      .arg(kind_colour(kind), kind_label(kind));
}

void TextGroupsGrid::flush() {
  frame_.stop();
  if (dirty_.empty()) return;
  for (int seq : dirty_)
    if (cells_[size_t(seq)]) cells_[size_t(seq)]->setText(texts_[size_t(seq)]);
  dirty_.clear();
  ++redraws_;
  layout()->invalidate();  // as in update_kinds: the grid's height follows the cells
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
