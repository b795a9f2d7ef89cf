// The free-bits term of the Free Transformer's loss: how the threshold kappa (nats per token) meets
// the KL of the encoder's posterior against the uniform prior. Two forms (docs/figure4.md, "Two
// forms of free bits"), with KL[b,t] the KL at position t of sequence b, B sequences of T positions:
//   batch mean (Kingma et al. 2016, appendix C.8, the form the paper cites; the default of new runs):
//     (1/T) sum_t max(0, mean_b KL[b,t] - kappa)
//   per pair (every (sequence, position) alone; the form of runs trained before it existed):
//     (1/(B T)) sum_{b,t} max(0, KL[b,t] - kappa)
// The gradient of either is (1/(B T)) dKL[b,t] on the rows the form penalises (kernels/backend.h,
// kl_backward); the forward and backward live in core/model/model.cpp.
#pragma once
#include <string>
#include <string_view>

#include "kernels/base/result.h"

namespace ftx {

enum class FreeBitsForm { BatchMean, PerPair };

const char* free_bits_name(FreeBitsForm form);  // "batch-mean", "per-pair": the config's and the CLI's words
// A form by its name; the error ("\"x\": must be batch-mean or per-pair") lists both names.
Result<FreeBitsForm> parse_free_bits(std::string_view name);
// One line for people: "batch mean (Kingma)" or "per pair".
const char* free_bits_label(FreeBitsForm form);

struct KlSummary {
  double kl = 0;      // mean KL over the B*T positions (nats per token)
  double excess = 0;  // the free-bits term under the form: what the loss adds
};
// kl (B, T) on the host, summed in double.
KlSummary summarize_kl(const float* kl, int B, int T, float kappa_nats, FreeBitsForm form);

}  // namespace ftx
