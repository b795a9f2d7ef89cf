// Display processing for the Curves view: min/max downsampling of the visible x-range, debiased
// exponential smoothing, the log-axis filter and the hover look-up. Pure C++ on plain vectors
// (x = steps ascending, y = values that may be NaN), so it is tested without a window.
// Deliberately not here: anything Qt, any caching (MetricCache holds the data, CurvesView decides
// when to recompute), and any change to the stored values (these only shape what is drawn).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace ftx {

struct Series {
  std::vector<double> x, y;  // (n,) each; x ascending, y may hold NaN
  uint64_t revision = 0;     // set by MetricCache on every change; 0 for series built elsewhere
};

// At most 4 * buckets + 2 points: per bucket of [x_lo, x_hi] split into `buckets` equal widths,
// the first, minimum, maximum and last point in x order (so one-step spikes stay visible), plus
// the nearest point left of x_lo and right of x_hi so the line reaches the plot's edges. Points
// with a non-finite y are skipped. When the range holds no more than 4 * buckets points they are
// all returned. Empty when x_lo > x_hi or either is NaN.
Series downsample_minmax(const std::vector<double>& x, const std::vector<double>& y, double x_lo, double x_hi,
                         int buckets);

// Debiased EMA, as TensorBoard's smoothing: s_t = alpha s_{t-1} + (1 - alpha) y_t over the finite
// points so far, divided by (1 - alpha^n) with n the number of those points, so the first output
// equals the first input. A non-finite y_t is copied to out[t] and skipped by the average. alpha
// is clamped to [0, kMaxEmaAlpha]: at 1 the correction would divide 0 by 0.
inline constexpr double kMaxEmaAlpha = 0.999;
std::vector<double> ema(const std::vector<double>& y, double alpha);

// For log axes: removes points whose y is <= 0 or NaN in place; returns how many were <= 0 (the
// view says "N points <= 0 hidden"; NaN points are never drawn anyway, so they are not counted).
size_t drop_nonpositive(Series& s);
// How many y are <= 0 (the same count without touching the data).
size_t count_nonpositive(const std::vector<double>& y);

// Index of the point with a finite y whose x is nearest to x_query (binary search, then the
// nearest finite neighbour on each side; a tie goes left). None when there is no finite point.
std::optional<size_t> nearest_point(const std::vector<double>& x, const std::vector<double>& y, double x_query);

}  // namespace ftx
