// The device communicator in a build without NCCL (kernels/device_comm.h): a clear refusal.
#include <memory>
#include <string>

#include "kernels/device_comm.h"

namespace ftx {

bool nccl_built() { return false; }

Result<std::string> device_comm_id() { return make_error("this build has no NCCL"); }

Result<std::unique_ptr<DeviceComm>> make_device_comm(Backend&, const std::string&, int, int) {
  return make_error(
      "this build has no NCCL (CMake found no nccl.h and libnccl with the CUDA toolkit; the gradients go through "
      "the host and MPI instead)");
}

}  // namespace ftx
