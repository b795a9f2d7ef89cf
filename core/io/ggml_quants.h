// ggml tensor element types as GGUF files store them (ggml.h, ggml-common.h): the table of every type
// id ggml knows (name, elements per block, bytes per block), and dequantization of the types that
// Llama-family GGUF files use: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K. Each formula follows ggml's dequantize_row_* (src/ggml-quants.c) in ggml's
// order of float operations, and core/CMakeLists.txt builds this file with -ffp-contract=off, so the
// results equal gguf-py's gguf.quants.dequantize bit for bit (tests/test_gguf.cpp checks every type).
//
// Deliberately not here: quantizing (writing), dot products on quantized blocks, the i-quants and
// ternary types (their lookup grids; they are known by name and size only, and refused by
// dequantizable), big-endian data, the GGUF container (core/io/gguf.h).
#pragma once
#include <cstdint>
#include <string>

namespace ftx {

// ggml_type ids (ggml.h). Ids 4, 5, 31-33 and 36-38 were removed from ggml and are unknown here.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
};

struct GgmlTypeInfo {
  GgmlType type;
  const char* name;     // "Q4_K", as ggml and gguf-py spell it
  int64_t block_elems;  // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
  bool dequantizable;   // dequantize_row_* accepts it
};

// The row of `id`, or nullptr for an id ggml does not define (unknown or removed).
const GgmlTypeInfo* ggml_type_info(uint32_t id);
const GgmlTypeInfo& ggml_type_info(GgmlType t);
inline const char* ggml_type_name(GgmlType t) { return ggml_type_info(t).name; }
// "F32, F16, BF16, Q4_0, ..." (the dequantizable types, for error messages).
std::string ggml_dequantizable_names();

// IEEE binary16 -> binary32, exact (subnormals, infinities and NaN payloads included).
float ggml_f16_to_f32(uint16_t h);

// Dequantizes n elements (n a multiple of the type's block_elems; n / block_elems blocks at `src`,
// any alignment) into dst. The type must be dequantizable. Single-threaded: callers split rows.
void dequantize_row_f32(GgmlType type, const void* src, int64_t n, float* dst);
// The same, rounded to bf16 (round to nearest even, NaN kept quiet: ftx::fp32_to_bf16). BF16 data
// is copied as it is; every other type goes through the fp32 values above.
void dequantize_row_bf16(GgmlType type, const void* src, int64_t n, uint16_t* dst);

}  // namespace ftx
