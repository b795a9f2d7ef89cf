// The packed bf16 GEMM of kernels/cpu/gemm_amx.h on both its engines, gemm_bf16_amx (the AMX
// tiles) and gemm_bf16_vdp (VDPBF16PS), against a double-precision GEMM of the inputs rounded to
// bf16 (the only difference left is the fp32 accumulation): all four transposes, with and without
// accumulate, odd and empty shapes, padded leading dimensions (and that nothing outside the M x N
// block of C is written), the three products of a Linear layer in training, shapes that make the
// call cut its operands into chunks of M, N and K; exact results on small integers; round to
// nearest even on ties; the same bits for 1 and 2 threads and from inside a parallel region;
// gemm_bf16w_amx and gemm_bf16w_vdp (bf16 weights) the bits of their engine on the weights widened.
// An engine's tests are skipped where the CPU cannot run it (AMX: no AMX, or Linux refused the
// tile state; VDPBF16PS: no AVX512_BF16).
//
// Not here: speed (tests/bench_gemm_amx.cpp).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/isa.h"

namespace {

using ftx::cpu::amx_usable;
using ftx::cpu::gemm_bf16_amx;
using ftx::cpu::gemm_bf16_vdp;
using ftx::cpu::gemm_bf16w_amx;

// fp32 summation of at most a few thousand terms: far below 1e-5 of sum |a_k b_k| (+ |C| when
// accumulating), which the tolerance scales with.
constexpr double kRel = 1e-5;
constexpr float kGuardValue = -12345.678f;

// The engine under test (set by the fixture).
using Gemm = void (*)(bool, bool, int, int, int, const float*, int, const float*, int, float*, int, bool);
Gemm gemm = gemm_bf16_amx;
// Its product on bf16 weights.
using GemmW = void (*)(float*, const float*, const uint16_t*, int, int, int, bool);
GemmW gemm_w = ftx::cpu::gemm_bf16w_amx;

// x rounded to bf16 (round to nearest even) and widened back: what the packing does to a normal
// fp32 (the inputs here have no subnormals, NaN or infinity).
float bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

// One call's operands as stored: A (M x K, or K x M when transA), B (K x N, or N x K when transB),
// C (M x N), each row padded by `pad` columns, which the GEMM must neither read as data nor write.
struct Problem {
  bool ta, tb;
  int M, N, K, lda, ldb, ldc;
  std::vector<float> a, b, c;
  float A(int m, int k) const { return ta ? a[size_t(k) * lda + m] : a[size_t(m) * lda + k]; }
  float B(int k, int n) const { return tb ? b[size_t(n) * ldb + k] : b[size_t(k) * ldb + n]; }
};

// Uniform values in [-1, 1), or integers in [-int_range, int_range] when int_range > 0.
Problem make(bool ta, bool tb, int M, int N, int K, uint32_t seed, int pad = 3, int int_range = 0) {
  Problem p{ta, tb, M, N, K, (ta ? M : K) + pad, (tb ? K : N) + pad, N + pad, {}, {}, {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);  // xorshift64: the integer operands are large
  auto fill = [&](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (float& x : v) {
      if (int_range == 0) {
        x = u(rng);
        continue;
      }
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      x = float(int((state >> 32) % uint64_t(2 * int_range + 1)) - int_range);
    }
  };
  fill(p.a, size_t(ta ? K : M) * p.lda);
  fill(p.b, size_t(tb ? N : K) * p.ldb);
  fill(p.c, size_t(M) * p.ldc);
  for (int m = 0; m < M; ++m)
    for (int j = N; j < p.ldc; ++j) p.c[size_t(m) * p.ldc + j] = kGuardValue;
  return p;
}

// C after the call (the padding checked untouched).
std::vector<float> run(const Problem& p, bool accumulate) {
  std::vector<float> c = p.c;
  gemm(p.ta, p.tb, p.M, p.N, p.K, p.a.data(), p.lda, p.b.data(), p.ldb, c.data(), p.ldc, accumulate);
  for (int m = 0; m < p.M; ++m)
    for (int j = p.N; j < p.ldc; ++j) EXPECT_EQ(c[size_t(m) * p.ldc + j], kGuardValue) << "padding written";
  return c;
}

std::string name(const Problem& p, bool accumulate) {
  return std::string(p.ta ? "A^T " : "A ") + (p.tb ? "B^T " : "B ") + "M " + std::to_string(p.M) + " N " +
         std::to_string(p.N) + " K " + std::to_string(p.K) + (accumulate ? " accumulate" : "");
}

// The worst |C - ref| / (kRel * (sum_k |a b| + |C0|) + tiny) over C, with ref in double from the
// bf16-rounded inputs; must stay <= 1. `where` describes the worst element.
double worst_ratio(const Problem& p, bool accumulate, const std::vector<float>& got, std::string* where) {
  std::vector<float> ar(size_t(p.M) * p.K), br(size_t(p.K) * p.N);
  for (int m = 0; m < p.M; ++m)
    for (int k = 0; k < p.K; ++k) ar[size_t(m) * p.K + k] = bf16(p.A(m, k));
  for (int k = 0; k < p.K; ++k)
    for (int n = 0; n < p.N; ++n) br[size_t(k) * p.N + n] = bf16(p.B(k, n));
  double worst = 0;
  std::vector<double> sum(p.N), scale(p.N);
  for (int m = 0; m < p.M; ++m) {
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(scale.begin(), scale.end(), 0.0);
    for (int k = 0; k < p.K; ++k) {
      const double a = ar[size_t(m) * p.K + k];
      const float* brow = br.data() + size_t(k) * p.N;
      for (int n = 0; n < p.N; ++n) {
        sum[n] += a * brow[n];
        scale[n] += std::fabs(a * brow[n]);
      }
    }
    for (int n = 0; n < p.N; ++n) {
      const double c0 = accumulate ? p.c[size_t(m) * p.ldc + n] : 0.0;
      const double want = sum[n] + c0, g = got[size_t(m) * p.ldc + n];
      const double ratio = std::isnan(g) ? 1e30 : std::fabs(g - want) / (kRel * (scale[n] + std::fabs(c0)) + 1e-30);
      if (ratio > worst) {
        worst = ratio;
        *where = "m " + std::to_string(m) + " n " + std::to_string(n) + ": got " + std::to_string(g) + ", want " +
                 std::to_string(want);
      }
    }
  }
  return worst;
}

// The tests of both engines, parameterised by the engine's name.
class GemmPacked : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "amx") {
      if (!amx_usable()) GTEST_SKIP() << "no AMX bf16 here (CPU or kernel permission)";
      gemm = gemm_bf16_amx, gemm_w = gemm_bf16w_amx;
    } else {
      if (!ftx::cpu::cpu_isa_supported(ftx::cpu::CpuIsa::Avx512Bf16)) GTEST_SKIP() << "no AVX512_BF16 here";
      gemm = gemm_bf16_vdp, gemm_w = ftx::cpu::gemm_bf16w_vdp;
    }
  }
};
INSTANTIATE_TEST_SUITE_P(Engines, GemmPacked, ::testing::Values("amx", "vdp"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

void check(const Problem& p, bool accumulate) {
  SCOPED_TRACE(name(p, accumulate));
  const std::vector<float> got = run(p, accumulate);
  std::string where;
  EXPECT_LE(worst_ratio(p, accumulate, got, &where), 1.0) << where;
}

// Shapes below, at and across the tile sizes (16 rows and columns, 32 of k), the 2 x 2 blocks and
// the 256-row, 512-k blocks of the kernel.
TEST_P(GemmPacked, MatchesDoubleOnTheRoundedInputs) {
  struct Dims {
    int M, N, K;
  };
  const Dims dims[] = {{1, 1, 1},    {17, 33, 65}, {100, 3, 31},  {3, 100, 33},   {16, 16, 32},   {32, 32, 64},
                       {48, 48, 96}, {31, 47, 1},  {64, 17, 600}, {257, 290, 40}, {300, 20, 1100}};
  uint32_t seed = 1;
  for (const Dims d : dims)
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        const Problem p = make(ta, tb, d.M, d.N, d.K, seed++);
        for (const bool accumulate : {false, true}) check(p, accumulate);
      }
}

// The three products of a Linear layer in training, N tokens, IC inputs, OC outputs.
TEST_P(GemmPacked, TrainingProducts) {
  struct Layer {
    int N, IC, OC;
  };
  uint32_t seed = 100;
  for (const Layer l : {Layer{520, 192, 320}, Layer{300, 576, 200}, Layer{130, 64, 1030}}) {
    SCOPED_TRACE("N " + std::to_string(l.N) + " IC " + std::to_string(l.IC) + " OC " + std::to_string(l.OC));
    check(make(false, true, l.N, l.OC, l.IC, seed++, 0), false);   // out = inp W^T
    check(make(false, false, l.N, l.IC, l.OC, seed++, 0), false);  // dX = dout W
    check(make(true, false, l.OC, l.IC, l.N, seed++, 0), true);    // dW += dout^T inp
  }
}

// Empty shapes: M or N = 0 touch nothing; K = 0 writes zeros, or leaves C when accumulating.
TEST_P(GemmPacked, EmptyShapes) {
  float c[6] = {1, 2, 3, 4, 5, 6};
  const float a[1] = {7}, b[1] = {8};
  gemm(false, false, 0, 3, 1, a, 1, b, 3, c, 3, false);
  gemm(false, false, 2, 0, 1, a, 1, b, 1, c, 3, false);
  gemm(true, true, 0, 0, 0, nullptr, 1, nullptr, 1, c, 3, false);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c[i], float(i + 1));
  gemm(false, false, 2, 2, 0, nullptr, 1, nullptr, 2, c, 3, true);  // ldc 3: c[2], c[5] padding
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c[i], float(i + 1));
  gemm(false, true, 2, 2, 0, nullptr, 1, nullptr, 1, c, 3, false);
  const float want[6] = {0, 0, 3, 0, 0, 6};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c[i], want[i]) << i;
}

// Integers: exact in bf16, exact products, exact fp32 sums while below 2^24, so C must equal the
// integer GEMM. The large shapes make the call cut its operands: into chunks of M (A the large
// operand), of N (B), and of K (both too large for the pack buffer, C summed over the K chunks).
TEST_P(GemmPacked, SmallIntegersAreExact) {
  struct Case {
    bool ta, tb;
    int M, N, K, range;
    bool accumulate;
  };
  // Chunks (kernels/cpu/gemm_amx.cpp, plan): of M for 33000 x 5 x 1024, of N for 5 x 33000 x 1024,
  // of K (two) for 17 x 33 x 600000.
  const Case cases[] = {{false, false, 77, 45, 1000, 8, false},  {true, true, 77, 45, 1000, 8, true},
                        {false, true, 33000, 5, 1024, 3, false}, {true, false, 33000, 5, 1024, 3, true},
                        {false, true, 5, 33000, 1024, 3, true},  {true, false, 5, 33000, 1024, 3, false},
                        {false, false, 17, 33, 600000, 2, true}, {true, true, 17, 33, 600000, 2, false}};
  uint32_t seed = 7;
  for (const Case& cs : cases) {
    const Problem p = make(cs.ta, cs.tb, cs.M, cs.N, cs.K, seed++, 5, cs.range);
    SCOPED_TRACE(name(p, cs.accumulate));
    const std::vector<float> got = run(p, cs.accumulate);
    // The integer GEMM, on op(A) and op(B)^T as rows of k (|sums| < 2^24 here, exact in int32).
    std::vector<int32_t> ai(size_t(p.M) * p.K), bi(size_t(p.N) * p.K);
    for (int m = 0; m < p.M; ++m)
      for (int k = 0; k < p.K; ++k) ai[size_t(m) * p.K + k] = int32_t(p.A(m, k));
    for (int n = 0; n < p.N; ++n)
      for (int k = 0; k < p.K; ++k) bi[size_t(n) * p.K + k] = int32_t(p.B(k, n));
    std::vector<int32_t> ref(size_t(p.M) * p.N);
    for (int m = 0; m < p.M; ++m)
      for (int n = 0; n < p.N; ++n) {
        const int32_t *a = ai.data() + size_t(m) * p.K, *b = bi.data() + size_t(n) * p.K;
        int32_t s = 0;
        for (int k = 0; k < p.K; ++k) s += a[k] * b[k];
        ref[size_t(m) * p.N + n] = s;
      }
    int64_t bad = 0;
    std::string first;
    for (int m = 0; m < p.M; ++m)
      for (int n = 0; n < p.N; ++n) {
        const double want = double(ref[size_t(m) * p.N + n]) + (cs.accumulate ? p.c[size_t(m) * p.ldc + n] : 0.0);
        const double g = got[size_t(m) * p.ldc + n];
        if (g != want && bad++ == 0)
          first = "m " + std::to_string(m) + " n " + std::to_string(n) + ": got " + std::to_string(g) + ", want " +
                  std::to_string(want);
      }
    EXPECT_EQ(bad, 0) << first;
  }
}

// A value halfway between two bf16 rounds to the one with an even last bit, in A and in B and
// through every transpose: 1 + 2^-8 (between 1 and 1 + 2^-7) to 1, 1 + 3 * 2^-8 (between 1 + 2^-7
// and 1 + 2^-6) to 1 + 2^-6; just past a halfway point rounds away.
TEST_P(GemmPacked, RoundsToNearestEvenOnTies) {
  const float t = std::ldexp(1.0f, -8);
  const float in[] = {1 + t, 1 + 3 * t, -(1 + t), -(1 + 3 * t), 1 + t + std::ldexp(1.0f, -20), 1 + 5 * t, 3.0f};
  const float want[] = {1, 1 + 4 * t, -1, -(1 + 4 * t), 1 + 2 * t, 1 + 4 * t, 3.0f};
  const int n = int(std::size(in));
  const std::vector<float> ones(n, 1.0f);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      SCOPED_TRACE(std::string(ta ? "A^T " : "A ") + (tb ? "B^T" : "B"));
      // A holds the values (M = n, K = 1): column of C = in rounded. lda 1 either way.
      std::vector<float> c(n, 0.0f);
      gemm(ta, tb, n, 1, 1, in, ta ? n : 1, ones.data(), 1, c.data(), 1, false);
      for (int i = 0; i < n; ++i) EXPECT_EQ(c[i], want[i]) << "A value " << i;
      // B holds the values (N = n, K = 1): row of C = in rounded.
      gemm(ta, tb, 1, n, 1, ones.data(), 1, in, tb ? 1 : n, c.data(), n, false);
      for (int i = 0; i < n; ++i) EXPECT_EQ(c[i], want[i]) << "B value " << i;
    }
}

// Each element of C is summed by one thread in k order: 1 or 2 threads, or calls made from inside
// a parallel region (each on the calling thread), give the same bits.
TEST_P(GemmPacked, SameBitsForAnyThreadCount) {
  const Problem p = make(false, true, 700, 300, 700, 5);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one = run(p, true);
  omp_set_num_threads(std::max(2, threads));
  const std::vector<float> two = run(p, true);
  omp_set_num_threads(threads);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
  std::vector<std::vector<float>> inner(4);
#pragma omp parallel for num_threads(2) schedule(static, 1)
  for (int i = 0; i < 4; ++i) {
    inner[i] = p.c;
    gemm(p.ta, p.tb, p.M, p.N, p.K, p.a.data(), p.lda, p.b.data(), p.ldb, inner[i].data(), p.ldc, true);
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(std::memcmp(one.data(), inner[i].data(), one.size() * sizeof(float)), 0) << i;
}

// NaN and infinity in an input reach exactly the elements of C that use them.
TEST_P(GemmPacked, NanAndInfinityPropagate) {
  Problem p = make(false, false, 40, 40, 70, 9, 0);
  p.a[size_t(5) * p.lda + 3] = std::numeric_limits<float>::quiet_NaN();  // row 5 of C
  p.b[size_t(60) * p.ldb + 7] = std::numeric_limits<float>::infinity();  // column 7 of C
  const std::vector<float> c = run(p, false);
  for (int m = 0; m < p.M; ++m)
    for (int n = 0; n < p.N; ++n) {
      const float v = c[size_t(m) * p.ldc + n];
      if (m == 5)
        EXPECT_TRUE(std::isnan(v)) << m << " " << n;
      else if (n == 7)
        EXPECT_TRUE(std::isinf(v)) << m << " " << n;
      else
        EXPECT_TRUE(std::isfinite(v)) << m << " " << n;
    }
}

// bf16 weights: the weight read from bf16 gives the bits of the fp32 path on the widened weight
// (whose packing rounds them back exactly), with and without accumulate, on 1 thread and on 2.
// On the tiles, shapes with IC a multiple of 32, OC of 16 and 4N <= 3 IC read the weight in place
// as the tiles' A operand (out^T = w x^T): tokens past a tile's edge, odd tile counts, tokens in two
// blocks, and a call whose packed tokens exceed 64 MiB (cut into chunks of tokens). The others (and
// every shape on VDPBF16PS) copy the weight into tiles: tile edges (OC not a multiple of 16, IC of
// 32), more tokens than 3 IC / 4, and the weight cut into chunks (over 64 MiB).
TEST_P(GemmPacked, Bf16WeightsGiveTheBitsOfTheWidenedWeights) {
  struct Layer {
    int N, IC, OC;
  };
  uint32_t seed = 300;
  for (const Layer l : {Layer{1, 1, 1}, Layer{48, 576, 1536}, Layer{77, 33, 19}, Layer{130, 1000, 70},
                        Layer{17, 1000, 40000}, Layer{520, 2100, 50}, Layer{600, 576, 208}, Layer{1, 32, 16},
                        Layer{77, 128, 48}, Layer{600, 832, 208}, Layer{5000, 6720, 16}}) {
    SCOPED_TRACE("N " + std::to_string(l.N) + " IC " + std::to_string(l.IC) + " OC " + std::to_string(l.OC));
    const Problem p = make(false, true, l.N, l.OC, l.IC, seed++, 0);  // a: inp (N, IC), b: w (OC, IC)
    std::vector<uint16_t> w(p.b.size());
    std::vector<float> wide(p.b.size());
    for (size_t i = 0; i < w.size(); ++i) {
      const float r = bf16(p.b[i]);
      uint32_t u;
      std::memcpy(&u, &r, sizeof u);
      w[i] = uint16_t(u >> 16);
      wide[i] = r;
    }
    for (const bool accumulate : {false, true}) {
      std::vector<float> want = p.c, got = p.c;
      gemm(false, true, l.N, l.OC, l.IC, p.a.data(), l.IC, wide.data(), l.IC, want.data(), l.OC, accumulate);
      gemm_w(got.data(), p.a.data(), w.data(), l.N, l.IC, l.OC, accumulate);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << "accumulate " << accumulate;
      const int threads = omp_get_max_threads();
      omp_set_num_threads(1);
      std::vector<float> one = p.c;
      gemm_w(one.data(), p.a.data(), w.data(), l.N, l.IC, l.OC, accumulate);
      omp_set_num_threads(threads);
      ASSERT_EQ(std::memcmp(want.data(), one.data(), want.size() * sizeof(float)), 0) << "1 thread, " << accumulate;
    }
  }
}

}  // namespace
