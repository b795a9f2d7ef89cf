// cuda_backend.cu compiled for the CPU emulation: CudaBackend with the emulated runtime and cuBLAS
// (tests/cuda_emu), made by make_emulated_cuda_backend (the target renames it; see
// tests/CMakeLists.txt).
#include "kernels/cuda/cuda_backend.cu"
