// OpenBLAS's kernel choice, checked against the CPU (kernels/cpu/blas_core.h).
#include "kernels/cpu/blas_core.h"

#include <unistd.h>

#include <strings.h>
#include <cstdlib>
#include <initializer_list>

extern "C" char* openblas_get_corename(void);

namespace ftx::cpu {
namespace {

bool named(const char* core, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (strcasecmp(core, n) == 0) return true;
  return false;
}

// The core to force when OpenBLAS runs `core`, whoever chose it (blas_core.h).
const char* better_core(const char* core) {
#if defined(__x86_64__)
  const bool has512 = named(core, {"SkylakeX", "Cooperlake", "SapphireRapids"});
  const bool has2 = has512 || named(core, {"Haswell", "Zen"});
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && !has512)
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !has2) return "Haswell";
#else
  (void)core;
#endif
  return nullptr;
}

}  // namespace

const char* blas_core() { return openblas_get_corename(); }

const char* blas_core_to_force() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return nullptr;
  return better_core(blas_core());
}

const char* blas_core_held_back() {
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) return nullptr;
  return better_core(blas_core());
}

void restart_with_right_blas_core(char** argv) {
  const char* core = blas_core_to_force();
  if (core == nullptr) return;
  setenv("OPENBLAS_CORETYPE", core, 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

}  // namespace ftx::cpu
