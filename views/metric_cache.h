// MetricCache: the metrics of many runs held in memory for display, one Series (steps ascending)
// per (run, key). Rows arrive as the store tails them (RunStore::metrics_since, rowid order, keys
// interleaved); appending is amortised O(1) per row, so a 1e6-point series costs what its vectors
// cost (16 bytes a point).
// A resumed run re-sends steps it had already sent (the store trimmed them on resume): a row whose
// step is <= the last cached step of its key first drops the cached points with step >= that step,
// so the curve continues exactly as the store now holds it.
// Deliberately not here: Qt, threads (one owner, the UI thread), reading the store, downsampling
// (curve_data.h), wall_time (the curves are drawn over steps).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/store/run_store.h"
#include "views/curve_data.h"

namespace ftx {

class MetricCache {
 public:
  void append(int64_t run_id, const std::vector<MetricRow>& rows);
  // Null when the run or key has no rows. The pointer stays valid until drop_run(run_id).
  const Series* series(int64_t run_id, const std::string& key) const;
  std::vector<std::string> keys(int64_t run_id) const;  // sorted
  std::vector<int64_t> run_ids() const;                 // sorted
  void drop_run(int64_t run_id);
  size_t total_points() const { return total_points_; }
  // Bumped by every append that changed something and by drop_run; each changed Series takes the
  // new value as its `revision`, so a view can redo only what changed.
  uint64_t revision() const { return revision_; }

 private:
  using RunSeries = std::map<std::string, Series, std::less<>>;
  std::unordered_map<int64_t, RunSeries> runs_;
  size_t total_points_ = 0;
  uint64_t revision_ = 0;
};

}  // namespace ftx
