#include "views/runs_view.h"

#include <QColorDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QVBoxLayout>

#include "views/run_list_model.h"

namespace ftx {

RunsView::RunsView(RunListModel* model, QWidget* parent) : QWidget(parent), model_(model) {
  proxy_ = new QSortFilterProxyModel(this);
  proxy_->setSourceModel(model_);
  proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);
  proxy_->setSortRole(RunListModel::kSortRole);
  proxy_->setFilterKeyColumn(-1);  // any column: name, status, dataset, preset
  filter_ = new QLineEdit;
  filter_->setPlaceholderText("Filter runs (name, status, dataset, preset)…");
  filter_->setClearButtonEnabled(true);
  connect(filter_, &QLineEdit::textChanged, proxy_, &QSortFilterProxyModel::setFilterFixedString);
  table_ = new QTableView;
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->setEditTriggers(QAbstractItemView::EditKeyPressed | QAbstractItemView::SelectedClicked);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setColumnWidth(RunListModel::kOverlay, 28);
  table_->setColumnWidth(RunListModel::kColour, 28);
  table_->setColumnWidth(RunListModel::kName, 150);
  connect(table_, &QTableView::doubleClicked, this, [this](const QModelIndex& i) {
    if (i.column() == RunListModel::kColour) choose_colour(i);
  });
  count_ = new QLabel;
  auto show_count = [this] { count_->setText(QString("%1 runs").arg(model_->rowCount())); };
  show_count();
  connect(model_, &QAbstractItemModel::modelReset, this, [this, show_count] {
    show_count();
    table_->resizeColumnsToContents();
  });
  // Values that arrive later (a run's final CE) widen a column too narrow for them, never narrow it.
  table_->setWordWrap(false);
  connect(model_, &QAbstractItemModel::dataChanged, this, [this](const QModelIndex& from, const QModelIndex& to) {
    for (int c = from.column(); c <= to.column(); ++c)
      if (static_cast<QAbstractItemView*>(table_)->sizeHintForColumn(c) > table_->columnWidth(c))
        table_->resizeColumnToContents(c);
  });

  auto* del = new QPushButton("Delete…");
  auto* rename = new QPushButton("Rename");
  auto* colour = new QPushButton("Colour…");
  auto* gens = new QPushButton("Generations");
  auto* latent = new QPushButton("Latent");
  connect(del, &QPushButton::clicked, this, &RunsView::confirm_delete);
  connect(rename, &QPushButton::clicked, this, [this] {
    const QModelIndex cur = table_->currentIndex();
    if (cur.isValid()) table_->edit(proxy_->index(cur.row(), RunListModel::kName));
  });
  connect(colour, &QPushButton::clicked, this, [this] {
    const QModelIndex cur = table_->currentIndex();
    if (cur.isValid()) choose_colour(proxy_->index(cur.row(), RunListModel::kColour));
  });
  connect(gens, &QPushButton::clicked, this, [this] {
    if (!current_run().isEmpty()) emit open_generations(current_run());
  });
  connect(latent, &QPushButton::clicked, this, [this] {
    if (!current_run().isEmpty()) emit open_latent(current_run());
  });
  auto* buttons = new QHBoxLayout;
  for (QPushButton* b : {gens, latent, rename, colour, del}) buttons->addWidget(b);
  buttons->addStretch();
  buttons->addWidget(count_);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(filter_);
  layout->addWidget(table_, 1);
  layout->addLayout(buttons);
}

int RunsView::selected_row() const {
  const QModelIndex cur = table_->currentIndex();
  return cur.isValid() ? proxy_->mapToSource(cur).row() : -1;
}

QString RunsView::current_run() const {
  const RunSummary* r = model_->run_at(selected_row());
  return r ? QString::fromStdString(r->info.name) : QString();
}

void RunsView::choose_colour(const QModelIndex& proxy_index) {
  const RunSummary* r = model_->run_at(proxy_->mapToSource(proxy_index).row());
  if (!r) return;
  const QColor c =
      QColorDialog::getColor(model_->colour(r->info.id), this, "Colour of " + QString::fromStdString(r->info.name));
  if (c.isValid()) model_->set_colour(r->info.id, c);
}

void RunsView::confirm_delete() {
  const RunSummary* r = model_->run_at(selected_row());
  if (!r) return;
  const QString name = QString::fromStdString(r->info.name);
  const auto answer = QMessageBox::question(
      this, "Delete run",
      "Delete run '" + name + "', its metrics, generations and checkpoint files? This cannot be undone.");
  if (answer == QMessageBox::Yes) emit delete_requested(r->info.id, name);
}

bool RunsView::save_png(const QString& path) { return grab().save(path); }

}  // namespace ftx
