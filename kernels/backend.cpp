// Backend by device name, for every front end (ftx's --device, the studio's Train form).
#include <charconv>
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace ftx {

const char* matmul_precision_name(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::Fp32: return "fp32";
    case MatmulPrecision::Tf32: return "tf32";
    case MatmulPrecision::Bf16: return "bf16";
  }
  return "?";
}

bool parse_matmul_precision(const std::string& name, MatmulPrecision* p) {
  for (MatmulPrecision q : {MatmulPrecision::Fp32, MatmulPrecision::Tf32, MatmulPrecision::Bf16})
    if (name == matmul_precision_name(q)) return *p = q, true;
  return false;
}

bool Backend::set_matmul_precision(MatmulPrecision p, std::string* why) {
  if (p == MatmulPrecision::Fp32) return true;
  *why = std::string(name()) + " computes GEMMs in fp32 only (" + matmul_precision_name(p) + " needs --device cuda)";
  return false;
}

std::unique_ptr<Backend> make_backend_for(const std::string& device, std::string* why) {
  if (device == "cpu") return make_cpu_backend();
  if (device == "cuda") return make_cuda_backend(0, why);
  if (device.rfind("cuda:", 0) == 0) {
    int index = -1;
    const char* first = device.data() + 5;
    const char* last = device.data() + device.size();
    const auto [end, ec] = std::from_chars(first, last, index);
    if (ec == std::errc() && end == last && first != last && index >= 0) return make_cuda_backend(index, why);
  }
  *why = "unknown device (expected cpu, cuda or cuda:N)";
  return nullptr;
}

}  // namespace ftx
