// Philox4x32-10 counter-based generator (Salmon et al., SC'11), written once for host and device
// so that a seed gives the same codes and samples on CPU and CUDA (docs/design.md section 7).
// A draw is addressed by (seed, stream, index): no state to carry, resume is exact.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define FTX_HD __host__ __device__ __forceinline__
#else
#define FTX_HD inline
#endif

namespace ftx {

struct Philox4 {
  uint32_t v[4];
};

FTX_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

FTX_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, ctr.v[0], hi0, lo0);
    philox_mulhilo(kM1, ctr.v[2], hi1, lo1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// Four uint32 draws for block `index` of `stream` under `seed`.
FTX_HD Philox4 philox_block(uint64_t seed, uint64_t stream, uint64_t index) {
  Philox4 ctr{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), static_cast<uint32_t>(stream),
               static_cast<uint32_t>(stream >> 32)}};
  return philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Uniform in [0, 1) with 24 random bits (exactly representable in float).
FTX_HD float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  Philox4 r = philox_block(seed, stream, index >> 2);
  return static_cast<float>(r.v[index & 3] >> 8) * (1.0f / 16777216.0f);
}

// Streams: one per use, so draws never collide.
enum PhiloxStream : uint64_t {
  kStreamInit = 1ull << 40,    // + parameter tensor index
  kStreamData = 2ull << 40,    // + sequence index (datasets)
  kStreamLatent = 3ull << 40,  // + step (binary mapper bits during training)
  kStreamPrior = 4ull << 40,   // + seed-local counter (uniform codes)
  kStreamSample = 5ull << 40,  // + position (token sampling)
  kStreamEval = 6ull << 40,
  kStreamRoute = 7ull << 40,  // + layer (random routing's draws, under a seed derived from the forward's)
};

// Distinct 64-bit seeds from one base seed (Philox as a hash), e.g. one per sequence of a group.
inline uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b) {
  Philox4 r = philox_block(seed, kStreamEval + a, b);
  return (uint64_t(r.v[0]) << 32) | r.v[1];
}

}  // namespace ftx
