// The few cuBLAS names kernels/cuda/cuda_common.h mentions (test_cuda_emu never calls cuBLAS).
#pragma once
#include "cuda_runtime.h"
using cublasHandle_t = void*;
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0 };
