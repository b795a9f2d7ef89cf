// cuBLAS for test_cuda_emu: cublasGemmEx as a plain triple loop on the CPU (queued like a kernel,
// so stream capture records it), with the inputs rounded as the tensor cores would: to TF32 (10-bit
// mantissa) for CUBLAS_COMPUTE_32F_FAST_TF32, read as bf16 for CUDA_R_16BF; fp32 accumulation.
#pragma once
#include <cstdint>
#include <cstring>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

using cublasHandle_t = void*;
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
enum cublasOperation_t { CUBLAS_OP_N, CUBLAS_OP_T };
enum cudaDataType { CUDA_R_32F, CUDA_R_16BF };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT };

inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = nullptr;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetWorkspace(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }

namespace ftx_emu {
inline float tf32(float x) {  // round to nearest even at 10 mantissa bits
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0xFFFu + ((u >> 13) & 1u)) & ~0x1FFFu;
  std::memcpy(&x, &u, 4);
  return x;
}
inline float element(const void* p, cudaDataType t, size_t i, bool round_tf32) {
  if (t == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  const float x = static_cast<const float*>(p)[i];
  return round_tf32 ? tf32(x) : x;
}
}  // namespace ftx_emu

// Column-major C (m x n) = alpha op(A) op(B) + beta C.
inline cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType at, int lda, const void* B,
                                   cudaDataType bt, int ldb, const void* beta, void* C, cudaDataType ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (ct != CUDA_R_32F || (at == CUDA_R_16BF) != (bt == CUDA_R_16BF)) return CUBLAS_STATUS_NOT_SUPPORTED;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const bool tf = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  ftx_emu::enqueue([=] {
    float* c = static_cast<float*>(C);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int l = 0; l < k; ++l) {
          const size_t ai = ta == CUBLAS_OP_N ? size_t(l) * lda + i : size_t(i) * lda + l;
          const size_t bi = tb == CUBLAS_OP_N ? size_t(j) * ldb + l : size_t(l) * ldb + j;
          acc += ftx_emu::element(A, at, ai, tf) * ftx_emu::element(B, bt, bi, tf);
        }
        float& out = c[size_t(j) * ldc + i];
        out = al * acc + (be == 0.0f ? 0.0f : be * out);
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}
