// latent.cu compiled for the CPU emulation (tests/cuda_emu/cuda_runtime.h).
#include "kernels/cuda/latent.cu"
