// Scaled dot-product attention with GQA, causal or not, for training (Tq == Tk) and for the KV
// cache (Tq new queries at absolute positions q_pos0.., keys 0..Tk-1). Geometry: AttnShape in
// kernels/backend.h. The forward stores the probabilities att (B, NH, Tq, Tk) for the backward.
//
// Per (b, head) the products read q, k, v in place through their row strides. In fp32 from
// kAttnTileMinRows query rows on (prompts, training) they are our register tiles
// (attn_tiles_fp32.h) on a transposed copy of K made once per call; otherwise (a decode step,
// double, bf16 inputs except as Numerics says) small GEMMs (gemm() in ops_matmul.h, sequential
// inside our parallel region). S = scale * Q K^T is written straight into att, the softmax runs
// over the visible keys only (causal masking by loop bounds; masked entries are set to 0 and never
// exponentiated), then O = P V. The forward is parallel over (b, head, block of query rows), a
// causal block multiplying only the keys its last row sees; on the register tiles on a training
// batch (kAttnKvTasksPerThread) over (b, kv head) instead, each task transposing its own K. The
// backward is parallel over (b, kv head), with one (Tq, Tk) scratch per thread for dS: the query
// heads of one GQA group share a task, so dk/dv accumulate across the group without races. In
// fp32 from kAttnTileMinRows rows on (at bf16 as Numerics says) its four products are the same
// register tiles (attn_backward_tiles; dV and dK read P and dS transposed in place), otherwise
// gemm()s over the forward's blocks of rows.
//
// Numerics: softmax subtracts the row max; exp is exp_nonpos (cpu_common.h). With
// AttnProducts::Bf16Inputs (training at --precision bf16, as PyTorch's CPU autocast and our CUDA
// backend do) the four kinds of products round their inputs to bf16 and sum in fp32, on one of
// three engines (attn_bf16_on_register_tiles):
//   * the register tiles on operands rounded first (attn_operand): a training batch on a CPU
//     without AMX, and on AMX a training batch of short sequences;
//   * on AMX, the other forwards of kAttnAmxMinRows rows or more on attn_amx.h's tiles, which
//     pack K and V once per call;
//   * otherwise gemm_bf16_inputs per product (ops_matmul_bf16.h). The 1/sqrt(HS) scale then
//     moves out of the products, into the softmax and its backward. The fp32 path multiplies by
//     exactly 1 there, so its bits do not change.
// Deliberately not here: flash-style tiling (the backward reads the saved probabilities; T is at
// most a few hundred on the CPU), dropout, ALiBi or other biases.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

#include "kernels/backend.h"
#include "kernels/base/assert.h"
#include "kernels/cpu/attn_amx.h"
#include "kernels/cpu/attn_tiles_fp32.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/ops_matmul.h"
#include "kernels/cpu/ops_matmul_bf16.h"

namespace ftx::cpu {

// What multiplies: fp32 GEMMs, or bf16 inputs with fp32 sums (float only).
enum class AttnProducts { Fp32, Bf16Inputs };

// gemm() (ops_matmul.h), or with Bf16Inputs gemm_bf16_inputs, which needs alpha 1 and beta 0 or 1.
template <class T>
void attn_gemm(AttnProducts by, bool ta, bool tb, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
               int ldb, T beta, T* C, int ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (by == AttnProducts::Bf16Inputs) {
      FT_ASSERT(alpha == 1.0f && (beta == 0.0f || beta == 1.0f), "attention at bf16: alpha %g beta %g", alpha, beta);
      return gemm_bf16_inputs(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, beta == 1.0f);
    }
  } else {
    FT_ASSERT(by == AttnProducts::Fp32, "attention: bf16 products are for float");
  }
  gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Keys visible to query row i: all Tk, or j <= q_pos0 + i when causal.
inline int attn_visible(const AttnShape& s, int i) { return s.causal ? std::min(s.Tk, s.q_pos0 + i + 1) : s.Tk; }

// In place on the scores of one (b, head), rows [i0, i1): row i becomes softmax over its visible
// keys of in_scale times the scores, zeros after them (whatever was there). a (Tq, Tk)
template <class T>
void attn_softmax_rows(T* a, const AttnShape& s, int i0, int i1, T in_scale) {
  for (int i = i0; i < i1; ++i) {
    T* row = a + size_t(i) * s.Tk;
    const int jn = attn_visible(s, i);
    T mx = -std::numeric_limits<T>::infinity();
    if constexpr (std::is_same_v<T, float>) {
      mx = attn_tiles::max_of(row, jn);
    } else {
#pragma omp simd reduction(max : mx)
      for (int j = 0; j < jn; ++j) mx = mx > row[j] ? mx : row[j];  // std::max here stays scalar (GCC 12)
    }
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < jn; ++j) {
      row[j] = exp_nonpos<T>((row[j] - mx) * in_scale);
      sum += row[j];
    }
    const T inv = T(1) / sum;
#pragma omp simd
    for (int j = 0; j < jn; ++j) row[j] *= inv;
    for (int j = jn; j < s.Tk; ++j) row[j] = T(0);
  }
}

// Row strides and base offsets of one (b, query head h) in the attention buffers.
struct AttnHead {
  size_t q_off, kv_off, att_off;  // into q/out/dq, k/v/dk/dv, att
  int ldq, ldkv;                  // row strides of q and of k/v
};

inline AttnHead attn_head(const AttnShape& s, int b, int h, int Tk_rows) {
  const int kh = h / (s.NH / s.NKV);
  return AttnHead{(size_t(b) * s.Tq * s.NH + h) * s.HS, (size_t(b) * Tk_rows * s.NKV + kh) * s.HS,
                  (size_t(b) * s.NH + h) * s.Tq * s.Tk, s.NH * s.HS, s.NKV * s.HS};
}

// Calls body(b, kh) for every batch row b and kv head kh, in parallel over both: the query heads
// of one GQA group share a task, so the body may accumulate dk/dv across the group without races.
template <class Body>
inline void attn_for_each_kv_head(const AttnShape& s, Body&& body) {
  const size_t work = size_t(s.B) * s.NH * s.Tq * s.Tk * s.HS;
#pragma omp parallel for collapse(2) schedule(static) if (go_parallel(work))
  for (int b = 0; b < s.B; ++b) {
    for (int kh = 0; kh < s.NKV; ++kh) body(b, kh);
  }
}

// Query rows per block, at most: a causal block of rows multiplies only the keys its last row sees
// (half the products of a long prompt), and in the forward the blocks of all heads share the
// threads (a prompt of one sequence has as few kv heads as 3).
constexpr int kAttnRowBlock = 64;

// Rows per block: equal blocks of at most kAttnRowBlock (65 rows: 33 and 32), one when not causal.
inline int attn_block_rows(const AttnShape& s) {
  const int blocks = s.causal ? (s.Tq + kAttnRowBlock - 1) / kAttnRowBlock : 1;
  return (s.Tq + blocks - 1) / blocks;
}

// Query rows from which the fp32 forward uses the register tiles (attn_tiles_fp32.h): a prompt or
// a training step. Below, a decode step's single row reads each key once, and transposing K
// first would cost as much as the product.
constexpr int kAttnTileMinRows = 16;

// Whether the register tiles can take these products: enough query rows and a head they fit.
inline bool attn_tiles_apply(const AttnShape& s) { return s.Tq >= kAttnTileMinRows && attn_tiles_fit(s.HS); }

// Work per (b, head), Tq x Tk x HS, from which attention's backward at bf16 on an AMX CPU
// multiplies on the AMX tiles (gemm_bf16_inputs per product) rather than on the register tiles with
// rounded operands: below it the tiles' packing and per-call set-up cost more than the products
// they speed up. Sapphire Rapids, training batches of 4,096 tokens (docs/performance.md, tenth
// pass): the register tiles won 1.2-2x at T = 65 and 1.1-1.6x at T = 80 (HS 32 and 64), the two
// tied at T = 128 with HS 32, the AMX tiles won from T = 96 with HS 64.
constexpr double kAttnAmxMinWorkBackward = double(1 << 19);
// The same for the forward against attn_amx.h's tiles, causal training batches of about 4,160
// tokens (docs/performance.md, twelfth pass, per call alone): the register tiles won 1.18-1.22x at
// T = 65 and 1.05-1.08x at T = 80 with HS 32, and 1.05-1.11x at T = 65 with HS 64; the two tied at
// T = 96 with HS 32 (295 K); the AMX tiles won 1.07-1.10x at T = 80 with HS 64 (410 K) and
// 1.06-1.14x at T = 128 with HS 32.
constexpr double kAttnAmxMinWorkForward = double(3 << 17);

// At bf16 (AttnProducts::Bf16Inputs), whether the register tiles take these products on operands
// rounded to bf16 (attn_operand): wherever they fit on a CPU without AMX, whose gemm_bf16_inputs
// is the same rounding followed by sgemm on each small product; on AMX below the work above (the
// forward only on a training batch: attention_forward's per-kv-head tasks).
inline bool attn_bf16_on_register_tiles(const AttnShape& s, bool backward) {
  if (!attn_tiles_apply(s)) return false;
  if (!bf16_inputs_on_tiles()) return true;
  return double(s.Tq) * s.Tk * s.HS < (backward ? kAttnAmxMinWorkBackward : kAttnAmxMinWorkForward);
}

// A head's rows as a product on the register tiles reads them: a pointer and its row stride.
struct AttnRows {
  const float* p;
  int ld;
};

// rows x cols of src (row stride ld) as a product's operand: in place, or with `round` (bf16)
// rounded to bf16 into the calling thread's scratch slot Slot, dense (row stride cols). A product
// of two bf16 numbers is exact in fp32, so the tiles on rounded operands compute what
// gemm_bf16_inputs computes, up to the order of the fp32 sums.
template <int Slot>
AttnRows attn_operand(const float* src, int ld, int rows, int cols, bool round) {
  return round ? AttnRows{rounded_to_bf16<Slot>(src, rows, cols, ld), cols} : AttnRows{src, ld};
}

// From this many (b, kv head) pairs per thread (training on a batch of short sequences) the fp32
// forward's tasks are (b, kv head), each transposing its own K into the thread's scratch, where
// its tiles then find it. A pre-pass over the small preset's batch wrote 3 MB of K^T that the
// tasks read back from memory: the tiles' load of K^T held a quarter of their samples. Below it
// (a prompt: one sequence, 3 kv heads) the tasks are (b, head, block of rows) on a pre-pass.
constexpr int kAttnKvTasksPerThread = 4;

// The keys of every (b, kv head) transposed for the tiles, in the calling thread's scratch:
// attn_kt_floats(Tk, HS) per (b, kv head). Null when the tiles do not apply (then the products
// are gemm()s).
template <class T>
const float* attn_transposed_keys(const T* k, const AttnShape& s, AttnProducts by) {
  if constexpr (!std::is_same_v<T, float>) {
    return nullptr;
  } else {
    if (by != AttnProducts::Fp32 || !attn_tiles_apply(s)) return nullptr;
    const size_t per_head = attn_kt_floats(s.Tk, s.HS);
    const int tiles = int(per_head / (size_t(s.HS) * attn_tiles::kKeyTile));
    float* kt = thread_scratch<float, 3>(size_t(s.B) * s.NKV * per_head);
#pragma omp parallel for collapse(3) schedule(static) if (go_parallel(size_t(s.B) * s.NKV * s.Tk * s.HS))
    for (int b = 0; b < s.B; ++b) {
      for (int kh = 0; kh < s.NKV; ++kh) {
        for (int t = 0; t < tiles; ++t) {
          attn_transpose_key_tile(kt + (size_t(b) * s.NKV + kh) * per_head,
                                  k + (size_t(b) * s.Tk_cap * s.NKV + kh) * s.HS, s.NKV * s.HS, s.Tk, s.HS, t);
        }
      }
    }
    return kt;
  }
}

// The keys of one (b, kv head), or in the backward its values, transposed for the tiles
// (attn_transpose_key_tile) into the calling thread's scratch, slot 4, and rounded to bf16 when
// `round`; src: the head's first row, row stride ldkv, s.Tk rows.
inline const float* attn_transposed_head(const float* src, int ldkv, const AttnShape& s, bool round = false) {
  const size_t n = attn_kt_floats(s.Tk, s.HS);
  float* t = thread_scratch<float, 4>(n);
  for (int tile = 0; tile * attn_tiles::kKeyTile < s.Tk; ++tile)
    attn_transpose_key_tile(t, src, ldkv, s.Tk, s.HS, tile);
  if (round) round_to_bf16(t, t, n);
  return t;
}

// Rows [i0, i1) of one head on the tiles: S into a (the head's (Tq, Tk) probabilities), the
// softmax, O into o. q and o: the head's row 0 (row strides ldq, ldo); kt: its keys transposed
// (attn_transpose_key_tile); v: its first key. `round` (bf16): the probabilities, which a keeps
// exact for the backward, rounded into scratch slot 7 for O = P V.
inline void attn_forward_tiles_rows(float* o, int ldo, float* a, const float* q, int ldq, const float* kt, AttnRows v,
                                    bool round, const AttnShape& s, int i0, int i1) {
  const auto keys_of = [&](int r) { return attn_visible(s, i0 + r); };
  float* ar = a + size_t(i0) * s.Tk;
  attn_qk(ar, s.Tk, q + size_t(i0) * ldq, ldq, kt, i1 - i0, s.HS, 1.0f / std::sqrt(float(s.HS)), keys_of);
  attn_softmax_rows(a, s, i0, i1, 1.0f);
  const AttnRows p = attn_operand<7>(ar, s.Tk, i1 - i0, s.Tk, round);
  attn_pv(o + size_t(i0) * ldo, ldo, p.p, p.ld, v.p, v.ld, i1 - i0, s.HS, [&](int, int last) {
    return std::pair{0, keys_of(last)};
  });
}

// The forward with one task per (b, kv head) (kAttnKvTasksPerThread) on the register tiles: K
// transposed into the thread's scratch (attn_transposed_head), then every head of the group, all
// rows at once. `round` (bf16): K^T, V, and each head's Q and probabilities rounded first
// (attn_operand, scratch slots 4-7).
inline void attn_forward_per_kv_head(float* out, float* att, const float* q, const float* k, const float* v,
                                     const AttnShape& s, bool round) {
  const int group = s.NH / s.NKV;
  attn_for_each_kv_head(s, [&](int b, int kh) {
    const AttnHead kv = attn_head(s, b, kh * group, s.Tk_cap);
    const float* kt = attn_transposed_head(k + kv.kv_off, kv.ldkv, s, round);
    const AttnRows vr = attn_operand<5>(v + kv.kv_off, kv.ldkv, s.Tk, s.HS, round);
    for (int h = kh * group; h < (kh + 1) * group; ++h) {
      const AttnHead x = attn_head(s, b, h, s.Tk_cap);
      const AttnRows qr = attn_operand<6>(q + x.q_off, x.ldq, s.Tq, s.HS, round);
      attn_forward_tiles_rows(out + x.q_off, x.ldq, att + x.att_off, qr.p, qr.ld, kt, vr, round, s, 0, s.Tq);
    }
  });
}

// out (B, Tq, NH, HS), att (B, NH, Tq, Tk); q (B, Tq, NH, HS); k, v (B, Tk_cap, NKV, HS)
template <class T>
void attention_forward(T* out, T* att, const T* q, const T* k, const T* v, const AttnShape& s,
                       AttnProducts by = AttnProducts::Fp32) {
  FT_ASSERT(s.NKV > 0 && s.NH % s.NKV == 0 && s.Tk >= 1 && s.Tk <= s.Tk_cap, "attention: NH %d NKV %d Tk %d Tk_cap %d",
            s.NH, s.NKV, s.Tk, s.Tk_cap);
  if constexpr (std::is_same_v<T, float>) {
    const bool round = by == AttnProducts::Bf16Inputs;
    const bool tiles = round ? attn_bf16_on_register_tiles(s, false) : attn_tiles_apply(s);
    if (tiles && s.B * s.NKV >= kAttnKvTasksPerThread * omp_get_max_threads())
      return attn_forward_per_kv_head(out, att, q, k, v, s, round);
    if (round && bf16_inputs_on_tiles() && attn_amx_fits(s)) return attn_forward_amx(out, att, q, k, v, s);
  }
  const T scale = T(1) / std::sqrt(T(s.HS));
  const bool bf16 = by == AttnProducts::Bf16Inputs;
  const int rows = attn_block_rows(s), blocks = (s.Tq + rows - 1) / rows;
  const int heads = s.B * s.NH, tasks = heads * blocks;
  const size_t work = size_t(s.B) * s.NH * s.Tq * s.Tk * s.HS;
  const float* kt = attn_transposed_keys(k, s, by);
  // The last blocks of rows (the most keys) first; each task writes its own rows of out and att.
#pragma omp parallel for schedule(dynamic) if (go_parallel(work) && tasks > 1)
  for (int t = 0; t < tasks; ++t) {
    const int blk = blocks - 1 - t / heads, b = t % heads / s.NH, h = t % s.NH;
    const int i0 = blk * rows, i1 = std::min(s.Tq, i0 + rows);
    const int keys = attn_visible(s, i1 - 1);
    const AttnHead x = attn_head(s, b, h, s.Tk_cap);
    T* a = att + x.att_off;  // (Tq, Tk)
    const size_t qi = x.q_off + size_t(i0) * x.ldq;
    if constexpr (std::is_same_v<T, float>) {
      if (kt != nullptr) {
        const int kh = h / (s.NH / s.NKV);
        attn_forward_tiles_rows(out + x.q_off, x.ldq, a, q + x.q_off, x.ldq,
                                kt + (size_t(b) * s.NKV + kh) * attn_kt_floats(s.Tk, s.HS),
                                AttnRows{v + x.kv_off, x.ldkv}, false, s, i0, i1);
        continue;
      }
    }
    attn_gemm(by, false, true, i1 - i0, keys, s.HS, bf16 ? T(1) : scale, q + qi, x.ldq, k + x.kv_off, x.ldkv, T(0),
              a + size_t(i0) * s.Tk, s.Tk);
    attn_softmax_rows(a, s, i0, i1, bf16 ? scale : T(1));
    attn_gemm(by, false, false, i1 - i0, s.HS, keys, T(1), a + size_t(i0) * s.Tk, s.Tk, v + x.kv_off, x.ldkv, T(0),
              out + qi, x.ldq);
  }
}

// In place on rows [i0, i1): dp (Tq, Tk) becomes dS = out_scale * P * (dP - rowsum(P * dP)),
// zero on masked keys.
template <class T>
void attn_softmax_backward_rows(T* dp, const T* a, const AttnShape& s, int i0, int i1, T out_scale) {
  for (int i = i0; i < i1; ++i) {
    T* d = dp + size_t(i) * s.Tk;
    const T* p = a + size_t(i) * s.Tk;
    const int jn = attn_visible(s, i);
    T pdp = 0;
#pragma omp simd reduction(+ : pdp)
    for (int j = 0; j < jn; ++j) pdp += p[j] * d[j];
#pragma omp simd
    for (int j = 0; j < jn; ++j) d[j] = p[j] * (d[j] - pdp) * out_scale;
    for (int j = jn; j < s.Tk; ++j) d[j] = T(0);
  }
}

// The backward of one (b, kv head) on the register tiles (attn_tiles_fp32.h), from
// kAttnTileMinRows query rows on: dP = dO V^T from a transposed V, dS with the 1/sqrt(HS) scale
// folded in (softmax backward), dQ = dS K, then dV += P^T dO and dK += dS^T Q reading P and dS
// transposed in place, each key row summing only over the query rows that see it. The first head
// of the GQA group writes dk and dv, the others add to them. `round` (bf16): every product's
// operands rounded first (V^T, K, and each head's dO, P, Q and dS; attn_operand). Scratch:
// per-thread slots 2 and 4 to 8.
inline void attn_backward_tiles(float* dq, float* dk, float* dv, const float* dout, const float* att, const float* q,
                                const float* k, const float* v, const AttnShape& s, int b, int kh, bool round) {
  const int group = s.NH / s.NKV;
  const float scale = 1.0f / std::sqrt(float(s.HS));
  const AttnHead kv = attn_head(s, b, kh * group, s.Tk);
  const float* vt = attn_transposed_head(v + kv.kv_off, kv.ldkv, s, round);
  float* ds = thread_scratch<float, 2>(size_t(s.Tq) * s.Tk);  // (Tq, Tk)
  const AttnRows kr = attn_operand<5>(k + kv.kv_off, kv.ldkv, s.Tk, s.HS, round);
  const auto keys_of = [&](int i) { return attn_visible(s, i); };
  const auto keys_seen = [&](int, int last) { return std::pair{0, keys_of(last)}; };
  // Key rows from j0 on are seen by query rows from j0 - q_pos0 on (all rows when not causal).
  const auto rows_seeing = [&](int j0, int) {
    return std::pair{s.causal ? std::clamp(j0 - s.q_pos0, 0, s.Tq) : 0, s.Tq};
  };
  for (int h = kh * group; h < (kh + 1) * group; ++h) {
    const AttnHead x = attn_head(s, b, h, s.Tk);
    const AttnRows dor = attn_operand<6>(dout + x.q_off, x.ldq, s.Tq, s.HS, round);
    attn_qk(ds, s.Tk, dor.p, dor.ld, vt, s.Tq, s.HS, 1.0f, keys_of);
    attn_softmax_backward_rows(ds, att + x.att_off, s, 0, s.Tq, scale);
    if (round) round_to_bf16(ds, ds, size_t(s.Tq) * s.Tk);
    attn_pv(dq + x.q_off, x.ldq, ds, s.Tk, kr.p, kr.ld, s.Tq, s.HS, keys_seen);
    // dV (+)= P^T dO, dK (+)= dS^T Q: P and dS read transposed in place.
    const auto add_transposed = [&](float* out, const float* a, AttnRows by_rows) {
      if (h == kh * group)
        attn_pv<false, true>(out + kv.kv_off, kv.ldkv, a, s.Tk, by_rows.p, by_rows.ld, s.Tk, s.HS, rows_seeing);
      else
        attn_pv<true, true>(out + kv.kv_off, kv.ldkv, a, s.Tk, by_rows.p, by_rows.ld, s.Tk, s.HS, rows_seeing);
    };
    add_transposed(dv, attn_operand<7>(att + x.att_off, s.Tk, s.Tq, s.Tk, round).p, dor);
    add_transposed(dk, ds, attn_operand<8>(q + x.q_off, x.ldq, s.Tq, s.HS, round));
  }
}

// dq (B, Tq, NH, HS), dk, dv (B, Tk, NKV, HS) overwritten; requires Tk_cap == Tk.
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v,
                        const AttnShape& s, AttnProducts by = AttnProducts::Fp32) {
  FT_ASSERT(s.NKV > 0 && s.NH % s.NKV == 0 && s.Tk >= 1 && s.Tk_cap == s.Tk,
            "attention backward: NH %d NKV %d Tk %d Tk_cap %d", s.NH, s.NKV, s.Tk, s.Tk_cap);
  const int group = s.NH / s.NKV;
  const T scale = T(1) / std::sqrt(T(s.HS));
  const bool bf16 = by == AttnProducts::Bf16Inputs;
  const T alpha = bf16 ? T(1) : scale;  // of dQ and dK; at bf16 dS carries the scale
  // The forward's blocks of query rows: a causal block's products use only the keys its last row
  // sees. dk and dv sum over the group's heads and the blocks: zeroed, then accumulated.
  const int rows = attn_block_rows(s);
  const bool tiles = std::is_same_v<T, float> && (bf16 ? attn_bf16_on_register_tiles(s, true) : attn_tiles_apply(s));
  attn_for_each_kv_head(s, [&](int b, int kh) {
    if constexpr (std::is_same_v<T, float>) {
      if (tiles) return attn_backward_tiles(dq, dk, dv, dout, att, q, k, v, s, b, kh, bf16);
    }
    // Slot 2: gemm_bf16_inputs rounds into slots 0 and 1.
    T* ds = thread_scratch<T, 2>(size_t(s.Tq) * s.Tk);  // (Tq, Tk)
    const AttnHead kv = attn_head(s, b, kh * group, s.Tk);
    for (int j = 0; j < s.Tk; ++j) {
      std::fill_n(dk + kv.kv_off + size_t(j) * kv.ldkv, s.HS, T(0));
      std::fill_n(dv + kv.kv_off + size_t(j) * kv.ldkv, s.HS, T(0));
    }
    for (int h = kh * group; h < (kh + 1) * group; ++h) {
      const AttnHead x = attn_head(s, b, h, s.Tk);
      for (int i0 = 0; i0 < s.Tq; i0 += rows) {
        const int n = std::min(rows, s.Tq - i0), keys = attn_visible(s, i0 + n - 1);
        const T* a = att + x.att_off + size_t(i0) * s.Tk;
        T* d = ds + size_t(i0) * s.Tk;
        const size_t qi = x.q_off + size_t(i0) * x.ldq;
        // dV += P^T dO;  dP = dO V^T;  dS = softmax backward;  dQ = scale dS K;  dK += scale dS^T Q
        attn_gemm(by, true, false, keys, s.HS, n, T(1), a, s.Tk, dout + qi, x.ldq, T(1), dv + x.kv_off, x.ldkv);
        attn_gemm(by, false, true, n, keys, s.HS, T(1), dout + qi, x.ldq, v + x.kv_off, x.ldkv, T(0), d, s.Tk);
        attn_softmax_backward_rows(ds, att + x.att_off, s, i0, i0 + n, bf16 ? scale : T(1));
        attn_gemm(by, false, false, n, s.HS, keys, alpha, d, s.Tk, k + x.kv_off, x.ldkv, T(0), dq + qi, x.ldq);
        attn_gemm(by, true, false, keys, s.HS, n, alpha, d, s.Tk, q + qi, x.ldq, T(1), dk + x.kv_off, x.ldkv);
      }
    }
  });
}

}  // namespace ftx::cpu
