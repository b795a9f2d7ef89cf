// measure_read_bandwidth (kernels/membw.h).
#include "kernels/membw.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>

#include "kernels/base/assert.h"

namespace ftx {
namespace {

constexpr size_t kLine = 64;
constexpr size_t kWordsPerLine = kLine / sizeof(uint64_t);

// Each thread reads its range as this many equal parts side by side, one line of each in turn: on
// the development machine 4 streams per thread read 33 GB/s where one read 25 (the bf16 GEMV reads
// 4 weight rows side by side too).
constexpr size_t kStreams = 4;

// Sum of the lines [begin, end) (in words), kStreams parts side by side, with 8 independent
// accumulators (integer adds: the compiler may reorder them, so the loop vectorises into the widest
// loads the build allows).
uint64_t sum_words(const uint64_t* p, size_t begin, size_t end) {
  uint64_t acc[kWordsPerLine] = {};
  const size_t per = (end - begin) / kWordsPerLine / kStreams;  // lines per stream
  for (size_t l = 0; l < per; ++l) {
    for (size_t s = 0; s < kStreams; ++s) {
      const uint64_t* q = p + begin + (s * per + l) * kWordsPerLine;
      for (size_t j = 0; j < kWordsPerLine; ++j) acc[j] += q[j];
    }
  }
  for (size_t i = begin + kStreams * per * kWordsPerLine; i < end; ++i) acc[0] += p[i];  // the lines left over
  uint64_t s = 0;
  for (const uint64_t a : acc) s += a;
  return s;
}

// [begin, end) in words of part t of nt (whole lines).
void part(size_t lines, int nt, int t, size_t* begin, size_t* end) {
  *begin = lines * size_t(t) / size_t(nt) * kWordsPerLine;
  *end = lines * size_t(t + 1) / size_t(nt) * kWordsPerLine;
}

}  // namespace

BandwidthMeasure measure_read_bandwidth(size_t buffer_bytes, int threads, double min_seconds) {
  const size_t lines = std::max<size_t>(1, buffer_bytes / kLine);
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  auto* buf = static_cast<uint64_t*>(std::aligned_alloc(kLine, lines * kLine));
  FT_ASSERT(buf != nullptr, "measure_read_bandwidth: cannot allocate %zu bytes", lines * kLine);
  int used = 1;  // threads OpenMP gave
#pragma omp parallel num_threads(nt)
  {
#pragma omp single
    used = omp_get_num_threads();
    size_t b, e;
    part(lines, omp_get_num_threads(), omp_get_thread_num(), &b, &e);
    for (size_t i = b; i < e; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
  }
  using Clock = std::chrono::steady_clock;
  double best = 1e300, spent = 0;
  volatile uint64_t sink = 0;
  for (int pass = 0; pass < 4 || spent < min_seconds; ++pass) {
    const auto t0 = Clock::now();
    uint64_t total = 0;
#pragma omp parallel num_threads(nt) reduction(+ : total)
    {
      size_t b, e;
      part(lines, omp_get_num_threads(), omp_get_thread_num(), &b, &e);
      total += sum_words(buf, b, e);
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    sink = sink + total;
    if (pass > 0) best = std::min(best, s), spent += s;  // pass 0 warms up
  }
  std::free(buf);
  (void)sink;
  return BandwidthMeasure{double(lines * kLine) / best, lines * kLine, used, best};
}

}  // namespace ftx
