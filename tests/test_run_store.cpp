// RunStore: round trip of every table, metric batching, WAL readers beside a writer, and the
// failure paths (newer schema, foreign file, unwritable path, duplicate run, locked, disk full);
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
  const std::string expected = db_path() + ": schema version 7 is newer than this build (1); upgrade ftx";
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
