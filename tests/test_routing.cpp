// Routed blocks (docs/subjective_depth.md, issue 25) on the CPU backend, the model as a whole:
//   * capacity 1 with the gate held at 1 is the dense model, bit for bit, for every router;
//   * capacity 0 is the model with the routed blocks taken out, bit for bit;
//   * a routed block equals a float64 brute-force block run on the selected tokens only, at their
//     positions, with causal attention among them (batch 3, scores out of time order);
//   * Model::backward equals central finite differences of the loss for every tensor, with the
//     choice and the stop-gradients held (ModelState::freeze_routing), for MoD, SDT (also with Z,
//     its decision block being the one Z enters) and STT; the prior learns from its own loss;
//   * the routing settings round-trip through config.json, and bad ones are refused by name.
// The router's ops one by one (route_stats, route_gate, topk_rows, route_scatter, rope_*_at) are
// checked against double, by finite differences and in the CUDA emulation through the op table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/eval/evaluator.h"
#include "core/eval/route_metrics.h"
#include "core/explore/compute.h"
#include "core/io/checkpoint.h"
#include "core/io/config_json.h"
#include "core/model/model.h"
#include "core/model/params.h"
#include "core/sample/sampler.h"
#include "core/train/train_config.h"
#include "datasets/registry.h"
#include "kernels/backend.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

Backend& cpu() {
  static std::unique_ptr<Backend> be = make_cpu_backend();
  return *be;
}

// 4 blocks (routed: 1 and 3), GQA; with latent bits, Z enters block 2 (SDT's second decision block).
ModelConfig base_config(int latent_bits, int dim = 16) {
  ModelConfig c;
  c.vocab_size = 29;
  c.dim = dim, c.n_layers = 4, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = dim / 2;
  c.ffn_hidden = dim + dim / 2, c.max_seq_len = 16, c.latent_bits = latent_bits, c.inject_after = 2;
  return c;
}

ModelConfig routed(ModelConfig c, Routing kind, float capacity, bool hard_gate = false) {
  c.routing.kind = kind;
  c.routing.capacity = capacity;
  c.routing.hard_gate = hard_gate;
  c.routing.prior_div = 4;
  return c;
}

// Every tensor random (norm weights near 1), so that no gradient or difference is special.
std::vector<float> random_params(const Model& m, uint32_t seed, float std) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> p(size_t(m.num_params()));
  for (const ParamSpec& s : m.specs())
    for (int64_t i = 0; i < s.numel; ++i)
      p[size_t(s.offset + i)] = s.init == ParamInit::Ones        ? 1.0f + 0.2f * nd(rng)
                                : s.init == ParamInit::RouteGate ? fixed_init_value(s.init, i) + 0.1f * nd(rng)
                                                                 : std * nd(rng);
  return p;
}

// `to`'s arena with every tensor that `from` has by the same name copied (renamed by `rename`).
std::vector<float> copy_shared(const Model& from, const std::vector<float>& fp, const Model& to, std::vector<float> tp,
                               const std::map<std::string, std::string>& rename = {}) {
  for (const ParamSpec& s : from.specs()) {
    std::string name = s.name;
    for (const auto& [a, b] : rename)
      if (name.starts_with(a)) name = b + name.substr(a.size());
    const ParamSpec* t = find_param(to.specs(), name);
    if (t == nullptr) continue;
    EXPECT_EQ(t->numel, s.numel) << name;
    std::copy_n(fp.begin() + s.offset, s.numel, tp.begin() + t->offset);
  }
  return tp;
}

struct Out {
  std::vector<float> logits;
  StepStats stats;
};

Out run(Model& m, const std::vector<float>& params, const std::vector<int32_t>& in, const std::vector<int32_t>& tg,
        int B, int T) {
  m.load_params(params.data());
  auto s = m.make_state(B, T);
  std::vector<uint32_t> codes(size_t(B) * T);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint32_t(i * 7 % (1u << std::max(1, m.config().latent_bits)));
  Out o;
  o.stats = m.forward(*s, in.data(), tg.data(), m.config().is_free() ? codes.data() : nullptr, 3, 4, 0.0f);
  o.logits.resize(size_t(B) * T * m.config().vocab_size);
  m.read_logits(*s, o.logits.data());
  return o;
}

void expect_bitwise_equal(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << a.size() << " values differ";
}

const Routing kRouters[] = {Routing::Random, Routing::Mod, Routing::Sdt, Routing::Stt};

TEST(Routing, CapacityOneWithTheGateAtOneIsTheDenseModel) {
  const int B = 3, T = 11;
  for (int H : {0, 3}) {
    const ModelConfig dense_cfg = base_config(H);
    Model dense(cpu(), dense_cfg);
    const std::vector<float> dp = random_params(dense, 10 + H, 0.3f);
    const auto in = test::random_tokens(size_t(B) * T, 29, 1), tg = test::random_tokens(size_t(B) * T, 29, 2);
    const Out want = run(dense, dp, in, tg, B, T);
    for (Routing kind : kRouters) {
      Model m(cpu(), routed(dense_cfg, kind, 1.0f, true));
      const Out got = run(m, copy_shared(dense, dp, m, random_params(m, 20, 0.3f)), in, tg, B, T);
      const std::string what = std::string(routing_name(kind)) + " H=" + std::to_string(H);
      expect_bitwise_equal(got.logits, want.logits, what);
      EXPECT_EQ(got.stats.ce, want.stats.ce) << what;
    }
  }
}

TEST(Routing, CapacityZeroIsTheModelWithoutTheRoutedBlocks) {
  const int B = 2, T = 9;
  for (int H : {0, 3}) {
    ModelConfig two = base_config(H);
    two.n_layers = 2, two.inject_after = 1;  // blocks 0 and 2 of four; Z still enters the second
    Model small(cpu(), two);
    const std::vector<float> sp = random_params(small, 30 + H, 0.3f);
    const auto in = test::random_tokens(size_t(B) * T, 29, 3), tg = test::random_tokens(size_t(B) * T, 29, 4);
    const Out want = run(small, sp, in, tg, B, T);
    for (Routing kind : kRouters) {
      Model m(cpu(), routed(base_config(H), kind, 0.0f));
      const auto params =
          copy_shared(small, sp, m, random_params(m, 40, 0.3f), {{"model.layers.1.", "model.layers.2."}});
      const Out got = run(m, params, in, tg, B, T);
      const std::string what = std::string(routing_name(kind)) + " H=" + std::to_string(H);
      expect_bitwise_equal(got.logits, want.logits, what);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// A routed block against a float64 block on the selected tokens

struct HostBlock {
  std::vector<double> ln1, wq, wk, wv, wo, ln2, wg, wu, wd;
};

HostBlock host_block(const Model& m, const std::vector<float>& p, int l) {
  auto get = [&](const std::string& n) {
    const ParamSpec* s = find_param(m.specs(), "model.layers." + std::to_string(l) + "." + n);
    return std::vector<double>(p.begin() + s->offset, p.begin() + s->offset + s->numel);
  };
  return {get("input_layernorm.weight"),  get("self_attn.q_proj.weight"), get("self_attn.k_proj.weight"),
          get("self_attn.v_proj.weight"), get("self_attn.o_proj.weight"), get("post_attention_layernorm.weight"),
          get("mlp.gate_proj.weight"),    get("mlp.up_proj.weight"),      get("mlp.down_proj.weight")};
}

std::vector<double> rms(const std::vector<double>& x, const std::vector<double>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> o(x.size());
  for (size_t i = 0; i < x.size(); ++i) o[i] = w[i] * x[i] * r;
  return o;
}

std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x, size_t out) {
  std::vector<double> o(out, 0.0);
  for (size_t r = 0; r < out; ++r)
    for (size_t c = 0; c < x.size(); ++c) o[r] += w[r * x.size() + c] * x[c];
  return o;
}

void rope(std::vector<double>& v, int heads, int HS, int pos, double theta) {
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < HS / 2; ++i) {
      const double a = pos * std::pow(theta, -2.0 * i / HS);
      double& x = v[size_t(h * HS + i)];
      double& y = v[size_t(h * HS + i + HS / 2)];
      const double x0 = x, y0 = y;
      x = x0 * std::cos(a) - y0 * std::sin(a);
      y = y0 * std::cos(a) + x0 * std::sin(a);
    }
}

// The block on tokens `sel` (positions, increasing) of one sequence x (T, C): rows in sel order.
std::vector<std::vector<double>> host_block_on(const ModelConfig& c, const HostBlock& w,
                                               const std::vector<std::vector<double>>& x, const std::vector<int>& sel) {
  const int C = c.dim, NH = c.n_heads, NKV = c.n_kv_heads, HS = c.head_dim, F = c.ffn_hidden;
  std::vector<std::vector<double>> q, k, v, out;
  for (int p : sel) {
    const auto ln = rms(x[size_t(p)], w.ln1, c.rms_norm_eps);
    q.push_back(matvec(w.wq, ln, size_t(NH * HS)));
    k.push_back(matvec(w.wk, ln, size_t(NKV * HS)));
    v.push_back(matvec(w.wv, ln, size_t(NKV * HS)));
    rope(q.back(), NH, HS, p, c.rope_theta);
    rope(k.back(), NKV, HS, p, c.rope_theta);
  }
  for (size_t i = 0; i < sel.size(); ++i) {
    std::vector<double> att(size_t(NH * HS), 0.0);
    for (int h = 0; h < NH; ++h) {
      const int kh = h / (NH / NKV);
      std::vector<double> s(i + 1);
      double mx = -1e300, z = 0;
      for (size_t j = 0; j <= i; ++j) {  // causal among the selected: j before i in time
        double d = 0;
        for (int e = 0; e < HS; ++e) d += q[i][size_t(h * HS + e)] * k[j][size_t(kh * HS + e)];
        s[j] = d / std::sqrt(double(HS));
        mx = std::max(mx, s[j]);
      }
      for (double& e : s) z += (e = std::exp(e - mx));
      for (size_t j = 0; j <= i; ++j)
        for (int e = 0; e < HS; ++e) att[size_t(h * HS + e)] += s[j] / z * v[j][size_t(kh * HS + e)];
    }
    std::vector<double> a = matvec(w.wo, att, size_t(C));
    for (int e = 0; e < C; ++e) a[size_t(e)] += x[size_t(sel[i])][size_t(e)];
    const auto ln2 = rms(a, w.ln2, c.rms_norm_eps);
    const auto g = matvec(w.wg, ln2, size_t(F)), u = matvec(w.wu, ln2, size_t(F));
    std::vector<double> h(static_cast<size_t>(F));
    for (int e = 0; e < F; ++e) h[size_t(e)] = g[size_t(e)] / (1 + std::exp(-g[size_t(e)])) * u[size_t(e)];
    const auto d = matvec(w.wd, h, size_t(C));
    for (int e = 0; e < C; ++e) a[size_t(e)] += d[size_t(e)];
    out.push_back(a);
  }
  return out;
}

// The routed block 3 of c after a forward of B sequences of T random tokens (the student's path
// when `student`) against the float64 block on the tokens the rule picks: top-k by the gate, the
// gate reaching g_th (threshold mode), the student's probability above 1/2 (the student path).
// Returns how many tokens the block computed, and whether some sequence's choice (top-k) is out of
// time order in score order.
struct BruteForce {
  int computed = 0;
  bool out_of_order = false;
  std::vector<int> counts;  // per sequence
};
BruteForce check_against_brute_force(const ModelConfig& c, bool student, int B, int T, uint32_t seed) {
  Model m(cpu(), c);
  const std::vector<float> p = random_params(m, seed, 0.3f);
  m.load_params(p.data());
  auto s = m.make_state(B, T);
  s->route_student = student;
  const auto in = test::random_tokens(size_t(B) * T, 29, 5);
  (void)m.forward(*s, in.data(), nullptr, nullptr, 1, 2, 0.0f);
  const int l = 3, C = c.dim;
  std::vector<float> x(size_t(B) * T * C), y(x.size()), gate(size_t(B) * T), prob(size_t(B) * T);
  cpu().download(x.data(), s->xs[l], x.size() * sizeof(float));
  cpu().download(y.data(), s->xs[l + 1], y.size() * sizeof(float));
  const std::vector<std::vector<int32_t>> choice = m.read_route_choice(*s, l);
  m.read_route_gate(*s, l, gate.data());
  if (c.routing.has_student()) m.read_route_student(*s, l, prob.data());
  const HostBlock w = host_block(m, p, l);
  BruteForce out;
  double err = 0, ref = 0;
  for (int b = 0; b < B; ++b) {
    std::vector<std::vector<double>> xb(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t)
      xb[size_t(t)].assign(x.begin() + (size_t(b) * T + t) * C, x.begin() + (size_t(b) * T + t + 1) * C);
    std::vector<int> sel;
    if (student) {
      for (int t = 0; t < T; ++t)
        if (prob[size_t(b) * T + t] > 0.5f) sel.push_back(t);
    } else if (c.routing.mode == RouteMode::Threshold) {
      for (int t = 0; t < T; ++t)
        if (gate[size_t(b) * T + t] >= c.routing.g_th) sel.push_back(t);
    } else {  // the k largest gates of the sequence, ties to the earlier position, in time order
      std::vector<int> order(static_cast<size_t>(T));
      for (int t = 0; t < T; ++t) order[size_t(t)] = t;
      std::stable_sort(order.begin(), order.end(),
                       [&](int i, int j) { return gate[size_t(b) * T + i] > gate[size_t(b) * T + j]; });
      sel.assign(order.begin(), order.begin() + c.route_k(T));
      out.out_of_order = out.out_of_order || !std::is_sorted(sel.begin(), sel.end());
      std::sort(sel.begin(), sel.end());
    }
    EXPECT_EQ(choice[size_t(b)], std::vector<int32_t>(sel.begin(), sel.end())) << "sequence " << b;
    out.computed += int(sel.size());
    out.counts.push_back(int(sel.size()));
    const auto yb = sel.empty() ? std::vector<std::vector<double>>{} : host_block_on(c, w, xb, sel);
    for (int t = 0; t < T; ++t) {
      const auto it = std::find(sel.begin(), sel.end(), t);
      const double g = gate[size_t(b) * T + t];
      for (int e = 0; e < C; ++e) {
        const double xv = xb[size_t(t)][size_t(e)];
        const double want = it == sel.end() ? xv : g * yb[size_t(it - sel.begin())][size_t(e)] + (1 - g) * xv;
        const double got = y[(size_t(b) * T + t) * C + e];
        if (it == sel.end()) {
          EXPECT_EQ(got, float(xv)) << "a skipped token must pass unchanged";
        }
        err += (got - want) * (got - want), ref += want * want;
      }
    }
  }
  EXPECT_LT(std::sqrt(err / ref), 1e-5);
  return out;
}

TEST(Routing, RoutedBlockEqualsABruteForceBlockOnTheSelection) {
  const BruteForce r = check_against_brute_force(routed(base_config(0), Routing::Mod, 0.5f), false, 3, 12, 50);
  EXPECT_EQ(r.computed, 3 * 6);
  EXPECT_TRUE(r.out_of_order);
}

// c in threshold mode, g_th at the median gate of the routed blocks 1 and 3 under top-k for params p
// and tokens in (B, T): a threshold that some tokens reach and some do not.
ModelConfig at_median_gate(ModelConfig c, const std::vector<float>& p, const std::vector<int32_t>& in, int B, int T,
                           const uint32_t* codes = nullptr) {
  Model m(cpu(), c);
  m.load_params(p.data());
  auto s = m.make_state(B, T);
  (void)m.forward(*s, in.data(), nullptr, codes, 1, 2, 0.0f);
  std::vector<float> g(size_t(2 * B) * T);
  m.read_route_gate(*s, 1, g.data());
  m.read_route_gate(*s, 3, g.data() + size_t(B) * T);
  std::nth_element(g.begin(), g.begin() + long(g.size() / 2), g.end());
  c.routing.mode = RouteMode::Threshold, c.routing.g_th = g[g.size() / 2];
  return c;
}

// Threshold mode: each sequence computes its own tokens whose gate reaches g_th, a count of its
// own; the block on them (the fillers that pad the batch to its largest count change nothing).
TEST(Routing, ThresholdModeComputesTheTokensWhoseGateReachesTheThreshold) {
  for (Routing kind : {Routing::Sdt, Routing::Stt}) {
    SCOPED_TRACE(routing_name(kind));
    ModelConfig c = routed(base_config(0), kind, 0.5f);
    Model m(cpu(), c);
    c = at_median_gate(c, random_params(m, 51, 0.3f), test::random_tokens(3 * 12, 29, 5), 3, 12);
    const BruteForce r = check_against_brute_force(c, false, 3, 12, 51);
    EXPECT_GT(r.computed, 0);
    EXPECT_LT(r.computed, 3 * 12);
    EXPECT_NE(*std::min_element(r.counts.begin(), r.counts.end()), *std::max_element(r.counts.begin(), r.counts.end()))
        << "sequences with fewer tokens than the batch's largest count carry fillers";
  }
}

// The student path: the student router's choice, token by token; STT's gate is then the student's
// probability (no teacher ran).
TEST(Routing, TheStudentPathComputesTheTokensTheStudentChooses) {
  for (Routing kind : {Routing::Mod, Routing::Sdt, Routing::Stt}) {
    SCOPED_TRACE(routing_name(kind));
    const BruteForce r = check_against_brute_force(routed(base_config(0), kind, 0.5f), true, 3, 12, 52);
    EXPECT_GT(r.computed, 0);
    EXPECT_LT(r.computed, 3 * 12);
  }
}

// Threshold mode and the student path are causal: tokens after t change nothing at or before t.
// (Top-k over the whole sequence is not: the Compute view and ftx score say so.)
TEST(Routing, ThresholdModeAndTheStudentPathAreCausal) {
  const int T = 14, cut = 8;
  struct Case {
    Routing kind;
    bool threshold, student;
  };
  for (const Case& k :
       {Case{Routing::Sdt, true, false}, Case{Routing::Stt, true, false}, Case{Routing::Mod, false, true},
        Case{Routing::Sdt, false, true}, Case{Routing::Stt, false, true}, Case{Routing::Random, false, true}}) {
    SCOPED_TRACE(std::string(routing_name(k.kind)) + (k.student ? " student" : " threshold"));
    for (int H : {0, 3}) {
      ModelConfig c = routed(base_config(H), k.kind, 0.5f);
      if (k.threshold) {
        Model t(cpu(), c);
        std::vector<uint32_t> codes(size_t(T), 5u);
        c = at_median_gate(c, random_params(t, 53, 0.3f), test::random_tokens(size_t(T), 29, 6), 1, T,
                           H > 0 ? codes.data() : nullptr);
      }
      Model m(cpu(), c);
      m.load_params(random_params(m, 53, 0.3f).data());
      auto logits = [&](const std::vector<int32_t>& in) {
        auto s = m.make_state(1, T);
        s->route_student = k.student;
        std::vector<uint32_t> codes(size_t(T), 5u);
        (void)m.forward(*s, in.data(), nullptr, H > 0 ? codes.data() : nullptr, 1, 2, 0.0f);
        std::vector<float> out(size_t(T) * c.vocab_size);
        m.read_logits(*s, out.data());
        return out;
      };
      std::vector<int32_t> a = test::random_tokens(size_t(T), 29, 6), b = a;
      for (int t = cut; t < T; ++t) b[size_t(t)] = (a[size_t(t)] + 1 + t) % 29;
      const std::vector<float> la = logits(a), lb = logits(b);
      const size_t early = size_t(cut) * c.vocab_size;
      double err = 0, ref = 0, later = 0;
      for (size_t i = 0; i < early; ++i) err = std::max(err, double(std::abs(la[i] - lb[i]))), ref += std::abs(la[i]);
      for (size_t i = early; i < la.size(); ++i) later = std::max(later, double(std::abs(la[i] - lb[i])));
      EXPECT_LE(err, 1e-5 * ref / double(early)) << "H=" << H << ": rounding only (the batch's shapes differ)";
      EXPECT_GT(later, 1e-3) << "the later tokens changed, and so must their logits";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Gradients against finite differences, the choice and the stop-gradients held

constexpr double kFdStep = 1e-2, kFdNoise = 5e-5, kGradRelTol = 1e-2;

struct Fd {
  Fd(const ModelConfig& c, int B, int T) : model(cpu(), c), B(B), T(T), state(model.make_state(B, T)) {
    in = test::random_tokens(size_t(B) * T, c.vocab_size, 7);
    tg = test::random_tokens(size_t(B) * T, c.vocab_size, 8);
    codes.resize(size_t(B) * T);
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint32_t(i * 5 % (1u << std::max(1, c.latent_bits)));
  }
  double loss(const std::vector<float>& p) {
    model.load_params(p.data());
    return model.forward(*state, in.data(), tg.data(), model.config().is_free() ? codes.data() : nullptr, 5, 9, 0.0f)
        .loss;
  }
  std::vector<float> analytic(const std::vector<float>& p) {
    state->freeze_routing = false;
    (void)loss(p);  // the choice, the averages and the teacher, then held
    state->freeze_routing = true;
    model.zero_grad();
    (void)loss(p);
    model.backward(*state);
    std::vector<float> g(size_t(model.num_params()));
    cpu().download(g.data(), model.grads(), g.size() * sizeof(float));
    return g;
  }
  std::vector<double> numeric(std::vector<float> p) {
    std::vector<double> d(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      const float x0 = p[i];
      auto central = [&](double h) {
        p[i] = float(x0 + h);
        const double hp = double(p[i]) - x0, lp = loss(p);
        p[i] = float(x0 - h);
        const double hm = x0 - double(p[i]), lm = loss(p);
        p[i] = x0;
        return (lp - lm) / (hp + hm);
      };
      d[i] = (4 * central(kFdStep / 2) - central(kFdStep)) / 3;
    }
    return d;
  }
  Model model;
  int B, T;
  std::unique_ptr<ModelState> state;
  std::vector<int32_t> in, tg;
  std::vector<uint32_t> codes;
};

// Per tensor whose name starts with one of `prefixes` (all when empty).
void expect_grads_match(const Model& m, const std::vector<float>& a, const std::vector<double>& fd,
                        const std::vector<std::string>& prefixes = {}) {
  int checked = 0;
  for (const ParamSpec& s : m.specs()) {
    if (!prefixes.empty() &&
        std::none_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return s.name.starts_with(p); }))
      continue;
    double err = 0, ref = 0;
    for (int64_t i = 0; i < s.numel; ++i) {
      const double d = double(a[size_t(s.offset + i)]) - fd[size_t(s.offset + i)];
      err += d * d, ref += fd[size_t(s.offset + i)] * fd[size_t(s.offset + i)];
    }
    err = std::sqrt(err), ref = std::sqrt(ref);
    const double floor = kFdNoise * std::sqrt(double(s.numel));
    EXPECT_GT(ref, 5 * floor) << s.name << ": FD gradient too small to check";
    EXPECT_LE(err, kGradRelTol * ref + floor) << s.name << ": |analytic - fd| " << err << ", |fd| " << ref;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// Random parameters where finite differences see every path: steep gates (betas near 1.7), and
// a post-sampler whose columns are all equal, so that Z's pass-through gradient (a surrogate that
// finite differences cannot see, checked in test_model.cpp) is exactly zero.
std::vector<float> fd_params(const Model& m, uint32_t seed) {
  std::vector<float> p = random_params(m, seed, 0.4f);
  const float raw_gate[4] = {0.5f, 0.6f, 1.5f, 1.5f};
  for (const ParamSpec& s : m.specs())
    if (s.name.ends_with(".gate"))
      for (int i = 0; i < 4; ++i) p[size_t(s.offset + i)] = raw_gate[i];
  if (const ParamSpec* post = find_param(m.specs(), "free.post_sampler.weight")) {
    const int64_t codes = post->shape[1];
    for (int64_t c = 0; c < post->shape[0]; ++c)
      for (int64_t d = 1; d < codes; ++d) p[size_t(post->offset + c * codes + d)] = p[size_t(post->offset + c * codes)];
  }
  return p;
}

void check_fd(const ModelConfig& c, uint32_t seed) {
  Fd h(c, 2, 6);
  const std::vector<float> p = fd_params(h.model, seed);
  const std::vector<float> a = h.analytic(p);
  expect_grads_match(h.model, a, h.numeric(p));
}

ModelConfig fd_config(int latent_bits, Routing kind) {
  ModelConfig c = routed(base_config(latent_bits, 8), kind, 0.5f);
  c.routing.aux_weight = 0;  // the prior's own loss stops the change it predicts: checked apart
  c.routing.gate_penalty = 0.05f;
  c.routing.student_weight = 0.5f;  // the student's weights are checked with the rest
  return c;
}

// Threshold mode at the median gate of the Fd harness's batch, so that the frozen choice has
// computed and skipped tokens (and fillers) in it.
void check_fd_threshold(Routing kind, uint32_t seed) {
  const ModelConfig topk = fd_config(0, kind);
  Fd probe(topk, 2, 6);
  const ModelConfig c = at_median_gate(topk, fd_params(probe.model, seed), probe.in, 2, 6);
  check_fd(c, seed);
}

TEST(RoutingBackward, ModMatchesFiniteDifferences) { check_fd(fd_config(0, Routing::Mod), 60); }
TEST(RoutingBackward, SdtMatchesFiniteDifferences) { check_fd(fd_config(0, Routing::Sdt), 61); }
TEST(RoutingBackward, SdtWithZMatchesFiniteDifferences) { check_fd(fd_config(2, Routing::Sdt), 62); }
TEST(RoutingBackward, SttMatchesFiniteDifferences) { check_fd(fd_config(0, Routing::Stt), 67); }
TEST(RoutingBackward, RandomMatchesFiniteDifferences) { check_fd(fd_config(0, Routing::Random), 64); }
TEST(RoutingBackward, SdtThresholdMatchesFiniteDifferences) { check_fd_threshold(Routing::Sdt, 65); }
TEST(RoutingBackward, SttThresholdMatchesFiniteDifferences) { check_fd_threshold(Routing::Stt, 66); }

// With the gate held at 1 the prior reaches the loss only through its own error term, whose
// target (the change) is stopped: its gradient is that term's alone, which FD sees exactly.
TEST(RoutingBackward, ThePriorLearnsFromItsOwnLoss) {
  for (Routing kind : {Routing::Sdt, Routing::Stt}) {
    ModelConfig c = routed(base_config(0, 8), kind, 0.5f, true);
    c.routing.aux_weight = 0.5f;
    Fd h(c, 2, 6);
    const std::vector<float> p = fd_params(h.model, 70);
    const std::vector<float> a = h.analytic(p);
    expect_grads_match(h.model, a, h.numeric(p), {"route.layers.1.prior.", "route.layers.3.prior."});
  }
}

// ---------------------------------------------------------------------------------------------
// Settings

TEST(RoutingConfig, RoundTripsThroughConfigJson) {
  ModelConfig c = routed(base_config(3), Routing::Stt, 0.25f);
  c.routing.ma_window = 7, c.routing.aux_weight = 0.5f, c.routing.gate_penalty = 0.002f;
  c.routing.mode = RouteMode::Threshold, c.routing.g_th = 0.625f, c.routing.student_weight = 0.03f;
  auto back = config_from_json(config_to_json(c, nullptr), "config.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->routing, c.routing);
  auto dense = config_from_json(config_to_json(base_config(3), nullptr), "config.json");
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ(dense->routing.kind, Routing::None);
}

TEST(RoutingConfig, BadSettingsAreRefusedByName) {
  nlohmann::json j = config_to_json(routed(base_config(0), Routing::Sdt, 0.5f), nullptr);
  j["routing"]["capacity"] = 1.5;
  auto r = config_from_json(j, "m/config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("m/config.json: key 'routing.capacity'"), std::string::npos) << r.error().message;
  j["routing"]["capacity"] = 0.5;
  j["routing"]["kind"] = "moe";
  r = config_from_json(j, "m/config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("routing.kind"), std::string::npos) << r.error().message;

  ModelConfig one = routed(base_config(0), Routing::Sdt, 0.5f);
  one.n_layers = 1;
  ASSERT_FALSE(one.validate().ok());
  EXPECT_NE(one.validate().error().message.find("no block of 1 can be routed"), std::string::npos);

  ShapeOverrides o;
  o.preset = "small", o.routing = "mod", o.route.capacity = 0.25f;
  auto shaped = shape_model_config(o, 29, 64);
  ASSERT_TRUE(shaped.ok()) << shaped.error().message;
  EXPECT_EQ(shaped->routing.kind, Routing::Mod);
  EXPECT_TRUE(shaped->routed(1) && !shaped->routed(2) && shaped->routed(3));
  o.routing = "none";
  EXPECT_FALSE(shape_model_config(o, 29, 64).ok()) << "routing settings without --routing";
  o.routing = "sideways";
  EXPECT_FALSE(shape_model_config(o, 29, 64).ok());
  o.routing = "mod", o.route.capacity = 0.0f;
  EXPECT_FALSE(shape_model_config(o, 29, 64).ok()) << "capacity must be in (0, 1]";

  // threshold mode: only for a gate in (0, 1), g_th only with it, g_th in (0, 1)
  auto refusal = [&](const ShapeOverrides& bad) {
    auto r = shape_model_config(bad, 29, 64);
    return r.ok() ? std::string("accepted") : r.error().message;
  };
  ShapeOverrides t;
  t.routing = "stt", t.route_mode = "threshold", t.route.g_th = 0.6f;
  auto stt = shape_model_config(t, 29, 64);
  ASSERT_TRUE(stt.ok()) << stt.error().message;
  EXPECT_EQ(stt->routing.mode, RouteMode::Threshold);
  EXPECT_FLOAT_EQ(stt->routing.g_th, 0.6f);
  t.routing = "mod";
  EXPECT_NE(refusal(t).find("route_mode threshold needs routing sdt or stt"), std::string::npos) << refusal(t);
  t.routing = "sdt", t.route_mode = "sometimes";
  EXPECT_NE(refusal(t).find("route_mode 'sometimes': unknown"), std::string::npos) << refusal(t);
  t.route_mode = "topk";
  EXPECT_NE(refusal(t).find("g_th needs route_mode threshold"), std::string::npos) << refusal(t);
  t.route_mode = "threshold", t.route.g_th = 1.0f;
  EXPECT_NE(refusal(t).find("g_th"), std::string::npos) << refusal(t);
  ShapeOverrides none;
  none.route_mode = "threshold";
  EXPECT_NE(refusal(none).find("need routing"), std::string::npos) << refusal(none);
  nlohmann::json j2 = config_to_json(routed(base_config(0), Routing::Mod, 0.5f), nullptr);
  j2["routing"]["mode"] = "threshold";
  auto r2 = config_from_json(j2, "m/config.json");
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error().message.find("threshold mode needs a gate in (0, 1)"), std::string::npos) << r2.error().message;
  j2["routing"]["mode"] = "often";
  r2 = config_from_json(j2, "m/config.json");
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error().message.find("routing.mode"), std::string::npos) << r2.error().message;
}

// A checkpoint of config c with random weights at dir; its parameters.
std::vector<float> save_random_checkpoint(const std::string& dir, const ModelConfig& c, uint32_t seed) {
  Model m(cpu(), c);
  CheckpointData ck;
  ck.config = c;
  ck.params = random_params(m, seed, 0.3f);
  EXPECT_TRUE(save_checkpoint(dir, ck).ok());
  return ck.params;
}

// The router's tensors are part of the checkpoint contract: saved, loaded, and required or refused
// by what config.json says.
TEST(RoutingConfig, CheckpointRoundTripAndRouterTensorsMissingOrExtra) {
  test::TempDir tmp;
  const ModelConfig c = routed(base_config(3), Routing::Sdt, 0.5f);
  const std::string dir = tmp.path() + "/sdt";
  const std::vector<float> params = save_random_checkpoint(dir, c, 80);
  auto back = load_checkpoint(dir, false);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->config.routing, c.routing);
  EXPECT_EQ(back->params, params);

  // config.json without its routing: the route.* tensors are extra.
  nlohmann::json j = config_to_json(c, nullptr);
  j.erase("routing");
  ASSERT_TRUE(test::write_file(dir + "/config.json", j.dump()));
  auto extra = load_checkpoint(dir, false);
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.error().message.find("is a router's tensor but config.json has no routing"), std::string::npos)
      << extra.error().message;

  // A dense checkpoint whose config.json says routing: the router's tensors are missing.
  const std::string ddir = tmp.path() + "/dense";
  (void)save_random_checkpoint(ddir, base_config(3), 81);
  ASSERT_TRUE(test::write_file(ddir + "/config.json", config_to_json(c, nullptr).dump()));
  auto missing = load_checkpoint(ddir, false);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("route.layers.1."), std::string::npos) << missing.error().message;
  EXPECT_NE(missing.error().message.find("config.json has routing"), std::string::npos) << missing.error().message;
}

// ftx score on a routed checkpoint: the teacher's forward, with what each routed block computed.
TEST(RoutingCli, ScoreReportsWhatEachRoutedBlockComputed) {
  test::TempDir tmp;
  (void)save_random_checkpoint(tmp.path() + "/mod", routed(base_config(0), Routing::Mod, 0.25f), 90);
  ASSERT_TRUE(test::write_file(tmp.path() + "/in.json", R"({"tokens": [[1,2,3,4,5,6,7,8,9], [9,8,7,6,5]]})"));
  const test::Outcome r =
      test::run_ftx({"score", "--checkpoint", tmp.path() + "/mod", "--input", tmp.path() + "/in.json"}, tmp.path());
  ASSERT_EQ(r.code, 0) << test::describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("routing")) << r.out;
  EXPECT_EQ(j["routing"]["router"], "mod");
  ASSERT_EQ(j["routing"]["blocks"].size(), 2u);  // blocks 1 and 3
  const nlohmann::json& b = j["routing"]["blocks"][0];
  EXPECT_EQ(b["block"], 1);
  EXPECT_EQ(b["computed"][0].size(), 2u);  // floor(8 / 4)
  EXPECT_EQ(b["computed"][1].size(), 1u);  // floor(4 / 4)
  EXPECT_EQ(b["gate"][0].size(), 8u);
  EXPECT_NEAR(j["routing"]["capacity"].get<double>(), (2.0 + 1.0) / (8.0 + 4.0), 1e-12);
  EXPECT_EQ(j["logprobs"][0].size(), 8u);
  EXPECT_FALSE(j.contains("kl_per_token"));
}

// ftx score --router student: the student's causal choice, said in the output; a bad --router
// value, or a student asked of a dense model, is one line and exit 1.
TEST(RoutingCli, ScoreRunsTheStudentPathAndRefusesBadRouters) {
  test::TempDir tmp;
  (void)save_random_checkpoint(tmp.path() + "/sdt", routed(base_config(0), Routing::Sdt, 0.5f), 91);
  (void)save_random_checkpoint(tmp.path() + "/dense", base_config(0), 92);
  ASSERT_TRUE(test::write_file(tmp.path() + "/in.json", R"({"tokens": [[1,2,3,4,5,6,7,8,9]]})"));
  auto score = [&](const std::string& dir, const std::string& router) {
    return test::run_ftx(
        {"score", "--checkpoint", tmp.path() + "/" + dir, "--input", tmp.path() + "/in.json", "--router", router},
        tmp.path());
  };
  const test::Outcome r = score("sdt", "student");
  ASSERT_EQ(r.code, 0) << test::describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["routing"]["path"].get<std::string>().rfind("student", 0), 0u) << r.out;
  EXPECT_NE(j["routing"]["path"].get<std::string>().find("(causal)"), std::string::npos) << r.out;
  const test::Outcome bad = score("sdt", "oracle");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--router 'oracle': unknown"), std::string::npos) << test::describe(bad);
  const test::Outcome dense = score("dense", "student");
  EXPECT_EQ(dense.code, 1);
  EXPECT_NE(dense.err.find("--router student needs a routed model"), std::string::npos) << test::describe(dense);
}

// Generation on the student path (docs/subjective_depth.md, "Generation"): two sequences, one
// prompt prefilled each, then one token per step at their own positions, give the logits of the
// student path's full forward over each whole sequence; a sequence that has reached its end
// repeats its last step (as a stopped sequence in generate_text) and gets the same logits again;
// and every routed block's cache holds exactly the tokens that forward computed. With Z too.
TEST(RoutedDecode, TheCachedStudentPathEqualsTheFullStudentForward) {
  const int T = 14, prompts[2] = {5, 1};
  struct Case {
    Routing kind;
    bool hard;
  };
  for (const Case& k : {Case{Routing::Random, false}, Case{Routing::Mod, false}, Case{Routing::Sdt, false},
                        Case{Routing::Stt, false}, Case{Routing::Stt, true}}) {
    for (int H : {0, 3}) {
      SCOPED_TRACE(std::string(routing_name(k.kind)) + (k.hard ? " hard gate" : "") + " H=" + std::to_string(H));
      ModelConfig c = routed(base_config(H), k.kind, 0.5f, k.hard);
      c.routing.ma_window = 4;  // SDT's moving average slides within the sequence
      Model m(cpu(), c);
      m.load_params(random_params(m, 71, 0.3f).data());
      const int V = c.vocab_size;
      std::vector<std::vector<int32_t>> seqs = {test::random_tokens(T, 29, 8), test::random_tokens(T, 29, 9)};
      std::vector<std::vector<uint32_t>> codes(2, std::vector<uint32_t>(size_t(T)));
      for (int b = 0; b < 2; ++b)
        for (int t = 0; t < T; ++t) codes[size_t(b)][size_t(t)] = H > 0 ? uint32_t(b * 5 + t * 3) % (1u << H) : 0u;
      const uint32_t* z[2] = {H > 0 ? codes[0].data() : nullptr, H > 0 ? codes[1].data() : nullptr};
      // The full student-path forward of each sequence alone (random routing: seed 11, stream b).
      std::vector<std::vector<float>> want(2, std::vector<float>(size_t(T) * V));
      std::map<std::pair<int, int>, std::vector<int32_t>> computed;  // (sequence, block)
      int total = 0;
      for (int b = 0; b < 2; ++b) {
        auto s = m.make_state(1, T);
        s->route_student = true;
        (void)m.forward(*s, seqs[size_t(b)].data(), nullptr, z[b], 11, uint64_t(b), 0.0f);
        m.read_logits(*s, want[size_t(b)].data());
        for (int l = 0; l < c.n_layers; ++l)
          if (c.routed(l)) computed[{b, l}] = m.read_route_choice(*s, l)[0], total += int(computed[{b, l}].size());
      }
      EXPECT_GT(total, 0);
      EXPECT_LT(total, 2 * 2 * T) << "some tokens skipped, or the test shows nothing";
      auto d = m.make_decode_state(2, T);
      d->route_seed = 11;
      std::vector<std::vector<float>> got(2, std::vector<float>(size_t(T) * V));
      for (int b = 0; b < 2; ++b)
        m.prefill(*d, b, seqs[size_t(b)].data(), z[b], prompts[b], 0, Model::PrefillLogits::All, got[size_t(b)].data());
      std::vector<float> step(2 * size_t(V));
      double err = 0, ref = 0;
      for (int n = 0; n < T - 1; ++n) {
        int pos[2];
        int32_t tok[2];
        uint32_t zz[2];
        for (int b = 0; b < 2; ++b) {
          pos[b] = std::min(prompts[b] + n, T - 1);
          tok[b] = seqs[size_t(b)][size_t(pos[b])];
          zz[b] = codes[size_t(b)][size_t(pos[b])];
        }
        m.decode_step(*d, tok, zz, pos, step.data());
        for (int b = 0; b < 2; ++b)
          std::copy(step.begin() + std::ptrdiff_t(b) * V, step.begin() + std::ptrdiff_t(b + 1) * V,
                    got[size_t(b)].begin() + std::ptrdiff_t(pos[b]) * V);
        if (pos[0] == T - 1)  // sequence 0 repeats its last step: the same logits again
          for (int v = 0; v < V; ++v)
            EXPECT_NEAR(step[size_t(v)], want[0][size_t(T - 1) * V + v], 1e-4) << "repeated step " << n;
      }
      for (int b = 0; b < 2; ++b)
        for (size_t i = 0; i < got[size_t(b)].size(); ++i)
          err = std::max(err, double(std::abs(got[size_t(b)][i] - want[size_t(b)][i]))),
          ref += std::abs(want[size_t(b)][i]);
      EXPECT_LE(err, 1e-5 * ref / double(2 * T * V)) << "rounding only (the GEMMs' shapes differ)";
      for (const auto& [key, positions] : computed)
        EXPECT_EQ(m.decode_route_positions(*d, key.second, key.first), positions)
            << "sequence " << key.first << ", block " << key.second << ": the cache's tokens";
    }
  }
}

// The teacher's path recomputes the whole sequence at every step: its logits are the teacher's
// forward over the sequence so far, bit for bit; a dense model has no teacher.
TEST(RoutedDecode, TheTeachersPathIsTheTeachersForwardOverTheSequenceSoFar) {
  const int T = 10;
  const ModelConfig c = routed(base_config(0), Routing::Sdt, 0.5f);
  Model m(cpu(), c);
  m.load_params(random_params(m, 72, 0.3f).data());
  const int V = c.vocab_size;
  const std::vector<int32_t> seq = test::random_tokens(T, 29, 10);
  auto teacher_last = [&](int n) {
    auto s = m.make_state(1, n);
    (void)m.forward(*s, seq.data(), nullptr, nullptr, 0, 0, 0.0f);
    std::vector<float> all(size_t(n) * V);
    m.read_logits(*s, all.data());
    return std::vector<float>(all.end() - V, all.end());
  };
  auto d = m.make_decode_state(1, T, true);
  std::vector<float> got(static_cast<size_t>(V));
  m.prefill(*d, 0, seq.data(), nullptr, 4, 0, Model::PrefillLogits::Last, got.data());
  EXPECT_EQ(got, teacher_last(4));
  for (int p = 4; p < T; ++p) {
    m.decode_step(*d, &seq[size_t(p)], nullptr, p, got.data());
    EXPECT_EQ(got, teacher_last(p + 1)) << "position " << p;
  }
  Model dense(cpu(), base_config(0));
  auto no = dense.try_make_decode_state(1, T, true);
  ASSERT_FALSE(no.ok());
  EXPECT_NE(no.error().message.find("needs a routed model"), std::string::npos) << no.error().message;
  SampleConfig sc;
  sc.max_new_tokens = 4;
  EXPECT_TRUE(check_generation_request(c, 2, sc, {}).ok()) << "a routed model generates";
}

// ---- what the blocks computed (core/eval/route_metrics.h) -------------------------------------------

TEST(RouteMetrics, AurocCountsPairsWithTiesAsHalf) {
  // brute force over every (positive, negative) pair
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> grid(0, 6);  // few values: many ties
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> pos(size_t(1 + trial % 7)), neg(size_t(1 + trial % 5));
    for (float& v : pos) v = float(grid(rng)) / 6.0f;
    for (float& v : neg) v = float(grid(rng)) / 6.0f;
    double u = 0;
    for (float a : pos)
      for (float b : neg) u += a > b ? 1.0 : a == b ? 0.5 : 0.0;
    EXPECT_DOUBLE_EQ(auroc(pos, neg), u / double(pos.size() * neg.size()));
  }
  EXPECT_DOUBLE_EQ(auroc({0.9f, 0.8f}, {0.1f, 0.2f}), 1.0);
  EXPECT_DOUBLE_EQ(auroc({0.1f}, {0.9f}), 0.0);
  EXPECT_TRUE(std::isnan(auroc({}, {0.5f})));
}

TEST(RouteMetrics, SyntheticEventsFollowTheCharacters) {
  // prompt "C>", then background, a noised start ('!'), the letters, background
  const std::vector<SynthEvent> e = synthetic_events("C>__!CC_!_");
  const std::vector<SynthEvent> want = {
      SynthEvent::Prompt, SynthEvent::Prompt, SynthEvent::Background, SynthEvent::Background, SynthEvent::Noise,
      SynthEvent::Start,  SynthEvent::Letter, SynthEvent::Background, SynthEvent::Noise,      SynthEvent::Background};
  EXPECT_EQ(e, want);
}

// read_block_compute agrees with the model's own reads, and its host-side gate parts give back the
// gate the backend computed (g = s_ce + s_cu - s_ce s_cu), for SDT and STT.
TEST(RouteMetrics, BlockComputeMatchesTheModelsChoiceAndGate) {
  for (Routing kind : {Routing::Mod, Routing::Sdt, Routing::Stt}) {
    SCOPED_TRACE(routing_name(kind));
    const ModelConfig c = routed(base_config(0), kind, 0.5f);
    Model m(cpu(), c);
    m.load_params(random_params(m, 21, 0.3f).data());
    const int B = 2, T = 9, k = c.route_k(T);
    const std::vector<int32_t> in = test::random_tokens(size_t(B) * T, c.vocab_size, 8),
                               tg = test::random_tokens(size_t(B) * T, c.vocab_size, 9);
    auto s = m.make_state(B, T);
    (void)m.forward(*s, in.data(), tg.data(), nullptr, 3, 4, 0.0f);
    const std::vector<BlockCompute> blocks = read_block_compute(m, *s, B, T);
    ASSERT_EQ(blocks.size(), size_t(c.n_layers));
    for (const BlockCompute& b : blocks) {
      EXPECT_EQ(b.routed, c.routed(b.layer));
      if (!b.routed) continue;
      std::vector<float> gate(size_t(B) * T), student(size_t(B) * T);
      const std::vector<std::vector<int32_t>> choice = m.read_route_choice(*s, b.layer);
      m.read_route_gate(*s, b.layer, gate.data());
      m.read_route_student(*s, b.layer, student.data());
      EXPECT_EQ(b.gate, gate);
      EXPECT_EQ(b.student, student);
      for (int r = 0; r < B; ++r) {
        EXPECT_EQ(std::count(b.computed.begin() + r * T, b.computed.begin() + (r + 1) * T, uint8_t(1)), k);
        ASSERT_EQ(choice[size_t(r)].size(), size_t(k));
        for (int32_t t : choice[size_t(r)]) EXPECT_EQ(b.computed[size_t(r * T + t)], 1);
      }
      EXPECT_EQ(b.s_ce.empty(), kind == Routing::Mod);
      for (size_t i = 0; i < b.s_ce.size(); ++i) {
        const double a = b.s_ce[i], u = b.s_cu[i];
        EXPECT_NEAR(a + u - a * u, b.gate[i], 1e-5) << "token " << i;
        EXPECT_GE(b.d_st[i], 0.0f);
        EXPECT_GE(b.d_ch[i], 0.0f);
      }
    }
  }
}

// The evaluator's metrics for a random-weight routed model on n synthetic-task sequences.
std::map<std::string, double> evaluate_routed(Routing kind, int n, uint32_t seed) {
  TrainConfig tc;
  tc.dataset = "synthetic";
  auto data = make_dataset(tc);
  EXPECT_TRUE(data);
  if (!data) return {};
  ModelConfig c = routed(base_config(0), kind, 0.5f);
  c.vocab_size = data->tokenizer().vocab_size(), c.max_seq_len = data->seq_len();
  Model m(cpu(), c);
  m.load_params(random_params(m, seed, 0.2f).data());
  EvalConfig ec;
  ec.val_sequences = n, ec.batch = n;
  std::map<std::string, double> got;
  for (const auto& [k, v] : evaluate(m, *data, ec, 0.0f, nullptr)) got[k] = v;
  return got;
}

// The evaluator scores a routed model's gates against the synthetic task's events: random routing
// (gate 1 everywhere) is at chance, and every routed block and event has its keys.
TEST(RouteMetrics, TheEvaluatorStoresTheGatesEventAurocs) {
  std::map<std::string, double> got = evaluate_routed(Routing::Random, 16, 3);
  for (int l : {1, 3}) {
    for (const char* e : {"start", "letter", "noise"}) {
      const std::string a = "route/auroc/" + std::string(e) + "/" + std::to_string(l);
      ASSERT_TRUE(got.count(a)) << a;
      EXPECT_DOUBLE_EQ(got[a], 0.5) << a << ": random routing's gate is 1 everywhere";
      EXPECT_TRUE(got.count("route/computed/" + std::string(e) + "/" + std::to_string(l)));
    }
    EXPECT_NEAR(got["route/computed/background/" + std::to_string(l)], 0.5, 0.1);
    EXPECT_DOUBLE_EQ(got["route/gate/" + std::to_string(l)], 1.0);
  }
  for (const char* e : {"start", "letter", "noise"}) EXPECT_DOUBLE_EQ(got["route/auroc/" + std::string(e)], 0.5) << e;
  EXPECT_DOUBLE_EQ(got["route/gate"], 1.0);
  EXPECT_FALSE(got.count("route/s_ce")) << "random routing has no surprise";
  EXPECT_TRUE(got.count("val/ce_prior"));
}

// SDT's evaluation stores the gate and its two parts per block and over the blocks, consistent
// with each other (the means of s_ce and s_cu bound the mean gate: max(a, c) <= g <= a + c).
TEST(RouteMetrics, TheEvaluatorStoresTheSurpriseMeans) {
  std::map<std::string, double> got = evaluate_routed(Routing::Sdt, 8, 4);
  for (const char* k : {"route/gate", "route/s_ce", "route/s_cu", "route/gate/1", "route/s_ce/3", "route/auroc/start"})
    EXPECT_TRUE(got.count(k)) << k;
  EXPECT_GE(got["route/gate"], std::max(got["route/s_ce"], got["route/s_cu"]) - 1e-9);
  EXPECT_LE(got["route/gate"], got["route/s_ce"] + got["route/s_cu"] + 1e-9);
  EXPECT_NEAR(got["route/gate"], (got["route/gate/1"] + got["route/gate/3"]) / 2, 1e-12);
}

// With a student router the evaluator also stores the realised capacities (top-k: k / T exactly),
// the student's agreement with the teacher, and the CE of both paths on the same sequences.
TEST(RouteMetrics, TheEvaluatorStoresTheStudentAgainstTheTeacher) {
  std::map<std::string, double> got = evaluate_routed(Routing::Mod, 8, 5);
  const double T = 65, k = std::floor(0.5 * T);
  EXPECT_DOUBLE_EQ(got["route/capacity/1"], k / T);
  EXPECT_DOUBLE_EQ(got["route/capacity"], k / T);
  for (const char* key : {"route/student/agree", "route/student/agree/3", "route/student/capacity",
                          "route/student/capacity/1", "route/student/ce", "route/teacher/ce"}) {
    ASSERT_TRUE(got.count(key)) << key;
    EXPECT_TRUE(std::isfinite(got[key])) << key;
  }
  EXPECT_GE(got["route/student/agree"], 0.0);
  EXPECT_LE(got["route/student/agree"], 1.0);
  EXPECT_GT(got["route/student/ce"], 0.0);
  EXPECT_FALSE(evaluate_routed(Routing::Random, 8, 5).count("route/student/agree")) << "random routing has no student";
}

// The Compute view's inspection on either path: the teacher's top-k computes k of the T tokens in
// every routed block, and says it is not causal; the student path computes what the student
// chooses, and says it is causal.
TEST(RouteMetrics, InspectComputeRunsTheTeacherOrTheStudent) {
  TrainConfig tc;
  tc.dataset = "synthetic";
  auto data = make_dataset(tc);
  ASSERT_TRUE(data);
  ModelConfig c = routed(base_config(0), Routing::Sdt, 0.5f);
  c.vocab_size = data->tokenizer().vocab_size(), c.max_seq_len = data->seq_len();
  ExplorerModel m;
  m.run = "sdt", m.train = tc, m.tokenizer = std::shared_ptr<const Tokenizer>(data->tokenizer().clone());
  m.seq_len = data->seq_len(), m.model = std::make_unique<Model>(cpu(), c);
  m.model->load_params(random_params(*m.model, 22, 0.3f).data());
  const std::string text = "K>____K___!__";
  auto teacher = inspect_compute(m, text, 1);
  ASSERT_TRUE(teacher.ok()) << teacher.error().message;
  EXPECT_FALSE(teacher->student);
  EXPECT_NE(teacher->path.find("not causal"), std::string::npos) << teacher->path;
  const int T = int(text.size()) - 1, k = c.route_k(T);
  for (const BlockCompute& b : teacher->blocks)
    if (b.routed) EXPECT_EQ(std::count(b.computed.begin(), b.computed.end(), uint8_t(1)), k) << "block " << b.layer;
  auto student = inspect_compute(m, text, 1, true);
  ASSERT_TRUE(student.ok()) << student.error().message;
  EXPECT_TRUE(student->student);
  EXPECT_EQ(student->path.rfind("student", 0), 0u) << student->path;
  for (const BlockCompute& b : student->blocks) {
    if (!b.routed) continue;
    EXPECT_FALSE(b.s_ce.empty()) << "SDT's student path still measures the decision block's surprise";
    ASSERT_EQ(b.student.size(), size_t(T));
    for (int t = 0; t < T; ++t)
      EXPECT_EQ(b.computed[size_t(t)] != 0, b.student[size_t(t)] > 0.5f) << "block " << b.layer << " position " << t;
  }
  // STT's student path runs no teacher pass: no surprise is read, and the gate is the student's.
  ModelConfig stt = routed(base_config(0), Routing::Stt, 0.5f);
  stt.vocab_size = c.vocab_size, stt.max_seq_len = c.max_seq_len;
  m.model = std::make_unique<Model>(cpu(), stt);
  m.model->load_params(random_params(*m.model, 23, 0.3f).data());
  auto stt_student = inspect_compute(m, text, 1, true);
  ASSERT_TRUE(stt_student.ok()) << stt_student.error().message;
  for (const BlockCompute& b : stt_student->blocks)
    if (b.routed) {
      EXPECT_TRUE(b.s_ce.empty() && b.d_st.empty()) << "block " << b.layer;
      EXPECT_EQ(b.gate, b.student) << "block " << b.layer;
    }
}

}  // namespace
}  // namespace ftx
