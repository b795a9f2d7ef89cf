// The float CpuBackend against the double instantiations of the same op templates: every op of
// the op table (kernels/op_table.h) at its awkward test sizes, which checks the fast paths (sgemm
// against dgemm, vectorised loops and the polynomial exp against std::exp, tiled loops, thread
// splits), with guard words after every buffer. Here besides: RoPE at large positions, SwiGLU over
// the whole exp range, AdamW against a hand computation and over several steps, clipping,
// sum_squares' accuracy, memory (alignment, zeroing, huge pages, large copies), run-to-run
// determinism, and bf16 weights (the conversions of kernels/base/dtype.h, matmul against the
// widened weights).
//
// Not here: gradient correctness (test_ops_grad.cpp, test_binary_mapper.cpp check the double
// templates by finite differences, so agreeing with them here means correct in float too).
#include <gtest/gtest.h>
#include <omp.h>
#include <algorithm>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_binary_mapper.h"
#include "kernels/cpu/ops_crossentropy.h"
#include "kernels/cpu/ops_elementwise.h"
#include "kernels/cpu/ops_embedding.h"
#include "kernels/cpu/ops_matmul.h"
#include "kernels/cpu/ops_rmsnorm.h"
#include "kernels/cpu/ops_rope.h"
#include "kernels/cpu/ops_swiglu.h"
#include "kernels/op_table.h"
#include "tests/test_util.h"

namespace {

using Vec = std::vector<double>;
using namespace ftx;

// Normalized MSE limits, sum (float - double)^2 / sum double^2. Float rounding alone gives
// 1e-15..1e-13; a wrong index or a lost term gives > 1e-3.
constexpr double kNmseElementwise = 1e-12;  // few roundings per element
constexpr double kNmseReduction = 1e-10;    // sums over up to a few hundred terms (GEMM, softmax)
constexpr int kGuard = 16;                  // guard values after each output buffer
constexpr float kGuardValue = -12345.678f;

// Uniform values already rounded to float, so the float and double runs see the same inputs.
Vec random_vec(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Vec v = test::random_vec(n, seed, lo, hi);
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

// A float buffer with guard values after its n elements.
class Out {
 public:
  explicit Out(size_t n, float init = 0.0f) : n_(n), buf_(n, init) { buf_.resize(n + kGuard, kGuardValue); }
  explicit Out(const Vec& init) : Out(init.size()) {
    for (size_t i = 0; i < n_; ++i) buf_[i] = static_cast<float>(init[i]);
  }
  float* data() { return buf_.data(); }
  float operator[](size_t i) const { return buf_[i]; }
  size_t size() const { return n_; }
  bool guards_intact() const {
    for (size_t i = n_; i < buf_.size(); ++i) {
      if (std::memcmp(&buf_[i], &kGuardValue, sizeof(float)) != 0) return false;
    }
    return true;
  }

 private:
  size_t n_;
  std::vector<float> buf_;
};

std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

// Normalized MSE of got against ref; infinite when NaN/Inf appear where ref has none.
double nmse(const Out& got, const Vec& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (!std::isfinite(num)) return std::numeric_limits<double>::infinity();
  return den > 0.0 ? num / den : num;
}

#define EXPECT_CLOSE(got, ref, limit)                         \
  do {                                                        \
    EXPECT_LE(nmse(got, ref), limit) << #got;                 \
    EXPECT_TRUE((got).guards_intact()) << #got " overflowed"; \
  } while (0)

class CpuBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend();
};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();  // for outputs that must be written

// ---- the op table: every op against its double form ----------------------------------------------

// Each case of kernels/op_table.h (its test sizes) on the float backend against the same op in
// double from the same inputs: relative L2 error within op_limit_double (the square roots of the
// normalized MSEs 1e-12 and 1e-10 this file used before the table), no write past a buffer.
class OpTable : public ::testing::TestWithParam<OpTestCase> {};

TEST_P(OpTable, CpuMatchesDouble) {
  const OpCase c = GetParam().build();
  if (!c.reference) GTEST_SKIP() << c.full_name() << " has no double form";
  SCOPED_TRACE(c.full_name());
  auto be = make_cpu_backend();
  const auto got = run_op_case(*be, c);
  ASSERT_TRUE(got) << got.error().message;
  for (const std::string& line : op_compare(c, run_op_reference(c), *got, op_limit_double(c.error)))
    ADD_FAILURE() << line << " (" << op_error_name(c.error) << ")";
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTable, ::testing::ValuesIn(op_test_cases()),
                         [](const ::testing::TestParamInfo<OpTestCase>& i) { return i.param.name; });

// ---- bf16 weights -------------------------------------------------------------------------------

TEST(Bf16Conversion, RoundsToNearestEvenAndKeepsNaNAndInf) {
  const auto bits = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
  };
  const auto from = [](uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
  };
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(from(0x3F808000u)), 0x3F80);  // a tie: to the even mantissa (down)
  EXPECT_EQ(fp32_to_bf16(from(0x3F818000u)), 0x3F82);  // a tie: to the even mantissa (up)
  EXPECT_EQ(fp32_to_bf16(from(0x3F808001u)), 0x3F81);  // above the tie: up
  EXPECT_EQ(fp32_to_bf16(from(0x7F7FFFFFu)), 0x7F80);  // the largest float overflows to Inf
  EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(kNaN))));
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(from(0x7F800001u)))));  // a NaN whose payload rounds away
  EXPECT_EQ(bits(bf16_to_fp32(0xC049)), 0xC0490000u);                      // widening appends 16 zero bits
  // Exactly representable (the last one a subnormal): a round trip keeps every bit.
  for (const float x : {0.0f, -0.0f, 3.140625f, 65280.0f, from(0x80010000u)})
    EXPECT_EQ(bits(bf16_to_fp32(fp32_to_bf16(x))), bits(x)) << x;
}

// bf16 bits of x found by arithmetic, not by bit tricks: the nearer of its two bf16 neighbours (in
// double; past the largest bf16 the upper neighbour is 2^128, which rounds to Inf), a tie to the one
// with the even mantissa; a NaN quiet, with its sign and the upper half of its payload.
uint16_t bf16_by_arithmetic(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if (std::isnan(x)) return uint16_t((u >> 16) | 0x0040u);
  const uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;  // toward zero, away from zero
  if (lo == u) return uint16_t(lo >> 16);
  const auto value = [](uint32_t b) {
    if (((b >> 23) & 0xFFu) == 0xFFu) return std::copysign(std::ldexp(1.0, 128), (b >> 31) != 0 ? -1.0 : 1.0);
    float f;
    std::memcpy(&f, &b, sizeof f);
    return double(f);
  };
  const double to_lo = std::fabs(double(x) - value(lo)), to_hi = std::fabs(value(hi) - double(x));
  if (to_lo != to_hi) return uint16_t((to_lo < to_hi ? lo : hi) >> 16);
  return uint16_t(((lo >> 16) & 1u) != 0 ? hi >> 16 : lo >> 16);
}

// The scalar conversion and the row conversions (branch-free, vectorised: the bf16 paths round whole
// operands with them) round as the arithmetic does, on ties, subnormals, overflow, infinities, NaNs
// and random bits, over whole vectors and a tail; round_to_bf16 also in place.
TEST(Bf16Conversion, ScalarAndRowsRoundAsTheArithmeticDoes) {
  const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x3F808000u, 0x3F818000u,
                              0x3F80FFFFu, 0xBF808001u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F7F8000u, 0x7F7F7FFFu,
                              0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu,
                              0x7F80FFFFu, 0x00008000u, 0x00018000u};
  std::mt19937 rng(5);
  std::vector<float> x(4099);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t u = i < std::size(special) ? special[i] : uint32_t(rng());
    std::memcpy(&x[i], &u, sizeof u);
  }
  const auto bits = [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    return u;
  };
  std::vector<uint16_t> half(x.size());
  fp32_to_bf16(half.data(), x.data(), x.size());
  std::vector<float> rounded(x.size()), in_place = x;
  round_to_bf16(rounded.data(), x.data(), x.size());
  round_to_bf16(in_place.data(), in_place.data(), in_place.size());
  int failures = 0;
  for (size_t i = 0; i < x.size() && failures < 10; ++i) {
    const uint16_t want = bf16_by_arithmetic(x[i]);
    failures += fp32_to_bf16(x[i]) != want || half[i] != want || bits(rounded[i]) != uint32_t(want) << 16 ||
                bits(in_place[i]) != uint32_t(want) << 16;
    EXPECT_EQ(fp32_to_bf16(x[i]), want) << "element " << i << ", bits " << std::hex << bits(x[i]);
    EXPECT_EQ(half[i], want) << "element " << i;
    EXPECT_EQ(bits(rounded[i]), uint32_t(want) << 16) << "element " << i;
    EXPECT_EQ(bits(in_place[i]), uint32_t(want) << 16) << "element " << i;
  }
}

// The float backend multiplies bf16 weights by gemm_bf16w (forward) or widens them to fp32 slabs for
// sgemm (backward); the reference is the double GEMM on the same widened values, and, forward on
// the AVX512_BF16 path, on the activations rounded to bf16 as that path rounds them
// (kernels/cpu/gemm_bf16.h), so only float rounding separates them. The last shape has more than
// one backward slab (kWidenFloats); tests/test_gemm_bf16.cpp covers the forward's engines.
TEST_F(CpuBackendTest, Bf16WeightMatmulMatchesDoubleOnTheWidenedWeights) {
  struct Shape {
    int N, IC, OC;
  };
  for (const Shape sh : {Shape{333, 130, 77}, Shape{1, 7, 3}, Shape{3, 1500, 800}}) {
    const auto [N, IC, OC] = sh;
    SCOPED_TRACE("N " + std::to_string(N) + " IC " + std::to_string(IC) + " OC " + std::to_string(OC));
    const Vec inp = random_vec(size_t(N) * IC, 11), w32 = random_vec(size_t(OC) * IC, 12);   // (N, IC), (OC, IC)
    const Vec dout = random_vec(size_t(N) * OC, 13), base = random_vec(size_t(N) * OC, 14);  // (N, OC)
    const Vec dinp0 = random_vec(inp.size(), 15);
    std::vector<uint16_t> w16(w32.size());  // (OC, IC) bf16
    Vec w(w32.size());                      // the same values widened, in double
    for (size_t i = 0; i < w16.size(); ++i) w16[i] = fp32_to_bf16(float(w32[i])), w[i] = bf16_to_fp32(w16[i]);
    const auto inpf = to_float(inp), doutf = to_float(dout);
    Vec inp_fwd = inp;  // what the forward multiplies
    if (cpu::cpu_isa() >= cpu::CpuIsa::Avx512Bf16)
      for (double& v : inp_fwd) v = bf16_to_fp32(fp32_to_bf16(float(v)));
    for (bool accumulate : {false, true}) {
      Vec out = base;
      cpu::matmul_forward(out.data(), inp_fwd.data(), w.data(), N, IC, OC, accumulate);
      Out outf = accumulate ? Out(base) : Out(base.size(), kNaN);
      be_->matmul_forward(outf.data(), inpf.data(), bf16_weight(w16.data()), N, IC, OC, accumulate);
      EXPECT_CLOSE(outf, out, kNmseReduction);

      Vec dinp = dinp0;
      cpu::matmul_backward(dinp.data(), static_cast<double*>(nullptr), dout.data(), inp.data(), w.data(), N, IC, OC,
                           accumulate);
      Out dinpf = accumulate ? Out(dinp0) : Out(dinp0.size(), kNaN);
      be_->matmul_backward(dinpf.data(), nullptr, doutf.data(), inpf.data(), bf16_weight(w16.data()), N, IC, OC,
                           accumulate);
      EXPECT_CLOSE(dinpf, dinp, kNmseReduction);
    }
  }
}

// A bf16 weight is frozen: asking for its gradient is a bug, and aborts.
TEST_F(CpuBackendTest, Bf16WeightGradientIsABug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int N = 2, IC = 3, OC = 4;
  std::vector<float> inp(N * IC, 1.0f), dout(N * OC, 1.0f), dinp(N * IC), dw(OC * IC);
  std::vector<uint16_t> w(OC * IC, fp32_to_bf16(0.5f));
  EXPECT_DEATH(
      be_->matmul_backward(dinp.data(), dw.data(), dout.data(), inp.data(), bf16_weight(w.data()), N, IC, OC, false),
      "frozen");
}

AttnShape attn_shape(int B, int NH, int NKV, int HS, int Tq, int Tk, int Tk_cap, int q_pos0, bool causal) {
  AttnShape s;
  s.B = B, s.NH = NH, s.NKV = NKV, s.HS = HS;
  s.Tq = Tq, s.Tk = Tk, s.Tk_cap = Tk_cap, s.q_pos0 = q_pos0, s.causal = causal;
  return s;
}

// ---- RoPE at large positions, SwiGLU over the exp range ------------------------------------------

TEST_F(CpuBackendTest, RopeMatchesDoubleAtLargePositions) {
  const int B = 2, T = 65, nh = 4, HS = 32, pos0 = 1000;
  const Vec x = random_vec(size_t(B) * T * nh * HS, 60);
  const std::vector<float> freq = cpu::rope_default_inv_freq(10000.0, HS);
  for (bool forward : {true, false}) {
    Vec y = x;
    Out yf(x);
    if (forward) {
      cpu::rope_forward(y.data(), B, T, nh, HS, pos0, freq.data());
      be_->rope_forward(yf.data(), B, T, nh, HS, pos0, freq.data());
    } else {
      cpu::rope_backward(y.data(), B, T, nh, HS, pos0, freq.data());
      be_->rope_backward(yf.data(), B, T, nh, HS, pos0, freq.data());
    }
    EXPECT_CLOSE(yf, y, kNmseElementwise);
  }
}

// RoPE's per-thread table of angles (kernels/cpu/ops_rope.h) gives the bits of computing them:
// forward and backward, after the frequencies change (no stale table), and past the table's end.
TEST_F(CpuBackendTest, RopeTableGivesTheBitsOfTheAnglesComputed) {
  const int nh = 3, HS = 16, half = HS / 2;
  for (const double theta : {10000.0, 500000.0}) {
    const std::vector<float> freq = cpu::rope_default_inv_freq(theta, HS);
    for (const int pos0 : {0, 4000, cpu::kRopeTableMaxPositions - 1, cpu::kRopeTableMaxPositions + 7}) {
      for (const double sign : {1.0, -1.0}) {
        SCOPED_TRACE("theta " + std::to_string(theta) + " pos0 " + std::to_string(pos0) + " sign " +
                     std::to_string(sign));
        const int T = 2;
        const auto x = to_float(random_vec(size_t(T) * nh * HS, 230));
        std::vector<float> got = x, want = x;
        if (sign > 0)
          cpu::rope_forward(got.data(), 1, T, nh, HS, pos0, freq.data());
        else
          cpu::rope_backward(got.data(), 1, T, nh, HS, pos0, freq.data());
        for (int t = 0; t < T; ++t) {
          float cs[half], sn[half];
          cpu::rope_angles(cs, sn, pos0 + t, freq.data(), half, sign);
          cpu::rope_turn_heads(want.data() + size_t(t) * nh * HS, nh, HS, cs, sn, 1.0f);
        }
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
      }
    }
  }
}

// A routed block's tokens keep their positions: RoPE at positions pos0 + t given one by one is
// RoPE from pos0, bit for bit, forward and backward (what makes capacity 1 equal the dense model).
TEST_F(CpuBackendTest, RopeAtConsecutivePositionsIsRopeFromPos0) {
  const int B = 3, T = 17, nh = 2, HS = 16, pos0 = 40;
  const std::vector<float> x = to_float(random_vec(size_t(B) * T * nh * HS, 61));
  const std::vector<float> freq = cpu::rope_default_inv_freq(10000.0, HS);
  std::vector<int32_t> pos(size_t(B) * T);
  for (size_t r = 0; r < pos.size(); ++r) pos[r] = pos0 + int32_t(r % T);
  for (bool forward : {true, false}) {
    std::vector<float> a = x, b = x;
    if (forward) {
      be_->rope_forward(a.data(), B, T, nh, HS, pos0, freq.data());
      be_->rope_forward_at(b.data(), pos.data(), B, T, nh, HS, freq.data());
    } else {
      be_->rope_backward(a.data(), B, T, nh, HS, pos0, freq.data());
      be_->rope_backward_at(b.data(), pos.data(), B, T, nh, HS, freq.data());
    }
    EXPECT_EQ(a, b) << (forward ? "forward" : "backward");
  }
}

// Top-k per sequence against its definition, checked pair by pair rather than by sorting: k
// positions in increasing order, each chosen one above every one left out or equal and earlier
// (ties to the earlier position), rows = b*T + pos; at k = T all, at k = 0 none written.
TEST_F(CpuBackendTest, TopkRowsChoosesTheLargestAndBreaksTiesEarly) {
  const int B = 4, T = 50;
  std::vector<float> score = to_float(random_vec(size_t(B) * T, 62));
  for (size_t i = 0; i < score.size(); i += 3) score[i] = std::floor(score[i] * 4.0f) / 4.0f;  // many ties
  for (int k : {0, 1, 7, 25, 49, 50}) {
    std::vector<int32_t> pos(size_t(B) * k + 1, -7), rows(size_t(B) * k + 1, -7);
    be_->topk_rows(pos.data(), rows.data(), score.data(), B, T, k);
    EXPECT_EQ(pos.back(), -7) << "wrote past B*k";
    for (int b = 0; b < B; ++b) {
      const float* s = score.data() + size_t(b) * T;
      std::vector<bool> chosen(size_t(T), false);
      for (int i = 0; i < k; ++i) {
        const int32_t p = pos[size_t(b) * k + i];
        ASSERT_TRUE(p >= 0 && p < T);
        if (i > 0) {
          ASSERT_LT(pos[size_t(b) * k + i - 1], p) << "not in position order";
        }
        EXPECT_EQ(rows[size_t(b) * k + i], b * T + p);
        chosen[size_t(p)] = true;
      }
      for (int c = 0; c < T; ++c) {
        for (int o = 0; o < T; ++o) {
          if (!chosen[size_t(c)] || chosen[size_t(o)]) continue;
          ASSERT_TRUE(s[c] > s[o] || (s[c] == s[o] && c < o))
              << "k " << k << " row " << b << ": chose " << c << " over " << o;
        }
      }
    }
  }
}

TEST_F(CpuBackendTest, SwigluMatchesDoubleOverTheExpRange) {
  const size_t n = 100003;  // not a multiple of any vector width
  Vec gate = random_vec(n, 70, -30, 30);
  const double extremes[] = {-100.0, -88.0, -87.5, -87.0, -1e-30, 0.0, 1e-30, 50.0, 88.0, 100.0};
  for (size_t i = 0; i < std::size(extremes); ++i) gate[i * 7] = extremes[i];
  const Vec up = random_vec(n, 71), dout = random_vec(n, 72);
  Vec out(n), dgate(n), dup(n);
  cpu::swiglu_forward(out.data(), gate.data(), up.data(), n);
  cpu::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);
  const auto gf = to_float(gate), uf = to_float(up), df = to_float(dout);
  Out outf(n, kNaN), dgatef(n, kNaN), dupf(n, kNaN);
  be_->swiglu_forward(outf.data(), gf.data(), uf.data(), n);
  be_->swiglu_backward(dgatef.data(), dupf.data(), df.data(), gf.data(), uf.data(), n);
  EXPECT_CLOSE(outf, out, kNmseElementwise);
  EXPECT_CLOSE(dgatef, dgate, kNmseElementwise);
  EXPECT_CLOSE(dupf, dup, kNmseElementwise);
  // In place, as the model's backward calls it (the gradients over gate and up): the same bits.
  std::vector<float> gi = gf, ui = uf;
  be_->swiglu_backward(gi.data(), ui.data(), df.data(), gi.data(), ui.data(), n);
  EXPECT_EQ(std::memcmp(gi.data(), dgatef.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(ui.data(), dupf.data(), n * sizeof(float)), 0);
}

// ---- optimizer ---------------------------------------------------------------------------------

// One element by hand: g = 0.5, m = v = 0, t = 1, b1 = 0.9, b2 = 0.95 gives m = 0.05,
// v = 0.0125, mhat = 0.5, vhat = 0.25, so param -= lr * (0.5 / (0.5 + eps) + wd * param).
TEST_F(CpuBackendTest, AdamwFirstStepByHand) {
  float param = 2.0f, m = 0.0f, v = 0.0f;
  const float grad = 0.5f, lr = 1e-3f, eps = 1e-8f, wd = 0.1f;
  const AdamWSegment seg{0, 1, wd};
  be_->adamw_update(&param, &grad, &m, &v, &seg, 1, AdamWStep{lr, 0.9f, 0.95f, eps, 1});
  EXPECT_FLOAT_EQ(m, 0.05f);
  EXPECT_FLOAT_EQ(v, 0.0125f);
  EXPECT_FLOAT_EQ(param, static_cast<float>(2.0 - 1e-3 * (0.5 / (0.5 + 1e-8) + 0.1 * 2.0)));
}

// Three segments with their own weight decay (one with none, as norms get), one call per step.
TEST_F(CpuBackendTest, AdamwThreeStepsOverSegmentsMatchTheFormula) {
  const size_t n = 1001;
  const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  const AdamWSegment segs[] = {{0, 400, 0.1f}, {400, 1, 0.0f}, {401, 600, 0.05f}};
  Vec param = random_vec(n, 150), m(n, 0.0), v(n, 0.0);
  Out paramf(param), mf(n), vf(n);
  for (int t = 1; t <= 3; ++t) {
    const Vec grad = random_vec(n, 150 + t);
    for (const AdamWSegment& sg : segs)
      for (size_t i = sg.offset; i < sg.offset + sg.numel; ++i) {  // the formula of kernels/backend.h, in double
        m[i] = b1 * m[i] + (1.0 - b1) * grad[i];
        v[i] = b2 * v[i] + (1.0 - b2) * grad[i] * grad[i];
        const double mhat = m[i] / (1.0 - std::pow(double(b1), t));
        const double vhat = v[i] / (1.0 - std::pow(double(b2), t));
        param[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + double(sg.weight_decay) * param[i]);
      }
    const auto gf = to_float(grad);
    be_->adamw_update(paramf.data(), gf.data(), mf.data(), vf.data(), segs, 3, AdamWStep{lr, b1, b2, eps, t});
  }
  EXPECT_CLOSE(paramf, param, kNmseElementwise);
  EXPECT_CLOSE(mf, m, kNmseElementwise);
  EXPECT_CLOSE(vf, v, kNmseElementwise);
}

// The norm is written to backend memory; the gradient is scaled only above a positive limit.
TEST_F(CpuBackendTest, ClipGradNormScalesOnlyAboveTheLimit) {
  const size_t n = 5003;
  const Vec g0 = random_vec(n, 155, -2, 2);
  double norm = 0.0;
  for (double x : g0) norm += x * x;
  norm = std::sqrt(norm);
  for (const double limit : {0.0, norm * 2, norm / 3}) {
    Out g(g0);
    float got = -1.0f;
    be_->clip_grad_norm(g.data(), n, static_cast<float>(limit), &got);
    EXPECT_NEAR(got, norm, 1e-6 * norm);
    const double k = limit > 0 && limit < norm ? limit / norm : 1.0;
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(g[i], g0[i] * k, 1e-6 * std::fabs(g0[i]) + 1e-12) << "limit " << limit;
  }
}

// The CPU computes GEMMs in fp32 or with bf16 inputs; tf32 is refused by name and changes nothing.
TEST_F(CpuBackendTest, TakesFp32AndBf16AndRefusesTf32) {
  EXPECT_EQ(be_->matmul_precision(), MatmulPrecision::Fp32);
  ASSERT_TRUE(be_->set_matmul_precision(MatmulPrecision::Bf16).ok());
  EXPECT_EQ(be_->matmul_precision(), MatmulPrecision::Bf16);
  const Status st = be_->set_matmul_precision(MatmulPrecision::Tf32);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("no tf32"), std::string::npos) << st.error().message;
  EXPECT_EQ(be_->matmul_precision(), MatmulPrecision::Bf16);
  EXPECT_TRUE(be_->set_matmul_precision(MatmulPrecision::Fp32).ok());
  EXPECT_EQ(be_->matmul_precision(), MatmulPrecision::Fp32);
}

// copy_rows moves each row to its pitch and touches nothing between the rows.
TEST_F(CpuBackendTest, CopyRowsKeepsThePitches) {
  const size_t rows = 4, width = 3, dst_pitch = 7, src_pitch = 5;  // in floats
  std::vector<float> src(rows * src_pitch), dst(rows * dst_pitch, -1.0f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = float(i);
  be_->copy_rows(dst.data(), dst_pitch * sizeof(float), src.data(), src_pitch * sizeof(float), width * sizeof(float),
                 rows);
  for (size_t r = 0; r < rows; ++r)
    for (size_t k = 0; k < dst_pitch; ++k)
      EXPECT_EQ(dst[r * dst_pitch + k], k < width ? src[r * src_pitch + k] : -1.0f) << "row " << r << ", " << k;
}

// A copy large enough to be split between the threads gives every byte, of an odd count, and writes
// nothing past the end; overlapping buffers (either direction) move as memmove moves them.
TEST_F(CpuBackendTest, LargeCopiesSplitWithoutLosingAByteAndOverlapAsMemmove) {
  const size_t bytes = (size_t(3) << 20) + 13;
  std::vector<unsigned char> src(bytes), dst(bytes + 64, 0xAB);
  std::mt19937 rng(21);
  for (unsigned char& c : src) c = static_cast<unsigned char>(rng());
  be_->copy(dst.data(), src.data(), bytes);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin()));
  EXPECT_TRUE(std::all_of(dst.begin() + bytes, dst.end(), [](unsigned char c) { return c == 0xAB; }));
  for (const ptrdiff_t shift : {ptrdiff_t(1000), ptrdiff_t(-1000)}) {
    std::vector<unsigned char> buf(bytes + 2000), want;
    for (unsigned char& c : buf) c = static_cast<unsigned char>(rng());
    want = buf;
    unsigned char* from = buf.data() + 1000;
    std::memmove(want.data() + 1000 + shift, want.data() + 1000, bytes);
    be_->copy(from + shift, from, bytes);
    EXPECT_TRUE(buf == want) << "shift " << shift;
  }
}

// ---- elementwise and reductions ----------------------------------------------------------------

TEST_F(CpuBackendTest, SumSquaresIsDoubleAccurateAndRepeatable) {
  const size_t n = 1000003;
  const auto xf = to_float(random_vec(n, 160, -3, 3));
  double expect = 0.0;
  for (float x : xf) expect += double(x) * double(x);
  const double got = be_->sum_squares(xf.data(), n);
  EXPECT_NEAR(got, expect, 1e-12 * expect);
  EXPECT_EQ(be_->sum_squares(xf.data(), n), got);  // bit for bit
  EXPECT_EQ(be_->sum_squares(xf.data(), 0), 0.0);
}

// RMSNorm's backward at a size split between the threads (dx and dw in one pass, dw summed in
// fixed blocks of rows): dx and dw those of the formula computed here in double from the float
// inputs, within 1e-6 relative to the largest, and one thread gives the bits of two.
TEST_F(CpuBackendTest, RmsnormBackwardMatchesDoubleAndDoesNotDependOnThreads) {
  const int N = 4160 + 3, C = 128;
  const float eps = 1e-5f;
  const auto x = to_float(random_vec(size_t(N) * C, 170, -2, 2)), w = to_float(random_vec(C, 171));
  const auto g = to_float(random_vec(size_t(N) * C, 172));
  const auto dx0 = to_float(random_vec(size_t(N) * C, 173)), dw0 = to_float(random_vec(C, 174));
  // dx += r (w g - x r^2 mean_c(w g x)), dw += sum_n g x r, with r = 1 / sqrt(mean_c(x^2) + eps).
  Vec rdx(dx0.begin(), dx0.end()), rdw(dw0.begin(), dw0.end());
  for (int n = 0; n < N; ++n) {
    const size_t o = size_t(n) * C;
    double ss = 0, dot = 0;
    for (int c = 0; c < C; ++c) {
      ss += double(x[o + c]) * x[o + c];
      dot += double(w[c]) * g[o + c] * x[o + c];
    }
    const double r = 1.0 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) {
      rdx[o + c] += r * (double(w[c]) * g[o + c] - x[o + c] * r * r * dot / C);
      rdw[c] += double(g[o + c]) * x[o + c] * r;
    }
  }
  const auto run = [&](std::vector<float>& dx, std::vector<float>& dw) {
    std::vector<float> out(x.size()), rstd(N);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    cpu::rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C);
  };
  auto dx = dx0, dw = dw0;
  run(dx, dw);
  for (const auto& [got, want] : {std::pair{&dx, &rdx}, {&dw, &rdw}}) {
    double scale = 0;
    for (double v : *want) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < got->size(); ++i) ASSERT_NEAR((*got)[i], (*want)[i], 1e-6 * scale) << "element " << i;
  }
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  auto dx1 = dx0, dw1 = dw0;
  run(dx1, dw1);
  omp_set_num_threads(threads);
  EXPECT_EQ(std::memcmp(dx1.data(), dx.data(), dx.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(dw1.data(), dw.data(), dw.size() * sizeof(float)), 0);
}

// ---- memory ------------------------------------------------------------------------------------

TEST_F(CpuBackendTest, AllocIsAlignedZeroedAndTryAllocFails) {
  for (size_t bytes : {size_t(0), size_t(1), size_t(1000), size_t(1) << 22}) {
    auto* p = static_cast<unsigned char*>(be_->alloc(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; ++i) nonzero += p[i] != 0;
    EXPECT_EQ(nonzero, 0u) << bytes << " bytes";
    be_->release(p);
  }
  for (const size_t huge : {std::numeric_limits<size_t>::max() / 2, std::numeric_limits<size_t>::max() - 10}) {
    auto refused = be_->try_alloc(huge);  // the second overflows when rounded up to 64 bytes
    ASSERT_FALSE(refused.ok()) << huge;
    EXPECT_EQ(refused.error().message.rfind("cpu: out of memory allocating " + std::to_string(huge) + " bytes", 0), 0u)
        << refused.error().message;
  }
  be_->release(nullptr);
}

// The VmFlags of the mapping that holds p (/proc/self/smaps): "hg" when advised MADV_HUGEPAGE.
std::string vm_flags_of(const void* p) {
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return "";
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  char line[512];
  bool inside = false;
  std::string flags;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && std::strchr(line, '-') < std::strchr(line, ' ')) {
      inside = a >= lo && a < hi;
    } else if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
      flags = line + 8;
      break;
    }
  }
  std::fclose(f);
  return flags;
}

// From 2 MiB on, backend buffers and per-thread scratch are 2 MiB-aligned and advised into
// transparent huge pages (kernels/cpu/cpu_common.h); below it they are not. Scratch is zeroed
// when it grows.
TEST_F(CpuBackendTest, LargeBuffersAreAdvisedIntoHugePages) {
  std::FILE* thp = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (thp == nullptr) GTEST_SKIP() << "this kernel has no transparent huge pages";
  std::fclose(thp);
  const size_t big = size_t(3) << 20;
  void* p = be_->alloc(big);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % cpu::kHugePage, 0u);
  EXPECT_NE(vm_flags_of(p).find(" hg"), std::string::npos) << vm_flags_of(p);
  be_->release(p);
  void* small = be_->alloc(1000);
  EXPECT_EQ(vm_flags_of(small).find(" hg"), std::string::npos) << vm_flags_of(small);
  be_->release(small);
  float* scratch = cpu::thread_scratch<float, 31>(big / sizeof(float));
  EXPECT_NE(vm_flags_of(scratch).find(" hg"), std::string::npos) << vm_flags_of(scratch);
  scratch[0] = 1.0f;
  float* again = cpu::thread_scratch<float, 31>(16);
  EXPECT_EQ(again, scratch) << "a smaller request reuses the buffer";
  EXPECT_EQ(scratch[0], 1.0f);
  float* grown = cpu::thread_scratch<float, 31>(2 * big / sizeof(float));
  EXPECT_EQ(std::count(grown, grown + 2 * big / sizeof(float), 0.0f), std::ptrdiff_t(2 * big / sizeof(float)));
}

TEST_F(CpuBackendTest, UploadCopyDownloadRoundTrip) {
  const std::vector<float> host = to_float(random_vec(333, 190));
  const size_t bytes = host.size() * sizeof(float);
  void* a = be_->alloc(bytes);
  void* b = be_->alloc(bytes);
  be_->upload(a, host.data(), bytes);
  be_->copy(b, a, bytes);
  be_->synchronize();
  std::vector<float> back(host.size());
  be_->download(back.data(), b, bytes);
  EXPECT_EQ(back, host);
  be_->release(a);
  be_->release(b);
}

// ---- numerics of the fast paths ----------------------------------------------------------------

// exp_nonpos<float> (the polynomial behind softmax and sigmoid) against std::exp in double.
TEST(CpuMath, ExpNonposRelativeError) {
  constexpr double kExpTol = 2e-7;  // Cephes expf polynomial: measured 8.5e-8 (1.4 ulp) worst
  double worst = 0.0;
  for (int i = 0; i <= 870000; ++i) {
    const float x = -0.0001f * static_cast<float>(i);  // [-87, 0]
    const double e = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(cpu::exp_nonpos(x) - e) / e);
  }
  EXPECT_LE(worst, kExpTol);
  EXPECT_EQ(cpu::exp_nonpos(-87.5f), 0.0f);
  EXPECT_EQ(cpu::exp_nonpos(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(cpu::exp_nonpos(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(cpu::exp_nonpos(kNaN)));
}

// The register tiles of attention's fp32 forward (kernels/cpu/attn_tiles_fp32.h): a prompt cut in
// two, the second part continuing the cache at q_pos0, gives the bits of the whole prompt, and one
// thread gives the bits of two. Each head width the tiles take, GQA, a cache longer than the keys.
TEST_F(CpuBackendTest, AttentionTilesGiveTheSameBitsForAnySplitOfThePrompt) {
  for (const int HS : {16, 32, 48, 64, 128}) {
    if (!cpu::attn_tiles_fit(HS)) continue;
    SCOPED_TRACE("HS " + std::to_string(HS));
    const int T = 3 * cpu::kAttnRowBlock + 9, cut = 2 * cpu::kAttnRowBlock - 7, cap = T + 5;
    const AttnShape whole = attn_shape(2, 6, 2, HS, T, T, cap, 0, true);
    const size_t qrow = size_t(whole.NH) * HS, krow = size_t(whole.NKV) * HS;
    const auto q = to_float(random_vec(size_t(2) * T * qrow, 210)),
               k = to_float(random_vec(size_t(2) * cap * krow, 211));
    const auto v = to_float(random_vec(size_t(2) * cap * krow, 212));
    ASSERT_GE(whole.Tq - cut, cpu::kAttnTileMinRows);
    std::vector<float> out(q.size()), att(size_t(2) * whole.NH * T * T);
    cpu::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), whole);
    // The rows from `cut` on, as a continuation: its own q and out (B, T - cut, NH, HS).
    const AttnShape tail = attn_shape(2, 6, 2, HS, T - cut, T, cap, cut, true);
    std::vector<float> tq(size_t(2) * tail.Tq * qrow), tout(tq.size(), kNaN), tatt(size_t(2) * tail.NH * tail.Tq * T);
    for (int b = 0; b < 2; ++b)
      std::copy_n(q.begin() + (size_t(b) * T + cut) * qrow, size_t(tail.Tq) * qrow,
                  tq.begin() + size_t(b) * tail.Tq * qrow);
    cpu::attention_forward(tout.data(), tatt.data(), tq.data(), k.data(), v.data(), tail);
    for (int b = 0; b < 2; ++b) {
      for (size_t i = 0; i < size_t(tail.Tq) * qrow; ++i) {
        const float w = out[(size_t(b) * T + cut) * qrow + i], t = tout[size_t(b) * tail.Tq * qrow + i];
        ASSERT_EQ(std::memcmp(&w, &t, sizeof w), 0) << "b " << b << " element " << i << ": " << w << " vs " << t;
      }
    }
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    std::vector<float> one(q.size()), att1(att.size());
    cpu::attention_forward(one.data(), att1.data(), q.data(), k.data(), v.data(), whole);
    omp_set_num_threads(threads);
    EXPECT_EQ(std::memcmp(one.data(), out.data(), out.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(att1.data(), att.data(), att.size() * sizeof(float)), 0);
  }
}

// The register tiles of attention's fp32 backward (attn_backward_tiles in ops_attention.h): each
// head width the tiles take, GQA 3:1, causal from the first key, queries behind a cache (q_pos0 >
// 0) and non-causal. The gradients are those of the double backward (OpenBLAS's dgemm) within
// 1e-5 relative to the largest, and one thread gives the bits of two.
TEST_F(CpuBackendTest, AttentionBackwardTilesMatchDoubleAndDoNotDependOnThreads) {
  for (const int HS : {16, 32, 48, 64, 128}) {
    if (!cpu::attn_tiles_fit(HS)) continue;
    for (const auto& [Tq, Tk, q_pos0, causal] : {std::tuple{70, 70, 0, true}, {40, 70, 30, true}, {33, 50, 0, false}}) {
      SCOPED_TRACE("HS " + std::to_string(HS) + " Tq " + std::to_string(Tq) + " q_pos0 " + std::to_string(q_pos0));
      const AttnShape s = attn_shape(2, 6, 2, HS, Tq, Tk, Tk, q_pos0, causal);
      const size_t nq = size_t(s.B) * Tq * s.NH * HS, nk = size_t(s.B) * Tk * s.NKV * HS;
      const std::vector<double> qd = random_vec(nq, 220), kd = random_vec(nk, 221), vd = random_vec(nk, 222),
                                od = random_vec(nq, 223);
      const auto q = to_float(qd), k = to_float(kd), v = to_float(vd), dout = to_float(od);
      const auto run = [&](auto& dq, auto& dk, auto& dv, const auto& q_, const auto& k_, const auto& v_,
                           const auto& d_) {
        using T = std::decay_t<decltype(dq[0])>;
        std::vector<T> out(nq), att(size_t(s.B) * s.NH * Tq * Tk);
        cpu::attention_forward(out.data(), att.data(), q_.data(), k_.data(), v_.data(), s);
        cpu::attention_backward(dq.data(), dk.data(), dv.data(), d_.data(), att.data(), q_.data(), k_.data(), v_.data(),
                                s);
      };
      // The double run from the float inputs, widened.
      const std::vector<double> qw(q.begin(), q.end()), kw(k.begin(), k.end()), vw(v.begin(), v.end()),
          dw(dout.begin(), dout.end());
      std::vector<double> rq(nq), rk(nk), rv(nk);
      run(rq, rk, rv, qw, kw, vw, dw);
      std::vector<float> dq(nq, kNaN), dk(nk, kNaN), dv(nk, kNaN);
      run(dq, dk, dv, q, k, v, dout);
      for (const auto& [got, want] : {std::pair{&dq, &rq}, {&dk, &rk}, {&dv, &rv}}) {
        double scale = 0;
        for (double x : *want) scale = std::max(scale, std::abs(x));
        for (size_t i = 0; i < got->size(); ++i) ASSERT_NEAR((*got)[i], (*want)[i], 1e-5 * scale) << "element " << i;
      }
      const int threads = omp_get_max_threads();
      omp_set_num_threads(1);
      std::vector<float> dq1(nq, kNaN), dk1(nk, kNaN), dv1(nk, kNaN);
      run(dq1, dk1, dv1, q, k, v, dout);
      omp_set_num_threads(threads);
      EXPECT_EQ(std::memcmp(dq1.data(), dq.data(), nq * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(dk1.data(), dk.data(), nk * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(dv1.data(), dv.data(), nk * sizeof(float)), 0);
    }
  }
}

// Static schedules and fixed reduction orders: the same inputs give the same bits.
TEST_F(CpuBackendTest, RunsRepeatBitForBit) {
  const int N = 200, C = 64, H = 16;
  const auto p = to_float(random_vec(size_t(N) * H, 200, 0.05, 0.95));
  const auto dR = to_float(random_vec(size_t(N) * C, 201)), W = to_float(random_vec(size_t(C) << H, 202));
  std::vector<float> first(p.size(), 0.0f), second(p.size(), 0.0f);
  be_->binary_mapper_backward(first.data(), dR.data(), W.data(), p.data(), N, C, H);
  be_->binary_mapper_backward(second.data(), dR.data(), W.data(), p.data(), N, C, H);
  EXPECT_EQ(first, second);

  const AttnShape s = attn_shape(4, 4, 2, 32, 65, 65, 65, 0, true);
  const size_t nq = size_t(s.B) * s.Tq * s.NH * s.HS, nk = size_t(s.B) * s.Tk * s.NKV * s.HS;
  const auto q = to_float(random_vec(nq, 203)), k = to_float(random_vec(nk, 204));
  const auto v = to_float(random_vec(nk, 205));
  std::vector<float> out(nq), att(size_t(s.B) * s.NH * s.Tq * s.Tk), dq1(nq), dk1(nk), dv1(nk);
  std::vector<float> dq2(nq), dk2(nk), dv2(nk);
  be_->attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), s);
  be_->attention_backward(dq1.data(), dk1.data(), dv1.data(), out.data(), out.data(), att.data(), q.data(), k.data(),
                          v.data(), s);
  be_->attention_backward(dq2.data(), dk2.data(), dv2.data(), out.data(), out.data(), att.data(), q.data(), k.data(),
                          v.data(), s);
  EXPECT_EQ(dq1, dq2);
  EXPECT_EQ(dk1, dk2);
  EXPECT_EQ(dv1, dv2);
}

}  // namespace
