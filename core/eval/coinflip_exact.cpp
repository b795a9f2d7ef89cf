#include "core/eval/coinflip_exact.h"

#include <cmath>
#include <limits>

#include "kernels/base/assert.h"

namespace ftx {

double coinflip_conditional_next(int z, double eps) { return (1.0 - eps) * z + eps * (1 - z); }

double coinflip_posterior_next(const std::vector<int>& bits_so_far, double eps) {
  double n1 = 0, n0 = 0;
  for (int b : bits_so_far) {
    FT_ASSERT(b == 0 || b == 1, "coin-flip bit %d is not 0 or 1", b);
    (b ? n1 : n0) += 1;
  }
  // log P(x | z) with 0 * log(0) = 0: an event of probability 0 that never happened costs nothing.
  auto term = [](double n, double p) { return n == 0 ? 0.0 : n * std::log(p); };
  const double log_l1 = term(n1, 1.0 - eps) + term(n0, eps);  // z = 1
  const double log_l0 = term(n1, eps) + term(n0, 1.0 - eps);  // z = 0
  const double kInf = std::numeric_limits<double>::infinity();
  if (log_l1 == -kInf && log_l0 == -kInf) return std::numeric_limits<double>::quiet_NaN();
  // P(Z = 1 | x) = 1 / (1 + exp(log_l0 - log_l1)) (the priors 1/2 cancel).
  double w1 = log_l1 == -kInf ? 0.0 : log_l0 == -kInf ? 1.0 : 1.0 / (1.0 + std::exp(log_l0 - log_l1));
  return w1 * coinflip_conditional_next(1, eps) + (1.0 - w1) * coinflip_conditional_next(0, eps);
}

}  // namespace ftx
