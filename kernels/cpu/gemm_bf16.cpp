// gemm_bf16w (kernels/cpu/gemm_bf16.h): the portable kernel, the split between threads, and the
// choice of kernel per path and size. The AVX2 and AVX-512 kernels live in gemm_bf16_avx2.cpp and
// gemm_bf16_avx512.cpp.
#include "kernels/cpu/gemm_bf16.h"

#include <omp.h>

#include <algorithm>

#include "kernels/base/assert.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/gemm_bf16_kernels.h"
#include "kernels/cpu/ops_matmul.h"

namespace ftx::cpu {

namespace {

// From this many inputs on, a path leaves its register kernel: widens w into slabs and calls sgemm,
// or on Amx multiplies on the tiles. Set from whole decode steps (SmolLM2-135M decoding N sequences,
// the two choices alternated; docs/performance.md, eighth and ninth passes), not from the GEMMs
// alone: in a model the weights stream from memory, and the slabs read them twice (to widen, then
// to multiply). 2026-12-06, Sapphire Rapids, with the kernels prefetching up to 64 inputs:
// - avx2: the kernel 1.08x at N = 32, 1.03x at 40; sgemm 1.05x at 48, 1.11x at 64;
// - avx512bf16: the kernel 1.11x at 48, 1.04x at 64; sgemm 1.13x at 72, 1.11x at 80;
// - amx (2026-12-07, the tiles reading the weight in place, gemm_amx.cpp): the kernel 1.05-1.10x at
//   N = 3, a tie at 4; the tiles 1.06-1.12x at 5, 1.13-1.26x at 6, 1.36x at 12, 1.66x at 16;
// - generic: from the GEMMs alone (crossover at 8 on both families), not measured on whole steps.
constexpr int kGenericSgemmMinN = 8;
constexpr int kAvx2SgemmMinN = 48;
constexpr int kAvx512Bf16SgemmMinN = 65;
constexpr int kAmxTilesMinN = 5;

// Below this many multiply-adds a call runs on the calling thread (waking the second thread costs
// a few microseconds; a 192 x 576 decode GEMV, 110 K multiply-adds, still gains from two).
constexpr double kParallelMinMacs = double(1 << 16);

// Threads split the weight rows in blocks of this many: 16 floats of output are one cache line.
constexpr int kRowGrain = 16;

// sum_k x[k] * bf16_to_fp32(w[k]) over 16 independent lanes (vectorisable without reassociation),
// the lanes added pairwise at the end.
float dot_generic(const float* x, const uint16_t* w, int IC) {
  constexpr int kLanes = 16;
  float lane[kLanes] = {};
  int k = 0;
  for (; k + kLanes <= IC; k += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += x[k + j] * bf16_to_fp32(w[k + j]);
  for (int h = kLanes / 2; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) lane[j] += lane[j + h];
  float tail = 0.0f;
  for (; k < IC; ++k) tail += x[k] * bf16_to_fp32(w[k]);
  return lane[0] + tail;
}

}  // namespace

namespace detail {

void gemm_bf16w_rows_generic(float* out, const float* x, size_t ldx, const uint16_t* w, int N, int IC, int OC, int o0,
                             int o1, bool accumulate) {
  for (int o = o0; o < o1; ++o) {
    const uint16_t* wr = w + size_t(o) * IC;
    for (int n = 0; n < N; ++n) {
      float& y = out[size_t(n) * OC + o];
      y = (accumulate ? y : 0.0f) + dot_generic(x + size_t(n) * ldx, wr, IC);
    }
  }
}

int sgemm_min_n(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Generic:
      return kGenericSgemmMinN;
    case CpuIsa::Avx2:
      return kAvx2SgemmMinN;
    case CpuIsa::Avx512Bf16:
      return kAvx512Bf16SgemmMinN;
    case CpuIsa::Amx:
      return kAmxTilesMinN;
  }
  return kGenericSgemmMinN;
}

void gemm_bf16w_engine(CpuIsa isa, Bf16Engine engine, float* out, const float* inp, const uint16_t* w, int N, int IC,
                       int OC, bool accumulate) {
  if (N <= 0 || OC <= 0) return;
  FT_ASSERT(IC >= 0, "gemm_bf16w: IC %d", IC);
  FT_ASSERT(cpu_isa_supported(isa), "gemm_bf16w: this CPU cannot run the %s path", cpu_isa_name(isa));
  const bool parallel = !omp_in_parallel() && double(N) * IC * OC >= kParallelMinMacs;
#if defined(__x86_64__)
  const bool bf16_inputs = isa >= CpuIsa::Avx512Bf16;
#else
  const bool bf16_inputs = false;
#endif
  if (engine == Bf16Engine::Sgemm) {
    if (!bf16_inputs) return matmul_forward_bf16w(out, inp, w, N, IC, OC, accumulate);
    // The tiles and VDPBF16PS's packing round the activations themselves.
    if (isa == CpuIsa::Amx) return gemm_bf16w_amx(out, inp, w, N, IC, OC, accumulate);
    if (vdpbf16ps_beats_sgemm()) return gemm_bf16w_vdp(out, inp, w, N, IC, OC, accumulate);
    // The products of the rounded activations, as the kernel forms them, summed by sgemm.
    float* xr = thread_scratch<float, 1>(size_t(N) * IC);  // (N, IC)
#pragma omp parallel for schedule(static) if (parallel)
    for (int n = 0; n < N; ++n) round_to_bf16(xr + size_t(n) * IC, inp + size_t(n) * IC, size_t(IC));
    return matmul_forward_bf16w(out, xr, w, N, IC, OC, accumulate);
  }
  // (N, ldx) the activations rounded to bf16, each row padded with zeros to whole vectors.
  const size_t ldx = bf16_inputs ? std::max<size_t>(32, (size_t(IC) + 31) / 32 * 32) : size_t(IC);
  uint16_t* xb = bf16_inputs ? thread_scratch<uint16_t, 0>(size_t(N) * ldx) : nullptr;
#pragma omp parallel if (parallel)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
#if defined(__x86_64__)
    if (bf16_inputs) {
      round_rows_bf16_avx512(xb, ldx, inp, IC, split_begin(N, nt, t), split_begin(N, nt, t + 1));
#pragma omp barrier
    }
#endif
    const int blocks = (OC + kRowGrain - 1) / kRowGrain;
    const int o0 = std::min(OC, split_begin(blocks, nt, t) * kRowGrain);
    const int o1 = std::min(OC, split_begin(blocks, nt, t + 1) * kRowGrain);
    if (o0 < o1) {
      switch (isa) {
#if defined(__x86_64__)
        case CpuIsa::Avx512Bf16:
        case CpuIsa::Amx:
          gemm_bf16w_rows_avx512bf16(out, xb, ldx, w, N, IC, OC, o0, o1, accumulate);
          break;
        case CpuIsa::Avx2:
          gemm_bf16w_rows_avx2(out, inp, ldx, w, N, IC, OC, o0, o1, accumulate);
          break;
#endif
        default:
          gemm_bf16w_rows_generic(out, inp, ldx, w, N, IC, OC, o0, o1, accumulate);
      }
    }
  }
}

}  // namespace detail

void gemm_bf16w_on(CpuIsa isa, float* out, const float* inp, const uint16_t* w, int N, int IC, int OC,
                   bool accumulate) {
  const detail::Bf16Engine e = N >= detail::sgemm_min_n(isa) ? detail::Bf16Engine::Sgemm : detail::Bf16Engine::Kernel;
  detail::gemm_bf16w_engine(isa, e, out, inp, w, N, IC, OC, accumulate);
}

void gemm_bf16w(float* out, const float* inp, const uint16_t* w, int N, int IC, int OC, bool accumulate) {
  gemm_bf16w_on(cpu_isa(), out, inp, w, N, IC, OC, accumulate);
}

}  // namespace ftx::cpu
