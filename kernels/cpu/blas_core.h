// Which OpenBLAS kernels sgemm runs, and the fix when OpenBLAS chose wrong. A DYNAMIC_ARCH OpenBLAS
// (Debian's) picks its kernels by CPU model when the library loads, before main. One that predates
// the CPU takes a fallback: OpenBLAS 0.3.21 (Debian 12) runs Prescott's SSE3 kernels on an Emerald
// Rapids Xeon (family 6, model 207), 3-6x below its AVX-512 ones (docs/performance.md, "OpenBLAS's
// core"), and Haswell's on AMD Zen 4. The user's OPENBLAS_CORETYPE always wins.
//
// Deliberately not here: other BLAS libraries (the build links OpenBLAS), choosing among AVX-512
// cores (SkylakeX's sgemm is the one they share).
#pragma once

namespace ftx::cpu {

// OpenBLAS's name for the kernels in use ("SkylakeX", "Haswell", "Prescott", ...).
const char* blas_core();

// The OPENBLAS_CORETYPE this process should run with, or null when it runs right already (or the
// user set one): "SkylakeX" on a CPU with AVX-512 F/BW/VL/DQ where OpenBLAS took a core without
// it, "Haswell" on an AVX2 + FMA CPU where it took one without those.
const char* blas_core_to_force();

// The core blas_core_to_force() would name if the user had not set OPENBLAS_CORETYPE, when the
// user's choice holds OpenBLAS to weaker kernels than the CPU runs (OPENBLAS_CORETYPE=Haswell on
// an AVX-512 CPU: about half of sgemm's speed); null otherwise. Reported by the bench commands.
const char* blas_core_held_back();

// When blas_core_to_force() names a core: sets OPENBLAS_CORETYPE and executes this program again
// with the same arguments (the library reads it only when it loads), so it returns only when there
// is nothing to do or the restart failed. To be called first thing in main, before any thread.
void restart_with_right_blas_core(char** argv);

}  // namespace ftx::cpu
