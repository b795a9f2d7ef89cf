// The unbiased pass@k estimator of the Codex paper (Chen et al. 2021): with n generations of
// which c pass, pass@k = 1 - C(n-c, k) / C(n, k), the chance that k of the n drawn without
// replacement contain a passing one. Computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i), which needs no
// binomials (they overflow long before n = 200).
#pragma once

namespace ftx::bench {

// n >= 1, 0 <= c <= n, 1 <= k <= n.
inline double pass_at_k(int n, int c, int k) {
  if (n - c < k) return 1.0;
  double fail = 1.0;
  for (int i = n - c + 1; i <= n; ++i) fail *= 1.0 - static_cast<double>(k) / i;
  return 1.0 - fail;
}

}  // namespace ftx::bench
