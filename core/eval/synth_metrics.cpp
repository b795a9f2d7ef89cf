// Synthetic-task metrics: character scans over 64-position bodies and O(n^2) pair loops over a
// group (groups are 8 or so generations). Not here: decoding tokens, averaging across groups.
#include "core/eval/synth_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <string_view>

namespace ftx {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Bad characters, letter count and the span of the letters; empty string when the body passes.
std::string check_characters(const std::string& body, char letter, int& first, int& last, int& count) {
  if (letter < 'A' || letter > 'Z') return std::string("prompt letter '") + letter + "' is not A-Z";
  if (static_cast<int>(body.size()) != kSynthBodyLen)
    return "body has " + std::to_string(body.size()) + " characters, expected 64";
  first = -1, last = -1, count = 0;
  for (int p = 0; p < kSynthBodyLen; ++p) {
    char c = body[p];
    if (c == letter) {
      if (first < 0) first = p;
      last = p, ++count;
    } else if (c != '_' && c != '!') {
      return "character '" + std::string(1, c) + "' at position " + std::to_string(p) + " is not _, ! or " + letter;
    }
  }
  if (count < kSynthMinLetters) return std::to_string(count) + " letter(s) " + letter + ", at least 4 needed";
  return {};
}

double jaccard(const std::vector<int>& a, const std::vector<int>& b) {  // both ascending
  if (a.empty() && b.empty()) return 1.0;
  std::vector<int> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  double uni = static_cast<double>(a.size() + b.size() - both.size());
  return static_cast<double>(both.size()) / uni;
}

bool intersects(const std::vector<int>& a, const std::vector<int>& b) {  // both ascending
  auto i = a.begin(), j = b.begin();
  while (i != a.end() && j != b.end()) {
    if (*i == *j) return true;
    (*i < *j) ? ++i : ++j;
  }
  return false;
}

}  // namespace

double start_code_cost(int input_pos) {
  const int s = input_pos - 1;
  if (s < 0 || s >= kSynthNumStarts) return 0.0;
  const double left = kSynthNumStarts - s;  // starts still possible
  const double q = 1.0 / left;
  const double h = q >= 1.0 ? 0.0 : -(q * std::log(q) + (1 - q) * std::log(1 - q));
  return left / kSynthNumStarts * h;
}

SynthAnalysis analyze_body(const std::string& body, char letter) {
  SynthAnalysis a;
  int first = -1, last = -1;
  a.reason = check_characters(body, letter, first, last, a.letters);
  if (!a.reason.empty()) return a;
  // A start s is possible when [s, s+8) holds every letter and nothing but the letter or '!'.
  const int lo = std::max(0, last - kSynthTargetLen + 1), hi = std::min(first, kSynthNumStarts - 1);
  for (int s = lo; s <= hi; ++s) {
    bool clean = true;
    for (int p = s; p < s + kSynthTargetLen && clean; ++p) clean = body[p] == letter || body[p] == '!';
    if (clean) a.starts.push_back(s);
  }
  if (a.starts.empty()) {
    a.reason = "letters at " + std::to_string(first) + ".." + std::to_string(last) +
               " do not fit one window of 8 letter-or-! positions";
    return a;
  }
  a.valid = true;
  const int covered_lo = a.starts.front(), covered_hi = a.starts.back() + kSynthTargetLen - 1;
  for (int p = 0; p < kSynthBodyLen; ++p)
    if (body[p] == '!' && (p < covered_lo || p > covered_hi)) a.noise_outside.push_back(p);
  return a;
}

int target_start(const SynthAnalysis& a) { return a.valid ? (a.starts.front() + a.starts.back()) / 2 : -1; }

GroupMetrics group_metrics(const std::vector<std::string>& bodies, char letter) {
  GroupMetrics g;
  g.n = static_cast<int>(bodies.size());
  std::vector<SynthAnalysis> valid;
  std::vector<int> starts;
  for (const std::string& b : bodies) {
    SynthAnalysis a = analyze_body(b, letter);
    if (a.valid) starts.push_back(target_start(a)), valid.push_back(std::move(a));
  }
  g.n_valid = static_cast<int>(valid.size());
  g.valid = g.n > 0 ? static_cast<double>(g.n_valid) / g.n : kNaN;
  if (!starts.empty()) {
    std::nth_element(starts.begin(), starts.begin() + starts.size() / 2, starts.end());
    g.start = starts[starts.size() / 2];
  }
  if (g.n_valid < 2) {
    g.agreement = g.noise_agreement = kNaN;
    return g;
  }
  double agree = 0, noise = 0, pairs = 0;  // sums in double over at most n^2/2 pairs
  std::vector<double> agree_with(valid.size(), 0.0);
  for (size_t i = 0; i < valid.size(); ++i)
    for (size_t j = i + 1; j < valid.size(); ++j) {
      const double a = intersects(valid[i].starts, valid[j].starts) ? 1.0 : 0.0;
      agree += a, agree_with[i] += a, agree_with[j] += a;
      noise += jaccard(valid[i].noise_outside, valid[j].noise_outside);
      pairs += 1;
    }
  for (size_t i = 0; i < valid.size(); ++i)
    g.agreement_at.emplace_back(target_start(valid[i]), agree_with[i] / static_cast<double>(valid.size() - 1));
  g.agreement = agree / pairs;
  g.noise_agreement = noise / pairs;
  return g;
}

double mean_defined(const std::vector<double>& values) {
  double sum = 0;
  int n = 0;
  for (double v : values)
    if (!std::isnan(v)) sum += v, ++n;
  return n > 0 ? sum / n : kNaN;
}

Estimate estimate(const std::vector<double>& values) {
  Estimate e{kNaN, kNaN, 0};
  double sum = 0;
  for (double v : values)
    if (!std::isnan(v)) sum += v, ++e.n;
  if (e.n == 0) return e;
  e.mean = sum / e.n;
  double ss = 0;
  for (double v : values)
    if (!std::isnan(v)) ss += (v - e.mean) * (v - e.mean);
  e.se = e.n > 1 ? std::sqrt(ss / (e.n - 1) / e.n) : 0.0;
  return e;
}

void append_estimate(std::vector<std::pair<std::string, double>>* out, const std::string& key, const Estimate& e) {
  out->emplace_back(key, e.mean);
  out->emplace_back(key + "_se", e.se);
  out->emplace_back(key + "_n", e.n);
}

void read_estimate(const std::string& metric_key, double value, const std::string& key, Estimate* e) {
  if (metric_key.size() < key.size() || metric_key.compare(0, key.size(), key) != 0) return;
  const std::string_view rest = std::string_view(metric_key).substr(key.size());
  if (rest.empty()) e->mean = value;
  if (rest == "_se") e->se = value;
  if (rest == "_n") e->n = static_cast<int>(value);
}

void read_numbered(const std::string& metric_key, double value, const std::string& prefix, int shift, int max_index,
                   std::vector<double>* v) {
  if (metric_key.rfind(prefix, 0) != 0) return;
  const int i = std::atoi(metric_key.c_str() + prefix.size()) + shift;
  if (i < 0 || i > max_index) return;
  if (v->size() <= size_t(i)) v->resize(size_t(i) + 1, kNaN);
  (*v)[size_t(i)] = value;
}

namespace {
// The bin [lo, hi] of the generations `in` admits.
template <class In>
StartBin bin_of(const std::vector<AgreementAt>& entries, int lo, int hi, In in) {
  std::vector<double> values;
  for (const auto& [start, a] : entries)
    if (in(start)) values.push_back(a);
  const Estimate e = estimate(values);
  return StartBin{.lo = lo, .hi = hi, .generations = e.n, .agreement = e.mean, .stderr_ = e.se};
}
}  // namespace

std::vector<StartBin> agreement_by_start(const std::vector<AgreementAt>& entries, int width) {
  std::vector<StartBin> bins;
  for (int lo = 0; lo < kSynthNumStarts; lo += width) {
    const int hi = lo + width >= kSynthNumStarts - 1 ? kSynthNumStarts - 1 : lo + width - 1;
    bins.push_back(bin_of(entries, lo, hi, [&](int s) { return s >= lo && s <= hi; }));
    if (hi == kSynthNumStarts - 1) break;
  }
  return bins;
}

StartBin agreement_from(const std::vector<AgreementAt>& entries, int from) {
  return bin_of(entries, from, kSynthNumStarts - 1, [&](int s) { return s >= from; });
}

std::vector<double> start_distribution(const std::vector<SynthAnalysis>& bodies) {
  std::vector<double> p(kSynthNumStarts, 0.0);
  int valid = 0;
  for (const SynthAnalysis& a : bodies) {
    if (!a.valid) continue;
    ++valid;
    for (int s : a.starts) p[s] += 1.0 / static_cast<double>(a.starts.size());
  }
  if (valid > 0)
    for (double& v : p) v /= valid;
  return p;
}

double total_variation(const std::vector<double>& p, const std::vector<double>& q) {
  FT_ASSERT(p.size() == q.size(), "total_variation: %zu against %zu values", p.size(), q.size());
  double d = 0;
  for (size_t i = 0; i < p.size(); ++i) d += std::abs(p[i] - q[i]);
  return d / 2;
}

Result<SynthText> split_generation(const std::string& text) {
  if (text.size() < 2 || text[1] != '>')
    return make_error("generation '" + text + "': expected a prompt '<letter>>' before the body");
  return SynthText{text[0], text.substr(2)};
}

}  // namespace ftx
