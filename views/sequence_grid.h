// SequenceGrid: paints groups of generated sequences the way Figure 4 of the paper shows them
// (docs/figure4.md): one block per group with its header ("Independent Z" / "Fixed Z #k") and
// metrics, then one monospace row per sequence, target letters on a colour per letter, noise '!'
// dimmed, '_' faint, invalid rows marked in red. Blocks flow side by side and wrap to the next line
// when the width runs out (height for width, so it sits in a QScrollArea). Hover tooltips give a
// row's seeds and the latent code at the hovered position.
//
// Deliberately not here: metrics or validity (they arrive computed in ftx::GroupView), requests,
// controls. The grid only draws what it is given.
#pragma once
#include <QFont>
#include <QString>
#include <QWidget>
#include <vector>

#include "core/explore/explorer.h"
#include "views/meta_types.h"

namespace ftx {

class SequenceGrid : public QWidget {
  Q_OBJECT
 public:
  explicit SequenceGrid(QWidget* parent = nullptr);

  // One block per group, the caption above them all.
  void set_groups(const std::vector<ftx::GroupView>& groups, const QString& caption);
  // One block per column: its caption, then its groups stacked; the caption above them all.
  void set_columns(const GroupColumns& columns, const QString& caption);
  // Clears the grid and shows `text` in its place.
  void set_placeholder(const QString& text);
  void set_cell_point_size(double points);
  void set_compact(bool compact);  // shorter group headers, for narrow columns
  bool save_png(const QString& path);

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;
  bool hasHeightForWidth() const override;
  int heightForWidth(int width) const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;
  bool event(QEvent* event) override;
  void changeEvent(QEvent* event) override;

 private:
  struct Block {
    QString caption;  // empty: none
    std::vector<ftx::GroupView> groups;
  };
  struct PlacedText {
    QRectF rect;
    QString text;
  };
  struct PlacedGroup {
    QRectF rect;  // frame: header and rows
    const ftx::GroupView* group = nullptr;
  };
  struct PlacedRow {
    QRectF rect;        // the whole row, marker included
    double text_x = 0;  // where the first character starts
    const ftx::GroupRow* row = nullptr;
    int index = 0;  // row number in its group
  };
  struct Layout {
    int width = 0, height = 0;
    std::vector<PlacedText> captions;
    std::vector<PlacedGroup> groups;
    std::vector<PlacedRow> rows;
  };
  struct Metrics {  // sizes in pixels, from the fonts
    double cell_w = 0, cell_h = 0, header_h = 0, caption_h = 0, block_w = 0;
  };

  Metrics metrics() const;
  Layout layout_for_width(int width) const;
  double place_block(const Block& block, double x, double y, const Metrics& m, Layout& out) const;
  void relayout();
  void paint_group(QPainter& p, const PlacedGroup& g, const Metrics& m) const;
  void paint_row(QPainter& p, const PlacedRow& r, const Metrics& m, bool hovered) const;
  const PlacedRow* row_at(const QPointF& pos) const;
  QString tooltip_at(const QPointF& pos, QRect* area) const;

  std::vector<Block> blocks_;
  QString caption_;
  QString placeholder_;
  QFont cell_font_;
  Layout layout_;
  int text_columns_ = 66;  // the longest row, in tokens
  bool compact_ = false;
  int hovered_ = -1;  // index in layout_.rows
};

}  // namespace ftx
