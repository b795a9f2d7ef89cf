// TextGenerationsView: the Generations page for model files (the Models of the Runs dock): a free
// text prompt (in the model's chat format when it has one and Chat is ticked), max new tokens,
// temperature, top-p and seed; Generate asks for one batch of groups side by side (for a Free
// Transformer the independent-Z group and the fixed-Z groups, for a plain decoder one group of
// samples) and the text streams into the grid; Stop cancels; Resample Z draws new latent seeds
// for the same prompt (token seeds kept), Freeze Z keeps every Z and draws new token seeds.
// Clicking a generation asks for its latent (prompt + that text) in the Latent view. Kinds marks
// each finished generation with the kind of text it is (python, c, perl, prose or "?") and each
// group with its validity and kind agreement (TextGroupsGrid), without generating again.
//
// Deliberately not here: tokenizing, planning or generating (ModelWorker on its thread, with
// core/explore/text_explorer.h), knowing where models come from (the owner adds them).
#pragma once
#include <QString>
#include <QWidget>
#include <map>
#include <memory>
#include <optional>

#include "views/model_worker.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;

namespace ftx {

class TextGroupsGrid;

class TextGenerationsView : public QWidget {
  Q_OBJECT
 public:
  explicit TextGenerationsView(QWidget* parent = nullptr);

  // A loaded model becomes selectable (and selected when it is the first).
  void add_model(int id, std::shared_ptr<const ftx::ModelInfo> info);
  void remove_model(int id);
  void select_model(int id);
  int current_model() const;  // -1: none
  void set_prompt(const QString& prompt);
  // The controls, as a user would set them (the Lessons view's "Generate in Models (text)");
  // values are clamped to the controls' ranges.
  void set_max_new_tokens(int n);
  void set_groups(int fixed_groups, int group_size);
  void set_sampling(double temperature, double top_p);
  void set_kinds_shown(bool shown);  // ticks or unticks Kinds
  bool kinds_shown() const;
  // Generate / Resample Z / Freeze Z as the buttons do; false (with the reason shown) when
  // nothing was requested.
  bool generate();
  bool resample_z();
  bool freeze_z();
  void stop();

  bool busy() const { return running_.has_value(); }
  const std::optional<TextJob>& last_job() const { return last_job_; }
  const std::optional<TextJobPlan>& last_plan() const { return plan_; }
  QString notice() const;  // the line about the model's latent (or its absence)
  QString status() const;
  TextGroupsGrid* grid() const { return grid_; }

 signals:
  void generate_requested(TextJob job);
  void stop_requested(quint64 job);
  // The latent of a generation: prompt (as the model was given it) + its text; the prompt's bytes.
  void inspect_requested(int model, QString text, int prompt_bytes);
  void generation_done(int model);  // a job ended with text (not an error)

 public slots:
  void on_planned(TextJobPlan plan);
  void on_text(quint64 job, TextPieces pieces);
  void on_finished(TextJobResult result);

 private:
  QWidget* build_controls();
  QWidget* build_buttons();
  void on_model_changed();
  bool send(TextJob job);
  void fill_sample(TextJob& job) const;
  std::shared_ptr<const ftx::ModelInfo> info(int id) const;
  void set_status(const QString& text, bool error);
  void update_enabled();
  QString caption(const TextJob& job, const TextJobPlan& plan) const;

  QComboBox* model_box_ = nullptr;
  QPlainTextEdit* prompt_ = nullptr;
  QCheckBox *chat_ = nullptr, *kinds_ = nullptr;
  QSpinBox *max_new_ = nullptr, *seed_ = nullptr, *group_size_ = nullptr, *fixed_groups_ = nullptr;
  QDoubleSpinBox *temperature_ = nullptr, *top_p_ = nullptr;
  QPushButton *generate_ = nullptr, *stop_ = nullptr, *resample_ = nullptr, *freeze_ = nullptr;
  QLabel *notice_ = nullptr, *status_ = nullptr;
  TextGroupsGrid* grid_ = nullptr;

  std::map<int, std::shared_ptr<const ftx::ModelInfo>> models_;
  quint64 next_job_ = 0;
  std::optional<TextJob> running_;   // the job whose replies are awaited
  std::optional<TextJob> last_job_;  // the last job sent (what Resample Z and Freeze Z start from)
  std::optional<TextJobPlan> plan_;  // the shown plan
  int streamed_ = 0;                 // pieces received for the running job
};

}  // namespace ftx
