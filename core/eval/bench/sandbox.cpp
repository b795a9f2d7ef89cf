// Sandboxed Python programs: fork, drop to the slot's uid, set the rlimits, exec bubblewrap, which
// runs the system Python on a small wrapper that reads the program from stdin (a memfd), runs it
// and reports how it ended on fd 3. The parent polls the output pipe, the report pipe and a
// pidfd, enforces the output cap and the wall clock, and kills the whole tree when needed.
//
// Why the tree dies with one kill: --unshare-all gives the program a pid namespace whose init is
// bubblewrap's child, which --die-with-parent ties to the bwrap process we fork; when that init
// dies the kernel kills every process of the namespace. A kill(-1) as the slot's uid afterwards
// catches anything that could have left (nothing should).
#include "core/eval/bench/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace ftx::bench {

namespace {

// Runs the program in a fresh globals dict as __main__. Reports only from the first process (a
// forked child runs this same code after fork returns): "passed" or "raised <type> <errno>
// <message>"; children report their exceptions prefixed "child " (how a fork bomb shows that its
// forks hit the process limit). MemoryError's report is preformatted: formatting may need memory.
constexpr const char* kWrapper = R"PY(import os, sys
_w, _pid, _exit = os.write, os.getpid, os._exit
_v = os.dup(3)
os.close(3)
_src = sys.stdin.buffer.read()
_n = os.open('/dev/null', os.O_RDONLY)
os.dup2(_n, 0)
os.close(_n)
_main = _pid()
_mem = b'raised MemoryError 0 \n'
def _report(b):
    try:
        _w(_v, b if _pid() == _main else b'child ' + b)
    except BaseException:
        pass
try:
    exec(compile(_src, 'program.py', 'exec'), {'__name__': '__main__'})
    sys.stdout.flush()
    sys.stderr.flush()
except BaseException as e:
    if isinstance(e, MemoryError):
        _report(_mem)
    else:
        try:
            msg = 'raised %s %d %s\n' % (type(e).__name__, getattr(e, 'errno', 0) or 0, str(e).replace('\n', ' ')[:300])
            _report(msg.encode('utf-8', 'replace'))
        except BaseException:
            _report(_mem)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    _exit(1)
if _pid() == _main:
    _report(b'passed\n')
)PY";

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int pidfd_open(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

// Tasks (processes and threads: RLIMIT_NPROC counts both) whose real uid is `uid`.
int count_tasks_of(uid_t uid) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "status");
    std::string line;
    bool mine = false;
    while (std::getline(f, line)) {
      if (line.rfind("Uid:", 0) == 0) {
        std::istringstream s(line.substr(4));
        unsigned real = 0;
        s >> real;
        mine = real == uid;
        if (!mine) break;
      } else if (mine && line.rfind("Threads:", 0) == 0) {
        n += std::atoi(line.c_str() + 8);
        break;
      }
    }
  }
  return n;
}

// Kills every process of `uid` (as that uid, kill(-1) reaches exactly its own processes), then
// waits until they are gone: until reaped they still count against the next program's
// RLIMIT_NPROC (bwrap's own clone would fail with EAGAIN after a fork bomb).
void kill_uid(uid_t uid) {
  pid_t p = fork();
  if (p == 0) {
    if (setresgid(uid, uid, uid) == 0 && setresuid(uid, uid, uid) == 0) kill(-1, SIGKILL);
    _exit(0);
  }
  if (p > 0) waitpid(p, nullptr, 0);
  for (int i = 0; i < 400 && count_tasks_of(uid) > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// A uid of the range that no other slot of any process holds; the lock lives as long as the slot.
struct UidSlot {
  int uid = -1;  // -1: not root, programs run as the caller
  int lock_fd = -1;
  ~UidSlot() {
    if (lock_fd >= 0) close(lock_fd);
  }
};

Status take_uid(UidSlot& slot, const SandboxOptions& o) {
  if (geteuid() != 0) return {};
  const std::string dir = std::filesystem::temp_directory_path();
  for (int i = 0; i < o.uid_count; ++i) {
    const int uid = o.first_uid + i;
    const std::string path = dir + "/ftx-sandbox-uid-" + std::to_string(uid) + ".lock";
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      slot.uid = uid;
      slot.lock_fd = fd;
      kill_uid(uid);  // leftovers of a harness that died (pdeathsig should have got them)
      return {};
    }
    close(fd);
  }
  return make_error("sandbox: no free uid in [" + std::to_string(o.first_uid) + ", " +
                    std::to_string(o.first_uid + o.uid_count) + ") (every lock in " + dir + " is held)");
}

std::vector<std::string> bwrap_argv(const SandboxOptions& o) {
  std::vector<std::string> a = {o.bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind",
                                "/usr",  "/usr"};
  // Merged-/usr systems have /lib, /bin ... as symlinks into /usr; elsewhere bind them read-only.
  for (const char* d : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    std::error_code ec;
    auto st = std::filesystem::symlink_status(d, ec);
    if (ec) continue;
    if (std::filesystem::is_symlink(st)) {
      a.insert(a.end(), {"--symlink", std::filesystem::read_symlink(d, ec).string(), d});
    } else if (std::filesystem::is_directory(st)) {
      a.insert(a.end(), {"--ro-bind", d, d});
    }
  }
  a.insert(a.end(), {"--proc",
                     "/proc",
                     "--dev",
                     "/dev",
                     "--size",
                     std::to_string(o.limits.tmpfs_bytes),
                     "--tmpfs",
                     "/tmp",
                     "--remount-ro",
                     "/",
                     "--chdir",
                     "/tmp",
                     "--clearenv",
                     "--setenv",
                     "PATH",
                     "/usr/bin:/bin",
                     "--setenv",
                     "HOME",
                     "/tmp",
                     "--setenv",
                     "LANG",
                     "C.UTF-8",
                     "--setenv",
                     "PYTHONDONTWRITEBYTECODE",
                     "1",
                     "--setenv",
                     "PYTHONHASHSEED",
                     "0",
                     "--",
                     o.python,
                     "-I",
                     "-c",
                     kWrapper});
  return a;
}

// For a caller that is not root RLIMIT_NPROC counts all of its processes: allow those it has now
// plus the program's share (best effort: the count moves while we run).
rlim_t nproc_limit(const SandboxOptions& o, int uid) {
  if (uid >= 0) return o.limits.processes;
  return static_cast<rlim_t>(count_tasks_of(getuid()) + o.limits.processes);
}

// The monitor: our child, still root, a subreaper. bwrap leaves its namespace's init as a zombie
// when it exits; reparented to the monitor, it is reaped at once (reparented to the machine's
// init it would linger for a second and count against the slot's RLIMIT_NPROC). It publishes
// bwrap's pid in `shared` (what a timeout kills) and exits with bwrap's status once every
// descendant is gone. Only async-signal-safe calls: this is a fork of a threaded process.
[[noreturn]] void exec_child(int memfd, int out_w, int rep_w, int uid, rlim_t nproc, const SandboxLimits& l,
                             char* const* argv);

[[noreturn]] void monitor(volatile pid_t* shared, int memfd, int out_w, int rep_w, int uid, rlim_t nproc,
                          const SandboxLimits& l, char* const* argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  const pid_t b = fork();
  if (b == 0) exec_child(memfd, out_w, rep_w, uid, nproc, l, argv);
  if (b < 0) _exit(125);
  *shared = b;
  close(memfd), close(out_w), close(rep_w);
  int st = 0;
  while (waitpid(b, &st, 0) < 0 && errno == EINTR) {
  }
  while (waitpid(-1, nullptr, 0) > 0 || errno == EINTR) {
  }
  _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

// The child side of fork: only async-signal-safe calls from here to exec.
[[noreturn]] void exec_child(int memfd, int out_w, int rep_w, int uid, rlim_t nproc, const SandboxLimits& l,
                             char* const* argv) {
  setsid();
  if (dup2(memfd, 0) < 0 || dup2(out_w, 1) < 0 || dup2(out_w, 2) < 0 || dup2(rep_w, 3) < 0) _exit(126);
  syscall(SYS_close_range, 4u, ~0u, 0u);
  auto lim = [](int what, rlim_t soft, rlim_t hard) {
    rlimit r{soft, hard};
    setrlimit(what, &r);
  };
  lim(RLIMIT_CPU, l.cpu_s, l.cpu_s + 1);
  lim(RLIMIT_AS, l.memory_bytes, l.memory_bytes);
  lim(RLIMIT_FSIZE, l.file_bytes, l.file_bytes);
  lim(RLIMIT_NOFILE, l.open_files, l.open_files);
  lim(RLIMIT_CORE, 0, 0);
  lim(RLIMIT_NPROC, nproc, nproc);
  if (uid >= 0) {
    if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(126);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // after the uid change, which clears it
  char* envp[] = {nullptr};
  execve(argv[0], argv, envp);
  _exit(127);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGKILL:
      return "SIGKILL";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGXFSZ:
      return "SIGXFSZ";
    default:
      return nullptr;
  }
}

bool is_process_limit(const std::string& type, int err, const std::string& msg) {
  return type == "BlockingIOError" || err == EAGAIN || msg.find("can't start new thread") != std::string::npos ||
         msg.find("Resource temporarily unavailable") != std::string::npos;
}

// How the program ended, from its report lines and bwrap's exit status.
void classify(SandboxResult& r, const std::string& report) {
  std::istringstream in(report);
  std::string line;
  bool main_passed = false, main_raised = false, child_nproc = false;
  std::string type, msg;
  int err = 0;
  while (std::getline(in, line)) {
    const bool child = line.rfind("child ", 0) == 0;
    std::string body = child ? line.substr(6) : line;
    // The main process's last word counts: a stray "passed" written early does not outlive a
    // later exception.
    if (body == "passed" && !child) main_passed = true, main_raised = false;
    if (body.rfind("raised ", 0) != 0) continue;
    std::istringstream s(body.substr(7));
    std::string t;
    int e = 0;
    s >> t >> e;
    std::string m;
    std::getline(s, m);
    if (child) {
      child_nproc |= is_process_limit(t, e, m);
    } else {
      main_raised = true, main_passed = false;
      type = t, err = e, msg = m.empty() ? m : m.substr(1);
    }
  }
  if (main_passed) {
    r.passed = true;
    return;
  }
  if (main_raised) {
    if (type == "MemoryError")
      r.reason = "memory";
    else if (type == "AssertionError")
      r.reason = "assertion";
    else if (is_process_limit(type, err, msg))
      r.reason = "process limit", r.detail = type;
    else
      r.reason = "error", r.detail = type;
    return;
  }
  if (child_nproc) {
    r.reason = "process limit";
    return;
  }
  if (r.exit_code > 128) {
    const int sig = r.exit_code - 128;
    if (sig == SIGXCPU) {
      r.reason = "timeout", r.detail = "cpu time";
    } else {
      r.reason = "crash";
      const char* name = signal_name(sig);
      r.detail = name ? name : "signal " + std::to_string(sig);
    }
    return;
  }
  if (r.output.rfind("bwrap: ", 0) == 0) {
    r.reason = "sandbox", r.detail = r.output.substr(0, r.output.find('\n'));
    return;
  }
  r.reason = "error";
  r.detail = "exited with status " + std::to_string(r.exit_code) + " before the program's end";
}

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

// Reads what is available; false at EOF or error.
bool drain(int fd, std::string& into, size_t cap, bool& over) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      size_t keep = std::min<size_t>(n, cap > into.size() ? cap - into.size() : 0);
      into.append(buf, keep);
      if (keep < static_cast<size_t>(n)) over = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
}

SandboxResult run_one(const std::string& program, const SandboxOptions& o, int uid,
                      const std::vector<std::string>& args) {
  SandboxResult r;
  const double t0 = now_s();
  Fd mem(static_cast<int>(syscall(SYS_memfd_create, "program.py", MFD_CLOEXEC)));
  // Only our ends are non-blocking: the program's stdout must block, not raise BlockingIOError.
  int out[2], rep[2];
  if (mem.fd < 0 || pipe2(out, O_CLOEXEC) != 0) {
    r.reason = "sandbox", r.detail = std::string("memfd/pipe: ") + std::strerror(errno);
    return r;
  }
  Fd out_r(out[0]), out_w(out[1]);
  if (pipe2(rep, O_CLOEXEC) != 0) {
    r.reason = "sandbox", r.detail = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  Fd rep_r(rep[0]), rep_w(rep[1]);
  fcntl(out_r.fd, F_SETFL, O_NONBLOCK);
  fcntl(rep_r.fd, F_SETFL, O_NONBLOCK);
  for (size_t off = 0; off < program.size();) {
    ssize_t n = write(mem.fd, program.data() + off, program.size() - off);
    if (n <= 0) {
      r.reason = "sandbox", r.detail = std::string("memfd write: ") + std::strerror(errno);
      return r;
    }
    off += n;
  }
  lseek(mem.fd, 0, SEEK_SET);
  std::vector<char*> argv;
  for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  const rlim_t nproc = nproc_limit(o, uid);
  auto* shared =
      static_cast<pid_t*>(mmap(nullptr, sizeof(pid_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (shared == MAP_FAILED) {
    r.reason = "sandbox", r.detail = std::string("mmap: ") + std::strerror(errno);
    return r;
  }
  *shared = 0;
  struct Unmap {
    pid_t* p;
    ~Unmap() { munmap(p, sizeof(pid_t)); }
  } unmap{shared};
  const pid_t pid = fork();
  if (pid == 0) monitor(shared, mem.fd, out_w.fd, rep_w.fd, uid, nproc, o.limits, argv.data());
  if (pid < 0) {
    r.reason = "sandbox", r.detail = std::string("fork: ") + std::strerror(errno);
    return r;
  }
  out_w.reset(), rep_w.reset(), mem.reset();
  Fd pfd(pidfd_open(pid));
  std::string report;
  bool out_open = true, rep_open = true, over = false, rep_over = false, exited = false, killed = false;
  int status = 0;
  while (!exited) {
    pollfd fds[3] = {{out_open ? out_r.fd : -1, POLLIN, 0}, {rep_open ? rep_r.fd : -1, POLLIN, 0}, {pfd.fd, POLLIN, 0}};
    const double left = o.limits.timeout_s - (now_s() - t0);
    poll(fds, 3, std::max(0, std::min(100, static_cast<int>(left * 1000) + 1)));
    if (out_open) out_open = drain(out_r.fd, r.output, o.limits.output_bytes, over);
    if (rep_open) rep_open = drain(rep_r.fd, report, 1 << 16, rep_over);
    if (!killed && (over || now_s() - t0 > o.limits.timeout_s)) {
      r.reason = over ? "output limit" : "timeout";
      // A fork bomb that swallows its EAGAINs keeps the uid at its limit until the clock runs out.
      if (!over && uid >= 0 && count_tasks_of(uid) >= o.limits.processes - 2) r.reason = "process limit";
      // bwrap's death takes its namespace with it; the monitor then reaps and exits. Before bwrap
      // exists, the monitor goes (and bwrap with it, by its parent-death signal).
      const pid_t b = __atomic_load_n(shared, __ATOMIC_SEQ_CST);
      kill(b > 0 ? b : pid, SIGKILL);
      killed = true;
    }
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) exited = true;
    if (pfd.fd < 0 && !exited) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.wall_s = now_s() - t0;
  if (uid >= 0) kill_uid(uid);
  if (out_open) drain(out_r.fd, r.output, o.limits.output_bytes, over);
  if (rep_open) drain(rep_r.fd, report, 1 << 16, rep_over);
  if (killed) return r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  classify(r, report);
  return r;
}

}  // namespace

std::string SandboxResult::verdict() const {
  if (passed) return "pass";
  return "fail: " + reason + (reason == "error" && !detail.empty() ? ": " + detail : "");
}

Status sandbox_check(const SandboxOptions& o) {
  if (access(o.bwrap.c_str(), X_OK) != 0)
    return make_error(o.bwrap + ": not found (install the Debian package bubblewrap)");
  if (access(o.python.c_str(), X_OK) != 0) return make_error(o.python + ": not found (the sandbox runs it)");
  return {};
}

Result<std::vector<SandboxResult>> run_sandboxed(const std::vector<std::string>& programs, const SandboxOptions& o) {
  FTX_TRY(sandbox_check(o));
  std::vector<SandboxResult> results(programs.size());
  if (programs.empty()) return results;
  int parallel = o.parallel > 0 ? o.parallel : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  parallel = std::min<int>(parallel, static_cast<int>(programs.size()));
  std::vector<UidSlot> slots(parallel);
  for (UidSlot& s : slots) FTX_TRY(take_uid(s, o));
  const std::vector<std::string> args = bwrap_argv(o);
  std::atomic<size_t> next{0};
  auto work = [&](int slot) {
    for (size_t i; (i = next.fetch_add(1)) < programs.size();)
      results[i] = run_one(programs[i], o, slots[slot].uid, args);
  };
  std::vector<std::thread> threads;
  for (int s = 1; s < parallel; ++s) threads.emplace_back(work, s);
  work(0);
  for (std::thread& t : threads) t.join();
  // A sandbox that cannot start fails every program the same way: that is the machine, not the code.
  for (const SandboxResult& r : results)
    if (r.reason == "sandbox") return make_error(o.bwrap + ": cannot run the sandbox: " + r.detail);
  return results;
}

}  // namespace ftx::bench
