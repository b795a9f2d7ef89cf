// RunStore implementation over the SQLite3 C API: open + pragmas + forward migrations, one small
// function per table operation, and the reference CSV loader. Statements are prepared per call
// (the store writes a few rows a second; flush() reuses one statement for its whole batch).
// Not here: retries beyond sqlite3_busy_timeout, connection pooling, schema downgrades.
#include "core/store/run_store.h"

#include <sqlite3.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <utility>

#include "core/store/sqlite_tx.h"

namespace ftx {
namespace {

// Version 0 -> 1: everything. A later version appends {2, "ALTER ..."} and bumps kSchemaVersion.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  name TEXT UNIQUE NOT NULL,
  created_at TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'running',
  config_json TEXT NOT NULL DEFAULT '{}',
  notes TEXT NOT NULL DEFAULT '');
CREATE TABLE metrics(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  key TEXT NOT NULL,
  value REAL,
  wall_time REAL NOT NULL);
CREATE INDEX metrics_run_key_step ON metrics(run_id, key, step);
CREATE TABLE events(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  kind TEXT NOT NULL,
  payload_json TEXT NOT NULL DEFAULT '{}');
CREATE INDEX events_run_step ON events(run_id, step);
CREATE TABLE checkpoints(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  path TEXT NOT NULL,
  sha256 TEXT NOT NULL);
CREATE INDEX checkpoints_run_step ON checkpoints(run_id, step);
CREATE TABLE generations(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  prompt TEXT NOT NULL,
  policy TEXT NOT NULL,
  group_id INTEGER NOT NULL,
  seed INTEGER NOT NULL,
  codes BLOB,
  text TEXT NOT NULL);
CREATE INDEX generations_run_step ON generations(run_id, step);
CREATE TABLE benchmarks(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  task TEXT NOT NULL,
  metric TEXT NOT NULL,
  value REAL,
  n INTEGER NOT NULL);
CREATE INDEX benchmarks_run_task ON benchmarks(run_id, task, metric, step);
CREATE TABLE reference(
  source TEXT NOT NULL,
  model_size TEXT NOT NULL,
  train_tokens TEXT NOT NULL,
  benchmark TEXT NOT NULL,
  metric TEXT NOT NULL,
  model TEXT NOT NULL,
  kappa_bits REAL,
  statistic TEXT NOT NULL,
  value REAL NOT NULL);
)sql";

struct Migration {
  int to_version;
  const char* sql;
};
constexpr Migration kMigrations[] = {{1, kSchemaV1}};

struct StmtDeleter {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

using Blob = std::vector<unsigned char>;

Status exec(sqlite3* db, const std::string& path, const char* sql, const std::string& what) {
  if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) return sqlite_error(db, path, what);
  return {};
}

Result<Stmt> prepare(sqlite3* db, const std::string& path, const char* sql, const std::string& what) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) != SQLITE_OK) {
    sqlite3_finalize(s);
    return sqlite_error(db, path, what);
  }
  return Stmt(s);
}

int bind_one(sqlite3_stmt* s, int i, int64_t v) { return sqlite3_bind_int64(s, i, v); }
int bind_one(sqlite3_stmt* s, int i, double v) { return sqlite3_bind_double(s, i, v); }
int bind_one(sqlite3_stmt* s, int i, const std::string& v) {
  return sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}
int bind_one(sqlite3_stmt* s, int i, const std::optional<double>& v) {
  return v ? sqlite3_bind_double(s, i, *v) : sqlite3_bind_null(s, i);
}
int bind_one(sqlite3_stmt* s, int i, const Blob& v) {
  return sqlite3_bind_blob(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}

template <class... A>
int bind_all([[maybe_unused]] sqlite3_stmt* s, const A&... args) {
  int i = 0, rc = SQLITE_OK;
  ((rc = (rc == SQLITE_OK) ? bind_one(s, ++i, args) : rc), ...);
  return rc;
}

// Runs a statement that returns no rows.
template <class... A>
Status run(sqlite3* db, const std::string& path, const char* sql, const std::string& what, const A&... args) {
  auto st = prepare(db, path, sql, what);
  if (!st) return st.error();
  if (bind_all(st->get(), args...) != SQLITE_OK || sqlite3_step(st->get()) != SQLITE_DONE)
    return sqlite_error(db, path, what);
  return {};
}

// Runs a query and calls row(stmt) for every result row.
template <class F, class... A>
Status query(sqlite3* db, const std::string& path, const char* sql, const std::string& what, F&& row,
             const A&... args) {
  auto st = prepare(db, path, sql, what);
  if (!st) return st.error();
  if (bind_all(st->get(), args...) != SQLITE_OK) return sqlite_error(db, path, what);
  int rc;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) row(st->get());
  if (rc != SQLITE_DONE) return sqlite_error(db, path, what);
  return {};
}

std::string col_text(sqlite3_stmt* s, int i) {
  const unsigned char* p = sqlite3_column_text(s, i);
  return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(s, i)) : std::string();
}
double col_double(sqlite3_stmt* s, int i) {  // NULL (how SQLite stores NaN) -> NaN
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(s, i);
}
int64_t col_int(sqlite3_stmt* s, int i) { return sqlite3_column_int64(s, i); }

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

Result<int> user_version(sqlite3* db, const std::string& path) {
  int version = 0;
  auto st = query(db, path, "PRAGMA user_version", "read schema version",
                  [&](sqlite3_stmt* s) { version = static_cast<int>(col_int(s, 0)); });
  if (!st) return st.error();
  return version;
}

Error newer_schema_error(const std::string& path, int version) {
  return make_error(path + ": schema version " + std::to_string(version) + " is newer than this build (" +
                    std::to_string(kSchemaVersion) + "); upgrade ftx");
}

// Applies every migration above the file's version in one IMMEDIATE transaction, so two processes
// opening a fresh file at once migrate it once.
Status migrate(sqlite3* db, const std::string& path) {
  return in_transaction(db, path, "migrate", [&]() -> Status {
    auto version = user_version(db, path);
    if (!version) return version.error();
    if (*version > kSchemaVersion) return newer_schema_error(path, *version);
    for (const Migration& m : kMigrations) {
      if (m.to_version <= *version) continue;
      std::string sql = std::string(m.sql) + "PRAGMA user_version = " + std::to_string(m.to_version) + ";";
      FTX_TRY(exec(db, path, sql.c_str(), "migrate to schema version " + std::to_string(m.to_version)));
    }
    return {};
  });
}

// Pragmas of a writer connection. journal_mode answers with the mode it got; "memory" is what an
// in-memory database reports.
Status configure_writer(sqlite3* db, const std::string& path) {
  std::string mode;
  FTX_TRY(
      query(db, path, "PRAGMA journal_mode=WAL", "set WAL journal", [&](sqlite3_stmt* s) { mode = col_text(s, 0); }));
  if (mode != "wal" && mode != "memory")
    return make_error(path + ": cannot use the WAL journal (SQLite kept '" + mode +
                      "'); put the store on a local filesystem");
  FTX_TRY(exec(db, path, "PRAGMA synchronous=NORMAL", "set synchronous"));
  return {};
}

Blob encode_codes(const std::vector<uint32_t>& codes) {
  Blob out(codes.size() * 4);
  for (size_t i = 0; i < codes.size(); ++i)
    for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<unsigned char>(codes[i] >> (8 * b));
  return out;
}

std::vector<uint32_t> decode_codes(const unsigned char* p, size_t bytes) {
  std::vector<uint32_t> codes(bytes / 4);
  for (size_t i = 0; i < codes.size(); ++i)
    for (int b = 0; b < 4; ++b) codes[i] |= static_cast<uint32_t>(p[4 * i + b]) << (8 * b);
  return codes;
}

// The whole of s as a number, or "WHERE: FIELD 's' is not a number".
Result<double> parse_double(const std::string& s, const std::string& where, const char* field) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size())
    return make_error(where + ": " + field + " '" + s + "' is not a number");
  return v;
}

std::vector<std::string> split_commas(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream ss(line);
  std::string f;
  while (std::getline(ss, f, ',')) fields.push_back(f);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

// One data line of paper_tables.csv. `table` (the paper's table number) becomes the source
// "paper table N"; a file whose header says `source` is taken verbatim.
Result<ReferenceRow> parse_reference_line(const std::vector<std::string>& f, bool source_is_table,
                                          const std::string& where) {
  if (f.size() != 9) return make_error(where + ": expected 9 comma-separated fields, got " + std::to_string(f.size()));
  ReferenceRow r;
  r.source = source_is_table ? "paper table " + f[0] : f[0];
  r.model_size = f[1], r.train_tokens = f[2], r.benchmark = f[3], r.metric = f[4], r.model = f[5];
  r.statistic = f[7];
  if (!f[6].empty()) {
    auto k = parse_double(f[6], where, "kappa_bits");
    if (!k) return k.error();
    r.kappa_bits = *k;
  }
  auto value = parse_double(f[8], where, "value");
  if (!value) return value.error();
  r.value = *value;
  return r;
}

Result<std::vector<ReferenceRow>> parse_reference_csv(const std::string& csv_path) {
  std::ifstream in(csv_path);
  if (!in) return make_error(csv_path + ": cannot read the reference tables");
  const std::string kTail = ",model_size,train_tokens,benchmark,metric,model,kappa_bits,statistic,value";
  std::vector<ReferenceRow> rows;
  std::string line;
  bool source_is_table = true;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::string where = csv_path + ":" + std::to_string(line_no);
    if (line_no == 1) {
      if (line != "table" + kTail && line != "source" + kTail)
        return make_error(where + ": header is '" + line + "', expected 'table" + kTail + "'");
      source_is_table = line.rfind("table", 0) == 0;
      continue;
    }
    if (line.empty()) continue;
    if (line.find('"') != std::string::npos) return make_error(where + ": quoted fields are not supported");
    auto row = parse_reference_line(split_commas(line), source_is_table, where);
    if (!row) return row.error();
    rows.push_back(std::move(*row));
  }
  if (rows.empty()) return make_error(csv_path + ": no reference rows (empty file or header only)");
  return rows;
}

}  // namespace

// ---- open / close ----------------------------------------------------------------------------

Result<RunStore> RunStore::open(const std::string& path, int busy_timeout_ms) {
  return open_impl(path, /*readonly=*/false, busy_timeout_ms);
}

Result<RunStore> RunStore::open_readonly(const std::string& path, int busy_timeout_ms) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return make_error(path + ": no such run store");
  return open_impl(path, /*readonly=*/true, busy_timeout_ms);
}

Result<RunStore> RunStore::open_impl(const std::string& path, bool readonly, int busy_timeout_ms) {
  sqlite3* raw = nullptr;
  int flags = readonly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  RunStore store(raw, path);  // owns raw from here on, also on failure
  if (rc != SQLITE_OK) {
    std::string msg = raw ? sqlite3_errmsg(raw) : "out of memory";
    return make_error(path + ": cannot open the run store (" + msg +
                      "); check that the directory exists and is writable");
  }
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, busy_timeout_ms);
  // Reading the version first touches the header: a foreign file fails here, before any write.
  auto version = user_version(raw, path);
  if (!version) return version.error();
  if (*version > kSchemaVersion) return newer_schema_error(path, *version);
  if (readonly) {
    if (*version < kSchemaVersion)
      return make_error(path + ": not an ftx run store (schema version " + std::to_string(*version) + ")");
  } else {
    FTX_TRY(configure_writer(raw, path));
  }
  FTX_TRY(exec(raw, path, "PRAGMA foreign_keys=ON", "enable foreign keys"));
  if (!readonly) FTX_TRY(migrate(raw, path));
  return Result<RunStore>(std::move(store));
}

RunStore::RunStore(RunStore&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)), pending_(std::move(other.pending_)) {}

RunStore& RunStore::operator=(RunStore&& other) noexcept {
  if (this != &other) {
    close();
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
    pending_ = std::move(other.pending_);
  }
  return *this;
}

RunStore::~RunStore() { close(); }

void RunStore::close() {
  if (!db_) return;
  if (!pending_.empty()) (void)flush();  // best effort: a destructor cannot report
  sqlite3_close_v2(db_);
  db_ = nullptr;
}

// ---- runs ------------------------------------------------------------------------------------

Result<int64_t> RunStore::create_run(const std::string& name, const std::string& config_json) {
  if (name.empty()) return make_error(path_ + ": a run needs a non-empty name");
  auto st = run(db_, path_,
                "INSERT INTO runs(name, created_at, status, config_json, notes) "
                "VALUES(?, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'), 'running', ?, '')",
                "create run '" + name + "'", name, config_json);
  if (!st) {
    if (sqlite3_extended_errcode(db_) == SQLITE_CONSTRAINT_UNIQUE)
      return make_error("run '" + name + "' already exists in " + path_ + ": resume it, or pick another name");
    return st.error();
  }
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

namespace {
constexpr const char* kRunColumns = "SELECT id, name, created_at, status, config_json, notes FROM runs ";
RunInfo read_run(sqlite3_stmt* s) {
  return RunInfo{col_int(s, 0), col_text(s, 1), col_text(s, 2), col_text(s, 3), col_text(s, 4), col_text(s, 5)};
}
}  // namespace

Result<RunInfo> RunStore::find_run(const std::string& name) {
  std::vector<RunInfo> found;
  std::string sql = std::string(kRunColumns) + "WHERE name = ?";
  FTX_TRY(query(
      db_, path_, sql.c_str(), "find run '" + name + "'", [&](sqlite3_stmt* s) { found.push_back(read_run(s)); },
      name));
  if (found.empty()) return make_error("run '" + name + "' not found in " + path_);
  return found.front();
}

Result<std::vector<RunInfo>> RunStore::list_runs() {
  std::vector<RunInfo> runs;
  std::string sql = std::string(kRunColumns) + "ORDER BY id";
  FTX_TRY(query(db_, path_, sql.c_str(), "list runs", [&](sqlite3_stmt* s) { runs.push_back(read_run(s)); }));
  return runs;
}

Status RunStore::set_status(int64_t run_id, const std::string& status) {
  static const char* kAllowed[] = {"running", "paused", "done", "stopped", "failed"};
  bool known = false;
  for (const char* a : kAllowed) known = known || status == a;
  if (!known)
    return make_error(path_ + ": run status '" + status + "' is not one of running, paused, done, stopped, failed");
  FTX_TRY(run(db_, path_, "UPDATE runs SET status = ? WHERE id = ?", "set run status", status, run_id));
  if (sqlite3_changes(db_) == 0) return make_error(path_ + ": no run with id " + std::to_string(run_id));
  return {};
}

Status RunStore::set_notes(int64_t run_id, const std::string& notes) {
  FTX_TRY(run(db_, path_, "UPDATE runs SET notes = ? WHERE id = ?", "set run notes", notes, run_id));
  if (sqlite3_changes(db_) == 0) return make_error(path_ + ": no run with id " + std::to_string(run_id));
  return {};
}

Status RunStore::rename_run(int64_t run_id, const std::string& new_name) {
  if (new_name.empty()) return make_error(path_ + ": a run name cannot be empty");
  auto taken = find_run(new_name);
  if (taken) return make_error(path_ + ": a run named '" + new_name + "' already exists");
  FTX_TRY(run(db_, path_, "UPDATE runs SET name = ? WHERE id = ?", "rename run", new_name, run_id));
  if (sqlite3_changes(db_) == 0) return make_error(path_ + ": no run with id " + std::to_string(run_id));
  return {};
}

Status RunStore::delete_run(int64_t run_id) {
  std::erase_if(pending_, [&](const PendingMetric& m) { return m.run_id == run_id; });
  return in_transaction(db_, path_, "delete run", [&]() -> Status {
    // ON DELETE CASCADE removes the run's rows in every table.
    FTX_TRY(run(db_, path_, "DELETE FROM runs WHERE id = ?", "delete run", run_id));
    if (sqlite3_changes(db_) == 0) return make_error(path_ + ": no run with id " + std::to_string(run_id));
    return {};
  });
}

// ---- metrics ---------------------------------------------------------------------------------

void RunStore::add_metric(int64_t run_id, int64_t step, const std::string& key, double value) {
  pending_.push_back(PendingMetric{run_id, step, key, value, now_seconds()});
}

Status RunStore::flush() {
  if (pending_.empty()) return {};
  const std::string what = "write " + std::to_string(pending_.size()) + " metric rows";
  FTX_TRY(in_transaction(db_, path_, what, [&]() -> Status {
    // One statement for the batch, finalized when the body returns (before COMMIT or ROLLBACK).
    auto st = prepare(db_, path_, "INSERT INTO metrics(run_id, step, key, value, wall_time) VALUES(?,?,?,?,?)", what);
    if (!st) return st.error();
    for (const PendingMetric& m : pending_) {
      sqlite3_reset(st->get());
      if (bind_all(st->get(), m.run_id, m.step, m.key, m.value, m.wall_time) != SQLITE_OK ||
          sqlite3_step(st->get()) != SQLITE_DONE)
        return sqlite_error(db_, path_, what);
    }
    return {};
  }));
  pending_.clear();
  return {};
}

Result<std::vector<MetricRow>> RunStore::metrics(int64_t run_id, const std::string& key_or_empty) {
  std::vector<MetricRow> rows;
  auto read = [&](sqlite3_stmt* s) {
    rows.push_back(MetricRow{col_int(s, 0), col_text(s, 1), col_double(s, 2), col_double(s, 3)});
  };
  const char* kAll = "SELECT step, key, value, wall_time FROM metrics WHERE run_id = ? ORDER BY key, step, rowid";
  const char* kOne =
      "SELECT step, key, value, wall_time FROM metrics WHERE run_id = ? AND key = ? ORDER BY step, rowid";
  if (key_or_empty.empty()) {
    FTX_TRY(query(db_, path_, kAll, "read metrics", read, run_id));
  } else {
    FTX_TRY(query(db_, path_, kOne, "read metric '" + key_or_empty + "'", read, run_id, key_or_empty));
  }
  return rows;
}

Result<std::vector<std::string>> RunStore::metric_keys(int64_t run_id) {
  std::vector<std::string> keys;
  FTX_TRY(query(
      db_, path_, "SELECT DISTINCT key FROM metrics WHERE run_id = ? ORDER BY key", "read metric keys",
      [&](sqlite3_stmt* s) { keys.push_back(col_text(s, 0)); }, run_id));
  return keys;
}

Result<std::vector<std::pair<int64_t, MetricRow>>> RunStore::metrics_since(int64_t after, int64_t limit,
                                                                           int64_t* last) {
  std::vector<std::pair<int64_t, MetricRow>> rows;
  auto read = [&](sqlite3_stmt* s) {
    rows.emplace_back(col_int(s, 0), MetricRow{col_int(s, 2), col_text(s, 3), col_double(s, 4), col_double(s, 5)});
    *last = col_int(s, 1);
  };
  FTX_TRY(query(db_, path_,
                "SELECT run_id, rowid, step, key, value, wall_time FROM metrics WHERE rowid > ? ORDER BY rowid LIMIT ?",
                "tail metrics", read, after, limit));
  return rows;
}

Result<std::vector<std::pair<int64_t, EventRow>>> RunStore::events_since(int64_t after, int64_t* last) {
  std::vector<std::pair<int64_t, EventRow>> rows;
  auto read = [&](sqlite3_stmt* s) {
    rows.emplace_back(col_int(s, 0), EventRow{col_int(s, 2), col_text(s, 3), col_text(s, 4)});
    *last = col_int(s, 1);
  };
  FTX_TRY(query(db_, path_, "SELECT run_id, rowid, step, kind, payload_json FROM events WHERE rowid > ? ORDER BY rowid",
                "tail events", read, after));
  return rows;
}

Status RunStore::delete_metrics_after(int64_t run_id, int64_t step) {
  std::erase_if(pending_, [&](const PendingMetric& m) { return m.run_id == run_id && m.step > step; });
  return run(db_, path_, "DELETE FROM metrics WHERE run_id = ? AND step > ?",
             "delete metrics after step " + std::to_string(step), run_id, step);
}

// ---- events, checkpoints, generations, benchmarks -------------------------------------------

Status RunStore::add_event(int64_t run_id, int64_t step, const std::string& kind, const std::string& payload_json) {
  return run(db_, path_, "INSERT INTO events(run_id, step, kind, payload_json) VALUES(?,?,?,?)",
             "add event '" + kind + "'", run_id, step, kind, payload_json);
}

Result<std::vector<EventRow>> RunStore::events(int64_t run_id) {
  std::vector<EventRow> rows;
  FTX_TRY(query(
      db_, path_, "SELECT step, kind, payload_json FROM events WHERE run_id = ? ORDER BY rowid", "read events",
      [&](sqlite3_stmt* s) {
        rows.push_back({col_int(s, 0), col_text(s, 1), col_text(s, 2)});
      },
      run_id));
  return rows;
}

Status RunStore::add_checkpoint(int64_t run_id, int64_t step, const std::string& path, const std::string& sha256) {
  return run(db_, path_, "INSERT INTO checkpoints(run_id, step, path, sha256) VALUES(?,?,?,?)",
             "add checkpoint '" + path + "'", run_id, step, path, sha256);
}

Status RunStore::delete_checkpoint(int64_t run_id, int64_t step) {
  return run(db_, path_, "DELETE FROM checkpoints WHERE run_id = ? AND step = ?",
             "delete checkpoint at step " + std::to_string(step), run_id, step);
}

Result<std::vector<CheckpointRow>> RunStore::checkpoints(int64_t run_id) {
  std::vector<CheckpointRow> rows;
  FTX_TRY(query(
      db_, path_, "SELECT step, path, sha256 FROM checkpoints WHERE run_id = ? ORDER BY step, rowid",
      "read checkpoints",
      [&](sqlite3_stmt* s) {
        rows.push_back({col_int(s, 0), col_text(s, 1), col_text(s, 2)});
      },
      run_id));
  return rows;
}

Status RunStore::add_generation(const GenerationRow& g) {
  return run(db_, path_,
             "INSERT INTO generations(run_id, step, prompt, policy, group_id, seed, codes, text) "
             "VALUES(?,?,?,?,?,?,?,?)",
             "add generation", g.run_id, g.step, g.prompt, g.policy, g.group_id, static_cast<int64_t>(g.seed),
             encode_codes(g.codes), g.text);
}

Result<std::vector<GenerationRow>> RunStore::generations(int64_t run_id, int64_t step) {
  std::vector<GenerationRow> rows;
  int64_t bad_id = -1;
  auto read = [&](sqlite3_stmt* s) {
    GenerationRow g{col_int(s, 0),
                    run_id,
                    step,
                    col_text(s, 1),
                    col_text(s, 2),
                    col_int(s, 3),
                    static_cast<uint64_t>(col_int(s, 4)),
                    {},
                    col_text(s, 6)};
    auto* p = static_cast<const unsigned char*>(sqlite3_column_blob(s, 5));  // blob before bytes
    auto bytes = static_cast<size_t>(sqlite3_column_bytes(s, 5));
    if (bytes % 4 != 0) bad_id = g.id;
    if (p) g.codes = decode_codes(p, bytes);
    rows.push_back(std::move(g));
  };
  FTX_TRY(query(db_, path_,
                "SELECT id, prompt, policy, group_id, seed, codes, text FROM generations "
                "WHERE run_id = ? AND step = ? ORDER BY group_id, id",
                "read generations", read, run_id, step));
  if (bad_id >= 0)
    return make_error(path_ + ": generation " + std::to_string(bad_id) +
                      ": codes blob is not a whole number of uint32");
  return rows;
}

Status RunStore::add_benchmark(int64_t run_id, const BenchmarkRow& b) {
  return run(db_, path_, "INSERT INTO benchmarks(run_id, step, task, metric, value, n) VALUES(?,?,?,?,?,?)",
             "add benchmark '" + b.task + "/" + b.metric + "'", run_id, b.step, b.task, b.metric, b.value, b.n);
}

Result<std::vector<BenchmarkRow>> RunStore::benchmarks(int64_t run_id) {
  std::vector<BenchmarkRow> rows;
  auto read = [&](sqlite3_stmt* s) {
    rows.push_back({col_int(s, 0), col_text(s, 1), col_text(s, 2), col_double(s, 3), col_int(s, 4)});
  };
  FTX_TRY(query(db_, path_,
                "SELECT step, task, metric, value, n FROM benchmarks WHERE run_id = ? ORDER BY task, metric, step",
                "read benchmarks", read, run_id));
  return rows;
}

// ---- reference tables and integrity -----------------------------------------------------------

Status RunStore::import_reference_csv(const std::string& csv_path) {
  int64_t existing = 0;
  FTX_TRY(query(db_, path_, "SELECT COUNT(*) FROM reference", "count reference rows",
                [&](sqlite3_stmt* s) { existing = col_int(s, 0); }));
  if (existing > 0) return {};
  auto rows = parse_reference_csv(csv_path);
  if (!rows) return rows.error();
  const std::string what = "import " + csv_path;
  return in_transaction(db_, path_, what, [&]() -> Status {
    for (const ReferenceRow& r : *rows)
      FTX_TRY(run(db_, path_,
                  "INSERT INTO reference(source, model_size, train_tokens, benchmark, metric, model, kappa_bits, "
                  "statistic, value) VALUES(?,?,?,?,?,?,?,?,?)",
                  what, r.source, r.model_size, r.train_tokens, r.benchmark, r.metric, r.model, r.kappa_bits,
                  r.statistic, r.value));
    return {};
  });
}

Result<std::vector<ReferenceRow>> RunStore::reference() {
  std::vector<ReferenceRow> rows;
  auto read = [&](sqlite3_stmt* s) {
    ReferenceRow r{col_text(s, 0), col_text(s, 1), col_text(s, 2), col_text(s, 3),  col_text(s, 4),
                   col_text(s, 5), std::nullopt,   col_text(s, 7), col_double(s, 8)};
    if (sqlite3_column_type(s, 6) != SQLITE_NULL) r.kappa_bits = sqlite3_column_double(s, 6);
    rows.push_back(std::move(r));
  };
  FTX_TRY(query(db_, path_,
                "SELECT source, model_size, train_tokens, benchmark, metric, model, kappa_bits, statistic, value "
                "FROM reference ORDER BY rowid",
                "read reference", read));
  return rows;
}

Status RunStore::integrity_check() {
  std::vector<std::string> lines;
  FTX_TRY(query(db_, path_, "PRAGMA integrity_check", "integrity check",
                [&](sqlite3_stmt* s) { lines.push_back(col_text(s, 0)); }));
  if (lines.size() == 1 && lines[0] == "ok") return {};
  return make_error(path_ + ": integrity check failed: " + (lines.empty() ? "no answer" : lines[0]) +
                    (lines.size() > 1 ? " (+" + std::to_string(lines.size() - 1) + " more)" : ""));
}

}  // namespace ftx
