#include "core/model/free_bits.h"

#include <vector>

namespace ftx {

const char* free_bits_name(FreeBitsForm form) { return form == FreeBitsForm::BatchMean ? "batch-mean" : "per-pair"; }

const char* free_bits_label(FreeBitsForm form) {
  return form == FreeBitsForm::BatchMean ? "batch mean (Kingma)" : "per pair";
}

Result<FreeBitsForm> parse_free_bits(std::string_view name) {
  for (FreeBitsForm f : {FreeBitsForm::BatchMean, FreeBitsForm::PerPair})
    if (name == free_bits_name(f)) return f;
  std::string message = "\"";  // appended piece by piece: GCC 12 warns (-Wrestrict) on "x" + string
  message.append(name).append("\": must be batch-mean or per-pair");
  return make_error(message);
}

KlSummary summarize_kl(const float* kl, int B, int T, float kappa_nats, FreeBitsForm form) {
  KlSummary s;
  const size_t N = size_t(B) * T;
  if (N == 0) return s;
  const double kappa = kappa_nats;
  std::vector<double> column(T, 0.0);
  double sum = 0, excess = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const double x = kl[size_t(b) * T + t];
      sum += x, column[t] += x;
      if (x > kappa) excess += x - kappa;
    }
  s.kl = sum / N;
  if (form == FreeBitsForm::PerPair) {
    s.excess = excess / N;
  } else {
    double e = 0;
    for (double c : column) e += c / B > kappa ? c / B - kappa : 0.0;
    s.excess = e / T;
  }
  return s;
}

}  // namespace ftx
