// Run-time choice of the CPU kernels' instruction set (kernels/cpu/isa.h).
//
// __builtin_cpu_supports reads CPUID through libgcc, which also checks XGETBV: a feature counts only
// when the OS saves the registers it uses (AVX-512 needs the ZMM state enabled).
#include "kernels/cpu/isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "kernels/base/assert.h"
#include "kernels/cpu/gemm_amx.h"

namespace ftx::cpu {
namespace {

constexpr int kUnset = -1;
std::atomic<int> g_isa{kUnset};  // a CpuIsa, or kUnset until the first cpu_isa()
std::mutex g_init;

bool parse_isa(const char* s, CpuIsa* isa) {
  for (const CpuIsa i : {CpuIsa::Generic, CpuIsa::Avx2, CpuIsa::Avx512Bf16, CpuIsa::Amx}) {
    if (std::strcmp(s, cpu_isa_name(i)) == 0) {
      *isa = i;
      return true;
    }
  }
  return false;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Generic:
      return "generic";
    case CpuIsa::Avx2:
      return "avx2";
    case CpuIsa::Avx512Bf16:
      return "avx512bf16";
    case CpuIsa::Amx:
      return "amx";
  }
  return "?";
}

bool cpu_isa_supported(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Generic:
      return true;
#if defined(__x86_64__) || defined(__i386__)
    case CpuIsa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuIsa::Avx512Bf16:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16") &&
             __builtin_cpu_supports("fma");
    case CpuIsa::Amx:  // CPUID, then the kernel's permission for the tile data (asked once)
      return cpu_isa_supported(CpuIsa::Avx512Bf16) && amx_usable();
#else
    default:
      return false;
#endif
  }
  return false;
}

bool vdpbf16ps_beats_sgemm() {
  static const bool beats = [] {
    const char* e = std::getenv("FTX_BF16_GEMM");
    if (e != nullptr && std::strcmp(e, "vdp") == 0) return true;
    if (e != nullptr && std::strcmp(e, "sgemm") == 0) return false;
    if (e != nullptr && *e != '\0')
      std::fprintf(stderr, "ftx: warning: FTX_BF16_GEMM=%s: not one of vdp, sgemm; the CPU's vendor decides\n", e);
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_is("amd") != 0;
#else
    return false;
#endif
  }();
  return beats;
}

CpuIsa best_cpu_isa() {
  if (cpu_isa_supported(CpuIsa::Amx)) return CpuIsa::Amx;
  if (cpu_isa_supported(CpuIsa::Avx512Bf16)) return CpuIsa::Avx512Bf16;
  if (cpu_isa_supported(CpuIsa::Avx2)) return CpuIsa::Avx2;
  return CpuIsa::Generic;
}

CpuIsa resolve_cpu_isa(const char* env_value, CpuIsa best, std::string* warning) {
  warning->clear();
  if (env_value == nullptr || *env_value == '\0') return best;
  CpuIsa want;
  if (!parse_isa(env_value, &want)) {
    *warning = std::string("FTX_CPU_ISA=") + env_value + ": not one of generic, avx2, avx512bf16, amx; using " +
               cpu_isa_name(best);
    return best;
  }
  if (int(want) > int(best)) {
    *warning = std::string("FTX_CPU_ISA=") + env_value + ": this CPU cannot run it; using " + cpu_isa_name(best);
    return best;
  }
  return want;
}

CpuIsa cpu_isa() {
  const int now = g_isa.load(std::memory_order_acquire);
  if (now != kUnset) return CpuIsa(now);
  std::lock_guard<std::mutex> lock(g_init);
  if (g_isa.load(std::memory_order_relaxed) == kUnset) {
    std::string warning;
    const CpuIsa isa = resolve_cpu_isa(std::getenv("FTX_CPU_ISA"), best_cpu_isa(), &warning);
    if (!warning.empty()) std::fprintf(stderr, "ftx: warning: %s\n", warning.c_str());
    g_isa.store(int(isa), std::memory_order_release);
  }
  return CpuIsa(g_isa.load(std::memory_order_relaxed));
}

void set_cpu_isa_for_tests(CpuIsa isa) {
  FT_ASSERT(cpu_isa_supported(isa), "set_cpu_isa_for_tests: this CPU cannot run %s", cpu_isa_name(isa));
  g_isa.store(int(isa), std::memory_order_release);
}

void reset_cpu_isa_for_tests() { g_isa.store(kUnset, std::memory_order_release); }

}  // namespace ftx::cpu
