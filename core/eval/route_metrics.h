// Routing metrics: what each block of a routed model (docs/subjective_depth.md) did in the last
// forward pass, read back per block and token (computed or skipped, the gate, and for SDT and STT
// the surprise statistics behind it), and on the synthetic task how well each routed block's gate
// tells the task's events (the target's start, its letters, the '!' noise) from the '_'
// background: the AUROC the evaluator stores and the Compute view shows.
//
// Deliberately not here: choosing sequences for display (core/explore/compute.h), drawing.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/data/batch_source.h"
#include "core/model/model.h"

namespace ftx {

struct BlockCompute {
  int layer = 0;
  bool routed = false;            // false: a dense block, every token computed
  std::vector<uint8_t> computed;  // (T) routed: 1 where the block ran on the token at that position
  std::vector<float> gate;        // (T) routed: the write-back gate g (1 for random routing, a hard gate)
  std::vector<float> student;     // (T) MoD, SDT, STT: the student router's probability of computing
  // SDT and STT (else empty), (T) each: the static change D_st, the change against its prediction
  // D_ch, the moving average of D_st, and the gate's parts s_ce = sigmoid(beta_ce CE) (an expected
  // change) and s_cu = sigmoid(beta_cu CU) (an unexpected one): g = s_ce + s_cu - s_ce s_cu.
  std::vector<float> d_st, d_ch, ma, s_ce, s_cu;
};

// The synthetic task's events at an input position (its character, docs/figure4.md).
enum class SynthEvent : uint8_t {
  Prompt,      // the "<letter>>" prompt: not scored
  Background,  // '_'
  Start,       // the first target letter seen in the body
  Letter,      // a later target letter
  Noise,       // '!'
};
const char* synth_event_name(SynthEvent e);  // "start", "letter", "noise", "background", "prompt"
// One event per character of a synthetic sequence (prompt included).
std::vector<SynthEvent> synthetic_events(const std::string& seq);

// A routed block's gate on one event against the background, over held-out sequences.
struct EventAuroc {
  int layer = 0;
  SynthEvent event = SynthEvent::Start;
  double auroc = 0;     // P(gate of an event token > gate of a '_' token), ties half; NaN if either is absent
  double computed = 0;  // share of the event's tokens the block computed
  double computed_background = 0;  // the same for '_'
  int64_t positives = 0, negatives = 0;
};
// AUROC of scores: positives against negatives, ties counted half (the Mann-Whitney U over
// |pos| |neg|); NaN when either is empty.
double auroc(std::vector<float> pos, std::vector<float> neg);

// Who chose a routed model's tokens, and whether that choice is causal: "teacher: top-k over the
// whole sequence (not causal)", "student: the student router, token by token (causal)", ...
std::string route_path_text(const RoutingConfig& ro, bool student);

// Every block of the last forward of s over (B, T) sequences, each array (B T) long.
std::vector<BlockCompute> read_block_compute(const Model& model, const ModelState& s, int B, int T);

// Over the first n held-out sequences of the synthetic task `data`: per routed block, the gate's
// AUROC and computed shares for the start, letter and noise events against '_'.
std::vector<EventAuroc> synthetic_gate_auroc(Model& model, const BatchSource& data, int n);

// What the evaluator stores for a routed model, over the first n held-out sequences of `data`:
// per routed block the mean gate (route/gate/<block>) and, for SDT and STT, the means of the gate's
// two parts (route/s_ce/<block>, route/s_cu/<block>), with their means over the blocks (route/gate,
// route/s_ce, route/s_cu: the Curves view's Routing chart). On the synthetic task also each block's
// event AUROCs and computed shares (route/auroc/<event>/<block>, route/computed/<event>/<block>,
// event: start, letter, noise; computed also for background) and the AUROCs' means over the blocks
// (route/auroc/<event>). Each block's realised capacity, the share of tokens it computed
// (route/capacity[/<block>]); with a student router, how often the student's decision (probability
// above 1/2) matches the teacher's (route/student/agree[/<block>]), its precision and recall against
// it (route/student/precision, route/student/recall), and a second pass on the student path: its
// realised capacity (route/student/capacity[/<block>]) and CE beside the teacher's on the same
// sequences (route/student/ce, route/teacher/ce).
std::vector<std::pair<std::string, double>> route_eval_metrics(Model& model, const BatchSource& data, int n,
                                                               bool synthetic);

}  // namespace ftx
