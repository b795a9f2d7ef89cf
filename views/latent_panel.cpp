// The Latent panel (see latent_panel.h). One column per input position t (the token text[t] that
// predicts text[t+1]) plus one trailing column for the last token, which no latent follows;
// the sequence, heatmap, KL bars, codes and both regenerations share these columns. A column is
// one character wide for a character-level run, as wide as the longest token label (capped) for
// a BPE model. Bit h of a code is (code >> h) & 1 (kernels/backend.h), drawn with b0 at the top.
#include "views/latent_panel.h"

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdio>

#include "imgui.h"
#include "views/kind_style.h"
#include "views/token_label.h"

namespace ftx {

namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr float kMaxCellW = 26.0f;       // wider cells only spread the picture
constexpr float kMaxTokenCellW = 66.0f;  // token labels past this width are cut with an ellipsis
constexpr float kKlHeight = 104.0f;
constexpr ImU32 kFlipAccent = IM_COL32(255, 106, 61, 255);
constexpr ImU32 kKlUnder = IM_COL32(86, 120, 160, 255);
constexpr ImU32 kKlOver = IM_COL32(232, 178, 64, 255);
constexpr ImU32 kKappaLine = IM_COL32(225, 225, 225, 220);
constexpr ImU32 kBatchKlLine = IM_COL32(120, 210, 140, 255);  // mean KL over a held-out batch
constexpr ImU32 kBudgetLine = IM_COL32(220, 120, 200, 255);   // what the position code costs
constexpr ImU32 kGutterText = IM_COL32(150, 156, 166, 255);
constexpr ImU32 kCodeText = IM_COL32(190, 196, 206, 255);
constexpr ImU32 kTargetLetter = IM_COL32(110, 205, 255, 255);
constexpr ImU32 kNoiseChar = IM_COL32(176, 96, 96, 255);
constexpr ImU32 kBlankChar = IM_COL32(78, 84, 94, 255);
constexpr ImU32 kPromptChar = IM_COL32(160, 166, 176, 255);
constexpr ImU32 kPlainChar = IM_COL32(222, 226, 232, 255);
constexpr ImU32 kZeroChar = IM_COL32(140, 148, 160, 255);
const ImVec4 kMessageColour = ImVec4(0.95f, 0.80f, 0.45f, 1.0f);

// Geometry of one frame: x of column t is origin.x + t * cell_w; y offsets are from origin.y.
struct Grid {
  int T = 0, H = 0, cols = 0;
  float gutter_w = 0, cell_w = 0, cell_h = 0, row_h = 0, code_h = 0;
  float y_seq = 0, y_heat = 0, y_kl = 0, y_code = 0, y_orig = 0, y_edit = 0, total_h = 0;
  bool codes_across = true;         // hex digits side by side (else stacked, most significant on top)
  bool regen = true;                // original and edited rows (flips regenerate); false: a model file's text
  std::vector<std::string> labels;  // (cols) printable token texts; empty: one character per column
  double kl_max = 1;                // top of the KL axis (nats)
  ImVec2 origin;
  ImFont* mono = nullptr;
  ImFont* small = nullptr;
};

// The "viridis" ramp (perceptually uniform, readable on dark backgrounds), 9 stops.
constexpr unsigned char kStops[9][3] = {{68, 1, 84},    {72, 40, 120},  {62, 73, 137},  {49, 104, 142}, {38, 130, 142},
                                        {31, 158, 137}, {53, 183, 121}, {110, 206, 88}, {253, 231, 37}};

ImU32 prob_colour(float p) {
  const float x = std::clamp(p, 0.0f, 1.0f) * 8.0f;
  const int i = std::min(int(x), 7);
  const float f = x - float(i);
  auto mix = [&](int c) { return int(std::lround(kStops[i][c] + f * (kStops[i + 1][c] - kStops[i][c]))); };
  return IM_COL32(mix(0), mix(1), mix(2), 255);
}

// The synthetic task's prompt is "<letter>>": that letter is the target.
char target_letter(const std::string& s) {
  return s.size() >= 2 && s[1] == '>' && std::isupper(static_cast<unsigned char>(s[0])) ? s[0] : 0;
}

// Both tasks' prompts end with '>' ("K>" and ">"); 0 when the text has none near its start.
int prompt_length(const std::string& s) {
  const size_t p = s.find('>');
  return p != std::string::npos && p < 3 ? int(p) + 1 : 0;
}

ImU32 char_colour(char c, char target, bool in_prompt) {
  if (in_prompt) return kPromptChar;
  if (target != 0 && c == target) return kTargetLetter;
  if (c == '!') return kNoiseChar;
  if (c == '_') return kBlankChar;
  if (target == 0 && c == '0') return kZeroChar;  // coin-flip sequences: the 1s stand out
  return kPlainChar;
}

bool is_flipped(const LatentPanelData& d, int t, int h) {
  return std::find(d.flips.begin(), d.flips.end(), std::make_pair(t, h)) != d.flips.end();
}

uint32_t edited_code(const LatentPanelData& d, int t) {
  uint32_t c = d.inspection->codes[size_t(t)];
  for (auto [ft, fh] : d.flips)
    if (ft == t) c ^= 1u << fh;
  return c;
}

bool has_glyph(ImFont* f, ImWchar c) { return f != nullptr && f->FindGlyphNoFallback(c) != nullptr; }
const char* kappa_symbol(ImFont* f) { return has_glyph(f, 0x03BA) ? "\xce\xba" : "kappa"; }
const char* ellipsis(ImFont* f) { return has_glyph(f, 0x2026) ? "\xe2\x80\xa6" : "..."; }
const char* arrow(ImFont* f) { return has_glyph(f, 0x2192) ? "\xe2\x86\x92" : "->"; }

// Smallest of {1, 2, 2.5, 5} x 10^k that is >= v (axis tops that read as round numbers).
double nice_ceiling(double v) {
  if (!(v > 0)) return 1;
  const double e = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * e >= v * (1 - 1e-9)) return m * e;
  return 10 * e;
}

std::string validation_error(const ftx::LatentInspection& li) {
  if (li.T <= 0 || li.H <= 0) return "this inspection has no latent (T or H is 0)";
  if (li.H > 32) return "more than 32 latent bits";
  const bool text_fits = li.tokens.empty() ? li.text.size() >= size_t(li.T) : li.tokens.size() == size_t(li.T) + 1;
  if (li.bit_probs.size() != size_t(li.T) * size_t(li.H) || li.kl.size() != size_t(li.T) ||
      li.codes.size() != size_t(li.T) || !text_fits)
    return "inconsistent inspection sizes";
  return {};
}

void centred_text(const char* text, ImU32 colour) {
  const ImVec2 size = ImGui::CalcTextSize(text, nullptr, false, ImGui::GetWindowWidth() * 0.8f);
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const ImVec2 at = ImGui::GetCursorPos();
  ImGui::SetCursorPos(
      ImVec2(at.x + std::max(0.0f, (avail.x - size.x) * 0.5f), at.y + std::max(0.0f, (avail.y - size.y) * 0.5f)));
  ImGui::PushStyleColor(ImGuiCol_Text, colour);
  ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + size.x + 1);
  ImGui::TextUnformatted(text);
  ImGui::PopTextWrapPos();
  ImGui::PopStyleColor();
}

void key_value(const char* key, const char* value) {
  ImGui::TextDisabled("%s", key);
  ImGui::SameLine(0, 5);
  ImGui::TextUnformatted(value);
  ImGui::SameLine(0, 18);
}

// ---- header: title line, buttons, legend, message ----

void draw_title(const LatentPanelData& d) {
  const ftx::LatentInspection& li = *d.inspection;
  ImFont* f = ImGui::GetFont();
  char buf[160];
  ImGui::TextUnformatted("Latent");
  ImGui::SameLine(0, 18);
  const bool model_file = d.step < 0;
  key_value(model_file ? "model" : "run", d.run.empty() ? "-" : d.run.c_str());
  if (!model_file) {
    std::snprintf(buf, sizeof buf, "%d", d.step);
    key_value("step", buf);
    std::snprintf(buf, sizeof buf, "%.4g bit = %.4g nats per token%s%s", li.kappa_nats / kLn2, li.kappa_nats,
                  li.free_bits.empty() ? "" : ", ", li.free_bits.c_str());
    key_value(kappa_symbol(f), buf);
  }
  std::snprintf(buf, sizeof buf, "%d", li.T);
  key_value("T", buf);
  std::snprintf(buf, sizeof buf, "%d", li.H);
  key_value("H", buf);
  std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(li.sample_seed));
  key_value("sample seed", buf);
  ImGui::NewLine();
}

// p colour ramp, then the cell marks, drawn from the right edge of the current line.
void draw_legend(float right_x) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float lh = ImGui::GetTextLineHeight();
  const float ramp_w = 120, gap = 14;
  const char* marks[] = {"sampled 1", "sampled 0", "flipped"};
  float w = ImGui::CalcTextSize("p(bit = 1)  0").x + ramp_w + ImGui::CalcTextSize("1").x + 12;
  for (const char* m : marks) w += gap + lh + 4 + ImGui::CalcTextSize(m).x;
  ImGui::SameLine(std::max(ImGui::GetCursorPosX(), right_x - w));
  ImVec2 p = ImGui::GetCursorScreenPos();
  const float yc = p.y + ImGui::GetFrameHeight() * 0.5f;
  auto text = [&](const char* s, ImU32 col) {
    dl->AddText(ImVec2(p.x, yc - lh * 0.5f), col, s);
    p.x += ImGui::CalcTextSize(s).x;
  };
  text("p(bit = 1)  0", kGutterText);
  p.x += 6;
  for (int i = 0; i < int(ramp_w); ++i)
    dl->AddRectFilled(ImVec2(p.x + i, yc - 6), ImVec2(p.x + i + 1, yc + 6), prob_colour(float(i) / (ramp_w - 1)));
  p.x += ramp_w + 6;
  text("1", kGutterText);
  const float r = lh * 0.22f;
  for (int k = 0; k < 3; ++k) {
    p.x += gap;
    const ImVec2 box(p.x, yc - lh * 0.5f), box_max(p.x + lh, yc + lh * 0.5f);
    dl->AddRectFilled(box, box_max, prob_colour(0.15f));
    const ImVec2 c((box.x + box_max.x) * 0.5f, yc);
    if (k == 0) dl->AddCircleFilled(c, r, IM_COL32_WHITE);
    if (k == 1) dl->AddCircle(c, r, IM_COL32_WHITE, 0, 1.2f);
    if (k == 2) dl->AddRect(box, box_max, kFlipAccent, 0, 0, 2.0f);
    p.x += lh + 4;
    text(marks[k], kGutterText);
  }
  ImGui::Dummy(ImVec2(w, ImGui::GetFrameHeight()));
}

void draw_header(const LatentPanelData& d, LatentPanelActions& act) {
  draw_title(d);
  const float right_x = ImGui::GetCursorPosX() + ImGui::GetContentRegionAvail().x;
  char label[64];
  if (!d.inspection->regenerated.empty()) {  // flips regenerate: a model file's text has no regeneration
    std::snprintf(label, sizeof label, "Clear flips (%zu)", d.flips.size());
    ImGui::BeginDisabled(d.flips.empty());
    if (ImGui::Button(label)) act.clear_flips = true;
    ImGui::EndDisabled();
    ImGui::SameLine();
  }
  if (ImGui::Button("Resample")) act.resample = true;
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Sample new codes from the encoder (new seed)");
  draw_legend(right_x);
  if (!d.message.empty()) ImGui::TextColored(kMessageColour, "%s", d.message.c_str());
  ImGui::Separator();
  ImGui::Spacing();
}

// ---- grid geometry and the rows ----

Grid make_grid(const LatentPanelData& d) {
  const ftx::LatentInspection& li = *d.inspection;
  Grid g;
  g.T = li.T;
  g.H = li.H;
  g.cols = li.T + 1;
  g.mono = d.mono_font ? d.mono_font : ImGui::GetFont();
  g.small = d.small_mono_font ? d.small_mono_font : g.mono;
  const float char_w = g.mono->CalcTextSizeA(g.mono->FontSize, FLT_MAX, 0, "M").x;
  const float small_w = g.small->CalcTextSizeA(g.small->FontSize, FLT_MAX, 0, "M").x;
  g.gutter_w = std::ceil(ImGui::CalcTextSize("original").x + 28);
  g.regen = !li.regenerated.empty();
  const float avail = ImGui::GetContentRegionAvail().x - g.gutter_w;
  float min_cell_w = std::ceil(char_w + 8), max_cell_w = kMaxCellW;
  if (!li.tokens.empty()) {  // as wide as the widest label, up to kMaxTokenCellW (the grid scrolls)
    float widest = 0;
    for (const std::string& t : li.tokens) {
      g.labels.push_back(printable_token(t));
      widest = std::max(widest, g.mono->CalcTextSizeA(g.mono->FontSize, FLT_MAX, 0, g.labels.back().c_str()).x);
    }
    max_cell_w = std::clamp(std::ceil(widest + 10), kMaxCellW, kMaxTokenCellW);
    min_cell_w = max_cell_w;
  }
  g.cell_w = std::floor(std::clamp(avail / float(g.cols), min_cell_w, max_cell_w));
  g.row_h = std::ceil(g.mono->FontSize + 8);
  const int digits = (g.H + 3) / 4;
  g.codes_across = float(digits) * small_w + 3 <= g.cell_w;
  g.code_h = std::ceil((g.codes_across ? 1 : digits) * g.small->FontSize + 6);
  // Rows grow into spare height (below the grid: the summary, two lines), up to 1.35 x the width.
  const float fixed_h =
      float(g.regen ? 3 : 1) * g.row_h + kKlHeight + g.code_h + 60 + 3 * ImGui::GetFrameHeightWithSpacing();
  const float spare_h = (ImGui::GetContentRegionAvail().y - fixed_h) / float(g.H);
  g.cell_h = std::floor(std::clamp(spare_h, 16.0f, std::max(16.0f, std::min(26.0f, g.cell_w * 1.35f))));
  g.y_seq = 0;
  g.y_heat = g.row_h + 6;
  g.y_kl = g.y_heat + float(g.H) * g.cell_h + 16;
  g.y_code = g.y_kl + kKlHeight + 6;
  g.y_orig = g.y_code + g.code_h + 12;
  g.y_edit = g.y_orig + g.row_h + 2;
  g.total_h = g.regen ? g.y_edit + g.row_h + 4 : g.y_code + g.code_h + 4;
  double m = li.kappa_nats;
  for (float k : li.kl) m = std::max(m, double(k));
  for (const auto* v : {&li.batch_kl, &li.position_budget})
    for (size_t t = 0; t < std::min(v->size(), size_t(g.T)); ++t) m = std::max(m, (*v)[t]);
  g.kl_max = nice_ceiling(m * 1.08);
  return g;
}

float kl_y(const Grid& g, double v) {
  const double f = std::clamp(v / g.kl_max, 0.0, 1.0);
  return g.origin.y + g.y_kl + kKlHeight * float(1.0 - f);
}

// One monospace character per column; where `other` is given, cells that differ from it get
// the accent background.
void draw_text_row(ImDrawList* dl, const Grid& g, float y, const std::string& s, const std::string* other, char target,
                   int prompt_len) {
  constexpr ImU32 kDiffBackground = (kFlipAccent & 0x00FFFFFFu) | 0x99000000u;  // accent at 60% alpha
  const float fs = g.mono->FontSize;
  const int n = std::min<int>(int(s.size()), g.cols);
  for (int i = 0; i < n; ++i) {
    const float x = g.origin.x + float(i) * g.cell_w;
    const char c[2] = {s[size_t(i)], 0};
    const bool differs = other != nullptr && (i >= int(other->size()) || (*other)[size_t(i)] != c[0]);
    if (differs)
      dl->AddRectFilled(ImVec2(x + 1, y + 1), ImVec2(x + g.cell_w - 1, y + g.row_h - 1), kDiffBackground, 2.0f);
    const float cw = g.mono->CalcTextSizeA(fs, FLT_MAX, 0, c).x;
    const ImU32 col = differs ? IM_COL32_WHITE : char_colour(c[0], target, i < prompt_len);
    dl->AddText(g.mono, fs, ImVec2(x + (g.cell_w - cw) * 0.5f, y + (g.row_h - fs) * 0.5f), col, c, c + 1);
  }
}

// `s` cut at a UTF-8 character boundary so that it fits `width` with an ellipsis after it.
std::string fit_label(ImFont* f, const std::string& s, float width) {
  auto w = [&](const std::string& x) { return f->CalcTextSizeA(f->FontSize, FLT_MAX, 0, x.c_str()).x; };
  if (w(s) <= width) return s;
  const std::string dots = ellipsis(f);
  std::string cut = s;
  while (!cut.empty() && w(cut + dots) > width) {
    cut.pop_back();
    while (!cut.empty() && (static_cast<unsigned char>(cut.back()) & 0xC0) == 0x80) cut.pop_back();
    if (!cut.empty() && static_cast<unsigned char>(cut.back()) >= 0xC0) cut.pop_back();
  }
  return cut + dots;
}

// One token label per column (`tokens`: each token's bytes), centred, cut to the cell; where
// `other` is given, tokens that differ from it get the accent background. The first prompt_len
// columns are the prompt.
void draw_label_row(ImDrawList* dl, const Grid& g, float y, const std::vector<std::string>& tokens,
                    const std::vector<std::string>* other, int prompt_len) {
  constexpr ImU32 kDiffBackground = (kFlipAccent & 0x00FFFFFFu) | 0x99000000u;  // accent at 60% alpha
  const float fs = g.mono->FontSize;
  for (int i = 0; i < g.cols && i < int(tokens.size()); ++i) {
    const float x = g.origin.x + float(i) * g.cell_w;
    const bool differs = other != nullptr && (i >= int(other->size()) || (*other)[size_t(i)] != tokens[size_t(i)]);
    const std::string label = fit_label(g.mono, printable_token(tokens[size_t(i)]), g.cell_w - 4);
    const float w = g.mono->CalcTextSizeA(fs, FLT_MAX, 0, label.c_str()).x;
    dl->AddRectFilled(ImVec2(x + 1, y + 1), ImVec2(x + g.cell_w - 1, y + g.row_h - 1),
                      differs ? kDiffBackground : IM_COL32(255, 255, 255, 10), 2.0f);
    const ImU32 col = differs ? IM_COL32_WHITE : i < prompt_len ? kPromptChar : kPlainChar;
    dl->AddText(g.mono, fs, ImVec2(x + (g.cell_w - w) * 0.5f, y + (g.row_h - fs) * 0.5f), col, label.c_str());
  }
}

// Tokens the input and its regeneration share from the start: the prompt of a model file's text.
int common_prefix(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return int(n);
}

void draw_cell(ImDrawList* dl, const Grid& g, const LatentPanelData& d, int t, int h) {
  const ftx::LatentInspection& li = *d.inspection;
  const float p = li.bit_probs[size_t(t) * size_t(li.H) + size_t(h)];
  const ImVec2 a(g.origin.x + float(t) * g.cell_w, g.origin.y + g.y_heat + float(h) * g.cell_h);
  const ImVec2 b(a.x + g.cell_w, a.y + g.cell_h);
  dl->AddRectFilled(a, ImVec2(b.x - 1, b.y - 1), prob_colour(p));
  const bool flipped = is_flipped(d, t, h);
  const bool bit = ((edited_code(d, t) >> h) & 1u) != 0;
  const ImU32 mark = flipped ? kFlipAccent : p < 0.62f ? IM_COL32(245, 245, 245, 235) : IM_COL32(20, 20, 28, 235);
  const ImVec2 c((a.x + b.x - 1) * 0.5f, (a.y + b.y - 1) * 0.5f);
  const float r = std::min(g.cell_w, g.cell_h) * (flipped ? 0.24f : 0.18f);
  if (bit)
    dl->AddCircleFilled(c, r, mark, 12);
  else
    dl->AddCircle(c, r, mark, 12, 1.2f);
  if (flipped) dl->AddRect(ImVec2(a.x + 1, a.y + 1), ImVec2(b.x - 2, b.y - 2), kFlipAccent, 0, 0, 2.0f);
}

void draw_kl_bars(ImDrawList* dl, const Grid& g, const LatentPanelData& d) {
  const ftx::LatentInspection& li = *d.inspection;
  const float top = g.origin.y + g.y_kl, base = top + kKlHeight;
  const float right = g.origin.x + float(g.T) * g.cell_w;
  dl->AddRectFilled(ImVec2(g.origin.x, top), ImVec2(right, base), IM_COL32(255, 255, 255, 10));
  dl->AddLine(ImVec2(g.origin.x, std::floor(kl_y(g, g.kl_max * 0.5)) + 0.5f),
              ImVec2(right, std::floor(kl_y(g, g.kl_max * 0.5)) + 0.5f), IM_COL32(255, 255, 255, 22));
  const float pad = std::max(1.0f, std::floor(g.cell_w * 0.15f));
  for (int t = 0; t < g.T; ++t) {
    const double k = li.kl[size_t(t)];
    const float x = g.origin.x + float(t) * g.cell_w;
    const float y = std::min(kl_y(g, k), base - 1);  // a 1 px stub keeps near-zero bars visible
    dl->AddRectFilled(ImVec2(x + pad, y), ImVec2(x + g.cell_w - pad, base), k > li.kappa_nats ? kKlOver : kKlUnder);
  }
  dl->AddLine(ImVec2(g.origin.x, base + 0.5f), ImVec2(right, base + 0.5f), IM_COL32(255, 255, 255, 70));
  const float ky = std::floor(kl_y(g, li.kappa_nats)) + 0.5f;
  for (float x = g.origin.x; x < right; x += 9)
    dl->AddLine(ImVec2(x, ky), ImVec2(std::min(x + 5, right), ky), kKappaLine, 1.5f);
  // Over the batch: the mean KL as a line through the cells' centres, the position code's cost as
  // dots at each centre.
  const size_t n = std::min(li.batch_kl.size(), size_t(g.T));
  for (size_t t = 1; t < n; ++t)
    dl->AddLine(ImVec2(g.origin.x + (float(t) - 0.5f) * g.cell_w, kl_y(g, li.batch_kl[t - 1])),
                ImVec2(g.origin.x + (float(t) + 0.5f) * g.cell_w, kl_y(g, li.batch_kl[t])), kBatchKlLine, 2.0f);
  for (size_t t = 0; t < std::min(li.position_budget.size(), size_t(g.T)); ++t)
    if (li.position_budget[t] > 0)
      dl->AddCircleFilled(ImVec2(g.origin.x + (float(t) + 0.5f) * g.cell_w, kl_y(g, li.position_budget[t])),
                          std::max(1.5f, g.cell_w * 0.12f), kBudgetLine, 8);
}

void draw_codes(ImDrawList* dl, const Grid& g, const LatentPanelData& d) {
  const int digits = (g.H + 3) / 4;
  const float fs = g.small->FontSize;
  for (int t = 0; t < g.T; ++t) {
    const uint32_t c = edited_code(d, t);
    const ImU32 col = c != d.inspection->codes[size_t(t)] ? kFlipAccent : kCodeText;
    char hex[12];
    std::snprintf(hex, sizeof hex, "%0*x", digits, unsigned(c));
    const float x = g.origin.x + float(t) * g.cell_w, y = g.origin.y + g.y_code + 3;
    if (g.codes_across) {
      const float w = g.small->CalcTextSizeA(fs, FLT_MAX, 0, hex).x;
      dl->AddText(g.small, fs, ImVec2(x + (g.cell_w - w) * 0.5f, y), col, hex);
      continue;
    }
    for (int i = 0; i < digits; ++i) {
      const float w = g.small->CalcTextSizeA(fs, FLT_MAX, 0, hex + i, hex + i + 1).x;
      dl->AddText(g.small, fs, ImVec2(x + (g.cell_w - w) * 0.5f, y + float(i) * fs), col, hex + i, hex + i + 1);
    }
  }
}

// ---- gutter labels (outside the horizontal scroll, in the parent window) ----

void gutter_label(ImDrawList* dl, const Grid& g, ImVec2 at, float y_mid, const char* s, ImU32 col,
                  ImFont* f = nullptr) {
  f = f ? f : ImGui::GetFont();
  const ImVec2 size = f->CalcTextSizeA(f->FontSize, FLT_MAX, 0, s);
  dl->AddText(f, f->FontSize, ImVec2(at.x + g.gutter_w - 8 - size.x, y_mid - size.y * 0.5f), col, s);
}

void draw_gutter(ImDrawList* dl, const Grid& g, const LatentPanelData& d, ImVec2 at) {
  char buf[48];
  gutter_label(dl, g, at, at.y + g.y_seq + g.row_h * 0.5f, "input", kGutterText);
  ImFont* bit_font = g.cell_h < ImGui::GetFontSize() + 2 ? g.small : nullptr;
  for (int h = 0; h < g.H; ++h) {
    std::snprintf(buf, sizeof buf, "b%d", h);
    gutter_label(dl, g, at, at.y + g.y_heat + (float(h) + 0.5f) * g.cell_h, buf, kGutterText, bit_font);
  }
  const float lh = ImGui::GetTextLineHeight();
  const float top = at.y + g.y_kl, base = top + kKlHeight;
  const float ky = top + kKlHeight * float(1.0 - std::clamp(d.inspection->kappa_nats / g.kl_max, 0.0, 1.0));
  std::snprintf(buf, sizeof buf, "%s %.3g", kappa_symbol(ImGui::GetFont()), d.inspection->kappa_nats);
  gutter_label(dl, g, at, ky, buf, kKappaLine);
  std::snprintf(buf, sizeof buf, "%.3g", g.kl_max);
  if (ky - top > lh) gutter_label(dl, g, at, top + lh * 0.5f, buf, kGutterText);
  if (base - ky > lh) gutter_label(dl, g, at, base - lh * 0.5f, "0", kGutterText);
  const float cap_y = ky - top > 2.6f * lh ? top + 1.5f * lh : ky + 1.5f * lh;
  if (base - cap_y > lh) dl->AddText(ImVec2(at.x + 2, cap_y - lh * 0.5f), kGutterText, "KL");
  if (base - cap_y > 2 * lh) dl->AddText(ImVec2(at.x + 2, cap_y + lh * 0.5f), kGutterText, "nats");
  const float code_mid = at.y + g.y_code + g.code_h * 0.5f;
  if (g.code_h > 2 * lh) {
    gutter_label(dl, g, at, code_mid - lh * 0.5f, "code", kGutterText);
    gutter_label(dl, g, at, code_mid + lh * 0.5f, "(hex)", kGutterText);
  } else {
    gutter_label(dl, g, at, code_mid, "code", kGutterText);
  }
  if (!g.regen) return;
  gutter_label(dl, g, at, at.y + g.y_orig + g.row_h * 0.5f, "original", kGutterText);
  gutter_label(dl, g, at, at.y + g.y_edit + g.row_h * 0.5f, "edited", kGutterText);
}

// ---- tooltips ----

void char_name(char* buf, size_t n, const std::string& s, int i) {
  if (i < 0 || i >= int(s.size()))
    std::snprintf(buf, n, "-");
  else
    std::snprintf(buf, n, "'%c'", s[size_t(i)]);
}

// Input position i as a tooltip names it: its character, or its token's label.
std::string input_name(const ftx::LatentInspection& li, int i) {
  if (li.tokens.empty()) {
    char buf[8];
    char_name(buf, sizeof buf, li.text, i);
    return buf;
  }
  if (i < 0 || i >= int(li.tokens.size())) return "-";
  std::string quoted(1, '\'');  // (not "'" + ...: GCC 12 warns -Wrestrict on that, a known false alarm)
  quoted += printable_token(li.tokens[size_t(i)]);
  quoted += '\'';
  return quoted;
}

void code_lines(const LatentPanelData& d, int t) {
  const int H = d.inspection->H;
  const uint32_t c = d.inspection->codes[size_t(t)], e = edited_code(d, t);
  char bits[48] = {}, ebits[48] = {};  // b0 first, a space every 4 bits
  for (int h = 0, i = 0; h < H; ++h) {
    if (h > 0 && h % 4 == 0) bits[i] = ebits[i] = ' ', ++i;
    bits[i] = ((c >> h) & 1u) ? '1' : '0';
    ebits[i++] = ((e >> h) & 1u) ? '1' : '0';
  }
  ImGui::Text("code 0x%0*x   b0..b%d %s", (H + 3) / 4, unsigned(c), H - 1, bits);
  if (e != c)
    ImGui::TextColored(ImColor(kFlipAccent), "edited 0x%0*x   b0..b%d %s", (H + 3) / 4, unsigned(e), H - 1, ebits);
}

void column_lines(const LatentPanelData& d, int t) {
  const ftx::LatentInspection& li = *d.inspection;
  const std::string in = input_name(li, t), next = input_name(li, t + 1);
  if (t >= li.T) {
    ImGui::Text("position %d: last %s %s (no latent follows it)", t, li.tokens.empty() ? "character" : "token",
                in.c_str());
    return;
  }
  ImGui::Text("t = %d   input %s %s next %s", t, in.c_str(), arrow(ImGui::GetFont()), next.c_str());
  const double k = li.kl[size_t(t)];
  ImGui::TextColored(ImColor(k > li.kappa_nats ? kKlOver : kGutterText),
                     "KL_t = %.4f nats = %.4f bits   (%s = %.4f nats)", k, k / kLn2, kappa_symbol(ImGui::GetFont()),
                     li.kappa_nats);
  if (size_t(t) < li.batch_kl.size())
    ImGui::TextColored(ImColor(kBatchKlLine), "mean KL here over %d held-out sequences: %.4f nats", li.batch_sequences,
                       li.batch_kl[size_t(t)]);
  if (size_t(t) < li.position_budget.size() && li.position_budget[size_t(t)] > 0)
    ImGui::TextColored(ImColor(kBudgetLine), "the position code's cost here: %.4f nats", li.position_budget[size_t(t)]);
  code_lines(d, t);
}

void cell_tooltip(const LatentPanelData& d, int t, int h) {
  const ftx::LatentInspection& li = *d.inspection;
  const float p = li.bit_probs[size_t(t) * size_t(li.H) + size_t(h)];
  const bool sampled = ((li.codes[size_t(t)] >> h) & 1u) != 0;
  ImGui::BeginTooltip();
  ImGui::Text("bit b%d at t = %d:   p(1) = %.3f   sampled %d", h, t, p, sampled ? 1 : 0);
  if (is_flipped(d, t, h))
    ImGui::TextColored(ImColor(kFlipAccent), "flipped to %d (click to restore)", sampled ? 0 : 1);
  else if (!li.regenerated.empty())
    ImGui::TextDisabled("click to flip it to %d", sampled ? 0 : 1);
  ImGui::Separator();
  column_lines(d, t);
  ImGui::EndTooltip();
}

void column_tooltip(const LatentPanelData& d, int t) {
  const ftx::LatentInspection& li = *d.inspection;
  char orig[8], edit[8];
  char_name(orig, sizeof orig, li.regenerated, t);
  char_name(edit, sizeof edit, d.edited, t);
  ImGui::BeginTooltip();
  column_lines(d, t);
  if (!li.tokens.empty() && !li.regenerated_tokens.empty()) {
    auto name = [t](const std::vector<std::string>& v) {
      std::string q = "-";
      if (t < int(v.size())) q.assign(1, '\''), q += printable_token(v[size_t(t)]), q += '\'';
      return q;
    };
    ImGui::Text("original %s   edited %s", name(li.regenerated_tokens).c_str(), name(d.edited_tokens).c_str());
  } else if (!li.regenerated.empty()) {
    ImGui::Text("original %s   edited %s", orig, d.edited.empty() ? "-" : edit);
  }
  ImGui::EndTooltip();
}

// ---- the scrolled grid ----

struct Hover {
  int t = -1, h = -1;  // column, and heatmap row (-1: the mouse is not on a heatmap cell)
};

Hover hover_of(const Grid& g, bool window_hovered) {
  Hover hv;
  const ImVec2 m = ImGui::GetIO().MousePos;
  if (!window_hovered || m.y < g.origin.y || m.y >= g.origin.y + g.total_h) return hv;
  const int t = int(std::floor((m.x - g.origin.x) / g.cell_w));
  if (t < 0 || t >= g.cols) return hv;
  hv.t = t;
  const int h = int(std::floor((m.y - g.origin.y - g.y_heat) / g.cell_h));
  if (t < g.T && h >= 0 && h < g.H) hv.h = h;
  return hv;
}

void draw_edited_row(ImDrawList* dl, const Grid& g, const LatentPanelData& d, char target, int prompt_len) {
  const float y = g.origin.y + g.y_edit;
  // After a character-level prompt; a model file's prompt (a chat template) may be wider than the view.
  const float hint_x = g.labels.empty() ? g.origin.x + float(prompt_len) * g.cell_w + 6 : g.origin.x + 6;
  const ImVec2 hint_at(hint_x, y + (g.row_h - ImGui::GetFontSize()) * 0.5f);
  char buf[96];
  if (d.regenerating) {
    std::snprintf(buf, sizeof buf, "regenerating%s", ellipsis(ImGui::GetFont()));
    dl->AddText(hint_at, kGutterText, buf);
  } else if (d.flips.empty()) {
    dl->AddText(hint_at, kGutterText, "click a heatmap cell to flip that bit of Z_t");
  } else if (g.labels.empty() ? d.edited.empty() : d.edited_tokens.empty()) {
    dl->AddText(hint_at, kGutterText, "no edited generation for these flips");
  } else if (g.labels.empty()) {
    draw_text_row(dl, g, y, d.edited, &d.inspection->regenerated, target, prompt_len);
  } else {
    draw_label_row(dl, g, y, d.edited_tokens, &d.inspection->regenerated_tokens, prompt_len);
  }
}

void draw_columns(ImDrawList* dl, const Grid& g, const LatentPanelData& d, const Hover& hv) {
  const ftx::LatentInspection& li = *d.inspection;
  const char target = g.labels.empty() ? target_letter(li.text) : 0;
  const int prompt_len =
      std::min(g.labels.empty() ? prompt_length(li.text) : common_prefix(li.tokens, li.regenerated_tokens), g.cols);
  if (prompt_len > 0)
    for (float y : {g.y_seq, g.y_orig, g.y_edit})
      dl->AddRectFilled(ImVec2(g.origin.x, g.origin.y + y),
                        ImVec2(g.origin.x + prompt_len * g.cell_w, g.origin.y + y + g.row_h),
                        IM_COL32(255, 255, 255, 14), 2.0f);
  if (hv.t >= 0) {
    const float x = g.origin.x + float(hv.t) * g.cell_w;
    dl->AddRectFilled(ImVec2(x, g.origin.y), ImVec2(x + g.cell_w, g.origin.y + g.total_h), IM_COL32(255, 255, 255, 20));
  }
  if (g.labels.empty())
    draw_text_row(dl, g, g.origin.y + g.y_seq, li.text, nullptr, target, prompt_len);
  else
    draw_label_row(dl, g, g.origin.y + g.y_seq, li.tokens, nullptr, prompt_len);
  for (int t = 0; t < g.T; ++t)
    for (int h = 0; h < g.H; ++h) draw_cell(dl, g, d, t, h);
  if (hv.h >= 0) {
    const ImVec2 a(g.origin.x + float(hv.t) * g.cell_w, g.origin.y + g.y_heat + float(hv.h) * g.cell_h);
    dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(a.x + g.cell_w, a.y + g.cell_h), IM_COL32_WHITE, 0, 0, 1.5f);
  }
  draw_kl_bars(dl, g, d);
  draw_codes(dl, g, d);
  if (!g.regen) return;
  if (g.labels.empty())
    draw_text_row(dl, g, g.origin.y + g.y_orig, li.regenerated, nullptr, target, prompt_len);
  else
    draw_label_row(dl, g, g.origin.y + g.y_orig, li.regenerated_tokens, nullptr, prompt_len);
  draw_edited_row(dl, g, d, target, prompt_len);
}

void draw_grid(const LatentPanelData& d, LatentPanelActions& act) {
  Grid g = make_grid(d);
  const ImGuiStyle& style = ImGui::GetStyle();
  const float content_w = float(g.cols) * g.cell_w + 2;
  const bool scrolls = content_w > ImGui::GetContentRegionAvail().x - g.gutter_w;
  const ImVec2 at = ImGui::GetCursorScreenPos();
  draw_gutter(ImGui::GetWindowDrawList(), g, d, at);
  ImGui::SetCursorScreenPos(ImVec2(at.x + g.gutter_w, at.y));
  ImGui::BeginChild("##latent_grid", ImVec2(0, g.total_h + (scrolls ? style.ScrollbarSize : 0)), false,
                    ImGuiWindowFlags_HorizontalScrollbar);
  g.origin = ImGui::GetCursorScreenPos();
  ImGui::SetCursorScreenPos(ImVec2(g.origin.x, g.origin.y + g.y_heat));
  ImGui::InvisibleButton("##heatmap", ImVec2(std::max(1.0f, float(g.T) * g.cell_w), float(g.H) * g.cell_h));
  const bool clicked = ImGui::IsItemClicked(ImGuiMouseButton_Left);
  ImGui::SetCursorScreenPos(g.origin);
  ImGui::Dummy(ImVec2(content_w, g.total_h));
  // The heatmap button is the active item while pressed; the window still counts as hovered.
  const Hover hv = hover_of(g, ImGui::IsWindowHovered(ImGuiHoveredFlags_AllowWhenBlockedByActiveItem));
  draw_columns(ImGui::GetWindowDrawList(), g, d, hv);
  if (hv.h >= 0) {
    if (g.regen) ImGui::SetMouseCursor(ImGuiMouseCursor_Hand);
    cell_tooltip(d, hv.t, hv.h);
    if (clicked && g.regen) act.toggle_t = hv.t, act.toggle_h = hv.h;
  } else if (hv.t >= 0) {
    column_tooltip(d, hv.t);
  }
  const ImVec2 wp = ImGui::GetWindowPos(), ws = ImGui::GetWindowSize();
  act.heatmap = {true, g.origin.x, g.origin.y + g.y_heat, g.cell_w, g.cell_h, wp.x, wp.y, wp.x + ws.x, wp.y + ws.y};
  ImGui::EndChild();
}

// Positions where two sequences differ (one past the other's end counts), and the longer length.
template <class Seq>
std::pair<int, size_t> differences(const Seq& a, const Seq& b) {
  int differ = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) differ += i >= a.size() || i >= b.size() || a[i] != b[i];
  return {differ, std::max(a.size(), b.size())};
}

// A kind's badge (kind_style.h) at the cursor, on the current line.
void kind_badge(std::optional<ftx::TextKind> kind) {
  const uint32_t rgb = kind_rgb(kind);
  const char* s = kind_badge_text(kind);
  const ImVec2 size = ImGui::CalcTextSize(s), at = ImGui::GetCursorScreenPos();
  const float pad = 5, h = ImGui::GetTextLineHeight() + 2;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(at, ImVec2(at.x + size.x + 2 * pad, at.y + h),
                    IM_COL32((rgb >> 16) & 0xff, (rgb >> 8) & 0xff, rgb & 0xff, 255), 3.0f);
  dl->AddText(ImVec2(at.x + pad, at.y + 1), IM_COL32_WHITE, s);
  ImGui::Dummy(ImVec2(size.x + 2 * pad, h));
}

// For a run whose data has kinds: the original generation's kind, then the edited one's once it
// is computed, marked in the flip colour when the flips changed it.
void draw_kinds(const LatentPanelData& d, bool edited) {
  const ftx::LatentInspection& li = *d.inspection;
  if (!li.judges_kinds || li.regenerated.empty()) return;
  ImGui::Spacing();
  ImGui::TextUnformatted("kind of the original");
  ImGui::SameLine();
  kind_badge(li.regenerated_kind);
  ImGui::SameLine();
  if (d.flips.empty() || d.regenerating || !edited) {
    ImGui::TextDisabled("%s", d.flips.empty() ? "  flip bits: does the edited generation change kind?" : "");
  } else {
    ImGui::Text("%s edited", arrow(ImGui::GetFont()));
    ImGui::SameLine();
    kind_badge(d.edited_kind);
    ImGui::SameLine(0, 14);
    if (d.edited_kind != li.regenerated_kind)
      ImGui::TextColored(ImColor(kFlipAccent), "the flip%s changed the kind: %s %s %s", d.flips.size() == 1 ? "" : "s",
                         kind_badge_text(li.regenerated_kind), arrow(ImGui::GetFont()), kind_badge_text(d.edited_kind));
    else
      ImGui::TextDisabled("same kind");
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "Judged by rules on the syntax of the generated text (after the prompt), as ftx generate --kinds "
        "judges; ? is unknown");
}

void draw_summary(const LatentPanelData& d) {
  const std::string& a = d.inspection->regenerated;
  const bool tokens = !d.inspection->tokens.empty();
  const bool edited = tokens ? !d.edited_tokens.empty() : !d.edited.empty();
  const auto [differ, n] =
      tokens ? differences(d.inspection->regenerated_tokens, d.edited_tokens) : differences(a, d.edited);
  draw_kinds(d, edited);
  ImGui::Spacing();
  if (!d.flips.empty() && !d.regenerating && edited)
    ImGui::Text("%zu bit%s flipped: the edited generation differs from the original at %d of %zu %s", d.flips.size(),
                d.flips.size() == 1 ? "" : "s", differ, n, tokens ? "tokens" : "positions");
  const ftx::LatentInspection& li = *d.inspection;
  if (!li.batch_kl.empty()) {
    ImGui::TextColored(ImColor(kBatchKlLine), "line: mean KL per position over %d held-out sequences",
                       li.batch_sequences);
    if (!li.position_budget.empty()) {
      ImGui::SameLine(0, 18);
      ImGui::TextColored(ImColor(kBudgetLine), "dots: what telling the target's start at each position costs");
    }
    ImGui::TextDisabled("dashes: %s, the free bits per position (%s)", kappa_symbol(ImGui::GetFont()),
                        li.free_bits == "per-pair" ? "per pair: each sequence's bar counts alone"
                                                   : "batch mean: the line counts, not one sequence's bars");
  }
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  if (a.empty())
    ImGui::TextWrapped(
        "The encoder read the whole text at once (as in training): per token, the probability of each bit of "
        "Z_t, the sampled code and its KL to the uniform prior. Shift + wheel scrolls sideways.");
  else
    ImGui::TextWrapped(
        "Original and edited: generated from the same prompt with the same token seed; edited uses the "
        "sampled codes with the outlined bits flipped. Shift + wheel scrolls sideways.");
  ImGui::PopStyleColor();
}

}  // namespace

LatentPanelActions draw_latent_panel(const LatentPanelData& d) {
  LatentPanelActions act;
  const ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(io.DisplaySize);
  ImGui::Begin("##latent", nullptr,
               ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoMove |
                   ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  const std::string error = d.inspection ? validation_error(*d.inspection) : std::string();
  if (d.inspection == nullptr && !d.message.empty()) ImGui::TextColored(kMessageColour, "%s", d.message.c_str());
  if (d.inspection == nullptr) {
    centred_text(
        d.empty_text.empty() ? "Pick a run with a latent (H > 0) in Runs, then a sequence" : d.empty_text.c_str(),
        kGutterText);
  } else if (!error.empty()) {
    centred_text(error.c_str(), kNoiseChar);
  } else {
    draw_header(d, act);
    draw_grid(d, act);
    draw_summary(d);
  }
  ImGui::End();
  return act;
}

}  // namespace ftx
