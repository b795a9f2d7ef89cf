// RunsView: the Runs dock. Every run in the store with a text filter, overlay check boxes, a
// colour per run (double-click the swatch), rename (edit the name), delete (with confirmation),
// and shortcuts to show a run in Generations or Latent. Requests leave as signals.
//
// Deliberately not here: the store (StudioController renames and deletes), the table's data
// (RunListModel).
#pragma once
#include <QWidget>

class QLineEdit;
class QTableView;
class QSortFilterProxyModel;
class QLabel;

namespace ftx {

class RunListModel;

class RunsView : public QWidget {
  Q_OBJECT
 public:
  explicit RunsView(RunListModel* model, QWidget* parent = nullptr);
  QString current_run() const;  // the selected run's name, empty when none
  bool save_png(const QString& path);

 signals:
  void delete_requested(qint64 run_id, QString name);
  void open_generations(QString run);
  void open_latent(QString run);

 private:
  void choose_colour(const QModelIndex& proxy_index);
  void confirm_delete();
  int selected_row() const;  // in the source model, -1 when none

  RunListModel* model_;
  QSortFilterProxyModel* proxy_;
  QLineEdit* filter_;
  QTableView* table_;
  QLabel* count_;
};

}  // namespace ftx
