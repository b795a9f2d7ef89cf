// How the studio shows a text's kind (core/eval/text_kind.h, docs/text_latent.md): each kind's
// badge colour and label, one table for the Qt widgets (text_groups_grid.h's badges and legend)
// and the Dear ImGui Latent panel (latent_panel.h's original → edited kinds). A badge is white
// bold words on the kind's colour, legible on light and dark palettes.
//
// Deliberately not here: judging a text (text_kind.h), drawing, Qt or ImGui types.
#pragma once
#include <cstdint>
#include <optional>

#include "core/eval/text_kind.h"

namespace ftx {

// 0xRRGGBB of the kind's badge; grey for unknown (nullopt).
constexpr uint32_t kind_rgb(std::optional<TextKind> kind) {
  if (!kind) return 0x6c757d;  // grey: unknown
  switch (*kind) {
    case TextKind::Python:
      return 0x1971c2;  // blue
    case TextKind::C:
      return 0x6741d9;  // violet
    case TextKind::Perl:
      return 0x0b7285;  // teal
    case TextKind::Prose:
      return 0xc2410c;  // burnt orange
  }
  return 0x6c757d;
}

// The badge's words: the kind's name ("python", "c", "perl", "prose"), "?" for unknown.
inline const char* kind_badge_text(std::optional<TextKind> kind) { return kind ? text_kind_name(*kind) : "?"; }

}  // namespace ftx
