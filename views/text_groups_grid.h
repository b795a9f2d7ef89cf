// TextGroupsGrid: the generations of a model file as groups side by side, the way Figure 4 of the
// paper sets them out for the synthetic task: the independent-Z group (each sequence its own Z)
// first, then the fixed-Z groups (one Z shared by the group's sequences), one word-wrapped cell
// per sequence. Text streams into the cells: append() only records it and marks the cell, and the
// cells are redrawn at most once a frame, however many tokens arrive. Clicking a cell asks for
// its latent (row_activated).
//
// Deliberately not here: generation, seeds or requests (TextGenerationsView), the prompt.
#pragma once
#include <QString>
#include <QTimer>
#include <QWidget>
#include <set>
#include <vector>

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

 signals:
  void row_activated(int seq);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void clear_groups();
  QWidget* make_group(const ftx::TextGroup& g, const TextJobPlan& plan);

  QLabel* caption_ = nullptr;
  QLabel* placeholder_ = nullptr;
  QWidget* groups_box_ = nullptr;
  QHBoxLayout* groups_layout_ = nullptr;
  std::vector<QLabel*> cells_;
  std::vector<QString> texts_;
  std::set<int> dirty_;
  QTimer frame_;
  int redraws_ = 0;
};

}  // namespace ftx
