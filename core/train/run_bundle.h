// A run as a folder to ship or share (docs/figure4.md, "Shipped models"): one checkpoint's model
// and the run's record, so that another run store can hold the run without retraining it.
//   <dir>/config.json, model.safetensors   the checkpoint without training state (BF16 weights
//                                          by default: half the size, read back widened to fp32)
//   <dir>/run.json                          {"format": "ftx-run", "version": 1, "name", "step",
//                                          "status", "notes", "config": the run's config,
//                                          "metrics": {key: [[step, value], ...]} up to "step"}
// Importing copies the model into the store's checkpoint folder as the run's checkpoint at
// "step" and records the metrics; the run then reads like a trained one everywhere.
//
// Deliberately not here: events, generations and benchmark rows (not exported); Adam state (an
// imported run can be generated from, not resumed).
#pragma once
#include <optional>
#include <string>

#include "kernels/base/result.h"

namespace ftx {

inline constexpr const char* kRunBundleFileName = "run.json";

struct ExportOptions {
  std::optional<int> step;  // the checkpoint to export (the latest when absent)
  bool bf16 = true;         // weights as BF16 (else F32, bit for bit)
  std::string name;         // the run's name in the bundle (empty: its own)
};
// Writes run `run` of the store `db` as a bundle at out_dir (replaced atomically if it exists).
// Errors name the run, the store or the folder.
Status export_run(const std::string& db, const std::string& run, const std::string& out_dir,
                  const ExportOptions& options = {});

// Imports the bundle at `dir` into the store `db` (created when missing) under the bundle's
// name, unless a run of that name is already there: then nothing changes and *imported is false.
// A bundle that does not load (missing or corrupt files, a config or run.json that does not
// validate) is a one-line error naming the file, and leaves the store as it was.
Status import_run(const std::string& db, const std::string& dir, bool* imported = nullptr);

}  // namespace ftx
