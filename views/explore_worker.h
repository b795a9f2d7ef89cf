// ExploreWorker: runs the explorer (core/explore) for the Generations, Latent, Compute and Lessons views on
// its own thread, so a generation never blocks the window. Requests arrive as queued slot calls,
// results leave as signals. Loaded models are cached per checkpoint directory. Bit flips from the
// Latent view are coalesced: only the newest set of flips is computed. A text run whose token file
// has DATA.kinds.json beside it judges its Latent generations' kinds (ExplorerModel::judges_kinds).
//
// Deliberately not here: drawing, the choice of what to show (the views ask), training.
#pragma once
#include <QObject>
#include <QString>
#include <QStringList>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/eval/figure4.h"
#include "core/explore/explorer.h"
#include "views/meta_types.h"

namespace ftx {

using BitFlips = std::vector<std::pair<int, int>>;

class ExploreWorker : public QObject {
  Q_OBJECT
 public:
  ExploreWorker(QString db_path, ftx::DatasetFactory datasets);
  ~ExploreWorker() override;
  // Thread-safe (call from the UI thread): compute the newest flips of the last inspection.
  void request_edit(const BitFlips& flips);

 public slots:
  void figure4(QString run, int step, ftx::Figure4Request req);  // step < 0: latest checkpoint
  void freeze(QString run, int step, QString prompt, std::vector<ftx::GroupView> groups, quint64 sample_seed,
              float temperature);
  void comparison(QStringList runs, ftx::Figure4Request req);
  void inspect(QString run, int step, QString text, quint64 seed);  // empty text: a validation-like sequence
  // The Compute view: a routed run's blocks on `text` (empty: a held-out sequence picked by seed),
  // with the gate's event AUROCs on the synthetic task.
  void compute(QString run, int step, QString text, quint64 seed, bool student);
  void coinflip(quint64 seed);
  void kappa_lesson(quint64 seed);
  // The "Z picks the document" lesson: the runs kinds-free and kinds-baseline as the store holds
  // them (latest checkpoint, its kinds/... metrics, val/ce_prior) and the model folder to open.
  void kinds_lesson();

 signals:
  void groups_ready(QString run, int step, std::vector<ftx::GroupView> groups);
  void comparison_ready(GroupColumns columns);
  void latent_ready(ftx::LatentInspection inspection, QString run, int step);
  void edited_ready(ftx::LatentGeneration edited);
  void compute_ready(ftx::ComputeInspection inspection, QString run, int step);
  void coinflip_ready(ftx::CoinflipLesson lesson, double eps, QString baseline_run, QString free_run);
  // measured: per column, the stored Figure 4 numbers (ftx sweep / the shipped models) of the
  // checkpoint shown, as one line; empty when that checkpoint was never measured.
  void kappa_lesson_ready(GroupColumns columns, std::vector<double> kappa_bits, QStringList measured);
  void kinds_lesson_ready(ftx::KindsLesson lesson);
  void failed(QString view,
              QString message);  // view: "generations", "latent", "compute", "lessons", "kinds" (that lesson)
  void busy_changed(bool busy);

 private slots:
  void process_edit();

 private:
  ftx::Result<ftx::ExplorerModel*> model(const std::string& run, int step);
  ftx::Result<std::vector<std::pair<std::string, double>>> lesson_runs(const std::string& dataset, bool free);
  // kappa_lesson_ready's `measured` for a run's checkpoint at `step` (empty when never measured)
  QString measured_line(const std::string& run, int step);

  QString db_path_;
  ftx::DatasetFactory datasets_;
  std::unique_ptr<ftx::Backend> be_;
  std::map<std::string, ftx::ExplorerModel> models_;  // by checkpoint directory
  std::optional<ftx::LatentInspection> inspection_;
  std::map<std::pair<std::string, int>, ftx::KlProfile> kl_profiles_;  // (run, step): the Latent view's batch KL
  std::map<std::pair<std::string, int>, std::vector<ftx::EventAuroc>> route_events_;  // (run, step): Compute's
  std::string inspection_run_;
  int inspection_step_ = 0;
  std::mutex edit_mu_;
  BitFlips pending_flips_;
  uint64_t edit_requested_ = 0, edit_done_ = 0;
};

}  // namespace ftx

Q_DECLARE_METATYPE(ftx::BitFlips)
