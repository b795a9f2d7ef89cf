// Routing metrics (route_metrics.h).
#include "core/eval/route_metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "kernels/base/philox.h"
#include "kernels/cpu/ops_route.h"

namespace ftx {

namespace {

bool is_letter(char c) { return c >= 'A' && c <= 'Z'; }

}  // namespace

std::string route_path_text(const RoutingConfig& ro, bool student) {
  if (student && ro.kind == Routing::Random) return "student: each token drawn with probability capacity (causal)";
  if (student) return "student: the student router, token by token (causal)";
  if (ro.mode == RouteMode::Threshold) return "teacher: every token whose gate reaches g_th (causal)";
  return "teacher: top-k over the whole sequence (not causal)";
}

std::vector<BlockCompute> read_block_compute(const Model& model, const ModelState& s, int B, int T) {
  const ModelConfig& mc = model.config();
  const size_t N = size_t(B) * T;
  std::vector<BlockCompute> blocks;
  for (int l = 0; l < mc.n_layers; ++l) {
    BlockCompute b;
    b.layer = l, b.routed = mc.routed(l);
    if (b.routed) {
      b.computed.assign(N, 0);
      const std::vector<std::vector<int32_t>> choice = model.read_route_choice(s, l);
      for (int r = 0; r < B; ++r)
        for (int32_t t : choice[size_t(r)]) b.computed[size_t(r) * T + size_t(t)] = 1;
      b.gate.resize(N);
      model.read_route_gate(s, l, b.gate.data());
      if (mc.routing.has_student()) {
        b.student.resize(N);
        model.read_route_student(s, l, b.student.data());
      }
      // STT's student path runs no teacher: there is no surprise to read.
      if (mc.routing.surprise() && !(s.route_student && mc.routing.kind == Routing::Stt)) {
        std::vector<float> st(3 * N);
        model.read_route_surprise(s, l, st.data());
        const std::array<float, 4> p = model.read_route_gate_params(l);
        double k[4];  // o_ce, m_cu, beta_ce, beta_cu, as the CPU backend's gate takes them
        for (int i = 0; i < 4; ++i) k[i] = cpu::route_softplus(double(p[size_t(i)]));
        b.d_st.assign(st.begin(), st.begin() + long(N));
        b.d_ch.assign(st.begin() + long(N), st.begin() + long(2 * N));
        b.ma.assign(st.begin() + long(2 * N), st.end());
        b.s_ce.resize(N), b.s_cu.resize(N);
        for (size_t i = 0; i < N; ++i) {
          const cpu::RouteGateAt r = cpu::route_gate_at(b.d_st[i], b.d_ch[i], b.ma[i], k);
          b.s_ce[i] = float(r.a), b.s_cu[i] = float(r.c);
        }
      }
    }
    blocks.push_back(std::move(b));
  }
  return blocks;
}

const char* synth_event_name(SynthEvent e) {
  switch (e) {
    case SynthEvent::Prompt:
      return "prompt";
    case SynthEvent::Background:
      return "background";
    case SynthEvent::Start:
      return "start";
    case SynthEvent::Letter:
      return "letter";
    case SynthEvent::Noise:
      return "noise";
  }
  return "?";
}

std::vector<SynthEvent> synthetic_events(const std::string& seq) {
  constexpr size_t kPrompt = 2;  // "<letter>>"
  std::vector<SynthEvent> ev(seq.size(), SynthEvent::Prompt);
  bool seen = false;
  for (size_t i = kPrompt; i < seq.size(); ++i) {
    const char c = seq[i];
    if (c == '_') {
      ev[i] = SynthEvent::Background;
    } else if (c == '!') {
      ev[i] = SynthEvent::Noise;
    } else if (is_letter(c)) {
      ev[i] = seen ? SynthEvent::Letter : SynthEvent::Start;
      seen = true;
    }
  }
  return ev;
}

double auroc(std::vector<float> pos, std::vector<float> neg) {
  if (pos.empty() || neg.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(neg.begin(), neg.end());
  double u = 0;
  for (float p : pos) {
    const auto lo = std::lower_bound(neg.begin(), neg.end(), p), hi = std::upper_bound(neg.begin(), neg.end(), p);
    u += double(lo - neg.begin()) + 0.5 * double(hi - lo);
  }
  return u / (double(pos.size()) * double(neg.size()));
}

namespace {

// The first n held-out sequences of `data` through the model: every block's choice, and on the
// synthetic task each position's event.
struct RouteBatch {
  std::vector<BlockCompute> blocks;
  std::vector<SynthEvent> events;  // (n T); empty unless asked for
  double ce = 0;                   // mean over the n T predictions
};
RouteBatch run_batch(Model& model, const BatchSource& data, int n, bool events, bool student = false) {
  const int S = data.seq_len(), T = S - 1;
  std::vector<int32_t> tok(size_t(n) * S);
  data.validation(tok.data(), 0, n);
  auto state = model.make_state(n, T);
  // the inputs are tokens 0..T-1 of each sequence, the targets 1..T
  std::vector<int32_t> in(size_t(n) * T), tg(size_t(n) * T);
  for (int b = 0; b < n; ++b)
    for (int t = 0; t < T; ++t)
      in[size_t(b) * T + t] = tok[size_t(b) * S + t], tg[size_t(b) * T + t] = tok[size_t(b) * S + t + 1];
  state->route_student = student;
  const StepStats st = model.forward(*state, in.data(), tg.data(), nullptr, 1, kStreamEval, 0.0f);
  RouteBatch rb;
  rb.ce = st.ce;
  rb.blocks = read_block_compute(model, *state, n, T);
  if (events) {
    rb.events.resize(size_t(n) * T);
    for (int b = 0; b < n; ++b) {
      const std::vector<int32_t> row(tok.begin() + long(b) * S, tok.begin() + long(b + 1) * S);
      const std::vector<SynthEvent> e = synthetic_events(data.tokenizer().decode(row));
      for (int t = 0; t < T && t < int(e.size()); ++t) rb.events[size_t(b) * T + t] = e[size_t(t)];
    }
  }
  return rb;
}

std::vector<EventAuroc> event_aurocs(const RouteBatch& rb) {
  const std::vector<SynthEvent>& ev = rb.events;
  std::vector<EventAuroc> out;
  for (const BlockCompute& bl : rb.blocks) {
    if (!bl.routed) continue;
    std::vector<float> background;
    double bg_computed = 0;
    for (size_t i = 0; i < ev.size(); ++i)
      if (ev[i] == SynthEvent::Background) background.push_back(bl.gate[i]), bg_computed += bl.computed[i];
    for (SynthEvent e : {SynthEvent::Start, SynthEvent::Letter, SynthEvent::Noise}) {
      EventAuroc a;
      a.layer = bl.layer, a.event = e;
      std::vector<float> pos;
      double computed = 0;
      for (size_t i = 0; i < ev.size(); ++i)
        if (ev[i] == e) pos.push_back(bl.gate[i]), computed += bl.computed[i];
      a.positives = int64_t(pos.size()), a.negatives = int64_t(background.size());
      a.computed = pos.empty() ? 0.0 : computed / double(pos.size());
      a.computed_background = background.empty() ? 0.0 : bg_computed / double(background.size());
      a.auroc = auroc(std::move(pos), background);
      out.push_back(a);
    }
  }
  return out;
}

double mean(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return v.empty() ? 0.0 : s / double(v.size());
}

// "route/<a>/<b>[/<c>]"
std::string route_key(const std::string& a, const std::string& b, const std::string& c = {}) {
  std::string k = "route/";
  k.append(a).append("/").append(b);
  if (!c.empty()) k.append("/").append(c);
  return k;
}

// <prefix>/<block>: the share of tokens each routed block computed; <prefix>: their mean.
void add_capacity_metrics(const RouteBatch& rb, const std::string& prefix,
                          std::vector<std::pair<std::string, double>>& out) {
  double sum = 0;
  int routed = 0;
  for (const BlockCompute& b : rb.blocks) {
    if (!b.routed) continue;
    double c = 0;
    for (uint8_t x : b.computed) c += x;
    c = b.computed.empty() ? 0.0 : c / double(b.computed.size());
    out.emplace_back(prefix + "/" + std::to_string(b.layer), c);
    sum += c, ++routed;
  }
  if (routed > 0) out.emplace_back(prefix, sum / routed);
}

// The student's decisions against the teacher's on the teacher's pass: agreement per block and
// overall, precision and recall overall (NaN-free: a ratio with nothing under it is left out).
void add_student_metrics(const RouteBatch& rb, std::vector<std::pair<std::string, double>>& out) {
  double agree_sum = 0, tp = 0, fp = 0, fn = 0;
  int routed = 0;
  for (const BlockCompute& b : rb.blocks) {
    if (!b.routed || b.student.empty()) continue;
    double agree = 0;
    for (size_t i = 0; i < b.computed.size(); ++i) {
      const bool s = b.student[i] > 0.5f, t = b.computed[i] != 0;
      agree += s == t;
      tp += s && t, fp += s && !t, fn += !s && t;
    }
    agree /= double(std::max<size_t>(1, b.computed.size()));
    out.emplace_back(route_key("student", "agree", std::to_string(b.layer)), agree);
    agree_sum += agree, ++routed;
  }
  if (routed == 0) return;
  out.emplace_back("route/student/agree", agree_sum / routed);
  if (tp + fp > 0) out.emplace_back("route/student/precision", tp / (tp + fp));
  if (tp + fn > 0) out.emplace_back("route/student/recall", tp / (tp + fn));
}

}  // namespace

std::vector<EventAuroc> synthetic_gate_auroc(Model& model, const BatchSource& data, int n) {
  return event_aurocs(run_batch(model, data, n, true));
}

std::vector<std::pair<std::string, double>> route_eval_metrics(Model& model, const BatchSource& data, int n,
                                                               bool synthetic) {
  const RouteBatch rb = run_batch(model, data, n, synthetic);
  std::vector<std::pair<std::string, double>> out;
  double gate = 0, s_ce = 0, s_cu = 0;
  int routed = 0, surprise = 0;
  for (const BlockCompute& b : rb.blocks) {
    if (!b.routed) continue;
    const std::string block = std::to_string(b.layer);
    out.emplace_back(route_key("gate", block), mean(b.gate));
    gate += mean(b.gate), ++routed;
    if (b.s_ce.empty()) continue;
    out.emplace_back(route_key("s_ce", block), mean(b.s_ce));
    out.emplace_back(route_key("s_cu", block), mean(b.s_cu));
    s_ce += mean(b.s_ce), s_cu += mean(b.s_cu), ++surprise;
  }
  if (routed > 0) out.emplace_back("route/gate", gate / routed);
  if (surprise > 0) out.emplace_back("route/s_ce", s_ce / surprise), out.emplace_back("route/s_cu", s_cu / surprise);
  add_capacity_metrics(rb, "route/capacity", out);
  if (model.config().routing.has_student()) {
    add_student_metrics(rb, out);
    const RouteBatch sb = run_batch(model, data, n, false, true);
    add_capacity_metrics(sb, "route/student/capacity", out);
    out.emplace_back("route/teacher/ce", rb.ce);
    out.emplace_back("route/student/ce", sb.ce);
  }
  if (!synthetic) return out;
  const std::vector<EventAuroc> ev = event_aurocs(rb);
  for (SynthEvent e : {SynthEvent::Start, SynthEvent::Letter, SynthEvent::Noise}) {
    double sum = 0;
    int count = 0;
    for (const EventAuroc& a : ev)
      if (a.event == e && std::isfinite(a.auroc)) sum += a.auroc, ++count;
    if (count > 0) out.emplace_back(route_key("auroc", synth_event_name(e)), sum / count);
  }
  for (const EventAuroc& a : ev) {
    const std::string block = std::to_string(a.layer), name = synth_event_name(a.event);
    if (std::isfinite(a.auroc)) out.emplace_back(route_key("auroc", name, block), a.auroc);
    if (a.positives > 0) out.emplace_back(route_key("computed", name, block), a.computed);
    if (a.event == SynthEvent::Start && a.negatives > 0)
      out.emplace_back(route_key("computed", "background", block), a.computed_background);
  }
  return out;
}

}  // namespace ftx
