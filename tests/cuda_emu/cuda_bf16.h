// bf16 for test_cuda_emu: round to nearest even, like __float2bfloat16 (finite inputs).
#pragma once
#include <cstdint>
#include <cstring>
struct __nv_bfloat16 {
  uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return __nv_bfloat16{uint16_t(u >> 16)};
}
inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t u = uint32_t(b.bits) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
