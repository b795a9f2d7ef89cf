// SHA-256 (FIPS 180-4) of a byte string or a file: the checkpoints table records the digest of
// every model.safetensors it points to, so a studio can tell a replaced file from the original.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/base/result.h"

namespace ftx {

std::string sha256_hex(const void* data, size_t n);
Result<std::string> sha256_file(const std::string& path);

}  // namespace ftx
