// The Latent panel, drawn with Dear ImGui: for one inspected sequence, the encoder's bit
// probabilities p[t][h] as a heatmap (positions across, bits down) with the sampled code's bits
// marked, the KL per token as bars against the free-bits line kappa, the codes per position, and
// the regeneration with the sampled codes beside the one with the user's flipped bits (the
// Edited policy). Columns are labelled by the input's characters, or by each token's text when
// the inspection has tokens (a BPE model: spaces as a middle dot, newlines as ↵, bytes that are
// not UTF-8 as \xNN); for a run whose data has kinds (LatentInspection::judges_kinds), the kind of
// the original and of the edited generation as badges (kind_style.h), "python → c" marked when
// the flips changed it; an inspection without a regeneration (a model file's text that is not a
// generation) has no original and edited rows and no bits to flip. Every frame rebuilds everything from LatentPanelData
// (no `static` state) and reports what the user did as LatentPanelActions.
//
// Deliberately not here: Qt types, model math or regeneration (the owner computes the edited
// text on its worker), keeping the flips (the owner holds them and passes them in every frame).
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/explore/explorer.h"

struct ImFont;

namespace ftx {

struct LatentPanelData {
  const ftx::LatentInspection* inspection = nullptr;  // null: the empty state
  std::string run;                                    // a run's name, or a model file's
  int step = 0;                              // the run's checkpoint step; < 0: a model file (no step, no kappa)
  std::vector<std::pair<int, int>> flips;    // (t, h): bits flipped from the sampled codes
  std::string edited;                        // regeneration under `flips` (empty: none yet)
  std::vector<std::string> edited_tokens;    // its tokens' bytes, for an inspection with tokens
  std::optional<ftx::TextKind> edited_kind;  // its kind, when the inspection judges kinds (nullopt: unknown)
  bool regenerating = false;                 // `edited` is being recomputed for the current flips
  std::string message;                       // one status line; empty for none
  std::string empty_text;                    // the empty state's centred text; empty: the default
  ImFont* mono_font = nullptr;               // sequences and cells; null: the current font
  ImFont* small_mono_font = nullptr;         // code digits; null: mono_font
};

// Where the heatmap's cell (0, 0) was drawn this frame, in ImGui display coordinates (logical
// pixels of the hosting widget), already shifted by the horizontal scroll; the visible part of
// the heatmap is [clip_min, clip_max). For tests and for hosts that map positions to cells.
struct LatentPanelLayout {
  bool valid = false;
  float x0 = 0, y0 = 0, cell_w = 0, cell_h = 0;
  float clip_min_x = 0, clip_min_y = 0, clip_max_x = 0, clip_max_y = 0;
};

struct LatentPanelActions {
  int toggle_t = -1, toggle_h = -1;  // a clicked bit to flip or restore; -1: none
  bool clear_flips = false;
  bool resample = false;
  LatentPanelLayout heatmap;
};

// Draws the panel as one window covering the whole ImGui display. Call between ImGui::NewFrame
// and ImGui::Render.
LatentPanelActions draw_latent_panel(const LatentPanelData& d);

}  // namespace ftx
