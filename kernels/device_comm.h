// DeviceComm: the GPU side of a data-parallel job (issue 26, docs/distributed.md). It sums a float
// buffer that lives in one backend's device memory over the ranks of the job, whole or in buckets
// overlapped with the backward, and gathers ZeRO-1's slices, through NCCL
// (kernels/cuda/nccl_comm.cu), as llm.c does. Built
// when CMake finds CUDA and NCCL (FTX_HAVE_NCCL); elsewhere nccl_built() is false and
// make_device_comm says why.
// Not here: the processes (core/dist/comm.h); the unique id that joins the ranks travels over that
// host communicator, which this layer does not know: rank 0 makes it (device_comm_id) and the
// caller broadcasts it before every rank calls make_device_comm.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/base/result.h"

namespace ftx {

class DeviceComm {
 public:
  virtual ~DeviceComm() = default;
  virtual std::string engine() const = 0;  // "NCCL 2.28.9"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place, queued on the backend's stream: every rank's data becomes the sum over the ranks.
  virtual Status allreduce_sum(float* device_data, size_t n) = 0;
  // The same sum, overlapped with what the backend queues next (the buckets of a backward): it
  // runs on the communicator's own stream once the work queued so far on the backend's stream is
  // done, so `device_data` must not be written again before finish_allreduces(). That call makes
  // the backend's stream wait for every sum started; the host does not wait.
  virtual Status start_allreduce_sum(float* device_data, size_t n) = 0;
  virtual Status finish_allreduces() = 0;
  // In place, queued on the backend's stream: block q, counts[q] floats following blocks 0..q-1,
  // is rank q's, and afterwards every rank holds every block (ZeRO-1's updated slices). The blocks
  // may differ in size (NCCL: one broadcast from each rank, grouped).
  virtual Status allgather_blocks(float* device_data, const std::vector<size_t>& counts) = 0;
};

// Whether this build has NCCL.
bool nccl_built();

// A new id for one communicator (NCCL's unique id, 128 bytes), made by rank 0 alone.
Result<std::string> device_comm_id();

// This process's member `rank` of `size` of the communicator named by `id`, on the device of
// `be`: every rank calls it with the same id. Errors: `be` is not a CUDA backend; no NCCL in this
// build; NCCL refusing (two ranks on one GPU, a lost peer), with NCCL's own words.
Result<std::unique_ptr<DeviceComm>> make_device_comm(Backend& be, const std::string& id, int rank, int size);

// How many CUDA GPUs this process sees: 0 without CUDA or without a GPU. A job's ranks on one host
// take one each, by local rank.
int cuda_device_count();

}  // namespace ftx
