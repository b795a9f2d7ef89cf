// LatentView (see latent_view.h). Fonts: DejaVu Sans / Sans Mono when installed (Debian's
// fonts-dejavu-core, pulled in by fontconfig), rasterised at the device pixel ratio and scaled
// back by io.FontGlobalScale, so text stays sharp on high-DPI screens; ImGui's built-in font
// otherwise. ImGui's input (1.86) is sampled once per frame, so each input schedules a few
// frames: the one that sees it, the one that sees the deferred release, and one for hover state.
#include "views/latent_view.h"

#include <QEvent>
#include <QFile>
#include <QImage>
#include <QOpenGLContext>
#include <QOpenGLFramebufferObject>
#include <QOpenGLFunctions>
#include <QPainter>
#include <QRectF>
#include <algorithm>

#include "imgui.h"
#include "imgui_impl_opengl3.h"
#include "views/imgui_qt.h"

namespace ftx {

namespace {

constexpr int kFrameIntervalMs = 33;  // about 30 fps while something moves
constexpr int kFramesPerInput = 3;
constexpr float kUiFontPx = 15, kMonoFontPx = 15, kSmallFontPx = 12;
constexpr float kClear[3] = {0.086f, 0.094f, 0.110f};

// Latin-1, Greek (kappa), general punctuation (dashes, ellipsis), arrows (token labels: ↵ ⇥).
constexpr ImWchar kGlyphRanges[] = {0x0020, 0x00FF, 0x0370, 0x03FF, 0x2010, 0x2027, 0x2190, 0x21FF, 0};

const char* const kUiFonts[] = {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                                "/usr/share/fonts/TTF/DejaVuSans.ttf"};
const char* const kMonoFonts[] = {"/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",
                                  "/usr/share/fonts/TTF/DejaVuSansMono.ttf"};

ImFont* add_font(ImFontAtlas* atlas, const char* const* paths, size_t n, float px) {
  for (size_t i = 0; i < n; ++i)
    if (QFile::exists(paths[i])) {
      ImFont* f = atlas->AddFontFromFileTTF(paths[i], px, nullptr, kGlyphRanges);
      if (f != nullptr) return f;
    }
  return nullptr;
}

void apply_style() {
  ImGui::StyleColorsDark();
  ImGuiStyle& s = ImGui::GetStyle();
  s.WindowPadding = ImVec2(16, 12);
  s.FramePadding = ImVec2(10, 4);
  s.ItemSpacing = ImVec2(10, 7);
  s.WindowBorderSize = 0;
  s.WindowRounding = 0;
  s.FrameRounding = 3;
  s.PopupRounding = 3;
  s.ScrollbarSize = 12;
  s.Colors[ImGuiCol_WindowBg] = ImVec4(kClear[0], kClear[1], kClear[2], 1.0f);
  s.Colors[ImGuiCol_PopupBg] = ImVec4(0.12f, 0.13f, 0.16f, 0.97f);
}

}  // namespace

LatentView::LatentView(QWidget* parent) : QWidget(parent) {
  ImGuiContext* previous = ImGui::GetCurrentContext();
  ctx_ = ImGui::CreateContext();
  ImGui::SetCurrentContext(ctx_);
  ImGui::GetIO().IniFilename = nullptr;
  ImGui::GetIO().LogFilename = nullptr;
  apply_style();
  ImGui_ImplQt_Init(this);
  ImGui::SetCurrentContext(previous ? previous : ctx_);
  tick_.setInterval(kFrameIntervalMs);
  connect(&tick_, &QTimer::timeout, this, &LatentView::on_tick);
}

LatentView::~LatentView() {
  ImGui::SetCurrentContext(ctx_);
  if (gl_ != nullptr && gl_->makeCurrent(&surface_)) {
    ImGui_ImplOpenGL3_Shutdown();
    fbo_.reset();
    gl_->doneCurrent();
  }
  ImGui_ImplQt_Shutdown();
  ImGui::DestroyContext(ctx_);
}

void LatentView::set_inspection(const ftx::LatentInspection& inspection, QString run, int step) {
  inspection_ = inspection;
  run_ = run.toStdString();
  step_ = step;
  flips_.clear();
  edited_.clear();
  edited_tokens_.clear();
  edited_kind_.reset();
  regenerating_ = false;
  message_.clear();
  schedule_frames(2);
}

void LatentView::clear(QString text) {
  inspection_.reset();
  flips_.clear();
  edited_.clear();
  edited_tokens_.clear();
  edited_kind_.reset();
  regenerating_ = false;
  message_.clear();
  empty_text_ = text.toStdString();
  layout_ = {};
  schedule_frames(2);
}

void LatentView::set_edited(QString text) { set_edited_generation({text.toStdString(), {}, std::nullopt}); }

void LatentView::set_edited_tokens(std::vector<std::string> tokens, QString text) {
  set_edited_generation({text.toStdString(), std::move(tokens), std::nullopt});
}

void LatentView::set_edited_generation(ftx::LatentGeneration edited) {
  edited_ = std::move(edited.text);
  edited_tokens_ = std::move(edited.tokens);
  edited_kind_ = edited.kind;
  regenerating_ = false;
  schedule_frames(2);
}

void LatentView::set_message(QString message) {
  message_ = message.toStdString();
  if (!message_.empty()) regenerating_ = false;  // a failed edit reports here: stop waiting for it
  schedule_frames(2);
}

bool LatentView::save_png(const QString& path) { return render_frame() && frame_.save(path, "PNG"); }

QRectF LatentView::cell_rect(int t, int h) const {
  if (!layout_.valid || !inspection_ || t < 0 || h < 0 || t >= inspection_->T || h >= inspection_->H) return {};
  const QRectF cell(layout_.x0 + t * layout_.cell_w, layout_.y0 + h * layout_.cell_h, layout_.cell_w, layout_.cell_h);
  const QRectF clip(QPointF(layout_.clip_min_x, layout_.clip_min_y), QPointF(layout_.clip_max_x, layout_.clip_max_y));
  return cell.intersected(clip);
}

bool LatentView::ensure_gl() {
  if (gl_ != nullptr) return true;
  if (!gl_error_.isEmpty()) return false;
  surface_.setFormat(QSurfaceFormat::defaultFormat());
  surface_.create();
  auto gl = std::make_unique<QOpenGLContext>();
  gl->setFormat(surface_.requestedFormat());
  if (!surface_.isValid() || !gl->create() || !gl->makeCurrent(&surface_)) {
    gl_error_ = "The Latent panel needs OpenGL 3, which this display does not offer.";
    return false;
  }
  ImGui::SetCurrentContext(ctx_);
  // Qt's default context is a compatibility one where GLSL 1.30 works; a core profile (macOS)
  // wants 1.50.
  const bool core = gl->format().profile() == QSurfaceFormat::CoreProfile;
  const bool ok = ImGui_ImplOpenGL3_Init(core ? "#version 150" : "#version 130");
  gl->doneCurrent();
  if (!ok) {
    gl_error_ = "The Latent panel could not set up its OpenGL renderer.";
    return false;
  }
  gl_ = std::move(gl);
  return true;
}

void LatentView::load_fonts(float dpr) {
  ImFontAtlas* atlas = ImGui::GetIO().Fonts;
  atlas->Clear();
  ImFont* ui = add_font(atlas, kUiFonts, std::size(kUiFonts), kUiFontPx * dpr);
  if (ui == nullptr) {
    ImFontConfig cfg;
    cfg.SizePixels = 13 * dpr;
    atlas->AddFontDefault(&cfg);
  }
  mono_font_ = add_font(atlas, kMonoFonts, std::size(kMonoFonts), kMonoFontPx * dpr);
  small_font_ = add_font(atlas, kMonoFonts, std::size(kMonoFonts), kSmallFontPx * dpr);
  ImGui::GetIO().FontGlobalScale = 1.0f / dpr;
  fonts_dpr_ = dpr;
  ImGui_ImplOpenGL3_DestroyDeviceObjects();  // the next NewFrame rebuilds them with the new atlas
}

void LatentView::paintEvent(QPaintEvent*) {
  QPainter painter(this);
  if (render_frame()) {
    painter.drawImage(QPointF(0, 0), frame_);
    return;
  }
  painter.fillRect(rect(), QColor::fromRgbF(kClear[0], kClear[1], kClear[2]));
  painter.setPen(Qt::white);
  painter.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap, gl_error_);
}

bool LatentView::render_frame() {
  if (!ensure_gl() || !gl_->makeCurrent(&surface_)) return false;
  ImGui::SetCurrentContext(ctx_);
  const float dpr = float(devicePixelRatioF());
  const QSize pixels = (QSizeF(size()) * dpr).toSize().expandedTo(QSize(1, 1));
  if (fbo_ == nullptr || fbo_->size() != pixels) fbo_ = std::make_unique<QOpenGLFramebufferObject>(pixels);
  fbo_->bind();
  if (dpr != fonts_dpr_) load_fonts(dpr);
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplQt_NewFrame();
  ImGui::NewFrame();

  LatentPanelData d;
  d.inspection = inspection_ ? &*inspection_ : nullptr;
  d.run = run_;
  d.step = step_;
  d.flips = flips_;
  d.edited = edited_;
  d.edited_tokens = edited_tokens_;
  d.edited_kind = edited_kind_;
  d.regenerating = regenerating_;
  d.message = message_;
  d.empty_text = empty_text_;
  d.mono_font = mono_font_;
  d.small_mono_font = small_font_;
  const LatentPanelActions actions = draw_latent_panel(d);
  ImGui::Render();

  QOpenGLFunctions* gl = gl_->functions();
  gl->glViewport(0, 0, pixels.width(), pixels.height());
  gl->glClearColor(kClear[0], kClear[1], kClear[2], 1.0f);
  gl->glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  frame_ = fbo_->toImage();
  frame_.setDevicePixelRatio(dpr);
  fbo_->release();
  gl_->doneCurrent();

  layout_ = actions.heatmap;
  if (frames_left_ > 0) --frames_left_;
  apply(actions);
  return true;
}

// Runs after the frame is drawn; signals leave through the event loop so that a slot may call
// back into the view (set_edited, set_inspection) or even delete it.
void LatentView::apply(const LatentPanelActions& a) {
  if (a.toggle_t >= 0) toggle_flip(a.toggle_t, a.toggle_h);
  if (a.clear_flips && !flips_.empty()) {
    flips_.clear();
    edited_.clear();
    edited_tokens_.clear();
    edited_kind_.reset();
    regenerating_ = false;
    QMetaObject::invokeMethod(
        this, [this, f = flips_] { emit flips_changed(f); }, Qt::QueuedConnection);
    schedule_frames(2);
  }
  if (a.resample)
    QMetaObject::invokeMethod(
        this, [this] { emit resample_requested(); }, Qt::QueuedConnection);
}

void LatentView::toggle_flip(int t, int h) {
  const auto bit = std::make_pair(t, h);
  const auto it = std::lower_bound(flips_.begin(), flips_.end(), bit);
  if (it != flips_.end() && *it == bit)
    flips_.erase(it);
  else
    flips_.insert(it, bit);
  edited_.clear();
  edited_tokens_.clear();
  edited_kind_.reset();
  regenerating_ = !flips_.empty();
  QMetaObject::invokeMethod(
      this, [this, f = flips_] { emit flips_changed(f); }, Qt::QueuedConnection);
  schedule_frames(2);
}

bool LatentView::event(QEvent* e) {
  ImGuiContext* previous = ImGui::GetCurrentContext();
  ImGui::SetCurrentContext(ctx_);
  const bool input = ImGui_ImplQt_ProcessEvent(e);
  ImGui::SetCurrentContext(previous ? previous : ctx_);
  if (input || e->type() == QEvent::Enter) schedule_frames(kFramesPerInput);
  switch (e->type()) {
    case QEvent::MouseButtonPress:
    case QEvent::MouseButtonRelease:
    case QEvent::MouseButtonDblClick:
    case QEvent::MouseMove:
    case QEvent::Wheel:
      e->accept();  // the panel is the whole widget: nothing propagates to the parent
      return true;
    default:
      return QWidget::event(e);
  }
}

void LatentView::schedule_frames(int n) {
  frames_left_ = std::max(frames_left_, n);
  update();
  if (!tick_.isActive()) tick_.start();
}

void LatentView::on_tick() {
  if (!isVisible()) {  // a hidden widget never paints, so frames_left_ would never run down
    tick_.stop();
    return;
  }
  ImGui::SetCurrentContext(ctx_);
  if (frames_left_ > 0 || ImGui_ImplQt_HasPendingInput())
    update();
  else
    tick_.stop();
}

}  // namespace ftx
