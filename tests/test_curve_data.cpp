// The Curves view's data logic: min/max downsampling (extremes, edges, size bound, NaN, range
// clipping), the debiased EMA against a direct weighted-sum formula, the log-axis filter, the
// hover look-up, MetricCache (resume truncation, keys, drop_run, 1e6 appends), and CurvesView
// offscreen: a cache of 3 runs gives a PNG with the runs' colours and a CSV with every row.
#include <gtest/gtest.h>

#include <QApplication>
#include <QDir>
#include <QFile>
#include <QImage>
#include <QTemporaryDir>
#include <QTextStream>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "views/curve_data.h"
#include "views/curves_view.h"
#include "views/metric_cache.h"

using namespace ftx;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// The EMA and the direct formula sum the same terms in different orders; 1e-12 relative is
// far above double rounding over a few hundred terms and far below any real mistake.
constexpr double kEmaRelTol = 1e-12;
// A pixel "has a run's colour" when each channel is within this of it (antialiasing blends edges).
constexpr int kColourTol = 40;
constexpr int kMinKappaPixels = 100;     // one dashed line across one chart: about 240
constexpr int kMinColouredPixels = 300;  // curves over a chart are thousands of pixels; the legend's
                                         // swatch (counted out below) is about a hundred

std::vector<double> iota_x(size_t n) {
  std::vector<double> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<double>(i);
  return x;
}

MetricRow row(int64_t step, const std::string& key, double value) { return MetricRow{step, key, value, 0.0}; }

bool contains_point(const Series& s, double x, double y) {
  for (size_t i = 0; i < s.x.size(); ++i) {
    if (s.x[i] == x && s.y[i] == y) return true;
  }
  return false;
}

}  // namespace

TEST(Downsample, KeepsExtremesEndpointsAndBound) {
  const size_t n = 100000;
  std::vector<double> x = iota_x(n), y(n);
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0.0, 1.0);
  for (size_t i = 0; i < n; ++i) y[i] = noise(rng);
  y[31337] = 50.0;   // a one-step spike
  y[77777] = -40.0;  // and a dip
  const int buckets = 100;
  const Series s = downsample_minmax(x, y, 0, static_cast<double>(n - 1), buckets);
  EXPECT_LE(s.x.size(), static_cast<size_t>(4 * buckets + 2));
  EXPECT_GT(s.x.size(), static_cast<size_t>(buckets));  // at least first and last of each bucket
  EXPECT_TRUE(contains_point(s, 31337, 50.0));
  EXPECT_TRUE(contains_point(s, 77777, -40.0));
  EXPECT_EQ(s.x.front(), 0);
  EXPECT_EQ(s.x.back(), static_cast<double>(n - 1));
  for (size_t i = 1; i < s.x.size(); ++i) ASSERT_LT(s.x[i - 1], s.x[i]) << "x must stay ascending";
  for (size_t i = 0; i < s.x.size(); ++i) ASSERT_EQ(s.y[i], y[static_cast<size_t>(s.x[i])]) << "points are copied";
}

TEST(Downsample, EveryBucketKeepsItsMinAndMax) {
  const size_t n = 10000;
  std::vector<double> x = iota_x(n), y(n);
  for (size_t i = 0; i < n; ++i) y[i] = std::sin(0.37 * static_cast<double>(i)) * (1 + i % 13);
  const int buckets = 50;  // buckets of 10000 / 50 = 200 points, none of them on a boundary
  const Series s = downsample_minmax(x, y, 0, static_cast<double>(n), buckets);
  for (int b = 0; b < buckets; ++b) {
    size_t lo = b * 200, hi = lo;
    for (size_t i = b * 200; i < (b + 1) * 200u; ++i) {
      if (y[i] < y[lo]) lo = i;
      if (y[i] > y[hi]) hi = i;
    }
    EXPECT_TRUE(contains_point(s, x[lo], y[lo])) << "bucket " << b;
    EXPECT_TRUE(contains_point(s, x[hi], y[hi])) << "bucket " << b;
  }
}

TEST(Downsample, ClipsToRangeWithOneEdgePointEachSide) {
  const size_t n = 10000;
  std::vector<double> x = iota_x(n), y(n, 1.0);
  y[4000] = 9.0;  // outside the range: must not appear
  const Series s = downsample_minmax(x, y, 5000.5, 6000.5, 10);
  ASSERT_GE(s.x.size(), 3u);
  EXPECT_EQ(s.x.front(), 5000);  // the point left of x_lo
  EXPECT_EQ(s.x.back(), 6001);   // the point right of x_hi
  for (size_t i = 1; i + 1 < s.x.size(); ++i) {
    EXPECT_GE(s.x[i], 5000.5);
    EXPECT_LE(s.x[i], 6000.5);
  }
  EXPECT_FALSE(contains_point(s, 4000, 9.0));
}

TEST(Downsample, SmallRangePassesThroughAndSkipsNaN) {
  std::vector<double> x = iota_x(10), y = {1, kNaN, 3, 4, kNaN, 6, 7, 8, 9, kNaN};
  const Series s = downsample_minmax(x, y, 0, 9, 100);
  EXPECT_EQ(s.x, (std::vector<double>{0, 2, 3, 5, 6, 7, 8}));
  // The edge point skips NaN too: left of [4, 4] the nearest finite is x=3, right of it x=5.
  const Series edge = downsample_minmax(x, y, 4, 4, 100);
  EXPECT_EQ(edge.x, (std::vector<double>{3, 5}));
  std::vector<double> big_x = iota_x(1000), big_y(1000, kNaN);
  big_y[500] = 2.0;
  const Series one = downsample_minmax(big_x, big_y, 0, 999, 10);
  EXPECT_EQ(one.x, (std::vector<double>{500}));
  EXPECT_TRUE(downsample_minmax(x, y, 5, 4, 10).x.empty());
  EXPECT_TRUE(downsample_minmax({}, {}, 0, 1, 10).x.empty());
}

TEST(Ema, MatchesDirectWeightedSum) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-2.0, 5.0);
  std::vector<double> y(300);
  for (double& v : y) v = u(rng);
  for (double alpha : {0.0, 0.3, 0.6, 0.95}) {
    const std::vector<double> s = ema(y, alpha);
    for (size_t t = 0; t < y.size(); ++t) {
      // sum_k (1 - a) a^(t-k) y_k / sum_k (1 - a) a^(t-k): the debiased EMA as a weighted mean.
      double num = 0, den = 0;
      for (size_t k = 0; k <= t; ++k) {
        const double w = std::pow(alpha, static_cast<double>(t - k));
        num += w * y[k];
        den += w;
      }
      ASSERT_NEAR(s[t], num / den, kEmaRelTol * (1 + std::abs(num / den))) << "alpha " << alpha << " t " << t;
    }
  }
}

TEST(Ema, DebiasedStartAndNaN) {
  const std::vector<double> s = ema({4.0, kNaN, 2.0}, 0.5);
  EXPECT_EQ(s[0], 4.0);  // the first output equals the first input
  EXPECT_TRUE(std::isnan(s[1]));
  // NaN is skipped: the second finite point is the second term, (0.5*0.5*4 + 0.5*2) / (1 - 0.25).
  EXPECT_DOUBLE_EQ(s[2], (0.25 * 4.0 + 0.5 * 2.0) / 0.75);
  const std::vector<double> lead = ema({kNaN, 7.0}, 0.9);
  EXPECT_TRUE(std::isnan(lead[0]));
  EXPECT_DOUBLE_EQ(lead[1], 7.0);
  const std::vector<double> raw = ema({1.0, 5.0, -3.0}, 0.0);
  EXPECT_EQ(raw, (std::vector<double>{1.0, 5.0, -3.0}));
  const std::vector<double> flat = ema(std::vector<double>(50, 3.0), 1.0);  // clamped, no 0/0
  for (double v : flat) EXPECT_NEAR(v, 3.0, kEmaRelTol * 3);
}

TEST(LogFilter, DropsNonPositiveAndCountsThem) {
  Series s{{0, 1, 2, 3, 4, 5}, {1.0, 0.0, -2.0, kNaN, 0.5, 3.0}};
  EXPECT_EQ(count_nonpositive(s.y), 2u);
  EXPECT_EQ(drop_nonpositive(s), 2u);
  EXPECT_EQ(s.x, (std::vector<double>{0, 4, 5}));
  EXPECT_EQ(s.y, (std::vector<double>{1.0, 0.5, 3.0}));
}

TEST(NearestPoint, BinarySearchAndNaNNeighbours) {
  const std::vector<double> x = {0, 10, 20, 30, 40};
  const std::vector<double> y = {1, 2, kNaN, 4, 5};
  EXPECT_EQ(nearest_point(x, y, -5), 0u);
  EXPECT_EQ(nearest_point(x, y, 14), 1u);
  EXPECT_EQ(nearest_point(x, y, 15), 1u);  // a tie goes left
  EXPECT_EQ(nearest_point(x, y, 21), 3u);  // 20 is NaN: 10 is 11 away, 30 is 9 away
  EXPECT_EQ(nearest_point(x, y, 19), 1u);  // and the other way round
  EXPECT_EQ(nearest_point(x, y, 26), 3u);
  EXPECT_EQ(nearest_point(x, y, 1000), 4u);
  EXPECT_FALSE(nearest_point(x, std::vector<double>(5, kNaN), 3).has_value());
  EXPECT_FALSE(nearest_point({}, {}, 3).has_value());
}

TEST(MetricCache, GroupsKeysAndTruncatesOnResume) {
  MetricCache cache;
  cache.append(1, {row(1, "train/ce", 5), row(1, "lr", 0.1), row(2, "train/ce", 4), row(3, "train/ce", 3),
                   row(2, "lr", 0.2), row(4, "train/ce", 2)});
  EXPECT_EQ(cache.keys(1), (std::vector<std::string>{"lr", "train/ce"}));
  EXPECT_EQ(cache.total_points(), 6u);
  const uint64_t before = cache.series(1, "lr")->revision;
  // Resumed from step 2: the store dropped steps > 2 and the run re-sends 3 onwards.
  cache.append(1, {row(3, "train/ce", 30), row(4, "train/ce", 20), row(5, "train/ce", 10)});
  const Series* ce = cache.series(1, "train/ce");
  ASSERT_NE(ce, nullptr);
  EXPECT_EQ(ce->x, (std::vector<double>{1, 2, 3, 4, 5}));
  EXPECT_EQ(ce->y, (std::vector<double>{5, 4, 30, 20, 10}));
  EXPECT_EQ(cache.total_points(), 7u);
  EXPECT_EQ(cache.series(1, "lr")->revision, before) << "an untouched series keeps its revision";
  EXPECT_GT(ce->revision, before);
  cache.append(1, {row(1, "train/ce", 9)});  // back to the start: everything from step 1 goes
  EXPECT_EQ(cache.series(1, "train/ce")->x, (std::vector<double>{1}));
  EXPECT_EQ(cache.total_points(), 3u);
  EXPECT_EQ(cache.series(1, "missing"), nullptr);
  EXPECT_EQ(cache.series(2, "train/ce"), nullptr);
}

TEST(MetricCache, DropRunAndRunIds) {
  MetricCache cache;
  cache.append(3, {row(1, "a", 1), row(1, "b", 2)});
  cache.append(1, {row(1, "a", 1)});
  EXPECT_EQ(cache.run_ids(), (std::vector<int64_t>{1, 3}));
  const uint64_t rev = cache.revision();
  cache.drop_run(3);
  EXPECT_GT(cache.revision(), rev);
  EXPECT_EQ(cache.run_ids(), (std::vector<int64_t>{1}));
  EXPECT_TRUE(cache.keys(3).empty());
  EXPECT_EQ(cache.total_points(), 1u);
  cache.drop_run(42);  // unknown: nothing happens
  EXPECT_EQ(cache.total_points(), 1u);
}

TEST(MetricCache, MillionAppendsInBatches) {
  MetricCache cache;
  const int64_t n = 1000000, batch = 1000;
  std::vector<MetricRow> rows;
  for (int64_t start = 0; start < n; start += batch) {
    rows.clear();
    for (int64_t s = start; s < start + batch; ++s) rows.push_back(row(s, "train/ce", static_cast<double>(s) * 0.5));
    cache.append(7, rows);
  }
  const Series* s = cache.series(7, "train/ce");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->x.size(), static_cast<size_t>(n));
  EXPECT_EQ(cache.total_points(), static_cast<size_t>(n));
  EXPECT_EQ(s->x[123456], 123456.0);
  EXPECT_EQ(s->y[n - 1], static_cast<double>(n - 1) * 0.5);
  const Series d = downsample_minmax(s->x, s->y, 0, static_cast<double>(n), 1000);
  EXPECT_LE(d.x.size(), 4002u);
  EXPECT_EQ(d.y.back(), static_cast<double>(n - 1) * 0.5);
}

namespace {

// Three runs of 2000 steps with train/ce, train/kl, kappa, lr and sparse val/ce_prior; returns
// how many rows went into the cache.
size_t fill_three_runs(MetricCache& cache, const std::vector<CurveRun>& runs) {
  size_t total = 0;
  for (const CurveRun& r : runs) {
    const double id = static_cast<double>(r.id);
    std::vector<MetricRow> rows;
    for (int64_t step = 1; step <= 2000; ++step) {
      const double t = static_cast<double>(step);
      rows.push_back(row(step, "train/ce", 3.0 / std::sqrt(t) + 0.3 * id + 0.05 * std::sin(t)));
      rows.push_back(row(step, "train/kl", 0.0866 * id * (1 + 0.2 * std::sin(t / 50))));
      rows.push_back(row(step, "kappa", 0.0866 * id));
      rows.push_back(row(step, "lr", 3e-4 * std::min(1.0, t / 200)));
      if (step % 100 == 0) rows.push_back(row(step, "val/ce_prior", 3.2 / std::sqrt(t) + 0.3 * id));
    }
    total += rows.size();
    cache.append(r.id, rows);
  }
  return total;
}

// Pixels of `colour` below the top tenth of the image (where the run legend's swatches are).
int coloured_pixels(const QImage& image, const QColor& colour) {
  int hits = 0;
  for (int yy = image.height() / 10; yy < image.height(); ++yy) {
    for (int xx = 0; xx < image.width(); ++xx) {
      const QColor c = image.pixelColor(xx, yy);
      hits += std::abs(c.red() - colour.red()) < kColourTol && std::abs(c.green() - colour.green()) < kColourTol &&
              std::abs(c.blue() - colour.blue()) < kColourTol;
    }
  }
  return hits;
}

}  // namespace

// CurvesView offscreen: a PNG that shows the three runs' colours, and a CSV with every cached row.
TEST(CurvesView, SavesPngAndCsvOffscreen) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  static int argc = 1;
  static char name[] = "test_curve_data";
  static char* argv[] = {name, nullptr};
  QApplication app(argc, argv);
  const std::vector<CurveRun> runs = {{1, "kappa 1/8 bit", QColor(220, 30, 30)},
                                      {2, "kappa 1 bit", QColor(30, 30, 220)},
                                      {3, "baseline", QColor(20, 160, 20)}};
  MetricCache cache;
  const size_t rows_total = fill_three_runs(cache, runs);
  CurvesView view(&cache);
  view.resize(1500, 900);
  view.set_runs(runs);
  view.set_events(2, {{500, 0.0866}, {1200, 0.1733}});
  view.show();
  QApplication::processEvents();
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  const QString png = dir.filePath("curves.png"), csv = dir.filePath("curves.csv");
  ASSERT_TRUE(view.save_png(png));
  if (const char* keep = std::getenv("FTX_CURVES_PNG")) QFile::copy(png, keep);  // for a look by eye
  const QImage image(png);
  ASSERT_FALSE(image.isNull());
  for (const CurveRun& r : runs) EXPECT_GE(coloured_pixels(image, r.color), kMinColouredPixels) << r.name.toStdString();
  EXPECT_LT(coloured_pixels(image, QColor(230, 0, 230)), kMinColouredPixels) << "control: a colour no run has";

  ASSERT_TRUE(view.save_csv(csv));
  QFile f(csv);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly | QIODevice::Text));
  const QStringList lines = QTextStream(&f).readAll().split('\n', Qt::SkipEmptyParts);
  ASSERT_EQ(static_cast<size_t>(lines.size()), rows_total + 1);
  EXPECT_EQ(lines[0], "run,key,step,value");
  EXPECT_TRUE(lines.contains("baseline,kappa,7," + QString::number(0.0866 * 3, 'g', 17)));
  EXPECT_TRUE(lines.contains("kappa 1 bit,val/ce_prior,100," + QString::number(3.2 / 10 + 0.3 * 2, 'g', 17)));

  // A plain decoder's kappa (the trainer records one for every run) is not drawn: a run with only
  // kappa rows leaves no pixel of its colour when it has no latent, a line when it has one.
  const QColor plain_colour(240, 150, 0);
  std::vector<MetricRow> kappa_only;
  for (int64_t step = 1; step <= 2000; ++step) kappa_only.push_back(row(step, "kappa", 0.0866));
  cache.append(4, kappa_only);
  for (const bool latent : {false, true}) {
    CurveRun plain{4, "plain decoder", plain_colour};
    plain.latent = latent;
    view.set_runs({plain});
    QApplication::processEvents();
    const QString shot = dir.filePath(latent ? "latent.png" : "plain.png");
    ASSERT_TRUE(view.save_png(shot));
    const int pixels = coloured_pixels(QImage(shot), plain_colour);
    if (latent)
      EXPECT_GE(pixels, kMinKappaPixels) << "a Free Transformer's kappa line";
    else
      EXPECT_EQ(pixels, 0) << "no kappa line for a run without a latent";
  }
}
