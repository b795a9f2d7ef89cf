// Dear ImGui 1.86 platform backend for a QWidget (see imgui_qt.h). Key indices: io.KeysDown
// is indexed by ImGuiKey_* values themselves (io.KeyMap[k] = k), so only the keys ImGui names
// are tracked. A press and release arriving between two frames would be lost by 1.86 (it samples
// io.MouseDown once per frame), so such a release is held back one frame.
#include "views/imgui_qt.h"

#include <QClipboard>
#include <QCursor>
#include <QElapsedTimer>
#include <QEvent>
#include <QGuiApplication>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QWheelEvent>
#include <QWidget>
#include <algorithm>
#include <cfloat>

#include "imgui.h"

namespace ftx {

namespace {

constexpr int kMouseButtons = 5;  // ImGui 1.86 io.MouseDown[5]

struct ImGui_ImplQt_Data {
  QWidget* widget = nullptr;
  QElapsedTimer timer;
  qint64 last_ns = 0;
  QByteArray clipboard;                       // keeps GetClipboardText's answer alive
  bool press_unseen[kMouseButtons] = {};      // pressed since the last NewFrame
  bool release_deferred[kMouseButtons] = {};  // released before a frame saw the press
  ImGuiMouseCursor last_cursor = ImGuiMouseCursor_Arrow;
};

ImGui_ImplQt_Data* backend_data() {
  return ImGui::GetCurrentContext() ? static_cast<ImGui_ImplQt_Data*>(ImGui::GetIO().BackendPlatformUserData) : nullptr;
}

const char* get_clipboard_text(void* user_data) {
  auto* bd = static_cast<ImGui_ImplQt_Data*>(user_data);
  bd->clipboard = QGuiApplication::clipboard()->text().toUtf8();
  return bd->clipboard.constData();
}

void set_clipboard_text(void*, const char* text) { QGuiApplication::clipboard()->setText(QString::fromUtf8(text)); }

int mouse_button_index(Qt::MouseButton b) {
  switch (b) {
    case Qt::LeftButton:
      return 0;
    case Qt::RightButton:
      return 1;
    case Qt::MiddleButton:
      return 2;
    case Qt::BackButton:
      return 3;
    case Qt::ForwardButton:
      return 4;
    default:
      return -1;
  }
}

int imgui_key(int qt_key) {
  switch (qt_key) {
    case Qt::Key_Tab:
    case Qt::Key_Backtab:
      return ImGuiKey_Tab;
    case Qt::Key_Left:
      return ImGuiKey_LeftArrow;
    case Qt::Key_Right:
      return ImGuiKey_RightArrow;
    case Qt::Key_Up:
      return ImGuiKey_UpArrow;
    case Qt::Key_Down:
      return ImGuiKey_DownArrow;
    case Qt::Key_PageUp:
      return ImGuiKey_PageUp;
    case Qt::Key_PageDown:
      return ImGuiKey_PageDown;
    case Qt::Key_Home:
      return ImGuiKey_Home;
    case Qt::Key_End:
      return ImGuiKey_End;
    case Qt::Key_Insert:
      return ImGuiKey_Insert;
    case Qt::Key_Delete:
      return ImGuiKey_Delete;
    case Qt::Key_Backspace:
      return ImGuiKey_Backspace;
    case Qt::Key_Space:
      return ImGuiKey_Space;
    case Qt::Key_Return:
      return ImGuiKey_Enter;
    case Qt::Key_Enter:
      return ImGuiKey_KeyPadEnter;
    case Qt::Key_Escape:
      return ImGuiKey_Escape;
    case Qt::Key_A:
      return ImGuiKey_A;
    case Qt::Key_C:
      return ImGuiKey_C;
    case Qt::Key_V:
      return ImGuiKey_V;
    case Qt::Key_X:
      return ImGuiKey_X;
    case Qt::Key_Y:
      return ImGuiKey_Y;
    case Qt::Key_Z:
      return ImGuiKey_Z;
    default:
      return -1;
  }
}

void set_modifiers(ImGuiIO& io, Qt::KeyboardModifiers m) {
  io.KeyCtrl = m.testFlag(Qt::ControlModifier);
  io.KeyShift = m.testFlag(Qt::ShiftModifier);
  io.KeyAlt = m.testFlag(Qt::AltModifier);
  io.KeySuper = m.testFlag(Qt::MetaModifier);
}

void release_all(ImGuiIO& io, ImGui_ImplQt_Data& bd) {
  for (int b = 0; b < kMouseButtons; ++b) {
    io.MouseDown[b] = false;
    bd.press_unseen[b] = bd.release_deferred[b] = false;
  }
  for (bool& k : io.KeysDown) k = false;
  set_modifiers(io, Qt::NoModifier);
}

bool process_mouse_button(ImGuiIO& io, ImGui_ImplQt_Data& bd, QMouseEvent* e, bool down) {
  const int b = mouse_button_index(e->button());
  io.MousePos = ImVec2(float(e->position().x()), float(e->position().y()));
  set_modifiers(io, e->modifiers());
  if (b < 0) return true;
  if (down) {
    io.MouseDown[b] = true;
    bd.press_unseen[b] = true;
    bd.release_deferred[b] = false;
  } else if (bd.press_unseen[b]) {
    bd.release_deferred[b] = true;  // let one frame see the button down first
  } else {
    io.MouseDown[b] = false;
  }
  return true;
}

bool process_key(ImGuiIO& io, QKeyEvent* e, bool down) {
  set_modifiers(io, e->modifiers());
  const int k = imgui_key(e->key());
  if (k >= 0) io.KeysDown[k] = down;
  // Text only without Ctrl/Meta (those are shortcuts); control characters are keys, not text.
  const bool shortcut = e->modifiers().testFlag(Qt::ControlModifier) || e->modifiers().testFlag(Qt::MetaModifier);
  if (down && !shortcut && !e->text().isEmpty() && e->text().at(0).isPrint())
    io.AddInputCharactersUTF8(e->text().toUtf8().constData());
  return true;
}

bool process_wheel(ImGuiIO& io, QWheelEvent* e) {
  // One notch of a standard wheel is 120 eighths of a degree; ImGui counts notches.
  io.MouseWheel += float(e->angleDelta().y()) / 120.0f;
  io.MouseWheelH += float(e->angleDelta().x()) / 120.0f;
  io.MousePos = ImVec2(float(e->position().x()), float(e->position().y()));
  set_modifiers(io, e->modifiers());
  return true;
}

Qt::CursorShape qt_cursor(ImGuiMouseCursor c) {
  switch (c) {
    case ImGuiMouseCursor_TextInput:
      return Qt::IBeamCursor;
    case ImGuiMouseCursor_ResizeAll:
      return Qt::SizeAllCursor;
    case ImGuiMouseCursor_ResizeNS:
      return Qt::SizeVerCursor;
    case ImGuiMouseCursor_ResizeEW:
      return Qt::SizeHorCursor;
    case ImGuiMouseCursor_ResizeNESW:
      return Qt::SizeBDiagCursor;
    case ImGuiMouseCursor_ResizeNWSE:
      return Qt::SizeFDiagCursor;
    case ImGuiMouseCursor_Hand:
      return Qt::PointingHandCursor;
    case ImGuiMouseCursor_NotAllowed:
      return Qt::ForbiddenCursor;
    case ImGuiMouseCursor_None:
      return Qt::BlankCursor;
    default:
      return Qt::ArrowCursor;
  }
}

}  // namespace

bool ImGui_ImplQt_Init(QWidget* widget) {
  ImGuiIO& io = ImGui::GetIO();
  IM_ASSERT(io.BackendPlatformUserData == nullptr && "platform backend already initialized");
  auto* bd = IM_NEW(ImGui_ImplQt_Data)();
  bd->widget = widget;
  bd->timer.start();
  io.BackendPlatformUserData = bd;
  io.BackendPlatformName = "imgui_impl_qt";
  io.BackendFlags |= ImGuiBackendFlags_HasMouseCursors;
  for (int k = 0; k < ImGuiKey_COUNT; ++k) io.KeyMap[k] = k;
  io.SetClipboardTextFn = set_clipboard_text;
  io.GetClipboardTextFn = get_clipboard_text;
  io.ClipboardUserData = bd;
  io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
  widget->setMouseTracking(true);
  widget->setFocusPolicy(Qt::StrongFocus);
  return true;
}

void ImGui_ImplQt_Shutdown() {
  ImGui_ImplQt_Data* bd = backend_data();
  IM_ASSERT(bd != nullptr && "platform backend not initialized");
  ImGuiIO& io = ImGui::GetIO();
  io.BackendPlatformUserData = nullptr;
  io.BackendPlatformName = nullptr;
  io.SetClipboardTextFn = nullptr;
  io.GetClipboardTextFn = nullptr;
  io.ClipboardUserData = nullptr;
  IM_DELETE(bd);
}

void ImGui_ImplQt_NewFrame() {
  ImGui_ImplQt_Data* bd = backend_data();
  IM_ASSERT(bd != nullptr && "platform backend not initialized");
  ImGuiIO& io = ImGui::GetIO();
  const float dpr = float(bd->widget->devicePixelRatioF());
  io.DisplaySize = ImVec2(float(bd->widget->width()), float(bd->widget->height()));
  io.DisplayFramebufferScale = ImVec2(dpr, dpr);

  const qint64 now = bd->timer.nsecsElapsed();
  io.DeltaTime = std::max(1e-4f, float(double(now - bd->last_ns) * 1e-9));  // ImGui asserts DeltaTime > 0
  bd->last_ns = now;

  for (int b = 0; b < kMouseButtons; ++b) {
    if (bd->release_deferred[b] && !bd->press_unseen[b]) {
      io.MouseDown[b] = false;
      bd->release_deferred[b] = false;
    }
    bd->press_unseen[b] = false;
  }

  const ImGuiMouseCursor cursor = io.MouseDrawCursor ? ImGuiMouseCursor_None : ImGui::GetMouseCursor();
  if (cursor != bd->last_cursor && !(io.ConfigFlags & ImGuiConfigFlags_NoMouseCursorChange)) {
    bd->widget->setCursor(QCursor(qt_cursor(cursor)));
    bd->last_cursor = cursor;
  }
}

bool ImGui_ImplQt_ProcessEvent(QEvent* event) {
  ImGui_ImplQt_Data* bd = backend_data();
  if (bd == nullptr) return false;
  ImGuiIO& io = ImGui::GetIO();
  switch (event->type()) {
    case QEvent::MouseMove: {
      auto* e = static_cast<QMouseEvent*>(event);
      io.MousePos = ImVec2(float(e->position().x()), float(e->position().y()));
      set_modifiers(io, e->modifiers());
      return true;
    }
    case QEvent::MouseButtonPress:
    case QEvent::MouseButtonDblClick:  // ImGui detects double clicks itself from the timing
      return process_mouse_button(io, *bd, static_cast<QMouseEvent*>(event), true);
    case QEvent::MouseButtonRelease:
      return process_mouse_button(io, *bd, static_cast<QMouseEvent*>(event), false);
    case QEvent::Wheel:
      return process_wheel(io, static_cast<QWheelEvent*>(event));
    case QEvent::KeyPress:
      return process_key(io, static_cast<QKeyEvent*>(event), true);
    case QEvent::KeyRelease:
      return process_key(io, static_cast<QKeyEvent*>(event), false);
    case QEvent::Leave:
      io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
      return true;
    case QEvent::FocusIn:
      io.AddFocusEvent(true);
      return true;
    case QEvent::FocusOut:
      io.AddFocusEvent(false);
      release_all(io, *bd);
      return true;
    default:
      return false;
  }
}

bool ImGui_ImplQt_HasPendingInput() {
  const ImGui_ImplQt_Data* bd = backend_data();
  if (bd == nullptr) return false;
  for (bool r : bd->release_deferred)
    if (r) return true;
  return false;
}

}  // namespace ftx
