// gemm_bf16w (kernels/cpu/gemm_bf16.h) on every instruction-set path this CPU can run, against a
// double-precision GEMM on the same bf16 weights, on decode and prefill shapes, odd and even sizes,
// with and without accumulate; the paths against each other; what a call may not touch (guard
// values, other threads' rows); the FTX_CPU_ISA override and the test hook (kernels/cpu/isa.h); the
// read-bandwidth measurement (kernels/membw.h) returns a sane figure.
//
// Not here: speed (docs/performance.md records it; tests assert no timings).
#include <gtest/gtest.h>
#include <omp.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/base/dtype.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_bf16_kernels.h"
#include "kernels/cpu/isa.h"
#include "kernels/membw.h"

namespace ftx::cpu {
void PrintTo(CpuIsa isa, std::ostream* os) { *os << cpu_isa_name(isa); }  // gtest's name for a parameter
}  // namespace ftx::cpu

namespace {

using namespace ftx;
using cpu::CpuIsa;

// Generic and Avx2 multiply exact bf16 weights by fp32 activations exactly and add in fp32: the
// error of an output is a few units of fp32 rounding (2^-24) times sum |x_i w_i| (plus |out| when
// accumulating), far below 1e-5 of it for the sums of up to 1536 terms here.
constexpr double kFp32Rel = 1e-5;
// Avx512Bf16 rounds each activation to bf16 first (relative error <= 2^-9 per term), so its
// distance to the exact product is at most 2^-9 * sum |x_i w_i| plus the fp32 part above; 2^-8
// leaves room for the latter. Against the exact product of the rounded activations it is kFp32Rel.
constexpr double kBf16InputsRel = 1.0 / 256;
constexpr int kGuard = 16;
constexpr float kGuardValue = -12345.678f;

constexpr CpuIsa kAllIsas[] = {CpuIsa::Generic, CpuIsa::Avx2, CpuIsa::Avx512Bf16, CpuIsa::Amx};

struct Problem {
  int N, IC, OC;
  std::vector<float> x;     // (N, IC)
  std::vector<uint16_t> w;  // (OC, IC) bf16
  std::vector<float> base;  // (N, OC) what out holds before an accumulating call
};

Problem make_problem(int N, int IC, int OC, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Problem p{N,
            IC,
            OC,
            std::vector<float>(size_t(N) * IC),
            std::vector<uint16_t>(size_t(OC) * IC),
            std::vector<float>(size_t(N) * OC)};
  for (float& v : p.x) v = u(rng);
  for (uint16_t& v : p.w) v = fp32_to_bf16(0.5f * u(rng));
  for (float& v : p.base) v = u(rng);
  return p;
}

// Per output: the exact sum in double (activations as given, or rounded to bf16 first) and
// sum |x_i w_i| + |base| (when accumulating), the scale of the rounding error.
struct Reference {
  std::vector<double> exact, rounded_inputs, scale;
};

Reference reference(const Problem& p, bool accumulate) {
  Reference r;
  const size_t n_out = size_t(p.N) * p.OC;
  r.exact.resize(n_out), r.rounded_inputs.resize(n_out), r.scale.resize(n_out);
  for (int n = 0; n < p.N; ++n) {
    for (int o = 0; o < p.OC; ++o) {
      double s = 0, sr = 0, a = 0;
      for (int k = 0; k < p.IC; ++k) {
        const double xv = p.x[size_t(n) * p.IC + k], wv = bf16_to_fp32(p.w[size_t(o) * p.IC + k]);
        s += xv * wv;
        sr += double(bf16_to_fp32(fp32_to_bf16(float(xv)))) * wv;
        a += std::fabs(xv * wv);
      }
      const size_t i = size_t(n) * p.OC + o;
      const double b = accumulate ? p.base[i] : 0.0;
      r.exact[i] = s + b, r.rounded_inputs[i] = sr + b, r.scale[i] = a + std::fabs(b);
    }
  }
  return r;
}

// Which engine a call uses: gemm_bf16w_on's choice by N, or one named (kernels/cpu/gemm_bf16_kernels.h).
enum class Engine { Auto, Kernel, Sgemm };
constexpr Engine kEngines[] = {Engine::Kernel, Engine::Sgemm};
const char* engine_name(Engine e) { return e == Engine::Kernel ? "kernel" : e == Engine::Sgemm ? "sgemm" : "auto"; }

// out of one call on `isa`, guard values checked.
std::vector<float> run(CpuIsa isa, const Problem& p, bool accumulate, Engine engine = Engine::Auto) {
  const size_t n_out = size_t(p.N) * p.OC;
  std::vector<float> out(n_out + kGuard, kGuardValue);
  for (size_t i = 0; i < n_out; ++i) out[i] = accumulate ? p.base[i] : std::numeric_limits<float>::quiet_NaN();
  if (engine == Engine::Auto) {
    cpu::gemm_bf16w_on(isa, out.data(), p.x.data(), p.w.data(), p.N, p.IC, p.OC, accumulate);
  } else {
    const auto e = engine == Engine::Kernel ? cpu::detail::Bf16Engine::Kernel : cpu::detail::Bf16Engine::Sgemm;
    cpu::detail::gemm_bf16w_engine(isa, e, out.data(), p.x.data(), p.w.data(), p.N, p.IC, p.OC, accumulate);
  }
  for (int g = 0; g < kGuard; ++g) EXPECT_EQ(out[n_out + g], kGuardValue) << "guard " << g << " overwritten";
  out.resize(n_out);
  return out;
}

// The worst |got - ref| / (rel * scale), which must stay <= 1; prints the worst element.
double worst_ratio(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& scale,
                   double rel, int OC, std::string* where) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(double(got[i]) - ref[i]);
    const double ratio = std::isnan(got[i]) ? 1e30 : err / (rel * scale[i] + 1e-30);
    if (ratio > worst) {
      worst = ratio;
      *where = "n " + std::to_string(i / OC) + " o " + std::to_string(i % OC) + ": got " + std::to_string(got[i]) +
               ", want " + std::to_string(ref[i]) + " (scale " + std::to_string(scale[i]) + ")";
    }
  }
  return worst;
}

class GemmBf16Path : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu::cpu_isa_supported(GetParam()))
      GTEST_SKIP() << "this CPU cannot run the " << cpu::cpu_isa_name(GetParam()) << " path";
  }
  CpuIsa isa() const { return GetParam(); }
};

// Every (N, IC, OC) of these lists, with and without accumulate, on both engines: decode (N = 1..8)
// and prefill batches, the SmolLM2 shapes (576, 192, 1536) and sizes that are no multiple of 8, 16
// or 32.
TEST_P(GemmBf16Path, MatchesDoubleOnTheBf16Weights) {
  struct Dims {
    int IC, OC;
  };
  const Dims dims[] = {{1, 1}, {7, 3}, {31, 33}, {65, 17}, {576, 192}, {576, 576}, {1536, 576}, {576, 1536}};
  uint32_t seed = 1;
  for (const int N : {1, 2, 3, 5, 8, 17, 64, 130}) {
    for (const Dims d : dims) {
      if (N >= 64 && d.IC * d.OC > 576 * 576) continue;  // keeps the double reference quick
      const Problem p = make_problem(N, d.IC, d.OC, seed++);
      for (const bool accumulate : {false, true}) {
        const Reference ref = reference(p, accumulate);
        for (const Engine engine : kEngines) {
          SCOPED_TRACE("N " + std::to_string(N) + " IC " + std::to_string(d.IC) + " OC " + std::to_string(d.OC) +
                       (accumulate ? " accumulate " : " ") + engine_name(engine));
          const std::vector<float> got = run(isa(), p, accumulate, engine);
          std::string where;
          if (isa() >= CpuIsa::Avx512Bf16) {
            EXPECT_LE(worst_ratio(got, ref.rounded_inputs, ref.scale, kFp32Rel, p.OC, &where), 1.0) << where;
            EXPECT_LE(worst_ratio(got, ref.exact, ref.scale, kBf16InputsRel, p.OC, &where), 1.0) << where;
          } else {
            EXPECT_LE(worst_ratio(got, ref.exact, ref.scale, kFp32Rel, p.OC, &where), 1.0) << where;
          }
        }
      }
    }
  }
}

// Blocked work: the kernel with inputs many and wide enough that it cuts k into blocks
// (Avx512Bf16: more than 1 MiB of bf16 activations) with a k tail after them, and sgemm with a weight
// of more rows than one widened slab holds (kWidenMinRows, kWidenFloats in ops_matmul.h).
TEST_P(GemmBf16Path, MatchesDoubleWhenTheWorkIsBlocked) {
  struct Case {
    int N, IC, OC;
    Engine engine;
  };
  for (const Case c :
       {Case{600, 1000, 40, Engine::Kernel}, Case{130, 8960, 9, Engine::Kernel}, Case{50, 1536, 1100, Engine::Sgemm}}) {
    const Problem p = make_problem(c.N, c.IC, c.OC, 77);
    SCOPED_TRACE("N " + std::to_string(c.N) + " IC " + std::to_string(c.IC) + " OC " + std::to_string(c.OC) + " " +
                 engine_name(c.engine));
    const Reference ref = reference(p, true);
    const std::vector<float> got = run(isa(), p, true, c.engine);
    std::string where;
    const bool rounds = isa() >= CpuIsa::Avx512Bf16;
    EXPECT_LE(worst_ratio(got, rounds ? ref.rounded_inputs : ref.exact, ref.scale, kFp32Rel, c.OC, &where), 1.0)
        << where;
  }
}

// A call with no inputs columns writes zeros (or leaves out as it was); a NaN activation makes its
// row NaN and no other.
TEST_P(GemmBf16Path, EmptySumsAndNaN) {
  Problem p = make_problem(3, 0, 5, 5);
  for (const float v : run(isa(), p, false)) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(run(isa(), p, true), p.base);

  p = make_problem(3, 40, 21, 6);
  p.x[1 * 40 + 17] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> got = run(isa(), p, false);
  for (int n = 0; n < 3; ++n)
    for (int o = 0; o < 21; ++o) EXPECT_EQ(std::isnan(got[size_t(n) * 21 + o]), n == 1) << "n " << n << " o " << o;
}

// The threads split the output rows, and every output is computed by one thread in a fixed order:
// one thread, two threads and a call from inside a parallel region give the same bits. The sgemm
// engine hands the product to OpenBLAS, whose split depends on the CPU: on an AVX2-only EPYC
// (2026-11-27) one and two threads differed in the last bits at N = 7 and 100, so there it must
// agree to float rounding (1e-6 relative), not bit for bit.
TEST_P(GemmBf16Path, SameBitsWhateverTheThreads) {
  const int threads = omp_get_max_threads();
  for (const int N : {1, 7, 100}) {
    const Problem p = make_problem(N, 576, 1536, 9);
    for (const Engine engine : kEngines) {
      SCOPED_TRACE("N " + std::to_string(N) + " " + engine_name(engine));
      const std::vector<float> two = run(isa(), p, false, engine);
      omp_set_num_threads(1);
      const std::vector<float> one = run(isa(), p, false, engine);
      omp_set_num_threads(std::max(threads, 2));
      std::vector<float> nested;
#pragma omp parallel num_threads(2)
      {
#pragma omp single
        nested = run(isa(), p, false, engine);
      }
      omp_set_num_threads(threads);
      if (engine == Engine::Sgemm) {
        for (const std::vector<float>* other : {&one, static_cast<const std::vector<float>*>(&nested)}) {
          ASSERT_EQ(other->size(), two.size());
          double diff = 0, norm = 0;
          for (size_t i = 0; i < two.size(); ++i)
            diff += std::pow(double((*other)[i]) - two[i], 2), norm += std::pow(double(two[i]), 2);
          EXPECT_LE(std::sqrt(diff), 1e-6 * std::sqrt(norm));
        }
        continue;
      }
      EXPECT_EQ(one, two);
      EXPECT_EQ(nested, two);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, GemmBf16Path, ::testing::ValuesIn(kAllIsas),
                         [](const ::testing::TestParamInfo<CpuIsa>& info) {
                           return std::string(cpu::cpu_isa_name(info.param));
                         });

// Every path this CPU can run agrees with Generic within the looser path's bound.
TEST(GemmBf16, PathsAgree) {
  const Problem p = make_problem(5, 1536, 200, 21);
  const Reference ref = reference(p, false);
  const std::vector<float> generic = run(CpuIsa::Generic, p, false);
  for (const CpuIsa isa : kAllIsas) {
    if (!cpu::cpu_isa_supported(isa)) continue;
    const std::vector<float> got = run(isa, p, false);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::fabs(double(got[i]) - generic[i]) / ref.scale[i]);
    EXPECT_LE(worst, isa >= CpuIsa::Avx512Bf16 ? kBf16InputsRel : 2 * kFp32Rel) << cpu::cpu_isa_name(isa);
  }
}

// ---- the choice of path (kernels/cpu/isa.h) ------------------------------------------------------

TEST(CpuIsa, ResolveHonoursTheVariableAndFallsBackWithAWarning) {
  std::string warning;
  EXPECT_EQ(cpu::resolve_cpu_isa(nullptr, CpuIsa::Avx512Bf16, &warning), CpuIsa::Avx512Bf16);
  EXPECT_EQ(warning, "");
  EXPECT_EQ(cpu::resolve_cpu_isa("", CpuIsa::Avx2, &warning), CpuIsa::Avx2);
  EXPECT_EQ(cpu::resolve_cpu_isa("generic", CpuIsa::Avx512Bf16, &warning), CpuIsa::Generic);
  EXPECT_EQ(cpu::resolve_cpu_isa("avx2", CpuIsa::Avx512Bf16, &warning), CpuIsa::Avx2);
  EXPECT_EQ(warning, "");
  EXPECT_EQ(cpu::resolve_cpu_isa("avx512bf16", CpuIsa::Avx2, &warning), CpuIsa::Avx2);
  EXPECT_EQ(warning, "FTX_CPU_ISA=avx512bf16: this CPU cannot run it; using avx2");
  EXPECT_EQ(cpu::resolve_cpu_isa("amx", CpuIsa::Avx512Bf16, &warning), CpuIsa::Avx512Bf16);
  EXPECT_EQ(warning, "FTX_CPU_ISA=amx: this CPU cannot run it; using avx512bf16");
  EXPECT_EQ(cpu::resolve_cpu_isa("amx", CpuIsa::Amx, &warning), CpuIsa::Amx);
  EXPECT_EQ(warning, "");
  EXPECT_EQ(cpu::resolve_cpu_isa("avx512", CpuIsa::Generic, &warning), CpuIsa::Generic);
  EXPECT_EQ(warning, "FTX_CPU_ISA=avx512: not one of generic, avx2, avx512bf16, amx; using generic");
}

TEST(CpuIsa, TheVariableAndTheHookChooseThePathOfGemmBf16w) {
  const Problem p = make_problem(2, 300, 50, 31);
  std::vector<float> out(size_t(p.N) * p.OC);
  auto gemm = [&] {
    cpu::gemm_bf16w(out.data(), p.x.data(), p.w.data(), p.N, p.IC, p.OC, false);
    return out;
  };
  ::setenv("FTX_CPU_ISA", "generic", 1);
  cpu::reset_cpu_isa_for_tests();
  EXPECT_EQ(cpu::cpu_isa(), CpuIsa::Generic);
  EXPECT_EQ(gemm(), run(CpuIsa::Generic, p, false));

  ::setenv("FTX_CPU_ISA", "no-such-path", 1);
  cpu::reset_cpu_isa_for_tests();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cpu::cpu_isa(), cpu::best_cpu_isa());
  (void)cpu::cpu_isa();  // the warning comes once
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            std::string("ftx: warning: FTX_CPU_ISA=no-such-path: not one of generic, avx2, avx512bf16, amx; using ") +
                cpu::cpu_isa_name(cpu::best_cpu_isa()) + "\n");

  ::unsetenv("FTX_CPU_ISA");
  for (const CpuIsa isa : kAllIsas) {
    if (!cpu::cpu_isa_supported(isa)) continue;
    cpu::set_cpu_isa_for_tests(isa);
    EXPECT_EQ(cpu::cpu_isa(), isa);
    EXPECT_EQ(gemm(), run(isa, p, false)) << cpu::cpu_isa_name(isa);
  }
  cpu::reset_cpu_isa_for_tests();
  EXPECT_EQ(cpu::cpu_isa(), cpu::best_cpu_isa());
}

// The CPU backend's matmul on a bf16 weight is gemm_bf16w on the path in use.
TEST(CpuIsa, TheBackendUsesGemmBf16w) {
  const Problem p = make_problem(3, 200, 70, 41);
  std::vector<float> out = p.base;
  make_cpu_backend()->matmul_forward(out.data(), p.x.data(), bf16_weight(p.w.data()), p.N, p.IC, p.OC, true);
  EXPECT_EQ(out, run(cpu::cpu_isa(), p, true));
}

// ---- read bandwidth ------------------------------------------------------------------------------

TEST(ReadBandwidth, ASmallBufferGivesAPositiveFiniteFigure) {
  const BandwidthMeasure m = measure_read_bandwidth(1 << 20, 2, 0.01);
  EXPECT_EQ(m.buffer_bytes, size_t(1) << 20);
  EXPECT_GE(m.threads, 1);
  EXPECT_LE(m.threads, 2);
  EXPECT_GT(m.seconds, 0.0);
  EXPECT_TRUE(std::isfinite(m.bytes_per_s));
  EXPECT_GT(m.bytes_per_s, 1e6);  // any machine reads a cached megabyte faster than 1 MB/s
  EXPECT_EQ(measure_read_bandwidth(1, 1, 0.0).buffer_bytes, 64u);  // at least one line
}

}  // namespace
