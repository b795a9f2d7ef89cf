// The op table's rows, limits and the driver that runs a case on a backend (kernels/op_table.h).
#include "kernels/op_table.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <sstream>

#include "kernels/base/philox.h"
#include "kernels/cpu/ops_adamw.h"
#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_binary_mapper.h"
#include "kernels/cpu/ops_crossentropy.h"
#include "kernels/cpu/ops_elementwise.h"
#include "kernels/cpu/ops_embedding.h"
#include "kernels/cpu/ops_matmul.h"
#include "kernels/cpu/ops_rmsnorm.h"
#include "kernels/cpu/ops_rope.h"
#include "kernels/cpu/ops_route.h"
#include "kernels/cpu/ops_swiglu.h"

namespace ftx {

// ---- limits -------------------------------------------------------------------------------------
// A wrong index, a lost term or a missed accumulation gives relative errors of 0.1 to 1, far
// above every limit here.

const char* op_error_name(OpError e) {
  switch (e) {
    case OpError::Exact:
      return "exact";
    case OpError::Elementwise:
      return "elementwise";
    case OpError::Reduction:
      return "reduction";
    case OpError::Rope:
      return "rope";
    case OpError::Gemm:
      return "gemm";
    case OpError::Bf16:
      return "bf16";
    case OpError::Mapper:
      return "mapper";
    case OpError::Attention:
      return "attention";
  }
  return "?";
}

double op_limit_gpu(OpError e) {
  switch (e) {
    // Copies, gathers, fills and single IEEE operations (a + b, a * s): no rounding freedom.
    case OpError::Exact:
      return 0.0;
    // One or a few roundings per element, and expf/logf on the GPU against the CPU's polynomial
    // exp or double: each element within a few ulp (6e-8 each), the L2 error near 1e-7.
    case OpError::Elementwise:
      return 1e-6;
    // Sums over tens to thousands of terms (RMSNorm, softmax, scatter-adds by atomics, column
    // sums) in another order than the CPU's: about sqrt(terms) * 6e-8, 1e-7..3e-6 at test sizes.
    case OpError::Reduction:
      return 1e-5;
    // The CPU builds cos/sin in double; a GPU that forms the angle pos * inv_freq in float loses
    // up to pos * 6e-8 rad, about 7e-6 at the test positions (< 120). A swapped pair is O(1).
    case OpError::Rope:
      return 1e-5;
    // Tensor cores in TF32 (10-bit mantissa, unit roundoff 2^-11 = 4.9e-4): every input rounded
    // before an fp32-accumulated product. Simulated on the CPU on the test shapes: 2.6e-4 with
    // round-to-nearest, 7e-4 with truncation, up to 1.2e-3 for IC = 1 (one product, two
    // truncations: at most 2^-9 per element). 3e-3 keeps the worst case in, 30x under a bug.
    case OpError::Gemm:
      return 3e-3;
    // bf16 GEMM inputs (8-bit mantissa, unit roundoff 2^-9 = 2e-3) rounded to nearest: a product
    // is off by about 1.6e-3 RMS, a sum of many random products keeps that relative size. 1e-2
    // bounds it with room; a stale bf16 copy of a weight or a wrong offset into it is O(1).
    case OpError::Bf16:
      return 1e-2;
    // binary_mapper_backward: dG = dR W is a TF32 GEMM, then dlogits = S_h - p S subtracts two
    // weighted sums of dG, which can cancel a little (simulated 2e-4..7e-4, like a GEMM's), and
    // sums in float instead of the CPU's double.
    case OpError::Mapper:
      return 5e-3;
    // A flash-style fp32 kernel: out sums up to 1024 probability-weighted rows, the backward
    // recomputes the probabilities from the log-sum-exp and forms dS = P (dP - <dout, out>)
    // instead of the CPU's stored P: about 1e-6..1e-5. It assumes fp32 FMAs (the tensor-core
    // attention at bf16 has its own limit in test_backend_ops).
    case OpError::Attention:
      return 1e-4;
  }
  return 0.0;
}

double op_limit_double(OpError e) {
  switch (e) {
    case OpError::Exact:
      return 0.0;
    // Float rounding alone gives relative errors of 3e-8..3e-7.
    case OpError::Elementwise:
    case OpError::Rope:
      return 1e-6;
    // Sums over up to thousands of terms in float (sgemm against dgemm, softmax, norms).
    case OpError::Reduction:
    case OpError::Gemm:
    case OpError::Mapper:
    case OpError::Attention:
      return 1e-5;
    // The CPU's avx512bf16 path rounds the input of a bf16-weight GEMM to bf16 as well (the avx2
    // and generic paths keep it fp32): a bf16 rounding per product, as on CUDA.
    case OpError::Bf16:
      return 1e-2;
  }
  return 0.0;
}

// ---- buffers ------------------------------------------------------------------------------------

size_t OpBuffer::count() const { return elem == OpElem::F32 || elem == OpElem::BF16 ? f.size() : words.size(); }
size_t OpBuffer::bytes() const { return count() * (elem == OpElem::BF16 ? 2 : 4); }

namespace {

constexpr size_t kGuardWords = 16;
constexpr uint32_t kGuardWord = 0xDEADBEEFu;  // a finite float no op writes by chance
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr uint32_t kUnwritten = 0xFFFFFFFFu;

// n floats uniform in [lo, hi), a pure function of (seed, n).
std::vector<float> uniform(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(lo + (hi - lo) * double(philox_uniform(seed, kStreamEval, i)));
  return v;
}

OpBuffer buffer(std::string name, OpRole role, OpElem elem, std::vector<float> f, std::vector<uint32_t> w = {}) {
  OpBuffer b;
  b.name = std::move(name), b.role = role, b.elem = elem, b.f = std::move(f), b.words = std::move(w);
  return b;
}
OpBuffer in(std::string name, std::vector<float> v) {
  return buffer(std::move(name), OpRole::In, OpElem::F32, std::move(v));
}
OpBuffer inout(std::string name, std::vector<float> v) {
  return buffer(std::move(name), OpRole::InOut, OpElem::F32, std::move(v));
}
OpBuffer out(std::string name, size_t n) {
  return buffer(std::move(name), OpRole::Out, OpElem::F32, std::vector<float>(n, kNaN));
}
OpBuffer words(std::string name, OpRole role, OpElem elem, std::vector<uint32_t> w) {
  return buffer(std::move(name), role, elem, {}, std::move(w));
}
// Floats rounded to bf16 (stored widened: the device gets them as bf16).
OpBuffer bf16_in(std::string name, std::vector<float> v) {
  for (float& x : v) x = bf16_to_fp32(fp32_to_bf16(x));
  return buffer(std::move(name), OpRole::In, OpElem::BF16, std::move(v));
}
// A GEMM's weight, fp32 (tracked, as the model's are) or bf16.
OpBuffer weight(std::string name, std::vector<float> v, bool bf16 = false) {
  if (bf16) return bf16_in(std::move(name), std::move(v));
  OpBuffer b = in(std::move(name), std::move(v));
  b.gemm_weight = true;
  return b;
}

std::string kv(std::initializer_list<std::pair<const char*, long long>> items) {
  std::string s;
  for (const auto& [k, v] : items) {
    if (!s.empty()) s += ' ';
    s += k;
    s += '=';
    s += std::to_string(v);
  }
  return s;
}

OpCase make_case(const char* op, std::string label, OpError error, std::vector<OpBuffer> bufs) {
  OpCase c;
  c.op = op;
  c.label = std::move(label);
  c.error = error;
  c.buffers = std::move(bufs);
  return c;
}

std::vector<float> to_floats(const std::vector<double>& d) { return std::vector<float>(d.begin(), d.end()); }

// The key rows held and the first position only where they are not Tk and 0.
std::string attn_label(const AttnShape& s) {
  std::string l = kv({{"B", s.B}, {"NH", s.NH}, {"NKV", s.NKV}, {"HS", s.HS}, {"Tq", s.Tq}, {"Tk", s.Tk}});
  if (s.Tk_cap != s.Tk) l += " Tk_cap=" + std::to_string(s.Tk_cap);
  if (s.q_pos0 != 0) l += " pos0=" + std::to_string(s.q_pos0);
  return l + (s.causal ? " causal" : " full");
}

// Products of an attention forward: QK^T and PV over the visible keys.
double attention_flops(const AttnShape& s) {
  double keys = 0.0;
  for (int i = 0; i < s.Tq; ++i) keys += cpu::attn_visible(s, i);
  return 4.0 * s.B * s.NH * s.HS * keys;
}

// Tokens of N rows over V classes, every one repeated (scatter-adds collide), the last class used.
std::vector<uint32_t> tokens(int N, int V) {
  std::vector<uint32_t> t(static_cast<size_t>(N));
  for (int n = 0; n < N; ++n) t[size_t(n)] = uint32_t((n * 11 + n / 7) % V);
  if (N > 1) t[size_t(N - 1)] = uint32_t(V - 1);
  return t;
}

OpDims flat(size_t n) {
  OpDims d;
  d.n = n;
  return d;
}
OpDims rows(int N, int C, int variant = 0) {
  OpDims d;
  d.N = N, d.C = C, d.variant = variant;
  return d;
}

// ---- rows ---------------------------------------------------------------------------------------
// Each builder: the buffers (inputs from the seed), the Backend call, the same op in double, and
// for forward ops the gradient for the finite-difference check.

OpCase add_case(const OpDims& d, uint64_t seed) {
  OpCase c = make_case("add", kv({{"n", (long long)d.n}}), OpError::Exact,
                       {out("out", d.n), in("a", uniform(d.n, seed)), in("b", uniform(d.n, seed + 1, -5, 5))});
  const size_t n = d.n;
  c.run = [n](Backend& be, const OpArgs& a) { be.add(a.f(0), a.f(1), a.f(2), n); };
  c.reference = [n](OpHost& h) { cpu::add(h.f(0), h.f(1), h.f(2), n); };
  return c;
}

OpCase add_inplace_case(const OpDims& d, uint64_t seed) {
  OpCase c = make_case("add_inplace", kv({{"n", (long long)d.n}}), OpError::Exact,
                       {inout("acc", uniform(d.n, seed, -5, 5)), in("x", uniform(d.n, seed + 1))});
  const size_t n = d.n;
  c.run = [n](Backend& be, const OpArgs& a) { be.add_inplace(a.f(0), a.f(1), n); };
  c.reference = [n](OpHost& h) { cpu::add_inplace(h.f(0), h.f(1), n); };
  return c;
}

OpCase scale_case(const OpDims& d, uint64_t seed) {
  OpCase c = make_case("scale", kv({{"n", (long long)d.n}}), OpError::Exact, {inout("x", uniform(d.n, seed))});
  const size_t n = d.n;
  c.run = [n](Backend& be, const OpArgs& a) { be.scale(a.f(0), -1.7f, n); };
  c.reference = [n](OpHost& h) { cpu::scale(h.f(0), double(-1.7f), n); };
  return c;
}

OpCase fill_case(const OpDims& d, uint64_t) {
  OpCase c = make_case("fill", kv({{"n", (long long)d.n}}), OpError::Exact, {out("x", d.n)});
  const size_t n = d.n;
  c.run = [n](Backend& be, const OpArgs& a) { be.fill(a.f(0), 0.25f, n); };
  c.reference = [n](OpHost& h) { cpu::fill(h.f(0), 0.25, n); };
  return c;
}

OpCase copy_case(const OpDims& d, uint64_t seed) {
  OpCase c =
      make_case("copy", kv({{"n", (long long)d.n}}), OpError::Exact, {out("dst", d.n), in("src", uniform(d.n, seed))});
  const size_t n = d.n;
  c.run = [n](Backend& be, const OpArgs& a) { be.copy(a.f(0), a.f(1), n * sizeof(float)); };
  c.reference = [](OpHost& h) { h.d[0] = h.d[1]; };
  return c;
}

// The KV cache append: B rows of C into a (B, T, C) cache at position pos0.
OpCase copy_rows_case(const OpDims& d, uint64_t seed) {
  const size_t row = size_t(d.C), cache = size_t(d.B) * d.T * row;
  OpCase c = make_case("copy_rows", kv({{"B", d.B}, {"T", d.T}, {"C", d.C}, {"pos0", d.pos0}}), OpError::Exact,
                       {inout("cache", uniform(cache, seed)), in("rows", uniform(size_t(d.B) * row, seed + 1))});
  const OpDims dd = d;
  c.run = [dd, row](Backend& be, const OpArgs& a) {
    be.copy_rows(a.f(0) + size_t(dd.pos0) * row, size_t(dd.T) * row * sizeof(float), a.f(1), row * sizeof(float),
                 row * sizeof(float), size_t(dd.B));
  };
  c.reference = [dd, row](OpHost& h) {
    for (int b = 0; b < dd.B; ++b)
      std::copy_n(h.f(1) + size_t(b) * row, row, h.f(0) + (size_t(b) * dd.T + dd.pos0) * row);
  };
  return c;
}

OpCase sum_squares_case(const OpDims& d, uint64_t seed) {
  OpCase c =
      make_case("sum_squares", kv({{"n", (long long)d.n}}), OpError::Elementwise, {in("x", uniform(d.n, seed, -3, 3))});
  const size_t n = d.n;
  c.returns_value = true;
  c.run = [n](Backend& be, const OpArgs& a) { *a.result = be.sum_squares(a.f(0), n); };
  c.reference = [n](OpHost& h) { h.result = cpu::sum_squares(h.f(0), n); };
  return c;
}

OpCase broadcast_rows_case(const OpDims& d, uint64_t seed) {
  OpCase c = make_case("broadcast_rows", kv({{"N", d.N}, {"C", d.C}}), OpError::Exact,
                       {out("out", size_t(d.N) * d.C), in("v", uniform(size_t(d.C), seed))});
  const int N = d.N, C = d.C;
  c.run = [N, C](Backend& be, const OpArgs& a) { be.broadcast_rows(a.f(0), a.f(1), N, C); };
  c.reference = [N, C](OpHost& h) { cpu::broadcast_rows(h.f(0), h.f(1), N, C); };
  return c;
}

OpCase sum_rows_case(const OpDims& d, uint64_t seed) {
  OpCase c = make_case("sum_rows", kv({{"N", d.N}, {"C", d.C}}), OpError::Reduction,
                       {inout("dv", uniform(size_t(d.C), seed)), in("dout", uniform(size_t(d.N) * d.C, seed + 1))});
  const int N = d.N, C = d.C;
  c.run = [N, C](Backend& be, const OpArgs& a) { be.sum_rows(a.f(0), a.f(1), N, C); };
  c.reference = [N, C](OpHost& h) { cpu::sum_rows(h.f(0), h.f(1), N, C); };
  return c;
}

// The surprise statistics over B sequences of T tokens of width C, window W (OpDims::Tk): the
// change dx and its prediction in [-1, 1). The moving average is an output without gradient, so
// the finite differences see d_st and d_ch only (the stop gradient is in the contract).
std::string stats_label(const OpDims& d) { return kv({{"B", d.B}, {"T", d.T}, {"C", d.C}, {"W", d.Tk}}); }

OpCase route_stats_forward_case(const OpDims& d, uint64_t seed) {
  const int B = d.B, T = d.T, C = d.C, W = d.Tk;
  const size_t N = size_t(B) * T;
  OpCase c = make_case(
      "route_stats_forward", stats_label(d), OpError::Reduction,
      {out("st_ch", 2 * N), out("ma", N), in("dx", uniform(N * C, seed)), in("dx_hat", uniform(N * C, seed + 1))});
  c.run = [=](Backend& be, const OpArgs& a) { be.route_stats_forward(a.f(0), a.f(1), a.f(2), a.f(3), B, T, C, W); };
  c.reference = [=](OpHost& h) { cpu::route_stats_forward(h.f(0), h.f(1), h.f(2), h.f(3), B, T, C, W); };
  c.grad.wrt = {2, 3};
  c.grad.outputs = {0};
  c.grad.backward = [=](OpHost& h, const auto& seeds, auto& grads) {
    cpu::route_stats_backward(grads[0].data(), grads[1].data(), seeds[0].data(), h.f(2), h.f(3), int(N), C);
  };
  return c;
}

OpCase route_stats_backward_case(const OpDims& d, uint64_t seed) {
  const int N = d.B * d.T, C = d.C;
  OpCase c = make_case(
      "route_stats_backward", kv({{"N", N}, {"C", C}}), OpError::Elementwise,
      {out("d_dx", size_t(N) * C), out("d_dx_hat", size_t(N) * C), in("d_st_ch", uniform(2 * size_t(N), seed + 2)),
       in("dx", uniform(size_t(N) * C, seed)), in("dx_hat", uniform(size_t(N) * C, seed + 1))});
  c.run = [=](Backend& be, const OpArgs& a) { be.route_stats_backward(a.f(0), a.f(1), a.f(2), a.f(3), a.f(4), N, C); };
  c.reference = [=](OpHost& h) { cpu::route_stats_backward(h.f(0), h.f(1), h.f(2), h.f(3), h.f(4), N, C); };
  return c;
}

// The gate over N = B*T tokens: d_st, d_ch and the moving average in [0, 1.5), the four raw
// parameters spread over softplus' curve.
std::vector<float> route_params(uint64_t seed) { return uniform(4, seed, -1.5, 1.5); }

OpCase route_gate_forward_case(const OpDims& d, uint64_t seed) {
  const int N = d.B * d.T;
  OpCase c = make_case("route_gate_forward", kv({{"N", N}}), OpError::Elementwise,
                       {out("g", size_t(N)), in("st_ch", uniform(2 * size_t(N), seed, 0, 1.5)),
                        in("ma", uniform(size_t(N), seed + 1, 0, 1.5)), in("params", route_params(seed + 2))});
  c.run = [=](Backend& be, const OpArgs& a) { be.route_gate_forward(a.f(0), a.f(1), a.f(2), a.f(3), N); };
  c.reference = [=](OpHost& h) { cpu::route_gate_forward(h.f(0), h.f(1), h.f(2), h.f(3), N); };
  c.grad.wrt = {1, 3};
  c.grad.outputs = {0};
  c.grad.backward = [=](OpHost& h, const auto& seeds, auto& grads) {
    cpu::route_gate_backward(grads[0].data(), grads[1].data(), seeds[0].data(), h.f(1), h.f(2), h.f(3), N);
  };
  return c;
}

OpCase route_gate_backward_case(const OpDims& d, uint64_t seed) {
  const int N = d.B * d.T;
  OpCase c = make_case("route_gate_backward", kv({{"N", N}}), OpError::Reduction,
                       {out("d_st_ch", 2 * size_t(N)), inout("dparams", uniform(4, seed + 3)),
                        in("dg", uniform(size_t(N), seed + 4)), in("st_ch", uniform(2 * size_t(N), seed, 0, 1.5)),
                        in("ma", uniform(size_t(N), seed + 1, 0, 1.5)), in("params", route_params(seed + 2))});
  c.run = [=](Backend& be, const OpArgs& a) {
    be.route_gate_backward(a.f(0), a.f(1), a.f(2), a.f(3), a.f(4), a.f(5), N);
  };
  c.reference = [=](OpHost& h) { cpu::route_gate_backward(h.f(0), h.f(1), h.f(2), h.f(3), h.f(4), h.f(5), N); };
  return c;
}

// B sequences of T scores, k chosen (OpDims::N). variant 1: scores on a grid of eighths, so that
// many tie and the earlier position must win.
OpCase topk_rows_case(const OpDims& d, uint64_t seed) {
  const int B = d.B, T = d.T, k = d.N;
  std::vector<float> score = uniform(size_t(B) * T, seed);
  if (d.variant == 1)
    for (float& v : score) v = std::floor(v * 8.0f) / 8.0f;
  const std::vector<uint32_t> unwritten(size_t(B) * k, kUnwritten);
  OpCase c =
      make_case("topk_rows", kv({{"B", B}, {"T", T}, {"k", k}}) + (d.variant == 1 ? " ties" : ""), OpError::Exact,
                {words("pos", OpRole::Out, OpElem::I32, unwritten), words("rows", OpRole::Out, OpElem::I32, unwritten),
                 in("score", score)});
  c.run = [=](Backend& be, const OpArgs& a) { be.topk_rows(a.i32(0), a.i32(1), a.f(2), B, T, k); };
  c.reference = [=](OpHost& h) { cpu::topk_rows(h.i32(0), h.i32(1), h.f(2), B, T, k); };
  return c;
}

// M distinct rows of N, in an order that is not increasing (a routed block's selection, shuffled).
std::vector<uint32_t> distinct_rows(int N, int M, uint64_t seed) {
  std::vector<uint32_t> all(static_cast<size_t>(N));
  for (int n = 0; n < N; ++n) all[size_t(n)] = uint32_t(n);
  for (int n = N - 1; n > 0; --n)
    std::swap(all[size_t(n)],
              all[size_t(philox_uniform(seed, kStreamEval, uint64_t(n)) * float(n + 1)) % size_t(n + 1)]);
  all.resize(static_cast<size_t>(M));
  return all;
}

// N rows, M of them selected (OpDims::OC): the selection as 0/1 per row.
OpCase route_mask_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, M = d.OC;
  const std::vector<uint32_t> unwritten(size_t(N), kUnwritten);
  OpCase c = make_case("route_mask", kv({{"N", N}, {"M", M}}), OpError::Exact,
                       {words("mask", OpRole::Out, OpElem::I32, unwritten),
                        words("rows", OpRole::In, OpElem::I32, distinct_rows(N, M, seed))});
  c.run = [=](Backend& be, const OpArgs& a) { be.route_mask(a.i32(0), a.i32(1), N, M); };
  c.reference = [=](OpHost& h) { cpu::route_mask(h.i32(0), h.i32(1), N, M); };
  return c;
}

// N rows, M of them selected (OpDims::OC). variant 1: in place (out is x; no gradient: the
// backward needs x before the op). The gate is near 1 on some rows and exactly 1 on one.
OpCase route_scatter_forward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, M = d.OC, C = d.C;
  const bool in_place = d.variant == 1;
  std::vector<float> g = uniform(size_t(N), seed + 2, 0.0, 1.0);
  g[0] = 1.0f;
  auto sel = words("rows", OpRole::In, OpElem::I32, distinct_rows(N, M, seed + 3));
  const std::string label = kv({{"N", N}, {"M", M}, {"C", C}}) + (in_place ? " in place" : "");
  if (in_place) {
    OpCase c = make_case(
        "route_scatter_forward", label, OpError::Elementwise,
        {inout("x", uniform(size_t(N) * C, seed)), in("y", uniform(size_t(M) * C, seed + 1)), in("g", g), sel});
    c.run = [=](Backend& be, const OpArgs& a) {
      be.route_scatter_forward(a.f(0), a.f(0), a.f(1), a.f(2), a.i32(3), N, M, C);
    };
    c.reference = [=](OpHost& h) { cpu::route_scatter_forward(h.f(0), h.f(0), h.f(1), h.f(2), h.i32(3), N, M, C); };
    return c;
  }
  OpCase c = make_case("route_scatter_forward", label, OpError::Elementwise,
                       {out("out", size_t(N) * C), in("x", uniform(size_t(N) * C, seed)),
                        in("y", uniform(size_t(M) * C, seed + 1)), in("g", g), sel});
  c.run = [=](Backend& be, const OpArgs& a) {
    be.route_scatter_forward(a.f(0), a.f(1), a.f(2), a.f(3), a.i32(4), N, M, C);
  };
  c.reference = [=](OpHost& h) { cpu::route_scatter_forward(h.f(0), h.f(1), h.f(2), h.f(3), h.i32(4), N, M, C); };
  c.grad.wrt = {1, 2, 3};
  c.grad.outputs = {0};
  c.grad.backward = [=](OpHost& h, const auto& seeds, auto& grads) {
    std::vector<double> dx(seeds[0]);
    cpu::route_scatter_backward(dx.data(), grads[1].data(), grads[2].data(), seeds[0].data(), h.f(1), h.f(2), h.f(3),
                                h.i32(4), N, M, C);
    grads[0] = dx;
  };
  return c;
}

// variant 1: in place (dx is dout).
OpCase route_scatter_backward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, M = d.OC, C = d.C;
  const bool in_place = d.variant == 1;
  std::vector<OpBuffer> bufs;
  if (in_place)
    bufs.push_back(inout("dout", uniform(size_t(N) * C, seed + 1)));
  else
    bufs.push_back(out("dx", size_t(N) * C));
  bufs.push_back(out("dy", size_t(M) * C));
  bufs.push_back(inout("dg", uniform(size_t(N), seed)));
  bufs.push_back(in("dout", uniform(size_t(N) * C, seed + 1)));
  bufs.push_back(in("x", uniform(size_t(N) * C, seed + 2)));
  bufs.push_back(in("y", uniform(size_t(M) * C, seed + 3)));
  bufs.push_back(in("g", uniform(size_t(N), seed + 4, 0.0, 1.0)));
  bufs.push_back(words("rows", OpRole::In, OpElem::I32, distinct_rows(N, M, seed + 5)));
  OpCase c = make_case("route_scatter_backward", kv({{"N", N}, {"M", M}, {"C", C}}) + (in_place ? " in place" : ""),
                       OpError::Reduction, std::move(bufs));
  const size_t dout = in_place ? 0 : 3;
  c.run = [=](Backend& be, const OpArgs& a) {
    be.route_scatter_backward(a.f(0), a.f(1), a.f(2), a.f(dout), a.f(4), a.f(5), a.f(6), a.i32(7), N, M, C);
  };
  c.reference = [=](OpHost& h) {
    cpu::route_scatter_backward(h.f(0), h.f(1), h.f(2), h.f(dout), h.f(4), h.f(5), h.f(6), h.i32(7), N, M, C);
  };
  return c;
}

// variant 1: a bf16 table.
OpCase embedding_forward_case(const OpDims& d, uint64_t seed) {
  const bool bf16 = d.variant == 1;
  const int N = d.N, C = d.C;
  OpCase c =
      make_case("embedding_forward", kv({{"V", d.V}, {"N", N}, {"C", C}}) + (bf16 ? " bf16" : ""), OpError::Exact,
                {out("out", size_t(N) * C), words("tok", OpRole::In, OpElem::I32, tokens(N, d.V)),
                 weight("wte", uniform(size_t(d.V) * C, seed), bf16)});
  c.run = [N, C](Backend& be, const OpArgs& a) { be.embedding_forward(a.f(0), a.i32(1), a.w(2), N, C); };
  c.reference = [N, C](OpHost& h) { cpu::embedding_forward(h.f(0), h.i32(1), h.f(2), N, C); };
  c.grad.wrt = {2};
  c.grad.outputs = {0};
  c.grad.backward = [N, C](OpHost& h, const auto& seeds, auto& grads) {
    cpu::embedding_backward(grads[0].data(), seeds[0].data(), h.i32(1), N, C);
  };
  return c;
}

OpCase embedding_backward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, C = d.C;
  OpCase c = make_case("embedding_backward", kv({{"V", d.V}, {"N", N}, {"C", C}}), OpError::Reduction,
                       {inout("dwte", uniform(size_t(d.V) * C, seed)), in("dout", uniform(size_t(N) * C, seed + 1)),
                        words("tok", OpRole::In, OpElem::I32, tokens(N, d.V))});
  c.run = [N, C](Backend& be, const OpArgs& a) { be.embedding_backward(a.f(0), a.f(1), a.i32(2), N, C); };
  c.reference = [N, C](OpHost& h) { cpu::embedding_backward(h.f(0), h.f(1), h.i32(2), N, C); };
  return c;
}

constexpr float kRmsEps = 1e-6f;

OpCase rmsnorm_forward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, C = d.C;
  OpCase c = make_case("rmsnorm_forward", kv({{"N", N}, {"C", C}}), OpError::Reduction,
                       {out("out", size_t(N) * C), out("rstd", size_t(N)), in("x", uniform(size_t(N) * C, seed, -3, 3)),
                        in("w", uniform(size_t(C), seed + 1, 0.5, 1.5))});
  c.run = [N, C](Backend& be, const OpArgs& a) { be.rmsnorm_forward(a.f(0), a.f(1), a.f(2), a.f(3), N, C, kRmsEps); };
  c.reference = [N, C](OpHost& h) { cpu::rmsnorm_forward(h.f(0), h.f(1), h.f(2), h.f(3), N, C, double(kRmsEps)); };
  c.grad.wrt = {2, 3};
  c.grad.outputs = {0};
  c.grad.backward = [N, C](OpHost& h, const auto& seeds, auto& grads) {
    cpu::rmsnorm_backward(grads[0].data(), grads[1].data(), seeds[0].data(), h.f(2), h.f(3), h.f(1), N, C);
  };
  return c;
}

OpCase rmsnorm_backward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, C = d.C;
  std::vector<float> x = uniform(size_t(N) * C, seed, -3, 3), w = uniform(size_t(C), seed + 1, 0.5, 1.5);
  std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), o(x.size()), rstd(static_cast<size_t>(N));
  cpu::rmsnorm_forward(o.data(), rstd.data(), xd.data(), wd.data(), N, C, double(kRmsEps));
  OpCase c = make_case("rmsnorm_backward", kv({{"N", N}, {"C", C}}), OpError::Reduction,
                       {inout("dx", uniform(x.size(), seed + 2)), inout("dw", uniform(size_t(C), seed + 3)),
                        in("dout", uniform(x.size(), seed + 4)), in("x", x), in("w", w), in("rstd", to_floats(rstd))});
  c.run = [N, C](Backend& be, const OpArgs& a) {
    be.rmsnorm_backward(a.f(0), a.f(1), a.f(2), a.f(3), a.f(4), a.f(5), N, C);
  };
  c.reference = [N, C](OpHost& h) { cpu::rmsnorm_backward(h.f(0), h.f(1), h.f(2), h.f(3), h.f(4), h.f(5), N, C); };
  return c;
}

// variant bit 0: accumulate into out; bit 1: a bf16 weight.
OpCase matmul_forward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, IC = d.C, OC = d.OC;
  const bool accumulate = d.variant & 1, bf16 = d.variant & 2;
  const size_t no = size_t(N) * OC;
  OpCase c =
      make_case("matmul_forward",
                kv({{"N", N}, {"IC", IC}, {"OC", OC}}) + (accumulate ? " accumulate" : "") + (bf16 ? " bf16" : ""),
                bf16 ? OpError::Bf16 : OpError::Gemm,
                {accumulate ? inout("out", uniform(no, seed)) : out("out", no),
                 in("inp", uniform(size_t(N) * IC, seed + 1)), weight("w", uniform(size_t(OC) * IC, seed + 2), bf16)});
  c.run = [=](Backend& be, const OpArgs& a) { be.matmul_forward(a.f(0), a.f(1), a.w(2), N, IC, OC, accumulate); };
  c.reference = [=](OpHost& h) { cpu::matmul_forward(h.f(0), h.f(1), h.f(2), N, IC, OC, accumulate); };
  c.flops = 2.0 * N * IC * OC;
  if (!accumulate) {
    c.grad.wrt = {1, 2};
    c.grad.outputs = {0};
    c.grad.backward = [=](OpHost& h, const auto& seeds, auto& grads) {
      cpu::matmul_backward(grads[0].data(), grads[1].data(), seeds[0].data(), h.f(1), h.f(2), N, IC, OC, false);
    };
  }
  return c;
}

// variant: 0 dinp = ..., dw += ...; 1 dinp += ...; 2 no dinp; 3 no dw; 4 a bf16 weight (no dw).
OpCase matmul_backward_case(const OpDims& d, uint64_t seed) {
  static const char* const kVariants[] = {"", " accumulate", " no-dinp", " no-dw", " bf16"};
  const int N = d.N, IC = d.C, OC = d.OC, v = d.variant;
  const bool acc = v == 1, with_dinp = v != 2, with_dw = v != 3 && v != 4, bf16 = v == 4;
  const size_t ni = size_t(N) * IC, nw = size_t(OC) * IC;
  std::vector<OpBuffer> b{in("dout", uniform(size_t(N) * OC, seed)), in("inp", uniform(ni, seed + 1)),
                          weight("w", uniform(nw, seed + 2), bf16)};
  if (with_dinp) b.push_back(acc ? inout("dinp", uniform(ni, seed + 3)) : out("dinp", ni));
  if (with_dw) b.push_back(inout("dw", uniform(nw, seed + 4)));
  OpCase c = make_case("matmul_backward", kv({{"N", N}, {"IC", IC}, {"OC", OC}}) + kVariants[v],
                       bf16 ? OpError::Bf16 : OpError::Gemm, std::move(b));
  const size_t kdw = with_dinp ? 4 : 3;
  c.run = [=](Backend& be, const OpArgs& a) {
    be.matmul_backward(with_dinp ? a.f(3) : nullptr, with_dw ? a.f(kdw) : nullptr, a.f(0), a.f(1), a.w(2), N, IC, OC,
                       acc);
  };
  c.reference = [=](OpHost& h) {
    cpu::matmul_backward(with_dinp ? h.f(3) : nullptr, with_dw ? h.f(kdw) : nullptr, h.f(0), h.f(1), h.f(2), N, IC, OC,
                         acc);
  };
  c.flops = 2.0 * N * IC * OC * (int(with_dinp) + int(with_dw));
  return c;
}

// variant 1: theta = 500000 (else 10000).
std::vector<float> rope_freq(const OpDims& d) {
  return cpu::rope_default_inv_freq(d.variant == 1 ? 500000.0 : 10000.0, d.HS);
}
std::string rope_label(const OpDims& d) {
  return kv({{"B", d.B}, {"T", d.T}, {"NH", d.NH}, {"HS", d.HS}, {"pos0", d.pos0}}) +
         (d.variant == 1 ? " theta=5e5" : "");
}

OpCase rope_case(const OpDims& d, uint64_t seed, bool forward) {
  const std::vector<float> freq = rope_freq(d);
  OpCase c = make_case(forward ? "rope_forward" : "rope_backward", rope_label(d), OpError::Rope,
                       {inout("x", uniform(size_t(d.B) * d.T * d.NH * d.HS, seed)), in("inv_freq", freq)});
  const int B = d.B, T = d.T, NH = d.NH, HS = d.HS, pos0 = d.pos0;
  c.run = [=](Backend& be, const OpArgs& a) {
    forward ? be.rope_forward(a.f(0), B, T, NH, HS, pos0, a.f(1))
            : be.rope_backward(a.f(0), B, T, NH, HS, pos0, a.f(1));
  };
  c.reference = [=](OpHost& h) {
    forward ? cpu::rope_forward(h.f(0), B, T, NH, HS, pos0, freq.data())
            : cpu::rope_backward(h.f(0), B, T, NH, HS, pos0, freq.data());
  };
  if (forward) {
    c.grad.wrt = {0};
    c.grad.outputs = {0};
    c.grad.backward = [=](OpHost&, const auto& seeds, auto& grads) {
      grads[0] = seeds[0];
      cpu::rope_backward(grads[0].data(), B, T, NH, HS, pos0, freq.data());
    };
  }
  return c;
}

// Positions out of time order and beyond T (a routed block's gathered tokens): B * T of them in
// [0, 4096), a pure function of (seed, index).
std::vector<uint32_t> rope_positions(size_t n, uint64_t seed) {
  std::vector<uint32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = uint32_t(philox_uniform(seed, kStreamEval, i) * 4096.0);
  return p;
}

OpCase rope_at_case(const OpDims& d, uint64_t seed, bool forward) {
  const std::vector<float> freq = rope_freq(d);
  const size_t tokens = size_t(d.B) * d.T;
  OpCase c = make_case(forward ? "rope_forward_at" : "rope_backward_at",
                       kv({{"B", d.B}, {"T", d.T}, {"NH", d.NH}, {"HS", d.HS}}) + (d.variant == 1 ? " theta=5e5" : ""),
                       OpError::Rope,
                       {inout("x", uniform(tokens * d.NH * d.HS, seed)),
                        words("pos", OpRole::In, OpElem::I32, rope_positions(tokens, seed + 1)), in("inv_freq", freq)});
  const int B = d.B, T = d.T, NH = d.NH, HS = d.HS;
  c.run = [=](Backend& be, const OpArgs& a) {
    forward ? be.rope_forward_at(a.f(0), a.i32(1), B, T, NH, HS, a.f(2))
            : be.rope_backward_at(a.f(0), a.i32(1), B, T, NH, HS, a.f(2));
  };
  c.reference = [=](OpHost& h) {
    forward ? cpu::rope_forward_at(h.f(0), h.i32(1), B, T, NH, HS, freq.data())
            : cpu::rope_backward_at(h.f(0), h.i32(1), B, T, NH, HS, freq.data());
  };
  if (forward) {
    c.grad.wrt = {0};
    c.grad.outputs = {0};
    c.grad.backward = [=](OpHost& h, const auto& seeds, auto& grads) {
      grads[0] = seeds[0];
      cpu::rope_backward_at(grads[0].data(), h.i32(1), B, T, NH, HS, freq.data());
    };
  }
  return c;
}

// The saved buffer: the backend's own size on the device, the CPU's probabilities in double.
OpBuffer attention_saved(const AttnShape& s) {
  OpBuffer b = out("saved", size_t(s.B) * s.NH * s.Tq * s.Tk);
  b.role = OpRole::Scratch;
  b.device_floats = [s](const Backend& be) { return be.attention_saved_floats(s); };
  return b;
}

OpCase attention_forward_case(const OpDims& d, uint64_t seed) {
  const AttnShape s = attn_shape_of(d);
  const size_t nq = size_t(s.B) * s.Tq * s.NH * s.HS, nk = size_t(s.B) * s.Tk_cap * s.NKV * s.HS;
  OpCase c = make_case("attention_forward", attn_label(s), OpError::Attention,
                       {out("out", nq), attention_saved(s), in("q", uniform(nq, seed, -2, 2)),
                        in("k", uniform(nk, seed + 1, -2, 2)), in("v", uniform(nk, seed + 2))});
  c.run = [s](Backend& be, const OpArgs& a) { be.attention_forward(a.f(0), a.f(1), a.f(2), a.f(3), a.f(4), s); };
  c.reference = [s](OpHost& h) { cpu::attention_forward(h.f(0), h.f(1), h.f(2), h.f(3), h.f(4), s); };
  c.flops = attention_flops(s);
  if (s.Tk_cap == s.Tk) {
    c.grad.wrt = {2, 3, 4};
    c.grad.outputs = {0};
    c.grad.backward = [s](OpHost& h, const auto& seeds, auto& grads) {
      cpu::attention_backward(grads[0].data(), grads[1].data(), grads[2].data(), seeds[0].data(), h.f(1), h.f(2),
                              h.f(3), h.f(4), s);
    };
  }
  return c;
}

// Needs Tk_cap == Tk. The forward runs first (untimed) on the same backend: its out and saved
// buffer are the backend's own.
OpCase attention_backward_case(const OpDims& d, uint64_t seed) {
  const AttnShape s = attn_shape_of(d);
  const size_t nq = size_t(s.B) * s.Tq * s.NH * s.HS, nk = size_t(s.B) * s.Tk_cap * s.NKV * s.HS;
  OpBuffer fwd_out = out("out", nq);
  fwd_out.role = OpRole::Scratch;
  OpCase c = make_case("attention_backward", attn_label(s), OpError::Attention,
                       {out("dq", nq), out("dk", nk), out("dv", nk), in("dout", uniform(nq, seed + 3)),
                        std::move(fwd_out), attention_saved(s), in("q", uniform(nq, seed, -2, 2)),
                        in("k", uniform(nk, seed + 1, -2, 2)), in("v", uniform(nk, seed + 2))});
  c.prepare = [s](Backend& be, const OpArgs& a) { be.attention_forward(a.f(4), a.f(5), a.f(6), a.f(7), a.f(8), s); };
  c.run = [s](Backend& be, const OpArgs& a) {
    be.attention_backward(a.f(0), a.f(1), a.f(2), a.f(3), a.f(4), a.f(5), a.f(6), a.f(7), a.f(8), s);
  };
  c.reference = [s](OpHost& h) {
    cpu::attention_forward(h.f(4), h.f(5), h.f(6), h.f(7), h.f(8), s);
    cpu::attention_backward(h.f(0), h.f(1), h.f(2), h.f(3), h.f(5), h.f(6), h.f(7), h.f(8), s);
  };
  c.flops = 2.5 * attention_flops(s);
  return c;
}

// gate uniform in [-8, 8) with the extremes of silu's range in its first elements.
std::vector<float> swiglu_gate(size_t n, uint64_t seed) {
  std::vector<float> gate = uniform(n, seed, -8, 8);
  const float extremes[] = {-100.0f, -30.0f, -1e-30f, 0.0f, 1e-30f, 30.0f, 100.0f};
  for (size_t i = 0; i < std::size(extremes) && i * 7 < n; ++i) gate[i * 7] = extremes[i];
  return gate;
}

OpCase swiglu_forward_case(const OpDims& d, uint64_t seed) {
  const size_t n = d.n;
  OpCase c = make_case("swiglu_forward", kv({{"n", (long long)n}}), OpError::Elementwise,
                       {out("out", n), in("gate", swiglu_gate(n, seed)), in("up", uniform(n, seed + 1))});
  c.run = [n](Backend& be, const OpArgs& a) { be.swiglu_forward(a.f(0), a.f(1), a.f(2), n); };
  c.reference = [n](OpHost& h) { cpu::swiglu_forward(h.f(0), h.f(1), h.f(2), n); };
  c.grad.wrt = {1, 2};
  c.grad.outputs = {0};
  c.grad.backward = [n](OpHost& h, const auto& seeds, auto& grads) {
    cpu::swiglu_backward(grads[0].data(), grads[1].data(), seeds[0].data(), h.f(1), h.f(2), n);
  };
  return c;
}

OpCase swiglu_backward_case(const OpDims& d, uint64_t seed) {
  const size_t n = d.n;
  OpCase c = make_case("swiglu_backward", kv({{"n", (long long)n}}), OpError::Elementwise,
                       {out("dgate", n), out("dup", n), in("dout", uniform(n, seed + 2)),
                        in("gate", swiglu_gate(n, seed)), in("up", uniform(n, seed + 1))});
  c.run = [n](Backend& be, const OpArgs& a) { be.swiglu_backward(a.f(0), a.f(1), a.f(2), a.f(3), a.f(4), n); };
  c.reference = [n](OpHost& h) { cpu::swiglu_backward(h.f(0), h.f(1), h.f(2), h.f(3), h.f(4), n); };
  return c;
}

// Logits in [-15, 15) (a large vocabulary: [-10, 10)); targets repeat, the last class used.
std::vector<float> ce_logits(const OpDims& d, uint64_t seed) {
  const double range = d.V > 1000 ? 10.0 : d.V == 2 ? 5.0 : 15.0;
  return uniform(size_t(d.N) * d.V, seed, -range, range);
}

OpCase crossentropy_forward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, V = d.V;
  OpCase c = make_case("crossentropy_forward", kv({{"N", N}, {"V", V}}), OpError::Reduction,
                       {out("losses", size_t(N)), in("logits", ce_logits(d, seed)),
                        words("targets", OpRole::In, OpElem::I32, tokens(N, V))});
  c.run = [N, V](Backend& be, const OpArgs& a) { be.crossentropy_forward(a.f(0), a.f(1), a.i32(2), N, V); };
  c.reference = [N, V](OpHost& h) { cpu::crossentropy_forward(h.f(0), h.f(1), h.i32(2), N, V); };
  c.grad.wrt = {1};
  c.grad.outputs = {0};
  c.grad.backward = [N, V](OpHost& h, const auto& seeds, auto& grads) {
    for (int n = 0; n < N; ++n)  // the backward's scale is one number: row by row for per-row seeds
      cpu::crossentropy_backward(grads[0].data() + size_t(n) * V, h.f(1) + size_t(n) * V, h.i32(2) + n, 1, V,
                                 seeds[0][size_t(n)]);
  };
  return c;
}

// variant 1: in place (dlogits is the logits buffer).
OpCase crossentropy_backward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, V = d.V;
  const bool in_place = d.variant == 1;
  const float scale = 1.0f / float(N);
  std::vector<OpBuffer> b{words("targets", OpRole::In, OpElem::I32, tokens(N, V))};
  if (in_place) {
    b.push_back(inout("logits", ce_logits(d, seed)));
  } else {
    b.push_back(out("dlogits", size_t(N) * V));
    b.push_back(in("logits", ce_logits(d, seed)));
  }
  OpCase c = make_case("crossentropy_backward", kv({{"N", N}, {"V", V}}) + (in_place ? " in-place" : ""),
                       OpError::Reduction, std::move(b));
  const size_t kl = in_place ? 1 : 2;
  c.run = [=](Backend& be, const OpArgs& a) { be.crossentropy_backward(a.f(1), a.f(kl), a.i32(0), N, V, scale); };
  c.reference = [=](OpHost& h) { cpu::crossentropy_backward(h.f(1), h.f(kl), h.i32(0), N, V, double(scale)); };
  return c;
}

constexpr uint64_t kMapperSeed = 77, kMapperStream = kStreamLatent + 5;

OpCase binary_mapper_forward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, H = d.H;
  OpCase c = make_case("binary_mapper_forward", kv({{"N", N}, {"H", H}}), OpError::Elementwise,
                       {words("codes", OpRole::Out, OpElem::U32, std::vector<uint32_t>(size_t(N), kUnwritten)),
                        out("p", size_t(N) * H), in("logits", uniform(size_t(N) * H, seed, -4, 4))});
  c.draws = true;
  c.run = [N, H](Backend& be, const OpArgs& a) {
    be.binary_mapper_forward(a.u32(0), a.f(1), a.f(2), N, H, kMapperSeed, kMapperStream);
  };
  c.reference = [N, H](OpHost& h) {
    cpu::binary_mapper_forward(h.u32(0), h.f(1), h.f(2), N, H, kMapperSeed, kMapperStream);
  };
  return c;
}

OpCase binary_mapper_backward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, C = d.C, H = d.H;
  OpCase c = make_case(
      "binary_mapper_backward", kv({{"N", N}, {"C", C}, {"H", H}}), OpError::Mapper,
      {inout("dlogits", uniform(size_t(N) * H, seed)), in("dR", uniform(size_t(N) * C, seed + 1)),
       weight("W", uniform(size_t(C) << H, seed + 2)), in("p", uniform(size_t(N) * H, seed + 3, 0.02, 0.98))});
  c.run = [=](Backend& be, const OpArgs& a) { be.binary_mapper_backward(a.f(0), a.f(1), a.f(2), a.f(3), N, C, H); };
  c.reference = [=](OpHost& h) { cpu::binary_mapper_backward(h.f(0), h.f(1), h.f(2), h.f(3), N, C, H); };
  c.flops = 2.0 * N * (double(C) + H) * double(size_t(1) << H);  // dG = dR W, then the bit sums
  return c;
}

// Codes that repeat (the scatter-adds collide), the last code used.
std::vector<uint32_t> codes(int N, int H) {
  std::vector<uint32_t> c(static_cast<size_t>(N));
  for (int n = 0; n < N; ++n) c[size_t(n)] = uint32_t((n * 37 + n / 3) % 17) & ((1u << H) - 1);
  c[0] = (1u << H) - 1;
  return c;
}

OpCase post_sampler_forward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, C = d.C, H = d.H;
  OpCase c = make_case("post_sampler_forward", kv({{"N", N}, {"C", C}, {"H", H}}), OpError::Exact,
                       {out("R", size_t(N) * C), words("codes", OpRole::In, OpElem::U32, codes(N, H)),
                        in("W", uniform(size_t(C) << H, seed))});
  c.run = [=](Backend& be, const OpArgs& a) { be.post_sampler_forward(a.f(0), a.u32(1), a.f(2), N, C, H); };
  c.reference = [=](OpHost& h) { cpu::post_sampler_forward(h.f(0), h.u32(1), h.f(2), N, C, H); };
  c.grad.wrt = {2};
  c.grad.outputs = {0};
  c.grad.backward = [=](OpHost& h, const auto& seeds, auto& grads) {
    cpu::post_sampler_backward(grads[0].data(), seeds[0].data(), h.u32(1), N, C, H);
  };
  return c;
}

OpCase post_sampler_backward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, C = d.C, H = d.H;
  OpCase c = make_case("post_sampler_backward", kv({{"N", N}, {"C", C}, {"H", H}}), OpError::Reduction,
                       {inout("dW", uniform(size_t(C) << H, seed)), in("dR", uniform(size_t(N) * C, seed + 1)),
                        words("codes", OpRole::In, OpElem::U32, codes(N, H))});
  c.run = [=](Backend& be, const OpArgs& a) { be.post_sampler_backward(a.f(0), a.f(1), a.u32(2), N, C, H); };
  c.reference = [=](OpHost& h) { cpu::post_sampler_backward(h.f(0), h.f(1), h.u32(2), N, C, H); };
  return c;
}

// p in [0, 1] with the limits 0 and 1 (Hb = 0, a zero derivative) among them.
std::vector<float> kl_p(size_t n, uint64_t seed) {
  std::vector<float> p = uniform(n, seed, 0.0, 1.0);
  p[0] = 0.0f;
  if (n > 2) p[2] = 1.0f;
  return p;
}

OpCase kl_forward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, H = d.H;
  OpCase c = make_case("kl_forward", kv({{"N", N}, {"H", H}}), OpError::Reduction,
                       {out("kl", size_t(N)), in("p", kl_p(size_t(N) * H, seed))});
  c.run = [N, H](Backend& be, const OpArgs& a) { be.kl_forward(a.f(0), a.f(1), N, H); };
  c.reference = [N, H](OpHost& h) { cpu::kl_forward(h.f(0), h.f(1), N, H); };
  return c;
}

OpCase kl_batch_mean_case(const OpDims& d, uint64_t seed) {
  const int B = d.B, T = d.T;
  OpCase c = make_case("kl_batch_mean", kv({{"B", B}, {"T", T}}), OpError::Reduction,
                       {out("mean", size_t(T)), in("kl", uniform(size_t(B) * T, seed, 0.0, 5.0))});
  c.run = [B, T](Backend& be, const OpArgs& a) { be.kl_batch_mean(a.f(0), a.f(1), B, T); };
  c.reference = [B, T](OpHost& h) { cpu::kl_batch_mean(h.f(0), h.f(1), B, T); };
  return c;
}

// The free bits' gradient with kappa at the median of the gate, so that some rows are gated and
// some are not. variant 0: per pair (the gate is each row's KL, period N); 1: batch mean (the
// gate is the KL averaged over B = N / T sequences at each of T positions, period T).
OpCase kl_backward_case(const OpDims& d, uint64_t seed) {
  const int N = d.N, H = d.H, T = d.variant == 1 ? d.T : N;
  const std::vector<float> p = kl_p(size_t(N) * H, seed);
  std::vector<double> pd(p.begin(), p.end()), kl(static_cast<size_t>(N)), gate(static_cast<size_t>(T));
  cpu::kl_forward(kl.data(), pd.data(), N, H);
  if (d.variant == 1)
    cpu::kl_batch_mean(gate.data(), kl.data(), N / T, T);
  else
    gate = kl;
  const std::vector<float> gatef = to_floats(gate);
  std::vector<float> sorted = gatef;
  std::sort(sorted.begin(), sorted.end());
  const float kappa = T > 1 ? 0.5f * (sorted[size_t(T / 2 - 1)] + sorted[size_t(T / 2)]) : sorted[0] - 0.1f;
  const float scale = 0.3f;
  OpCase c =
      make_case("kl_backward", kv({{"N", N}, {"H", H}, {"period", T}}) + (d.variant == 1 ? " batch-mean" : ""),
                OpError::Reduction, {inout("dlogits", uniform(p.size(), seed + 1)), in("p", p), in("gate", gatef)});
  c.run = [=](Backend& be, const OpArgs& a) { be.kl_backward(a.f(0), a.f(1), a.f(2), T, N, H, kappa, scale); };
  c.reference = [=](OpHost& h) { cpu::kl_backward(h.f(0), h.f(1), h.f(2), T, N, H, double(kappa), double(scale)); };
  return c;
}

// variant: the limit 0 (no clipping), 1e9 (above the norm) or 0.5 (clips).
OpCase clip_grad_norm_case(const OpDims& d, uint64_t seed) {
  static const float kLimits[] = {0.0f, 1e9f, 0.5f};
  const size_t n = d.n;
  const float limit = kLimits[d.variant];
  char max_norm[32];
  std::snprintf(max_norm, sizeof max_norm, " max_norm=%g", double(limit));
  OpCase c = make_case("clip_grad_norm", kv({{"n", (long long)n}}) + max_norm, OpError::Elementwise,
                       {inout("g", uniform(n, seed, -3, 3)), out("norm", 1)});
  c.run = [=](Backend& be, const OpArgs& a) { be.clip_grad_norm(a.f(0), n, limit, a.f(1)); };
  c.reference = [=](OpHost& h) {
    const double norm = std::sqrt(cpu::sum_squares(h.f(0), n));
    h.d[1][0] = norm;
    if (limit > 0.0f && norm > limit) cpu::scale(h.f(0), double(float(limit / norm)), n);
  };
  return c;
}

// One step at t = 3 from moments already under way, over segments that straddle the CUDA kernel's
// chunks (one of a single element, one without decay) when n is large, one segment otherwise.
OpCase adamw_update_case(const OpDims& d, uint64_t seed) {
  const size_t n = d.n;
  std::vector<AdamWSegment> segs;
  if (n > 70002)
    segs = {{0, 70001, 0.1f}, {70001, 1, 0.0f}, {70002, n - 70002, 0.05f}};
  else
    segs = {{0, n, 0.1f}};
  const AdamWStep step{1e-2f, 0.9f, 0.95f, 1e-8f, 3};
  OpCase c =
      make_case("adamw_update", kv({{"n", (long long)n}, {"segments", (long long)segs.size()}}), OpError::Elementwise,
                {inout("param", uniform(n, seed)), in("grad", uniform(n, seed + 1, -2, 2)),
                 inout("m", uniform(n, seed + 2, -0.1, 0.1)), inout("v", uniform(n, seed + 3, 0.0, 0.2))});
  c.run = [=](Backend& be, const OpArgs& a) {
    be.adamw_update(a.f(0), a.f(1), a.f(2), a.f(3), segs.data(), int(segs.size()), step);
  };
  c.reference = [=](OpHost& h) {
    for (const AdamWSegment& s : segs)
      cpu::adamw_update(h.f(0) + s.offset, h.f(1) + s.offset, h.f(2) + s.offset, h.f(3) + s.offset, s.numel,
                        double(step.lr), double(step.beta1), double(step.beta2), double(step.eps),
                        double(s.weight_decay), step.t);
  };
  return c;
}

OpDims attn(int B, int NH, int NKV, int HS, int Tq, int Tk, int Tk_cap, int pos0, bool causal) {
  OpDims d;
  d.B = B, d.NH = NH, d.NKV = NKV, d.HS = HS, d.T = Tq, d.Tk = Tk, d.Tk_cap = Tk_cap, d.pos0 = pos0, d.causal = causal;
  return d;
}
OpDims rope(int B, int T, int NH, int HS, int pos0, int variant) {
  OpDims d;
  d.B = B, d.T = T, d.NH = NH, d.HS = HS, d.pos0 = pos0, d.variant = variant;
  return d;
}
OpDims nvc(int N, int V, int C, int variant = 0) {
  OpDims d;
  d.N = N, d.V = V, d.C = C, d.variant = variant;
  return d;
}
OpDims nch(int N, int C, int H, int variant = 0) {
  OpDims d;
  d.N = N, d.C = C, d.H = H, d.variant = variant;
  return d;
}
OpDims mm(int N, int IC, int OC, int variant) {
  OpDims d;
  d.N = N, d.C = IC, d.OC = OC, d.variant = variant;
  return d;
}

std::vector<OpDims> matmul_dims(std::initializer_list<int> variants) {
  std::vector<OpDims> v;
  const int shapes[][3] = {{333, 130, 77}, {1, 7, 3}, {4, 1, 1}, {64, 64, 29}, {1024, 64, 176}};
  for (int var : variants)
    for (const auto& s : shapes) v.push_back(mm(s[0], s[1], s[2], var));
  return v;
}

std::vector<OpRow> build_table() {
  const std::vector<OpDims> flat_sizes = {flat(1), flat(7), flat(100003)};
  const std::vector<OpDims> row_sizes = {rows(1, 1), rows(1000, 70), rows(3, 4099), rows(257, 1)};
  const std::vector<OpDims> norm_sizes = {rows(260, 130), rows(1, 1), rows(7, 4097), rows(1, 64)};
  const std::vector<OpDims> emb_sizes = {nvc(500, 29, 130), nvc(1, 3, 7), nvc(4096, 50, 64)};
  const std::vector<OpDims> rope_sizes = {rope(2, 65, 3, 32, 37, 0), rope(1, 1, 1, 2, 5, 0), rope(3, 5, 5, 66, 100, 1),
                                          rope(4, 66, 4, 16, 0, 0)};
  // Causal GQA, non-causal, T = 1 with an odd head size, a single query at an offset, T = 1024.
  std::vector<OpDims> attn_sizes = {attn(3, 4, 2, 32, 65, 65, 65, 0, true), attn(3, 4, 2, 32, 65, 65, 65, 0, false),
                                    attn(5, 2, 2, 7, 1, 1, 1, 0, true), attn(2, 4, 1, 32, 1, 70, 70, 69, true),
                                    attn(1, 4, 2, 64, 1024, 1024, 1024, 0, true)};
  std::vector<OpDims> attn_fwd_sizes = attn_sizes;
  // The backward's register tiles: queries behind a cache (GQA 3:1), heads of one, three and eight
  // vectors, non-causal.
  attn_sizes.push_back(attn(2, 6, 2, 64, 40, 70, 70, 30, true));
  attn_sizes.push_back(attn(1, 2, 1, 128, 33, 33, 33, 0, true));
  attn_sizes.push_back(attn(1, 3, 1, 48, 50, 50, 50, 0, true));
  attn_sizes.push_back(attn(2, 2, 2, 16, 17, 17, 17, 0, false));
  attn_fwd_sizes.push_back(attn(2, 4, 1, 32, 1, 70, 80, 69, true));  // decode: 10 cache rows beyond Tk
  // One task per (b, kv head) from kAttnKvTasksPerThread of them per thread (on 2 threads): a batch
  // of short sequences, and prompts continuing a cache.
  attn_fwd_sizes.push_back(attn(8, 4, 2, 32, 65, 65, 65, 0, true));
  attn_fwd_sizes.push_back(attn(4, 6, 2, 64, 40, 70, 80, 30, true));
  // The fp32 register tiles (kernels/cpu/attn_tiles_fp32.h): a prompt continuing a cache, and the
  // head widths of one and of eight vectors.
  attn_fwd_sizes.push_back(attn(2, 6, 2, 64, 40, 70, 80, 30, true));
  attn_fwd_sizes.push_back(attn(1, 2, 1, 128, 33, 33, 33, 0, true));
  attn_fwd_sizes.push_back(attn(2, 2, 2, 16, 17, 17, 17, 0, false));
  std::vector<OpDims> gate_sizes;
  for (auto [B, T, C, W] : {std::array{2, 33, 40, 5}, {1, 1, 1, 1}, {3, 70, 16, 100}, {2, 300, 64, 100}}) {
    OpDims d;
    d.B = B, d.T = T, d.C = C, d.Tk = W;
    gate_sizes.push_back(d);
  }
  std::vector<OpDims> topk_sizes;
  for (auto [B, T, k, ties] :
       {std::array{3, 65, 32, 1}, {1, 1, 1, 0}, {4, 66, 66, 1}, {2, 1024, 128, 0}, {5, 9, 1, 1}, {2, 2500, 1000, 1}}) {
    OpDims d;
    d.B = B, d.T = T, d.N = k, d.variant = ties;
    topk_sizes.push_back(d);
  }
  std::vector<OpDims> scatter_sizes;  // N rows, M selected (in OC), width C, in place
  for (auto [N, M, C, in_place] :
       {std::array{70, 35, 40, 0}, {1, 1, 1, 0}, {300, 300, 64, 1}, {257, 0, 33, 0}, {1000, 17, 130, 1}}) {
    OpDims d = rows(N, C, in_place);
    d.OC = M;
    scatter_sizes.push_back(d);
  }
  std::vector<OpDims> emb_fwd = emb_sizes;
  emb_fwd.push_back(nvc(333, 50, 130, 1));  // a bf16 table
  OpDims ce_big = nvc(64, 50257, 1);
  const std::vector<OpDims> ce_sizes = {nvc(517, 29, 1), nvc(1, 29, 1), nvc(3, 2, 1), ce_big};
  std::vector<OpDims> ce_bwd = ce_sizes;
  for (OpDims d : ce_sizes) d.variant = 1, ce_bwd.push_back(d);
  OpDims kl_mean = nch(64 * 65, 1, 8, 1);
  kl_mean.T = 65;
  OpDims kl_mean_small = nch(3, 1, 8, 1);
  kl_mean_small.T = 1;
  OpDims kbm1, kbm2, kbm3;
  kbm1.B = 64, kbm1.T = 65;
  kbm2.B = 1, kbm2.T = 7;
  kbm3.B = 256, kbm3.T = 130;
  OpDims cache;
  cache.B = 5, cache.T = 9, cache.C = 12, cache.pos0 = 7;
  std::vector<OpDims> clip;
  for (size_t n : {size_t(1), size_t(1000003)})
    for (int v = 0; v < 3; ++v) clip.push_back(flat(n)), clip.back().variant = v;

  return {
      {"add", add_case, flat_sizes},
      {"add_inplace", add_inplace_case, flat_sizes},
      {"scale", scale_case, flat_sizes},
      {"fill", fill_case, flat_sizes},
      {"copy", copy_case, flat_sizes},
      {"copy_rows", copy_rows_case, {cache}},
      {"sum_squares", sum_squares_case, {flat(1), flat(7), flat(1000003)}},
      {"broadcast_rows", broadcast_rows_case, row_sizes},
      {"sum_rows", sum_rows_case, row_sizes},
      {"embedding_forward", embedding_forward_case, emb_fwd},
      {"embedding_backward", embedding_backward_case, emb_sizes},
      {"rmsnorm_forward", rmsnorm_forward_case, norm_sizes},
      {"rmsnorm_backward", rmsnorm_backward_case, norm_sizes},
      {"matmul_forward", matmul_forward_case, matmul_dims({0, 1, 2, 3})},
      {"matmul_backward", matmul_backward_case, matmul_dims({0, 1, 2, 3, 4})},
      {"rope_forward", [](const OpDims& d, uint64_t s) { return rope_case(d, s, true); }, rope_sizes},
      {"rope_backward", [](const OpDims& d, uint64_t s) { return rope_case(d, s, false); }, rope_sizes},
      {"attention_forward", attention_forward_case, attn_fwd_sizes},
      {"attention_backward", attention_backward_case, attn_sizes},
      {"swiglu_forward", swiglu_forward_case, flat_sizes},
      {"swiglu_backward", swiglu_backward_case, flat_sizes},
      {"crossentropy_forward", crossentropy_forward_case, ce_sizes},
      {"crossentropy_backward", crossentropy_backward_case, ce_bwd},
      {"binary_mapper_forward",
       binary_mapper_forward_case,
       {nch(1000, 1, 1), nch(1000, 1, 8), nch(300, 1, 16), nch(1, 1, 16)}},
      {"binary_mapper_backward",
       binary_mapper_backward_case,
       {nch(300, 128, 1), nch(257, 33, 4), nch(100, 64, 16), nch(130, 33, 11)}},
      {"post_sampler_forward", post_sampler_forward_case, {nch(500, 130, 8), nch(7, 3, 1), nch(100, 64, 16)}},
      {"post_sampler_backward", post_sampler_backward_case, {nch(500, 130, 8), nch(7, 3, 1), nch(100, 64, 16)}},
      {"kl_forward", kl_forward_case, {nch(500, 1, 16), nch(7, 1, 1), nch(300, 1, 8)}},
      {"kl_batch_mean", kl_batch_mean_case, {kbm1, kbm2, kbm3}},
      {"kl_backward", kl_backward_case, {nch(500, 1, 16), nch(7, 1, 1), nch(300, 1, 8), kl_mean, kl_mean_small}},
      {"clip_grad_norm", clip_grad_norm_case, clip},
      {"adamw_update", adamw_update_case, {flat(1), flat(1000), flat(100003)}},
      // The routed block (docs/subjective_depth.md), last so that the rows above keep their seeds.
      {"route_stats_forward", route_stats_forward_case, gate_sizes},
      {"route_stats_backward", route_stats_backward_case, gate_sizes},
      {"route_gate_forward", route_gate_forward_case, gate_sizes},
      {"route_gate_backward", route_gate_backward_case, gate_sizes},
      {"topk_rows", topk_rows_case, topk_sizes},
      {"route_mask", route_mask_case, scatter_sizes},
      {"route_scatter_forward", route_scatter_forward_case, scatter_sizes},
      {"route_scatter_backward", route_scatter_backward_case, scatter_sizes},
      {"rope_forward_at", [](const OpDims& d, uint64_t s) { return rope_at_case(d, s, true); }, rope_sizes},
      {"rope_backward_at", [](const OpDims& d, uint64_t s) { return rope_at_case(d, s, false); }, rope_sizes},
  };
}

}  // namespace

OpDims op_dims_of(const AttnShape& s) {
  OpDims d;
  d.B = s.B, d.NH = s.NH, d.NKV = s.NKV, d.HS = s.HS, d.T = s.Tq, d.Tk = s.Tk, d.Tk_cap = s.Tk_cap;
  d.pos0 = s.q_pos0, d.causal = s.causal;
  return d;
}

AttnShape attn_shape_of(const OpDims& d) {
  AttnShape s;
  s.B = d.B, s.NH = d.NH, s.NKV = d.NKV, s.HS = d.HS;
  s.Tq = d.T, s.Tk = d.Tk, s.Tk_cap = d.Tk_cap, s.q_pos0 = d.pos0, s.causal = d.causal;
  return s;
}

const std::vector<OpRow>& op_table() {
  static const std::vector<OpRow> table = build_table();
  return table;
}

const OpRow* find_op_row(const std::string& op) {
  for (const OpRow& r : op_table())
    if (op == r.op) return &r;
  return nullptr;
}

std::vector<OpTestCase> op_test_cases() {
  std::vector<OpTestCase> cases;
  uint64_t seed = 1000;
  for (const OpRow& r : op_table())
    for (size_t i = 0; i < r.test_dims.size(); ++i)
      cases.push_back({&r, r.test_dims[i], seed += 10, std::string(r.op) + "_" + std::to_string(i)});
  return cases;
}

// ---- running a case -----------------------------------------------------------------------------

OpHost op_host(const OpCase& c) {
  OpHost h;
  for (const OpBuffer& b : c.buffers) {
    h.d.emplace_back(b.f.begin(), b.f.end());
    h.words.push_back(b.words);
  }
  return h;
}

OpOutputs run_op_reference(const OpCase& c) {
  OpHost h = op_host(c);
  c.reference(h);
  OpOutputs o;
  o.result = h.result;
  for (size_t k = 0; k < c.buffers.size(); ++k) {
    const OpBuffer& b = c.buffers[k];
    if (b.role != OpRole::Out && b.role != OpRole::InOut) continue;
    if (b.elem == OpElem::F32 || b.elem == OpElem::BF16)
      o.f[b.name] = to_floats(h.d[k]);
    else
      o.words[b.name] = h.words[k];
  }
  return o;
}

Result<std::unique_ptr<OpBuffers>> OpBuffers::upload(Backend& be, const OpCase& c) {
  std::unique_ptr<OpBuffers> ob(new OpBuffers(be, c));
  ob->args_.result = &ob->result_;
  for (const OpBuffer& b : c.buffers) {
    const size_t bytes = ((b.device_floats ? b.device_floats(be) * 4 : b.bytes()) + 3) / 4 * 4;
    auto p = be.try_alloc(bytes + kGuardWords * 4);
    if (!p) return Error{c.full_name() + ": " + p.error().message};
    ob->args_.ptr.push_back(*p);
    ob->args_.elem.push_back(b.elem);
    ob->bytes_.push_back(bytes);
    std::vector<uint32_t> host(bytes / 4 + kGuardWords, kGuardWord);
    if (b.device_floats) {
      std::fill(host.begin(), host.end() - kGuardWords, kUnwritten);  // NaN
    } else if (b.elem == OpElem::F32) {
      std::memcpy(host.data(), b.f.data(), b.f.size() * 4);
    } else if (b.elem == OpElem::BF16) {
      std::vector<uint16_t> h16(b.f.size());
      fp32_to_bf16(h16.data(), b.f.data(), b.f.size());
      std::memcpy(host.data(), h16.data(), h16.size() * 2);
    } else {
      std::memcpy(host.data(), b.words.data(), b.words.size() * 4);
    }
    be.upload(*p, host.data(), host.size() * 4);
    if (b.gemm_weight) {
      be.track_weights(static_cast<const float*>(*p), b.f.size());
      ob->tracking_ = true;
    }
  }
  return ob;
}

OpBuffers::~OpBuffers() {
  if (tracking_) be_.track_weights(nullptr, 0);
  for (void* p : args_.ptr) be_.release(p);
}

OpOutputs OpBuffers::download() const {
  be_.synchronize();
  OpOutputs o;
  o.result = result_;
  for (size_t k = 0; k < c_.buffers.size(); ++k) {
    const OpBuffer& b = c_.buffers[k];
    std::vector<uint32_t> host(bytes_[k] / 4 + kGuardWords);
    be_.download(host.data(), args_.ptr[k], host.size() * 4);
    if (!std::all_of(host.end() - kGuardWords, host.end(), [](uint32_t w) { return w == kGuardWord; }))
      o.overruns.push_back(b.name);
    if (b.role != OpRole::Out && b.role != OpRole::InOut) continue;
    if (b.elem == OpElem::F32) {
      std::vector<float>& v = o.f[b.name];
      v.resize(b.f.size());
      std::memcpy(v.data(), host.data(), v.size() * 4);
    } else {
      o.words[b.name].assign(host.begin(), host.begin() + std::ptrdiff_t(b.words.size()));
    }
  }
  return o;
}

double OpBuffers::traffic_bytes() const {
  double total = 0.0;
  for (size_t k = 0; k < c_.buffers.size(); ++k)
    total += double(bytes_[k]) * (c_.buffers[k].role == OpRole::InOut ? 2 : 1);
  return total;
}

Result<OpOutputs> run_op_case(Backend& be, const OpCase& c) {
  auto ob = OpBuffers::upload(be, c);
  if (!ob) return ob.error();
  (*ob)->prepare();
  (*ob)->run();
  return (*ob)->download();
}

// ---- comparing ----------------------------------------------------------------------------------

double op_rel_error(const std::vector<float>& ref, const std::vector<float>& got) {
  if (ref.size() != got.size()) return std::numeric_limits<double>::infinity();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i]) || !std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  // A reference norm under 1e-30 (denormal results, which a float path may flush to zero) counts
  // as 1e-30.
  return den > 0.0 ? std::sqrt(num) / std::max(std::sqrt(den), 1e-30) : std::sqrt(num);
}

std::string op_worst_element(const std::vector<float>& ref, const std::vector<float>& got) {
  if (ref.size() != got.size()) return "sizes " + std::to_string(ref.size()) + " vs " + std::to_string(got.size());
  if (ref.empty()) return "empty";
  size_t worst = 0;
  double wd = -1.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = std::abs(double(got[i]) - double(ref[i]));
    if (!(d == d)) d = std::numeric_limits<double>::infinity();  // NaN counts as worst
    if (d > wd) wd = d, worst = i;
  }
  std::ostringstream s;
  s.precision(9);
  s << "worst at [" << worst << "]: ref " << ref[worst] << ", got " << got[worst];
  return s.str();
}

std::vector<std::string> op_compare(const OpCase& c, const OpOutputs& ref, const OpOutputs& got, double limit) {
  std::vector<std::string> bad;
  for (const std::string& name : got.overruns) bad.push_back(name + ": written past its end");
  for (const auto& [name, r] : ref.f) {
    const auto g = got.f.find(name);
    if (g == got.f.end()) {
      bad.push_back(name + ": missing");
      continue;
    }
    const double e = op_rel_error(r, g->second);
    if (!(e <= limit)) {
      std::ostringstream s;
      s << name << ": relative error " << e << " > " << limit << "; " << op_worst_element(r, g->second);
      bad.push_back(s.str());
    }
    const auto b = std::find_if(c.buffers.begin(), c.buffers.end(), [&](const OpBuffer& x) { return x.name == name; });
    if (b == c.buffers.end() || b->role != OpRole::InOut || g->second.size() != b->f.size()) continue;
    // The change against itself, or against 1e-3 of the values when it is smaller than that (a
    // change that small is within the rounding of the values it is added to).
    std::vector<float> dr(r.size()), dg(r.size());
    double dd = 0.0, nr = 0.0, nd = 0.0;
    for (size_t i = 0; i < r.size(); ++i) {
      dr[i] = r[i] - b->f[i], dg[i] = g->second[i] - b->f[i];
      dd += (double(dg[i]) - dr[i]) * (double(dg[i]) - dr[i]), nr += double(r[i]) * r[i], nd += double(dr[i]) * dr[i];
    }
    const double ei = std::sqrt(dd) / std::max({std::sqrt(nd), 1e-3 * std::sqrt(nr), 1e-30});
    const double li = std::max(10 * limit, 1e-3);
    if (!(ei <= li)) {
      std::ostringstream s;
      s << name << " (its change): relative error " << ei << " > " << li << "; " << op_worst_element(dr, dg);
      bad.push_back(s.str());
    }
  }
  for (const auto& [name, r] : ref.words) {
    const auto g = got.words.find(name);
    if (g == got.words.end() || g->second.size() != r.size()) {
      bad.push_back(name + ": missing or resized");
      continue;
    }
    size_t differ = 0;
    for (size_t i = 0; i < r.size(); ++i) differ += r[i] != g->second[i];
    // Sampled codes: a draw between two roundings of the same p may flip a bit (1 % of words is
    // far more than chance gives, far less than a wrong draw index).
    const size_t allowed = c.draws ? r.size() / 100 : 0;
    if (differ > allowed)
      bad.push_back(name + ": " + std::to_string(differ) + " of " + std::to_string(r.size()) + " words differ");
  }
  if (c.returns_value) {
    const double e = std::abs(got.result - ref.result) / std::max(std::abs(ref.result), 1e-300);
    if (!(e <= std::max(limit, 1e-12)))
      bad.push_back("result: " + std::to_string(got.result) + " vs " + std::to_string(ref.result));
  }
  return bad;
}

}  // namespace ftx
