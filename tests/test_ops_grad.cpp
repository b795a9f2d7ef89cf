// Finite-difference checks of every CPU op with a backward (kernels/cpu/ops_*.h), run on the
// double instantiations: the analytic gradient of f = <R, op(inputs)> (R random) must match
// central differences. Every row of the op table (kernels/op_table.h) that gives a gradient is
// checked at its test sizes; the tests below add small, awkward shapes (T = 1, odd C, GQA, HS/2 odd, causal and
// non-causal attention, queries behind a KV cache). The tests also pin the accumulate semantics
// of kernels/backend.h: parameter gradients and rmsnorm's dx add (+=), activation gradients
// overwrite (=). The OpsForward tests check the forwards themselves against textbook formulas
// (a backward consistent with a wrong forward would pass the finite differences).
//
// Not here: the binary mapper and the KL (test_binary_mapper.cpp), float-vs-double agreement of
// the fast paths (test_cpu_backend.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_crossentropy.h"
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

// Central-difference step: truncation error ~h^2 * f''' (1e-12) and rounding ~1e-16 |f| / h
// (1e-10) are both far below kGradTol.
constexpr double kStep = 1e-6;
// Allowed |fd - analytic| / max(1, |fd|): analytic and FD gradients agree to ~1e-9 in double; a
// wrong term in a backward is off by O(0.1).
constexpr double kGradTol = 1e-6;
// Values that must be overwritten by an op that assigns (=).
constexpr double kGarbage = 1e30;

using test::random_vec;

double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

Vec minus(const Vec& a, const Vec& b) {
  Vec d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

// Compares `analytic` with central differences of f with respect to every element of x.
void expect_grad(const std::string& what, Vec& x, const Vec& analytic, const std::function<double()>& f) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double fd = test::central_difference(x[i], kStep, f);
    const double err = std::abs(fd - analytic[i]) / std::max(1.0, std::abs(fd));
    if (!(err <= worst)) {  // also catches NaN
      worst = err;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, kGradTol) << what << ": worst element " << worst_i << " analytic " << analytic[worst_i];
}

// ---- forward values against the textbook formulas -----------------------------------------------
// The finite-difference tests below prove that each backward matches its forward; these prove
// that the forwards compute the documented math (docs/design.md section 3).

// Tolerance of a double op against a naive double loop: only summation order differs.
constexpr double kForwardTol = 1e-13;

TEST(OpsForward, MatmulRmsnormSwigluEmbedding) {
  const int N = 3, IC = 5, OC = 4, V = 6;
  const Vec x = random_vec(size_t(N) * IC, 90), w = random_vec(size_t(OC) * IC, 91);
  const Vec g = random_vec(IC, 92, 0.5, 1.5);
  Vec mm(size_t(N) * OC), rms(x.size()), rstd(N), sw(x.size()), emb(size_t(N) * IC);
  cpu::matmul_forward(mm.data(), x.data(), w.data(), N, IC, OC, false);
  cpu::rmsnorm_forward(rms.data(), rstd.data(), x.data(), g.data(), N, IC, 1e-5);
  cpu::swiglu_forward(sw.data(), x.data(), w.data(), x.size());
  const std::vector<int32_t> tok = {5, 0, 5};
  const Vec table = random_vec(size_t(V) * IC, 93);
  cpu::embedding_forward(emb.data(), tok.data(), table.data(), N, IC);
  for (int n = 0; n < N; ++n) {
    const double* xr = &x[size_t(n) * IC];
    double ms = 0.0;
    for (int c = 0; c < IC; ++c) ms += xr[c] * xr[c] / IC;
    for (int c = 0; c < IC; ++c) {
      EXPECT_NEAR(rms[size_t(n) * IC + c], g[c] * xr[c] / std::sqrt(ms + 1e-5), kForwardTol);
      const double gate = xr[c], up = w[size_t(n) * IC + c];
      EXPECT_NEAR(sw[size_t(n) * IC + c], gate / (1.0 + std::exp(-gate)) * up, kForwardTol);
      EXPECT_EQ(emb[size_t(n) * IC + c], table[size_t(tok[n]) * IC + c]);
    }
    for (int o = 0; o < OC; ++o) {
      double s = 0.0;
      for (int c = 0; c < IC; ++c) s += xr[c] * w[size_t(o) * IC + c];
      EXPECT_NEAR(mm[size_t(n) * OC + o], s, kForwardTol);
    }
  }
}

// out[b,i,h] = sum_j softmax_j(q.k_j / sqrt(HS)) v_j over visible j, kv head h / (NH / NKV).
Vec naive_attention(const Vec& q, const Vec& k, const Vec& v, const AttnShape& s) {
  Vec out(q.size(), 0.0);
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      const int kh = h / (s.NH / s.NKV);
      for (int i = 0; i < s.Tq; ++i) {
        const double* qi = &q[((size_t(b) * s.Tq + i) * s.NH + h) * s.HS];
        const int visible = s.causal ? std::min(s.Tk, s.q_pos0 + i + 1) : s.Tk;
        Vec w(visible);
        double total = 0.0;
        for (int j = 0; j < visible; ++j) {
          double dotqk = 0.0;
          for (int d = 0; d < s.HS; ++d) dotqk += qi[d] * k[((size_t(b) * s.Tk_cap + j) * s.NKV + kh) * s.HS + d];
          w[j] = std::exp(dotqk / std::sqrt(double(s.HS)));
          total += w[j];
        }
        double* o = &out[((size_t(b) * s.Tq + i) * s.NH + h) * s.HS];
        for (int j = 0; j < visible; ++j) {
          for (int d = 0; d < s.HS; ++d) o[d] += w[j] / total * v[((size_t(b) * s.Tk_cap + j) * s.NKV + kh) * s.HS + d];
        }
      }
    }
  }
  return out;
}

// ---- the op table: every forward with a gradient -------------------------------------------------

// Each case of kernels/op_table.h whose row gives a gradient, at its test sizes: the gradient of
// L = sum_o <s_o, output_o> (random seeds s) from the row's backward in double against central
// differences of the row's forward in double, at up to 48 elements of each input (every element
// of a small one). Cases over 300,000 elements or 1e8 FLOPs are left to the small shapes below.
class OpTable : public ::testing::TestWithParam<OpTestCase> {};

TEST_P(OpTable, GradientMatchesFiniteDifferences) {
  const OpCase c = GetParam().build();
  if (!c.grad.backward) GTEST_SKIP() << c.full_name() << " has no gradient";
  size_t elements = 0;
  for (const OpBuffer& b : c.buffers) elements += b.count();
  if (elements > 300000 || c.flops > 1e8) GTEST_SKIP() << c.full_name() << ": too large for finite differences";
  SCOPED_TRACE(c.full_name());
  const OpHost h0 = op_host(c);
  std::vector<Vec> seeds;
  for (size_t o = 0; o < c.grad.outputs.size(); ++o)
    seeds.push_back(random_vec(h0.d[c.grad.outputs[o]].size(), 500 + o));
  auto loss = [&](const OpHost& in) {
    OpHost h = in;
    c.reference(h);
    double l = 0.0;
    for (size_t o = 0; o < seeds.size(); ++o) l += dot(seeds[o], h.d[c.grad.outputs[o]]);
    return l;
  };
  OpHost after = h0;
  c.reference(after);
  for (size_t k : c.grad.wrt) after.d[k] = h0.d[k];  // in place: the backward reads the inputs
  std::vector<Vec> grads;
  for (size_t k : c.grad.wrt) grads.emplace_back(h0.d[k].size(), 0.0);
  c.grad.backward(after, seeds, grads);
  for (size_t i = 0; i < c.grad.wrt.size(); ++i) {
    const size_t k = c.grad.wrt[i], n = h0.d[k].size();
    const size_t stride = std::max<size_t>(1, n / 48);
    double worst = 0.0;
    size_t worst_j = 0;
    for (size_t j = 0; j < n; j += stride) {
      OpHost h = h0;
      const double fd = test::central_difference(h.d[k][j], kStep, [&] { return loss(h); });
      const double err = std::abs(fd - grads[i][j]) / std::max(1.0, std::abs(fd));
      if (!(err <= worst)) worst = err, worst_j = j;
    }
    EXPECT_LE(worst, kGradTol) << c.buffers[k].name << ": worst element " << worst_j << " analytic "
                               << grads[i][worst_j];
  }
}

// The rows that give a gradient (their first case says; a few cases of them skip themselves).
std::vector<OpTestCase> differentiable_cases() {
  std::vector<OpTestCase> all = op_test_cases(), with_grad;
  std::copy_if(all.begin(), all.end(), std::back_inserter(with_grad),
               [](const OpTestCase& t) { return bool(t.row->build(t.row->test_dims.front(), 0).grad.backward); });
  return with_grad;
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTable, ::testing::ValuesIn(differentiable_cases()),
                         [](const ::testing::TestParamInfo<OpTestCase>& i) { return i.param.name; });

// ---- embedding ---------------------------------------------------------------------------------

TEST(OpsGrad, EmbeddingBackwardScatterAddsRepeatedTokens) {
  const int V = 5, N = 7, C = 3;
  const std::vector<int32_t> tok = {4, 0, 4, 2, 4, 0, 1};  // (N) with repeats
  Vec wte = random_vec(size_t(V) * C, 1);                  // (V, C)
  const Vec R = random_vec(size_t(N) * C, 2);              // (N, C)
  Vec out(size_t(N) * C);
  auto f = [&] {
    cpu::embedding_forward(out.data(), tok.data(), wte.data(), N, C);
    return dot(R, out);
  };
  const Vec init = random_vec(wte.size(), 3);
  Vec dwte = init;
  cpu::embedding_backward(dwte.data(), R.data(), tok.data(), N, C);
  expect_grad("dwte (+=)", wte, minus(dwte, init), f);
}

// ---- RMSNorm -----------------------------------------------------------------------------------

void check_rmsnorm(int N, int C) {
  const double eps = 1e-5;
  Vec x = random_vec(size_t(N) * C, 10), w = random_vec(C, 11, 0.5, 1.5);
  const Vec R = random_vec(x.size(), 12);
  Vec out(x.size()), rstd(N);
  auto f = [&] {
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    return dot(R, out);
  };
  f();
  const Vec dx0 = random_vec(x.size(), 13), dw0 = random_vec(C, 14);
  Vec dx = dx0, dw = dw0;
  cpu::rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
  const std::string shape = " N=" + std::to_string(N) + " C=" + std::to_string(C);
  expect_grad("rmsnorm dx (+=)" + shape, x, minus(dx, dx0), f);
  expect_grad("rmsnorm dw (+=)" + shape, w, minus(dw, dw0), f);
}

TEST(OpsGrad, RmsnormOddWidth) { check_rmsnorm(3, 7); }
TEST(OpsGrad, RmsnormSingleRow) { check_rmsnorm(1, 5); }

// ---- matmul ------------------------------------------------------------------------------------

TEST(OpsGrad, MatmulBothGradients) {
  const int N = 5, IC = 7, OC = 3;
  Vec inp = random_vec(size_t(N) * IC, 20), w = random_vec(size_t(OC) * IC, 21);
  const Vec R = random_vec(size_t(N) * OC, 22);
  Vec out(size_t(N) * OC);
  auto f = [&] {
    cpu::matmul_forward(out.data(), inp.data(), w.data(), N, IC, OC, false);
    return dot(R, out);
  };
  Vec dinp(inp.size(), kGarbage);
  const Vec dw0 = random_vec(w.size(), 23);
  Vec dw = dw0;
  cpu::matmul_backward(dinp.data(), dw.data(), R.data(), inp.data(), w.data(), N, IC, OC, false);
  expect_grad("matmul dinp (=)", inp, dinp, f);
  expect_grad("matmul dw (+=)", w, minus(dw, dw0), f);

  // accumulate_dinp adds; a null dw is skipped.
  const Vec dinp0 = random_vec(inp.size(), 24);
  Vec dinp_acc = dinp0;
  cpu::matmul_backward(dinp_acc.data(), static_cast<double*>(nullptr), R.data(), inp.data(), w.data(), N, IC, OC, true);
  expect_grad("matmul dinp (+=)", inp, minus(dinp_acc, dinp0), f);
}

TEST(OpsGrad, MatmulForwardAccumulateAndNullDinp) {
  const int N = 4, IC = 3, OC = 5;
  const Vec inp = random_vec(size_t(N) * IC, 25), w = random_vec(size_t(OC) * IC, 26);
  const Vec base = random_vec(size_t(N) * OC, 27);
  Vec plain(base.size(), kGarbage), acc = base;
  cpu::matmul_forward(plain.data(), inp.data(), w.data(), N, IC, OC, false);
  cpu::matmul_forward(acc.data(), inp.data(), w.data(), N, IC, OC, true);
  for (size_t i = 0; i < acc.size(); ++i) EXPECT_NEAR(acc[i], base[i] + plain[i], 1e-12) << i;

  const Vec dout = random_vec(base.size(), 28);
  Vec dw_only(w.size(), 0.0), dw_both(w.size(), 0.0), dinp(inp.size());
  cpu::matmul_backward(static_cast<double*>(nullptr), dw_only.data(), dout.data(), inp.data(), w.data(), N, IC, OC,
                       false);
  cpu::matmul_backward(dinp.data(), dw_both.data(), dout.data(), inp.data(), w.data(), N, IC, OC, false);
  EXPECT_EQ(dw_only, dw_both);
}

// ---- RoPE --------------------------------------------------------------------------------------

TEST(OpsGrad, RopeBackwardIsTheAdjoint) {
  const int B = 2, T = 3, nh = 2, HS = 6, pos0 = 5;  // HS/2 = 3: odd half
  Vec x = random_vec(size_t(B) * T * nh * HS, 30);
  const Vec R = random_vec(x.size(), 31);
  const std::vector<float> freq = cpu::rope_default_inv_freq(10000.0, HS);
  auto f = [&] {
    Vec y = x;
    cpu::rope_forward(y.data(), B, T, nh, HS, pos0, freq.data());
    return dot(R, y);
  };
  Vec dx = R;
  cpu::rope_backward(dx.data(), B, T, nh, HS, pos0, freq.data());
  expect_grad("rope dx", x, dx, f);
}

TEST(OpsGrad, RopeMatchesHuggingFaceRotation) {
  const int HS = 4;
  const double theta = 100.0;
  const Vec x = {0.3, -0.7, 1.1, 0.2};  // (1, 1, 1, HS)
  const std::vector<float> freq = cpu::rope_default_inv_freq(theta, HS);
  for (int pos : {0, 1, 7}) {
    Vec y = x;
    cpu::rope_forward(y.data(), 1, 1, 1, HS, pos, freq.data());
    for (int i = 0; i < HS / 2; ++i) {
      // The frequencies are floats (as Hugging Face keeps them); the angle is exact from there.
      const double angle = pos * double(static_cast<float>(std::pow(theta, -2.0 * i / HS)));
      EXPECT_NEAR(y[i], x[i] * std::cos(angle) - x[i + 2] * std::sin(angle), 1e-15);
      EXPECT_NEAR(y[i + 2], x[i + 2] * std::cos(angle) + x[i] * std::sin(angle), 1e-15);
    }
  }
}

// ---- attention ---------------------------------------------------------------------------------

struct AttnData {
  Vec q, k, v;  // q (B, Tq, NH, HS); k, v (B, Tk_cap, NKV, HS)
};

AttnData random_attn(const AttnShape& s, uint64_t seed) {
  const size_t nq = size_t(s.B) * s.Tq * s.NH * s.HS, nk = size_t(s.B) * s.Tk_cap * s.NKV * s.HS;
  return {random_vec(nq, seed), random_vec(nk, seed + 1), random_vec(nk, seed + 2)};
}

void check_attention_grad(const AttnShape& s, const std::string& what) {
  AttnData d = random_attn(s, 40);
  const size_t nq = d.q.size();
  const Vec R = random_vec(nq, 43);
  Vec out(nq), att(size_t(s.B) * s.NH * s.Tq * s.Tk);
  auto f = [&] {
    cpu::attention_forward(out.data(), att.data(), d.q.data(), d.k.data(), d.v.data(), s);
    return dot(R, out);
  };
  f();
  Vec dq(nq, kGarbage), dk(d.k.size(), kGarbage), dv(d.v.size(), kGarbage);
  cpu::attention_backward(dq.data(), dk.data(), dv.data(), R.data(), att.data(), d.q.data(), d.k.data(), d.v.data(), s);
  expect_grad(what + " dq (=)", d.q, dq, f);
  expect_grad(what + " dk (=)", d.k, dk, f);
  expect_grad(what + " dv (=)", d.v, dv, f);
}

AttnShape attn_shape(int B, int NH, int NKV, int HS, int Tq, int Tk, int q_pos0, bool causal) {
  AttnShape s;
  s.B = B, s.NH = NH, s.NKV = NKV, s.HS = HS;
  s.Tq = Tq, s.Tk = Tk, s.Tk_cap = Tk, s.q_pos0 = q_pos0, s.causal = causal;
  return s;
}

// A causal sequence of three blocks of query rows (kAttnRowBlock) and a bit, GQA 2:1: dk and dv sum
// over the heads of the group and the blocks.
TEST(OpsGrad, AttentionInBlocksOfQueryRows) {
  check_attention_grad(attn_shape(1, 2, 1, 4, 3 * cpu::kAttnRowBlock + 3, 3 * cpu::kAttnRowBlock + 3, 0, true),
                       "3 blocks causal");
}

TEST(OpsGrad, AttentionQueriesBehindCache) {
  check_attention_grad(attn_shape(1, 4, 2, 4, 2, 5, 3, true), "Tq<Tk causal");
  check_attention_grad(attn_shape(2, 2, 2, 4, 3, 5, 0, false), "Tq<Tk non-causal");
}

// Copies `rows` rows of `width` values per sequence: dst row r <- src row src0 + r.
void copy_rows(Vec& dst, int dst_rows, const Vec& src, int src_rows, int src0, int rows, int B, size_t width) {
  for (int b = 0; b < B; ++b) {
    for (int r = 0; r < rows; ++r) {
      for (size_t e = 0; e < width; ++e) {
        dst[(size_t(b) * dst_rows + r) * width + e] = src[(size_t(b) * src_rows + src0 + r) * width + e];
      }
    }
  }
}

// Decode: Tq new queries at q_pos0 against a KV cache of capacity Tk_cap > Tk must reproduce the
// corresponding rows of the full causal computation; cache rows past Tk (NaN) are never read.
TEST(OpsGrad, AttentionDecodeMatchesFullRows) {
  const AttnShape full = attn_shape(2, 4, 2, 6, 6, 6, 0, true);
  const AttnData d = random_attn(full, 50);
  Vec out_full(d.q.size()), att_full(size_t(full.B) * full.NH * full.Tq * full.Tk);
  cpu::attention_forward(out_full.data(), att_full.data(), d.q.data(), d.k.data(), d.v.data(), full);
  const size_t q_row = size_t(full.NH) * full.HS, kv_row = size_t(full.NKV) * full.HS;
  for (const auto& [q_pos0, Tq] : {std::pair{3, 2}, std::pair{5, 1}, std::pair{0, 1}}) {
    AttnShape s = attn_shape(full.B, full.NH, full.NKV, full.HS, Tq, q_pos0 + Tq, q_pos0, true);
    s.Tk_cap = 8;
    Vec q(size_t(s.B) * s.Tq * q_row), k(size_t(s.B) * s.Tk_cap * kv_row, std::nan("")), v = k;
    copy_rows(q, s.Tq, d.q, full.Tq, q_pos0, s.Tq, s.B, q_row);
    copy_rows(k, s.Tk_cap, d.k, full.Tk, 0, s.Tk, s.B, kv_row);
    copy_rows(v, s.Tk_cap, d.v, full.Tk, 0, s.Tk, s.B, kv_row);
    Vec out(q.size()), att(size_t(s.B) * s.NH * s.Tq * s.Tk);
    cpu::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), s);
    Vec expect_out(q.size()), expect_att(att.size());
    copy_rows(expect_out, s.Tq, out_full, full.Tq, q_pos0, s.Tq, s.B, q_row);
    for (int bh = 0; bh < s.B * s.NH; ++bh) {  // rows q_pos0.. of att_full, first Tk columns
      for (int i = 0; i < s.Tq; ++i) {
        for (int j = 0; j < s.Tk; ++j) {
          expect_att[(size_t(bh) * s.Tq + i) * s.Tk + j] = att_full[(size_t(bh) * full.Tq + q_pos0 + i) * full.Tk + j];
        }
      }
    }
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expect_out[i], 1e-14) << i;
    for (size_t i = 0; i < att.size(); ++i) EXPECT_NEAR(att[i], expect_att[i], 1e-14) << i;
  }
}

// Probabilities: each row sums to 1 over the visible keys, masked keys hold exactly 0.
TEST(OpsGrad, AttentionProbabilitiesMasked) {
  const AttnShape s = attn_shape(1, 2, 1, 4, 5, 5, 0, true);
  const AttnData d = random_attn(s, 60);
  Vec out(d.q.size()), att(size_t(s.NH) * s.Tq * s.Tk, kGarbage);
  cpu::attention_forward(out.data(), att.data(), d.q.data(), d.k.data(), d.v.data(), s);
  for (int h = 0; h < s.NH; ++h) {
    for (int i = 0; i < s.Tq; ++i) {
      double sum = 0.0;
      for (int j = 0; j < s.Tk; ++j) {
        const double a = att[(size_t(h) * s.Tq + i) * s.Tk + j];
        if (j > i) {
          EXPECT_EQ(a, 0.0) << "h " << h << " i " << i << " j " << j;
        }
        sum += a;
      }
      EXPECT_NEAR(sum, 1.0, 1e-14);
    }
  }
}

TEST(OpsForward, AttentionMatchesNaiveFormula) {
  for (bool causal : {true, false}) {
    AttnShape s = attn_shape(2, 6, 2, 5, 3, 7, 4, causal);  // GQA 3:1, queries behind a cache
    s.Tk_cap = 9;
    const AttnData d = random_attn(s, 95);
    Vec out(d.q.size()), att(size_t(s.B) * s.NH * s.Tq * s.Tk);
    cpu::attention_forward(out.data(), att.data(), d.q.data(), d.k.data(), d.v.data(), s);
    const Vec expect = naive_attention(d.q, d.k, d.v, s);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expect[i], kForwardTol) << i;
  }
}

// Long causal prompts run in blocks of query rows (kAttnRowBlock) that multiply only the keys
// their last row sees: a prompt of 3 blocks and a bit, and a chunk of 2 blocks behind a cache, give
// the naive formula, and every masked probability is exactly 0 though att held garbage before.
TEST(OpsForward, AttentionInBlocksOfQueryRowsMatchesNaiveFormula) {
  for (const auto& [Tq, q_pos0] : {std::pair{3 * cpu::kAttnRowBlock + 5, 0}, std::pair{2 * cpu::kAttnRowBlock, 37}}) {
    SCOPED_TRACE("Tq " + std::to_string(Tq) + " q_pos0 " + std::to_string(q_pos0));
    AttnShape s = attn_shape(1, 3, 3, 4, Tq, q_pos0 + Tq, q_pos0, true);
    s.Tk_cap = s.Tk + 2;
    const AttnData d = random_attn(s, 96);
    Vec out(d.q.size()), att(size_t(s.B) * s.NH * s.Tq * s.Tk, kGarbage);
    cpu::attention_forward(out.data(), att.data(), d.q.data(), d.k.data(), d.v.data(), s);
    const Vec expect = naive_attention(d.q, d.k, d.v, s);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], expect[i], kForwardTol) << i;
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < s.Tq; ++i)
        for (int j = q_pos0 + i + 1; j < s.Tk; ++j)
          ASSERT_EQ(att[(size_t(h) * s.Tq + i) * s.Tk + j], 0.0) << h << i << j;
  }
}

// ---- cross-entropy -----------------------------------------------------------------------------

TEST(OpsGrad, CrossentropyAndInPlaceBackward) {
  const int N = 4, V = 7;
  const double scale = 0.37;
  Vec logits = random_vec(size_t(N) * V, 80, -5.0, 5.0);
  const std::vector<int32_t> targets = {0, 6, 3, 3};
  Vec losses(N);
  auto f = [&] {
    cpu::crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V);
    double s = 0.0;
    for (double l : losses) s += scale * l;
    return s;
  };
  Vec dlogits(logits.size(), kGarbage);
  cpu::crossentropy_backward(dlogits.data(), logits.data(), targets.data(), N, V, scale);
  expect_grad("crossentropy dlogits (=)", logits, dlogits, f);

  Vec in_place = logits;  // dlogits aliases logits
  cpu::crossentropy_backward(in_place.data(), in_place.data(), targets.data(), N, V, scale);
  for (size_t i = 0; i < in_place.size(); ++i) EXPECT_NEAR(in_place[i], dlogits[i], 1e-15) << i;
}

TEST(OpsGrad, CrossentropyValue) {
  const Vec logits = {1000.0, 0.0, -1000.0};  // would overflow without the max subtraction
  const std::vector<int32_t> target = {1};
  double loss = 0.0;
  cpu::crossentropy_forward(&loss, logits.data(), target.data(), 1, 3);
  EXPECT_NEAR(loss, 1000.0, 1e-12);
}

}  // namespace
