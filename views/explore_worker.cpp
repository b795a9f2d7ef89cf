#include "views/explore_worker.h"

#include <omp.h>

#include <QCoreApplication>
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/eval/figure4.h"
#include "core/eval/kind_groups.h"
#include "core/explore/compute.h"
#include "core/model/kappa.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "datasets/text.h"
#include "kernels/base/philox.h"
#include "views/store_poller.h"

namespace ftx {

namespace {

constexpr size_t kMaxCachedModels = 6;
// Held-out sequences behind the Latent view's mean KL per position: one batch of 64 for a small
// model, 8 for one of more than 20M parameters (an upcycled Llama). Computed once per checkpoint
// on one thread, so that a training run beside it keeps both cores and the window stays responsive.
constexpr int kLatentBatchSequences = 64, kLatentBatchSequencesLarge = 8;
// Held-out synthetic sequences behind the Compute view's event AUROCs.
constexpr int kRouteEventSequences = 64;
constexpr int64_t kLargeModelParams = 20'000'000;

// A held-out sequence of a run's own task, picked by `seed` (the Latent and Compute views' default).
std::string held_out_text(const ftx::BatchSource& data, uint64_t seed) {
  std::vector<int32_t> tok(static_cast<size_t>(data.seq_len()));
  data.validation(tok.data(), static_cast<int64_t>(seed % 100000), 1);
  return data.tokenizer().decode(tok);
}

QString qs(const std::string& s) { return QString::fromStdString(s); }

// The text-kinds pair of issue 24, as ./run.sh imports them from resources/models.
const char* const kKindsFreeRun = "kinds-free";
const char* const kKindsBaselineRun = "kinds-baseline";

// A folder ModelFile opens (config.json beside the weights).
bool model_folder(const std::filesystem::path& dir) {
  std::error_code ec;
  return !dir.empty() && std::filesystem::exists(dir / "config.json", ec) &&
         std::filesystem::exists(dir / "model.safetensors", ec);
}

// The shipped bundle resources/models/<name>: from the working folder (./run.sh's), else in the
// source tree this binary was built in (build/app/ftx-studio).
std::filesystem::path shipped_model(const std::string& name) {
  const std::filesystem::path rel = std::filesystem::path("resources") / "models" / name;
  std::error_code ec;
  if (model_folder(rel)) return std::filesystem::absolute(rel, ec);
  const std::filesystem::path beside =
      std::filesystem::path(QCoreApplication::applicationDirPath().toStdString()).parent_path().parent_path() / rel;
  return model_folder(beside) ? beside : std::filesystem::path();
}

// A text run whose token file has the corpus summary of ftx tokenize --kinds beside it
// (DATA.kinds.json): its data has kinds, so the Latent view labels generations with theirs.
bool has_kinds(const ftx::TrainConfig& t) {
  if (t.dataset != "text") return false;
  auto path = ftx::read_dataset_text_option(t.dataset_options, ftx::TextDataset::data_option());
  std::error_code ec;
  return path && !path->empty() && std::filesystem::exists(ftx::kinds_json_path(*path), ec);
}

}  // namespace

ExploreWorker::ExploreWorker(QString db_path, ftx::DatasetFactory datasets)
    : db_path_(std::move(db_path)), datasets_(std::move(datasets)), be_(ftx::make_cpu_backend()) {}

ExploreWorker::~ExploreWorker() { models_.clear(); }

ftx::Result<ftx::ExplorerModel*> ExploreWorker::model(const std::string& run, int step) {
  auto store = ftx::RunStore::open_readonly(db_path_.toStdString(), 1000);
  if (!store) return store.error();
  auto ref = ftx::find_run_checkpoint(*store, run, step < 0 ? std::nullopt : std::optional<int>(step));
  if (!ref) return ref.error();
  auto it = models_.find(ref->dir);
  if (it != models_.end()) return &it->second;
  auto m = ftx::load_explorer_model(*be_, datasets_, db_path_.toStdString(), run, ref->step);
  if (!m) return m.error();
  m->judges_kinds = has_kinds(m->train);
  if (models_.size() >= kMaxCachedModels) models_.clear();
  return &models_.emplace(ref->dir, std::move(*m)).first->second;
}

void ExploreWorker::figure4(QString run, int step, ftx::Figure4Request req) {
  emit busy_changed(true);
  auto m = model(run.toStdString(), step);
  auto groups = m ? ftx::explore_figure4(**m, req) : ftx::Result<std::vector<ftx::GroupView>>(m.error());
  if (groups)
    emit groups_ready(run, (*m)->step, std::move(*groups));
  else
    emit failed("generations", qs(groups.error().message));
  emit busy_changed(false);
}

void ExploreWorker::freeze(QString run, int step, QString prompt, std::vector<ftx::GroupView> groups,
                           quint64 sample_seed, float temperature) {
  emit busy_changed(true);
  auto m = model(run.toStdString(), step);
  auto out = m ? ftx::explore_freeze(**m, prompt.toStdString(), groups, sample_seed, temperature)
               : ftx::Result<std::vector<ftx::GroupView>>(m.error());
  if (out)
    emit groups_ready(run, (*m)->step, std::move(*out));
  else
    emit failed("generations", qs(out.error().message));
  emit busy_changed(false);
}

void ExploreWorker::comparison(QStringList runs, ftx::Figure4Request req) {
  emit busy_changed(true);
  GroupColumns columns;
  for (const QString& run : runs) {
    auto m = model(run.toStdString(), -1);
    auto groups = m ? ftx::explore_figure4(**m, req) : ftx::Result<std::vector<ftx::GroupView>>(m.error());
    if (!groups) {
      emit failed("generations", run + ": " + qs(groups.error().message));
      continue;
    }
    const double bits = ftx::nats_to_bits((*m)->train.kappa_nats);
    columns.emplace_back(run + QString::fromStdString("  (κ " + ftx::kappa_bits_text(bits) + ")"), std::move(*groups));
  }
  emit comparison_ready(std::move(columns));
  emit busy_changed(false);
}

void ExploreWorker::inspect(QString run, int step, QString text, quint64 seed) {
  emit busy_changed(true);
  auto m = model(run.toStdString(), step);
  if (!m) {
    emit failed("latent", qs(m.error().message));
    return emit busy_changed(false);
  }
  const std::string seq = text.isEmpty() ? held_out_text(*datasets_((*m)->train), seed) : text.toStdString();
  const bool synthetic = (*m)->train.dataset == "synthetic";
  const int prompt_len = synthetic ? 2 : 1;
  auto li = ftx::inspect_latent(**m, seq, prompt_len, seed);
  if (li) {  // where the run's KL goes over a batch of its held-out data
    const auto key = std::make_pair(run.toStdString(), (*m)->step);
    auto cached = kl_profiles_.find(key);
    if (cached == kl_profiles_.end()) {
      auto data = datasets_((*m)->train);
      const int n = (*m)->model->num_params() > kLargeModelParams ? kLatentBatchSequencesLarge : kLatentBatchSequences;
      const int threads = omp_get_max_threads();
      omp_set_num_threads(1);  // this thread's parallel regions only (the ICV is per thread)
      auto profile =
          data ? ftx::kl_profile(*(*m)->model, *data, n) : ftx::Result<ftx::KlProfile>(ftx::make_error("no dataset"));
      omp_set_num_threads(threads);
      cached = kl_profiles_.emplace(key, profile ? *profile : ftx::KlProfile{}).first;
    }
    li->batch_kl = cached->second.at, li->batch_sequences = cached->second.sequences;
    if (synthetic)
      for (size_t t = 0; t < li->batch_kl.size(); ++t) li->position_budget.push_back(ftx::start_code_cost(int(t)));
  }
  if (li) {
    inspection_ = *li, inspection_run_ = run.toStdString(), inspection_step_ = (*m)->step;
    emit latent_ready(std::move(*li), run, (*m)->step);
  } else {
    emit failed("latent", qs(li.error().message));
  }
  emit busy_changed(false);
}

void ExploreWorker::compute(QString run, int step, QString text, quint64 seed, bool student) {
  emit busy_changed(true);
  auto m = model(run.toStdString(), step);
  if (!m) {
    emit failed("compute", qs(m.error().message));
    return emit busy_changed(false);
  }
  std::unique_ptr<ftx::BatchSource> data = datasets_((*m)->train);
  const std::string seq = text.isEmpty() && data ? held_out_text(*data, seed) : text.toStdString();
  auto ci = ftx::inspect_compute(**m, seq, seed, student);
  if (ci && data && (*m)->train.dataset == "synthetic") {
    const auto key = std::make_pair(run.toStdString(), (*m)->step);
    auto cached = route_events_.find(key);
    if (cached == route_events_.end())
      cached = route_events_.emplace(key, ftx::synthetic_gate_auroc(*(*m)->model, *data, kRouteEventSequences)).first;
    ci->events = cached->second, ci->event_sequences = kRouteEventSequences;
  }
  if (ci)
    emit compute_ready(std::move(*ci), run, (*m)->step);
  else
    emit failed("compute", qs(ci.error().message));
  emit busy_changed(false);
}

void ExploreWorker::request_edit(const BitFlips& flips) {
  {
    std::lock_guard lk(edit_mu_);
    pending_flips_ = flips;
    ++edit_requested_;
  }
  QMetaObject::invokeMethod(this, "process_edit", Qt::QueuedConnection);
}

void ExploreWorker::process_edit() {
  BitFlips flips;
  {
    std::lock_guard lk(edit_mu_);
    if (edit_done_ == edit_requested_) return;  // a newer request was already computed
    edit_done_ = edit_requested_;
    flips = pending_flips_;
  }
  if (!inspection_) return;
  auto m = model(inspection_run_, inspection_step_);
  const int prompt_len = m && (*m)->train.dataset == "synthetic" ? 2 : 1;
  auto edited =
      m ? ftx::regenerate_edited(**m, *inspection_, prompt_len, flips) : ftx::Result<ftx::LatentGeneration>(m.error());
  if (edited)
    emit edited_ready(std::move(*edited));
  else
    emit failed("latent", qs(edited.error().message));
}

// Runs of `dataset` with a checkpoint, Free Transformers (H > 0) or baselines, newest last, with
// their kappa in bits.
ftx::Result<std::vector<std::pair<std::string, double>>> ExploreWorker::lesson_runs(const std::string& dataset,
                                                                                    bool free) {
  auto store = ftx::RunStore::open_readonly(db_path_.toStdString(), 1000);
  if (!store) return store.error();
  auto runs = store->list_runs();
  if (!runs) return runs.error();
  std::vector<std::pair<std::string, double>> out;
  for (const ftx::RunInfo& info : *runs) {
    RunSummary r = summarize_run(info);
    auto cks = store->checkpoints(info.id);
    if (r.dataset.toStdString() != dataset || (r.latent_bits > 0) != free || !cks || cks->empty()) continue;
    out.emplace_back(info.name, r.kappa_bits);
  }
  return out;
}

void ExploreWorker::coinflip(quint64 seed) {
  emit busy_changed(true);
  auto base_runs = lesson_runs("coinflip", false);
  auto free_runs = lesson_runs("coinflip", true);
  if (!base_runs || !free_runs) {
    emit failed("lessons", qs((base_runs ? free_runs.error() : base_runs.error()).message));
    return emit busy_changed(false);
  }
  ftx::ExplorerModel *base = nullptr, *free = nullptr;
  QString base_name, free_name;
  if (!base_runs->empty()) {
    auto m = model(base_runs->back().first, -1);
    if (m) base = *m, base_name = qs(base_runs->back().first);
  }
  if (!free_runs->empty()) {
    auto m = model(free_runs->back().first, -1);
    if (m) free = *m, free_name = qs(free_runs->back().first);
  }
  ftx::TrainConfig defaults;
  defaults.dataset = "coinflip";
  const ftx::TrainConfig& t = base ? base->train : free ? free->train : defaults;
  // The task's length and flip probability as the coin-flip dataset reads them from the run.
  const auto data = datasets_(t);
  const nlohmann::json options = data ? data->options() : nlohmann::json::object();
  if (!options.contains("coinflip_len") || !options.contains("coinflip_eps")) {
    emit failed("lessons", "the coin-flip task's options cannot be read from run settings");
    return emit busy_changed(false);
  }
  const int len = options["coinflip_len"].get<int>();
  const double eps = options["coinflip_eps"].get<double>();
  ftx::CoinflipLesson lesson = ftx::coinflip_example(seed, len, eps);
  if (ftx::Status st = ftx::coinflip_lesson(lesson, eps, base, free, seed); !st)
    emit failed("lessons", qs(st.error().message));
  else
    emit coinflip_ready(std::move(lesson), eps, base_name, free_name);
  emit busy_changed(false);
}

QString ExploreWorker::measured_line(const std::string& run, int step) {
  auto store = ftx::RunStore::open_readonly(db_path_.toStdString(), 1000);
  auto info = store ? store->find_run(run) : ftx::Result<ftx::RunInfo>(store.error());
  auto rows = info ? store->metrics(info->id, "") : ftx::Result<std::vector<ftx::MetricRow>>(info.error());
  const auto stored = rows ? ftx::stored_figure4(*rows, step) : std::nullopt;
  if (!stored) return QString();
  const ftx::Figure4Numbers& f = *stored;
  // "–" where nothing was measured (at 8 bits no fixed-Z group has two valid sequences).
  auto pm = [](const ftx::Estimate& e) {
    return std::isnan(e.mean) ? QStringLiteral("–")
                              : QStringLiteral("%1±%2").arg(e.mean, 0, 'f', 2).arg(e.se, 0, 'f', 2);
  };
  return QStringLiteral(
             "Measured at step %1 over %2 sequences: valid %3 · agree fixed %4, independent %5 · targets at ≥ %6: "
             "%7 · noise agree fixed %8, independent %9 · starts TV %10")
      .arg(step)
      .arg(f.valid.n)
      .arg(f.valid.mean, 0, 'f', 2)
      .arg(pm(f.agree_fixed), QString::number(f.agree_indep.mean, 'f', 2))
      .arg(ftx::kLateStart)
      .arg(pm(f.agree_late), pm(f.noise_fixed), QString::number(f.noise_indep.mean, 'f', 2))
      .arg(f.start_tv, 0, 'f', 2);
}

void ExploreWorker::kappa_lesson(quint64 seed) {
  emit busy_changed(true);
  auto runs = lesson_runs("synthetic", true);
  if (!runs || runs->empty()) {
    emit failed("lessons",
                runs ? "no synthetic-task Free Transformer run with a checkpoint yet: run the kappa sweep in Train"
                     : qs(runs.error().message));
    return emit busy_changed(false);
  }
  // Figure 4's panels: every kappa (the newest run of each), at most four, spread from the
  // smallest to the largest when there are more.
  std::map<double, std::string> by_kappa;
  for (const auto& [name, bits] : *runs) by_kappa[bits] = name;
  std::vector<std::pair<std::string, double>> all, pick;
  for (const auto& [bits, name] : by_kappa) all.emplace_back(name, bits);
  const size_t n = all.size(), shown = std::min<size_t>(n, 4);
  for (size_t i = 0; i < shown; ++i) pick.push_back(all[shown == 1 ? 0 : i * (n - 1) / (shown - 1)]);
  ftx::Figure4Request req;
  req.prompt = std::string(1, static_cast<char>('A' + seed % 26)) + ">";
  req.fixed_groups = 2, req.group_size = 8, req.seed = seed;
  GroupColumns columns;
  std::vector<double> kappas;
  QStringList measured;
  for (const auto& [name, bits] : pick) {
    auto m = model(name, -1);
    auto groups = m ? ftx::explore_figure4(**m, req) : ftx::Result<std::vector<ftx::GroupView>>(m.error());
    if (!groups) {
      emit failed("lessons", qs(name) + ": " + qs(groups.error().message));
      continue;
    }
    columns.emplace_back(qs(name), std::move(*groups));
    kappas.push_back(bits);
    measured << measured_line(name, (*m)->step);
  }
  emit kappa_lesson_ready(std::move(columns), std::move(kappas), measured);
  emit busy_changed(false);
}

void ExploreWorker::kinds_lesson() {
  ftx::KindsLesson lesson;
  std::error_code ec;
  if (!std::filesystem::exists(db_path_.toStdString(), ec)) {  // no store yet: no pair in it either
    lesson.model_path = qs(shipped_model(kKindsFreeRun).string());
    return emit kinds_lesson_ready(std::move(lesson));
  }
  auto store = ftx::RunStore::open_readonly(db_path_.toStdString(), 1000);
  if (!store) return emit failed("kinds", qs(store.error().message));
  // Fills `out` from the run's latest checkpoint; its checkpoint folder (empty: none).
  auto read = [&](const std::string& name, ftx::KindsLessonRun& out) -> std::filesystem::path {
    auto info = store->find_run(name);
    if (!info) return {};
    out.run = qs(name);
    out.latent_bits = summarize_run(*info).latent_bits;
    auto ref = ftx::find_run_checkpoint(*store, name, std::nullopt);
    if (!ref) return {};
    out.step = ref->step;
    if (auto rows = store->metrics(info->id, ""); rows) {
      out.kinds = ftx::stored_kinds(*rows, ref->step);
      for (const ftx::MetricRow& r : *rows)  // at the checkpoint, else the last one before it
        if (r.key == "val/ce_prior" && r.step <= ref->step && !std::isnan(r.value)) out.val_ce = r.value;
    }
    std::error_code ec;
    return std::filesystem::absolute(ref->dir, ec);
  };
  const std::filesystem::path checkpoint = read(kKindsFreeRun, lesson.free);
  read(kKindsBaselineRun, lesson.baseline);
  // The shipped bundle when it is there (a model named like the run), else the run's checkpoint.
  const std::filesystem::path shipped = shipped_model(kKindsFreeRun);
  lesson.model_path = qs(!shipped.empty() ? shipped.string() : model_folder(checkpoint) ? checkpoint.string() : "");
  emit kinds_lesson_ready(std::move(lesson));
}

}  // namespace ftx
