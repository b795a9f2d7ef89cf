// How a token's bytes are shown as a label (the Latent panel's column headers, tooltips): spaces
// as a visible middle dot, newlines as ↵, tabs as ⇥, other control characters (C0 and C1) and bytes that are
// not valid UTF-8 (half a character of a byte-level BPE token) as \xNN, everything else as the
// UTF-8 text it is. Plain C++: both the Qt widgets and the ImGui panel use it.
//
// Deliberately not here: fonts and widths (the caller measures), tokenization (core/text).
#pragma once
#include <string>
#include <string_view>

namespace ftx {

// The label of one token's bytes, valid UTF-8 always.
std::string printable_token(std::string_view bytes);

}  // namespace ftx
