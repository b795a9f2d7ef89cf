// attention.cu and attention_tc.cu compiled for the CPU emulation (tests/cuda_emu/cuda_runtime.h).
#include "kernels/cuda/attention.cu"
#include "kernels/cuda/attention_tc.cu"
