// step_graph.cu compiled for the CPU emulation (tests/cuda_emu/cuda_runtime.h: capture records,
// a graph launch replays).
#include "kernels/cuda/step_graph.cu"
