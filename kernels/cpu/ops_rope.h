// Rotary position embedding, Hugging Face half rotation (docs/design.md section 3), in place on
// x (B, T, nh, HS): dim i pairs with i + HS/2, angle = pos * inv_freq[i], pos = pos0 + t (or given
// per token: the _at forms, for a routed block's gathered tokens at their own positions). The
// frequencies (HS/2 floats, theta^(-2i/HS) with any scaling) come from the model (rope_inv_freq).
// The backward applies the inverse rotation (the transpose of a rotation).
//
// Numerics: angles, cos and sin are computed in double from the float frequencies for every T,
// then rounded to T, so float and double runs agree to float rounding (HF computes them in float32).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/base/assert.h"
#include "kernels/cpu/cpu_common.h"

namespace ftx::cpu {

constexpr int kRopeMaxHalf = 512;  // HS <= 1024

// cos and sin (times sign) of pos * inv_freq[i] for the half = HS/2 pairs, in double then rounded.
template <class T>
void rope_angles(T* cs, T* sn, int pos, const float* inv_freq, int half, double sign) {
  for (int i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * static_cast<double>(inv_freq[i]);
    cs[i] = static_cast<T>(std::cos(angle));
    sn[i] = static_cast<T>(sign * std::sin(angle));
  }
}

// The nh heads of one token (nh * HS values) rotated by the angles of rope_angles.
template <class T>
void rope_turn_heads(T* x, int nh, int HS, const T* cs, const T* sn) {
  const int half = HS / 2;
  for (int h = 0; h < nh; ++h) {
    T* row = x + size_t(h) * HS;
#pragma omp simd
    for (int i = 0; i < half; ++i) {
      const T x1 = row[i], x2 = row[i + half];
      row[i] = x1 * cs[i] - x2 * sn[i];
      row[i + half] = x2 * cs[i] + x1 * sn[i];
    }
  }
}

// x (B, T, nh, HS) rotated by +angle (sign = 1) or -angle (sign = -1). Token (b, t) sits at
// pos[b * T + t] when pos is given (rope_forward_at: tokens gathered from a longer sequence),
// else at pos0 + t.
template <class T>
void rope_rotate(T* x, int B, int Tn, int nh, int HS, int pos0, const int32_t* pos, const float* inv_freq,
                 double sign) {
  FT_ASSERT(HS % 2 == 0 && HS / 2 <= kRopeMaxHalf, "rope: head size %d", HS);
  const int half = HS / 2;
  const size_t token = size_t(nh) * HS;
  if (pos) {
#pragma omp parallel for schedule(static) if (go_parallel(size_t(B) * Tn * token))
    for (int64_t r = 0; r < int64_t{B} * Tn; ++r) {
      T cs[kRopeMaxHalf], sn[kRopeMaxHalf];
      rope_angles(cs, sn, pos[r], inv_freq, half, sign);
      rope_turn_heads(x + size_t(r) * token, nh, HS, cs, sn);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (go_parallel(size_t(B) * Tn * token))
  for (int t = 0; t < Tn; ++t) {
    T cs[kRopeMaxHalf], sn[kRopeMaxHalf];
    rope_angles(cs, sn, pos0 + t, inv_freq, half, sign);
    for (int b = 0; b < B; ++b) rope_turn_heads(x + (size_t(b) * Tn + t) * token, nh, HS, cs, sn);
  }
}

template <class T>
void rope_forward(T* x, int B, int Tn, int nh, int HS, int pos0, const float* inv_freq) {
  rope_rotate(x, B, Tn, nh, HS, pos0, nullptr, inv_freq, 1.0);
}

// dx (B, T, nh, HS) in place: the gradient of the rotation is the inverse rotation.
template <class T>
void rope_backward(T* dx, int B, int Tn, int nh, int HS, int pos0, const float* inv_freq) {
  rope_rotate(dx, B, Tn, nh, HS, pos0, nullptr, inv_freq, -1.0);
}

// The same at given positions pos (B, T).
template <class T>
void rope_forward_at(T* x, const int32_t* pos, int B, int Tn, int nh, int HS, const float* inv_freq) {
  rope_rotate(x, B, Tn, nh, HS, 0, pos, inv_freq, 1.0);
}
template <class T>
void rope_backward_at(T* dx, const int32_t* pos, int B, int Tn, int nh, int HS, const float* inv_freq) {
  rope_rotate(dx, B, Tn, nh, HS, 0, pos, inv_freq, -1.0);
}

// theta^(-2i/HS) for i < HS/2, rounded to float: the unscaled frequencies (tests, plain models).
inline std::vector<float> rope_default_inv_freq(double theta, int HS) {
  std::vector<float> f(size_t(HS / 2));
  for (int i = 0; i < HS / 2; ++i) f[size_t(i)] = static_cast<float>(std::pow(theta, -2.0 * i / HS));
  return f;
}

}  // namespace ftx::cpu
