// The sandbox for generated code (docs/benchmarks.md, "Code tasks and the sandbox"): each Python
// program runs in its own process tree under bubblewrap, with no network, only /usr bound
// read-only, an empty tmpfs as its working directory, rlimits on CPU, memory, processes, file
// size and open files, a cap on its output and a wall-clock timeout; when the caller is root it
// first drops to a dedicated uid per parallel slot, so that RLIMIT_NPROC binds and the process
// counts of parallel programs stay apart. The verdict says passed or why not.
//
// Deliberately not here: what a program is (code_tasks.cpp builds them), pass@k (passk.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/base/result.h"

namespace ftx::bench {

struct SandboxLimits {
  double timeout_s = 10;             // wall clock; the whole process tree is killed after it
  int cpu_s = 10;                    // RLIMIT_CPU (SIGXCPU, then SIGKILL one second later)
  int64_t memory_bytes = 2ll << 30;  // RLIMIT_AS of every process
  int processes = 32;                // RLIMIT_NPROC of the slot's uid (bubblewrap's two included)
  int64_t file_bytes = 16ll << 20;   // RLIMIT_FSIZE
  int64_t tmpfs_bytes = 64ll << 20;  // size of the working directory's tmpfs
  int open_files = 64;               // RLIMIT_NOFILE
  int64_t output_bytes = 1ll << 20;  // stdout + stderr; more kills the program
};

struct SandboxResult {
  bool passed = false;
  // "" when passed; else "timeout", "memory", "crash", "assertion", "error", "output limit",
  // "process limit" or "sandbox" (the sandbox itself could not start the program).
  std::string reason;
  std::string detail;  // "error": the exception type ("NameError"); "crash": the signal; ...
  std::string output;  // stdout and stderr as captured (at most output_bytes)
  int exit_code = -1;  // bubblewrap's exit status (128 + signal for a killed program); -1 if killed by us
  double wall_s = 0;
  // "pass", or "fail: <reason>" with ": <detail>" for errors ("fail: error: NameError").
  std::string verdict() const;
};

struct SandboxOptions {
  SandboxLimits limits;
  int parallel = 0;  // programs at once; 0: the core count
  // uids for the slots when running as root: [first_uid, first_uid + uid_count). A slot takes a
  // uid that no other process of this machine holds (a lock file per uid), so two harnesses at
  // once never share one.
  int first_uid = 61000;
  int uid_count = 1000;
  std::string bwrap = "/usr/bin/bwrap";
  std::string python = "/usr/bin/python3";
};

// Checks that bubblewrap and the Python interpreter exist: "…/bwrap: not found (install the Debian
// package bubblewrap)".
Status sandbox_check(const SandboxOptions& o);

// Runs every program (Python source) in its own sandbox, up to o.parallel at once; results in
// the order of `programs`. Errors only when the sandbox cannot be used at all (bwrap missing, no
// free uid); a program that misbehaves is a failed SandboxResult, never an error.
Result<std::vector<SandboxResult>> run_sandboxed(const std::vector<std::string>& programs, const SandboxOptions& o);

}  // namespace ftx::bench
