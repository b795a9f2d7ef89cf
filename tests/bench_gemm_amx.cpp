// A benchmark of gemm_bf16_amx and gemm_bf16_vdp (kernels/cpu/gemm_amx.h), not a test: GFLOP/s of
// the three products of a Linear layer in training (N tokens, IC inputs, OC outputs), one engine
// (the AMX tiles or VDPBF16PS) against OpenBLAS sgemm on the same fp32 operands, same threads:
//   fwd  out (N, OC)  = inp (N, IC) @ W^T      dX  dinp (N, IC) = dout (N, OC) @ W
//   dW   dW (OC, IC) += dout^T @ inp
// Times include the packing (rounding to bf16) of every call. Figures are the best of several
// calls over about `seconds` each (the machine may be shared); the last column is the largest
// |engine - sgemm| relative to max |sgemm| (bf16 inputs: a few 1e-3). Usage:
//   bench_gemm_amx [seconds per figure, default 0.5] [threads, default 2] [amx|vdp, default amx]
// (run with OPENBLAS_CORETYPE set as ftx sets it, kernels/cpu/blas_core.h, for its sgemm).
// Build: g++ -std=c++20 -O3 -fopenmp -I. kernels/cpu/gemm_amx.cpp kernels/cpu/isa.cpp tests/bench_gemm_amx.cpp
// -lopenblas
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/isa.h"

namespace {

using Clock = std::chrono::steady_clock;

double g_seconds = 0.5;
// The engine measured.
void (*g_gemm)(bool, bool, int, int, int, const float*, int, const float*, int, float*, int,
               bool) = ftx::cpu::gemm_bf16_amx;

// Best seconds per call of f over about g_seconds (at least 3 calls, after one warm-up).
template <class F>
double best_time(F&& f) {
  f();
  double best = 1e300, spent = 0;
  for (int i = 0; i < 3 || spent < g_seconds; ++i) {
    const auto t0 = Clock::now();
    f();
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, t);
    spent += t;
  }
  return best;
}

void fill(std::vector<float>& v, size_t n, uint32_t seed) {
  v.resize(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : v) x = u(rng);
}

struct Product {
  const char* name;
  bool ta, tb;
  int M, N, K;
  const float *a, *b;
  int lda, ldb;
  float* c;
  bool accumulate;
};

void bench(int n_tok, int IC, int OC) {
  std::vector<float> inp, w, dout, out(size_t(n_tok) * OC), dx(size_t(n_tok) * IC), dw(size_t(OC) * IC, 0.0f);
  fill(inp, size_t(n_tok) * IC, 1);
  fill(w, size_t(OC) * IC, 2);
  fill(dout, size_t(n_tok) * OC, 3);
  const Product products[] = {
      {"fwd", false, true, n_tok, OC, IC, inp.data(), w.data(), IC, IC, out.data(), false},
      {"dX", false, false, n_tok, IC, OC, dout.data(), w.data(), OC, IC, dx.data(), false},
      {"dW", true, false, OC, IC, n_tok, dout.data(), inp.data(), OC, IC, dw.data(), true},
  };
  for (const Product& p : products) {
    const size_t nc = size_t(p.M) * p.N;
    std::vector<float> c_amx(p.c, p.c + nc), c_blas(p.c, p.c + nc);
    const double flops = 2.0 * p.M * p.N * p.K;
    // dW accumulates: the timed calls keep adding into their copy; the check below uses a fresh one.
    const double t_amx =
        best_time([&] { g_gemm(p.ta, p.tb, p.M, p.N, p.K, p.a, p.lda, p.b, p.ldb, c_amx.data(), p.N, p.accumulate); });
    const double t_blas = best_time([&] {
      cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans, p.M, p.N, p.K,
                  1.0f, p.a, p.lda, p.b, p.ldb, p.accumulate ? 1.0f : 0.0f, c_blas.data(), p.N);
    });
    std::fill(c_amx.begin(), c_amx.end(), 0.0f);
    std::fill(c_blas.begin(), c_blas.end(), 0.0f);
    g_gemm(p.ta, p.tb, p.M, p.N, p.K, p.a, p.lda, p.b, p.ldb, c_amx.data(), p.N, false);
    cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans, p.M, p.N, p.K, 1.0f,
                p.a, p.lda, p.b, p.ldb, 0.0f, c_blas.data(), p.N);
    double diff = 0, mag = 0;
    for (size_t i = 0; i < nc; ++i) {
      diff = std::max(diff, double(std::fabs(c_amx[i] - c_blas[i])));
      mag = std::max(mag, double(std::fabs(c_blas[i])));
    }
    std::printf("%5d %5d %6d  %-4s %5d x %5d x %5d  %8.1f  %8.1f  %5.2fx  %.1e\n", n_tok, IC, OC, p.name, p.M, p.N, p.K,
                flops / t_amx * 1e-9, flops / t_blas * 1e-9, t_blas / t_amx, diff / std::max(mag, 1e-30));
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_seconds = std::atof(argv[1]);
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const std::string engine = argc > 3 ? argv[3] : "amx";
  if (engine == "vdp") {
    if (!ftx::cpu::cpu_isa_supported(ftx::cpu::CpuIsa::Avx512Bf16)) {
      std::printf("no AVX512_BF16 on this machine\n");
      return 1;
    }
    g_gemm = ftx::cpu::gemm_bf16_vdp;
  } else if (!ftx::cpu::amx_usable()) {
    std::printf("no AMX bf16 on this machine (or the kernel refused the tile state)\n");
    return 1;
  }
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  std::printf("threads %d (OpenBLAS %s, parallel mode %d)\n", threads, openblas_get_config(), openblas_get_parallel());
  std::printf("%5s %5s %6s  %-4s %23s  %8s  %8s  %6s  %s\n", "N", "IC", "OC", "op", "M x N x K",
              engine == "vdp" ? "VDP GF/s" : "AMX GF/s", "sgemm", "ratio", "rel diff");
  const int shapes[][3] = {
      {4160, 256, 256}, {4160, 256, 1024}, {4160, 1024, 256}, {2048, 576, 1536}, {2048, 576, 49152}};
  for (const auto& s : shapes) bench(s[0], s[1], s[2]);
  return 0;
}
