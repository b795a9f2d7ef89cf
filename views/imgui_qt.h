// Dear ImGui platform backend for a QWidget, in the shape of imgui's own backends
// (imgui_impl_glfw.h): Init / Shutdown / NewFrame plus an event hook. It feeds ImGuiIO of
// Dear ImGui 1.86 (the Debian package), which predates the 1.87 input-event queue: mouse
// position, buttons, wheel, modifiers, io.KeyMap / io.KeysDown and text input are written
// directly from Qt events. Its state lives in io.BackendPlatformUserData, so every ImGui context
// (one per widget) carries its own.
//
// Deliberately not here: rendering (ImGui_ImplOpenGL3 from libimgui.a, unmodified), fonts,
// styles, repaint scheduling (the hosting widget decides when to paint), gamepads, multi-viewport.
#pragma once

class QEvent;
class QWidget;

namespace ftx {

// On the current ImGui context: binds `widget` (not owned, must outlive the binding), sets the
// key map, clipboard callbacks and backend flags.
bool ImGui_ImplQt_Init(QWidget* widget);
void ImGui_ImplQt_Shutdown();
// Display size (logical pixels), framebuffer scale (devicePixelRatio), delta time, deferred mouse
// releases and the mouse cursor ImGui asked for in the previous frame. Call before ImGui::NewFrame.
void ImGui_ImplQt_NewFrame();
// Maps one of the widget's events into ImGuiIO. Returns true when the event was an input ImGui
// consumes (the widget should paint a few frames); never consumes it for Qt.
bool ImGui_ImplQt_ProcessEvent(QEvent* event);
// True while a mouse release is held back for the next frame (a press and its release arrived
// between two frames): the widget must paint again for ImGui to see the click complete.
bool ImGui_ImplQt_HasPendingInput();

}  // namespace ftx
