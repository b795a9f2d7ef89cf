// ComputeView: the studio's Compute view, what a routed model (docs/subjective_depth.md) computed on
// one sequence. A grid of blocks x tokens: a dense block's cells are all lit grey; a routed
// block's computed cells are coloured by the write-back gate g (dark blue at the block's lowest
// gate on the sequence to yellow at its highest, the range written above) and its skipped cells
// are left open. Under the grid, the tokens, then one surprise strip per SDT/STT block (s_ce and
// s_cu, the gate's two parts, as bars on the strip's own range). Hovering a cell shows its token, whether
// the block ran on it, g, and D_st, D_ch, MA, s_ce, s_cu where the router has them. Under the
// strips, on the synthetic task, each routed block's gate AUROC for the target's start, its
// letters and the '!' noise against '_', with the shares of each that the block computed.
//
// Deliberately not here: running the model (the explore worker), choosing the run or sequence.
#pragma once
#include <QRect>
#include <QString>
#include <QStringList>
#include <QWidget>
#include <optional>

#include "core/explore/compute.h"

namespace ftx {

class ComputeView : public QWidget {
  Q_OBJECT

 public:
  explicit ComputeView(QWidget* parent = nullptr);
  void set_inspection(const ftx::ComputeInspection& ci, QString run, int step);
  void set_message(QString message);  // one status line; an empty one clears it
  const std::optional<ftx::ComputeInspection>& inspection() const { return ci_; }
  // The cell (block, position) under a point of the widget, for hover and tests; nullopt outside the grid.
  std::optional<std::pair<int, int>> cell_at(QPoint p) const;
  QString cell_text(int block, int pos) const;  // what hovering that cell shows

 protected:
  void paintEvent(QPaintEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;

 private:
  struct Layout {
    QRect grid;  // the cells
    int cell_w = 0, cell_h = 0;
    int label_w = 0;  // block labels, left of the grid
  };
  Layout layout() const;  // cached for the widget's width and the inspection shown
  QString token_label(int pos) const;
  QStringList header_lines() const;  // run and router, the path shown, the gate's colour scale

  std::optional<ftx::ComputeInspection> ci_;
  mutable std::optional<std::pair<int, Layout>> layout_;  // (width, its layout)
  QString run_, message_;
  int step_ = 0;
};

}  // namespace ftx
