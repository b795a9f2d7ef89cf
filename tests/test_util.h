// Helpers shared by the test files (header-only, namespace ftx::test): temp directories, whole-file
// reads and writes, child processes (the ftx binary, or a function run in a forked child under a
// file size limit) with their exit code, signal and output, uniform random vectors, and central
// differences.
// Deliberately not here: expectations about a unit (they stay in its test file) and tolerances
// (each test file names its own, docs/testing.md). Helpers that cannot go on report the
// problem as a test failure and return an empty or "failed" value; the caller asserts on it, so a
// fatal check stays fatal in the test that needs it.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace ftx::test {

// ---- files and directories ----------------------------------------------------------------------

// n token ids uniform in [0, V), a pure function of seed (model tests' inputs).
inline std::vector<int32_t> random_tokens(size_t n, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, V - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

// A fresh directory "<testing::TempDir()>/<prefix>XXXXXX"; "" after a test failure when mkdtemp
// fails.
inline std::string make_temp_dir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::path(::testing::TempDir()) / (prefix + "XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp(" << tmpl << "): " << std::strerror(errno);
    return "";
  }
  return tmpl;
}

// Removes `path` and everything below it; errors (it is already gone) are ignored.
inline void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

// A fresh directory for the lifetime of the object; dir / "leaf" names a path inside it.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "ftx_test_") : path_(make_temp_dir(prefix)) {}
  ~TempDir() {
    if (!path_.empty()) remove_tree(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& leaf) const { return (std::filesystem::path(path_) / leaf).string(); }

 private:
  std::string path_;
};

// A fixture with a fresh directory per test, dir_, removed after the test.
class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    dir_ = make_temp_dir(prefix_);
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { remove_tree(dir_); }
  std::string in_dir(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;

 private:
  std::string prefix_;
};

// The whole file as bytes; "" when it cannot be opened.
inline std::string read_file(const std::string& path) {
  std::string s;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    std::fclose(f);
  }
  return s;
}

// Replaces the file's contents with `bytes`; false when the file could not be written.
inline bool write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return out.good();
}

// ---- child processes --------------------------------------------------------------------------

// This process's environment with `overrides` ("NAME=value") replacing or adding entries; built
// before fork so the child only calls async-signal-safe functions before execve.
inline std::vector<std::string> child_env(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const std::string& o : overrides) replaced |= entry.compare(0, o.find('=') + 1, o, 0, o.find('=') + 1) == 0;
    if (!replaced) env.push_back(entry);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

// Starts argv[0] with `argv` and this environment plus `env_overrides`; stdout and stderr go to
// the files out_path and err_path (created or truncated; "/dev/null" discards). Returns the pid,
// or -1 after a test failure when fork fails. The child exits 126 if it cannot open the files and
// 127 if execve fails.
inline pid_t spawn(std::vector<std::string> argv_strings, const std::vector<std::string>& env_overrides,
                   const std::string& out_path, const std::string& err_path) {
  std::vector<char*> argv;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = child_env(env_overrides);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0) ::_exit(126);
    ::dup2(o, STDOUT_FILENO);
    ::dup2(e, STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  if (pid < 0) ADD_FAILURE() << "fork: " << std::strerror(errno);
  return pid;
}

// How a child ended: its exit status, or -1 and the signal that killed it.
struct ExitStatus {
  int code = -1;
  int signal = 0;
};

// Waits for `pid` (a failure if waitpid does not return it).
inline ExitStatus wait_child(pid_t pid) {
  ExitStatus r;
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  if (WIFEXITED(status)) r.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

// The ftx binary (FTX_BINARY, set for every test target by tests/CMakeLists.txt) followed by args.
inline std::vector<std::string> ftx_argv(const std::vector<std::string>& args) {
  std::vector<std::string> all = {FTX_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  return all;
}

// A finished child: how it ended and everything it wrote.
struct Outcome {
  int code = -1;  // exit status; -1 when killed by a signal
  int signal = 0;
  std::string out, err;
};

// Runs argv to completion; stdout and stderr go through the files .stdout and .stderr in `scratch`.
inline Outcome run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env_overrides,
                         const std::string& scratch) {
  const std::string out_path = scratch + "/.stdout", err_path = scratch + "/.stderr";
  const pid_t pid = spawn(argv, env_overrides, out_path, err_path);
  if (pid < 0) return {};
  const ExitStatus s = wait_child(pid);
  return Outcome{s.code, s.signal, read_file(out_path), read_file(err_path)};
}

// `ftx args` as the CLI tests run it. ctest runs tests side by side on 2 shared cores: OpenMP
// barriers of an oversubscribed child turn a 0.2 s tiny run into seconds, so every child runs one
// thread (the same for all of them: OpenBLAS sgemm rounds differently with another thread count).
inline Outcome run_ftx(const std::vector<std::string>& args, const std::string& scratch) {
  return run_child(ftx_argv(args), {"OMP_NUM_THREADS=1", "NO_COLOR=1"}, scratch);
}

inline std::string describe(const Outcome& r) {
  return "exit " + std::to_string(r.code) + (r.signal ? " signal " + std::to_string(r.signal) : "") +
         "\n--- stderr ---\n" + r.err + "--- stdout ---\n" + r.out.substr(0, 2000);
}

// Exit code 1, and stderr is exactly one line "ftx: ..." that contains every needle.
inline void expect_one_line_error(const Outcome& r, const std::vector<std::string>& needles) {
  EXPECT_EQ(r.signal, 0) << "crashed: " << describe(r);
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "not exactly one line: " << describe(r);
  EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n') << describe(r);
  EXPECT_EQ(r.err.rfind("ftx: ", 0), 0u) << describe(r);
  for (const std::string& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << "no '" << n << "' in: " << r.err;
}

// What run_with_file_size_limit saw: whether the child was reaped, its raw wait status, and the
// message it sent back.
struct LimitedRun {
  bool reaped = false;
  int status = 0;
  std::string msg;
};

// Runs fn() (returning a Status or Result) in a forked child whose file size limit is
// `limit_bytes`, with SIGXFSZ ignored so that a write past the limit fails with EFBIG instead of
// killing the child. The child sends back fn's error message ("OK" when fn succeeded) and exits 0
// when fn failed, 1 when it succeeded.
template <class Fn>
LimitedRun run_with_file_size_limit(rlim_t limit_bytes, Fn&& fn) {
  LimitedRun r;
  int fds[2];
  if (::pipe(fds) != 0) {
    ADD_FAILURE() << "pipe: " << std::strerror(errno);
    return r;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    ::close(fds[0]);
    ::close(fds[1]);
    return r;
  }
  if (pid == 0) {
    ::close(fds[0]);
    struct rlimit lim {
      limit_bytes, limit_bytes
    };
    ::signal(SIGXFSZ, SIG_IGN);
    ::setrlimit(RLIMIT_FSIZE, &lim);
    const auto st = fn();
    const std::string msg = st.ok() ? std::string("OK") : st.error().message;
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(st.ok() ? 1 : 0);
  }
  ::close(fds[1]);
  char buf[512];
  for (ssize_t got; (got = ::read(fds[0], buf, sizeof buf)) > 0;) r.msg.append(buf, size_t(got));
  ::close(fds[0]);
  r.reaped = ::waitpid(pid, &r.status, 0) == pid;
  return r;
}

// ---- numbers ------------------------------------------------------------------------------------

// n values uniform in [lo, hi) from mt19937_64(seed).
inline std::vector<double> random_vec(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

// (f(x + h) - f(x - h)) / 2h, where f reads x through the caller's state; x is restored after.
template <class F>
double central_difference(double& x, double h, F&& f) {
  const double keep = x;
  x = keep + h;
  const double fp = f();
  x = keep - h;
  const double fm = f();
  x = keep;
  return (fp - fm) / (2.0 * h);
}

// The "train" object of the run row that `ftx train` wrote before the field lists (commit 41a336e)
// for --dataset coinflip --coinflip-eps 0.25 --preset tiny --steps 1 --batch 2 --eval-every 0
// --checkpoint-every 0 --kappa-bits 0.015625 --lr 0.003 --seed 7 --no-bitlinear-init
// --post-sampler-std 0.04: every key, the coin flip's included (test_config reads it, test_cli
// writes it again).
inline constexpr const char* kTrainJsonBeforeFieldLists =
    R"({"adam_eps":9.99999993922529e-09,"batch":2,"beta1":0.8999999761581421,"beta2":0.949999988079071,)"
    R"("checkpoint_every":0,"coinflip_eps":0.25,"coinflip_len":32,"dataset":"coinflip","eval_every":0,)"
    R"("grad_clip":1.0,"init_post_sampler_bitlinear":false,"init_post_sampler_std":0.03999999910593033,)"
    R"("init_scale_residual":true,"init_std":0.019999999552965164,"init_zeta_std":1.0,"kappa_anneal_steps":0,)"
    R"("kappa_nats":0.010830424726009369,"kappa_start_nats":-1.0,"lr":0.003000000026077032,)"
    R"("min_lr_frac":0.10000000149011612,"preset":"tiny","seed":7,"steps":1,"warmup":100,)"
    R"("weight_decay":0.10000000149011612})";

}  // namespace ftx::test
