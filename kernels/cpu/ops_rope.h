// Rotary position embedding, Hugging Face half rotation (docs/design.md section 3), in place on
// x (B, T, nh, HS): dim i pairs with i + HS/2, angle = pos * inv_freq[i], pos = pos0 + t (or given
// per token: the _at forms, for a routed block's gathered tokens at their own positions). The
// frequencies (HS/2 floats, theta^(-2i/HS) with any scaling) come from the model (rope_inv_freq).
// The backward applies the inverse rotation (the transpose of a rotation).
//
// Numerics: angles, cos and sin are computed in double from the float frequencies for every T,
// then rounded to T, so float and double runs agree to float rounding (HF computes them in float32).
// They are computed once per position and kept (RopeTable); the backward negates the sines, which
// is what computing sin(-angle) gives (rounding is symmetric).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/base/assert.h"
#include "kernels/cpu/cpu_common.h"

namespace ftx::cpu {

constexpr int kRopeMaxHalf = 512;  // HS <= 1024
// Positions a RopeTable holds at most (8 MiB of float tables at HS = 64).
constexpr int kRopeTableMaxPositions = 1 << 16;

// cos and sin (times sign) of pos * inv_freq[i] for the half = HS/2 pairs, in double then rounded.
template <class T>
void rope_angles(T* cs, T* sn, int pos, const float* inv_freq, int half, double sign) {
  for (int i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * static_cast<double>(inv_freq[i]);
    cs[i] = static_cast<T>(std::cos(angle));
    sn[i] = static_cast<T>(sign * std::sin(angle));
  }
}

// The nh heads of one token (nh * HS values) rotated by the angles of rope_angles, the sines times
// sign (+1 or -1: exact).
template <class T>
void rope_turn_heads(T* x, int nh, int HS, const T* cs, const T* sn, T sign) {
  const int half = HS / 2;
  for (int h = 0; h < nh; ++h) {
    T* row = x + size_t(h) * HS;
#pragma omp simd
    for (int i = 0; i < half; ++i) {
      const T x1 = row[i], x2 = row[i + half], s = sn[i] * sign;
      row[i] = x1 * cs[i] - x2 * s;
      row[i + half] = x2 * cs[i] + x1 * s;
    }
  }
}

// The cos and sin of rope_angles (sign +1) for positions 0..n-1 of one set of frequencies, kept by
// the calling thread across calls: a prompt's RoPE computed 2 x 512 x 32 sincos in double a layer
// (a fifth of a millisecond per call at SmolLM2's size). Rebuilt when the frequencies change, grown
// when a position is past its end; the values are those rope_angles gives, so the bits are too.
template <class T>
struct RopeTable {
  std::vector<float> freq;  // the frequencies it was made for
  std::vector<T> cs, sn;    // (n, half)
  int n = 0;

  // The table for inv_freq covering positions < end.
  static const RopeTable& get(const float* inv_freq, int half, int end) {
    thread_local RopeTable t;
    if (int(t.freq.size()) != half || std::memcmp(t.freq.data(), inv_freq, sizeof(float) * size_t(half)) != 0) {
      t.freq.assign(inv_freq, inv_freq + half);
      t.n = 0;
    }
    if (end > t.n) {
      const int from = t.n;
      t.n = std::max(end, std::min(2 * t.n, kRopeTableMaxPositions));
      t.cs.resize(size_t(t.n) * half);
      t.sn.resize(size_t(t.n) * half);
      for (int p = from; p < t.n; ++p) {
        rope_angles(t.cs.data() + size_t(p) * half, t.sn.data() + size_t(p) * half, p, inv_freq, half, 1.0);
      }
    }
    return t;
  }
};

// x (B, T, nh, HS) rotated by +angle (sign = 1) or -angle (sign = -1). Token (b, t) sits at
// pos[b * T + t] when pos is given (rope_forward_at: tokens gathered from a longer sequence),
// else at pos0 + t. Angles come from the calling thread's RopeTable, computed directly for
// positions outside [0, kRopeTableMaxPositions).
template <class T>
void rope_rotate(T* x, int B, int Tn, int nh, int HS, int pos0, const int32_t* pos, const float* inv_freq,
                 double sign) {
  FT_ASSERT(HS % 2 == 0 && HS / 2 <= kRopeMaxHalf, "rope: head size %d", HS);
  const int half = HS / 2;
  const size_t token = size_t(nh) * HS;
  const int64_t rows = int64_t{B} * Tn;
  if (rows <= 0) return;
  int lo = pos0, hi = pos0 + Tn - 1;
  if (pos) {
    lo = hi = pos[0];
    for (int64_t r = 1; r < rows; ++r) lo = std::min(lo, pos[r]), hi = std::max(hi, pos[r]);
  }
  const bool tabled = lo >= 0 && hi < kRopeTableMaxPositions;
  const RopeTable<T>* table = tabled ? &RopeTable<T>::get(inv_freq, half, hi + 1) : nullptr;
  // Turns the nh heads of the token at xt by position p.
  const auto turn = [&](T* xt, int p) {
    if (table != nullptr) {
      const size_t at = size_t(p) * half;
      return rope_turn_heads(xt, nh, HS, table->cs.data() + at, table->sn.data() + at, T(sign));
    }
    T cs[kRopeMaxHalf], sn[kRopeMaxHalf];
    rope_angles(cs, sn, p, inv_freq, half, 1.0);
    rope_turn_heads(xt, nh, HS, cs, sn, T(sign));
  };
  if (pos) {
#pragma omp parallel for schedule(static) if (go_parallel(size_t(rows) * token))
    for (int64_t r = 0; r < rows; ++r) turn(x + size_t(r) * token, pos[r]);
    return;
  }
  // Tokens in memory order, each thread a contiguous range (was: positions outer, which walked
  // the batch rows T tokens apart).
#pragma omp parallel for schedule(static) if (go_parallel(size_t(rows) * token))
  for (int64_t r = 0; r < rows; ++r) turn(x + size_t(r) * token, pos0 + int(r % Tn));
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
