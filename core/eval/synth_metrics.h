// Synthetic-task metrics (docs/figure4.md): is a generated body a valid synthetic sequence,
// where can its target start, and how much do the generations of one group agree (Figure 4).
// Choices the design leaves open, made here:
//  - "'!' outside the target" = '!' positions not covered by ANY possible target window (the union
//    of the windows of all possible starts), so a '!' that may be hiding a target end is not
//    counted as noise.
//  - agreement and noise agreement are NaN when a group has fewer than 2 valid generations (no
//    pair to compare); average groups with mean_defined(), which skips NaN.
//  - the Jaccard overlap of two empty '!' sets is 1 (both generations agree: no noise).
// Deliberately not here: sampling, the model, the run store (the caller writes synth/* metrics).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "kernels/base/result.h"

namespace ftx {

inline constexpr int kSynthBodyLen = 64;
inline constexpr int kSynthTargetLen = 8;
inline constexpr int kSynthMinLetters = 4;
inline constexpr int kSynthNumStarts = kSynthBodyLen - kSynthTargetLen + 1;  // 57

struct SynthAnalysis {
  bool valid = false;
  std::string reason;              // why not valid; empty when valid
  int letters = 0;                 // occurrences of the letter in the body
  std::vector<int> starts;         // possible target starts, ascending, in [0, 56]; empty if invalid
  std::vector<int> noise_outside;  // '!' positions outside every possible window, ascending
};

SynthAnalysis analyze_body(const std::string& body, char letter);

// What telling the target's start costs at each position, on average over the data (docs/figure4.md,
// "Two forms of free bits"): at input position i the model predicts body character s = i - 1; a
// code that says at each s whether the target starts there costs P(not started before s) times
// h(1 / (57 - s)) nats, h the binary entropy (0.088 at s = 0, 0.05 by s = 50); 0 outside 0..56.
// Under the batch-mean free bits this is the KL per position a fully pinned start needs.
double start_code_cost(int input_pos);

// A valid body's target start: the middle of its possible starts (one interval, a few wide at
// most: '!' at a target end hides where it was); -1 when the body is not valid.
int target_start(const SynthAnalysis& a);

// One generation's target start and how much of its group agrees with it (GroupMetrics).
using AgreementAt = std::pair<int, double>;

struct GroupMetrics {
  int n = 0;  // generations in the group
  int n_valid = 0;
  int start = -1;                // median target_start of the valid generations (-1 when none)
  double valid = 0.0;            // n_valid / n (NaN when n == 0)
  double agreement = 0.0;        // pairs of valid generations whose start sets intersect (NaN if < 2 valid)
  double noise_agreement = 0.0;  // mean Jaccard of noise_outside over those pairs (NaN if < 2 valid)
  // Per valid generation (when there are >= 2): its target_start and the share of the group's
  // other valid generations whose starts intersect its own. Their mean is `agreement`.
  std::vector<AgreementAt> agreement_at;
};

GroupMetrics group_metrics(const std::vector<std::string>& bodies, char letter);

// Mean of the entries that are not NaN; NaN when there are none.
double mean_defined(const std::vector<double>& values);

// Agreement by where targets start (docs/figure4.md), per generation rather than per group (a
// group's median start puts unpinned groups mid-body): bins [lo, hi] of `width` starts from 0
// (the last one ends at 56), each with the entries (the agreement_at of any number of groups)
// whose start falls in it, their mean and its standard error (NaN for none; 0 for one). The
// generations of one group are not independent, so the standard error is a lower bound.
// A mean with its standard error (sample standard deviation / sqrt n) over the n values that are
// not NaN: mean and se NaN when there are none, se 0 for one. Values that are not independent
// (the sequences of one group) make the standard error a lower bound.
struct Estimate {
  double mean = 0, se = 0;
  int n = 0;
};
Estimate estimate(const std::vector<double>& values);
// An estimate as run-store metrics KEY, KEY_se, KEY_n (the Figure 4 and text-kinds numbers), and
// back: read_estimate sets the part of `e` a metric (metric_key, value) holds when it is one of them.
void append_estimate(std::vector<std::pair<std::string, double>>* out, const std::string& key, const Estimate& e);
void read_estimate(const std::string& metric_key, double value, const std::string& key, Estimate* e);
// A numbered metric "<prefix><i>" (a profile along the sequence) sets (*v)[i + shift], growing v
// with NaN; other keys and indices outside [0, max_index] are ignored.
void read_numbered(const std::string& metric_key, double value, const std::string& prefix, int shift, int max_index,
                   std::vector<double>* v);

struct StartBin {
  int lo = 0, hi = 0;
  int generations = 0;
  double agreement = 0, stderr_ = 0;
};
std::vector<StartBin> agreement_by_start(const std::vector<AgreementAt>& entries, int width = 8);
// The same over the generations whose target starts at `from` or later.
StartBin agreement_from(const std::vector<AgreementAt>& entries, int from);
// Where "late" targets start (docs/figure4.md): only they can all be pinned within kappa = 1/8 bit.
inline constexpr int kLateStart = 32;

// Where targets start over many bodies: the share of the valid ones at each of the 57 starts, a
// body with k possible starts counting 1/k at each (all zero when none is valid).
std::vector<double> start_distribution(const std::vector<SynthAnalysis>& bodies);
// Half the L1 distance between two distributions over the same starts: 0 same, 1 disjoint.
double total_variation(const std::vector<double>& p, const std::vector<double>& q);

// A generated text is the prompt "<letter>>" followed by the body.
struct SynthText {
  char letter = 0;
  std::string body;
};
Result<SynthText> split_generation(const std::string& text);

}  // namespace ftx
