// LatentView: the studio's Latent view, a widget hosting the Dear ImGui Latent panel
// (latent_panel.h) through the Qt platform glue (imgui_qt.h) and the stock OpenGL3 renderer. It
// owns one ImGui context, the inspection on display and the user's flipped bits; it paints on
// input and on changes (a few frames at about 30 fps), never continuously while idle.
//
// ImGui draws with OpenGL into an offscreen framebuffer the view owns, and the frame is painted as
// an image. A QOpenGLWidget would be simpler, but it switches the whole main window to OpenGL
// composition: every repaint anywhere (a label, a chart) then uploads and composes the full
// window, 12 ms a frame with software GL, and the UI missed its 50 ms latency budget while
// training. Here only the Latent panel's own frames touch OpenGL.
//
// Deliberately not here: running the encoder or regenerating (the owner does that on a worker
// thread: it listens to flips_changed and answers with set_edited), choosing runs or sequences.
#pragma once
#include <QImage>
#include <QOffscreenSurface>
#include <QRectF>
#include <QString>
#include <QTimer>
#include <QWidget>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/explore/explorer.h"
#include "views/latent_panel.h"

class QOpenGLContext;
class QOpenGLFramebufferObject;
struct ImGuiContext;
struct ImFont;

namespace ftx {

class LatentView : public QWidget {
  Q_OBJECT

 public:
  explicit LatentView(QWidget* parent = nullptr);
  ~LatentView() override;

  // Shows `inspection` and forgets the previous flips, edited text and message (no flips_changed).
  // `run` names where it comes from: a run at `step`, or a model file (step < 0: no step, no kappa).
  void set_inspection(const ftx::LatentInspection& inspection, QString run, int step);
  // Forgets the inspection and shows `text` in its place (e.g. a model without a latent).
  void clear(QString text);
  // The regeneration for the flips of the latest flips_changed.
  void set_edited(QString text);
  // The same for an inspection with tokens: each token's bytes (prompt included), and the text.
  void set_edited_tokens(std::vector<std::string> tokens, QString text);
  // The same for a run's inspection: text, tokens when it has them, and the kind when it judges kinds.
  void set_edited_generation(ftx::LatentGeneration edited);
  // One status line (errors from the owner's worker); a non-empty one also ends "regenerating".
  void set_message(QString message);
  // Renders one frame and writes it as PNG; false when OpenGL or the file failed.
  bool save_png(const QString& path);

  const std::vector<std::pair<int, int>>& flips() const { return flips_; }
  // Heatmap cell (t, h) in widget coordinates as the last frame drew it, cut to what is visible;
  // empty before the first frame, for a cell out of range or one scrolled out of view.
  QRectF cell_rect(int t, int h) const;
  QSize sizeHint() const override { return QSize(1100, 620); }

 signals:
  // (t, h) pairs, sorted; empty after "Clear flips". Emitted from the event loop, never from paintGL.
  void flips_changed(std::vector<std::pair<int, int>> flips);
  void resample_requested();

 protected:
  void paintEvent(QPaintEvent* e) override;
  bool event(QEvent* e) override;

 private:
  // Creates the OpenGL context, surface and renderer on first use; false (with gl_error_ set)
  // when OpenGL is unavailable.
  bool ensure_gl();
  // Draws one ImGui frame into frame_ and applies what the user did in it.
  bool render_frame();
  void load_fonts(float dpr);
  void apply(const LatentPanelActions& a);
  void toggle_flip(int t, int h);
  void schedule_frames(int n);
  void on_tick();

  ImGuiContext* ctx_ = nullptr;
  ImFont* mono_font_ = nullptr;
  ImFont* small_font_ = nullptr;
  float fonts_dpr_ = 0;  // device pixel ratio the font atlas was rasterised for
  std::unique_ptr<QOpenGLContext> gl_;
  QOffscreenSurface surface_;
  std::unique_ptr<QOpenGLFramebufferObject> fbo_;
  QImage frame_;  // the last frame, at the device pixel ratio
  QString gl_error_;

  std::optional<ftx::LatentInspection> inspection_;
  std::string run_;
  int step_ = 0;
  std::vector<std::pair<int, int>> flips_;  // (t, h), sorted
  std::string edited_;
  std::vector<std::string> edited_tokens_;
  std::optional<ftx::TextKind> edited_kind_;
  bool regenerating_ = false;
  std::string message_;
  std::string empty_text_;    // the empty state's text; empty: the panel's default
  LatentPanelLayout layout_;  // the last frame's heatmap placement

  QTimer tick_;
  int frames_left_ = 0;  // frames still to paint after the latest input or change
};

}  // namespace ftx
