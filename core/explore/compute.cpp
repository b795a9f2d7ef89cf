// Compute inspection (compute.h).
#include "core/explore/compute.h"

#include <algorithm>

#include "kernels/base/philox.h"

namespace ftx {

Result<ComputeInspection> inspect_compute(ExplorerModel& m, const std::string& text, uint64_t seed, bool student) {
  const ModelConfig& mc = m.model->config();
  if (mc.routing.kind == Routing::None)
    return make_error("run '" + m.run + "' routes no block (--routing none): pick a routed run");
  auto tokens = encode_text(m, text, "sequence");
  if (!tokens) return tokens.error();
  const int n = static_cast<int>(tokens->size());
  if (n < 2 || n > m.seq_len)
    return make_error("the sequence must have 2.." + std::to_string(m.seq_len) + " tokens, got " + std::to_string(n));
  ComputeInspection ci;
  ci.text = text, ci.T = n - 1;
  ci.router = routing_name(mc.routing.kind), ci.capacity = mc.routing.capacity;
  ci.student = student, ci.path = route_path_text(mc.routing, student);
  if (labels_tokens(m))
    for (int32_t id : *tokens) ci.tokens.emplace_back(m.tokenizer->token_bytes(id));
  auto state = m.model->make_state(1, ci.T);
  state->route_student = student;
  (void)m.model->forward(*state, tokens->data(), tokens->data() + 1, nullptr, seed, kStreamEval, 0.0f);
  ci.blocks = read_block_compute(*m.model, *state, 1, ci.T);
  int64_t computed = 0, offered = 0;
  for (const BlockCompute& b : ci.blocks)
    if (b.routed) computed += std::count(b.computed.begin(), b.computed.end(), uint8_t(1)), offered += ci.T;
  ci.realised = offered ? double(computed) / double(offered) : 0.0;
  return ci;
}

}  // namespace ftx
