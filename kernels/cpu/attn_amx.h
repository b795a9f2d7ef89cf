// Attention's forward with bf16 inputs on the AMX tiles (AttnProducts::Bf16Inputs on the Amx path,
// ops_attention.h): a prompt of a bf16 model at `--precision bf16`, a training step at bf16. The
// arithmetic of the gemm_bf16_inputs products it replaces, without their per-call overhead:
//   * K and V of every (b, kv head) packed once per call into bf16 tiles (K^T's VNNI tiles for
//     S = Q K^T, V's for O = P V), shared by the query heads of the GQA group;
//   * then tasks of (b, head, block of at most 64 query rows), the last blocks first: the block's
//     q rounded into tiles, S = q K^T on the tiles into att (fp32), the softmax in place there
//     (attn_softmax_rows, the 1/sqrt(HS) scale inside it, as the gemm path does), P rounded into
//     tiles, O = P V on the tiles into out. A causal block multiplies, per pair of 16-row tiles,
//     only the keys that pair's last row sees.
// Numerics: each S and O element is the tiles' fp32 sum of bf16 products in k order, as in
// gemm_bf16_amx; products of masked (zero) probabilities are skipped, which cannot change a sum.
// So the result has the bits of the gemm path (tested where the CPU has AMX).
// Deliberately not here: the backward (still gemm_bf16_inputs per product), decode steps (fewer
// than kAttnAmxMinRows query rows: the gemm path), head sizes that are not a multiple of 16.
#pragma once
#include "kernels/backend.h"

namespace ftx::cpu {

// Query rows from which the tile forward applies.
constexpr int kAttnAmxMinRows = 16;

// Whether attn_forward_amx takes this shape (the caller checks that the Amx path is in use).
inline bool attn_amx_fits(const AttnShape& s) {
  return s.Tq >= kAttnAmxMinRows && s.HS > 0 && s.HS % 16 == 0 && s.HS <= 256;
}

// out (B, Tq, NH, HS), att (B, NH, Tq, Tk) the probabilities; q (B, Tq, NH, HS), k and v (B,
// Tk_cap, NKV, HS). Preconditions: amx_usable() (gemm_amx.h), attn_amx_fits(s).
void attn_forward_amx(float* out, float* att, const float* q, const float* k, const float* v, const AttnShape& s);

}  // namespace ftx::cpu
