// A stand-in for NCCL's nccl.h, for kernels/cuda/nccl_comm.cu in the CPU emulation only (see
// cuda_runtime.h here). One process stands for one rank of a job whose other ranks are its mirror
// images: they hold the same data, so ncclAllReduce's sum is nranks times this rank's values.
// Every call is counted in emu_nccl_log(), so a test can check what the glue asked for: the
// communicator's size and rank, and each reduce's buffers, count, type, operation and stream; each
// reduce also goes in ftx_emu::stream_trace() (cuda_runtime.h) among the streams' event waits.
// What it cannot show: a real exchange between processes or GPUs (resources/gpu/on_device.sh).
#pragma once
#include <cstddef>
#include <cstring>
#include <string>

#include "cuda_runtime.h"

enum ncclResult_t { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5 };
enum ncclDataType_t { ncclFloat = 7 };
enum ncclRedOp_t { ncclSum = 0 };
struct ncclUniqueId {
  char internal[128];
};
struct EmuNcclComm {
  int nranks = 0, rank = 0;
};
using ncclComm_t = EmuNcclComm*;

struct EmuNcclLog {
  int ids = 0, inits = 0, destroys = 0, allreduces = 0, broadcasts = 0;
  int group_depth = 0;         // ncclGroupStart minus ncclGroupEnd
  int nranks = 0, rank = -1;   // of the last ncclCommInitRank
  const void* send = nullptr;  // of the last ncclAllReduce
  void* recv = nullptr;
  size_t count = 0;
  cudaStream_t stream = nullptr;
};
inline EmuNcclLog& emu_nccl_log() {
  static EmuNcclLog log;
  return log;
}

inline const char* ncclGetErrorString(ncclResult_t r) {
  return r == ncclSuccess ? "no error" : r == ncclInvalidUsage ? "invalid usage" : "invalid argument";
}
inline ncclResult_t ncclGetVersion(int* v) {
  *v = 22809;  // reads as "2.28.9", like the toolkit's
  return ncclSuccess;
}
inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, "emulated", 8);
  ++emu_nccl_log().ids;
  return ncclSuccess;
}
inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (nranks < 1 || rank < 0 || rank >= nranks || std::memcmp(id.internal, "emulated", 8) != 0)
    return ncclInvalidArgument;
  *comm = new EmuNcclComm{nranks, rank};
  EmuNcclLog& log = emu_nccl_log();
  ++log.inits, log.nranks = nranks, log.rank = rank;
  return ncclSuccess;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  ++emu_nccl_log().destroys;
  return ncclSuccess;
}
inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                  ncclComm_t comm, cudaStream_t stream) {
  if (type != ncclFloat || op != ncclSum || comm == nullptr) return ncclInvalidArgument;
  EmuNcclLog& log = emu_nccl_log();
  ++log.allreduces, log.send = send, log.recv = recv, log.count = count, log.stream = stream;
  ftx_emu::stream_trace().push_back("allreduce " + std::to_string(count) + " on " + ftx_emu::stream_name(stream));
  const float* in = static_cast<const float*>(send);
  float* out = static_cast<float*>(recv);
  for (size_t i = 0; i < count; ++i) out[i] = in[i] * float(comm->nranks);  // the mirrors' sum
  return ncclSuccess;
}
inline ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
  if (type != ncclFloat || comm == nullptr || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  ++emu_nccl_log().broadcasts;
  ftx_emu::stream_trace().push_back("broadcast " + std::to_string(count) + " from " + std::to_string(root) + " on " +
                                    ftx_emu::stream_name(stream) +
                                    (emu_nccl_log().group_depth > 0 ? " in a group" : ""));
  if (send != recv) std::memcpy(recv, send, count * sizeof(float));  // the root is a mirror of this rank
  return ncclSuccess;
}
inline ncclResult_t ncclGroupStart() {
  ++emu_nccl_log().group_depth;
  return ncclSuccess;
}
inline ncclResult_t ncclGroupEnd() { return --emu_nccl_log().group_depth < 0 ? ncclInvalidUsage : ncclSuccess; }
