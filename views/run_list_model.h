// RunListModel: the runs of the store as a table for the Runs dock (Qt model/view): overlay
// check box, colour, name (editable: a rename request), status, dataset, preset, H, kappa, free
// bits, routing, the job (processes and GPUs of its last start: "2 × CPU"), steps, final train CE
// and KL. The job and final values come from the curves already cached for display.
//
// Deliberately not here: database access (rename and delete are requests, emitted), filtering
// (a QSortFilterProxyModel in RunsView), colour persistence (RunsView saves QSettings).
#pragma once
#include <QAbstractTableModel>
#include <QColor>
#include <QSet>
#include <map>
#include <vector>

#include "views/store_poller.h"

namespace ftx {

class MetricCache;

class RunListModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    kOverlay,
    kColour,
    kName,
    kStatus,
    kDataset,
    kPreset,
    kBits,
    kKappa,
    kFreeBits,
    kRouting,
    kJob,
    kSteps,
    kCe,
    kKl,
    kColumns
  };
  static constexpr int kSortRole = Qt::UserRole;  // numbers for numeric columns, text otherwise

  explicit RunListModel(const ftx::MetricCache* cache, QObject* parent = nullptr);
  void set_runs(std::vector<RunSummary> runs);  // keeps overlay and colour choices by run id
  void refresh_values();                        // re-read final CE/KL from the cache
  const std::vector<RunSummary>& runs() const { return runs_; }
  const RunSummary* run_at(int row) const;
  QColor colour(int64_t run_id) const;
  void set_colour(int64_t run_id, const QColor& c);
  bool overlaid(int64_t run_id) const { return overlay_.contains(run_id); }
  void set_overlaid(int64_t run_id, bool on);
  std::vector<int64_t> overlaid_ids() const;  // in table order

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role) override;

 signals:
  void rename_requested(qint64 run_id, QString new_name);
  void overlay_changed();

 private:
  const ftx::MetricCache* cache_;
  std::vector<RunSummary> runs_;
  QSet<int64_t> overlay_;
  std::map<int64_t, QColor> colours_;
  bool first_runs_ = true;
};

}  // namespace ftx
