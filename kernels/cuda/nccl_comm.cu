// DeviceComm on NCCL (kernels/device_comm.h): one ncclComm_t per process, on the CUDA backend's
// device. Whole sums go in the backend's stream; overlapped ones in a second stream of ours, joined
// to the backend's by events (ready: the gradients so far are written; done: every sum started is
// complete), as PyTorch's DDP and llm.c do. Built when CMake finds NCCL; tests/cuda_emu compiles
// this file against its stand-in nccl.h, which checks the calls and their stream order.
#include <nccl.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_common.h"
#include "kernels/device_comm.h"

namespace ftx {

namespace {

std::string nccl_words(ncclResult_t r) { return std::string(ncclGetErrorString(r)); }

class NcclComm final : public DeviceComm {
 public:
  NcclComm(ncclComm_t comm, cudaStream_t stream, int rank, int size)
      : comm_(comm), stream_(stream), rank_(rank), size_(size) {
    FTX_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    FTX_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    FTX_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclComm() override {
    cudaStreamSynchronize(side_);
    ncclCommDestroy(comm_);
    cudaEventDestroy(done_);
    cudaEventDestroy(ready_);
    cudaStreamDestroy(side_);
  }
  std::string engine() const override {
    int v = 0;
    ncclGetVersion(&v);  // major * 10000 + minor * 100 + patch since NCCL 2.9
    return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allreduce_sum(float* device_data, size_t n) override { return sum_in(stream_, device_data, n); }
  Status start_allreduce_sum(float* device_data, size_t n) override {
    if (n == 0) return {};
    FTX_CUDA_CHECK(cudaEventRecord(ready_, stream_));  // after the writes queued so far
    FTX_CUDA_CHECK(cudaStreamWaitEvent(side_, ready_, 0));
    started_ = true;
    return sum_in(side_, device_data, n);
  }
  Status finish_allreduces() override {
    if (!started_) return {};
    FTX_CUDA_CHECK(cudaEventRecord(done_, side_));
    FTX_CUDA_CHECK(cudaStreamWaitEvent(stream_, done_, 0));
    started_ = false;
    return {};
  }

  Status allgather_blocks(float* device_data, const std::vector<size_t>& counts) override {
    if (counts.size() != size_t(size_))
      return make_error("allgather of " + std::to_string(counts.size()) + " blocks in a job of " +
                        std::to_string(size_) + " ranks");
    ncclResult_t r = ncclGroupStart();
    size_t at = 0;
    for (int q = 0; q < size_ && r == ncclSuccess; ++q) {
      if (counts[size_t(q)] > 0)
        r = ncclBroadcast(device_data + at, device_data + at, counts[size_t(q)], ncclFloat, q, comm_, stream_);
      at += counts[size_t(q)];
    }
    const ncclResult_t end = ncclGroupEnd();  // closes the group even after a failed call
    if (r == ncclSuccess) r = end;
    if (r != ncclSuccess)
      return make_error("the allgather of " + std::to_string(std::accumulate(counts.begin(), counts.end(), size_t(0))) +
                        " floats (grouped ncclBroadcast) on rank " + std::to_string(rank_) + " of " +
                        std::to_string(size_) + ": " + nccl_words(r));
    return {};
  }

 private:
  Status sum_in(cudaStream_t stream, float* device_data, size_t n) {
    if (n == 0) return {};
    const ncclResult_t r = ncclAllReduce(device_data, device_data, n, ncclFloat, ncclSum, comm_, stream);
    if (r != ncclSuccess)
      return make_error("ncclAllReduce of " + std::to_string(n) + " floats on rank " + std::to_string(rank_) + " of " +
                        std::to_string(size_) + ": " + nccl_words(r));
    return {};
  }

  ncclComm_t comm_;
  cudaStream_t stream_;          // the backend's
  cudaStream_t side_ = nullptr;  // the overlapped sums'
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  bool started_ = false;  // a sum is in side_ that the backend's stream has not waited for
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
