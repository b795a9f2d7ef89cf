// WMMA for test_cuda_emu at the level of whole matrices: every lane of a warp holds the full
// 16 x 16 fragment and computes the whole product; lane 0 alone stores (the kernels put a
// __syncwarp between a store and the loads that read it, as they must on a GPU).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulation has 16 x 16 x 16 fragments only");
  float x[16][16];
};

// WMMA's rules for load_matrix_sync / store_matrix_sync: a 256-bit aligned pointer, and a leading
// dimension that is a multiple of 16 bytes (8 bf16, 4 floats).
template <class T>
void check_wmma_operand(const T* p, unsigned ldm) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * sizeof(T)) % 16 != 0) {
    std::fprintf(stderr, "WMMA operand breaks the alignment rules: pointer %p, ldm %u\n", static_cast<const void*>(p),
                 ldm);
    std::abort();
  }
}

inline float to_float(float v) { return v; }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Element (r, c) of the fragment's matrix, row-major in memory or column-major.
template <class Use, class T, class L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
  check_wmma_operand(p, ldm);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r][c] = to_float(std::is_same_v<L, row_major> ? p[r * ldm + c] : p[c * ldm + r]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t l) {
  check_wmma_operand(p, ldm);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r][c] = l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
  check_wmma_operand(p, ldm);
  if (ftx_emu::linear_thread() % 32 != 0) return;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) (l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r][c];
}
template <class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  float t[16][16];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float s = c.x[r][n];
      for (int k = 0; k < 16; ++k) s += a.x[r][k] * b.x[k][n];
      t[r][n] = s;
    }
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) d.x[r][n] = t[r][n];
}
template <class F>
void fill_fragment(F& f, float v) {
  for (auto& row : f.x)
    for (float& e : row) e = v;
}
}  // namespace nvcuda::wmma
