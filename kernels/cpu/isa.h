// Which instruction set the CPU's hand-written kernels use (the bf16-weight GEMV/GEMM of
// kernels/cpu/gemm_bf16.h, and the GEMMs of training at bf16, ops_matmul_bf16.h), chosen once per
// process at run time, so that a binary built without
// -march=native (FTX_NATIVE=OFF) still runs its fast paths where the CPU has them.
//
//   Generic     portable C++ (any CPU): the reference the other paths are tested against.
//   Avx2        AVX2 + FMA (Intel Haswell and later, AMD Zen 1-3).
//   Avx512Bf16  AVX-512 F/BW/VL + AVX512_BF16 (Intel Cooper Lake, Sapphire Rapids and later,
//               AMD Zen 4 and later).
//   Amx         Avx512Bf16 and AMX-TILE + AMX-BF16, with Linux's permission for the tile state
//               (Intel Sapphire Rapids and later): training's bf16 GEMMs on the tiles
//               (gemm_amx.h); the bf16-weight kernels as on Avx512Bf16.
//
// The path in use is the best one the CPU supports, unless the environment variable
// FTX_CPU_ISA=generic|avx2|avx512bf16|amx names another (read at the first call of cpu_isa()). A name
// the CPU cannot run, or an unknown name, prints one warning to stderr and falls back to the best
// supported path: a forced path is a debugging aid, so it should not stop a run.
//
// Deliberately not here: the kernels themselves, ARM (NEON/SVE machines take Generic).
#pragma once
#include <string>

namespace ftx::cpu {

enum class CpuIsa { Generic, Avx2, Avx512Bf16, Amx };  // each path's CPUs run the ones before it

// The path the kernels use now (best supported, FTX_CPU_ISA, or set_cpu_isa_for_tests).
CpuIsa cpu_isa();

// "generic", "avx2", "avx512bf16" or "amx": the spelling FTX_CPU_ISA accepts.
const char* cpu_isa_name(CpuIsa isa);

// Whether this CPU (and its OS, which must save the wider registers) can run `isa`'s path.
bool cpu_isa_supported(CpuIsa isa);

// The best path this CPU supports.
CpuIsa best_cpu_isa();

// The choice cpu_isa() makes for a value of FTX_CPU_ISA (null: unset) on a CPU whose best path is
// `best` (paths below `best` are supported too). Writes the warning to print into *warning, or
// clears it when there is none.
CpuIsa resolve_cpu_isa(const char* env_value, CpuIsa best, std::string* warning);

// Whether, on the Avx512Bf16 path, VDPBF16PS on packed bf16 operands (gemm_bf16_vdp, gemm_amx.h)
// beats sgemm on the same rounded operands, for training's bf16 GEMMs and prefill on bf16 weights:
// on AMD (Zen 4 and later) VDPBF16PS issues at the rate of fp32 FMA with twice its multiply-adds,
// on Intel at half that rate (docs/performance.md). The environment variable FTX_BF16_GEMM=vdp|sgemm
// (read once) overrides the vendor; an unknown value prints one warning and the vendor decides.
bool vdpbf16ps_beats_sgemm();

// Tests: use `isa` from now on (a bug when the CPU lacks it); reset_cpu_isa_for_tests() returns to
// the process's choice, reading FTX_CPU_ISA again at the next call of cpu_isa().
void set_cpu_isa_for_tests(CpuIsa isa);
void reset_cpu_isa_for_tests();

}  // namespace ftx::cpu
