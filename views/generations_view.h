// GenerationsView: the studio's Figure 4 page (the paper's Figure 4; metrics: docs/figure4.md). Controls
// pick a run, a checkpoint step, a prompt and the group sizes, and ask the owner for generations
// through signals; the owner computes them on its worker thread and calls back show_groups /
// show_comparison / show_error. The groups are drawn by a SequenceGrid; "Kappa comparison" shows
// the same prompt for every run of a kappa sweep, one column per run. Exports: PNG, plain text and
// JSON of what is shown.
//
// Deliberately not here: the model, sampling, metrics (all arrive computed in ftx::GroupView),
// threads, and knowledge of where runs come from (the owner fills the selectors).
#pragma once
#include <QList>
#include <QString>
#include <QStringList>
#include <QWidget>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/explore/explorer.h"
#include "core/text/tokenizer.h"
#include "views/meta_types.h"

class QComboBox;
class QJsonObject;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;

namespace ftx {

class SequenceGrid;

class GenerationsView : public QWidget {
  Q_OBJECT
 public:
  explicit GenerationsView(QWidget* parent = nullptr);

  void set_runs(const QStringList& runs);
  // The checkpoint steps of `run`; the latest is selected unless the user picked another one.
  void set_steps(const QString& run, const QList<int>& steps);
  // The runs' tokenizer: a prompt it cannot encode is refused with its reason. Immutable and
  // shared, like the GroupViews this view draws; null accepts any prompt.
  void set_tokenizer(std::shared_ptr<const ftx::Tokenizer> tokenizer);
  // The runs shown side by side by "Kappa comparison" (their latest checkpoints).
  void set_sweep_runs(const QStringList& runs);
  // Selects `run` (when listed) and generates its groups, as Resample Z does.
  void select_run(const QString& run);
  bool save_png(const QString& path);

 signals:
  void run_changed(QString run);  // the run selector moved (the owner may answer with set_steps)
  void figure4_requested(QString run, int step, ftx::Figure4Request req);
  void freeze_requested(QString run, int step, QString prompt, std::vector<ftx::GroupView> groups, quint64 sample_seed,
                        float temperature);
  void comparison_requested(QStringList runs, ftx::Figure4Request req);

 public slots:
  void show_groups(QString run, int step, std::vector<ftx::GroupView> groups);
  // columns: (caption naming the run and its kappa, that run's groups), one per sweep run.
  void show_comparison(GroupColumns columns);
  void show_error(QString message);
  void set_busy(bool busy);

 private:
  QWidget* build_selectors();
  QWidget* build_buttons();
  void on_run_changed();
  void on_prompt_edited();
  void on_resample();
  void on_freeze();
  void on_new_prompt();
  void on_comparison_toggled(bool on);
  void on_export_png();
  void on_export_text();
  bool prompt_ok(QString* problem) const;
  bool check_prompt();
  ftx::Figure4Request make_request(int fixed_groups);
  QString current_run() const;
  int current_step() const;  // -1: the run has no known steps (the owner loads its latest)
  void fill_steps(const QString& run);
  void set_message(const QString& text, bool error);
  void update_enabled();
  void show_current();
  QString groups_caption() const;
  QString columns_caption() const;
  QString export_base_name() const;
  QJsonObject export_json() const;
  QString export_text() const;

  QComboBox* run_box_ = nullptr;
  QComboBox* step_box_ = nullptr;
  QLineEdit* prompt_edit_ = nullptr;
  QSpinBox* fixed_spin_ = nullptr;
  QSpinBox* size_spin_ = nullptr;
  QDoubleSpinBox* temperature_spin_ = nullptr;
  QComboBox* router_box_ = nullptr;  // routed runs: the student router or the teacher
  QPushButton* resample_button_ = nullptr;
  QPushButton* freeze_button_ = nullptr;
  QPushButton* new_prompt_button_ = nullptr;
  QPushButton* comparison_button_ = nullptr;
  QPushButton* png_button_ = nullptr;
  QPushButton* text_button_ = nullptr;
  QLabel* message_ = nullptr;
  QLabel* by_start_ = nullptr;  // agreement by target start of the shown fixed-Z groups
  SequenceGrid* grid_ = nullptr;

  std::map<QString, QList<int>> steps_;  // per run, ascending
  std::shared_ptr<const ftx::Tokenizer> tokenizer_;
  QStringList sweep_runs_;
  uint64_t next_seed_ = 1;  // bumped by every request: new latent and sample seeds
  bool busy_ = false;
  bool message_is_error_ = false;

  // The last request sent; a reply (show_groups / show_comparison) is taken to answer it.
  ftx::Figure4Request pending_;
  bool pending_frozen_ = false;
  // The groups of the normal mode and the columns of the comparison, as last received.
  ftx::Figure4Request groups_request_;
  bool groups_frozen_ = false;
  QString groups_run_;
  int groups_step_ = -1;
  std::vector<ftx::GroupView> groups_;
  ftx::Figure4Request columns_request_;
  GroupColumns columns_;
};

}  // namespace ftx
