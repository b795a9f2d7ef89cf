// Compute inspection: what each block of a routed model did on one sequence, for the studio's
// Compute view (per block and token: computed or skipped, the gate, the surprise statistics; see
// core/eval/route_metrics.h), with the run's synthetic-task event AUROCs when the caller adds them.
//
// Deliberately not here: drawing, choosing the sequence or the run (the caller).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/eval/route_metrics.h"
#include "core/explore/explorer.h"
#include "kernels/base/result.h"

namespace ftx {

struct ComputeInspection {
  std::string text;                  // the inspected sequence
  std::vector<std::string> tokens;   // (T + 1) each token's bytes; empty: one character per token
  int T = 0;                         // positions (tokens - 1)
  std::string router;                // routing_name
  double capacity = 0;               // the configured gamma
  double realised = 0;               // computed / offered over the routed blocks, this sequence
  bool student = false;              // the student path chose (else the teacher)
  std::string path;                  // who chose, and whether causally (route_path_text)
  std::vector<BlockCompute> blocks;  // every block, in order
  std::vector<EventAuroc> events;    // synthetic task only (over event_sequences held-out sequences)
  int event_sequences = 0;
};

// Runs the routed model of `m` on `text`, its teacher path (training's choice) or, with `student`,
// the student router's (Z, if any, sampled from the encoder with `seed`). Errors for a model
// without routing and for a text the run's tokenizer cannot encode or that is not 2..seq_len
// tokens long.
Result<ComputeInspection> inspect_compute(ExplorerModel& m, const std::string& text, uint64_t seed,
                                          bool student = false);

}  // namespace ftx
