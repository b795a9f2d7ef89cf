// A task's results into the run store: the benchmark rows and items of (run, step, task) through
// RunStore::write_bench_result, and each metric also as the metric key "bench/<task>/<metric>", so
// that `ftx metrics` and the Curves view show benchmarks beside the losses. Used by `ftx eval` and
// by training's benchmark evaluation.
#pragma once
#include <cstdint>

#include "core/eval/bench/task.h"
#include "core/store/run_store.h"

namespace ftx::bench {

// tokens: training tokens seen at `step` (-1: unknown, e.g. an external checkpoint).
Status record_task_result(RunStore& store, int64_t run_id, int64_t step, int64_t tokens, const TaskResult& r);

}  // namespace ftx::bench
