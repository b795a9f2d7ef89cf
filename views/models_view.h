// ModelsView: the "Models" section of the Runs dock. Every model file opened in this window (a
// Hugging Face checkpoint directory, a GGUF file, a random-weight Free Transformer) with its
// name, architecture and shape, parameter count, format and whether it is a Free Transformer (its
// latent bits H) or a plain decoder; loading shows as a progress bar and a status per row, a
// failed open as one red line. Requests leave as signals.
//
// Deliberately not here: opening or loading (ModelWorker, on its thread), what a model generates.
#pragma once
#include <QString>
#include <QWidget>
#include <cstdint>
#include <map>
#include <memory>

#include "core/io/model_file.h"

class QLabel;
class QProgressBar;
class QPushButton;
class QTableWidget;

namespace ftx {

class ModelsView : public QWidget {
  Q_OBJECT
 public:
  enum Column { kName, kLatent, kParams, kFormat, kStatus, kArchitecture, kColumns };
  explicit ModelsView(QWidget* parent = nullptr);

  // A row for model `id` while it opens ("opening…"); its headers arrive with set_info.
  void add_model(int id, const QString& path);
  void set_info(int id, std::shared_ptr<const ftx::ModelInfo> info);
  void set_progress(int id, qint64 done, qint64 total);
  void set_loaded(int id, double seconds);
  // Removes the row and shows `message` (one line) in red under the table.
  void set_failed(int id, const QString& message);
  void remove_model(int id);
  void select(int id);
  int current_model() const;  // -1 when none is selected
  bool loaded(int id) const;
  int row_of(int id) const;
  QTableWidget* table() const { return table_; }
  QString message() const;

  // "135 M", "1.24 B", "812 k" (parameters).
  static QString params_text(int64_t n);
  // "llama · 30 layers · dim 576 · 9/3 heads"
  static QString architecture_text(const ftx::ModelConfig& c);
  // "Free Transformer, H = 8" or "plain decoder (no Z)"
  static QString latent_text(const ftx::ModelConfig& c);

 signals:
  void open_requested();
  void random_requested(int tokenizer_of);  // a random Free Transformer with this model's tokenizer
  void generations_requested(int id);
  void latent_requested(int id);
  void close_requested(int id);

 private:
  void set_status(int id, const QString& status);
  void update_buttons();

  QTableWidget* table_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* message_ = nullptr;
  QPushButton *random_ = nullptr, *generations_ = nullptr, *latent_ = nullptr, *close_ = nullptr;
  std::map<int, bool> loaded_;  // id -> loaded
  int loading_ = -1;            // the model the progress bar follows
};

}  // namespace ftx
