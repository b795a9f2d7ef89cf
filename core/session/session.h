// Session: training on a worker thread, driven by commands and observed through snapshots
// (docs/design.md section 11). The studio's Train view sends start / pause / resume / stop / step-once /
// set-kappa; the worker runs one Trainer at a time (a sweep queues several) and publishes an
// immutable snapshot after every step. Every metric also goes to the run store, which is what the
// curves read, so a view never needs more than the snapshot.
//
// Deliberately not here: Qt (views poll snapshot() on a timer), dataset or preset parsing beyond
// what TrainRequest names, more than one concurrent run.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/data/batch_source.h"
#include "core/model/config.h"
#include "core/train/run_start.h"
#include "core/train/train_config.h"

namespace ftx {

class Backend;
class Trainer;

struct TrainRequest {
  std::string db_path, run;
  ShapeOverrides shape;  // the model asked for, shaped as `ftx train` shapes it (unused with init_from)
  ModelConfig model;     // filled by prepare_request / start: shape_model_config(shape, the dataset's sizes),
                         // or the shape of train.init_from, whose weights the run starts from
  TrainConfig train;
  int threads = 0;             // OpenMP threads for the worker; 0 = all cores (it runs at idle priority)
  std::string device = "cpu";  // "cpu", "cuda" or "cuda:N" (make_backend_for)
  std::string precision;       // GEMM inputs: "" (the device's default), "fp32", "tf32" or "bf16"
};

// Whether this build has the CUDA backend (a GPU may still be missing: start() then fails with
// the reason).
bool cuda_in_build();

enum class SessionState { Idle, Running, Paused, Finished, Failed, Stopped };
const char* session_state_name(SessionState s);

struct SessionSnapshot {
  SessionState state = SessionState::Idle;
  std::string run;
  int step = 0, total_steps = 0;
  double ce = 0, kl = 0, loss = 0, lr = 0, kappa_nats = 0, tokens_per_s = 0, eta_s = 0;
  std::string message;   // the last error or notice, one line
  int queued = 0;        // sweep runs still waiting
  uint64_t version = 0;  // increases with every publication
};

// Checks the request as `ftx train` checks a run (prepare_run, core/train/run_start.h) and fills
// req.model (and the training config as it will run): one-line errors. start() does the same and
// keeps what it read for the run.
Status prepare_request(const DatasetFactory& datasets, TrainRequest& req);

class Session {
 public:
  explicit Session(DatasetFactory datasets);
  ~Session();  // stops the current run (it checkpoints) and joins the worker
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Queues runs; they start one after another. Each request is validated first (configs, dataset,
  // a run name already in the store): nothing is queued when one fails.
  Status start(std::vector<TrainRequest> requests);
  void pause();
  void resume();
  void stop();                       // the current run checkpoints and ends; queued runs are dropped
  void step_once();                  // while paused: one step, recorded like any other
  void set_kappa(float kappa_nats);  // applies before the next step, recorded as an event
  SessionSnapshot snapshot() const;
  bool busy() const;  // a run is active or queued

 private:
  void worker_loop();
  struct QueuedRun {
    TrainRequest request;
    PreparedRun run;  // its dataset opened and its checks done when it was queued
  };
  void run_one(QueuedRun& queued);
  bool wait_for_step(Trainer& tr, SessionSnapshot& s);  // false when the run must stop
  void publish(const SessionSnapshot& s);

  DatasetFactory datasets_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<QueuedRun> queue_;
  SessionSnapshot snap_;
  bool paused_ = false, quit_ = false;
  int step_tokens_ = 0;       // step-once credits while paused
  float pending_kappa_ = -1;  // < 0: none
  std::atomic<bool> stop_{false};
  std::thread worker_;
};

}  // namespace ftx
