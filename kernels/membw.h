// The machine's memory read bandwidth, measured: the limit that decode on bf16 weights is judged
// against (`ftx bench generate` prints it beside the bytes of weights read per second).
//
// One pass reads the whole buffer once (a sum of 64-bit words with several independent
// accumulators, which the compiler turns into wide loads), split into contiguous ranges over
// `threads` OpenMP threads, each reading its range as 4 parts side by side (more lines in flight
// than one stream, as the GEMV's 4 weight rows). The buffer is written first, by the same threads and split, so that
// its pages exist (and sit near the threads that read them); one pass warms up, then passes repeat
// until min_seconds have gone by (at least three), and the fastest counts. For the DRAM figure
// pass a buffer far larger than the last-level cache (1 GiB); a small one measures a cache.
//
// Deliberately not here: write or copy bandwidth, latency, NUMA placement, non-temporal loads.
#pragma once
#include <cstddef>

namespace ftx {

struct BandwidthMeasure {
  double bytes_per_s = 0;   // buffer_bytes / the fastest pass
  size_t buffer_bytes = 0;  // what was read per pass (rounded down to whole 64-byte lines)
  int threads = 0;          // threads that read
  double seconds = 0;       // the fastest pass
};

// Read bandwidth over a fresh buffer of about buffer_bytes (at least one 64-byte line), with
// `threads` threads (<= 0: OpenMP's default), repeating for about min_seconds.
BandwidthMeasure measure_read_bandwidth(size_t buffer_bytes, int threads, double min_seconds);

}  // namespace ftx
