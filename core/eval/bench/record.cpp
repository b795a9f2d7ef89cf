#include "core/eval/bench/record.h"

namespace ftx::bench {

Status record_task_result(RunStore& store, int64_t run_id, int64_t step, int64_t tokens, const TaskResult& r) {
  std::vector<BenchMetric> metrics;
  for (const MetricValue& m : r.metrics) {
    metrics.push_back({m.metric, m.value, m.stderr_, m.n});
    store.add_metric(run_id, step, "bench/" + r.task + "/" + m.metric, m.value);
  }
  std::vector<BenchItemRow> items;
  items.reserve(r.items.size());
  for (const ItemRecord& it : r.items)
    items.push_back(
        {it.item_id, it.prompt, it.output, it.target, it.verdict,
         it.detail.is_null() ? "{}" : it.detail.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
         it.score});
  FTX_TRY(store.write_bench_result(run_id, step, tokens, r.task, metrics, items));
  return store.flush();
}

}  // namespace ftx::bench
