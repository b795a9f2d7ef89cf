// MetricCache (see metric_cache.h): per-run maps of key -> Series, grown by push_back.
#include "views/metric_cache.h"

#include <algorithm>

namespace ftx {

void MetricCache::append(int64_t run_id, const std::vector<MetricRow>& rows) {
  if (rows.empty()) return;
  const uint64_t revision = ++revision_;
  RunSeries& run = runs_[run_id];
  Series* s = nullptr;
  const std::string* s_key = nullptr;  // rows often repeat a key: skip the map look-up then
  for (const MetricRow& row : rows) {
    if (s_key == nullptr || *s_key != row.key) {
      auto it = run.try_emplace(row.key).first;
      s = &it->second;
      s_key = &it->first;
    }
    const double step = static_cast<double>(row.step);  // exact below 2^53
    if (!s->x.empty() && step <= s->x.back()) {
      const size_t keep = std::lower_bound(s->x.begin(), s->x.end(), step) - s->x.begin();
      total_points_ -= s->x.size() - keep;
      s->x.resize(keep);
      s->y.resize(keep);
    }
    s->x.push_back(step);
    s->y.push_back(row.value);
    s->revision = revision;
    ++total_points_;
  }
}

const Series* MetricCache::series(int64_t run_id, const std::string& key) const {
  auto run = runs_.find(run_id);
  if (run == runs_.end()) return nullptr;
  auto it = run->second.find(key);
  return it == run->second.end() ? nullptr : &it->second;
}

std::vector<std::string> MetricCache::keys(int64_t run_id) const {
  std::vector<std::string> out;
  auto run = runs_.find(run_id);
  if (run == runs_.end()) return out;
  for (const auto& [key, s] : run->second) out.push_back(key);
  return out;
}

std::vector<int64_t> MetricCache::run_ids() const {
  std::vector<int64_t> out;
  for (const auto& [id, run] : runs_) out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

void MetricCache::drop_run(int64_t run_id) {
  auto run = runs_.find(run_id);
  if (run == runs_.end()) return;
  for (const auto& [key, s] : run->second) total_points_ -= s.x.size();
  runs_.erase(run);
  ++revision_;
}

}  // namespace ftx
