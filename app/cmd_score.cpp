// ftx score: log-probabilities of given token sequences under any model file (our checkpoints,
// Hugging Face directories, GGUF), optionally with given latent codes. The interface other
// implementations use to check ours:
//   input  {"tokens": [[...], ...], "codes": [[...], ...]}   (codes optional, len(tokens[i]) - 1)
//   output {"logprobs": [[...], ...], "ce": mean -logprob, "kl": mean posterior KL per position,
//           "kl_per_token": [[...], ...] (a Free Transformer's KL at each position)}
// A plain decoder is scored through the prefill path (GEMM chunks, any length the context allows);
// a Free Transformer through the full forward pass, whose encoder reads the whole sequence, and so
// is a routed model (docs/subjective_depth.md): its top-k choice reads the whole sequence too. For
// a routed model the output adds "routing": per routed block the positions it computed and every
// token's gate, and the realised capacity.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/common.h"
#include "core/eval/route_metrics.h"
#include "kernels/base/philox.h"

namespace ftx::app {
namespace {

using nlohmann::json;

struct ScoreInput {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<uint32_t>> codes;  // empty: from the encoder
};

Result<ScoreInput> read_input(const std::string& path, const ModelConfig& m) {
  std::ifstream f(path);
  if (!f) return make_error(path + ": cannot open");
  json j = json::parse(f, nullptr, false);
  if (j.is_discarded()) return make_error(path + ": not valid JSON");
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
    return make_error(path + ": expected an object with \"tokens\": [[...], ...]");
  if (j["tokens"].empty()) return make_error(path + ": \"tokens\" is empty (nothing to score)");
  ScoreInput in;
  const bool has_codes = j.contains("codes");
  if (has_codes && (!j["codes"].is_array() || j["codes"].size() != j["tokens"].size()))
    return make_error(path + ": \"codes\" must be a list with one entry per sequence of \"tokens\"");
  if (has_codes && !m.is_free()) return make_error(path + ": \"codes\" given but the checkpoint has no latent");
  for (size_t i = 0; i < j["tokens"].size(); ++i) {
    const json& row = j["tokens"][i];
    const std::string where = path + ": tokens[" + std::to_string(i) + "]";
    if (!row.is_array() || row.size() < 2) return make_error(where + ": need a list of at least 2 token ids");
    if (static_cast<int>(row.size()) - 1 > m.max_seq_len)
      return make_error(where + ": " + std::to_string(row.size()) + " tokens exceed the context of " +
                        std::to_string(m.max_seq_len) + " positions (+1 predicted)");
    std::vector<int32_t> t;
    for (const json& v : row) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= m.vocab_size)
        return make_error(where + ": token " + v.dump() + " is not an id in 0.." + std::to_string(m.vocab_size - 1));
      t.push_back(v.get<int32_t>());
    }
    in.tokens.push_back(std::move(t));
    if (!has_codes) continue;
    const json& cr = j["codes"][i];
    const std::string cw = path + ": codes[" + std::to_string(i) + "]";
    if (!cr.is_array() || cr.size() != row.size() - 1)
      return make_error(cw + ": need " + std::to_string(row.size() - 1) + " codes (one per input position)");
    std::vector<uint32_t> c;
    for (const json& v : cr) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= m.num_codes())
        return make_error(cw + ": code " + v.dump() + " outside 0.." + std::to_string(m.num_codes() - 1));
      c.push_back(v.get<uint32_t>());
    }
    in.codes.push_back(std::move(c));
  }
  return in;
}

}  // namespace

void add_score_options(CLI::App& app, ScoreArgs& a) {
  auto* c = app.add_subcommand("score", "Log-probabilities of token sequences under a checkpoint (JSON in, JSON out)");
  c->add_option("--checkpoint", a.checkpoint, "A checkpoint directory or a .gguf file")->required();
  c->add_option("--input", a.input, "JSON file {\"tokens\": [[...]], \"codes\": [[...]]}")->required();
  c->add_option("--seed", a.seed, "Seed of the encoder's samples when no codes are given")->capture_default_str();
  c->add_option("--router", a.router,
                "Routed models: teacher (the training choice) | student (the causal student router)")
      ->capture_default_str();
  add_device_options(c, a.device, a.precision);
}

int run_score(const ScoreArgs& a) {
  if (a.router != "teacher" && a.router != "student")
    return fail("--router '" + a.router + "': unknown (expected teacher or student)");
  auto lm = load_model_dir(a.checkpoint, a.device, a.precision);
  if (!lm) return fail(lm.error());
  Model& model = *lm->model;
  auto in = read_input(a.input, model.config());
  if (!in) return fail(in.error());
  json logprobs = json::array(), kl_rows = json::array();
  double ce_sum = 0, kl_sum = 0;
  int64_t n_pred = 0;
  const ModelConfig& mc = model.config();
  const int V = mc.vocab_size;
  const bool routed = mc.routing.kind != Routing::None;
  if (a.router == "student" && !routed) return fail(a.checkpoint + ": --router student needs a routed model");
  const bool student = a.router == "student";
  json blocks = json::array();  // routed models: one entry per routed block
  for (int l = 0; l < mc.n_layers; ++l)
    if (mc.routed(l)) blocks.push_back({{"block", l}, {"computed", json::array()}, {"gate", json::array()}});
  int64_t computed = 0, offered = 0;
  for (size_t i = 0; i < in->tokens.size(); ++i) {
    const auto& t = in->tokens[i];
    const int T = static_cast<int>(t.size()) - 1;
    json row = json::array();
    if (mc.is_free() || routed) {
      auto state = model.make_state(1, T);
      state->route_student = student;
      const uint32_t* codes = in->codes.empty() ? nullptr : in->codes[i].data();
      StepStats st = model.forward(*state, t.data(), t.data() + 1, codes, a.seed, kStreamEval + i, 0.0f);
      std::vector<float> losses(T), kl(T);
      model.read_token_losses(*state, losses.data());
      for (float l : losses) row.push_back(-static_cast<double>(l));
      if (mc.is_free()) {
        model.read_kl(*state, kl.data());
        kl_rows.push_back(kl);
      }
      ce_sum += st.ce * T, kl_sum += st.kl * T;
      for (json& b : blocks) {
        std::vector<float> gate(static_cast<size_t>(T));
        const std::vector<int32_t> pos = model.read_route_choice(*state, b["block"].get<int>())[0];
        model.read_route_gate(*state, b["block"].get<int>(), gate.data());
        b["computed"].push_back(pos);
        b["gate"].push_back(gate);
        computed += int64_t(pos.size()), offered += T;
      }
    } else {
      auto state = model.try_make_decode_state(1, T);
      if (!state) return fail(state.error());
      std::vector<float> logits(size_t(T) * V);
      model.prefill(**state, 0, t.data(), nullptr, T, 0, Model::PrefillLogits::All, logits.data());
      for (int p = 0; p < T; ++p) {
        const float* l = logits.data() + size_t(p) * V;
        double mx = l[0], z = 0;
        for (int v = 1; v < V; ++v) mx = std::max(mx, double(l[v]));
        for (int v = 0; v < V; ++v) z += std::exp(double(l[v]) - mx);
        const double lp = double(l[t[size_t(p) + 1]]) - mx - std::log(z);
        row.push_back(lp);
        ce_sum -= lp;
      }
    }
    logprobs.push_back(std::move(row));
    n_pred += T;
  }
  json out{{"logprobs", logprobs}, {"ce", n_pred ? ce_sum / n_pred : 0.0}, {"kl", n_pred ? kl_sum / n_pred : 0.0}};
  if (mc.is_free()) out["kl_per_token"] = kl_rows;
  if (routed)
    out["routing"] = {{"router", routing_name(mc.routing.kind)},
                      {"path", route_path_text(mc.routing, student)},
                      {"capacity", offered ? double(computed) / double(offered) : 0.0},
                      {"blocks", blocks}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace ftx::app
