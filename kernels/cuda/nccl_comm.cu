// DeviceComm on NCCL (kernels/device_comm.h): one ncclComm_t per process, on the CUDA backend's
// device and stream. Built when CMake finds NCCL; tests/cuda_emu compiles this file against its
// stand-in nccl.h, which checks the calls.
#include <nccl.h>

#include <cstring>
#include <memory>
#include <string>

#include "kernels/cuda/cuda_common.h"
#include "kernels/device_comm.h"

namespace ftx {

namespace {

std::string nccl_words(ncclResult_t r) { return std::string(ncclGetErrorString(r)); }

class NcclComm final : public DeviceComm {
 public:
  NcclComm(ncclComm_t comm, cudaStream_t stream, int rank, int size)
      : comm_(comm), stream_(stream), rank_(rank), size_(size) {}
  ~NcclComm() override { ncclCommDestroy(comm_); }
  std::string engine() const override {
    int v = 0;
    ncclGetVersion(&v);  // major * 10000 + minor * 100 + patch since NCCL 2.9
    return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allreduce_sum(float* device_data, size_t n) override {
    if (n == 0) return {};
    const ncclResult_t r = ncclAllReduce(device_data, device_data, n, ncclFloat, ncclSum, comm_, stream_);
    if (r != ncclSuccess)
      return make_error("ncclAllReduce of " + std::to_string(n) + " floats on rank " + std::to_string(rank_) + " of " +
                        std::to_string(size_) + ": " + nccl_words(r));
    return {};
  }

 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
  int rank_, size_;
};

}  // namespace

bool nccl_built() { return true; }

Result<std::string> device_comm_id() {
  ncclUniqueId id;
  if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
    return make_error("ncclGetUniqueId: " + nccl_words(r));
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

Result<std::unique_ptr<DeviceComm>> make_device_comm(Backend& be, const std::string& id, int rank, int size) {
  const cuda::BackendHandles h = cuda::backend_handles(be);
  if (h.device < 0) return make_error(std::string("NCCL needs a CUDA backend, not ") + be.name());
  ncclUniqueId uid;
  if (id.size() != sizeof uid)
    return make_error("NCCL id of " + std::to_string(id.size()) + " bytes (expected " + std::to_string(sizeof uid) +
                      ")");
  std::memcpy(&uid, id.data(), sizeof uid);
  FTX_CUDA_CHECK(cudaSetDevice(h.device));
  ncclComm_t comm = nullptr;
  if (const ncclResult_t r = ncclCommInitRank(&comm, size, uid, rank); r != ncclSuccess)
    return make_error("ncclCommInitRank (rank " + std::to_string(rank) + " of " + std::to_string(size) + ", GPU " +
                      std::to_string(h.device) + "): " + nccl_words(r));
  return std::unique_ptr<DeviceComm>(std::make_unique<NcclComm>(comm, h.stream, rank, size));
}

}  // namespace ftx
