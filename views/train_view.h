// TrainView: the Train dock. A form that produces TrainRequests (dataset, a token file for text,
// a model to start from or a preset or custom size and H, kappa in bits with its value in nats,
// steps, batch, lr, seed, device), the run controls
// (Start, Pause, Resume, Stop, Step once), a live kappa change, and a kappa sweep (one run per
// value, one after another). Typed values are checked as they are typed; a bad one is marked
// and named in the message line, and nothing starts.
//
// Deliberately not here: training (StudioController hands requests to core::Session), the
// curves (Curves dock).
#pragma once
#include <QWidget>
#include <optional>
#include <vector>

#include "core/session/session.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QSpinBox;
class QLineEdit;
class QLabel;
class QPushButton;
class QProgressBar;

namespace ftx {

class TrainView : public QWidget {
  Q_OBJECT
 public:
  explicit TrainView(QWidget* parent = nullptr);
  void set_db_path(const QString& db) { db_path_ = db; }
  void set_cuda_available(bool on);
  // The request the form describes now (run name from the form), or an error for the message line.
  ftx::Result<ftx::TrainRequest> request() const;
  void set_run_name(const QString& name);
  void set_steps(int steps);

 public slots:
  void show_snapshot(const ftx::SessionSnapshot& s);
  void show_error(const QString& message);
  void start();
  void start_sweep();

 signals:
  void start_requested(std::vector<ftx::TrainRequest> requests);
  void pause_requested();
  void resume_requested();
  void stop_requested();
  void step_requested();
  void kappa_requested(float kappa_nats);

 private:
  void update_kappa_label();
  void update_preset();
  void take_recorded_kappa();
  QWidget* build_form();
  QWidget* build_controls();

  QString db_path_;
  QComboBox *dataset_, *preset_, *device_, *free_bits_, *routing_;
  QSpinBox *layers_, *dim_, *heads_, *bits_, *steps_, *batch_, *seed_;
  QSpinBox* seq_len_;
  QLineEdit *kappa_, *lr_, *name_, *sweep_, *text_data_, *init_;
  QLabel *kappa_nats_, *status_, *message_;
  QPushButton *start_, *pause_, *resume_, *stop_, *step_, *set_kappa_, *sweep_start_;
  QDoubleSpinBox* capacity_;
  QCheckBox* threshold_;  // routing sdt|stt: --route-mode threshold
  QDoubleSpinBox* g_th_;  // its --g-th
  QProgressBar* progress_;
};

}  // namespace ftx
