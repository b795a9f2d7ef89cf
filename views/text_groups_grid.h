// TextGroupsGrid: the generations of a model file as groups side by side, the way Figure 4 of the
// paper sets them out for the synthetic task: the independent-Z group (each sequence its own Z)
// first, then the fixed-Z groups (one Z shared by the group's sequences), one word-wrapped cell
// per sequence. Text streams into the cells: append() only records it and marks the cell, and the
// cells are redrawn at most once a frame, however many tokens arrive. Clicking a cell asks for
// its latent (row_activated).
// Kinds (issue 24): every generation is judged by core/eval/text_kind.h's classify_text_kind when
// it ends (set_result: its generated text, never the prompt, never a streamed half); with kinds
// shown, each cell carries a coloured badge (python, c, perl, prose, a grey "?" for unknown) and
// each group a line with its validity and kind agreement (kind_agreement). Showing or hiding them
// redraws nothing else and regenerates nothing.
//
// Deliberately not here: generation, seeds or requests (TextGenerationsView), the prompt, the
// classifier's rules (core/eval/text_kind.h), the measured numbers of many groups (the Lessons view).
#pragma once
#include <QString>
#include <QTimer>
#include <QWidget>
#include <optional>
#include <set>
#include <vector>

#include "core/eval/text_kind.h"
#include "views/model_worker.h"

class QLabel;
class QHBoxLayout;

namespace ftx {

class TextGroupsGrid : public QWidget {
  Q_OBJECT
 public:
  explicit TextGroupsGrid(QWidget* parent = nullptr);

  // Empty cells for every sequence of the plan, under `caption`.
  void set_plan(const TextJobPlan& plan, const QString& caption);
  // Pieces of text, appended to their cells at the next frame.
  void append(const TextPieces& pieces);
  // Each sequence's final text (replacing what streamed in) and why it ended.
  void set_result(const TextJobResult& result);
  void set_placeholder(const QString& text);
  void set_caption(const QString& caption);

  int sequences() const { return static_cast<int>(texts_.size()); }
  QString text(int seq) const;
  QString cell_text(int seq) const;  // what the cell shows now (for tests)
  int redraws() const { return redraws_; }
  void flush();  // draws pending text now

  // Kind badges and each group's kind line, shown or hidden.
  void set_kinds_shown(bool shown);
  bool kinds_shown() const { return kinds_shown_; }
  // The kind judged for a sequence once it ended (nullopt inside: unknown); nullopt before.
  std::optional<std::optional<ftx::TextKind>> kind(int seq) const;
  // What is shown (for tests): a cell's badge ("python", ..., "?"; "…" before the sequence ends;
  // empty when hidden), a group's kind line (empty when hidden), by the group's place in the plan.
  QString badge_text(int seq) const;
  QString group_kinds_text(int group) const;
  int groups() const { return static_cast<int>(groups_.size()); }

  // The badge's words and colours, shared with the Lessons view's legend: "python", "c", "perl",
  // "prose", "?" for unknown; white on a colour, legible on light and dark palettes alike (the
  // table is kind_style.h's, which the Latent panel draws with too).
  static QString kind_label(std::optional<ftx::TextKind> kind);
  static QString kind_colour(std::optional<ftx::TextKind> kind);
  static QString kind_badge_html(std::optional<ftx::TextKind> kind);  // for rich-text labels

 signals:
  void row_activated(int seq);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  struct GroupCells {
    int first = 0, size = 0;
    QLabel* kinds_line = nullptr;  // validity and agreement, under the group's title
  };
  void clear_groups();
  QWidget* make_group(const ftx::TextGroup& g, const TextJobPlan& plan);
  void update_kinds();  // badges and kind lines as judged, shown or hidden

  QLabel* caption_ = nullptr;
  QLabel* legend_ = nullptr;  // the badges' colours, above the groups while kinds are shown
  QLabel* placeholder_ = nullptr;
  QWidget* groups_box_ = nullptr;
  QHBoxLayout* groups_layout_ = nullptr;
  std::vector<QLabel*> cells_;
  std::vector<QLabel*> badges_;  // one per cell, in its top-left corner
  std::vector<QString> texts_;
  std::vector<GroupCells> groups_;
  std::vector<std::optional<std::optional<ftx::TextKind>>> kinds_;  // per sequence, once it ended
  bool kinds_shown_ = false;
  std::set<int> dirty_;
  QTimer frame_;
  int redraws_ = 0;
};

}  // namespace ftx
