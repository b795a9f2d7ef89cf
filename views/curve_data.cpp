// Display processing for the Curves view (see curve_data.h). Everything is one pass over the
// visible index range, in double, so a refresh costs O(points in view) per changed series.
#include "views/curve_data.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace ftx {

namespace {

// Appends the distinct indices of one bucket (first, min, max, last) in x order.
void flush_bucket(std::array<size_t, 4> idx, const std::vector<double>& x, const std::vector<double>& y, Series& out) {
  std::sort(idx.begin(), idx.end());
  const size_t* end = std::unique(idx.begin(), idx.end());
  for (const size_t* i = idx.begin(); i != end; ++i) {
    out.x.push_back(x[*i]);
    out.y.push_back(y[*i]);
  }
}

// The min/max pass over [begin, end), which holds more than 4 * buckets points.
void bucket_pass(const std::vector<double>& x, const std::vector<double>& y, size_t begin, size_t end, double x_lo,
                 double x_hi, int buckets, Series& out) {
  const double width = (x_hi - x_lo) / buckets;
  int current = -1;
  std::array<size_t, 4> idx{};  // first, min, max, last of the current bucket
  for (size_t i = begin; i < end; ++i) {
    if (!std::isfinite(y[i])) continue;
    const int b = width > 0 ? std::min(buckets - 1, static_cast<int>((x[i] - x_lo) / width)) : 0;
    if (b != current) {
      if (current >= 0) flush_bucket(idx, x, y, out);
      current = b;
      idx = {i, i, i, i};
      continue;
    }
    if (y[i] < y[idx[1]]) idx[1] = i;
    if (y[i] > y[idx[2]]) idx[2] = i;
    idx[3] = i;
  }
  if (current >= 0) flush_bucket(idx, x, y, out);
}

}  // namespace

Series downsample_minmax(const std::vector<double>& x, const std::vector<double>& y, double x_lo, double x_hi,
                         int buckets) {
  Series out;
  const size_t n = std::min(x.size(), y.size());
  if (n == 0 || !(x_lo <= x_hi)) return out;
  buckets = std::max(buckets, 1);
  const auto first = x.begin();
  const size_t begin = std::lower_bound(first, first + n, x_lo) - first;
  const size_t end = std::upper_bound(first, first + n, x_hi) - first;
  for (size_t i = begin; i-- > 0;) {  // the edge point left of the range
    if (!std::isfinite(y[i])) continue;
    out.x.push_back(x[i]);
    out.y.push_back(y[i]);
    break;
  }
  if (end - begin <= 4 * static_cast<size_t>(buckets)) {
    for (size_t i = begin; i < end; ++i) {
      if (!std::isfinite(y[i])) continue;
      out.x.push_back(x[i]);
      out.y.push_back(y[i]);
    }
  } else {
    bucket_pass(x, y, begin, end, x_lo, x_hi, buckets, out);
  }
  for (size_t i = end; i < n; ++i) {  // the edge point right of the range
    if (!std::isfinite(y[i])) continue;
    out.x.push_back(x[i]);
    out.y.push_back(y[i]);
    break;
  }
  return out;
}

std::vector<double> ema(const std::vector<double>& y, double alpha) {
  alpha = std::clamp(alpha, 0.0, kMaxEmaAlpha);
  std::vector<double> out(y.size());
  double acc = 0.0;        // the biased average, started at 0 as in TensorBoard
  double alpha_pow = 1.0;  // alpha^n over the n finite points so far; underflows harmlessly to 0
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) {
      out[i] = y[i];
      continue;
    }
    acc = alpha * acc + (1.0 - alpha) * y[i];
    alpha_pow *= alpha;
    out[i] = acc / (1.0 - alpha_pow);
  }
  return out;
}

size_t drop_nonpositive(Series& s) {
  size_t dropped = 0, kept = 0;
  const size_t n = std::min(s.x.size(), s.y.size());
  for (size_t i = 0; i < n; ++i) {
    if (s.y[i] <= 0) ++dropped;
    if (!(s.y[i] > 0)) continue;  // also drops NaN
    s.x[kept] = s.x[i];
    s.y[kept] = s.y[i];
    ++kept;
  }
  s.x.resize(kept);
  s.y.resize(kept);
  return dropped;
}

size_t count_nonpositive(const std::vector<double>& y) {
  return static_cast<size_t>(std::count_if(y.begin(), y.end(), [](double v) { return v <= 0; }));
}

std::optional<size_t> nearest_point(const std::vector<double>& x, const std::vector<double>& y, double x_query) {
  const size_t n = std::min(x.size(), y.size());
  if (n == 0 || std::isnan(x_query)) return std::nullopt;
  const size_t pivot = std::lower_bound(x.begin(), x.begin() + n, x_query) - x.begin();
  std::optional<size_t> left, right;
  for (size_t i = pivot; i-- > 0;) {
    if (std::isfinite(y[i])) {
      left = i;
      break;
    }
  }
  for (size_t i = pivot; i < n; ++i) {
    if (std::isfinite(y[i])) {
      right = i;
      break;
    }
  }
  if (!left) return right;
  if (!right) return left;
  return x_query - x[*left] <= x[*right] - x_query ? left : right;
}

}  // namespace ftx
