// Element types of weights, and the weight argument of the GEMM-like ops (Backend::matmul_forward,
// matmul_backward, embedding_forward): a pointer with its dtype beside it, so that a model can read
// weights in the type they were stored in (bf16 from a mapped checkpoint) without an fp32 copy.
// Activations, gradients and optimizer state stay fp32; only weights carry a dtype.
//
// bf16 here is the upper half of an IEEE fp32 (1 sign, 8 exponent, 7 mantissa bits), held on the
// host as uint16_t. Conversion to bf16 rounds to nearest, ties to even, like __float2bfloat16 and
// PyTorch's .to(torch.bfloat16): overflow goes to Inf, NaN stays NaN (quiet). Widening is exact.
//
// C++17 (the CUDA files include it too), hence memcpy rather than std::bit_cast.
//
// Deliberately not here: fp16, quantised block types (the enum leaves room: a new type adds its
// element size and a path in each backend's matmul), conversions of whole buffers on a device.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/base/assert.h"

namespace ftx {

enum class DType : uint8_t { F32, BF16 };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
  }
  return "?";
}

// Bytes per element.
inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::BF16:
      return 2;
  }
  FT_ASSERT(false, "dtype_size: unknown dtype %d", int(t));
  return 0;
}

// x's bits (u) rounded to bf16, in the upper half (the lower half zero): to nearest, ties to even;
// overflow goes to Inf; a NaN stays a quiet NaN with its sign. No branch, so that the row loops
// below vectorise (the bf16 paths round whole operands with them).
inline uint32_t bf16_rounded_bits(uint32_t u) {
  const uint32_t nearest = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  const uint32_t quiet_nan = (u | 0x00400000u) & 0xFFFF0000u;
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : nearest;
}

// fp32 -> bf16.
inline uint16_t fp32_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return uint16_t(bf16_rounded_bits(u) >> 16);
}

// dst[i] = fp32_to_bf16(src[i]), for i < n.
inline void fp32_to_bf16(uint16_t* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, sizeof u);
    dst[i] = uint16_t(bf16_rounded_bits(u) >> 16);
  }
}

// dst[i] = src[i] rounded to bf16 and widened back (the value a bf16 operand has), for i < n; dst may
// be src.
inline void round_to_bf16(float* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, sizeof u);
    u = bf16_rounded_bits(u);
    std::memcpy(dst + i, &u, sizeof u);
  }
}

// bf16 -> fp32, exact.
inline float bf16_to_fp32(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// dst[i] = src[i] widened, for i < n (the loop every bf16 reader uses; it vectorises at -O3).
inline void bf16_to_fp32(float* dst, const uint16_t* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(src[i]);
}

// The weight operand of an op: ptr is backend memory holding elements of `dtype`, in the layout the
// op documents (nn.Linear [out, in] for a matmul, (V, C) for an embedding).
struct WeightRef {
  const void* ptr = nullptr;
  DType dtype = DType::F32;

  const float* f32() const {
    FT_ASSERT(dtype == DType::F32, "weight is %s where fp32 is required", dtype_name(dtype));
    return static_cast<const float*>(ptr);
  }
  const uint16_t* bf16() const {
    FT_ASSERT(dtype == DType::BF16, "weight is %s where bf16 is required", dtype_name(dtype));
    return static_cast<const uint16_t*>(ptr);
  }
};

inline WeightRef f32_weight(const float* p) { return WeightRef{p, DType::F32}; }
inline WeightRef bf16_weight(const uint16_t* p) { return WeightRef{p, DType::BF16}; }

}  // namespace ftx
