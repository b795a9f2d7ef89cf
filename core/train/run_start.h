// Starting a new run: the one way `ftx train` (app/cmd_train.cpp) and the studio's Session
// (core/session) do it. prepare_run checks everything a run needs before anything is written and
// keeps what it read, so each input is read once: the dataset (opened by the caller, which names
// it in its own words), the headers of the model to start from, the benchmark suite. start_run
// then reads that model's weights (seconds for a 135M model: the Session does it on its worker),
// writes the run row and hands back the Trainer; the run trains on the same opened dataset.
//
// Deliberately not here: resuming (Trainer::resume reads everything from the run's checkpoint),
// the backend (the caller's device and precision), how a front end names a setting in errors (the
// FieldName: "--dim" for the CLI, "dim" for the studio).
#pragma once
#include <memory>
#include <string>

#include "core/data/batch_source.h"
#include "core/model/config.h"
#include "core/train/train_config.h"
#include "core/train/trainer.h"
#include "core/util/fields.h"
#include "kernels/base/result.h"

namespace ftx {

namespace bench {
class BenchSuite;
}

struct NewRun {
  std::string db, run;
  ShapeOverrides shape;             // the shape asked for; unused with train.init_from
  std::string shape_setting_given;  // a shape setting given by name ("--dim"): refused with init_from
  TrainConfig train;
  bool kappa_given = true;  // false: a model to start from that recorded its kappa (ftx upcycle) sets it
};

struct PreparedRun {
  NewRun request;  // as checked: with init_from, preset "custom" and maybe the recorded kappa
  ModelConfig model;
  std::unique_ptr<BatchSource> data;
  std::unique_ptr<bench::BenchSuite> bench;  // loaded when request.train.bench_tasks is set
  PreparedRun();
  PreparedRun(PreparedRun&&) noexcept;
  PreparedRun& operator=(PreparedRun&&) noexcept;
  ~PreparedRun();
};

// In order: the model (shaped from request.shape and the data's vocabulary and length, or the
// headers of train.init_from, whose tokenizer must be the data's), the training config, the
// benchmark suite, the memory the run needs, a run name not yet in the store. One-line errors
// naming settings through `name`; nothing is written.
Result<PreparedRun> prepare_run(NewRun request, std::unique_ptr<BatchSource> data, FieldName name = field_key);

// Writes the run row and gives its Trainer at step 0: random weights of run.model, or the weights
// of train.init_from. `run` keeps its data for Trainer::run; its suite moves to the Trainer.
Result<std::unique_ptr<Trainer>> start_run(Backend& be, PreparedRun& run);

}  // namespace ftx
