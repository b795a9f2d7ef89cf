#include "core/session/session.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <set>

#include <omp.h>

#include "core/store/run_store.h"
#include "core/train/run_start.h"
#include "core/train/trainer.h"
#include "kernels/backend.h"

namespace ftx {

const char* session_state_name(SessionState s) {
  switch (s) {
    case SessionState::Idle:
      return "idle";
    case SessionState::Running:
      return "running";
    case SessionState::Paused:
      return "paused";
    case SessionState::Finished:
      return "finished";
    case SessionState::Failed:
      return "failed";
    case SessionState::Stopped:
      return "stopped";
  }
  return "?";
}

namespace {

// The request checked as ftx train checks a run (core/train/run_start.h); req gets the model and
// the training config as they will run.
Result<PreparedRun> prepare(const DatasetFactory& datasets, TrainRequest& req) {
  auto p = prepare_run(NewRun{req.db_path, req.run, req.shape, "", req.train, true}, datasets(req.train));
  if (!p) return p.error();
  req.model = p->model;
  req.train = p->request.train;
  return p;
}

}  // namespace

Status prepare_request(const DatasetFactory& datasets, TrainRequest& req) {
  auto p = prepare(datasets, req);
  return p ? Status{} : Status(p.error());
}

Session::Session(DatasetFactory datasets) : datasets_(std::move(datasets)) {
  worker_ = std::thread([this] { worker_loop(); });
}

Session::~Session() {
  {
    std::lock_guard lk(mu_);
    quit_ = true;
    queue_.clear();
  }
  stop_ = true;
  cv_.notify_all();
  worker_.join();
}

Status Session::start(std::vector<TrainRequest> requests) {
  if (requests.empty()) return make_error("nothing to train");
  std::set<std::string> names;
  std::vector<QueuedRun> prepared;
  for (TrainRequest& r : requests) {
    auto p = prepare(datasets_, r);
    if (!p) return p.error();
    if (!names.insert(r.run).second) return make_error("run '" + r.run + "' appears twice in the sweep");
    prepared.push_back(QueuedRun{std::move(r), std::move(*p)});
  }
  {
    std::lock_guard lk(mu_);
    if (!queue_.empty() || snap_.state == SessionState::Running || snap_.state == SessionState::Paused)
      return make_error("a run is already in progress: stop it first");
    for (QueuedRun& r : prepared) queue_.push_back(std::move(r));
    snap_.queued = static_cast<int>(queue_.size());
    paused_ = false;
    ++snap_.version;
  }
  cv_.notify_all();
  return {};
}

void Session::pause() {
  std::lock_guard lk(mu_);
  paused_ = true;
}

void Session::resume() {
  {
    std::lock_guard lk(mu_);
    paused_ = false;
  }
  cv_.notify_all();
}

void Session::stop() {
  {
    std::lock_guard lk(mu_);
    queue_.clear();
    snap_.queued = 0;
    paused_ = false;
    stop_ = true;
  }
  cv_.notify_all();
}

void Session::step_once() {
  {
    std::lock_guard lk(mu_);
    if (paused_) ++step_tokens_;
  }
  cv_.notify_all();
}

void Session::set_kappa(float kappa_nats) {
  std::lock_guard lk(mu_);
  pending_kappa_ = kappa_nats;
}

SessionSnapshot Session::snapshot() const {
  std::lock_guard lk(mu_);
  return snap_;
}

bool Session::busy() const {
  std::lock_guard lk(mu_);
  return !queue_.empty() || snap_.state == SessionState::Running || snap_.state == SessionState::Paused;
}

void Session::publish(const SessionSnapshot& s) {
  std::lock_guard lk(mu_);
  const uint64_t v = snap_.version;
  const int queued = static_cast<int>(queue_.size());
  snap_ = s;
  snap_.version = v + 1;
  snap_.queued = queued;
}

void Session::worker_loop() {
  // Training yields to the UI thread: SCHED_IDLE (it runs whenever nothing else wants the core)
  // for this thread and the OpenMP workers it starts (Linux threads inherit their creator's
  // policy); a lower nice value where SCHED_IDLE is refused.
  sched_param idle{};
  if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle) != 0)
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  for (;;) {
    QueuedRun queued;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return quit_ || !queue_.empty(); });
      if (quit_) return;
      queued = std::move(queue_.front());
      queue_.pop_front();
      stop_ = false;
      step_tokens_ = 0;
      pending_kappa_ = -1;
    }
    run_one(queued);
  }
}

bool cuda_in_build() { return cuda_backend_built(); }

namespace {
// The request's device with its GEMMs at `precision` ("": the device's default).
Result<std::unique_ptr<Backend>> make_session_backend(const std::string& device, const std::string& precision) {
  auto be = make_backend_for(device);
  if (!be || precision.empty()) return be;
  auto prec = parse_matmul_precision(precision);
  if (!prec) return prec.error();
  FTX_TRY((*be)->set_matmul_precision(*prec));
  return be;
}
}  // namespace

void Session::run_one(QueuedRun& queued) {
  const TrainRequest& req = queued.request;
  SessionSnapshot s;
  s.run = req.run, s.total_steps = req.train.steps, s.kappa_nats = req.train.kappa_nats;
  s.state = SessionState::Running;
  publish(s);
  const int cores = omp_get_num_procs();
  omp_set_num_threads(req.threads > 0 ? req.threads : cores);
  auto made = make_session_backend(req.device, req.precision);
  if (!made) {
    s.state = SessionState::Failed, s.message = "device " + req.device + ": " + made.error().message;
    return publish(s);
  }
  std::unique_ptr<Backend> be = std::move(*made);
  if (!req.train.init_from.empty()) {  // seconds for a 135M model: say so meanwhile
    s.message = "reading the weights of " + req.train.init_from;
    publish(s);
  }
  auto trainer = start_run(*be, queued.run);
  s.message.clear();
  BatchSource* data = queued.run.data.get();
  if (!trainer) {
    s.state = SessionState::Failed, s.message = trainer.error().message;
    return publish(s);
  }
  Trainer& tr = **trainer;
  TrainerCallbacks cb;
  cb.on_step = [&](const StepReport& r) {
    s.step = r.step, s.ce = r.stats.ce, s.kl = r.stats.kl, s.loss = r.stats.loss, s.lr = r.lr;
    s.kappa_nats = r.kappa, s.tokens_per_s = r.tokens_per_s, s.eta_s = r.eta_s;
    s.state = SessionState::Running;
    publish(s);
  };
  cb.before_step = [&] { return wait_for_step(tr, s); };
  Status st = tr.run(*data, stop_, cb);
  s.step = tr.step();
  if (!st) {
    s.state = SessionState::Failed, s.message = st.error().message;
  } else {
    s.state = tr.step() >= tr.train_config().steps ? SessionState::Finished : SessionState::Stopped;
    s.message = "run '" + req.run + "' " + (s.state == SessionState::Finished ? "finished" : "stopped") + " at step " +
                std::to_string(tr.step());
  }
  publish(s);
}

// Before each step: while paused wait (publishing "paused" once) for resume, a step-once credit
// or stop; then apply a kappa set meanwhile.
bool Session::wait_for_step(Trainer& tr, SessionSnapshot& s) {
  std::unique_lock lk(mu_);
  if (paused_ && step_tokens_ == 0 && !stop_) {
    lk.unlock();
    (void)tr.flush();  // the curves show everything up to the pause
    s.state = SessionState::Paused;
    publish(s);
    lk.lock();
    cv_.wait(lk, [&] { return !paused_ || step_tokens_ > 0 || stop_; });
  }
  if (step_tokens_ > 0) --step_tokens_;
  const float k = pending_kappa_;
  pending_kappa_ = -1;
  const bool go = !stop_;
  lk.unlock();
  if (k >= 0) {
    if (Status st = tr.set_kappa(k); !st) s.message = st.error().message;
    s.kappa_nats = k;
    publish(s);
  }
  return go;
}

}  // namespace ftx
