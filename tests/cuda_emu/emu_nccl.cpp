// nccl_comm.cu compiled for the CPU emulation, against the stand-in nccl.h here: DeviceComm on the
// emulated CudaBackend, made by make_emulated_device_comm (the target renames it; see
// tests/CMakeLists.txt).
#include "kernels/cuda/nccl_comm.cu"
