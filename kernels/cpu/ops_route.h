// A routed block's router (kernels/backend.h; docs/subjective_depth.md): the surprise statistics
// and gate (route_stats_*, route_gate_*), the top-k selection per sequence (topk_rows) and the
// gated write-back of the selected tokens (route_scatter_*). Templated on
// the scalar so the tests run them in double. Top-k is a stable order by (score descending,
// position ascending), so ties go to the earlier position on every backend. The gate sums its
// squared norms and its parameter gradients in double, tokens in order.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/base/assert.h"
#include "kernels/cpu/cpu_common.h"

namespace ftx::cpu {

template <class S>
void topk_rows(int32_t* pos, int32_t* rows, const S* score, int B, int T, int k) {
  FT_ASSERT(k >= 0 && k <= T, "topk_rows: k %d of T %d", k, T);
  std::vector<int32_t> order(static_cast<size_t>(T));
  for (int b = 0; b < B; ++b) {
    const S* s = score + size_t(b) * T;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [s](int32_t i, int32_t j) { return s[i] > s[j]; });
    std::sort(order.begin(), order.begin() + k);
    for (int i = 0; i < k; ++i) {
      pos[size_t(b) * k + i] = order[size_t(i)];
      rows[size_t(b) * k + i] = b * T + order[size_t(i)];
    }
  }
}

inline void route_mask(int32_t* mask, const int32_t* rows, int N, int M) {
  std::fill(mask, mask + N, 0);
  for (int i = 0; i < M; ++i) mask[rows[i]] = 1;
}

// out = x, then row r = rows[i] of out = g[r] y[i] + (1 - g[r]) x[r] for i < M; out may alias x.
// With g[r] = 1 the row is y[i] exactly.
template <class T>
void route_scatter_forward(T* out, const T* x, const T* y, const T* g, const int32_t* rows, int N, int M, int C) {
  if (out != x) std::copy(x, x + size_t(N) * C, out);
#pragma omp parallel for schedule(static) if (go_parallel(size_t(M) * C))
  for (int i = 0; i < M; ++i) {
    const int32_t r = rows[i];
    const T k = g[r], j = T(1) - k;
    const T* yr = y + size_t(i) * C;
    T* o = out + size_t(r) * C;
    for (int c = 0; c < C; ++c) o[c] = k * yr[c] + j * o[c];
  }
}

// dx = dout with row r = rows[i] scaled by (1 - g[r]) (dx may alias dout); dy[i] = g[r] dout[r];
// dg[r] += <dout[r], y[i] - x[r]> summed in double. Rows not selected take no gate gradient.
template <class T>
void route_scatter_backward(T* dx, T* dy, T* dg, const T* dout, const T* x, const T* y, const T* g, const int32_t* rows,
                            int N, int M, int C) {
  if (dx != dout) std::copy(dout, dout + size_t(N) * C, dx);
#pragma omp parallel for schedule(static) if (go_parallel(size_t(M) * C))
  for (int i = 0; i < M; ++i) {
    const int32_t r = rows[i];
    const T k = g[r], j = T(1) - k;
    const T* yr = y + size_t(i) * C;
    const T* xr = x + size_t(r) * C;
    T* d = dx + size_t(r) * C;
    T* dyr = dy + size_t(i) * C;
    double dot = 0.0;
    for (int c = 0; c < C; ++c) {
      dot += double(d[c]) * (double(yr[c]) - double(xr[c]));
      dyr[c] = k * d[c];
      d[c] = j * d[c];
    }
    dg[r] += static_cast<T>(dot);
  }
}

inline double route_softplus(double p) { return p > 20.0 ? p : std::log1p(std::exp(p)); }
inline double route_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

template <class T>
void route_stats_forward(T* st_ch, T* ma, const T* dx, const T* dx_hat, int B, int Tn, int C, int W) {
  FT_ASSERT(W >= 1 && C >= 1, "route_stats: window %d, width %d", W, C);
  const size_t N = size_t(B) * Tn;
#pragma omp parallel for schedule(static) if (go_parallel(N * C))
  for (int64_t n = 0; n < int64_t(N); ++n) {
    const T* x = dx + size_t(n) * C;
    const T* h = dx_hat + size_t(n) * C;
    double st = 0.0, ch = 0.0;
    for (int c = 0; c < C; ++c) {
      st += double(x[c]) * double(x[c]);
      const double e = double(x[c]) - double(h[c]);
      ch += e * e;
    }
    st_ch[n] = T(st / C);
    st_ch[N + size_t(n)] = T(ch / C);
  }
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      const int t0 = std::max(0, t - W + 1);
      double sum = 0.0;
      for (int u = t0; u <= t; ++u) sum += double(st_ch[size_t(b) * Tn + u]);
      ma[size_t(b) * Tn + t] = T(sum / (t - t0 + 1));
    }
  }
}

template <class T>
void route_stats_backward(T* d_dx, T* d_dx_hat, const T* d_st_ch, const T* dx, const T* dx_hat, int N, int C) {
#pragma omp parallel for schedule(static) if (go_parallel(size_t(N) * C))
  for (int n = 0; n < N; ++n) {
    const double k_st = 2.0 / C * double(d_st_ch[n]), k_ch = 2.0 / C * double(d_st_ch[size_t(N) + n]);
    const T* x = dx + size_t(n) * C;
    const T* h = dx_hat + size_t(n) * C;
    for (int c = 0; c < C; ++c) {
      const double e = double(x[c]) - double(h[c]);
      d_dx[size_t(n) * C + c] = T(k_st * double(x[c]) + k_ch * e);
      d_dx_hat[size_t(n) * C + c] = T(-k_ch * e);
    }
  }
}

// The gate at one token: CE, CU and their sigmoids a and c; k = softplus of the four parameters.
struct RouteGateAt {
  double ce, cu, a, c;
};
inline RouteGateAt route_gate_at(double d_st, double d_ch, double ma, const double k[4]) {
  RouteGateAt r;
  r.ce = d_st - d_ch + std::log(k[0]);
  r.cu = d_st - k[1] * ma;
  r.a = route_sigmoid(k[2] * r.ce);
  r.c = route_sigmoid(k[3] * r.cu);
  return r;
}

template <class T>
void route_gate_forward(T* g, const T* st_ch, const T* ma, const T* params, int N) {
  double k[4];
  for (int i = 0; i < 4; ++i) k[i] = route_softplus(double(params[i]));
  for (int n = 0; n < N; ++n) {
    const RouteGateAt r = route_gate_at(double(st_ch[n]), double(st_ch[size_t(N) + n]), double(ma[n]), k);
    g[n] = T(r.a + r.c - r.a * r.c);
  }
}

template <class T>
void route_gate_backward(T* d_st_ch, T* dparams, const T* dg, const T* st_ch, const T* ma, const T* params, int N) {
  double k[4], dk[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4; ++i) k[i] = route_softplus(double(params[i]));
  for (int n = 0; n < N; ++n) {
    const RouteGateAt r = route_gate_at(double(st_ch[n]), double(st_ch[size_t(N) + n]), double(ma[n]), k);
    const double da = double(dg[n]) * (1.0 - r.c) * r.a * (1.0 - r.a);  // dL/d(beta_ce CE)
    const double dc = double(dg[n]) * (1.0 - r.a) * r.c * (1.0 - r.c);  // dL/d(beta_cu CU)
    d_st_ch[n] = T(da * k[2] + dc * k[3]);
    d_st_ch[size_t(N) + n] = T(-da * k[2]);
    dk[0] += da * k[2] / k[0];
    dk[1] -= dc * k[3] * double(ma[n]);
    dk[2] += da * r.ce;
    dk[3] += dc * r.cu;
  }
  for (int i = 0; i < 4; ++i) dparams[i] += T(dk[i] * route_sigmoid(double(params[i])));
}

}  // namespace ftx::cpu
