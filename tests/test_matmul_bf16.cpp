// Training's GEMMs at --precision bf16 on the CPU (kernels/cpu/ops_matmul_bf16.h) on every path this
// CPU runs (the tiles where it has AMX, rounding + sgemm everywhere): the three products of a
// Linear layer against a double-precision GEMM of the bf16-rounded inputs, and against fp32 within
// the bf16 bound while differing from it (the inputs really are rounded); the CPU backend at bf16
// routes fp32 weights through them; attention's products at bf16 (forward and backward, on each
// engine) match a double computation of the rounded operands, stay apart from fp32, and the
// backend at bf16 uses them; the register tiles' rounding gives the scalar conversion's bits; on
// AMX the tile forward (attn_amx.h) gives the bits of the products it replaces.
//
// Not here: the AMX kernel's own edge cases (test_gemm_amx), speed (docs/performance.md).
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/base/dtype.h"
#include "kernels/cpu/attn_amx.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_matmul_bf16.h"

namespace {

using namespace ftx;
using cpu::CpuIsa;

// Against the exact product of the rounded inputs only fp32 summation differs.
constexpr double kSumRel = 1e-5;
// Against the fp32 inputs: each term moves by at most about 2^-8 relative (two roundings of 2^-9).
constexpr double kBf16Rel = 1.0 / 128;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

double bf16(float x) { return bf16_to_fp32(fp32_to_bf16(x)); }

// C (M, N) = A (M, K) B (K, N) in double from element accessors, with sum |a b| per element.
template <class FA, class FB>
void reference(int M, int N, int K, FA a, FB b, bool round, std::vector<double>* c, std::vector<double>* mag) {
  c->assign(size_t(M) * N, 0.0), mag->assign(size_t(M) * N, 0.0);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0, g = 0;
      for (int k = 0; k < K; ++k) {
        const double x = round ? bf16(a(m, k)) : a(m, k), y = round ? bf16(b(k, n)) : b(k, n);
        s += x * y, g += std::abs(x * y);
      }
      (*c)[size_t(m) * N + n] = s, (*mag)[size_t(m) * N + n] = g;
    }
}

class MatmulBf16 : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu::cpu_isa_supported(GetParam())) GTEST_SKIP() << "this CPU cannot run " << cpu::cpu_isa_name(GetParam());
    cpu::set_cpu_isa_for_tests(GetParam());
  }
  void TearDown() override { cpu::reset_cpu_isa_for_tests(); }

  // got against the rounded-input product (kSumRel) and the fp32-input one (kBf16Rel, and apart).
  static void expect_bf16_product(const std::vector<float>& got, const std::vector<double>& base, int M, int N, int K,
                                  auto a, auto b, const char* what) {
    std::vector<double> exact, mag, plain, plain_mag;
    reference(M, N, K, a, b, true, &exact, &mag);
    reference(M, N, K, a, b, false, &plain, &plain_mag);
    double worst_rounded = 0, worst_plain = 0, apart = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double g = got[i] - base[i];
      worst_rounded = std::max(worst_rounded, std::abs(g - exact[i]) / (mag[i] + std::abs(base[i]) + 1e-30));
      worst_plain = std::max(worst_plain, std::abs(g - plain[i]) / (plain_mag[i] + std::abs(base[i]) + 1e-30));
      apart = std::max(apart, std::abs(g - plain[i]));
    }
    EXPECT_LE(worst_rounded, kSumRel) << what;
    EXPECT_LE(worst_plain, kBf16Rel) << what;
    EXPECT_GT(apart, 1e-4) << what << ": no further from fp32 than fp32 rounding: the inputs were not rounded";
  }
};

// out = inp w^T, dinp = dout w (then += again), dw += dout^T inp, at a tile-unfriendly shape.
TEST_P(MatmulBf16, TheLinearLayersThreeProductsRoundTheirInputs) {
  const int N = 77, IC = 129, OC = 45;
  const std::vector<float> inp = random_floats(size_t(N) * IC, 1), w = random_floats(size_t(OC) * IC, 2);
  const std::vector<float> dout = random_floats(size_t(N) * OC, 3), dw0 = random_floats(size_t(OC) * IC, 4);
  std::vector<float> out(size_t(N) * OC, 5.0f);
  cpu::matmul_forward_bf16(out.data(), inp.data(), w.data(), N, IC, OC, false);
  expect_bf16_product(
      out, std::vector<double>(out.size(), 0.0), N, OC, IC, [&](int n, int k) { return inp[size_t(n) * IC + k]; },
      [&](int k, int o) { return w[size_t(o) * IC + k]; }, "forward");

  std::vector<float> dinp(size_t(N) * IC, 0.0f), dw = dw0;
  cpu::matmul_backward_bf16(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), N, IC, OC, false);
  const auto d = [&](int n, int o) { return dout[size_t(n) * OC + o]; };
  expect_bf16_product(
      dinp, std::vector<double>(dinp.size(), 0.0), N, IC, OC, d, [&](int o, int i) { return w[size_t(o) * IC + i]; },
      "dinp");
  expect_bf16_product(
      dw, std::vector<double>(dw0.begin(), dw0.end()), OC, IC, N, [&](int o, int n) { return d(n, o); },
      [&](int n, int i) { return inp[size_t(n) * IC + i]; }, "dw (accumulated)");

  const std::vector<float> once = dinp;  // accumulate_dinp: += a second time
  cpu::matmul_backward_bf16(dinp.data(), nullptr, dout.data(), inp.data(), w.data(), N, IC, OC, true);
  for (size_t i = 0; i < dinp.size(); ++i) ASSERT_NEAR(dinp[i], 2.0f * once[i], 1e-5f * (1 + std::abs(once[i])));
}

// The CPU backend at bf16 sends fp32 weights through the rounded products; at fp32 it does not.
TEST_P(MatmulBf16, TheCpuBackendAtBf16RoundsTheGemmInputs) {
  const int N = 40, IC = 96, OC = 33;
  const std::vector<float> inp = random_floats(size_t(N) * IC, 7), w = random_floats(size_t(OC) * IC, 8);
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::vector<float> fp32(size_t(N) * OC), at_bf16(size_t(N) * OC), direct(size_t(N) * OC);
  be->matmul_forward(fp32.data(), inp.data(), f32_weight(w.data()), N, IC, OC, false);
  ASSERT_TRUE(be->set_matmul_precision(MatmulPrecision::Bf16).ok());
  be->matmul_forward(at_bf16.data(), inp.data(), f32_weight(w.data()), N, IC, OC, false);
  cpu::matmul_forward_bf16(direct.data(), inp.data(), w.data(), N, IC, OC, false);
  EXPECT_EQ(at_bf16, direct);
  EXPECT_NE(at_bf16, fp32);
}

// ||got - want|| / ||want|| over a buffer, want in double.
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double d = 0, n = 0;
  for (size_t i = 0; i < got.size(); ++i) d += (got[i] - want[i]) * (got[i] - want[i]), n += want[i] * want[i];
  return std::sqrt(d / n);
}

// Attention's forward and backward in double with every product's operands rounded to bf16 where
// the bf16 paths round them (Q, K, V, P, dO, dS), over the visible keys; P and dS are those of the
// double computation.
struct AttnGrads {
  std::vector<double> out, dq, dk, dv;
};
AttnGrads rounded_attention(const AttnShape& s, const std::vector<float>& q, const std::vector<float>& k,
                            const std::vector<float>& v, const std::vector<float>& dout) {
  const int group = s.NH / s.NKV;
  const double scale = 1.0 / std::sqrt(double(s.HS));
  AttnGrads g{std::vector<double>(q.size()), std::vector<double>(q.size()), std::vector<double>(k.size()),
              std::vector<double>(k.size())};
  std::vector<double> p(size_t(s.Tk)), ds(size_t(s.Tq) * s.Tk);
  std::vector<double> pr(size_t(s.Tq) * s.Tk);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const auto qi = [&](int i, int d) { return ((size_t(b) * s.Tq + i) * s.NH + h) * s.HS + d; };
      const auto kj = [&](int j, int d) { return ((size_t(b) * s.Tk + j) * s.NKV + h / group) * s.HS + d; };
      for (int i = 0; i < s.Tq; ++i) {
        const int keys = s.causal ? i + 1 : s.Tk;
        double mx = -1e300, sum = 0, pdp = 0;
        for (int j = 0; j < keys; ++j) {
          double x = 0;
          for (int d = 0; d < s.HS; ++d) x += bf16(q[qi(i, d)]) * bf16(k[kj(j, d)]);
          p[j] = x * scale, mx = std::max(mx, p[j]);
        }
        for (int j = 0; j < keys; ++j) p[j] = std::exp(p[j] - mx), sum += p[j];
        for (int j = 0; j < s.Tk; ++j) pr[size_t(i) * s.Tk + j] = j < keys ? bf16(float(p[j] / sum)) : 0.0;
        for (int j = 0; j < keys; ++j) {
          p[j] /= sum;
          double dp = 0;
          for (int d = 0; d < s.HS; ++d) dp += bf16(dout[qi(i, d)]) * bf16(v[kj(j, d)]);
          ds[size_t(i) * s.Tk + j] = dp, pdp += p[j] * dp;
        }
        for (int j = 0; j < s.Tk; ++j)
          ds[size_t(i) * s.Tk + j] = j < keys ? bf16(float(p[j] * (ds[size_t(i) * s.Tk + j] - pdp) * scale)) : 0.0;
        for (int d = 0; d < s.HS; ++d) {
          double o = 0, dq = 0;
          for (int j = 0; j < keys; ++j) {
            o += pr[size_t(i) * s.Tk + j] * bf16(v[kj(j, d)]);
            dq += ds[size_t(i) * s.Tk + j] * bf16(k[kj(j, d)]);
          }
          g.out[qi(i, d)] = o, g.dq[qi(i, d)] = dq;
        }
      }
      for (int j = 0; j < s.Tk; ++j)
        for (int d = 0; d < s.HS; ++d)
          for (int i = 0; i < s.Tq; ++i) {
            g.dv[kj(j, d)] += pr[size_t(i) * s.Tk + j] * bf16(dout[qi(i, d)]);
            g.dk[kj(j, d)] += ds[size_t(i) * s.Tk + j] * bf16(q[qi(i, d)]);
          }
    }
  return g;
}

// Attention at bf16 (AttnProducts::Bf16Inputs), forward and backward, causal GQA, on each engine
// it has: the register tiles on rounded operands (a training batch of short sequences, and the
// backward of a longer one), on AMX the tile forward (few kv heads) and gemm_bf16_inputs' tiles
// (above kAttnAmxMinWork*), otherwise gemm_bf16_inputs. Each within fp32's summation of the
// rounded double computation (an operand left unrounded moves the result by about 1e-3), and
// further from the exact double computation than fp32 is; the backend at bf16 gives the same bits.
TEST_P(MatmulBf16, AttentionProductsAtBf16) {
  const auto shape = [](int B, int NH, int NKV, int HS, int T) {
    AttnShape s;
    s.B = B, s.NH = NH, s.NKV = NKV, s.HS = HS, s.Tq = s.Tk = s.Tk_cap = T, s.q_pos0 = 0, s.causal = true;
    return s;
  };
  for (const AttnShape& s : {shape(2, 4, 2, 32, 130), shape(8, 4, 2, 32, 65), shape(1, 2, 1, 64, 256)}) {
    const std::string what = "HS " + std::to_string(s.HS) + ", T " + std::to_string(s.Tq);
    const size_t nq = size_t(s.B) * s.Tq * s.NH * s.HS, nk = size_t(s.B) * s.Tk * s.NKV * s.HS;
    const size_t na = size_t(s.B) * s.NH * s.Tq * s.Tk;
    const std::vector<float> q = random_floats(nq, 11), k = random_floats(nk, 12), v = random_floats(nk, 13);
    const std::vector<float> dout = random_floats(nq, 14);
    auto widen = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
    const std::vector<double> qd = widen(q), kd = widen(k), vd = widen(v), dod = widen(dout);
    std::vector<double> out_d(nq), att_d(na), dq_d(nq), dk_d(nk), dv_d(nk);
    cpu::attention_forward(out_d.data(), att_d.data(), qd.data(), kd.data(), vd.data(), s);
    cpu::attention_backward(dq_d.data(), dk_d.data(), dv_d.data(), dod.data(), att_d.data(), qd.data(), kd.data(),
                            vd.data(), s);
    const AttnGrads rounded = rounded_attention(s, q, k, v, dout);
    struct Grads {
      std::vector<float> out, att, dq, dk, dv;
    };
    auto run = [&](auto&& forward, auto&& backward) {
      Grads g{std::vector<float>(nq), std::vector<float>(na), std::vector<float>(nq), std::vector<float>(nk),
              std::vector<float>(nk)};
      forward(g.out.data(), g.att.data());
      backward(g.dq.data(), g.dk.data(), g.dv.data(), g.att.data());
      return g;
    };
    auto direct = [&](cpu::AttnProducts by) {
      return run([&](float* o, float* a) { cpu::attention_forward(o, a, q.data(), k.data(), v.data(), s, by); },
                 [&](float* dq, float* dk, float* dv, const float* a) {
                   cpu::attention_backward(dq, dk, dv, dout.data(), a, q.data(), k.data(), v.data(), s, by);
                 });
    };
    const Grads fp32 = direct(cpu::AttnProducts::Fp32), bf = direct(cpu::AttnProducts::Bf16Inputs);
    const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>> checks[] = {
        {"out", {&bf.out, &fp32.out}},
        {"dq", {&bf.dq, &fp32.dq}},
        {"dk", {&bf.dk, &fp32.dk}},
        {"dv", {&bf.dv, &fp32.dv}}};
    const std::vector<double>* want[] = {&out_d, &dq_d, &dk_d, &dv_d};
    const std::vector<double>* want_rounded[] = {&rounded.out, &rounded.dq, &rounded.dk, &rounded.dv};
    for (size_t i = 0; i < std::size(checks); ++i) {
      const double e_rounded = relative_error(*checks[i].second.first, *want_rounded[i]);
      const double e_bf16 = relative_error(*checks[i].second.first, *want[i]);
      const double e_fp32 = relative_error(*checks[i].second.second, *want[i]);
      EXPECT_LE(e_rounded, 1e-4) << what << ": " << checks[i].first;
      EXPECT_LE(e_bf16, 1e-2) << what << ": " << checks[i].first;
      EXPECT_LE(e_fp32, 1e-5) << what << ": " << checks[i].first;
      EXPECT_GT(e_bf16, 10 * e_fp32) << what << ": " << checks[i].first << ": the products' inputs were not rounded";
    }
    std::unique_ptr<Backend> be = make_cpu_backend();
    ASSERT_TRUE(be->set_matmul_precision(MatmulPrecision::Bf16).ok());
    const Grads via =
        run([&](float* o, float* a) { be->attention_forward(o, a, q.data(), k.data(), v.data(), s); },
            [&](float* dq, float* dk, float* dv, const float* a) {
              be->attention_backward(dq, dk, dv, dout.data(), nullptr, a, q.data(), k.data(), v.data(), s);
            });
    EXPECT_EQ(via.out, bf.out) << what;
    EXPECT_EQ(via.dq, bf.dq) << what;
    EXPECT_EQ(via.dk, bf.dk) << what;
    EXPECT_EQ(via.dv, bf.dv) << what;
  }
}

// The tile forward (attn_amx.h), which the Amx path runs from 16 query rows on, against the
// products it replaces, gemm_bf16_inputs per (b, head) with the softmax between: the same bits,
// on head sizes 16 to 128, GQA, a prompt behind a cache, rows not a multiple of 16, not causal,
// and on one thread as on all.
TEST(AttentionAmx, TilesGiveTheBitsOfTheGemmProducts) {
  if (!cpu::cpu_isa_supported(CpuIsa::Amx)) GTEST_SKIP() << "this CPU has no AMX";
  cpu::set_cpu_isa_for_tests(CpuIsa::Amx);
  const auto shape = [](int B, int NH, int NKV, int HS, int Tq, int q_pos0, int Tk_cap, bool causal) {
    AttnShape s;
    s.B = B, s.NH = NH, s.NKV = NKV, s.HS = HS, s.Tq = Tq, s.q_pos0 = q_pos0, s.Tk = q_pos0 + Tq, s.Tk_cap = Tk_cap;
    s.causal = causal;
    return s;
  };
  const AttnShape shapes[] = {shape(1, 9, 3, 64, 100, 0, 100, true), shape(1, 4, 1, 128, 50, 37, 120, true),
                              shape(3, 2, 2, 48, 65, 0, 65, false), shape(2, 2, 1, 16, 16, 0, 16, true),
                              shape(2, 6, 2, 32, 200, 0, 200, true)};
  for (const AttnShape& s : shapes) {
    ASSERT_TRUE(cpu::attn_amx_fits(s));
    const size_t nq = size_t(s.B) * s.Tq * s.NH * s.HS, nk = size_t(s.B) * s.Tk_cap * s.NKV * s.HS;
    const size_t na = size_t(s.B) * s.NH * s.Tq * s.Tk;
    const std::vector<float> q = random_floats(nq, 21), k = random_floats(nk, 22), v = random_floats(nk, 23);
    std::vector<float> out(nq), att(na), out1(nq), att1(na), want_out(nq), want_att(na);
    cpu::attn_forward_amx(out.data(), att.data(), q.data(), k.data(), v.data(), s);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    cpu::attn_forward_amx(out1.data(), att1.data(), q.data(), k.data(), v.data(), s);
    omp_set_num_threads(threads);
    for (int b = 0; b < s.B; ++b) {
      for (int h = 0; h < s.NH; ++h) {
        const cpu::AttnHead x = cpu::attn_head(s, b, h, s.Tk_cap);
        float* a = want_att.data() + x.att_off;
        cpu::gemm_bf16_inputs(false, true, s.Tq, s.Tk, s.HS, q.data() + x.q_off, x.ldq, k.data() + x.kv_off, x.ldkv, a,
                              s.Tk, false);
        cpu::attn_softmax_rows(a, s, 0, s.Tq, 1.0f / std::sqrt(float(s.HS)));
        cpu::gemm_bf16_inputs(false, false, s.Tq, s.HS, s.Tk, a, s.Tk, v.data() + x.kv_off, x.ldkv,
                              want_out.data() + x.q_off, x.ldq, false);
      }
    }
    const std::string what = "HS " + std::to_string(s.HS) + ", Tq " + std::to_string(s.Tq);
    EXPECT_EQ(att, want_att) << what;
    EXPECT_EQ(out, want_out) << what;
    EXPECT_EQ(out1, out) << what << ": one thread";
    EXPECT_EQ(att1, att) << what << ": one thread";
  }
  cpu::reset_cpu_isa_for_tests();
}

INSTANTIATE_TEST_SUITE_P(Isa, MatmulBf16, ::testing::Values(CpuIsa::Generic, CpuIsa::Amx),
                         [](const auto& info) { return std::string(cpu::cpu_isa_name(info.param)); });

}  // namespace
