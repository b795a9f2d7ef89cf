// Scaled dot-product attention with GQA, causal or not, for training (Tq == Tk) and for the KV
// cache (Tq new queries at absolute positions q_pos0.., keys 0..Tk-1). Geometry: AttnShape in
// kernels/backend.h. The forward stores the probabilities att (B, NH, Tq, Tk) for the backward;
// masked entries are written as 0 and never computed (causal masking by loop bounds).
//
// Parallel over (b, kv head): the query heads of one GQA group share a task, so the backward's
// dk/dv accumulation never races and the keys/values are transposed once per group.
// Numerics: scores are (scale*q).k in T; softmax subtracts the row max; exp is exp_nonpos.
// Deliberately not here: flash-style tiling (T is about 66 here), dropout, ALiBi or other biases.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "kernels/backend.h"
#include "kernels/common.h"
#include "kernels/cpu/cpu_common.h"

namespace ftx::cpu {

// Keys visible to query row i: all Tk, or j <= q_pos0 + i when causal.
inline int attn_visible(const AttnShape& s, int i) {
  return s.causal ? std::min(s.Tk, s.q_pos0 + i + 1) : s.Tk;
}

// dst (HS, Tk) = the Tk rows of src with row stride `stride`, transposed.
template <class T>
void attn_transpose(T* dst, const T* src, int Tk, int HS, size_t stride) {
  for (int j = 0; j < Tk; ++j) {
    const T* row = src + j * stride;
    for (int d = 0; d < HS; ++d) dst[size_t(d) * Tk + j] = row[d];
  }
}

// score[j] = sum_d qs[d] * kT[d, j] for j < jn; kT (HS, Tk)
template <class T>
void attn_scores(T* score, const T* qs, const T* kT, int jn, int Tk, int HS) {
  for (int j = 0; j < jn; ++j) score[j] = T(0);
  for (int d = 0; d < HS; ++d) {
    const T qd = qs[d];
    const T* kd = kT + size_t(d) * Tk;
#pragma omp simd
    for (int j = 0; j < jn; ++j) score[j] += qd * kd[j];
  }
}

// One query row: probabilities into a (Tk), output into o (HS).
template <class T>
void attn_forward_row(T* o, T* a, T* score, const T* qi, const T* kT, const T* v_base,
                      const AttnShape& s, int jn, T scale) {
  const int HS = s.HS;
  T qs[1024];  // scaled query, HS <= 1024 (asserted by the caller)
  for (int d = 0; d < HS; ++d) qs[d] = qi[d] * scale;
  attn_scores(score, qs, kT, jn, s.Tk, HS);
  T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < jn; ++j) mx = std::max(mx, score[j]);
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < jn; ++j) {
    score[j] = exp_nonpos<T>(score[j] - mx);
    sum += score[j];
  }
  const T inv = T(1) / sum;
  for (int j = 0; j < jn; ++j) a[j] = score[j] * inv;
  for (int j = jn; j < s.Tk; ++j) a[j] = T(0);
  for (int d = 0; d < HS; ++d) o[d] = T(0);
  const size_t v_stride = size_t(s.NKV) * HS;
  for (int j = 0; j < jn; ++j) {
    const T pj = a[j];
    const T* vj = v_base + j * v_stride;
#pragma omp simd
    for (int d = 0; d < HS; ++d) o[d] += pj * vj[d];
  }
}

// out (B, Tq, NH, HS), att (B, NH, Tq, Tk); q (B, Tq, NH, HS); k, v (B, Tk_cap, NKV, HS)
template <class T>
void attention_forward(T* out, T* att, const T* q, const T* k, const T* v, const AttnShape& s) {
  FT_ASSERT(s.NKV > 0 && s.NH % s.NKV == 0 && s.HS <= 1024 && s.Tk >= 1 && s.Tk <= s.Tk_cap,
            "attention: NH %d NKV %d HS %d Tk %d Tk_cap %d", s.NH, s.NKV, s.HS, s.Tk, s.Tk_cap);
  const int group = s.NH / s.NKV;
  const T scale = T(1) / std::sqrt(T(s.HS));
  const size_t work = size_t(s.B) * s.NH * s.Tq * s.Tk * s.HS;
#pragma omp parallel for collapse(2) schedule(static) if (go_parallel(work))
  for (int b = 0; b < s.B; ++b) {
    for (int kh = 0; kh < s.NKV; ++kh) {
      T* kT = thread_scratch<T, 0>(size_t(s.HS) * s.Tk);  // (HS, Tk)
      T* score = thread_scratch<T, 1>(s.Tk);              // (Tk)
      const size_t kv_off = (size_t(b) * s.Tk_cap * s.NKV + kh) * s.HS;
      attn_transpose(kT, k + kv_off, s.Tk, s.HS, size_t(s.NKV) * s.HS);
      for (int h = kh * group; h < (kh + 1) * group; ++h) {
        for (int i = 0; i < s.Tq; ++i) {
          const size_t qo = ((size_t(b) * s.Tq + i) * s.NH + h) * s.HS;
          T* a = att + ((size_t(b) * s.NH + h) * s.Tq + i) * s.Tk;
          attn_forward_row(out + qo, a, score, q + qo, kT, v + kv_off, s, attn_visible(s, i), scale);
        }
      }
    }
  }
}

// Backward of one query row. dp: scratch (Tk). dk_base, dv_base, k_base: row j at j * kv_stride.
template <class T>
void attn_backward_row(T* dqi, T* dk_base, T* dv_base, T* dp, const T* go, const T* a, const T* qi,
                       const T* k_base, const T* vT, const AttnShape& s, int jn, T scale) {
  const int HS = s.HS;
  const size_t kv_stride = size_t(s.NKV) * HS;
  attn_scores(dp, go, vT, jn, s.Tk, HS);  // dp[j] = <dout_i, v_j>
  T pdp = 0;
#pragma omp simd reduction(+ : pdp)
  for (int j = 0; j < jn; ++j) pdp += a[j] * dp[j];
#pragma omp simd
  for (int j = 0; j < jn; ++j) dp[j] = a[j] * (dp[j] - pdp) * scale;  // d(score)
  for (int d = 0; d < HS; ++d) dqi[d] = T(0);
  for (int j = 0; j < jn; ++j) {
    const T aj = a[j], dsj = dp[j];
    const T* kj = k_base + j * kv_stride;
    T* dkj = dk_base + j * kv_stride;
    T* dvj = dv_base + j * kv_stride;
#pragma omp simd
    for (int d = 0; d < HS; ++d) {
      dqi[d] += dsj * kj[d];
      dkj[d] += dsj * qi[d];
      dvj[d] += aj * go[d];
    }
  }
}

// dq (B, Tq, NH, HS), dk, dv (B, Tk, NKV, HS) overwritten; requires Tk_cap == Tk.
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k,
                        const T* v, const AttnShape& s) {
  FT_ASSERT(s.NKV > 0 && s.NH % s.NKV == 0 && s.Tk >= 1 && s.Tk_cap == s.Tk,
            "attention backward: NH %d NKV %d Tk %d Tk_cap %d", s.NH, s.NKV, s.Tk, s.Tk_cap);
  const int group = s.NH / s.NKV;
  const T scale = T(1) / std::sqrt(T(s.HS));
  const size_t work = size_t(s.B) * s.NH * s.Tq * s.Tk * s.HS;
  const size_t kv_stride = size_t(s.NKV) * s.HS;
#pragma omp parallel for collapse(2) schedule(static) if (go_parallel(work))
  for (int b = 0; b < s.B; ++b) {
    for (int kh = 0; kh < s.NKV; ++kh) {
      T* vT = thread_scratch<T, 0>(size_t(s.HS) * s.Tk);  // (HS, Tk)
      T* dp = thread_scratch<T, 1>(s.Tk);                 // (Tk)
      const size_t kv_off = (size_t(b) * s.Tk * s.NKV + kh) * s.HS;
      attn_transpose(vT, v + kv_off, s.Tk, s.HS, kv_stride);
      for (int j = 0; j < s.Tk; ++j) {
        std::memset(dk + kv_off + j * kv_stride, 0, sizeof(T) * s.HS);
        std::memset(dv + kv_off + j * kv_stride, 0, sizeof(T) * s.HS);
      }
      for (int h = kh * group; h < (kh + 1) * group; ++h) {
        for (int i = 0; i < s.Tq; ++i) {
          const size_t qo = ((size_t(b) * s.Tq + i) * s.NH + h) * s.HS;
          const T* a = att + ((size_t(b) * s.NH + h) * s.Tq + i) * s.Tk;
          attn_backward_row(dq + qo, dk + kv_off, dv + kv_off, dp, dout + qo, a, q + qo, k + kv_off,
                            vT, s, attn_visible(s, i), scale);
        }
      }
    }
  }
}

}  // namespace ftx::cpu
