#include "views/run_list_model.h"

#include <cmath>
#include <optional>

#include "core/model/kappa.h"
#include "views/metric_cache.h"

namespace ftx {

namespace {

// A qualitative palette (Tableau 10): distinct on light and dark backgrounds.
const QColor kPalette[] = {QColor(0x4e79a7), QColor(0xf28e2b), QColor(0xe15759), QColor(0x76b7b2), QColor(0x59a14f),
                           QColor(0xedc948), QColor(0xb07aa1), QColor(0xff9da7), QColor(0x9c755f), QColor(0xbab0ac)};

// The run's last finite value of `key`, if any.
std::optional<double> last_value(const ftx::MetricCache* cache, int64_t run, const char* key) {
  const ftx::Series* s = cache ? cache->series(run, key) : nullptr;
  if (!s || s->y.empty() || !std::isfinite(s->y.back())) return std::nullopt;
  return s->y.back();
}

QVariant last_value_text(const ftx::MetricCache* cache, int64_t run, const char* key) {
  const auto v = last_value(cache, run, key);
  return v ? QVariant(QString::number(*v, 'f', 4)) : QVariant();
}

// The job that trains the run since its last start or resume (the trainer's job/processes and
// job/gpus rows): "1 × CPU", "8 × GPU" (a GPU each), "2 proc, 1 GPU"; "–" for runs from before.
QString job_text(const ftx::MetricCache* cache, int64_t run) {
  const auto procs = last_value(cache, run, "job/processes");
  if (!procs) return "–";
  const int p = static_cast<int>(*procs), g = static_cast<int>(last_value(cache, run, "job/gpus").value_or(0));
  if (g == 0) return QString("%1 × CPU").arg(p);
  if (g == p) return QString("%1 × GPU").arg(p);
  return QString("%1 proc, %2 GPU").arg(p).arg(g);
}

}  // namespace

RunListModel::RunListModel(const ftx::MetricCache* cache, QObject* parent)
    : QAbstractTableModel(parent), cache_(cache) {}

void RunListModel::set_runs(std::vector<RunSummary> runs) {
  beginResetModel();
  runs_ = std::move(runs);
  QSet<int64_t> alive;
  for (const RunSummary& r : runs_) alive.insert(r.info.id);
  overlay_.intersect(alive);
  if (first_runs_ && !runs_.empty()) {  // start with the newest runs overlaid
    for (size_t i = runs_.size() > 4 ? runs_.size() - 4 : 0; i < runs_.size(); ++i) overlay_.insert(runs_[i].info.id);
    first_runs_ = false;
  }
  endResetModel();
  emit overlay_changed();
}

void RunListModel::refresh_values() {
  if (!runs_.empty()) emit dataChanged(index(0, kJob), index(rowCount() - 1, kKl));
}

const RunSummary* RunListModel::run_at(int row) const {
  return row >= 0 && row < rowCount() ? &runs_[static_cast<size_t>(row)] : nullptr;
}

QColor RunListModel::colour(int64_t run_id) const {
  auto it = colours_.find(run_id);
  if (it != colours_.end()) return it->second;
  return kPalette[static_cast<size_t>(run_id) % std::size(kPalette)];
}

void RunListModel::set_colour(int64_t run_id, const QColor& c) {
  colours_[run_id] = c;
  if (!runs_.empty()) emit dataChanged(index(0, kColour), index(rowCount() - 1, kColour));
  emit overlay_changed();
}

void RunListModel::set_overlaid(int64_t run_id, bool on) {
  if (on)
    overlay_.insert(run_id);
  else
    overlay_.remove(run_id);
  if (!runs_.empty()) emit dataChanged(index(0, kOverlay), index(rowCount() - 1, kOverlay));
  emit overlay_changed();
}

std::vector<int64_t> RunListModel::overlaid_ids() const {
  std::vector<int64_t> ids;
  for (const RunSummary& r : runs_)
    if (overlay_.contains(r.info.id)) ids.push_back(r.info.id);
  return ids;
}

int RunListModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(runs_.size());
}
int RunListModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumns; }

QVariant RunListModel::data(const QModelIndex& index, int role) const {
  const RunSummary* r = run_at(index.row());
  if (!r) return {};
  const int64_t id = r->info.id;
  const int col = index.column();
  if (role == Qt::CheckStateRole && col == kOverlay) return overlay_.contains(id) ? Qt::Checked : Qt::Unchecked;
  if (role == Qt::DecorationRole && col == kColour) return colour(id);
  if (role == Qt::ToolTipRole)
    return QString::fromStdString(r->info.created_at + "  " + r->info.notes) +
           (r->config_error.isEmpty() ? QString() : "\n" + r->config_error);
  const ftx::Series* ce = cache_ ? cache_->series(id, "train/ce") : nullptr;
  const int done_steps = ce && !ce->x.empty() ? static_cast<int>(ce->x.back()) : 0;
  if (role == kSortRole) {  // numbers sort as numbers ("16" after "8"), the rest as text
    switch (col) {
      case kKappa:
        return r->latent_bits > 0 ? r->kappa_bits : -1.0;
      case kSteps:
        return done_steps;
      case kJob:
        return last_value(cache_, id, "job/processes").value_or(0.0);
      case kCe:
      case kKl:
        return last_value(cache_, id, col == kCe ? "train/ce" : "train/kl").value_or(-1.0);
      default:
        return data(index, Qt::DisplayRole);
    }
  }
  if (role != Qt::DisplayRole && role != Qt::EditRole) return {};
  switch (col) {
    case kName:
      return QString::fromStdString(r->info.name);
    case kStatus:
      return QString::fromStdString(r->info.status);
    case kDataset:
      return r->dataset;
    case kPreset:
      return r->preset;
    case kBits:
      return r->latent_bits;
    case kKappa:
      return r->latent_bits > 0 ? QVariant(QString::fromStdString(ftx::kappa_short_text(r->kappa_bits)))
                                : QVariant("–");
    case kFreeBits:
      return r->latent_bits > 0 ? QVariant(r->free_bits_label) : QVariant("–");
    case kRouting:
      return r->routing;
    case kJob:
      return job_text(cache_, id);
    case kSteps:
      return QString("%1 / %2").arg(done_steps).arg(r->steps);
    case kCe:
      return last_value_text(cache_, id, "train/ce");
    case kKl:
      return last_value_text(cache_, id, "train/kl");
    default:
      return {};
  }
}

QVariant RunListModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* kNames[kColumns] = {"",        "",          "Run",     "Status", "Dataset", "Preset", "H",
                                         "κ (bit)", "Free bits", "Routing", "Job",    "Steps",   "CE",     "KL (nats)"};
  return kNames[section];
}

Qt::ItemFlags RunListModel::flags(const QModelIndex& index) const {
  Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
  if (index.column() == kOverlay) f |= Qt::ItemIsUserCheckable;
  if (index.column() == kName) f |= Qt::ItemIsEditable;
  return f;
}

bool RunListModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  const RunSummary* r = run_at(index.row());
  if (!r) return false;
  if (index.column() == kOverlay && role == Qt::CheckStateRole) {
    set_overlaid(r->info.id, value.toInt() == Qt::Checked);
    return true;
  }
  if (index.column() == kName && role == Qt::EditRole) {
    const QString name = value.toString().trimmed();
    if (!name.isEmpty() && name.toStdString() != r->info.name) emit rename_requested(r->info.id, name);
    return false;  // the store decides; the poller brings the new name
  }
  return false;
}

}  // namespace ftx
