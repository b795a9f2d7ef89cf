// ggml block types: the type table and the dequantization loops (see ggml_quants.h). Each block
// function is one ggml dequantize_row_* body for one block, in ggml's order of float operations;
// this file is compiled with -ffp-contract=off (core/CMakeLists.txt) so that no multiply-add is
// fused and the results equal gguf-py's NumPy ones exactly. Multi-byte fields are read with memcpy
// (blocks have no alignment in a GGUF file) and are little-endian.
#include "core/io/ggml_quants.h"

#include <bit>
#include <cstring>

#include "kernels/base/assert.h"
#include "kernels/base/dtype.h"

namespace ftx {

static_assert(std::endian::native == std::endian::little, "GGUF blocks are little-endian");

namespace {

constexpr GgmlTypeInfo kTypes[] = {
    {GgmlType::F32, "F32", 1, 4, true},
    {GgmlType::F16, "F16", 1, 2, true},
    {GgmlType::Q4_0, "Q4_0", 32, 18, true},
    {GgmlType::Q4_1, "Q4_1", 32, 20, true},
    {GgmlType::Q5_0, "Q5_0", 32, 22, true},
    {GgmlType::Q5_1, "Q5_1", 32, 24, true},
    {GgmlType::Q8_0, "Q8_0", 32, 34, true},
    {GgmlType::Q8_1, "Q8_1", 32, 40, false},
    {GgmlType::Q2_K, "Q2_K", 256, 84, true},
    {GgmlType::Q3_K, "Q3_K", 256, 110, true},
    {GgmlType::Q4_K, "Q4_K", 256, 144, true},
    {GgmlType::Q5_K, "Q5_K", 256, 176, true},
    {GgmlType::Q6_K, "Q6_K", 256, 210, true},
    {GgmlType::Q8_K, "Q8_K", 256, 292, false},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66, false},
    {GgmlType::IQ2_XS, "IQ2_XS", 256, 74, false},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98, false},
    {GgmlType::IQ1_S, "IQ1_S", 256, 50, false},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18, false},
    {GgmlType::IQ3_S, "IQ3_S", 256, 110, false},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82, false},
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136, false},
    {GgmlType::I8, "I8", 1, 1, false},
    {GgmlType::I16, "I16", 1, 2, false},
    {GgmlType::I32, "I32", 1, 4, false},
    {GgmlType::I64, "I64", 1, 8, false},
    {GgmlType::F64, "F64", 1, 8, false},
    {GgmlType::IQ1_M, "IQ1_M", 256, 56, false},
    {GgmlType::BF16, "BF16", 1, 2, true},
    {GgmlType::TQ1_0, "TQ1_0", 256, 54, false},
    {GgmlType::TQ2_0, "TQ2_0", 256, 66, false},
    {GgmlType::MXFP4, "MXFP4", 32, 17, false},
    {GgmlType::NVFP4, "NVFP4", 64, 36, false},
    {GgmlType::Q1_0, "Q1_0", 128, 18, false},
};

inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t bits_from_f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return ggml_f16_to_f32(h);
}

// Blocks of 32 (ggml-common.h; low nibble of qs[j] is element j, the high nibble element j + 16).
void block_q4_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = float((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = float((qs[j] >> 4) - 8) * d;
  }
}

void block_q4_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = float(qs[j] & 0x0F) * d + m;
    y[j + 16] = float(qs[j] >> 4) * d + m;
  }
}

void block_q5_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, sizeof qh);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int x0 = (qs[j] & 0x0F) | int(((qh >> j) & 1u) << 4);
    const int x1 = (qs[j] >> 4) | int(((qh >> (j + 16)) & 1u) << 4);
    y[j] = float(x0 - 16) * d;
    y[j + 16] = float(x1 - 16) * d;
  }
}

void block_q5_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, sizeof qh);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int x0 = (qs[j] & 0x0F) | int(((qh >> j) & 1u) << 4);
    const int x1 = (qs[j] >> 4) | int(((qh >> (j + 16)) & 1u) << 4);
    y[j] = float(x0) * d + m;
    y[j + 16] = float(x1) * d + m;
  }
}

void block_q8_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = float(qs[j]) * d;
}

// K-quants, 256 elements per block.
void block_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;  // 16 bytes: low nibble scale, high nibble min, per 16 elements
  const uint8_t* q = b + 16;  // 64 bytes, four 2-bit values each
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * float(sc & 0x0F), ml = dmin * float(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * float((q[l + 16 * half] >> shift) & 3) - ml;
      }
    }
    q += 32;
  }
}

void block_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;       // 32 bytes: bit set = no -4 offset
  const uint8_t* q = b + 32;   // 64 bytes of 2-bit values
  const uint8_t* sb = b + 96;  // 12 bytes of packed 6-bit scales
  const float d_all = f16_at(b + 108);
  // ggml's aux[] unpacking of the 16 scales (kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f).
  uint32_t aux[4];
  std::memcpy(aux, sb, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & 0x0f0f0f0fu) | (((tmp >> 4) & 0x03030303u) << 4);
  aux[3] = ((aux[1] >> 4) & 0x0f0f0f0fu) | (((tmp >> 6) & 0x03030303u) << 4);
  aux[0] = (aux[0] & 0x0f0f0f0fu) | (((tmp >> 0) & 0x03030303u) << 4);
  aux[1] = (aux[1] & 0x0f0f0f0fu) | (((tmp >> 2) & 0x03030303u) << 4);
  int8_t scales[16];
  std::memcpy(scales, aux, 16);
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * float(scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          const int k = l + 16 * half;
          *y++ = dl * float(((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
        }
      }
      m = uint8_t(m << 1);
    }
    q += 32;
  }
}

// ggml's get_scale_min_k4: 6-bit scale and min of sub-block j from the 12 packed bytes.
inline void scale_min_k4(int j, const uint8_t* s, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void block_q4_k(const uint8_t* b, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int g = 0; g < 4; ++g) {  // 64 elements per group: two sub-blocks
    int sc, mn;
    scale_min_k4(2 * g, scales, &sc, &mn);
    const float d1 = d * float(sc), m1 = dmin * float(mn);
    scale_min_k4(2 * g + 1, scales, &sc, &mn);
    const float d2 = d * float(sc), m2 = dmin * float(mn);
    for (int l = 0; l < 32; ++l) y[l] = d1 * float(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) y[l + 32] = d2 * float(q[l] >> 4) - m2;
    y += 64;
    q += 32;
  }
}

void block_q5_k(const uint8_t* b, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  for (int g = 0; g < 4; ++g) {
    int sc, mn;
    scale_min_k4(2 * g, scales, &sc, &mn);
    const float d1 = d * float(sc), m1 = dmin * float(mn);
    scale_min_k4(2 * g + 1, scales, &sc, &mn);
    const float d2 = d * float(sc), m2 = dmin * float(mn);
    const int u1 = 1 << (2 * g), u2 = 2 << (2 * g);
    for (int l = 0; l < 32; ++l) y[l] = d1 * float((ql[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) y[l + 32] = d2 * float((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    y += 64;
    ql += 32;
  }
}

void block_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16_at(b + 208);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * float(sc[is]) * float(q1);
      y[l + 32] = d * float(sc[is + 2]) * float(q2);
      y[l + 64] = d * float(sc[is + 4]) * float(q3);
      y[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

// A block type as template constants, so that each loop below inlines its block body.
template <BlockFn Fn, int64_t Elems, int64_t Bytes>
struct Blocks {
  static void run(const uint8_t* b, float* y) { Fn(b, y); }
  static constexpr int64_t elems = Elems, bytes = Bytes;
};

// Calls visit(Blocks<...>{}) for a quantized type; false for the plain types (F32, F16, BF16).
template <class Visit>
bool visit_blocks(GgmlType t, Visit&& visit) {
  switch (t) {
    case GgmlType::Q4_0:
      return visit(Blocks<block_q4_0, 32, 18>{}), true;
    case GgmlType::Q4_1:
      return visit(Blocks<block_q4_1, 32, 20>{}), true;
    case GgmlType::Q5_0:
      return visit(Blocks<block_q5_0, 32, 22>{}), true;
    case GgmlType::Q5_1:
      return visit(Blocks<block_q5_1, 32, 24>{}), true;
    case GgmlType::Q8_0:
      return visit(Blocks<block_q8_0, 32, 34>{}), true;
    case GgmlType::Q2_K:
      return visit(Blocks<block_q2_k, 256, 84>{}), true;
    case GgmlType::Q3_K:
      return visit(Blocks<block_q3_k, 256, 110>{}), true;
    case GgmlType::Q4_K:
      return visit(Blocks<block_q4_k, 256, 144>{}), true;
    case GgmlType::Q5_K:
      return visit(Blocks<block_q5_k, 256, 176>{}), true;
    case GgmlType::Q6_K:
      return visit(Blocks<block_q6_k, 256, 210>{}), true;
    default:
      return false;
  }
}

void plain_f32(GgmlType t, const uint8_t* src, int64_t n, float* dst) {
  switch (t) {
    case GgmlType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_at(src + 2 * i);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_fp32(h);
      }
      return;
    default:
      FT_ASSERT(false, "plain_f32: %s is not a plain type", ggml_type_name(t));
  }
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const auto& r : kTypes)
    if (uint32_t(r.type) == id) return &r;
  return nullptr;
}

const GgmlTypeInfo& ggml_type_info(GgmlType t) {
  const GgmlTypeInfo* r = ggml_type_info(uint32_t(t));
  FT_ASSERT(r, "unknown GgmlType %u", unsigned(t));
  return *r;
}

std::string ggml_dequantizable_names() {
  std::string s;
  for (const auto& r : kTypes)
    if (r.dequantizable) s += (s.empty() ? "" : ", ") + std::string(r.name);
  return s;
}

// The FP16 library's branch-free conversion (as ggml's fallback without F16C): normal numbers by
// rebiasing the exponent and one multiply, subnormals by a magic subtraction; both exact.
float ggml_f16_to_f32(uint16_t h) {
  const uint32_t w = uint32_t(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = f32_from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t bits = two_w < (1u << 27) ? bits_from_f32(denormalized) : bits_from_f32(normalized);
  return f32_from_bits(sign | bits);
}

static void check_row(const char* fn, GgmlType type, int64_t n) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  FT_ASSERT(info.dequantizable, "%s: %s cannot be dequantized", fn, info.name);
  FT_ASSERT(n >= 0 && n % info.block_elems == 0, "%s: %lld elements is not a whole number of %s blocks", fn,
            static_cast<long long>(n), info.name);
}

void dequantize_row_f32(GgmlType type, const void* src_v, int64_t n, float* dst) {
  check_row("dequantize_row_f32", type, n);
  const auto* src = static_cast<const uint8_t*>(src_v);
  const bool quantized = visit_blocks(type, [&](auto k) {
    using K = decltype(k);
    for (int64_t i = 0; i < n / K::elems; ++i) K::run(src + i * K::bytes, dst + i * K::elems);
  });
  if (!quantized) plain_f32(type, src, n, dst);
}

void dequantize_row_bf16(GgmlType type, const void* src_v, int64_t n, uint16_t* dst) {
  check_row("dequantize_row_bf16", type, n);
  const auto* src = static_cast<const uint8_t*>(src_v);
  if (type == GgmlType::BF16) {
    std::memcpy(dst, src, size_t(n) * 2);
    return;
  }
  // Through fp32 in chunks of 256 elements (one K-quant block, eight 32-element blocks) so that
  // the staging buffer stays in L1; n is a whole number of blocks, so every chunk is too.
  constexpr int64_t kChunk = 256;
  float buf[kChunk];
  auto to_bf16 = [&](int64_t i, int64_t m) { fp32_to_bf16(dst + i, buf, size_t(m)); };
  const bool quantized = visit_blocks(type, [&](auto k) {
    using K = decltype(k);
    for (int64_t i = 0; i < n; i += kChunk) {
      const int64_t m = n - i < kChunk ? n - i : kChunk;
      const uint8_t* s = src + i / K::elems * K::bytes;
      for (int64_t b = 0; b < m / K::elems; ++b) K::run(s + b * K::bytes, buf + b * K::elems);
      to_bf16(i, m);
    }
  });
  if (quantized) return;
  const int64_t elem_bytes = ggml_type_info(type).block_bytes;
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = n - i < kChunk ? n - i : kChunk;
    plain_f32(type, src + i * elem_bytes, m, buf);
    to_bf16(i, m);
  }
}

}  // namespace ftx
