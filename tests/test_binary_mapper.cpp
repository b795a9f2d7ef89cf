// The binary mapper and what surrounds it (docs/design.md section 3; invariants: docs/testing.md):
//   1. the forward samples bits with Philox and packs them into codes; bit and code frequencies
//      match p and the product distribution; seeds and streams reproduce / change the codes;
//   2. the backward equals autograd through Y + G - detach(G), i.e. finite differences of
//      f(logits) = sum_d G_d(logits) <dR, W[:,d]>, computed by brute force over all 2^H codes
//      (double, H = 1..8, default and tiny tiles), and the float CpuBackend matches the double
//      brute force at H = 12 (row and code tile boundaries inside the problem) and H = 16;
//   3. the closed-form KL equals the sum over all 2^H codes of Q log(Q 2^H), H up to 10;
//   4. the free-bits KL backward matches finite differences on both sides of kappa;
//   5. the post-sampler gather and scatter-add.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/base/philox.h"
#include "kernels/cpu/ops_binary_mapper.h"
#include "tests/test_util.h"

namespace {

using Vec = std::vector<double>;
using namespace ftx;

// Central-difference step and tolerance, as in test_ops_grad.cpp: FD and analytic agree to
// ~1e-9 in double; a gradient through the sampled code only, or a missing (U - p) term, is off
// by O(0.1).
constexpr double kStep = 1e-6;
constexpr double kGradTol = 1e-6;
// Float backend against double brute force on the same float-rounded inputs: float GEMM and tile
// sums; measured 3e-7 of max |dlogits| at H = 12.
constexpr double kFloatVsDoubleTol = 2e-5;
// Frequencies from N Bernoulli draws: allow 5 standard deviations (false alarm ~6e-7 per check).
constexpr double kSigmas = 5.0;

using test::random_vec;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

Vec sigmoid_all(const Vec& logits) {
  Vec p(logits.size());
  for (size_t i = 0; i < p.size(); ++i) p[i] = sigmoid(logits[i]);
  return p;
}

// G_d: probability of code d under independent bits with P(bit h) = p[h].
double code_prob(const double* p, int H, uint32_t d) {
  double g = 1.0;
  for (int h = 0; h < H; ++h) g *= ((d >> h) & 1) ? p[h] : 1.0 - p[h];
  return g;
}

// dG[n,d] = <dR[n,:], W[:,d]>; W (C, 2^H)
double code_dot(const Vec& dR, const Vec& W, int n, int C, int H, uint32_t d) {
  double s = 0.0;
  for (int c = 0; c < C; ++c) s += dR[size_t(n) * C + c] * W[(size_t(c) << H) + d];
  return s;
}

// f(logits) = sum_n sum_d G_d(sigmoid(logits_n)) * dG[n,d]: the loss whose gradient autograd
// computes through Y + G - detach(G) when dR is the upstream gradient of R = post_sampler(Y).
double mapper_functional(const Vec& logits, const Vec& dR, const Vec& W, int N, int C, int H) {
  const Vec p = sigmoid_all(logits);
  double f = 0.0;
  for (int n = 0; n < N; ++n) {
    for (uint32_t d = 0; d < (1u << H); ++d) {
      f += code_prob(&p[size_t(n) * H], H, d) * code_dot(dR, W, n, C, H, d);
    }
  }
  return f;
}

// Brute force over all codes: dlogits[n,h] = sum_d dG G (U_h(d) - p_h).
Vec brute_dlogits(const Vec& p, const Vec& dR, const Vec& W, int N, int C, int H) {
  Vec out(size_t(N) * H, 0.0);
  for (int n = 0; n < N; ++n) {
    const double* ph = &p[size_t(n) * H];
    for (uint32_t d = 0; d < (1u << H); ++d) {
      const double a = code_dot(dR, W, n, C, H, d) * code_prob(ph, H, d);
      for (int h = 0; h < H; ++h) out[size_t(n) * H + h] += a * (((d >> h) & 1) - ph[h]);
    }
  }
  return out;
}

// ---- 1. forward --------------------------------------------------------------------------------

struct ForwardRun {
  std::vector<uint32_t> codes;  // (N)
  std::vector<float> p;         // (N, H)
};

ForwardRun run_forward(Backend& be, const std::vector<float>& logits, int N, int H, uint64_t seed, uint64_t stream) {
  ForwardRun r{std::vector<uint32_t>(N), std::vector<float>(size_t(N) * H)};
  be.binary_mapper_forward(r.codes.data(), r.p.data(), logits.data(), N, H, seed, stream);
  return r;
}

TEST(BinaryMapper, ForwardCodesFollowBitsAndProbabilities) {
  const int N = 20000, H = 4;
  const double bit_logit[H] = {-2.0, -0.3, 0.5, 3.0};
  std::vector<float> logits(size_t(N) * H);  // (N, H), the same p for every row
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(bit_logit[i % H]);
  auto be = make_cpu_backend();
  const uint64_t seed = 1234, stream = kStreamLatent + 7;
  const ForwardRun r = run_forward(*be, logits, N, H, seed, stream);

  std::vector<double> bit_count(H, 0.0), code_count(1 << H, 0.0);
  for (int n = 0; n < N; ++n) {
    ASSERT_LT(r.codes[n], 1u << H);
    code_count[r.codes[n]] += 1.0;
    for (int h = 0; h < H; ++h) {
      const size_t i = size_t(n) * H + h;
      ASSERT_NEAR(r.p[i], sigmoid(bit_logit[h]), 1e-7);
      const bool bit = (r.codes[n] >> h) & 1;
      ASSERT_EQ(bit, philox_uniform(seed, stream, i) < r.p[i]) << "row " << n << " bit " << h;
      bit_count[h] += bit;
    }
  }
  double p[H];
  for (int h = 0; h < H; ++h) {
    p[h] = sigmoid(bit_logit[h]);
    EXPECT_NEAR(bit_count[h] / N, p[h], kSigmas * std::sqrt(p[h] * (1 - p[h]) / N)) << "bit " << h;
  }
  for (uint32_t d = 0; d < (1u << H); ++d) {  // the bits are independent: codes follow G
    const double q = code_prob(p, H, d);
    EXPECT_NEAR(code_count[d] / N, q, kSigmas * std::sqrt(q * (1 - q) / N)) << "code " << d;
  }
}

TEST(BinaryMapper, ForwardSeedAndStreamDecideTheCodes) {
  const int N = 1000, H = 8;
  std::vector<float> logits(size_t(N) * H);
  const Vec l = random_vec(logits.size(), 5, -2.0, 2.0);
  std::copy(l.begin(), l.end(), logits.begin());
  auto be = make_cpu_backend();
  const auto base = run_forward(*be, logits, N, H, 42, kStreamLatent);
  EXPECT_EQ(run_forward(*be, logits, N, H, 42, kStreamLatent).codes, base.codes);
  for (const auto& other :
       {run_forward(*be, logits, N, H, 43, kStreamLatent), run_forward(*be, logits, N, H, 42, kStreamLatent + 1)}) {
    int differ = 0;
    for (int n = 0; n < N; ++n) differ += other.codes[n] != base.codes[n];
    EXPECT_GT(differ, N / 2);  // 8 bits per code: almost every code changes
  }
}

// ---- 2. backward -------------------------------------------------------------------------------

void check_backward_against_fd(int H, cpu::MapperTiles tiles) {
  const int N = 5, C = 3;
  Vec logits = random_vec(size_t(N) * H, 100 + H, -2.0, 2.0);  // (N, H)
  const Vec dR = random_vec(size_t(N) * C, 200 + H);           // (N, C)
  const Vec W = random_vec(size_t(C) << H, 300 + H);           // (C, 2^H)
  const Vec p = sigmoid_all(logits);
  const Vec init = random_vec(logits.size(), 400 + H);
  Vec dlogits = init;
  cpu::binary_mapper_backward(dlogits.data(), dR.data(), W.data(), p.data(), N, C, H, tiles);
  const Vec brute = brute_dlogits(p, dR, W, N, C, H);
  for (size_t i = 0; i < logits.size(); ++i) {
    const double analytic = dlogits[i] - init[i];  // += semantics
    const double fd =
        test::central_difference(logits[i], kStep, [&] { return mapper_functional(logits, dR, W, N, C, H); });
    EXPECT_NEAR(analytic, fd, kGradTol * std::max(1.0, std::abs(fd)))
        << "H " << H << " tiles " << tiles.rows << "x2^" << tiles.codes_log2 << " element " << i;
    EXPECT_NEAR(brute[i], fd, kGradTol * std::max(1.0, std::abs(fd))) << "brute force, element " << i;
  }
}

TEST(BinaryMapper, BackwardMatchesAutogradThroughG) {
  for (int H : {1, 3, 5, 8}) {
    check_backward_against_fd(H, cpu::MapperTiles{});      // one code tile
    check_backward_against_fd(H, cpu::MapperTiles{2, 2});  // 2 rows x 4 codes per tile
    check_backward_against_fd(H, cpu::MapperTiles{3, 0});  // one code per tile
  }
}

// Float CpuBackend (default tiles) against the double brute force; returns max error / max |ref|.
double float_backend_vs_brute(int N, int C, int H, uint64_t seed) {
  const Vec logits = random_vec(size_t(N) * H, seed, -3.0, 3.0);
  const Vec dR = random_vec(size_t(N) * C, seed + 1), W = random_vec(size_t(C) << H, seed + 2);
  std::vector<float> pf(logits.size()), dRf(dR.begin(), dR.end()), Wf(W.begin(), W.end());
  Vec p(logits.size());
  for (size_t i = 0; i < p.size(); ++i) {
    pf[i] = static_cast<float>(sigmoid(logits[i]));
    p[i] = pf[i];
  }
  // The double reference sees the float-rounded inputs, so only the float arithmetic differs.
  const Vec brute = brute_dlogits(p, Vec(dRf.begin(), dRf.end()), Vec(Wf.begin(), Wf.end()), N, C, H);
  std::vector<float> dlogits(p.size(), 0.5f);
  make_cpu_backend()->binary_mapper_backward(dlogits.data(), dRf.data(), Wf.data(), pf.data(), N, C, H);
  double max_ref = 0.0, max_err = 0.0;
  for (size_t i = 0; i < brute.size(); ++i) {
    max_ref = std::max(max_ref, std::abs(brute[i]));
    max_err = std::max(max_err, std::abs((dlogits[i] - 0.5) - brute[i]));
  }
  EXPECT_GT(max_ref, 1e-3);
  return max_err / max_ref;
}

TEST(BinaryMapper, FloatBackendMatchesBruteForceAtH12) {
  // N = 150 is not a multiple of the 128-row tile; 2^12 codes make 4 code tiles of 2^10.
  static_assert(150 % cpu::MapperTiles{}.rows != 0 && cpu::MapperTiles{}.codes_log2 < 12);
  EXPECT_LE(float_backend_vs_brute(150, 16, 12, 7), kFloatVsDoubleTol);
}

TEST(BinaryMapper, FloatBackendMatchesBruteForceAtH16) {
  EXPECT_LE(float_backend_vs_brute(37, 8, 16, 17), kFloatVsDoubleTol);
}

// ---- 3. KL -------------------------------------------------------------------------------------

TEST(BinaryMapper, ClosedFormKlEqualsSumOverCodes) {
  for (int H : {1, 2, 5, 10}) {
    const int N = 6;
    Vec p = random_vec(size_t(N) * H, 500 + H, 0.0, 1.0);  // (N, H)
    p[0] = 0.0;                                            // exact limits
    p[size_t(1) * H] = 1.0;
    p[size_t(2) * H] = 0.5;
    p[size_t(3) * H] = 1e-12;
    Vec kl(N);
    cpu::kl_forward(kl.data(), p.data(), N, H);
    for (int n = 0; n < N; ++n) {
      double sum = 0.0;  // sum_d Q log(Q 2^H)
      for (uint32_t d = 0; d < (1u << H); ++d) {
        const double q = code_prob(&p[size_t(n) * H], H, d);
        if (q > 0.0) sum += q * std::log(q * std::ldexp(1.0, H));
      }
      EXPECT_NEAR(kl[n], sum, 1e-12) << "H " << H << " row " << n;
    }
  }
}

TEST(BinaryMapper, KlOfCertainBitsIsLog2) {
  const std::vector<float> p = {0.0f, 1.0f, 0.5f};  // (3, 1)
  std::vector<float> kl(3);
  make_cpu_backend()->kl_forward(kl.data(), p.data(), 3, 1);
  EXPECT_EQ(kl[0], static_cast<float>(std::log(2.0)));
  EXPECT_EQ(kl[1], static_cast<float>(std::log(2.0)));
  EXPECT_EQ(kl[2], 0.0f);
}

// ---- 4. free-bits backward ---------------------------------------------------------------------

double free_bits_loss(const Vec& logits, int N, int H, double kappa, double scale) {
  const Vec p = sigmoid_all(logits);
  Vec kl(N);
  cpu::kl_forward(kl.data(), p.data(), N, H);
  double loss = 0.0;
  for (double k : kl) loss += scale * std::max(0.0, k - kappa);
  return loss;
}

TEST(BinaryMapper, KlBackwardAppliesFreeBitsPerRow) {
  const int N = 8, H = 3;
  const double scale = 0.7;
  Vec logits = random_vec(size_t(N) * H, 600, -4.0, 4.0);
  const Vec p = sigmoid_all(logits);
  Vec kl(N);
  cpu::kl_forward(kl.data(), p.data(), N, H);
  Vec sorted = kl;
  std::sort(sorted.begin(), sorted.end());
  const double kappa = 0.5 * (sorted[3] + sorted[4]);  // 4 rows on each side of kappa
  ASSERT_GT(sorted[4] - sorted[3], 1e-3);              // far from the kink at FD scale
  const Vec init = random_vec(logits.size(), 601);
  Vec dlogits = init;
  cpu::kl_backward(dlogits.data(), p.data(), kl.data(), N, N, H, kappa, scale);
  for (size_t i = 0; i < logits.size(); ++i) {
    if (kl[i / H] <= kappa) {
      EXPECT_EQ(dlogits[i], init[i]) << "row under kappa must be untouched, element " << i;
    }
    const double fd =
        test::central_difference(logits[i], kStep, [&] { return free_bits_loss(logits, N, H, kappa, scale); });
    EXPECT_NEAR(dlogits[i] - init[i], fd, kGradTol) << "element " << i;
  }
}

// The batch-mean form in float64: loss = scale * B * sum_t max(0, mean_b KL[b,t] - kappa) (the
// model's (1/T) sum_t with scale = 1/(B T)), its gradient by central differences over every logit.
double batch_mean_free_bits_loss(const Vec& logits, int B, int T, int H, double kappa, double scale) {
  const Vec p = sigmoid_all(logits);
  Vec kl(size_t(B) * T), mean(T);
  cpu::kl_forward(kl.data(), p.data(), B * T, H);
  cpu::kl_batch_mean(mean.data(), kl.data(), B, T);
  double loss = 0.0;
  for (double m : mean) loss += scale * B * std::max(0.0, m - kappa);
  return loss;
}

TEST(BinaryMapper, KlBackwardBatchMeanMatchesFiniteDifferences) {
  const int B = 4, T = 6, H = 3, N = B * T;
  const double scale = 1.0 / N;
  Vec logits = random_vec(size_t(N) * H, 610, -4.0, 4.0);
  const Vec p = sigmoid_all(logits);
  Vec kl(N), mean(T);
  cpu::kl_forward(kl.data(), p.data(), N, H);
  cpu::kl_batch_mean(mean.data(), kl.data(), B, T);
  for (int t = 0; t < T; ++t) {  // the batch mean by hand
    double s = 0;
    for (int b = 0; b < B; ++b) s += kl[size_t(b) * T + t];
    EXPECT_NEAR(mean[t], s / B, 1e-15) << "t " << t;
  }
  Vec sorted = mean;
  std::sort(sorted.begin(), sorted.end());
  const double kappa = 0.5 * (sorted[2] + sorted[3]);  // 3 positions on each side
  ASSERT_GT(sorted[3] - sorted[2], 1e-3);              // far from the kink at FD scale
  int rows_differ = 0;  // rows whose own KL is on the other side of kappa than their position's mean
  for (int n = 0; n < N; ++n) rows_differ += (kl[n] > kappa) != (mean[n % T] > kappa);
  ASSERT_GT(rows_differ, 0) << "the per-pair gate would give the same rows";
  const Vec init = random_vec(logits.size(), 611);
  Vec dlogits = init;
  cpu::kl_backward(dlogits.data(), p.data(), mean.data(), T, N, H, kappa, scale);
  for (size_t i = 0; i < logits.size(); ++i) {
    if (mean[(i / H) % T] <= kappa) {
      EXPECT_EQ(dlogits[i], init[i]) << "position under kappa must be untouched, element " << i;
    }
    const double fd = test::central_difference(
        logits[i], kStep, [&] { return batch_mean_free_bits_loss(logits, B, T, H, kappa, scale); });
    EXPECT_NEAR(dlogits[i] - init[i], fd, kGradTol) << "element " << i;
  }
}

TEST(BinaryMapper, KlBackwardIsFiniteAtCertainBits) {
  const std::vector<float> p = {0.0f, 1.0f, 0.25f};  // (1, 3)
  std::vector<float> kl(1), dlogits(3, 0.0f);
  auto be = make_cpu_backend();
  be->kl_forward(kl.data(), p.data(), 1, 3);
  be->kl_backward(dlogits.data(), p.data(), kl.data(), 1, 1, 3, 0.0f, 1.0f);
  EXPECT_EQ(dlogits[0], 0.0f);
  EXPECT_EQ(dlogits[1], 0.0f);
  EXPECT_NEAR(dlogits[2], 0.25 * 0.75 * std::log(0.25 / 0.75), 1e-7);
}

// ---- 5. post-sampler ---------------------------------------------------------------------------

TEST(BinaryMapper, PostSamplerGatherAndScatterAdd) {
  const int N = 9, C = 3, H = 4;
  const std::vector<uint32_t> codes = {3, 15, 0, 3, 7, 3, 15, 1, 8};  // (N), with repeats
  const Vec W = random_vec(size_t(C) << H, 700);                      // (C, 2^H)
  const Vec dR = random_vec(size_t(N) * C, 701);                      // (N, C)
  Vec R(size_t(N) * C);
  cpu::post_sampler_forward(R.data(), codes.data(), W.data(), N, C, H);
  const Vec init = random_vec(W.size(), 702);
  Vec dW = init, expect = init;
  cpu::post_sampler_backward(dW.data(), dR.data(), codes.data(), N, C, H);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      EXPECT_EQ(R[size_t(n) * C + c], W[(size_t(c) << H) + codes[n]]) << n << "," << c;
      expect[(size_t(c) << H) + codes[n]] += dR[size_t(n) * C + c];
    }
  }
  for (size_t i = 0; i < dW.size(); ++i) EXPECT_NEAR(dW[i], expect[i], 1e-15) << i;
}

}  // namespace
