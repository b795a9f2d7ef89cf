// LatentView in a real window (Xvfb when there is no display): clicking a heatmap cell flips that
// bit of Z_t and clicking it again restores it; "Clear flips" empties the list; a model file's
// inspection has columns as wide as its token labels and flips only when it has a regeneration;
// save_png writes the frame; and the window hosting the panel stays a raster window (an OpenGL-composed one costs
// every repaint in the studio a full-window upload, which broke the 50 ms latency budget).
#include <gtest/gtest.h>
#include <unistd.h>

#include <QApplication>
#include <QElapsedTimer>
#include <QLabel>
#include <QMouseEvent>
#include <QOpenGLWidget>
#include <QTemporaryDir>
#include <QVBoxLayout>
#include <QWindow>
#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

#include "views/latent_view.h"

namespace {

using Flips = std::vector<std::pair<int, int>>;

bool g_no_display = false;
constexpr int kExposeTimeoutMs = 10000;

// A small inspection: T positions, H bits, every probability distinct so the heatmap has colour.
ftx::LatentInspection inspection(int T, int H) {
  ftx::LatentInspection li;
  li.T = T, li.H = H;
  li.text = "E>" + std::string(size_t(T - 1), '_');
  for (int i = 0; i < T * H; ++i) li.bit_probs.push_back(float(i % 17) / 16.0f);
  li.kl.assign(size_t(T), 0.05f);
  for (int t = 0; t < T; ++t) li.codes.push_back(uint32_t(t) & ((1u << H) - 1));
  li.kappa_nats = 0.0866;
  li.regenerated = li.text;
  li.sample_seed = 7;
  return li;
}

class LatentViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (g_no_display) GTEST_SKIP() << "no display and no /usr/bin/xvfb-run";
    view_ = new ftx::LatentView;
    auto* layout = new QVBoxLayout(&window_);
    layout->addWidget(new QLabel("a sibling widget"));
    layout->addWidget(view_, 1);
    window_.resize(1100, 640);
    window_.show();
    // The window maps asynchronously (Xvfb under load is slow): frames drawn before it is exposed
    // never reach paintEvent.
    QElapsedTimer waited;
    waited.start();
    while (!(window_.windowHandle() && window_.windowHandle()->isExposed()) && waited.elapsed() < kExposeTimeoutMs)
      QApplication::processEvents(QEventLoop::AllEvents, 10);
    ASSERT_TRUE(window_.windowHandle()->isExposed()) << "the window was not shown within " << kExposeTimeoutMs << " ms";
    QObject::connect(view_, &ftx::LatentView::flips_changed, [this](Flips f) { emitted_.push_back(std::move(f)); });
    view_->set_inspection(inspection(12, 4), "run", 100);
    frames(3);
  }

  void frames(int n) {
    for (int i = 0; i < n; ++i) {
      view_->repaint();
      QApplication::processEvents();
    }
  }

  void send(QEvent::Type type, QPointF at, Qt::MouseButtons buttons) {
    QMouseEvent e(type, at, view_->mapToGlobal(at), Qt::LeftButton, buttons, Qt::NoModifier);
    QApplication::sendEvent(view_, &e);
  }

  // A press and its release as a person makes them: move there, press, a frame, release, frames.
  void click(QPointF at) {
    QMouseEvent move(QEvent::MouseMove, at, view_->mapToGlobal(at), Qt::NoButton, Qt::NoButton, Qt::NoModifier);
    QApplication::sendEvent(view_, &move);
    frames(1);
    send(QEvent::MouseButtonPress, at, Qt::LeftButton);
    frames(1);
    send(QEvent::MouseButtonRelease, at, Qt::NoButton);
    frames(3);
  }

  QWidget window_;
  ftx::LatentView* view_ = nullptr;
  std::vector<Flips> emitted_;
};

TEST_F(LatentViewTest, ClickingACellFlipsThatBitAndClickingAgainRestoresIt) {
  const QRectF cell = view_->cell_rect(5, 2);
  ASSERT_FALSE(cell.isEmpty()) << "the first frames must have laid out the heatmap";
  EXPECT_TRUE(view_->cell_rect(12, 0).isEmpty()) << "t = T is out of range";

  click(cell.center());
  ASSERT_EQ(emitted_.size(), 1u);
  EXPECT_EQ(emitted_.back(), (Flips{{5, 2}}));
  EXPECT_EQ(view_->flips(), (Flips{{5, 2}}));

  click(view_->cell_rect(0, 3).center());
  EXPECT_EQ(view_->flips(), (Flips{{0, 3}, {5, 2}})) << "kept sorted by (t, h)";

  click(view_->cell_rect(5, 2).center());
  ASSERT_EQ(emitted_.size(), 3u);
  EXPECT_EQ(emitted_.back(), (Flips{{0, 3}}));

  // A click outside the heatmap flips nothing.
  click(QPointF(3, 3));
  EXPECT_EQ(emitted_.size(), 3u);

  // A new inspection forgets the flips without a flips_changed.
  view_->set_inspection(inspection(12, 4), "run", 200);
  frames(2);
  EXPECT_TRUE(view_->flips().empty());
  EXPECT_EQ(emitted_.size(), 3u);
}

// A model file's inspection: columns as wide as the token labels; without a regeneration (typed
// text) a click flips nothing, with one it flips as for a run.
TEST_F(LatentViewTest, TokenColumnsAndFlipsOnlyWithARegeneration) {
  ftx::LatentInspection li = inspection(6, 4);
  li.tokens = {"The", " sea", " was", "\n", " calm", "."};
  li.tokens.push_back(" and");
  li.text.clear();
  for (const std::string& t : li.tokens) li.text += t;
  li.regenerated.clear();
  view_->set_inspection(li, "random Free Transformer", -1);
  frames(3);
  const QRectF cell = view_->cell_rect(2, 1);
  ASSERT_FALSE(cell.isEmpty());
  const QRectF char_cell = [&] {
    view_->set_inspection(inspection(6, 4), "run", 1);
    frames(3);
    return view_->cell_rect(2, 1);
  }();
  EXPECT_GT(cell.width(), char_cell.width()) << "a label of 5 characters needs a wider column than one character";
  view_->set_inspection(li, "random Free Transformer", -1);
  frames(3);
  click(view_->cell_rect(2, 1).center());
  EXPECT_TRUE(emitted_.empty()) << "no regeneration: nothing to flip";

  li.regenerated_tokens = li.tokens;
  li.regenerated = li.text;
  view_->set_inspection(li, "random Free Transformer", -1);
  frames(3);
  click(view_->cell_rect(2, 1).center());
  ASSERT_EQ(emitted_.size(), 1u);
  EXPECT_EQ(emitted_.back(), (Flips{{2, 1}}));
}

TEST_F(LatentViewTest, SavePngWritesTheFrameAtTheWidgetsSize) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  const QString path = dir.filePath("latent.png");
  ASSERT_TRUE(view_->save_png(path));
  const QImage image(path);
  ASSERT_FALSE(image.isNull());
  EXPECT_EQ(image.size(), (QSizeF(view_->size()) * view_->devicePixelRatioF()).toSize());
  std::set<QRgb> colours;
  for (int y = 0; y < image.height(); y += 3)
    for (int x = 0; x < image.width(); x += 3) colours.insert(image.pixel(x, y));
  EXPECT_GE(colours.size(), 50u) << "a heatmap, a colour bar and text, not a blank frame";
}

TEST_F(LatentViewTest, TheHostingWindowStaysARasterWindow) {
  ASSERT_NE(window_.windowHandle(), nullptr);
  EXPECT_EQ(window_.windowHandle()->surfaceType(), QSurface::RasterSurface);
  // Control: the same window with a QOpenGLWidget in it is switched to OpenGL composition.
  auto* gl = new QOpenGLWidget;
  window_.layout()->addWidget(gl);
  frames(2);
  EXPECT_NE(window_.windowHandle()->surfaceType(), QSurface::RasterSurface);
}

}  // namespace

// The view needs a display with OpenGL: without one, run again under xvfb-run (as the studio
// tests do, with -noreset for the same reason: tests/test_studio.cpp); with neither, every test
// is skipped.
int main(int argc, char** argv) {
  if (std::getenv("DISPLAY") == nullptr && std::getenv("FTX_UNDER_XVFB") == nullptr &&
      access("/usr/bin/xvfb-run", X_OK) == 0) {
    setenv("FTX_UNDER_XVFB", "1", 1);
    std::vector<char*> args = {const_cast<char*>("/usr/bin/xvfb-run"), const_cast<char*>("-a"), const_cast<char*>("-s"),
                               const_cast<char*>("-screen 0 1400x900x24 -noreset")};
    for (int i = 0; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    execv(args[0], args.data());
  }
  ::testing::InitGoogleTest(&argc, argv);
  g_no_display = std::getenv("DISPLAY") == nullptr;
  if (g_no_display) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  return RUN_ALL_TESTS();
}
