#include "views/models_view.h"

#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

namespace ftx {

namespace {

constexpr int kIdRole = Qt::UserRole;
const char* const kErrorStyle = "color: #e03131;";

}  // namespace

ModelsView::ModelsView(QWidget* parent) : QWidget(parent) {
  auto* title = new QLabel(tr("<b>Models</b> (File → Open model)"));
  table_ = new QTableWidget(0, kColumns);
  table_->setHorizontalHeaderLabels(
      {tr("Name"), tr("Latent"), tr("Params"), tr("Format"), tr("Status"), tr("Architecture")});
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setWordWrap(false);
  progress_ = new QProgressBar;
  progress_->setRange(0, 1000);
  progress_->setTextVisible(true);
  progress_->hide();
  message_ = new QLabel;
  message_->setWordWrap(true);
  message_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  message_->setStyleSheet(kErrorStyle);
  message_->hide();

  auto* open = new QPushButton(tr("Open…"));
  random_ = new QPushButton(tr("Random FT"));
  random_->setToolTip(tr("A Free Transformer with random weights and the selected model's tokenizer"));
  generations_ = new QPushButton(tr("Generate"));
  latent_ = new QPushButton(tr("Latent"));
  close_ = new QPushButton(tr("Close"));
  connect(open, &QPushButton::clicked, this, &ModelsView::open_requested);
  connect(random_, &QPushButton::clicked, this, [this] { emit random_requested(current_model()); });
  connect(generations_, &QPushButton::clicked, this, [this] { emit generations_requested(current_model()); });
  connect(latent_, &QPushButton::clicked, this, [this] { emit latent_requested(current_model()); });
  connect(close_, &QPushButton::clicked, this, [this] { emit close_requested(current_model()); });
  connect(table_, &QTableWidget::itemSelectionChanged, this, &ModelsView::update_buttons);
  connect(table_, &QTableWidget::cellDoubleClicked, this, [this] {
    if (loaded(current_model())) emit generations_requested(current_model());
  });
  auto* buttons = new QHBoxLayout;
  for (QPushButton* b : {open, random_, generations_, latent_, close_}) buttons->addWidget(b);
  buttons->addStretch();
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(title);
  layout->addWidget(table_, 1);
  layout->addWidget(progress_);
  layout->addWidget(message_);
  layout->addLayout(buttons);
  update_buttons();
}

QString ModelsView::params_text(int64_t n) {
  if (n >= 1'000'000'000) return QString::number(double(n) / 1e9, 'f', 2) + " B";
  if (n >= 1'000'000) return QString::number(double(n) / 1e6, 'f', n >= 100'000'000 ? 0 : 1) + " M";
  if (n >= 1'000) return QString::number(double(n) / 1e3, 'f', 0) + " k";
  return QString::number(n);
}

QString ModelsView::architecture_text(const ftx::ModelConfig& c) {
  return QString("%1 · %2 layers · dim %3 · %4/%5 heads")
      .arg(QString::fromStdString(c.architecture))
      .arg(c.n_layers)
      .arg(c.dim)
      .arg(c.n_heads)
      .arg(c.n_kv_heads);
}

QString ModelsView::latent_text(const ftx::ModelConfig& c) {
  return c.is_free() ? QString("Free Transformer, H = %1").arg(c.latent_bits) : QString("plain decoder (no Z)");
}

int ModelsView::row_of(int id) const {
  for (int row = 0; row < table_->rowCount(); ++row)
    if (table_->item(row, kName)->data(kIdRole).toInt() == id) return row;
  return -1;
}

void ModelsView::add_model(int id, const QString& path) {
  const int row = table_->rowCount();
  table_->insertRow(row);
  for (int c = 0; c < kColumns; ++c) table_->setItem(row, c, new QTableWidgetItem);
  QTableWidgetItem* name = table_->item(row, kName);
  name->setData(kIdRole, id);
  name->setText(path.isEmpty() ? tr("(random)") : QFileInfo(path).fileName());
  name->setToolTip(path);
  loaded_[id] = false;
  set_status(id, tr("opening…"));
  message_->hide();
  table_->selectRow(row);
}

void ModelsView::set_info(int id, std::shared_ptr<const ftx::ModelInfo> info) {
  const int row = row_of(id);
  if (row < 0 || !info) return;
  const ftx::ModelConfig& c = info->config;
  if (!info->name.empty()) table_->item(row, kName)->setText(QString::fromStdString(info->name));
  table_->item(row, kName)->setToolTip(QString::fromStdString(info->path));
  table_->item(row, kArchitecture)->setText(architecture_text(c));
  table_->item(row, kParams)->setText(params_text(info->n_params));
  table_->item(row, kParams)->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  table_->item(row, kFormat)->setText(QString::fromStdString(info->format));
  table_->item(row, kLatent)->setText(latent_text(c));
  table_->item(row, kLatent)->setForeground(c.is_free() ? QColor(47, 158, 68) : palette().color(QPalette::Text));
  set_status(id, tr("loading…"));
  table_->resizeColumnsToContents();
  loading_ = id;
  progress_->setValue(0);
  progress_->setFormat(tr("Loading %1: %p%").arg(table_->item(row, kName)->text()));
  progress_->show();
}

void ModelsView::set_progress(int id, qint64 done, qint64 total) {
  if (row_of(id) < 0 || total <= 0) return;
  const int permille = static_cast<int>(std::min<qint64>(1000, done * 1000 / total));
  set_status(id, tr("loading %1 %").arg(permille / 10));
  if (id == loading_) progress_->setValue(permille);
}

void ModelsView::set_loaded(int id, double seconds) {
  if (row_of(id) < 0) return;
  loaded_[id] = true;
  set_status(id, tr("ready (loaded in %1 s)").arg(seconds, 0, 'f', 1));
  if (id == loading_) progress_->hide(), loading_ = -1;
  update_buttons();
}

void ModelsView::set_failed(int id, const QString& message) {
  remove_model(id);
  message_->setText(message);
  message_->show();
}

void ModelsView::remove_model(int id) {
  const int row = row_of(id);
  if (row >= 0) table_->removeRow(row);
  loaded_.erase(id);
  if (id == loading_) progress_->hide(), loading_ = -1;
  update_buttons();
}

void ModelsView::select(int id) {
  const int row = row_of(id);
  if (row >= 0) table_->selectRow(row);
}

int ModelsView::current_model() const {
  const auto rows = table_->selectionModel()->selectedRows();
  return rows.isEmpty() ? -1 : table_->item(rows.front().row(), kName)->data(kIdRole).toInt();
}

bool ModelsView::loaded(int id) const {
  auto it = loaded_.find(id);
  return it != loaded_.end() && it->second;
}

QString ModelsView::message() const { return message_->isHidden() ? QString() : message_->text(); }

void ModelsView::set_status(int id, const QString& status) {
  const int row = row_of(id);
  if (row >= 0) table_->item(row, kStatus)->setText(status);
}

void ModelsView::update_buttons() {
  const bool ready = loaded(current_model());
  for (QPushButton* b : {random_, generations_, latent_}) b->setEnabled(ready);
  close_->setEnabled(current_model() >= 0);
}

}  // namespace ftx
