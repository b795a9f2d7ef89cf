// ops.cu compiled for the CPU emulation (tests/cuda_emu/cuda_runtime.h).
#include "kernels/cuda/ops.cu"
