// What a training step costs and what the hardware can do: the model FLOPs of one predicted token
// (the numerator of model FLOPs utilization), the dense peak of the GPUs we know, and the GEMM
// peak a machine reaches, measured. `ftx bench` reports them; a GPU not in the table has no peak
// (no utilization is claimed).
#pragma once
#include <optional>

#include "core/model/config.h"
#include "kernels/backend.h"

namespace ftx {

// Training FLOPs per predicted token, PaLM's convention (Chowdhery et al. 2022, appendix B):
//   6 per weight of every GEMM (2 forward, 4 backward for the input and weight gradients): the
//   decoder blocks, the encoder block and its readout, the LM head; not the embedding gather,
//   the norms or the post-sampler (a gather),
// + 12 * L_att * T * D_att for the attention scores and weighted sums, forward and backward, over
//   the full T x T (not halved for causal masking); L_att counts the encoder block too,
// + for a Free Transformer the binary mapper backward: dG = dR W^T over all 2^H codes
//   (2 * 2^H * D) and the per-bit reduction of dG * G (2 * 2^H * H), as `ftx bench mapper` counts.
// A routed block (docs/subjective_depth.md) computing a share f = k / T of the tokens counts f of its
// GEMM FLOPs and f^2 of its attention's, plus its router: MoD's score (6 D), the SDT/STT prior
// network (6 x 3 D P), for STT the teacher's dense forward (2 x block + 4 T D_att), and the
// student router (6 x 2 x 2D). f is k / T under top-k; threshold mode's f varies per sequence, so
// its caller passes the share measured (`routed_share`, e.g. the evaluator's route/capacity).
double train_flops_per_token(const ModelConfig& c, int T, std::optional<double> routed_share = std::nullopt);
// Generation FLOPs per token on the student path, forward only, decoding positions 0..len-1 with
// the KV cache: 2 per weight of the blocks' GEMMs and the LM head, + 4 x L_att x D_att x the keys
// a token attends on average ((len + 1) / 2). A routed block computing a share f of the tokens
// counts f of its GEMMs and f^2 of its attention (its computed tokens attend its cached ones), plus
// what its router runs at generation: the student (2 x 2 x 2D), MoD's score (2D), SDT's prior
// (2 x 3 D P); STT runs no teacher there. The encoder does not run; Z is a gather.
double decode_flops_per_token(const ModelConfig& c, int len, double routed_share);
inline constexpr const char* kFlopsConvention =
    "PaLM: 6 x GEMM weights + 12 x L_att x T x D_att (+ mapper backward 2 x 2^H x (D + H)) per token; a routed "
    "block computing a share f of the tokens: f x its GEMMs + f^2 x its attention + its router";

// The GEMM peak this machine reaches, measured: one Linear product (the backend's matmul_forward
// at its current precision: sgemm at fp32; on the CPU at bf16 the tiles or the rounding path that
// FTX_CPU_ISA picks) of a shape large enough for its best speed, timed call after call for about
// min_seconds (at least 3 calls after one untimed), the fastest counting. `ftx bench train` on the
// CPU divides its model TFLOP/s by it: no datasheet says what two cores of a VM reach, and the
// headroom of a step is measured against what its own products could do.
struct GemmPeak {
  double tflops = 0;          // 2 N IC OC / the fastest call, in TFLOP/s
  int N = 0, IC = 0, OC = 0;  // out (N, OC) = inp (N, IC) @ w (OC, IC)^T
};
GemmPeak measure_gemm_peak(Backend& be, double min_seconds);

// Dense peak TFLOP/s of the backend's device at precision p (no sparsity: half the datasheets'
// starred figures), by the CUDA device name (NVIDIA H100, H200 and A100 datasheets). None for the
// CPU, NVL boards (other clocks) and anything not listed.
std::optional<double> peak_tflops(const Backend& be, MatmulPrecision p);

}  // namespace ftx
