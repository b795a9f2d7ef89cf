// Dense matmul in nn.Linear layout through OpenBLAS (sgemm for float, dgemm for double), row-major.
// Also exports gemm(), the thin cblas wrapper the other ops use (binary mapper backward).
//
// Threads: called outside a parallel region, the OpenMP build of OpenBLAS uses the shared OpenMP
// pool; called inside one (binary mapper tiles), it runs on the calling thread only.
// Deliberately not here: bias (the Llama layers have none), our own GEMM kernels.
#pragma once
#include <cblas.h>
#include <omp.h>

#include <cstddef>

namespace ftx::cpu {

// Below this many multiply-adds a product runs on the calling thread: waking the pool costs more
// than it saves, and on a busy machine a barrier can wait milliseconds for a descheduled thread
// (the decode steps of generation are thousands of such small products).
constexpr double kSmallGemmWork = double(1 << 21);

// Runs f() with OpenBLAS on one thread when the product is small (and we are not already inside a
// parallel region, where OpenBLAS is single-threaded anyway). The OpenMP build of OpenBLAS sets the
// OpenMP thread count too, so the previous count is restored right after.
template <class F>
void blas_call(int M, int N, int K, F&& f) {
  if (double(M) * N * K >= kSmallGemmWork || omp_in_parallel()) return f();
  const int threads = omp_get_max_threads();
  if (threads == 1) return f();
  openblas_set_num_threads(1);
  f();
  openblas_set_num_threads(threads);
}

// C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C; row-major, leading dimensions explicit.
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* Cm, int ldc) {
  blas_call(M, N, K, [&] {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
  });
}

inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
                 int lda, const double* B, int ldb, double beta, double* Cm, int ldc) {
  blas_call(M, N, K, [&] {
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
  });
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

}  // namespace ftx::cpu
