// The CUDA backend's factory in a build without kernels/cuda (no nvcc at configure time): a
// request for it is a clear refusal, never a crash.
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace ftx {

std::unique_ptr<Backend> make_cuda_backend(int /*device*/, std::string* why) {
  *why = "this build has no CUDA backend (nvcc was not found when it was configured; rebuild with the CUDA toolkit)";
  return nullptr;
}

bool cuda_backend_built() { return false; }

}  // namespace ftx
