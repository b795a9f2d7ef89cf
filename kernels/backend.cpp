// Backend by device name, for every front end (ftx's --device, the studio's Train form).
#include <charconv>
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace ftx {

const char* matmul_precision_name(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::Fp32:
      return "fp32";
    case MatmulPrecision::Tf32:
      return "tf32";
    case MatmulPrecision::Bf16:
      return "bf16";
  }
  return "?";
}

Result<MatmulPrecision> parse_matmul_precision(const std::string& name) {
  for (MatmulPrecision q : {MatmulPrecision::Fp32, MatmulPrecision::Tf32, MatmulPrecision::Bf16})
    if (name == matmul_precision_name(q)) return q;
  return make_error("unknown GEMM precision '" + name + "' (expected fp32, tf32 or bf16)");
}

Status Backend::set_matmul_precision(MatmulPrecision p) {
  if (p == MatmulPrecision::Fp32) return {};
  return make_error(std::string(name()) + " computes GEMMs in fp32 only (" + matmul_precision_name(p) +
                    " needs a CUDA device)");
}

Result<std::unique_ptr<Backend>> make_backend_for(const std::string& device) {
  if (device == "cpu") return make_cpu_backend();
  if (device == "cuda") return make_cuda_backend(0);
  if (device.rfind("cuda:", 0) == 0) {
    int index = -1;
    const char* first = device.data() + 5;
    const char* last = device.data() + device.size();
    const auto [end, ec] = std::from_chars(first, last, index);
    if (ec == std::errc() && end == last && first != last && index >= 0) return make_cuda_backend(index);
  }
  return make_error("unknown device '" + device + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace ftx
