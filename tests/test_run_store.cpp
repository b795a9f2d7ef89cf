// RunStore: round trip of every table, metric batching, WAL readers beside a writer, and the
// failure paths (newer schema, foreign file, unwritable path, duplicate run, locked, disk full);
// benchmark results (schema 2): migration of a version-1 file, round trips of values and items,
// a rewritten step replacing its rows, tailing by rowid, resume cleanup, find_or_create_run;
// in_transaction (core/store/sqlite_tx.h), whose failures must leave nothing written.
#include "core/store/run_store.h"
#include "core/store/sqlite_tx.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace ftx;

namespace {

constexpr const char* kReferenceCsv = FTX_RESOURCE_DIR "/paper_tables.csv";

class RunStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("ftx_store_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  std::string db_path(const std::string& name = "runs.db") const { return (dir_ / name).string(); }

  // Raw SQL through a connection of its own (what another process would do).
  static void raw_exec(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    std::string msg = err ? err : "";
    sqlite3_free(err);
    sqlite3_close(db);
    ASSERT_EQ(rc, SQLITE_OK) << msg;
  }

  fs::path dir_;
};

RunStore open_ok(const std::string& path, int busy_ms = kDefaultBusyTimeoutMs) {
  auto s = RunStore::open(path, busy_ms);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return std::move(s.value());
}

RunStore open_reader(const std::string& path) {
  auto s = RunStore::open_readonly(path);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return std::move(s.value());
}

int64_t must(Result<int64_t> r) {
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : -1;
}

#define EXPECT_OK(expr)                                                           \
  do {                                                                            \
    auto r_ = (expr);                                                             \
    EXPECT_TRUE(r_.ok()) << #expr << ": " << (r_.ok() ? "" : r_.error().message); \
  } while (0)

GenerationRow make_generation(int64_t run_id, int64_t group) {
  GenerationRow g;
  g.run_id = run_id;
  g.step = 300;
  g.prompt = "K>";
  g.policy = group == 0 ? "independent" : "fixed";
  g.group_id = group;
  g.seed = 0xFFFFFFFFFFFFFFFFull - static_cast<uint64_t>(group);  // above INT64_MAX on purpose
  g.codes = {0u, 1u, 255u, 256u, 65535u, 0xDEADBEEFu, 0xFFFFFFFFu};
  g.text = "K>____KKKKKKKK" + std::to_string(group);
  return g;
}

size_t csv_data_lines(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) n += line.empty() ? 0 : 1;
  return n - 1;  // header
}

}  // namespace

namespace {

// Writes a row into every table, through a store that is closed on return.
void fill_every_table(const std::string& path) {
  RunStore store = open_ok(path);
  int64_t a = must(store.create_run("alpha", R"({"kappa_bits":0.125})"));
  int64_t b = must(store.create_run("beta", "{}"));
  EXPECT_NE(a, b);
  EXPECT_OK(store.set_status(a, "paused"));
  EXPECT_OK(store.set_notes(a, "first try"));
  store.add_metric(a, 1, "train/ce", 3.25);
  store.add_metric(a, 2, "train/ce", 2.5);
  store.add_metric(a, 1, "lr", 1e-3);
  store.add_metric(b, 1, "train/ce", 9.0);
  EXPECT_OK(store.flush());
  EXPECT_OK(store.add_event(a, 2, "kappa_changed", R"({"from":1,"to":0.125})"));
  EXPECT_OK(store.add_event(a, 5, "paused", "{}"));
  EXPECT_OK(store.add_checkpoint(a, 200, "ckpt/200", std::string(64, 'b')));
  EXPECT_OK(store.add_checkpoint(a, 100, "ckpt/100", std::string(64, 'a')));
  EXPECT_OK(store.add_generation(make_generation(a, 1)));
  EXPECT_OK(store.add_generation(make_generation(a, 0)));
  EXPECT_OK(store.add_benchmark(a, BenchmarkRow{400, "mbpp", "pass@1", 0.44, 500}));
  EXPECT_OK(store.import_reference_csv(kReferenceCsv));
}

void expect_runs_and_metrics(RunStore& store) {
  auto runs = store.list_runs();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 2u);
  const RunInfo& a = (*runs)[0];
  EXPECT_EQ(a.name, "alpha");
  EXPECT_EQ(a.status, "paused");
  EXPECT_EQ(a.notes, "first try");
  EXPECT_EQ(a.config_json, R"({"kappa_bits":0.125})");
  EXPECT_EQ(a.created_at.size(), 20u) << a.created_at;  // 2025-01-02T03:04:05Z
  EXPECT_EQ((*runs)[1].status, "running");
  auto found = store.find_run("beta");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->id, (*runs)[1].id);
  auto ce = store.metrics(a.id, "train/ce");
  ASSERT_TRUE(ce.ok());
  ASSERT_EQ(ce->size(), 2u);
  EXPECT_EQ((*ce)[0].step, 1);
  EXPECT_EQ((*ce)[0].value, 3.25);
  EXPECT_EQ((*ce)[1].value, 2.5);
  EXPECT_GT((*ce)[0].wall_time, 1.6e9);  // seconds since the epoch, not ms
  auto all = store.metrics(a.id, "");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 3u);
  auto keys = store.metric_keys(a.id);
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(*keys, (std::vector<std::string>{"lr", "train/ce"}));
}

void expect_events_checkpoints_benchmarks(RunStore& store, int64_t run) {
  auto events = store.events(run);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].kind, "kappa_changed");
  EXPECT_EQ((*events)[0].payload_json, R"({"from":1,"to":0.125})");
  EXPECT_EQ((*events)[1].step, 5);
  auto ckpts = store.checkpoints(run);
  ASSERT_TRUE(ckpts.ok());
  ASSERT_EQ(ckpts->size(), 2u);
  EXPECT_EQ((*ckpts)[0].step, 100);  // ordered by step, not insertion
  EXPECT_EQ((*ckpts)[0].path, "ckpt/100");
  EXPECT_EQ((*ckpts)[1].sha256, std::string(64, 'b'));
  auto bench = store.benchmarks(run);
  ASSERT_TRUE(bench.ok());
  ASSERT_EQ(bench->size(), 1u);
  EXPECT_EQ((*bench)[0].task, "mbpp");
  EXPECT_EQ((*bench)[0].metric, "pass@1");
  EXPECT_EQ((*bench)[0].value, 0.44);
  EXPECT_EQ((*bench)[0].n, 500);
  EXPECT_EQ((*bench)[0].step, 400);
  auto gens = store.generations(run, 300);
  ASSERT_TRUE(gens.ok());
  ASSERT_EQ(gens->size(), 2u);
  EXPECT_EQ((*gens)[0].codes, make_generation(run, 0).codes);
}

}  // namespace

TEST_F(RunStoreTest, RoundTripOfEveryTable) {
  fill_every_table(db_path());
  RunStore store = open_reader(db_path());  // everything comes back from the file
  expect_runs_and_metrics(store);
  auto alpha = store.find_run("alpha");
  ASSERT_TRUE(alpha.ok());
  expect_events_checkpoints_benchmarks(store, alpha->id);
  auto ref = store.reference();
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->size(), csv_data_lines(kReferenceCsv));
  EXPECT_OK(store.integrity_check());
}

TEST_F(RunStoreTest, GenerationCodesBlobRoundTrip) {
  RunStore store = open_ok(db_path());
  int64_t run = must(store.create_run("gen", "{}"));
  GenerationRow g1 = make_generation(run, 1), g0 = make_generation(run, 0);
  GenerationRow empty = make_generation(run, 2);
  empty.codes.clear();
  EXPECT_OK(store.add_generation(g1));
  EXPECT_OK(store.add_generation(g0));
  EXPECT_OK(store.add_generation(empty));
  auto rows = store.generations(run, 300);
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  ASSERT_EQ(rows->size(), 3u);
  const GenerationRow& r = (*rows)[0];  // ordered by group
  EXPECT_EQ(r.group_id, 0);
  EXPECT_EQ(r.policy, "independent");
  EXPECT_EQ(r.prompt, "K>");
  EXPECT_EQ(r.seed, g0.seed);
  EXPECT_EQ(r.codes, g0.codes);
  EXPECT_EQ(r.text, g0.text);
  EXPECT_EQ(r.step, 300);
  EXPECT_GT(r.id, 0);
  EXPECT_EQ((*rows)[1].codes, g1.codes);
  EXPECT_TRUE((*rows)[2].codes.empty());
  auto other_step = store.generations(run, 301);
  ASSERT_TRUE(other_step.ok());
  EXPECT_TRUE(other_step->empty());

  // The BLOB is uint32 little-endian whatever the host: 0xDEADBEEF is EF BE AD DE.
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(
      sqlite3_prepare_v2(store.native_handle(), "SELECT codes FROM generations WHERE group_id = 1", -1, &st, nullptr),
      SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  ASSERT_EQ(sqlite3_column_bytes(st, 0), 4 * 7);
  auto* p = static_cast<const unsigned char*>(sqlite3_column_blob(st, 0));
  EXPECT_EQ(p[20], 0xEF);
  EXPECT_EQ(p[21], 0xBE);
  EXPECT_EQ(p[22], 0xAD);
  EXPECT_EQ(p[23], 0xDE);
  EXPECT_EQ(p[8], 0xFF);  // 255
  EXPECT_EQ(p[9], 0x00);
  sqlite3_finalize(st);

  // A blob that is not a whole number of uint32 is reported, not misread.
  raw_exec(db_path(), "UPDATE generations SET codes = x'010203' WHERE group_id = 2");
  auto bad = store.generations(run, 300);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find(db_path()), std::string::npos);
}

TEST_F(RunStoreTest, MetricsAreInvisibleUntilFlush) {
  RunStore writer = open_ok(db_path());
  int64_t run = must(writer.create_run("batch", "{}"));
  RunStore reader = open_reader(db_path());
  for (int step = 0; step < 100; ++step) {
    writer.add_metric(run, step, "train/ce", 4.0 - 0.01 * step);
    writer.add_metric(run, step, "train/kl", 0.5);
  }
  EXPECT_EQ(writer.pending_metrics(), 200u);
  auto before = reader.metrics(run, "");
  ASSERT_TRUE(before.ok());
  EXPECT_TRUE(before->empty());
  int commits = 0;
  sqlite3_commit_hook(
      writer.native_handle(), [](void* n) { return ++*static_cast<int*>(n), 0; }, &commits);
  EXPECT_OK(writer.flush());
  sqlite3_commit_hook(writer.native_handle(), nullptr, nullptr);
  EXPECT_EQ(commits, 1);  // 200 rows, one transaction
  EXPECT_EQ(writer.pending_metrics(), 0u);
  auto after = reader.metrics(run, "train/ce");
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 100u);
  for (int step = 0; step < 100; ++step) {
    EXPECT_EQ((*after)[step].step, step);
    EXPECT_DOUBLE_EQ((*after)[step].value, 4.0 - 0.01 * step);
  }
  EXPECT_OK(writer.flush());  // nothing pending: no-op
  auto again = reader.metrics(run, "");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->size(), 200u);
}

TEST_F(RunStoreTest, NaNMetricRoundTrips) {
  RunStore store = open_ok(db_path());
  int64_t run = must(store.create_run("nan", "{}"));
  store.add_metric(run, 7, "train/loss", std::nan(""));
  store.add_metric(run, 8, "train/loss", INFINITY);
  EXPECT_OK(store.flush());
  auto rows = store.metrics(run, "train/loss");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_TRUE(std::isnan((*rows)[0].value));
  EXPECT_TRUE(std::isinf((*rows)[1].value));
}

TEST_F(RunStoreTest, WalReaderSeesCommittedDataWhileWriterHoldsTheDatabase) {
  RunStore writer = open_ok(db_path());
  int64_t run = must(writer.create_run("tail", "{}"));
  writer.add_metric(run, 1, "train/ce", 1.5);
  ASSERT_TRUE(writer.flush().ok());
  EXPECT_TRUE(fs::exists(db_path() + "-wal"));

  // The writer holds an open write transaction with an uncommitted row.
  ASSERT_EQ(sqlite3_exec(writer.native_handle(), "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(writer.native_handle(),
                         "INSERT INTO metrics(run_id, step, key, value, wall_time) VALUES(1, 2, 'train/ce', 9, 0)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  auto reader = RunStore::open_readonly(db_path(), /*busy_timeout_ms=*/50);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto seen = reader->metrics(run, "train/ce");
  ASSERT_TRUE(seen.ok()) << seen.error().message;  // not blocked by the writer
  ASSERT_EQ(seen->size(), 1u);                     // committed only
  EXPECT_EQ((*seen)[0].value, 1.5);
  auto runs = reader->list_runs();
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), 1u);
  ASSERT_EQ(sqlite3_exec(writer.native_handle(), "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  auto later = reader->metrics(run, "train/ce");
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->size(), 2u);
  EXPECT_FALSE(reader->create_run("nope", "{}").ok());  // a reader never writes
}

TEST_F(RunStoreTest, NewerSchemaVersionIsRejected) {
  raw_exec(db_path(), "CREATE TABLE future(x); PRAGMA user_version = 7;");
  const std::string expected =
      db_path() + ": schema version 7 is newer than this build (" + std::to_string(kSchemaVersion) + "); upgrade ftx";
  auto s = RunStore::open(db_path());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, expected);
  auto r = RunStore::open_readonly(db_path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, expected);
}

TEST_F(RunStoreTest, MigratesVersionZeroAndKeepsDataOnReopen) {
  raw_exec(db_path(), "PRAGMA user_version = 0;");
  {
    RunStore store = open_ok(db_path());
    must(store.create_run("kept", "{}"));
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path().c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), kSchemaVersion);
  sqlite3_finalize(st);
  sqlite3_close(db);
  RunStore again = open_ok(db_path());  // already current: no second migration
  auto run = again.find_run("kept");
  EXPECT_TRUE(run.ok());
  EXPECT_OK(again.integrity_check());
}

TEST_F(RunStoreTest, GarbageFileIsRejectedWithItsPath) {
  for (size_t size : {size_t{37}, size_t{4096}}) {
    const std::string path = db_path("garbage_" + std::to_string(size) + ".db");
    std::string bytes(size, '\0');
    uint32_t x = 12345;
    for (char& c : bytes) c = static_cast<char>((x = x * 1664525u + 1013904223u) >> 24);
    std::ofstream(path, std::ios::binary) << bytes;
    auto s = RunStore::open(path);
    ASSERT_FALSE(s.ok()) << size;
    EXPECT_EQ(s.error().message, path + ": not a database (file is corrupt or not SQLite)");
    auto r = RunStore::open_readonly(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message, path + ": not a database (file is corrupt or not SQLite)");
    std::ifstream in(path, std::ios::binary);  // and the file was left untouched
    std::string after((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(after, bytes);
  }
}

TEST_F(RunStoreTest, UnwritablePathIsRejectedWithItsPath) {
  const std::string missing_dir = (dir_ / "no" / "such" / "dir" / "runs.db").string();
  auto a = RunStore::open(missing_dir);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().message.rfind(missing_dir + ": ", 0), 0u) << a.error().message;

  const std::string file = (dir_ / "plain_file").string();
  std::ofstream(file) << "x";
  const std::string under_file = file + "/runs.db";  // a file is no directory, even for root
  auto b = RunStore::open(under_file);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().message.rfind(under_file + ": ", 0), 0u) << b.error().message;

  auto c = RunStore::open_readonly(db_path("absent.db"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message, db_path("absent.db") + ": no such run store");
}

TEST_F(RunStoreTest, ReadOnlyDirectoryIsRejectedWithItsPath) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  const fs::path ro = dir_ / "readonly";
  fs::create_directories(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  const std::string in_ro = (ro / "runs.db").string();
  auto d = RunStore::open(in_ro);
  fs::permissions(ro, fs::perms::owner_all);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().message.rfind(in_ro + ": ", 0), 0u) << d.error().message;
}

TEST_F(RunStoreTest, DuplicateRunNameIsRejected) {
  RunStore store = open_ok(db_path());
  must(store.create_run("x", "{}"));
  auto dup = store.create_run("x", R"({"other":1})");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().message, "run 'x' already exists in " + db_path() + ": resume it, or pick another name");
  auto missing = store.find_run("y");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "run 'y' not found in " + db_path());
  EXPECT_FALSE(store.set_status(1, "exploded").ok());
  EXPECT_FALSE(store.set_status(99, "done").ok());
  auto runs = store.list_runs();
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), 1u);
}

TEST_F(RunStoreTest, DeleteMetricsAfterContinuesTheCurve) {
  RunStore store = open_ok(db_path());
  int64_t run = must(store.create_run("resume", "{}"));
  int64_t other = must(store.create_run("other", "{}"));
  for (int step = 0; step < 10; ++step) store.add_metric(run, step, "train/ce", step);
  for (int step = 0; step < 10; ++step) store.add_metric(other, step, "train/ce", step);
  ASSERT_TRUE(store.flush().ok());
  for (int step = 10; step < 13; ++step) store.add_metric(run, step, "train/ce", step);  // still buffered

  EXPECT_OK(store.delete_metrics_after(run, 5));  // resumed from the step-5 checkpoint
  EXPECT_EQ(store.pending_metrics(), 0u);
  for (int step = 6; step < 9; ++step) store.add_metric(run, step, "train/ce", 100 + step);
  ASSERT_TRUE(store.flush().ok());

  auto rows = store.metrics(run, "train/ce");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 9u);
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ((*rows)[i].step, i);
    EXPECT_EQ((*rows)[i].value, i <= 5 ? i : 100 + i);
  }
  auto untouched = store.metrics(other, "train/ce");
  ASSERT_TRUE(untouched.ok());
  EXPECT_EQ(untouched->size(), 10u);
}

TEST_F(RunStoreTest, IntegrityCheckPasses) {
  RunStore store = open_ok(db_path());
  int64_t run = must(store.create_run("ok", "{}"));
  for (int i = 0; i < 1000; ++i) store.add_metric(run, i, "train/ce", 1.0 / (i + 1));
  ASSERT_TRUE(store.flush().ok());
  EXPECT_OK(store.integrity_check());
}

TEST_F(RunStoreTest, ReferenceCsvImportsOnce) {
  RunStore store = open_ok(db_path());
  auto created = store.reference();  // a new store has the compiled-in tables already
  ASSERT_TRUE(created.ok());
  EXPECT_EQ(created->size(), csv_data_lines(kReferenceCsv));
  EXPECT_OK(store.import_reference_csv(kReferenceCsv));
  EXPECT_OK(store.import_reference_csv(kReferenceCsv));  // table not empty: no duplicates
  auto rows = store.reference();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), csv_data_lines(kReferenceCsv));
  const ReferenceRow& first = (*rows)[0];  // 1,1.5B,47B,human_eval_plus,pass@1,baseline,,final,0.055
  EXPECT_EQ(first.source, "paper table 1");
  EXPECT_EQ(first.model_size, "1.5B");
  EXPECT_EQ(first.train_tokens, "47B");
  EXPECT_EQ(first.benchmark, "human_eval_plus");
  EXPECT_EQ(first.metric, "pass@1");
  EXPECT_EQ(first.model, "baseline");
  EXPECT_FALSE(first.kappa_bits.has_value());
  EXPECT_EQ(first.statistic, "final");
  EXPECT_DOUBLE_EQ(first.value, 0.055);
  ASSERT_TRUE((*rows)[1].kappa_bits.has_value());
  EXPECT_DOUBLE_EQ(*(*rows)[1].kappa_bits, 0.25);
}

TEST_F(RunStoreTest, BadReferenceCsvNamesFileAndLine) {
  const std::string csv = db_path("bad.csv");
  std::ofstream(csv) << "table,model_size,train_tokens,benchmark,metric,model,kappa_bits,statistic,value\n"
                     << "1,1.5B,47B,mbpp,pass@1,baseline,,final,0.1\n"
                     << "1,1.5B,47B,mbpp,pass@1,free_transformer,0.5,final,zero\n";
  RunStore store = open_ok(db_path());
  raw_exec(db_path(), "DELETE FROM reference;");  // import_reference_csv fills an empty table only
  auto st = store.import_reference_csv(csv);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, csv + ":3: value 'zero' is not a number");
  auto rows = store.reference();
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE(rows->empty());  // all or nothing
  auto missing = store.import_reference_csv(db_path("missing.csv"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("missing.csv"), std::string::npos);
}

TEST_F(RunStoreTest, LockedDatabaseReturnsAnErrorAndKeepsData) {
  RunStore store = open_ok(db_path(), /*busy_ms=*/100);
  int64_t run = must(store.create_run("busy", "{}"));
  store.add_metric(run, 1, "train/ce", 1.0);
  ASSERT_TRUE(store.flush().ok());

  sqlite3* other = nullptr;  // another writer holds the write lock
  ASSERT_EQ(sqlite3_open(db_path().c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  store.add_metric(run, 2, "train/ce", 2.0);
  auto st = store.flush();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message.rfind(db_path() + ": ", 0), 0u);
  EXPECT_NE(st.error().message.find("locked"), std::string::npos) << st.error().message;
  EXPECT_EQ(store.pending_metrics(), 1u);  // kept for the next flush
  EXPECT_FALSE(store.add_event(run, 2, "paused", "{}").ok());
  sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(other);

  EXPECT_OK(store.flush());
  auto rows = store.metrics(run, "train/ce");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), 2u);
}

TEST_F(RunStoreTest, FullDiskReturnsAnErrorAndKeepsCommittedRows) {
  RunStore store = open_ok(db_path());
  int64_t run = must(store.create_run("full", "{}"));
  for (int i = 0; i < 10; ++i) store.add_metric(run, i, "train/ce", i);
  ASSERT_TRUE(store.flush().ok());
  // Cap the file at its current size: the next big batch cannot fit (SQLITE_FULL).
  ASSERT_EQ(sqlite3_exec(store.native_handle(), "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(store.native_handle(), "PRAGMA max_page_count = 1", nullptr, nullptr, nullptr), SQLITE_OK);
  const std::string long_key(2000, 'k');
  for (int i = 0; i < 2000; ++i) store.add_metric(run, i, long_key + std::to_string(i), i);
  auto st = store.flush();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message.rfind(db_path() + ": ", 0), 0u);
  EXPECT_NE(st.error().message.find("full"), std::string::npos) << st.error().message;
  auto rows = store.metrics(run, "");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), 10u);  // the earlier commit stays, the failed batch left nothing
  EXPECT_OK(store.integrity_check());
}

namespace {

int sql(sqlite3* db, const char* text) { return sqlite3_exec(db, text, nullptr, nullptr, nullptr); }

size_t run_count(RunStore& store) {
  auto runs = store.list_runs();
  EXPECT_TRUE(runs.ok()) << (runs.ok() ? "" : runs.error().message);
  return runs.ok() ? runs->size() : size_t(0);
}

}  // namespace

// Whatever fails (the body, one of its statements, COMMIT), nothing the body wrote stays, the first
// error comes back, and the connection is out of the transaction for the next one.
TEST_F(RunStoreTest, FailedTransactionLeavesNothingWritten) {
  RunStore store = open_ok(db_path());
  sqlite3* db = store.native_handle();
  Status body_failed = in_transaction(db, db_path(), "add run", [&]() -> Status {
    EXPECT_EQ(sql(db, "INSERT INTO runs(name, created_at) VALUES('a', 'now')"), SQLITE_OK);
    return make_error("the body's own error");
  });
  ASSERT_FALSE(body_failed.ok());
  EXPECT_EQ(body_failed.error().message, "the body's own error");
  EXPECT_EQ(run_count(store), 0u);
  EXPECT_NE(sqlite3_get_autocommit(db), 0) << "left inside the transaction";

  // A failing statement: its message, read before ROLLBACK reset it.
  Status statement_failed = in_transaction(db, db_path(), "add run", [&]() -> Status {
    EXPECT_EQ(sql(db, "INSERT INTO runs(name, created_at) VALUES('b', 'now')"), SQLITE_OK);
    if (sql(db, "INSERT INTO no_such_table VALUES(1)") != SQLITE_OK) return sqlite_error(db, db_path(), "add row");
    return {};
  });
  ASSERT_FALSE(statement_failed.ok());
  EXPECT_EQ(statement_failed.error().message, db_path() + ": add row: no such table: no_such_table");
  EXPECT_EQ(run_count(store), 0u);

  // COMMIT refused: a deferred foreign key (a metric of a run that does not exist) fails only there.
  Status commit_failed = in_transaction(db, db_path(), "add metric", [&]() -> Status {
    EXPECT_EQ(sql(db, "PRAGMA defer_foreign_keys = ON"), SQLITE_OK);
    EXPECT_EQ(sql(db, "INSERT INTO runs(name, created_at) VALUES('c', 'now')"), SQLITE_OK);
    EXPECT_EQ(sql(db, "INSERT INTO metrics(run_id, step, key, value, wall_time) VALUES(42, 1, 'k', 1, 0)"), SQLITE_OK);
    return {};
  });
  ASSERT_FALSE(commit_failed.ok());
  EXPECT_EQ(commit_failed.error().message.rfind(db_path() + ": add metric: FOREIGN KEY", 0), 0u)
      << commit_failed.error().message;
  EXPECT_EQ(run_count(store), 0u);
  EXPECT_NE(sqlite3_get_autocommit(db), 0) << "a refused COMMIT left the transaction open";

  // A body that succeeds is committed: a reader of its own sees the row.
  EXPECT_OK(in_transaction(db, db_path(), "add run", [&]() -> Status {
    EXPECT_EQ(sql(db, "INSERT INTO runs(name, created_at) VALUES('d', 'now')"), SQLITE_OK);
    return {};
  }));
  RunStore reader = open_reader(db_path());
  EXPECT_EQ(run_count(reader), 1u);
}

// Another writer holds the lock: BEGIN IMMEDIATE fails after the busy timeout and the body never runs.
TEST_F(RunStoreTest, BusyTransactionFailsBeforeItsBody) {
  RunStore store = open_ok(db_path(), /*busy_ms=*/100);
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(db_path().c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sql(other, "BEGIN IMMEDIATE"), SQLITE_OK);
  bool ran = false;
  Status busy = in_transaction(store.native_handle(), db_path(), "add run", [&]() -> Status {
    ran = true;
    return {};
  });
  sql(other, "ROLLBACK");
  sqlite3_close(other);
  ASSERT_FALSE(busy.ok());
  EXPECT_FALSE(ran);
  EXPECT_EQ(busy.error().message.rfind(db_path() + ": add run: ", 0), 0u) << busy.error().message;
  EXPECT_NE(busy.error().message.find("locked"), std::string::npos) << busy.error().message;
}

// delete_run of an unknown id: an error, and every other run kept.
TEST_F(RunStoreTest, DeletingAnUnknownRunKeepsEveryRun) {
  RunStore store = open_ok(db_path());
  const int64_t kept = must(store.create_run("kept", "{}"));
  store.add_metric(kept, 1, "train/ce", 1.0);
  ASSERT_TRUE(store.flush().ok());
  Status st = store.delete_run(kept + 100);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, db_path() + ": no run with id " + std::to_string(kept + 100));
  EXPECT_EQ(run_count(store), 1u);
  auto rows = store.metrics(kept, "");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), 1u);
  EXPECT_OK(store.delete_run(kept));
  EXPECT_EQ(run_count(store), 0u);
}

// ---- benchmark results (schema version 2) -------------------------------------------------------

namespace {

// Schema version 1 exactly as the store created it before benchmark results had standard errors
// and items (core/store/run_store.cpp at 770aee9), with rows in it.
constexpr const char* kVersionOneFile = R"sql(
CREATE TABLE runs(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, created_at TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'running', config_json TEXT NOT NULL DEFAULT '{}', notes TEXT NOT NULL DEFAULT '');
CREATE TABLE metrics(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, step INTEGER NOT NULL,
  key TEXT NOT NULL, value REAL, wall_time REAL NOT NULL);
CREATE INDEX metrics_run_key_step ON metrics(run_id, key, step);
CREATE TABLE events(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, step INTEGER NOT NULL,
  kind TEXT NOT NULL, payload_json TEXT NOT NULL DEFAULT '{}');
CREATE INDEX events_run_step ON events(run_id, step);
CREATE TABLE checkpoints(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, step INTEGER NOT NULL,
  path TEXT NOT NULL, sha256 TEXT NOT NULL);
CREATE INDEX checkpoints_run_step ON checkpoints(run_id, step);
CREATE TABLE generations(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL, prompt TEXT NOT NULL, policy TEXT NOT NULL, group_id INTEGER NOT NULL,
  seed INTEGER NOT NULL, codes BLOB, text TEXT NOT NULL);
CREATE INDEX generations_run_step ON generations(run_id, step);
CREATE TABLE benchmarks(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, step INTEGER NOT NULL,
  task TEXT NOT NULL, metric TEXT NOT NULL, value REAL, n INTEGER NOT NULL);
CREATE INDEX benchmarks_run_task ON benchmarks(run_id, task, metric, step);
CREATE TABLE reference(source TEXT NOT NULL, model_size TEXT NOT NULL, train_tokens TEXT NOT NULL,
  benchmark TEXT NOT NULL, metric TEXT NOT NULL, model TEXT NOT NULL, kappa_bits REAL, statistic TEXT NOT NULL,
  value REAL NOT NULL);
PRAGMA user_version = 1;
INSERT INTO runs VALUES(1, 'old', '2026-01-01T00:00:00Z', 'done', '{}', 'v1 run');
INSERT INTO metrics VALUES(1, 10, 'train/ce', 2.5, 1.7e9);
INSERT INTO benchmarks VALUES(1, 100, 'mbpp', 'pass@1', 0.25, 50);
INSERT INTO benchmarks VALUES(1, 100, 'mbpp', 'pass@1', 0.30, 50);
INSERT INTO benchmarks VALUES(1, 200, 'mbpp', 'pass@1', 0.40, 50);
)sql";

std::vector<BenchItemRow> make_items(const std::string& tag, int n) {
  std::vector<BenchItemRow> items;
  for (int i = 0; i < n; ++i)
    items.push_back({"HumanEval/" + std::to_string(i), "def f():\n    \"\"\"Ünïcode " + tag + "\"\"\"\n",
                     "    return " + std::to_string(i) + "\n", "    return 0\n", i == 0 ? "pass" : "fail: assertion",
                     R"({"stdout_tail":"AssertionError"})", i == 0 ? 1.0 : 0.0});
  return items;
}

int file_version(const std::string& path) {
  auto v = RunStore::file_schema_version(path);
  EXPECT_TRUE(v.ok()) << (v.ok() ? "" : v.error().message);
  return v.ok() ? *v : -1;
}

}  // namespace

TEST_F(RunStoreTest, VersionOneFileMigratesKeepingItsRows) {
  raw_exec(db_path(), kVersionOneFile);
  EXPECT_EQ(file_version(db_path()), 1);
  auto reader = RunStore::open_readonly(db_path());  // a reader cannot migrate: it says how to
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.error().message, db_path() + ": schema version 1 is older than this build (" +
                                        std::to_string(kSchemaVersion) +
                                        "); open it once for writing (ftx, the studio) to migrate it");
  {
    RunStore store = open_ok(db_path());
    auto old = store.find_run("old");
    ASSERT_TRUE(old.ok());
    EXPECT_EQ(old->notes, "v1 run");
    auto ce = store.metrics(old->id, "train/ce");
    ASSERT_TRUE(ce.ok());
    ASSERT_EQ(ce->size(), 1u);
    auto rows = store.benchmarks(old->id);
    ASSERT_TRUE(rows.ok());
    ASSERT_EQ(rows->size(), 2u);  // the v1 duplicate of step 100 collapsed to its last row
    EXPECT_EQ((*rows)[0].step, 100);
    EXPECT_EQ((*rows)[0].value, 0.30);
    EXPECT_EQ((*rows)[0].stderr_, 0.0);
    EXPECT_EQ((*rows)[0].tokens, -1);
    EXPECT_EQ((*rows)[1].value, 0.40);
    auto ref = store.reference();
    ASSERT_TRUE(ref.ok());
    EXPECT_EQ(ref->size(), csv_data_lines(kReferenceCsv));  // imported by the migration
    // The new table works and the unique key holds on the migrated table.
    EXPECT_OK(store.write_bench_result(old->id, 200, 4096, "mbpp", {{"pass@1", 0.5, 0.07, 50}}, make_items("m", 2)));
    auto after = store.benchmarks(old->id);
    ASSERT_TRUE(after.ok());
    ASSERT_EQ(after->size(), 2u);
    EXPECT_EQ((*after)[1].value, 0.5);
    EXPECT_OK(store.integrity_check());
  }
  EXPECT_EQ(file_version(db_path()), kSchemaVersion);
  RunStore again = open_reader(db_path());
  auto ref = again.reference();
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->size(), csv_data_lines(kReferenceCsv));  // not imported twice
}

TEST_F(RunStoreTest, BenchResultRoundTrip) {
  RunStore store = open_ok(db_path());
  int64_t run = must(store.create_run("bench", "{}"));
  const double nan = std::nan("");
  std::vector<BenchMetric> metrics = {
      {"pass@1", 0.125, 0.0259, 164}, {"nll_canonical", 1.75, 0.03, 164}, {"pass@10", nan, 0, 0}};
  EXPECT_OK(store.write_bench_result(run, 300, 300 * 8192, "humaneval", metrics, make_items("a", 3)));
  RunStore reader = open_reader(db_path());
  auto rows = reader.benchmarks(run);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 3u);  // by task, metric, step
  EXPECT_EQ((*rows)[0].metric, "nll_canonical");
  EXPECT_EQ((*rows)[0].value, 1.75);
  EXPECT_EQ((*rows)[1].metric, "pass@1");
  EXPECT_EQ((*rows)[2].metric, "pass@10");
  EXPECT_TRUE(std::isnan((*rows)[2].value));
  const BenchmarkRow& p = (*rows)[1];
  EXPECT_EQ(p.task, "humaneval");
  EXPECT_EQ(p.step, 300);
  EXPECT_EQ(p.stderr_, 0.0259);
  EXPECT_EQ(p.n, 164);
  EXPECT_EQ(p.tokens, 300 * 8192);
  EXPECT_GT(p.wall_time, 1.6e9);
  auto items = reader.bench_items(run, 300, "humaneval");
  ASSERT_TRUE(items.ok());
  const std::vector<BenchItemRow> want = make_items("a", 3);
  ASSERT_EQ(items->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {  // every field, in the order written
    EXPECT_EQ((*items)[i].item_id, want[i].item_id);
    EXPECT_EQ((*items)[i].prompt, want[i].prompt);
    EXPECT_EQ((*items)[i].output, want[i].output);
    EXPECT_EQ((*items)[i].target, want[i].target);
    EXPECT_EQ((*items)[i].verdict, want[i].verdict);
    EXPECT_EQ((*items)[i].detail_json, want[i].detail_json);
    EXPECT_EQ((*items)[i].score, want[i].score);
  }
  auto limited = reader.bench_items(run, 300, "humaneval", 2);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->size(), 2u);
  auto none = reader.bench_items(run, 301, "humaneval");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(RunStoreTest, RewritingAStepReplacesItsRowsAndItemsOnly) {
  RunStore store = open_ok(db_path());
  int64_t run = must(store.create_run("re", "{}")), other = must(store.create_run("other", "{}"));
  EXPECT_OK(store.write_bench_result(
      run, 100, -1, "humaneval", {{"pass@1", 0.1, 0.02, 164}, {"nll_canonical", 2, 0, 164}}, make_items("first", 4)));
  EXPECT_OK(store.write_bench_result(run, 100, -1, "gsm8k", {{"em_strict", 0.05, 0.01, 50}}, make_items("g", 2)));
  EXPECT_OK(store.write_bench_result(run, 200, -1, "humaneval", {{"pass@1", 0.2, 0.03, 164}}, make_items("s2", 1)));
  EXPECT_OK(store.write_bench_result(other, 100, -1, "humaneval", {{"pass@1", 0.9, 0.02, 164}}, make_items("o", 1)));
  int64_t seen = 0;
  ASSERT_TRUE(store.benchmarks_since(0, 1000, &seen).ok());

  // Re-evaluating step 100 of humaneval: its old metric set and items go, everything else stays.
  EXPECT_OK(
      store.write_bench_result(run, 100, 5, "humaneval", {{"pass@1", 0.15, 0.025, 164}}, make_items("second", 2)));
  auto rows = store.benchmarks(run);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].task, "gsm8k");
  EXPECT_EQ((*rows)[1].step, 100);
  EXPECT_EQ((*rows)[1].metric, "pass@1");
  EXPECT_EQ((*rows)[1].value, 0.15);
  EXPECT_EQ((*rows)[1].tokens, 5);
  EXPECT_EQ((*rows)[2].value, 0.2);
  auto items = store.bench_items(run, 100, "humaneval");
  ASSERT_TRUE(items.ok());
  ASSERT_EQ(items->size(), 2u);
  EXPECT_NE((*items)[0].prompt.find("second"), std::string::npos);
  EXPECT_EQ(store.bench_items(run, 100, "gsm8k")->size(), 2u);
  EXPECT_EQ(store.bench_items(other, 100, "humaneval")->size(), 1u);
  // A tailing reader sees the rewritten row as new (a larger rowid than any it has read).
  int64_t last = seen;
  auto fresh = store.benchmarks_since(seen, 1000, &last);
  ASSERT_TRUE(fresh.ok());
  ASSERT_EQ(fresh->size(), 1u);
  EXPECT_EQ((*fresh)[0].first, run);
  EXPECT_EQ((*fresh)[0].second.value, 0.15);
  EXPECT_GT(last, seen);
  // add_benchmark replaces the row of its key the same way.
  EXPECT_OK(store.add_benchmark(run, BenchmarkRow{200, "humaneval", "pass@1", 0.25, 164, 0.03, 7}));
  auto again = store.benchmarks(run);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 3u);
  EXPECT_EQ((*again)[2].value, 0.25);
}

TEST_F(RunStoreTest, FailedBenchWriteKeepsThePreviousResult) {
  RunStore store = open_ok(db_path());
  int64_t run = must(store.create_run("tx", "{}"));
  EXPECT_OK(store.write_bench_result(run, 100, -1, "mbpp", {{"pass@1", 0.1, 0.02, 3}}, make_items("kept", 3)));
  // A failure at the last item's insert (after the deletes and the metric rows) rolls back all.
  raw_exec(db_path(),
           "CREATE TRIGGER boom BEFORE INSERT ON bench_items WHEN NEW.item_id = 'boom' "
           "BEGIN SELECT RAISE(ABORT, 'boom'); END;");
  std::vector<BenchItemRow> items = make_items("new", 2);
  items.push_back(items.back());
  items.back().item_id = "boom";
  auto st = store.write_bench_result(run, 100, -1, "mbpp", {{"pass@1", 0.9, 0.02, 3}}, items);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find(db_path()), std::string::npos) << st.error().message;
  auto rows = store.benchmarks(run);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].value, 0.1);
  auto kept = store.bench_items(run, 100, "mbpp");
  ASSERT_TRUE(kept.ok());
  ASSERT_EQ(kept->size(), 3u);
  EXPECT_NE((*kept)[0].prompt.find("kept"), std::string::npos);
}

TEST_F(RunStoreTest, BenchmarksSinceTailsEveryRunInRowidOrder) {
  RunStore store = open_ok(db_path());
  int64_t a = must(store.create_run("a", "{}")), b = must(store.create_run("b", "{}"));
  EXPECT_OK(
      store.write_bench_result(a, 1, -1, "gsm8k", {{"em_strict", 0.1, 0.01, 10}, {"em_flexible", 0.2, 0.01, 10}}, {}));
  EXPECT_OK(store.write_bench_result(b, 1, -1, "gsm8k", {{"em_strict", 0.3, 0.01, 10}}, {}));
  int64_t last = 0;
  auto first = store.benchmarks_since(0, 2, &last);  // the limit splits the backlog
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[0].first, a);
  EXPECT_EQ((*first)[0].second.metric, "em_strict");
  const int64_t mid = last;
  auto rest = store.benchmarks_since(mid, 2, &last);
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->size(), 1u);
  EXPECT_EQ((*rest)[0].first, b);
  EXPECT_EQ((*rest)[0].second.value, 0.3);
  EXPECT_GT(last, mid);
  const int64_t end = last;
  auto nothing = store.benchmarks_since(end, 2, &last);
  ASSERT_TRUE(nothing.ok());
  EXPECT_TRUE(nothing->empty());
  EXPECT_EQ(last, end);  // unchanged when nothing was read
}

TEST_F(RunStoreTest, ResumeDeletesBenchmarkRowsAndItemsPastTheCheckpoint) {
  RunStore store = open_ok(db_path());
  int64_t run = must(store.create_run("resume", "{}")), other = must(store.create_run("other", "{}"));
  for (int64_t step : {100, 200, 300}) {
    EXPECT_OK(
        store.write_bench_result(run, step, step * 10, "humaneval", {{"pass@1", 0.1, 0.02, 164}}, make_items("r", 2)));
    EXPECT_OK(store.write_bench_result(other, step, -1, "humaneval", {{"pass@1", 0.1, 0.02, 164}}, make_items("o", 2)));
  }
  EXPECT_OK(store.delete_metrics_after(run, 200));
  auto rows = store.benchmarks(run);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ(rows->back().step, 200);
  EXPECT_TRUE(store.bench_items(run, 300, "humaneval")->empty());
  EXPECT_EQ(store.bench_items(run, 200, "humaneval")->size(), 2u);
  EXPECT_EQ(store.benchmarks(other)->size(), 3u);
  EXPECT_EQ(store.bench_items(other, 300, "humaneval")->size(), 2u);
}

TEST_F(RunStoreTest, DeletingARunDeletesItsBenchmarkItems) {
  RunStore store = open_ok(db_path());
  int64_t run = must(store.create_run("gone", "{}"));
  EXPECT_OK(store.write_bench_result(run, 1, -1, "mbpp", {{"pass@1", 0.1, 0.02, 2}}, make_items("x", 2)));
  EXPECT_OK(store.delete_run(run));
  EXPECT_TRUE(store.bench_items(run, 1, "mbpp")->empty());
  EXPECT_TRUE(store.benchmarks(run)->empty());
}

TEST_F(RunStoreTest, FindOrCreateRunMakesAnEvaluationRunOnce) {
  RunStore store = open_ok(db_path());
  bool created = false;
  auto first = store.find_or_create_run("smollm2-135m.gguf", R"({"model":{"dim":576}})", "done", &created);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_TRUE(created);
  EXPECT_EQ(first->status, "done");
  EXPECT_EQ(first->config_json, R"({"model":{"dim":576}})");
  auto second = store.find_or_create_run("smollm2-135m.gguf", "{}", "running", &created);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(created);
  EXPECT_EQ(second->id, first->id);
  EXPECT_EQ(second->status, "done");  // an existing run is left as it is
  auto bad = store.find_or_create_run("other", "{}", "exploded");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("exploded"), std::string::npos);
}

TEST_F(RunStoreTest, ReferenceRowsOfOneBenchmark) {
  RunStore store = open_ok(db_path());
  auto rows = store.reference("human_eval_plus", "pass@1");
  ASSERT_TRUE(rows.ok());
  // Tables 1 and 2: baseline and four kappas each; table 3: baseline and kappa 1/2, final and
  // mean of the last third.
  ASSERT_EQ(rows->size(), 14u);
  EXPECT_EQ((*rows)[0].model_size, "1.5B");
  EXPECT_EQ((*rows)[0].value, 0.055);
  for (const ReferenceRow& r : *rows) EXPECT_EQ(r.benchmark, "human_eval_plus");
  EXPECT_TRUE(store.reference("human_eval_plus", "acc")->empty());
}
