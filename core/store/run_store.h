// RunStore: the SQLite run store (docs/design.md section 6), one database file per workspace.
// Tables runs, metrics, events, checkpoints, generations, benchmarks, bench_items (every scored
// item behind a benchmark value) and reference (the paper's tables, compiled in and imported when
// a store is created or migrated), versioned by PRAGMA user_version (kSchemaVersion) with forward migrations.
// WAL journal, synchronous=NORMAL: one writer per run, any number of readers, so the studio can tail
// a database that a headless `ftx train` is writing. Metrics are buffered in memory and written in
// one transaction per flush(). Every failure (locked past the busy timeout, disk full, corrupt or
// foreign file, newer schema) comes back as a one-line Error naming the database path; nothing
// throws or aborts, and rows committed earlier stay.
// Deliberately not here: no ORM, no query language for the views (they get rows), no thread
// safety inside one RunStore (one object per thread; readers open their own connection), no
// deletion of a run's history behind its back (delete_run removes a whole run at a user's request;
// a resumed run trims only its own metrics).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/base/result.h"

struct sqlite3;

namespace ftx {

inline constexpr int kSchemaVersion = 2;  // 2: benchmark stderr, tokens, replace key, items
inline constexpr int kDefaultBusyTimeoutMs = 5000;

struct RunInfo {
  int64_t id = 0;
  std::string name, created_at, status, config_json, notes;  // created_at: ISO-8601 UTC
};

struct MetricRow {
  int64_t step = 0;
  std::string key;
  double value = 0.0;      // NaN round-trips (SQLite stores it as NULL)
  double wall_time = 0.0;  // seconds since the Unix epoch, taken in add_metric
};

struct EventRow {
  int64_t step = 0;
  std::string kind, payload_json;
};

struct CheckpointRow {
  int64_t step = 0;
  std::string path, sha256;
};

struct GenerationRow {
  int64_t id = 0;  // assigned by the store; ignored by add_generation
  int64_t run_id = 0;
  int64_t step = 0;
  std::string prompt, policy;  // policy: "independent", "fixed", ... (docs/design.md section 7)
  int64_t group_id = 0;
  uint64_t seed = 0;            // stored bit-for-bit in a signed INTEGER column
  std::vector<uint32_t> codes;  // (T,) latent code per position; BLOB of uint32 little-endian
  std::string text;
};

// One benchmark value: a metric of a task at a checkpoint step. Unique per (run, step, task,
// metric): writing it again replaces it (re-evaluating a step).
struct BenchmarkRow {
  int64_t step = 0;
  std::string task, metric;  // ftx's names (core/eval/bench/task.h), e.g. "humaneval", "pass@1"
  double value = 0.0;        // NaN round-trips as NULL
  int64_t n = 0;             // items scored
  double stderr_ = 0.0;      // standard error of the mean over the items (0: not defined)
  int64_t tokens = -1;       // training tokens seen at `step` (x axis in tokens); -1: unknown
  double wall_time = 0.0;    // seconds since the Unix epoch, set by the store when written
};

// One metric of a task, as write_bench_result takes it (the step, task and tokens are shared).
struct BenchMetric {
  std::string metric;
  double value = 0.0, stderr_ = 0.0;
  int64_t n = 0;
};

// One scored item behind a benchmark value: what the model saw and said, and the verdict.
struct BenchItemRow {
  std::string item_id;  // "HumanEval/0", "line 12"
  std::string prompt, output, target;
  std::string verdict;             // "pass", "fail: assertion", "correct", "wrong", ...
  std::string detail_json = "{}";  // task-specific (per-choice log-likelihoods, sandbox output)
  double score = 0.0;              // the item's value of the task's main metric
};

struct ReferenceRow {
  std::string source, model_size, train_tokens, benchmark, metric, model;
  std::optional<double> kappa_bits;  // none for the baseline
  std::string statistic;             // "final", "last_third_mean"
  double value = 0.0;
};

class RunStore {
 public:
  // Creates the file if missing and migrates it to kSchemaVersion.
  static Result<RunStore> open(const std::string& path, int busy_timeout_ms = kDefaultBusyTimeoutMs);
  // The file must exist and already be at kSchemaVersion; every write fails.
  static Result<RunStore> open_readonly(const std::string& path, int busy_timeout_ms = kDefaultBusyTimeoutMs);

  RunStore(RunStore&& other) noexcept;
  RunStore& operator=(RunStore&& other) noexcept;
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;
  ~RunStore();  // best-effort flush of buffered metrics; call flush() to see its error

  const std::string& path() const { return path_; }

  Result<int64_t> create_run(const std::string& name, const std::string& config_json);
  // The run of this name, created with `config_json` and `status` when there is none (an external
  // checkpoint's evaluation: `ftx eval --checkpoint X` without a training run). An existing run is
  // returned as it is; *created (optional) says which.
  Result<RunInfo> find_or_create_run(const std::string& name, const std::string& config_json, const std::string& status,
                                     bool* created = nullptr);
  Result<RunInfo> find_run(const std::string& name);
  Result<std::vector<RunInfo>> list_runs();                      // ordered by id
  Status set_status(int64_t run_id, const std::string& status);  // running/paused/done/stopped/failed
  Status set_notes(int64_t run_id, const std::string& notes);
  Status rename_run(int64_t run_id, const std::string& new_name);  // error if the name is taken
  // Deletes the run and every row that belongs to it (metrics, events, checkpoint rows,
  // generations, benchmarks, bench_items) in one transaction. Checkpoint files are the caller's to remove.
  Status delete_run(int64_t run_id);

  // Buffered in memory until flush(), which writes every buffered row in ONE transaction. On a
  // failed flush the rows stay buffered and the next flush retries them.
  void add_metric(int64_t run_id, int64_t step, const std::string& key, double value);
  Status flush();
  size_t pending_metrics() const { return pending_.size(); }
  Result<std::vector<MetricRow>> metrics(int64_t run_id, const std::string& key_or_empty);  // by key, step
  Result<std::vector<std::string>> metric_keys(int64_t run_id);                             // sorted
  // Tailing for live views: every run's rows stored after rowid `after` (0: from the start), in
  // rowid order, at most `limit`; *last receives the last rowid read (unchanged when none).
  Result<std::vector<std::pair<int64_t, MetricRow>>> metrics_since(int64_t after, int64_t limit, int64_t* last);
  // Resume: drops stored and buffered metrics, benchmark values and their items with step > `step`
  // (one transaction), so the curves continue exactly. Events and generations past the step stay
  // (they are history, not a curve).
  Status delete_metrics_after(int64_t run_id, int64_t step);

  Status add_event(int64_t run_id, int64_t step, const std::string& kind, const std::string& payload_json);
  Result<std::vector<EventRow>> events(int64_t run_id);  // in insertion order
  // Every run's events after rowid `after`, in rowid order; *last receives the last rowid read.
  Result<std::vector<std::pair<int64_t, EventRow>>> events_since(int64_t after, int64_t* last);
  Status add_checkpoint(int64_t run_id, int64_t step, const std::string& path, const std::string& sha256);
  Result<std::vector<CheckpointRow>> checkpoints(int64_t run_id);  // ordered by step
  Status delete_checkpoint(int64_t run_id, int64_t step);          // the row only (files: the caller's)
  Status add_generation(const GenerationRow& g);
  Result<std::vector<GenerationRow>> generations(int64_t run_id, int64_t step);  // by group, id
  // One value; replaces the row of the same (run, step, task, metric). Prefer write_bench_result.
  Status add_benchmark(int64_t run_id, const BenchmarkRow& b);
  // One task's results at one step, in ONE transaction: the run's earlier rows and items of this
  // (step, task) are deleted first, so re-evaluating a step replaces it. `tokens` -1: unknown.
  Status write_bench_result(int64_t run_id, int64_t step, int64_t tokens, const std::string& task,
                            const std::vector<BenchMetric>& metrics, const std::vector<BenchItemRow>& items);
  Result<std::vector<BenchmarkRow>> benchmarks(int64_t run_id);  // by task, metric, step
  // Every run's benchmark rows stored after rowid `after`, in rowid order (a rewritten row gets a
  // new, larger rowid: AUTOINCREMENT), at most `limit`; *last receives the last rowid read.
  Result<std::vector<std::pair<int64_t, BenchmarkRow>>> benchmarks_since(int64_t after, int64_t limit, int64_t* last);
  // The items behind (run, step, task), in the order written; at most `limit` (0: all).
  Result<std::vector<BenchItemRow>> bench_items(int64_t run_id, int64_t step, const std::string& task,
                                                int64_t limit = 0);

  // Loads paper_tables.csv (header table|source,model_size,train_tokens,benchmark,metric,model,
  // kappa_bits,statistic,value; no quoted fields) into `reference` when that table is empty.
  // A writer imports the compiled-in copy of resources/paper_tables.csv by itself (migration 2).
  Status import_reference_csv(const std::string& csv_path);
  Result<std::vector<ReferenceRow>> reference();  // in file order
  // Reference rows of one paper benchmark and metric ("human_eval_plus", "pass@1"), in file order.
  Result<std::vector<ReferenceRow>> reference(const std::string& benchmark, const std::string& metric);
  // A file's PRAGMA user_version without migrating it (0 for an empty or non-ftx SQLite file).
  static Result<int> file_schema_version(const std::string& path);
  Status integrity_check();  // PRAGMA integrity_check == "ok"

  sqlite3* native_handle() const { return db_; }  // diagnostics and tests only

 private:
  struct PendingMetric {
    int64_t run_id, step;
    std::string key;
    double value, wall_time;
  };
  RunStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  static Result<RunStore> open_impl(const std::string& path, bool readonly, int busy_timeout_ms);
  void close();

  sqlite3* db_ = nullptr;
  std::string path_;
  std::vector<PendingMetric> pending_;
};

}  // namespace ftx
