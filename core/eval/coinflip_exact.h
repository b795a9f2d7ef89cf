// The coin-flip task's exact next-bit probabilities (docs/design.md section 3): given Z (what a Free
// Transformer that drew Z may use) and given only the past bits (what a plain decoder must infer).
// Here in core so that both the dataset and the studio's lesson use the one formula.
#pragma once
#include <vector>

namespace ftx {

// P(X_{t+1} = 1 | Z = z) = (1 - eps) z + eps (1 - z).
double coinflip_conditional_next(int z, double eps);
// P(X_{t+1} = 1 | X_1..X_t): the posterior over Z from the counts of ones and zeros, mixed over
// the conditional above; computed in log space so long histories do not underflow. NaN when the
// history is impossible under both values of Z (eps 0 or 1 with contradicting bits).
double coinflip_posterior_next(const std::vector<int>& bits_so_far, double eps);

}  // namespace ftx
