// ftx bench mapper: Backend::binary_mapper_backward against the GEMM of the same
// (N x C)(C x 2^H) shape on the same backend, as JSON.
#include <cstdio>

#include <omp.h>

#include "app/bench_common.h"
#include "app/common.h"

namespace ftx::app {
namespace {

using nlohmann::json;

Status check_mapper_args(const BenchArgs::Mapper& m) {
  if (m.tokens <= 0) return make_error("--tokens must be positive, got " + std::to_string(m.tokens));
  if (m.dim <= 0) return make_error("--dim must be positive, got " + std::to_string(m.dim));
  if (m.latent_bits < 1 || m.latent_bits > kMaxLatentBits)
    return make_error("--latent-bits " + std::to_string(m.latent_bits) + ": H must be in 1.." +
                      std::to_string(kMaxLatentBits));
  if (m.steps <= 0 || m.warmup < 0) return make_error("bench mapper: --steps must be positive, --warmup >= 0");
  return {};
}

}  // namespace

int run_bench_mapper(const BenchArgs::Mapper& m) {
  if (auto s = check_mapper_args(m); !s) return fail(s.error());
  auto made_backend = make_backend(m.device, m.precision);
  if (!made_backend) return fail(made_backend.error());
  std::unique_ptr<Backend> backend = std::move(*made_backend);
  Backend& be = *backend;
  const int N = m.tokens, C = m.dim, H = m.latent_bits, K = 1 << H;
  const double out_gib = double(N) * K * sizeof(float) / (1 << 30);
  char too_big[256];
  std::snprintf(too_big, sizeof too_big,
                "bench mapper: the GEMM output (%d x 2^%d floats, %.1f GiB) does not fit on %s: lower --tokens or "
                "--latent-bits",
                N, H, out_gib, be.name());
  // The CPU backend zero-fills what it allocates: refuse before touching more than the machine has
  // (the output, plus the inputs twice: on the backend and staged on the host).
  const double host_gib = (double(N) * C + double(C) * K + 2.0 * N * H) * sizeof(float) / (1 << 30);
  if (be.kind() == DeviceKind::Cpu && out_gib + 2 * host_gib > 0.9 * physical_memory_gib()) return fail(too_big);
  DeviceBuffers buf(be);
  float* out = buf.floats(size_t(N) * K);  // (N, 2^H) the GEMM's output, the largest: first
  if (!out) return fail(too_big);
  float* dR = buf.floats(size_t(N) * C);       // (N, C)
  float* W = buf.floats(size_t(C) * K);        // (C, 2^H) post-sampler; the GEMM reads it as (2^H, C)
  float* p = buf.floats(size_t(N) * H);        // (N, H) bit probabilities
  float* dlogits = buf.floats(size_t(N) * H);  // (N, H)
  if (!dR || !W || !p || !dlogits) return fail("bench mapper: out of memory on " + std::string(be.name()));
  upload_uniform(be, dR, size_t(N) * C, 1, -1.0f, 1.0f);
  upload_uniform(be, W, size_t(C) * K, 2, -0.05f, 0.05f);
  upload_uniform(be, p, size_t(N) * H, 3, 0.05f, 0.95f);
  be.track_weights(W, size_t(C) * K);  // W is a weight, as in the model: at bf16 both read its bf16 copy
  const double mapper_ms =
      median(time_calls(be, m.warmup, m.steps, [&] { be.binary_mapper_backward(dlogits, dR, W, p, N, C, H); }));
  const double gemm_ms =
      median(time_calls(be, m.warmup, m.steps, [&] { be.matmul_forward(out, dR, f32_weight(W), N, C, K, false); }));
  const double gemm_flops = 2.0 * N * C * K, mapper_flops = 2.0 * N * K * (C + H);
  const json j{{"device", be.name()},
               {"threads", omp_get_max_threads()},
               {"precision", matmul_precision_name(be.matmul_precision())},
               {"tokens", N},
               {"dim", C},
               {"latent_bits", H},
               {"codes", K},
               {"timed_steps", m.steps},
               {"mapper_ms_median", mapper_ms},
               {"gemm_ms_median", gemm_ms},
               {"mapper_flops", mapper_flops},
               {"gemm_flops", gemm_flops},
               {"mapper_tflops", mapper_flops / mapper_ms / 1e9},  // flops / (ms * 1e-3) / 1e12
               {"gemm_tflops", gemm_flops / gemm_ms / 1e9},
               {"mapper_vs_gemm", gemm_ms / mapper_ms}};
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

}  // namespace ftx::app
