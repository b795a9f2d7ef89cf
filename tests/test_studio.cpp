// ftx-studio end to end, under Xvfb: every view opens on a fixture store and its screenshot shows
// content (not a blank window), the Generations and Latent views show what they compute, the
// event loop stays responsive while a run trains, and bad input (a newer schema, a locked store,
// deleted checkpoint files, bad arguments) gives a message, not a crash.
// Skipped when xvfb-run is missing (it is in resources/setup.sh's packages).
#include <QColor>
#include <QImage>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "test_util.h"
#include "tests/real_model.h"

namespace ftx {
namespace {

constexpr int kShotSeconds = 6;  // long enough for llvmpipe's first frames and the worker
// The issue's bound on the UI event loop while a run trains. On 2 cores under Xvfb (llvmpipe) we
// measure 3-8 ms (README, "The studio"); a UI thread that waits on compute or on the store, or a
// window composed through OpenGL on every repaint (65-105 ms), fails it.
constexpr double kMaxLatencyMs = 50.0;

bool have_xvfb() { return std::system("command -v xvfb-run >/dev/null 2>&1") == 0; }

// Runs ftx-studio under xvfb-run with `args`; returns the outcome (exit code, output).
// -noreset: without it Xvfb resets when the studio disconnects and signals xvfb-run (SIGUSR1),
// which can land while xvfb-run removes its temporary folder; dash then reports that removal as
// failed and xvfb-run exits 5 in place of the studio's own code (seen in CI on a studio refusing
// --after 'soon').
test::Outcome studio(const std::vector<std::string>& args) {
  std::vector<std::string> argv{
      "/usr/bin/timeout", "120", "/usr/bin/xvfb-run", "-a", "-s", "-screen 0 1400x900x24 -noreset", FTX_STUDIO_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  // A private settings folder: no window layout or store path from the user's own launches.
  static test::TempDir config("ftx_studio_config_");
  test::Outcome o =
      test::run_child(argv, {"XDG_RUNTIME_DIR=" + config.path(), "XDG_CONFIG_HOME=" + config.path()}, config.path());
  o.out += o.err;  // the tests read both streams
  return o;
}

struct ImageStats {
  int width = 0, height = 0;
  size_t colours = 0;    // distinct RGB values
  double saturated = 0;  // fraction of clearly coloured pixels (HSV saturation and value > 0.35)
};

ImageStats stats_of(const std::string& path) {
  QImage img(QString::fromStdString(path));
  ImageStats s;
  if (img.isNull()) return s;
  s.width = img.width(), s.height = img.height();
  std::set<QRgb> colours;
  size_t sat = 0;
  for (int y = 0; y < img.height(); y += 2)
    for (int x = 0; x < img.width(); x += 2) {
      const QColor c = img.pixelColor(x, y);
      colours.insert(c.rgb());
      sat += c.hsvSaturationF() > 0.35 && c.valueF() > 0.35;
    }
  s.colours = colours.size();
  s.saturated = double(sat) / (double(img.width() / 2) * (img.height() / 2));
  return s;
}

class StudioTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_xvfb()) return;
    dir_ = new test::TempDir("ftx_studio_");
    auto train = [](std::vector<std::string> extra) {
      std::vector<std::string> a{"train",   "--db", db(),           "--preset", "tiny",
                                 "--batch", "8",    "--eval-every", "0",        "--quiet"};
      a.insert(a.end(), extra.begin(), extra.end());
      test::Outcome o = test::run_child(test::ftx_argv(a), {}, dir_->path());
      ASSERT_EQ(o.code, 0) << o.err;
    };
    train({"--run", "syn-k1_64", "--latent-bits", "8", "--kappa-bits", "0.015625", "--steps", "30"});
    train({"--run", "syn-k1", "--latent-bits", "8", "--kappa-bits", "1", "--steps", "30"});
    train({"--run", "syn-base", "--latent-bits", "0", "--steps", "30"});
    train({"--run", "coin-base", "--dataset", "coinflip", "--latent-bits", "0", "--steps", "60"});
    train({"--run", "coin-free", "--dataset", "coinflip", "--latent-bits", "4", "--steps", "30"});
  }
  static void TearDownTestSuite() { delete dir_; }
  void SetUp() override {
    if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  }
  static std::string db() { return *dir_ / "fx.db"; }
  static std::string out(const std::string& leaf) { return *dir_ / leaf; }
  static test::TempDir* dir_;
};
test::TempDir* StudioTest::dir_ = nullptr;

TEST_F(StudioTest, EveryViewOpensAndItsScreenshotHasContent) {
  for (const char* view : {"runs", "train", "curves", "benchmarks", "generations", "latent", "lessons"}) {
    const std::string png = out(std::string(view) + ".png");
    test::Outcome o =
        studio({"--db", db(), "--view", view, "--screenshot", png, "--after", std::to_string(kShotSeconds)});
    ASSERT_EQ(o.code, 0) << view << ": " << o.out;
    const ImageStats s = stats_of(png);
    EXPECT_GE(s.width, 1000) << view;
    EXPECT_GE(s.colours, 50u) << view << ": the screenshot looks blank";
  }
}

TEST_F(StudioTest, GenerationsAndLatentShowTheirContent) {
  // The empty state of each view (no run with a checkpoint) against the fixture's: the coloured
  // target letters and the heatmap add many clearly coloured pixels.
  test::TempDir empty("ftx_studio_empty_");
  for (const char* view : {"generations", "latent"}) {
    const std::string full = out(std::string("content-") + view + ".png"), none = empty / (std::string(view) + ".png");
    test::Outcome a =
        studio({"--db", db(), "--view", view, "--screenshot", full, "--after", std::to_string(kShotSeconds)});
    test::Outcome b = studio({"--db", empty / "none.db", "--view", view, "--screenshot", none, "--after", "3"});
    ASSERT_EQ(a.code, 0) << a.out;
    ASSERT_EQ(b.code, 0) << b.out;
    EXPECT_NE(a.out.find(std::string(view) + ": shown"), std::string::npos) << a.out;
    EXPECT_GT(stats_of(full).saturated, stats_of(none).saturated + 0.01) << view;
  }
}

TEST_F(StudioTest, EventLoopStaysResponsiveWhileTraining) {
  const std::string fresh = out("resp.db");
  test::Outcome o = studio({"--db", fresh, "--view", "curves", "--train", "resp", "--steps", "100000", "--latency",
                            "--screenshot", out("resp.png"), "--after", "12"});
  ASSERT_EQ(o.code, 0) << o.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(o.out, m, std::regex("worst latency: ([0-9.]+) ms over ([0-9]+) steps"))) << o.out;
  EXPECT_LT(std::stod(m[1]), kMaxLatencyMs) << o.out;
  EXPECT_GE(std::stoi(m[2]), 5) << "the run must have trained meanwhile: " << o.out;
}

TEST_F(StudioTest, BadInputIsAMessageNotACrash) {
  // Unknown view, bad --after: one-line errors and a non-zero exit.
  test::Outcome v = studio({"--db", db(), "--view", "nope"});
  EXPECT_EQ(v.code, 1);
  EXPECT_NE(v.out.find("--view 'nope'"), std::string::npos) << v.out;
  test::Outcome a = studio({"--db", db(), "--after", "soon"});
  EXPECT_EQ(a.code, 1);

  // A store from a newer schema: the window opens and says so in the status bar (no crash).
  const std::string newer = out("newer.db");
  std::filesystem::copy_file(db(), newer);
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(newer.c_str(), &h), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(h, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(h);
  test::Outcome n = studio({"--db", newer, "--view", "runs", "--screenshot", out("newer.png"), "--after", "3"});
  EXPECT_EQ(n.code, 0) << n.out;
  EXPECT_NE(n.out.find("newer"), std::string::npos) << "the status message is echoed: " << n.out;

  // Deleted checkpoint files: Generations reports the missing file, the store is untouched.
  // The store's checkpoint paths are relative to its folder: a copy elsewhere has no files.
  std::filesystem::create_directories(out("gone"));
  const std::string gone = out("gone/fx.db");
  std::filesystem::copy_file(db(), gone);
  test::Outcome g = studio({"--db", gone, "--view", "generations", "--screenshot", out("gone.png"), "--after", "4"});
  EXPECT_EQ(g.code, 0) << g.out;
  EXPECT_NE(g.out.find("generations: "), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("gone/fx.checkpoints"), std::string::npos) << g.out;
}

// Pixels of exactly this colour (the Generations notices' backgrounds, views/text_generations_view.cpp).
size_t pixels_of(const std::string& path, QRgb rgb) {
  QImage img(QString::fromStdString(path));
  size_t n = 0;
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width(); ++x) n += (img.pixel(x, y) & 0xFFFFFF) == (rgb & 0xFFFFFF);
  return n;
}

constexpr QRgb kNoZNotice = qRgb(0xff, 0xf4, 0xe6);   // "This model has no latent Z (plain decoder) ..."
constexpr QRgb kFreeNotice = qRgb(0xeb, 0xfb, 0xee);  // "Free Transformer (H = 8 ..."
constexpr size_t kNoticePixels = 5000;                // a notice line across the view: ~30 x 800 px

// A real model file opened from the command line: loaded off the UI thread, listed, generating a
// chat answer while the event loop stays within its budget; a plain decoder says it has no Z; a
// random Free Transformer on its tokenizer shows its groups and its latent over real tokens.
TEST(StudioRealModel, OpensGeneratesAndSaysItHasNoZ) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  const std::string model = test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(model);
  test::TempDir dir("ftx_studio_model_");
  const std::string png = dir / "smollm2.png";
  test::Outcome o = studio({"--db", dir / "none.db", "--open", model, "--prompt", "What is the capital of France?",
                            "--view", "generations", "--latency", "--screenshot", png, "--after", "25"});
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("models: opened"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("plain decoder)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("models: loaded"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("has no latent Z (plain decoder)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("generations: generated"), std::string::npos) << o.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(o.out, m, std::regex("worst latency: ([0-9.]+) ms"))) << o.out;
  EXPECT_LT(std::stod(m[1]), kMaxLatencyMs) << "generation runs off the UI thread: " << o.out;
  EXPECT_GE(stats_of(png).colours, 50u);
  EXPECT_GT(pixels_of(png, kNoZNotice), kNoticePixels) << "the no-Z notice is on screen";

  const std::string ft = dir / "random-ft.png";
  test::Outcome f = studio({"--db", dir / "none.db", "--open", model, "--random-ft", "--prompt", "Tell me a story.",
                            "--view", "generations+latent", "--screenshot", ft, "--after", "30"});
  ASSERT_EQ(f.code, 0) << f.out;
  EXPECT_NE(f.out.find("Free Transformer)"), std::string::npos) << f.out;
  EXPECT_NE(f.out.find("generations: generated"), std::string::npos) << f.out;
  EXPECT_TRUE(std::regex_search(f.out, std::regex("latent: shown [0-9]+ positions x 8 bits of model 'random")))
      << f.out;
  EXPECT_GT(pixels_of(ft, kFreeNotice), kNoticePixels) << "the Free Transformer notice is on screen";
  EXPECT_GT(stats_of(ft).saturated, 0.02) << "the heatmap";
}

TEST(StudioRealModel, AFileThatIsNotAModelIsAMessageNotACrash) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  test::TempDir dir("ftx_studio_model_");
  const std::string bogus = dir / "bogus.gguf";
  ASSERT_TRUE(test::write_file(bogus, "GGUF but not really"));
  test::Outcome o = studio({"--db", dir / "none.db", "--open", bogus, "--open", dir / "missing", "--screenshot",
                            dir / "bad.png", "--after", "3"});
  EXPECT_EQ(o.code, 0) << o.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(o.out, m, std::regex(R"(models: [^\n]*bogus\.gguf)"))) << o.out;
  ASSERT_TRUE(std::regex_search(o.out, m, std::regex(R"(models: [^\n]*missing)"))) << o.out;
  // Refused before any window: no display needed.
  test::Outcome r = test::run_child({FTX_STUDIO_BINARY, "--db", dir / "none.db", "--random-ft"},
                                    {"QT_QPA_PLATFORM=offscreen", "XDG_CONFIG_HOME=" + dir.path()}, dir.path());
  r.out += r.err;
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("need --open"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ftx
