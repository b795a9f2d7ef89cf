// The CUDA backend's factory in a build without kernels/cuda (no nvcc at configure time): a
// request for it is a clear refusal, never a crash.
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/device_comm.h"

namespace ftx {

Result<std::unique_ptr<Backend>> make_cuda_backend(int /*device*/) {
  return make_error(
      "this build has no CUDA backend (nvcc was not found when it was configured; rebuild with the CUDA toolkit)");
}

bool cuda_backend_built() { return false; }

int cuda_device_count() { return 0; }

}  // namespace ftx
