#include "views/store_poller.h"

#include <filesystem>

#include "core/train/run_config.h"

namespace ftx {

namespace {

constexpr int64_t kMetricsPerRound = 200000;  // a large backlog arrives over a few rounds

}  // namespace

RunSummary summarize_run(const ftx::RunInfo& info) {
  RunSummary r;
  r.info = info;
  auto c = ftx::parse_run_config(info.config_json, "run '" + info.name + "'");
  if (!c) {  // a hand-edited row: the run is still listed, with the reason in its tooltip
    r.config_error = QString::fromStdString(c.error().message);
    return r;
  }
  if (c->train) {
    r.dataset = QString::fromStdString(c->train->dataset);
    r.preset = QString::fromStdString(c->train->preset);
    r.steps = c->train->steps;
    r.kappa_bits = ftx::nats_to_bits(c->train->kappa_nats);
    r.free_bits_label = ftx::free_bits_label(c->train->free_bits_form());
  }
  if (c->model) r.latent_bits = c->model->latent_bits;
  if (c->model && c->model->routing.kind != ftx::Routing::None) {
    const ftx::RoutingConfig& ro = c->model->routing;
    r.routing = ro.mode == ftx::RouteMode::Threshold
                    ? QString("%1 g>=%2").arg(ftx::routing_name(ro.kind)).arg(ro.g_th)
                    : QString("%1 %2").arg(ftx::routing_name(ro.kind)).arg(ro.capacity);
  }
  return r;
}

StorePoller::StorePoller(QString db_path, int interval_ms) : path_(std::move(db_path)), interval_ms_(interval_ms) {}
StorePoller::~StorePoller() = default;

void StorePoller::start() {
  timer_ = new QTimer(this);
  connect(timer_, &QTimer::timeout, this, &StorePoller::poll);
  timer_->start(interval_ms_);
  poll();
}

bool StorePoller::ensure_open() {
  if (store_) return true;
  const std::string path = path_.toStdString();
  QString err;
  if (!std::filesystem::exists(path)) {
    err = path_ + ": no run store yet (start a training run to create it)";
  } else {
    auto version = ftx::RunStore::file_schema_version(path);
    if (version && *version >= 1 && *version < ftx::kSchemaVersion) {
      // A store written by an older ftx: migrate it (the writer closes at once), then read it.
      auto writer = ftx::RunStore::open(path, 1000);
      if (!writer) err = QString::fromStdString(writer.error().message);
    }
    auto s = ftx::RunStore::open_readonly(path, 100);
    if (s) {
      store_.emplace(std::move(*s));
      last_metric_ = last_event_ = last_bench_ = 0;
      last_runs_key_.clear();
      err.clear();
      if (auto ref = store_->reference()) emit reference_loaded(std::move(*ref));
    } else if (err.isEmpty()) {
      err = QString::fromStdString(s.error().message);
    }
  }
  if (err != last_error_) emit store_error(err);
  last_error_ = err;
  return store_.has_value();
}

ftx::Status StorePoller::poll_runs() {
  auto runs = store_->list_runs();
  if (!runs) return runs.error();
  std::vector<RunSummary> out;
  std::string key;
  for (const ftx::RunInfo& info : *runs) {
    RunSummary r = summarize_run(info);
    if (auto cks = store_->checkpoints(info.id))
      for (const auto& c : *cks) r.checkpoint_steps.push_back(static_cast<int>(c.step));
    key += std::to_string(info.id) + info.name + info.status + std::to_string(r.checkpoint_steps.size()) + "|";
    out.push_back(std::move(r));
  }
  if (key != last_runs_key_) emit runs_changed(std::move(out));
  last_runs_key_ = key;
  return {};
}

ftx::Status StorePoller::poll_rows() {
  FTX_TRY(poll_runs());
  auto events = store_->events_since(last_event_, &last_event_);
  if (!events) return events.error();
  for (const auto& [run, e] : *events)
    if (e.kind == "resumed") reload_run(run);  // the run trimmed its curve past the checkpoint
  if (!events->empty()) emit events_arrived(std::move(*events));
  auto rows = store_->metrics_since(last_metric_, kMetricsPerRound, &last_metric_);
  if (!rows) return rows.error();
  if (!rows->empty()) emit metrics_arrived(std::move(*rows));
  auto bench = store_->benchmarks_since(last_bench_, kMetricsPerRound, &last_bench_);
  if (!bench) return bench.error();
  if (!bench->empty()) emit benchmarks_arrived(std::move(*bench));
  return {};
}

void StorePoller::poll() {
  if (!ensure_open()) return;
  const ftx::Status st = poll_rows();
  const QString err = st.ok() ? QString() : QString::fromStdString(st.error().message);
  if (err != last_error_) emit store_error(err);  // an empty message: readable again
  last_error_ = err;
  // Locked past the short busy timeout, or the file was replaced: reopen next round.
  if (!st.ok() && !err.contains("locked")) store_.reset();
}

void StorePoller::reload_run(qint64 run_id) {
  if (!store_) return;
  auto rows = store_->metrics(run_id, "");
  if (!rows) return;
  MetricBatch batch;
  for (auto& r : *rows) batch.emplace_back(run_id, std::move(r));
  emit run_reset(run_id, std::move(batch));
  auto bench = store_->benchmarks(run_id);
  if (!bench) return;
  BenchBatch bench_batch;
  for (auto& r : *bench) bench_batch.emplace_back(run_id, std::move(r));
  emit benchmarks_reset(run_id, std::move(bench_batch));
}

void StorePoller::load_items(quint64 request, qint64 run_id, qint64 step, QString task) {
  if (!ensure_open())
    return emit items_loaded(request, run_id, step, task, {}, last_error_.isEmpty() ? "no run store" : last_error_);
  auto items = store_->bench_items(run_id, step, task.toStdString(), kMaxItemsShown);
  if (!items) return emit items_loaded(request, run_id, step, task, {}, QString::fromStdString(items.error().message));
  emit items_loaded(request, run_id, step, task, std::move(*items), QString());
}

}  // namespace ftx
