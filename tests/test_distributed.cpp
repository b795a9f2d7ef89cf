// Data-parallel training (docs/distributed.md): `mpirun -np 2 ftx train` against `ftx train` in one
// process on the same global batch. The two must give the same loss curve and the same weights to
// within rounding: the data, the latent bits and random routing's draws are those of the global
// batch, and the gradients and the free bits' batch means are averaged over the ranks. Also the
// refusals: a batch the processes do not divide. A run resumed with another process count
// continues the same curve. Skipped without MPI.
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dist/comm.h"
#include "core/io/checkpoint.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

constexpr double kCurveTol = 1e-4;  // reduction order only (the bound)
constexpr int kSteps = 30;

#ifdef FTX_MPIEXEC
const std::vector<std::string> kMpiEnv = {"OMP_NUM_THREADS=1", "NO_COLOR=1", "OMPI_ALLOW_RUN_AS_ROOT=1",
                                          "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};

test::Outcome ftx_on(int processes, const std::vector<std::string>& args, const std::string& cwd) {
  std::vector<std::string> argv = test::ftx_argv(args);
  if (processes > 1) argv.insert(argv.begin(), {FTX_MPIEXEC, "-n", std::to_string(processes), "--oversubscribe"});
  return test::run_child(argv, kMpiEnv, cwd);
}
#endif

std::vector<double> curve(const std::string& db, const std::string& run, const std::string& key) {
  auto store = RunStore::open(db);
  if (!store) return {};
  auto info = store->find_run(run);
  if (!info) return {};
  auto rows = store->metrics(info->id, key);
  if (!rows) return {};
  std::vector<double> v;
  for (const MetricRow& r : *rows) v.push_back(r.value);
  return v;
}

// The largest |a - b| over two curves of equal length (ASSERTed by the caller).
double worst_apart(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// The largest |a - b| over the weights of two runs' checkpoints at `step`.
double weights_apart(const std::string& db_a, const std::string& db_b, const std::string& run, int step) {
  auto c1 = load_checkpoint(checkpoint_dir(db_a, run, step), false);
  auto c2 = load_checkpoint(checkpoint_dir(db_b, run, step), false);
  EXPECT_TRUE(c1.ok()) << c1.error().message;
  EXPECT_TRUE(c2.ok()) << c2.error().message << ": rank 0 writes the checkpoint";
  if (!c1.ok() || !c2.ok() || c1->params.size() != c2->params.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < c1->params.size(); ++i)
    worst = std::max(worst, double(std::abs(c1->params[i] - c2->params[i])));
  return worst;
}

// The same for AdamW's moments (m and v) in the two checkpoints: what a sharded optimizer gathers.
double moments_apart(const std::string& db_a, const std::string& db_b, const std::string& run, int step) {
  auto c1 = load_checkpoint(checkpoint_dir(db_a, run, step), true);
  auto c2 = load_checkpoint(checkpoint_dir(db_b, run, step), true);
  if (!c1.ok() || !c2.ok() || c1->adam_m.size() != c2->adam_m.size() || c1->adam_m.empty()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < c1->adam_m.size(); ++i)
    worst = std::max(
        {worst, double(std::abs(c1->adam_m[i] - c2->adam_m[i])), double(std::abs(c1->adam_v[i] - c2->adam_v[i]))});
  return worst;
}

// `ftx train` on the tiny Free Transformer (H = 8, batch-mean free bits) at batch 8.
std::vector<std::string> tiny_run(const std::string& db, const std::string& run, int steps) {
  return {"train",
          "--dataset",
          "synthetic",
          "--preset",
          "tiny",
          "--latent-bits",
          "8",
          "--batch",
          "8",
          "--steps",
          std::to_string(steps),
          "--eval-every",
          "0",
          "--seed",
          "5",
          "--quiet",
          "--db",
          db,
          "--run",
          run};
}

class DataParallel : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef FTX_MPIEXEC
    GTEST_SKIP() << "built without MPI";
#endif
  }
};

#ifdef FTX_MPIEXEC
// The Free Transformer (H = 8, batch-mean free bits: a mean over the global batch enters the
// backward) and random routing (its draws by global token row), each in one process and in two.
TEST_F(DataParallel, TwoProcessesFollowTheOneProcessCurve) {
  test::TempDir dir("ftx_test_distributed_");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"free", {}},
      {"routed", {"--layers", "4", "--routing", "random", "--capacity", "0.5"}},
      {"sharded", {"--shard-optimizer"}},  // ZeRO-1: the moments in halves, the same steps
      // Buckets of 20 kB: each block's gradients summed while the backward goes on, then the rest.
      {"bucketed", {"--layers", "4", "--bucket-mb", "0.02"}},
      {"unbucketed", {"--layers", "4", "--bucket-mb", "0"}}};
  for (const auto& [name, extra] : cases) {
    SCOPED_TRACE(name);
    std::vector<std::string> one = tiny_run(dir / "one.db", name, kSteps), two = tiny_run(dir / "two.db", name, kSteps);
    one.insert(one.end(), extra.begin(), extra.end());
    two.insert(two.end(), extra.begin(), extra.end());
    const test::Outcome a = ftx_on(1, one, dir.path());
    ASSERT_EQ(a.code, 0) << a.err;
    const test::Outcome b = ftx_on(2, two, dir.path());
    ASSERT_EQ(b.code, 0) << b.out << b.err;
    EXPECT_NE(b.out.find("data-parallel: 2 processes"), std::string::npos) << b.out;
    for (const char* key : {"train/loss", "train/ce", "train/kl", "train/kl_excess", "train/grad_norm"}) {
      const std::vector<double> c1 = curve(dir / "one.db", name, key), c2 = curve(dir / "two.db", name, key);
      ASSERT_EQ(c1.size(), size_t(kSteps)) << key;
      ASSERT_EQ(c2.size(), size_t(kSteps)) << key << ": rank 0 records every step";
      const double worst = worst_apart(c1, c2);
      std::printf("[ 2 ranks  ] %s %s: worst of %d steps apart by %.2e\n", name.c_str(), key, kSteps, worst);
      EXPECT_LE(worst, kCurveTol) << key;
    }
    const std::vector<double> loss = curve(dir / "one.db", name, "train/loss");
    EXPECT_LT(loss.back(), loss.front() - 0.5) << "the curve falls: the comparison shows training";
    const double worst = weights_apart(dir / "one.db", dir / "two.db", name, kSteps);
    EXPECT_LE(moments_apart(dir / "one.db", dir / "two.db", name, kSteps), kCurveTol)
        << "AdamW's moments in the checkpoint (gathered when sharded)";
    EXPECT_LE(worst, kCurveTol) << "the weights after " << kSteps << " steps";
  }
}

TEST_F(DataParallel, ABatchTheProcessesDoNotDivideIsRefused) {
  test::TempDir dir("ftx_test_distributed_");
  const test::Outcome odd = ftx_on(2,
                                   {"train", "--dataset", "synthetic", "--preset", "tiny", "--batch", "7", "--steps",
                                    "2", "--db", dir / "odd.db", "--run", "odd", "--quiet"},
                                   dir.path());
  EXPECT_NE(odd.code, 0);
  EXPECT_NE(odd.err.find("--batch 7: must be a multiple of the 2 processes"), std::string::npos) << odd.err;
}

// The check: 2 processes to step 20 and then 1 to 40 equals 1 process to 40; and the other
// way round (1 then 2), where rank 1 loads the checkpoint rank 0 names.
TEST_F(DataParallel, AResumedRunMayChangeTheProcessCount) {
  test::TempDir dir("ftx_test_distributed_");
  constexpr int kHalf = 20, kAll = 40;
  const test::Outcome one = ftx_on(1, tiny_run(dir / "one.db", "r", kAll), dir.path());
  ASSERT_EQ(one.code, 0) << one.err;
  for (const auto& [first, then] : {std::pair{2, 1}, std::pair{1, 2}}) {
    const std::string db = dir / ("from" + std::to_string(first) + ".db");
    SCOPED_TRACE(db);
    std::vector<std::string> start = tiny_run(db, "r", kHalf);
    if (first > 1) start.push_back("--shard-optimizer");  // its checkpoint: the moments gathered
    const test::Outcome a = ftx_on(first, start, dir.path());
    ASSERT_EQ(a.code, 0) << a.out << a.err;
    std::vector<std::string> more = {"train",  "--db", db, "--run", "r", "--resume", "--steps", std::to_string(kAll),
                                     "--quiet"};
    if (then > 1) more.push_back("--shard-optimizer");  // each rank takes its slice of the moments
    const test::Outcome b = ftx_on(then, more, dir.path());
    ASSERT_EQ(b.code, 0) << b.out << b.err;
    EXPECT_NE(b.out.find("resuming at step 20/40"), std::string::npos) << b.out;
    for (const char* key : {"train/loss", "train/kl_excess", "train/grad_norm"}) {
      const std::vector<double> c1 = curve(dir / "one.db", "r", key), c2 = curve(db, "r", key);
      ASSERT_EQ(c1.size(), size_t(kAll)) << key;
      ASSERT_EQ(c2.size(), size_t(kAll)) << key;
      std::printf("[ resume   ] %d then %d processes, %s: worst of %d steps apart by %.2e\n", first, then, key, kAll,
                  worst_apart(c1, c2));
      EXPECT_LE(worst_apart(c1, c2), kCurveTol) << key;
    }
    EXPECT_LE(weights_apart(dir / "one.db", db, "r", kAll), kCurveTol) << "the weights after " << kAll << " steps";
    EXPECT_LE(moments_apart(dir / "one.db", db, "r", kAll), kCurveTol) << "the moments after " << kAll << " steps";
  }
}

// ftx bench train --processes 2 starts itself under mpirun; rank 0 reports the job: 2 processes,
// the host path, the collectives' share of the step. Under a job of another size it is refused.
TEST_F(DataParallel, BenchTrainMeasuresAJob) {
  test::TempDir dir("ftx_test_distributed_");
  const std::vector<std::string> bench = {"bench",    "train", "--preset", "tiny", "--batch",     "8",
                                          "--warmup", "1",     "--steps",  "3",    "--processes", "2"};
  const test::Outcome r = ftx_on(1, bench, dir.path());
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("processes"), 2);
  EXPECT_EQ(j.at("threads"), 1) << "OMP_NUM_THREADS as the test sets it";
  EXPECT_NE(j.at("gradients").get<std::string>().find("through the host"), std::string::npos) << j.dump();
  const double share = j.at("collective_share"), per = j.at("tokens_per_s_per_process"), all = j.at("tokens_per_s");
  EXPECT_GT(share, 0.0);
  EXPECT_LT(share, 1.0);
  EXPECT_NEAR(per * 2, all, 1e-6 * all);
  EXPECT_GT(j.at("gradient_bytes").get<int64_t>(), 100000);
  std::vector<std::string> three = bench;
  three.back() = "3";
  const test::Outcome bad = ftx_on(2, three, dir.path());
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--processes 3: already a job of 2 processes"), std::string::npos) << bad.err;
}

// Two ranks started with their own programs, arguments and folders (mpirun's MPMD form:
// "-n 1 -wdir A prog args : -n 1 -wdir B prog args").
struct RankStart {
  std::string program, wdir;
  std::vector<std::string> args;
};
test::Outcome mpmd(const RankStart& r0, const RankStart& r1, const std::string& cwd) {
  std::vector<std::string> argv = {FTX_MPIEXEC, "--oversubscribe"};
  for (const RankStart* r : {&r0, &r1}) {
    if (r == &r1) argv.push_back(":");
    argv.insert(argv.end(), {"-n", "1", "-wdir", r->wdir, r->program});
    argv.insert(argv.end(), r->args.begin(), r->args.end());
  }
  return test::run_child(argv, kMpiEnv, cwd);
}

// A rank started with another configuration, data or build than rank 0 is refused at the start,
// naming what differs, and the new run is not left in the store.
TEST_F(DataParallel, RanksThatDifferAreRefusedAtTheStart) {
  test::TempDir dir("ftx_test_distributed_");
  // Two token files of one corpus and one tokenizer, split differently: other training tokens.
  const std::string corpus = dir / "corpus";
  std::filesystem::create_directories(corpus + "/prose");
  for (int i = 0; i < 12; ++i)
    std::ofstream(corpus + "/prose/p" + std::to_string(i) + ".txt")
        << "Permission is hereby granted to any person obtaining a copy of this document, number " << i
        << ", and again " << i << ".\n";
  for (const auto& [folder, frac] : {std::pair{"A", "0.2"}, std::pair{"B", "0.4"}}) {
    std::filesystem::create_directories(dir / folder);
    const test::Outcome t = test::run_ftx({"tokenize", "--bpe-vocab", "300", "--val-frac", frac, "--input", corpus,
                                           "--out", dir / (std::string(folder) + "/d.tok")},
                                          dir.path());
    ASSERT_EQ(t.code, 0) << test::describe(t);
  }
  const std::string db = dir / "r.db";
  const std::vector<std::string> text = {
      "train", "--dataset", "text", "--data",       "d.tok", "--seq-len", "16",    "--preset", "tiny", "--steps",
      "2",     "--batch",   "2",    "--eval-every", "0",     "--quiet",   "--run", "t",        "--db", db};
  std::vector<std::string> seeded = text;
  seeded.insert(seeded.end(), {"--seed", "3"});
  // The same executable under another name and one byte longer: another build.
  const std::string other_build = dir / "ftx-other";
  std::filesystem::copy_file(FTX_BINARY, other_build);
  std::ofstream(other_build, std::ios::app) << '\n';
  std::filesystem::permissions(other_build, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
  const std::string A = dir / "A", B = dir / "B";
  const struct {
    RankStart r1;
    std::string needle;
  } cases[] = {
      {{FTX_BINARY, A, seeded}, "rank 1 of 2 was started with another model or training configuration than rank 0"},
      {{FTX_BINARY, B, text}, "rank 1 of 2 reads other data than rank 0"},
      {{other_build, A, text}, "rank 1 of 2 runs another build of ftx than rank 0"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.needle);
    const test::Outcome r = mpmd({FTX_BINARY, A, text}, c.r1, dir.path());
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << r.err;
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    EXPECT_FALSE(store->find_run("t").ok()) << "the refused run is not left in the store";
  }
  const test::Outcome same = mpmd({FTX_BINARY, A, text}, {FTX_BINARY, A, text}, dir.path());
  EXPECT_EQ(same.code, 0) << same.err;
}

// The pid of rank `rank` among the children of mpirun `parent` (read from /proc: the child whose
// environment says OMPI_COMM_WORLD_RANK=rank); -1 when none is found.
pid_t rank_pid(pid_t parent, int rank) {
  DIR* d = opendir("/proc");
  if (!d) return -1;
  pid_t found = -1;
  while (dirent* e = readdir(d)) {
    const pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::ifstream env("/proc/" + std::string(e->d_name) + "/environ");
    const std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (all.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos) found = pid;
  }
  closedir(d);
  return found;
}

// A job of two ranks where one rank is killed (SIGKILL) or stopped (SIGSTOP: a hang) once rank 0
// has written a checkpoint. The job must end within a bounded time with a non-zero exit and a
// line naming the rank, the store must pass its integrity check and the last checkpoint must load.
struct Fault {
  int rank, signal;
  std::vector<std::string> needles;  // one of them in the job's stderr
};

void run_fault(const Fault& f) {
  test::TempDir dir("ftx_test_distributed_");
  std::vector<std::string> argv = test::ftx_argv(tiny_run(dir / "f.db", "f", 1000000));
  // The fault comes a moment after the first checkpoint (step 200), not in the step right after
  // it, where the other ranks wait ten times the patience for rank 0 (Comm::set_root_busy).
  argv.insert(argv.end(), {"--checkpoint-every", "200", "--hang-timeout", "3"});
  argv.insert(argv.begin(), {FTX_MPIEXEC, "-n", "2", "--oversubscribe"});
  const pid_t job = test::spawn(argv, kMpiEnv, dir / "out.txt", dir / "err.txt");
  ASSERT_GT(job, 0);
  using Clock = std::chrono::steady_clock;
  auto ended = [&](int& status) { return ::waitpid(job, &status, WNOHANG) == job; };
  int status = 0;
  bool done = false;
  // Until rank 0 has recorded a checkpoint (the store is read while rank 0 writes it: WAL).
  for (const auto t0 = Clock::now(); !done && Clock::now() - t0 < std::chrono::seconds(60);) {
    done = ended(status);
    auto store = RunStore::open(dir / "f.db");
    if (store) {
      auto info = store->find_run("f");
      auto rows = info ? store->checkpoints(info->id) : Result<std::vector<CheckpointRow>>(make_error("no run"));
      if (rows && !rows->empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_FALSE(done) << "the job ended before the fault: " << test::read_file(dir / "err.txt");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const pid_t victim = rank_pid(job, f.rank);
  ASSERT_GT(victim, 0) << "rank " << f.rank << " not found among mpirun's children";
  ASSERT_EQ(::kill(victim, f.signal), 0);
  const auto hit = Clock::now();
  while (!(done = ended(status)) && Clock::now() - hit < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (!done) {  // clean up before failing
    ::kill(victim, SIGKILL);
    ::kill(job, SIGKILL);
    ::waitpid(job, &status, 0);
  }
  ASSERT_TRUE(done) << "the job did not end within 60 s of the fault";
  const double took = std::chrono::duration<double>(Clock::now() - hit).count();
  ::kill(victim, SIGKILL);  // a stopped rank mpirun left behind
  const std::string err = test::read_file(dir / "err.txt");
  std::printf("[ fault    ] rank %d, signal %d: the job ended in %.1f s, exit %d\n", f.rank, f.signal, took,
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << err;
  EXPECT_TRUE(std::any_of(f.needles.begin(), f.needles.end(), [&](const std::string& n) {
    return err.find(n) != std::string::npos;
  })) << err;
  auto store = RunStore::open(dir / "f.db");
  ASSERT_TRUE(store.ok()) << store.error().message;
  EXPECT_TRUE(store->integrity_check().ok());
  auto last = find_run_checkpoint(*store, "f", std::nullopt);
  ASSERT_TRUE(last.ok()) << last.error().message;
  auto ck = load_checkpoint(last->dir, true);
  EXPECT_TRUE(ck.ok()) << last->dir << ": " << (ck.ok() ? "" : ck.error().message);
}

TEST_F(DataParallel, AKilledRankEndsTheJob) {
  run_fault({1, SIGKILL, {"process rank 1"}});  // mpirun's own line: "... rank 1 ... exited on signal 9"
}

TEST_F(DataParallel, AHungRankEndsTheJobWithinTheDeadline) {
  // Stopped before a collective, the rank is named; stopped inside one (rarer: the reduce is short
  // next to a step), the waiting rank says so.
  const std::string inside = "not completed within 3 s after every rank arrived";
  run_fault({1, SIGSTOP, {"rank 1 of 2 has not arrived within 3 s", inside}});
  run_fault({0,
             SIGSTOP,
             {"rank 0 of 2 has not answered rank 1 within 3 s", inside,
              "rank 0 of 2 has not answered rank 1 within 30 s"}});  // stopped right after a checkpoint
}
#endif

}  // namespace
}  // namespace ftx
