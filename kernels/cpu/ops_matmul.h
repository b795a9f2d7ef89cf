// Dense matmul in nn.Linear layout through OpenBLAS (sgemm for float, dgemm for double), row-major.
// Also exports gemm(), the thin cblas wrapper the other ops use (binary mapper backward).
//
// bf16 weights (matmul_*_bf16w): the plain path. Slabs of the weight are widened (exactly) to fp32
// in a per-thread scratch of at most kWidenFloats and multiplied by sgemm, so products and
// accumulation are fp32 and the result equals the fp32 GEMM on the widened weight up to the sum
// order of the slabs. The backend's forward goes through gemm_bf16w (kernels/cpu/gemm_bf16.h),
// whose own kernels stream the weight for small N and which calls matmul_forward_bf16w for large N.
//
// Threads: gemm() cuts large products into one slab per OpenMP thread, each a single-threaded
// OpenBLAS call; inside a parallel region (binary mapper tiles, attention heads) it runs on the
// calling thread only.
// Deliberately not here: bias (the Llama layers have none), our own GEMM kernels.
#pragma once
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/base/dtype.h"
#include "kernels/cpu/cpu_common.h"

namespace ftx::cpu {

// Below this many multiply-adds a product runs on the calling thread: waking the pool costs more
// than it saves, and on a busy machine a barrier can wait milliseconds for a descheduled thread
// (the decode steps of generation are thousands of such small products).
constexpr double kSmallGemmWork = double(1 << 21);

inline void blas_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* Cm, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha,
              A, lda, B, ldb, beta, Cm, ldc);
}

inline void blas_gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
                      const double* B, int ldb, double beta, double* Cm, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha,
              A, lda, B, ldb, beta, Cm, ldc);
}

// C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C; row-major, leading dimensions explicit.
//
// Threads. Inside a parallel region, or below kSmallGemmWork, one sequential BLAS call on the
// calling thread (OpenBLAS's OpenMP build is single-threaded inside a region; outside one, its
// count is set to 1 for the call and restored). Larger products are cut by us: C into one slab of
// whole 16-row (or 16-column, when C is wider than tall) blocks per thread, each slab one
// sequential call. OpenBLAS's own threads share packed panels and wait for each other in
// sched_yield loops: on 2 cores the slabs ran the small preset's fp32 step 0.97-1.37x as fast,
// median 1.15x (docs/performance.md). Each element of C is one call's dot product over all of K,
// whatever the slab.
template <class T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb, T beta,
          T* Cm, int ldc) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads == 1) return blas_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
  if (double(M) * N * K < kSmallGemmWork) {
    openblas_set_num_threads(1);
    blas_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
    openblas_set_num_threads(threads);
    return;
  }
  const bool by_rows = M >= N;
  const int total = by_rows ? M : N, blocks = (total + 15) / 16;
#pragma omp parallel num_threads(std::min(threads, blocks))
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int s0 = std::min(total, split_begin(blocks, nt, t) * 16);
    const int s1 = std::min(total, split_begin(blocks, nt, t + 1) * 16);
    if (s0 < s1 && by_rows)
      blas_gemm(trans_a, trans_b, s1 - s0, N, K, alpha, trans_a ? A + s0 : A + size_t(s0) * lda, lda, B, ldb, beta,
                Cm + size_t(s0) * ldc, ldc);
    else if (s0 < s1)
      blas_gemm(trans_a, trans_b, M, s1 - s0, K, alpha, A, lda, trans_b ? B + size_t(s0) * ldb : B + s0, ldb, beta,
                Cm + s0, ldc);
  }
}

// out (N, OC) = inp (N, IC) @ w^T, w (OC, IC); accumulate: out += instead of =.
template <class T>
void matmul_forward(T* out, const T* inp, const T* w, int N, int IC, int OC, bool accumulate) {
  if (N <= 0 || OC <= 0) return;
  gemm(false, true, N, OC, IC, T(1), inp, IC, w, IC, accumulate ? T(1) : T(0), out, OC);
}

// dinp (N, IC) = dout @ w (+= when accumulate_dinp; skipped when null);
// dw (OC, IC) += dout^T @ inp (skipped when null).
template <class T>
void matmul_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, int N, int IC, int OC,
                     bool accumulate_dinp) {
  if (N <= 0 || IC <= 0) return;
  if (dinp) {
    gemm(false, false, N, IC, OC, T(1), dout, OC, w, IC, accumulate_dinp ? T(1) : T(0), dinp, IC);
  }
  if (dw && OC > 0) gemm(true, false, OC, IC, N, T(1), dout, OC, inp, IC, T(1), dw, IC);
}

// Floats of widened weight per slab (4 MiB): large enough that sgemm runs at speed, small enough to
// stay in cache next to the activations.
constexpr size_t kWidenFloats = size_t(1) << 20;
// ... but at least this many weight rows per forward slab (37 MiB for IC = 8960): sgemm on a slab of
// 117 output columns ran at 60% of its speed on 1024 (the 1536 x 8960 down projection at N = 512,
// docs/performance.md).
constexpr size_t kWidenMinRows = 1024;

// dst[r * ld + c] = w[r * w_ld + c] widened, for r < rows, c < cols.
inline void widen_bf16(float* dst, int ld, const uint16_t* w, size_t w_ld, int rows, int cols) {
#pragma omp parallel for schedule(static) if (go_parallel(size_t(rows) * cols))
  for (int r = 0; r < rows; ++r) {
    bf16_to_fp32(dst + size_t(r) * ld, w + size_t(r) * w_ld, size_t(cols));
  }
}

// out (N, OC) = inp (N, IC) @ w^T with w (OC, IC) bf16; accumulate: out +=. Slabs of output
// columns: each output element is one dot product over all of IC.
inline void matmul_forward_bf16w(float* out, const float* inp, const uint16_t* w, int N, int IC, int OC,
                                 bool accumulate) {
  if (N <= 0 || OC <= 0) return;
  const size_t fit = std::max<size_t>(kWidenFloats / size_t(std::max(IC, 1)), kWidenMinRows);
  const int rows = int(std::clamp<size_t>(fit, 1, size_t(OC)));
  float* slab = thread_scratch<float, 0>(size_t(rows) * std::max(IC, 1));  // (rows, IC)
  for (int o0 = 0; o0 < OC; o0 += rows) {
    const int r = std::min(rows, OC - o0);
    widen_bf16(slab, IC, w + size_t(o0) * IC, size_t(IC), r, IC);
    gemm(false, true, N, r, IC, 1.0f, inp, IC, slab, IC, accumulate ? 1.0f : 0.0f, out + o0, OC);
  }
}

// dinp (N, IC) = dout (N, OC) @ w (OC, IC), w bf16 (+= when accumulate_dinp). Slabs of input
// columns: each dinp element is one sgemm dot product over all of OC.
inline void matmul_backward_bf16w(float* dinp, const float* dout, const uint16_t* w, int N, int IC, int OC,
                                  bool accumulate_dinp) {
  if (N <= 0 || IC <= 0 || dinp == nullptr) return;
  const int cols = int(std::clamp<size_t>(kWidenFloats / size_t(std::max(OC, 1)), 1, size_t(IC)));
  float* slab = thread_scratch<float, 0>(size_t(std::max(OC, 1)) * cols);  // (OC, cols)
  for (int i0 = 0; i0 < IC; i0 += cols) {
    const int c = std::min(cols, IC - i0);
    widen_bf16(slab, c, w + i0, size_t(IC), OC, c);
    gemm(false, false, N, c, OC, 1.0f, dout, OC, slab, c, accumulate_dinp ? 1.0f : 0.0f, dinp + i0, IC);
  }
}

}  // namespace ftx::cpu
