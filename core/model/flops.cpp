#include "core/model/flops.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>
#include <vector>

namespace ftx {

double train_flops_per_token(const ModelConfig& c, int T, std::optional<double> routed_share) {
  const double D = c.dim, Q = double(c.n_heads) * c.head_dim, KV = double(c.n_kv_heads) * c.head_dim;
  const double block = D * Q + 2 * D * KV + Q * D + 3 * D * c.ffn_hidden;  // q, k, v, o; gate, up, down
  double gemm_params = double(c.vocab_size) * D, flops = 0;
  if (c.is_free()) gemm_params += double(c.latent_bits) * D;
  const double f_routed = routed_share ? *routed_share : T > 0 ? double(c.route_k(T)) / T : 0.0;
  const double P = c.route_prior_hidden();
  for (int l = 0; l < c.n_layers + (c.is_free() ? 1 : 0); ++l) {  // the encoder block last
    const bool routed = l < c.n_layers && c.routed(l);
    const double f = routed ? f_routed : 1.0;  // share of the tokens the block computes
    flops += 6 * block * f + 12.0 * f * f * T * Q;
    if (!routed) continue;
    if (c.routing.has_student()) flops += 6 * 2 * 2 * D;
    switch (c.routing.kind) {
      case Routing::Mod:
        flops += 6 * D;
        break;
      case Routing::Stt:  // the teacher's dense pass, forward only
        flops += 2 * block + 4.0 * T * Q;
        [[fallthrough]];
      case Routing::Sdt:
        flops += 6 * 3 * D * P;
        break;
      case Routing::None:
      case Routing::Random:
        break;
    }
  }
  flops += 6 * gemm_params;
  if (c.is_free()) flops += 2.0 * double(c.num_codes()) * (D + c.latent_bits);
  return flops;
}

double decode_flops_per_token(const ModelConfig& c, int len, double routed_share) {
  const double D = c.dim, Q = double(c.n_heads) * c.head_dim, KV = double(c.n_kv_heads) * c.head_dim;
  const double block = D * Q + 2 * D * KV + Q * D + 3 * D * c.ffn_hidden;
  const double keys = (double(len) + 1) / 2;
  double flops = 2 * double(c.vocab_size) * D;
  for (int l = 0; l < c.n_layers; ++l) {
    const bool routed = c.routed(l);
    const double f = routed ? routed_share : 1.0;
    flops += 2 * block * f + 4.0 * f * f * keys * Q;
    if (!routed) continue;
    if (c.routing.has_student()) flops += 2 * 2 * 2 * D;
    if (c.routing.kind == Routing::Mod) flops += 2 * D;
    if (c.routing.kind == Routing::Sdt) flops += 2 * 3 * D * c.route_prior_hidden();
  }
  return flops;
}

namespace {

struct PeakRow {
  const char* name_part;    // a substring of the device name, e.g. "cuda:0 (NVIDIA H100 80GB HBM3)"
  double fp32, tf32, bf16;  // fp32: CUDA cores, no tensor cores
};
constexpr PeakRow kPeaks[] = {
    {"H100 PCIe", 51.2, 378.0, 756.0}, {"H100 80GB HBM3", 66.9, 494.7, 989.4},  // SXM5
    {"H100 SXM", 66.9, 494.7, 989.4},  {"H200", 66.9, 494.7, 989.4},           {"A100", 19.5, 156.0, 312.0},
};

}  // namespace

std::optional<double> peak_tflops(const Backend& be, MatmulPrecision p) {
  const std::string name = be.name();
  if (be.kind() != DeviceKind::Cuda || name.find("NVL") != std::string::npos) return std::nullopt;
  for (const PeakRow& r : kPeaks)
    if (name.find(r.name_part) != std::string::npos)
      return p == MatmulPrecision::Fp32 ? r.fp32 : p == MatmulPrecision::Tf32 ? r.tf32 : r.bf16;
  return std::nullopt;
}

GemmPeak measure_gemm_peak(Backend& be, double min_seconds) {
  // 2048 x 1024 x 1024 (4.3 GFLOP, 40-80 ms by sgemm on 2 cores): sgemm's best on 2 cores of an
  // Ice Lake Xeon within the noise of larger products (docs/performance.md, "CPU speed, sixth pass").
  GemmPeak g;
  g.N = 2048, g.IC = 1024, g.OC = 1024;
  const size_t in_n = size_t(g.N) * g.IC, w_n = size_t(g.OC) * g.IC, out_n = size_t(g.N) * g.OC;
  std::vector<float> host(std::max(in_n, w_n));
  for (size_t i = 0; i < host.size(); ++i) host[i] = float(int(i % 61) - 30) / 64.0f;  // exact in bf16
  float* inp = static_cast<float*>(be.alloc(in_n * sizeof(float)));
  float* w = static_cast<float*>(be.alloc(w_n * sizeof(float)));
  float* out = static_cast<float*>(be.alloc(out_n * sizeof(float)));
  be.upload(inp, host.data(), in_n * sizeof(float));
  be.upload(w, host.data(), w_n * sizeof(float));
  const WeightRef wr{w, DType::F32};
  be.matmul_forward(out, inp, wr, g.N, g.IC, g.OC, false);  // untimed: scratch, pages, caches
  be.synchronize();
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  double fastest = std::numeric_limits<double>::infinity();
  int calls = 0;
  do {
    const auto t0 = Clock::now();
    be.matmul_forward(out, inp, wr, g.N, g.IC, g.OC, false);
    be.synchronize();
    fastest = std::min(fastest, std::chrono::duration<double>(Clock::now() - t0).count());
    ++calls;
  } while (calls < 3 || std::chrono::duration<double>(Clock::now() - start).count() < min_seconds);
  be.release(out);
  be.release(w);
  be.release(inp);
  g.tflops = 2.0 * g.N * g.IC * g.OC / fastest / 1e12;
  return g;
}

}  // namespace ftx
