// A benchmark of gemm_bf16w (kernels/cpu/gemm_bf16.h), not a test: built on demand
// (`ninja -C build bench_gemm_bf16`), never run by ctest. For each path this CPU can run it prints
//   - the machine's read bandwidth (measure_read_bandwidth, 1 GiB, the OpenMP threads),
//   - decode (N = 1): bytes of weight read per second for the SmolLM2-135M and 1.5B matrix shapes,
//     "cold" (copies of the matrix cycling through 1 GiB, as the layers of a model do; a cache as
//     large as 480 MiB still holds some of them) and "hot" (one matrix again and again),
//   - one decode token of each model (every GEMM of every layer and the head, each its own memory),
//   - prefill (N = 512): GFLOP/s per shape of both engines of a path (its kernel; widen + sgemm,
//     or on amx the tiles),
//   - crossover: the time ratio of the two engines for N = 1..128 (where gemm_bf16w_on switches).
// Figures are the best of several repetitions (the machine is shared). Usage:
//   bench_gemm_bf16 [bw|decode|prefill|model|crossover|all] [seconds per figure, default 0.3] [path]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/base/dtype.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_bf16_kernels.h"
#include "kernels/cpu/isa.h"
#include "kernels/membw.h"

namespace {

using namespace ftx;
using cpu::CpuIsa;
using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  int OC, IC;
};

// The GEMMs of one layer of each model (nn.Linear out x in), and its head.
const Shape kSmol[] = {{"q/o 576x576", 576, 576},
                       {"k/v 192x576", 192, 576},
                       {"gate/up 1536x576", 1536, 576},
                       {"down 576x1536", 576, 1536},
                       {"head 49152x576", 49152, 576}};
const Shape k15b[] = {{"q/o 1536x1536", 1536, 1536},
                      {"k/v 256x1536", 256, 1536},
                      {"gate/up 8960x1536", 8960, 1536},
                      {"down 1536x8960", 1536, 8960},
                      {"head 131072x1536", 131072, 1536}};

double g_seconds = 0.3;

// Best seconds per call of f over about g_seconds (at least 3 calls).
template <class F>
double best_time(F&& f) {
  double best = 1e300, spent = 0;
  for (int i = 0; i < 3 || spent < g_seconds; ++i) {
    const auto t0 = Clock::now();
    f(i);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s), spent += s;
  }
  return best;
}

// Weights of magnitude 2^-8..2^-7 with random signs and mantissas (xorshift: a 1.5B model's 3 GB
// fill in seconds; the values do not change the timing as long as none is subnormal or NaN).
std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  std::vector<uint16_t> v(n);
  uint64_t s = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (auto& x : v) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x = uint16_t(0x3B80u | (s & 0x7Fu) | ((s >> 8) & 0x8000u));
  }
  return v;
}

std::vector<float> random_f32(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : v) x = u(rng);
  return v;
}

constexpr size_t kColdBytes = size_t(1) << 30;  // copies of a matrix cycle through this much memory

void decode(CpuIsa isa, const Shape* shapes, int n_shapes, double bw) {
  for (int s = 0; s < n_shapes; ++s) {
    const Shape sh = shapes[s];
    const size_t bytes = size_t(sh.OC) * sh.IC * 2;
    const int copies = int(std::max<size_t>(2, kColdBytes / bytes));
    std::vector<uint16_t> w = random_bf16(size_t(sh.OC) * sh.IC * copies, 1);
    const std::vector<float> x = random_f32(sh.IC, 2);
    std::vector<float> out(sh.OC);
    const double cold = best_time([&](int i) {
      cpu::gemm_bf16w_on(isa, out.data(), x.data(), w.data() + size_t(i % copies) * sh.OC * sh.IC, 1, sh.IC, sh.OC,
                         false);
    });
    const double hot =
        best_time([&](int) { cpu::gemm_bf16w_on(isa, out.data(), x.data(), w.data(), 1, sh.IC, sh.OC, false); });
    std::printf("  %-12s N=1 %-20s %8.1f us cold %6.2f GB/s (%3.0f%% of read bw) | hot %8.1f us %6.2f GB/s\n",
                cpu::cpu_isa_name(isa), sh.name, cold * 1e6, bytes / cold / 1e9, 100 * bytes / cold / bw, hot * 1e6,
                bytes / hot / 1e9);
  }
}

// One decode token: every GEMM of every layer and the head, each reading its own weights.
void model_token(CpuIsa isa, const char* model, const Shape* shapes, int layers, double bw) {
  struct Mat {
    Shape sh;
    size_t offset;
  };
  std::vector<Mat> mats;
  size_t total = 0;
  const int per_layer[4] = {2, 2, 2, 1};  // q+o, k+v, gate+up, down
  for (int l = 0; l < layers; ++l)
    for (int s = 0; s < 4; ++s)
      for (int r = 0; r < per_layer[s]; ++r)
        mats.push_back({shapes[s], total}), total += size_t(shapes[s].OC) * shapes[s].IC;
  mats.push_back({shapes[4], total}), total += size_t(shapes[4].OC) * shapes[4].IC;
  std::vector<uint16_t> w = random_bf16(total, 3);
  int max_dim = 0;
  for (const Mat& m : mats) max_dim = std::max({max_dim, m.sh.OC, m.sh.IC});
  const std::vector<float> x = random_f32(max_dim, 4);
  std::vector<float> out(max_dim);
  const double t = best_time([&](int) {
    for (const Mat& m : mats)
      cpu::gemm_bf16w_on(isa, out.data(), x.data(), w.data() + m.offset, 1, m.sh.IC, m.sh.OC, false);
  });
  std::printf("  %-12s %s decode token, GEMMs only: %.2f ms = %.1f tok/s, %.2f GB/s (%3.0f%% of read bw), %.0f MB\n",
              cpu::cpu_isa_name(isa), model, t * 1e3, 1 / t, total * 2 / t / 1e9, 100 * total * 2 / t / bw,
              total * 2 / 1e6);
}

// Both engines of a path on N inputs (gemm_bf16w_on takes sgemm from sgemm_min_n on).
void prefill(CpuIsa isa, const Shape* shapes, int n_shapes, int N) {
  for (int s = 0; s < n_shapes; ++s) {
    const Shape sh = shapes[s];
    if (size_t(sh.OC) * sh.IC > size_t(20) << 20) continue;  // the heads: minutes on this machine
    const std::vector<uint16_t> w = random_bf16(size_t(sh.OC) * sh.IC, 5);
    const std::vector<float> x = random_f32(size_t(N) * sh.IC, 6);
    std::vector<float> out(size_t(N) * sh.OC);
    const double flops = 2.0 * N * sh.IC * sh.OC;
    auto run = [&](cpu::detail::Bf16Engine e) {
      return best_time(
          [&](int) { cpu::detail::gemm_bf16w_engine(isa, e, out.data(), x.data(), w.data(), N, sh.IC, sh.OC, false); });
    };
    const double kernel = run(cpu::detail::Bf16Engine::Kernel), sgemm = run(cpu::detail::Bf16Engine::Sgemm);
    std::printf("  %-12s N=%d %-20s kernel %8.2f ms %7.1f GFLOP/s | sgemm %8.2f ms %7.1f GFLOP/s | uses %s\n",
                cpu::cpu_isa_name(isa), N, sh.name, kernel * 1e3, flops / kernel / 1e9, sgemm * 1e3,
                flops / sgemm / 1e9, N >= cpu::detail::sgemm_min_n(isa) ? "sgemm" : "kernel");
  }
}

// The kernel against widen + sgemm for growing N (where gemm_bf16w_on switches, sgemm_min_n).
void crossover(CpuIsa isa) {
  const Shape shapes[] = {
      {"576x576", 576, 576}, {"1536x576", 1536, 576}, {"1536x1536", 1536, 1536}, {"576x1536", 576, 1536}};
  for (const Shape sh : shapes) {
    const std::vector<uint16_t> w = random_bf16(size_t(sh.OC) * sh.IC, 7);
    const std::vector<float> x = random_f32(size_t(128) * sh.IC, 8);
    std::vector<float> out(size_t(128) * sh.OC);
    std::printf("  %-12s %-10s kernel/sgemm time ratio by N:", cpu::cpu_isa_name(isa), sh.name);
    for (const int N : {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128}) {
      auto run = [&](cpu::detail::Bf16Engine e) {
        return best_time([&](int) {
          cpu::detail::gemm_bf16w_engine(isa, e, out.data(), x.data(), w.data(), N, sh.IC, sh.OC, false);
        });
      };
      const double k = run(cpu::detail::Bf16Engine::Kernel), g = run(cpu::detail::Bf16Engine::Sgemm);
      std::printf(" %d:%.2f", N, k / g);
      std::fflush(stdout);
    }
    std::printf("\n");
  }
}

}  // namespace
int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  if (argc > 2) g_seconds = std::atof(argv[2]);
  const std::string only = argc > 3 ? argv[3] : "";  // one path by name
  const int threads = omp_get_max_threads();
  const BandwidthMeasure m = measure_read_bandwidth(kColdBytes, threads, 0.5);
  std::printf("read bandwidth: %.2f GB/s (%d threads, %zu MiB, best pass %.1f ms); best path %s\n", m.bytes_per_s / 1e9,
              m.threads, m.buffer_bytes >> 20, m.seconds * 1e3, cpu::cpu_isa_name(cpu::best_cpu_isa()));
  for (const CpuIsa isa : {CpuIsa::Amx, CpuIsa::Avx512Bf16, CpuIsa::Avx2, CpuIsa::Generic}) {
    if (!cpu::cpu_isa_supported(isa) || (!only.empty() && only != cpu::cpu_isa_name(isa))) continue;
    if (what == "decode" || what == "all") {
      decode(isa, kSmol, 5, m.bytes_per_s);
      decode(isa, k15b, 5, m.bytes_per_s);
    }
    if (what == "model" || what == "all") {
      model_token(isa, "SmolLM2-135M", kSmol, 30, m.bytes_per_s);
      model_token(isa, "1.5B (28 layers)", k15b, 28, m.bytes_per_s);
    }
    if (what == "crossover") crossover(isa);
    if (what == "prefill" || what == "all") {
      prefill(isa, kSmol, 5, 512);
      prefill(isa, k15b, 5, 512);
    }
  }
  if (what == "bw") return 0;
  const BandwidthMeasure m2 = measure_read_bandwidth(kColdBytes, threads, 0.5);
  std::printf("read bandwidth again: %.2f GB/s\n", m2.bytes_per_s / 1e9);
  return 0;
}
