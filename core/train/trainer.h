// Trainer: one training run from a fresh start or a checkpoint, writing every metric, event and
// checkpoint to the run store (docs/design.md sections 2 and 6). Deterministic: the latent bits of step
// s are Philox(seed, kStreamLatent + s), the data are a pure function of (seed, position), and the
// CPU ops use static OpenMP schedules, so a resumed run continues the uninterrupted curve exactly
// when it runs with the same number of threads (OpenBLAS splits its sums by thread, so another
// thread count rounds differently; trainer.json records the count and resume reports a change).
//
// Deliberately not here: argument parsing and printing (app/), dataset choice (app/ wires a
// BatchSource in), threads (the caller decides where run() executes; stop is an atomic flag).
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/data/batch_source.h"
#include "core/eval/evaluator.h"
#include "core/model/model.h"
#include "core/store/run_store.h"
#include "core/train/train_config.h"

namespace ftx {
namespace bench {
class BenchSuite;
}
class Comm;
class DeviceComm;

struct StepReport {
  int step = 0;  // updates done
  int total_steps = 0;
  StepStats stats;
  double grad_norm = 0, lr = 0, kappa = 0;
  double tokens_per_s = 0, elapsed_s = 0, eta_s = 0;
};

struct EvalReport {
  int step = 0;
  Metrics metrics;
};

struct TrainerCallbacks {
  std::function<void(const StepReport&)> on_step;
  std::function<void(const EvalReport&)> on_eval;
  std::function<void(int step, const std::string& path)> on_checkpoint;
  // Called before every step; may block (a paused session) and returns false to stop the run
  // like `stop` does (checkpoint, status "stopped").
  std::function<bool()> before_step;
};

// Where a run's checkpoints live: "<db without extension>.checkpoints/<run>/step-<N>" beside the
// database. The store records that path relative to the database's folder (so a workspace can be
// moved or opened from another working directory); resolve_checkpoint_path turns a stored path
// back into one to open (absolute paths, e.g. from older rows, are kept as they are).
std::string checkpoint_rel_path(const std::string& db_path, const std::string& run, int step);
std::string resolve_checkpoint_path(const std::string& db_path, const std::string& stored);
std::string checkpoint_dir(const std::string& db_path, const std::string& run, int step);

// The checkpoint directory of `run` recorded in `store` at `step` (the latest when absent),
// resolved for opening; one-line errors for a missing run or checkpoint.
struct CheckpointRef {
  std::string dir;
  int step = 0;
};
Result<CheckpointRef> find_run_checkpoint(RunStore& store, const std::string& run, std::optional<int> step);

// Whether training `m` on batches of `t.batch` sequences of seq_len tokens fits in this machine's
// memory (parameters, gradients, two AdamW moments, activations of a training and a validation
// batch); errors name the batch through `name`. Trainer::start checks it too.
Status check_training_memory(const ModelConfig& m, const TrainConfig& t, int seq_len, FieldName name = field_key);

// How a trainer takes part in a data-parallel job (Trainer::use_comm).
struct DataParallelOptions {
  // ZeRO-1 (--shard-optimizer): each rank keeps AdamW's moments for its 1/P of the parameters,
  // updates that slice alone and the ranks allgather the updated parameters; a checkpoint
  // gathers the moments into the layout one process writes.
  bool shard_optimizer = false;
  // --bucket-mb: the blocks' gradients are summed in buckets of about this size as the backward
  // finishes them, last block first, the rest after it; 0 sums everything after the backward. On
  // the CPU through the host (MPI_Iallreduce), on GPUs with NCCL in a stream of its own; a GPU
  // without NCCL (through the host) always sums after the backward.
  double bucket_mb = 25;
};

class Trainer {
 public:
  // A new run: fails when the run name exists, when the configs do not validate, when the
  // tokenizer has more tokens than model_cfg.vocab_size, or when the model and activations for
  // sequences of seq_len tokens would not fit in memory. The tokenizer (null: token ids only) is
  // stored with the run's configuration and every checkpoint.
  // With init_params (arena order of param_specs(model_cfg), e.g. read_model_params of
  // train_cfg.init_from) the weights start from them instead of train_cfg.init, and run()
  // evaluates once before the first step (step 0: the starting model's validation CE).
  static Result<std::unique_ptr<Trainer>> start(Backend& be, const ModelConfig& model_cfg,
                                                std::shared_ptr<const Tokenizer> tokenizer,
                                                const TrainConfig& train_cfg, int seq_len, const std::string& db_path,
                                                const std::string& run,
                                                const std::vector<float>* init_params = nullptr);
  // Continue a run from its latest checkpoint; its stored configs and tokenizer are used (steps
  // may be raised).
  static Result<std::unique_ptr<Trainer>> resume(Backend& be, const std::string& db_path, const std::string& run,
                                                 std::optional<int> steps);
  // A rank other than 0 of a data-parallel job that resumes: the state of the checkpoint rank 0
  // resumes from (its directory, broadcast by rank 0), trained into this rank's scratch store
  // `db_path`, where the run is created.
  static Result<std::unique_ptr<Trainer>> follow(Backend& be, const std::string& checkpoint, const std::string& db_path,
                                                 const std::string& run, std::optional<int> steps);
  ~Trainer();

  // Trains until train_config().steps or until stop becomes true (then checkpoints and returns).
  // Refuses data whose tokenizer differs from the run's (by fingerprint) or has more tokens than
  // the model's vocabulary.
  Status run(BatchSource& data, const std::atomic<bool>& stop, const TrainerCallbacks& cb);
  // One optimizer step, nothing recorded (benchmarks, the studio's step-once). Fills stats,
  // grad_norm, lr, kappa and step of the report.
  StepReport step_once(BatchSource& data);
  // Changes the free-bits threshold from the next step on (the studio's live kappa; a schedule
  // is replaced by the constant), recorded as a "kappa" event with the old and new value.
  Status set_kappa(float kappa_nats);
  // Trains as one rank of a data-parallel job (core/dist/comm.h, docs/distributed.md), before the
  // first step: this process computes its B / P sequences of every global batch of B, the ranks
  // average their gradients and the free bits' batch means, and the step's statistics are those
  // of the global batch. Only rank 0 evaluates and checkpoints; the other ranks' stores are
  // scratch. Refused: a batch that the P processes do not divide; and, when run() starts, a rank
  // with another configuration, data or build than rank 0 (named with what differs).
  // With `device` (NCCL on the CUDA backend, kernels/device_comm.h, the same ranks as comm) the
  // gradients are summed on the GPUs; without it, through the host and comm.
  // Options (DataParallelOptions): ZeRO-1, and the buckets that overlap the gradient sums with the
  // backward. In a job started by a launcher the moments are first allocated here, for the slice
  // alone when sharded.
  Status use_comm(Comm& comm, std::unique_ptr<DeviceComm> device = nullptr, DataParallelOptions options = {});
  // Benchmarks (ftx bench train in a job): time each step's collectives, synchronizing the device
  // around them; collective_seconds() is their sum so far, waits for slower ranks included.
  void time_collectives(bool on) { time_collectives_ = on; }
  double collective_seconds() const { return collective_s_; }
  // The gradients go through NCCL on the GPUs (use_comm was given a device communicator).
  bool gradients_on_device() const { return device_comm_ != nullptr; }
  // The benchmark suite of bench_tasks, already loaded (prepare_run): run() then reads no file.
  void use_bench_suite(std::unique_ptr<bench::BenchSuite> suite);
  Status flush() { return store_.flush(); }  // buffered metrics, e.g. before a pause

  const ModelConfig& model_config() const { return model_->config(); }
  const TrainConfig& train_config() const { return tcfg_; }
  int step() const { return step_; }
  Model& model() { return *model_; }
  RunStore& store() { return store_; }
  int64_t run_id() const { return run_id_; }
  int64_t data_position() const { return data_position_; }
  // A routed model: the share of tokens its routed blocks computed in the last step (what threshold
  // mode's FLOPs are counted at); none before the first step or without routing.
  std::optional<double> routed_share() const;
  // True when a resumed run now uses another thread count than its checkpoint's (the curve then
  // continues within rounding, not bit for bit).
  bool thread_count_changed() const { return thread_change_; }
  // The checkpoint directory this trainer resumed from; empty for a new run.
  const std::string& resumed_from() const { return checkpoint_dir_; }

 private:
  Trainer(Backend& be, RunStore store, std::unique_ptr<Model> model, std::shared_ptr<const Tokenizer> tokenizer,
          const TrainConfig& tcfg, std::string db, std::string run);
  // The model, its gradients and the optimizer state on the backend, or what did not fit.
  static Result<std::unique_ptr<Trainer>> make(Backend& be, RunStore store, const ModelConfig& mcfg,
                                               std::shared_ptr<const Tokenizer> tokenizer, const TrainConfig& tcfg,
                                               std::string db, std::string run);
  // The model, optimizer state, step and data position of the checkpoint in `dir` (resume, follow).
  static Result<std::unique_ptr<Trainer>> from_checkpoint(Backend& be, RunStore store, const std::string& dir,
                                                          std::optional<int> steps, const std::string& db_path,
                                                          const std::string& run);
  void train_step(BatchSource& data, StepReport& rep);
  // A data-parallel step's collectives (comm_ with P > 1): the batch-mean KL before the backward,
  // the gradients (and everyone's stop request, one more float) after it, the statistics.
  template <class F>
  void collective(F&& f);  // f, timed when time_collectives is on
  // AdamW's moments for [moment_lo_, +moment_chunk_) (zeroed, or a resumed checkpoint's slice);
  // false when they do not fit.
  bool allocate_moments();
  // ZeRO-1: how many parameters each rank's slice holds (chunks of moment_chunk_ in rank order);
  // every rank's updated slice of the parameters onto every rank; the moments into rank 0's
  // gathered_m_ and gathered_v_ before a checkpoint.
  std::vector<size_t> slice_counts() const;
  void gather_params();
  void gather_moments();
  void reduce_kl_batch_mean();
  void reduce_gradients();
  // The bucketed sums (DataParallelOptions::bucket_mb): block l's gradients are final (Model::backward's
  // hook); after the backward, what is left, then the wait, the 1/P and the stop request.
  void on_block_grads(int layer);
  void start_gradient_sum(size_t lo, size_t hi);  // gradients [lo, hi), by NCCL or by MPI
  void finish_bucketed_gradients();
  void share_stop_request();  // any rank's stop request to every rank (stop_all_), one float
  void reduce_stats(StepStats& st);
  bool data_parallel() const;
  bool writes() const;  // this process evaluates and checkpoints: one process, or rank 0
  void ensure_state(const BatchSource& data);
  Status save_checkpoint();
  // --keep-checkpoints: drops checkpoints beyond the last N and the best by val/ce_prior. The
  // store row goes first (committed), then the directory: a crash in between leaves an orphan
  // directory, never a row that resume would follow to a missing directory.
  Status prune_checkpoints();
  Status eval_and_record(BatchSource& data, const TrainerCallbacks& cb);
  // The --bench-tasks benchmarks at this step, into the store (benchmark rows, items, and the
  // bench/<task>/<metric> metric keys); reported through on_eval.
  Status bench_and_record(const BatchSource& data, const TrainerCallbacks& cb);
  Status check_data(const BatchSource& data) const;
  // A job's ranks compare digests of their configuration, data and build (use_comm).
  Status agree_on_start(BatchSource& data);
  Status record_generations(const std::vector<GroupResult>& groups, const Tokenizer& tokenizer);

  Backend& be_;
  RunStore store_;
  std::unique_ptr<Model> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;  // null: the run stores token ids only
  std::unique_ptr<ModelState> state_;
  TrainConfig tcfg_;
  std::string db_path_, run_;
  int64_t run_id_ = 0;
  int step_ = 0;
  int last_checkpoint_step_ = -1;
  bool thread_change_ = false;
  int threads_before_ = 0;                    // the checkpoint's thread count (resumed runs)
  std::string checkpoint_dir_;                // resumed from; empty for a new run
  std::unique_ptr<bench::BenchSuite> bench_;  // loaded by run() when bench_tasks is set
  bool eval_at_start_ = false;                // started from init_params: evaluate at step 0
  int64_t data_position_ = 0;
  std::vector<AdamWSegment> adam_segments_;                   // one per parameter tensor, its weight decay
  float* grad_norm_ = nullptr;                                // (1) on the backend: clip_grad_norm's output
  float* adam_m_ = nullptr;                                   // (moment_chunk_): all parameters', or a ZeRO-1 slice
  float* adam_v_ = nullptr;                                   // (moment_chunk_)
  bool shard_ = false;                                        // ZeRO-1 (use_comm)
  size_t moment_lo_ = 0, moment_len_ = 0, moment_chunk_ = 0;  // the slice: [lo, lo + len), chunks of chunk
  std::vector<AdamWSegment> moment_segments_;      // adam_segments_ cut to the slice, offsets from moment_lo_
  std::vector<float> resume_m_, resume_v_;         // a checkpoint's moments until allocate_moments
  std::vector<float> gathered_m_, gathered_v_;     // gather_moments, for the next checkpoint (rank 0)
  std::vector<float> host_slice_, host_gathered_;  // a GPU's slice and parameters, staged in host memory
  std::vector<int32_t> batch_, inputs_, targets_;
  Comm* comm_ = nullptr;                     // a data-parallel job (use_comm); null: one process
  std::unique_ptr<DeviceComm> device_comm_;  // its GPUs' communicator (NCCL), when given
  bool time_collectives_ = false;
  size_t bucket_floats_ = 0;                            // 0: no overlap (see DataParallelOptions::bucket_mb)
  std::vector<std::pair<size_t, size_t>> block_spans_;  // [lo, hi) of model.layers.l.*, by l
  std::vector<std::pair<size_t, size_t>> rest_spans_;   // the other parameters' spans
  size_t bucket_lo_ = 0, bucket_hi_ = 0;                // the open bucket (empty: lo == hi)
  double collective_s_ = 0;
  bool stop_asked_ = false;          // this rank's stop request, sent with the next gradients
  bool stop_all_ = false;            // some rank asked to stop: every rank stops after this step
  std::vector<float> host_grads_;    // (num_params + 1) the gradients and the stop flag, reduced
  std::vector<float> host_kl_mean_;  // (T)
};

}  // namespace ftx
