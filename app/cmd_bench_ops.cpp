// ftx bench ops: where a training step's time goes. The step of `bench train`'s configuration runs
// kTracedSteps times through kernels/op_trace.h, which notes every op with its sizes and its wall
// time inside the step; each distinct (op, sizes) is then built from the op table
// (kernels/op_table.h) with random inputs and timed alone on the same backend. Reported per op:
// time per call alone and in the step, calls per step, its milliseconds per step (alone and in
// the step) and the alone share of the measured step, the bytes it moves per second and, for
// products, TFLOP/s. Reported per step: the ops' time in the step and what lies between them
// (host work, the data, launch gaps). JSON on stdout, the same as a table on stderr (slowest
// first).
//
// Alone, an op finds its inputs in the caches its last repetition left; in the step they were
// written by other ops, earlier. The difference between the two columns is that, on the CPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <tuple>

#include "app/bench_common.h"
#include "app/common.h"
#include "kernels/op_trace.h"

namespace ftx::app {
namespace {

using nlohmann::json;

// The sizes that tell two calls of an op apart.
auto dims_key(const OpDims& d) {
  return std::make_tuple(d.n, d.N, d.C, d.OC, d.V, d.H, d.B, d.T, d.NH, d.NKV, d.HS, d.Tk, d.Tk_cap, d.pos0, d.causal,
                         d.variant);
}

// Steps traced with each op's wall time; their mean is reported.
constexpr int kTracedSteps = 5;

struct OpTiming {
  std::string op, label;
  double calls = 0.0;  // per step
  double us_per_call = 0.0, bytes = 0.0, flops = 0.0;
  double in_step_ms = 0.0;  // per step, the calls' wall time inside the traced steps
};

// Microseconds per call: `warmup` calls, then `reps` back to back and one synchronize (so a GPU's
// launch overhead counts once per call, as in a step).
Result<OpTiming> time_op(Backend& be, const OpCall& call, double calls, int warmup, int reps) {
  const OpRow* row = find_op_row(call.op);
  if (!row) return Error{"bench ops: no op table row for " + call.op};
  const OpCase c = row->build(call.dims, 1);
  auto buffers = OpBuffers::upload(be, c);
  if (!buffers) return buffers.error();
  OpBuffers& b = **buffers;
  b.prepare();
  for (int i = 0; i < warmup; ++i) b.run();
  be.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) b.run();
  be.synchronize();
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
  return OpTiming{c.op, c.label, calls, us, b.traffic_bytes(), c.flops, 0.0};
}

void print_table(const std::vector<OpTiming>& ops, double step_ms, double traced_ms) {
  std::fprintf(stderr, "%-24s %-52s %6s %10s %10s %9s %9s %7s %8s %8s\n", "op", "sizes", "calls", "us/call", "in step",
               "ms/step", "in step", "share", "GB/s", "TFLOP/s");
  double total = 0.0, in_step = 0.0;
  for (const OpTiming& o : ops) {
    const double ms = o.calls * o.us_per_call / 1e3;
    total += ms;
    in_step += o.in_step_ms;
    std::fprintf(stderr, "%-24s %-52.52s %6.4g %10.1f %10.1f %9.3f %9.3f %6.1f%% %8.1f", o.op.c_str(), o.label.c_str(),
                 o.calls, o.us_per_call, o.in_step_ms * 1e3 / o.calls, ms, o.in_step_ms, 100.0 * ms / step_ms,
                 o.bytes / o.us_per_call / 1e3);
    if (o.flops > 0)
      std::fprintf(stderr, " %8.2f\n", o.flops / o.us_per_call / 1e6);
    else
      std::fprintf(stderr, " %8s\n", "");
  }
  std::fprintf(stderr, "ops timed alone: %.3f ms of a %.3f ms step (%.1f %%)\n", total, step_ms,
               100.0 * total / step_ms);
  std::fprintf(stderr, "in the traced steps: ops %.3f ms + between ops %.3f ms = %.3f ms a step\n", in_step,
               traced_ms - in_step, traced_ms);
}

}  // namespace

int run_bench_ops(const BenchArgs& a) {
  if (a.ops_reps <= 0) return fail("bench ops: --reps must be positive");
  auto setup = bench_training(a);
  if (!setup) return fail(setup.error());
  auto made_backend = make_backend(a.device, a.precision);
  if (!made_backend) return fail(made_backend.error());
  std::unique_ptr<Backend> backend = std::move(*made_backend);
  OpTraceBackend trace(*backend);
  auto trainer = start_bench_trainer(trace, *setup);
  if (!trainer) return fail(trainer.error());
  const auto secs = time_train_steps(trace, **trainer, *setup->data, a.warmup, a.steps);
  const double step_ms = median(secs) * 1e3;

  trace.record(true, true);
  const auto traced_secs = time_train_steps(trace, **trainer, *setup->data, 0, kTracedSteps);
  trace.record(false);
  double traced_ms = 0.0;
  for (double sec : traced_secs) traced_ms += sec * 1e3 / kTracedSteps;
  struct Distinct {
    OpCall call;
    int count = 0;
    double seconds = 0.0;
  };
  std::map<std::pair<std::string, decltype(dims_key(OpDims{}))>, Distinct> distinct;
  for (const OpCall& call : trace.calls()) {
    Distinct& d = distinct.try_emplace({call.op, dims_key(call.dims)}, Distinct{call}).first->second;
    ++d.count;
    d.seconds += call.seconds;
  }
  std::vector<OpTiming> ops;
  for (const auto& [key, d] : distinct) {
    auto t = time_op(*backend, d.call, double(d.count) / kTracedSteps, std::min(a.ops_reps, 3), a.ops_reps);
    if (!t) return fail(t.error());
    t->in_step_ms = d.seconds * 1e3 / kTracedSteps;
    ops.push_back(*t);
  }
  std::sort(ops.begin(), ops.end(),
            [](const OpTiming& x, const OpTiming& y) { return x.calls * x.us_per_call > y.calls * y.us_per_call; });
  print_table(ops, step_ms, traced_ms);

  json j = common_report(a, *backend, (*trainer)->model_config(), (*trainer)->model().num_params());
  json rows = json::array();
  double total_ms = 0.0, in_step_ms = 0.0;
  for (const OpTiming& o : ops) {
    const double ms = o.calls * o.us_per_call / 1e3;
    total_ms += ms;
    in_step_ms += o.in_step_ms;
    rows.push_back({{"op", o.op},
                    {"sizes", o.label},
                    {"calls_per_step", o.calls},
                    {"us_per_call", o.us_per_call},
                    {"ms_per_step", ms},
                    {"in_step_us_per_call", o.in_step_ms * 1e3 / o.calls},
                    {"in_step_ms_per_step", o.in_step_ms},
                    {"share_of_step", ms / step_ms},
                    {"gb_per_s", o.bytes / o.us_per_call / 1e3},
                    {"tflops", o.flops > 0 ? json(o.flops / o.us_per_call / 1e6) : json(nullptr)}});
  }
  j.update({{"seq_len", setup->data->seq_len() - 1},
            {"step_ms_median", step_ms},
            {"ops_ms_per_step", total_ms},
            {"traced_steps", kTracedSteps},
            {"traced_step_ms", traced_ms},
            {"ops_in_step_ms_per_step", in_step_ms},
            {"between_ops_ms_per_step", traced_ms - in_step_ms},
            {"op_calls_per_step", trace.calls().size() / kTracedSteps},
            {"reps_per_op", a.ops_reps},
            {"ops", rows}});
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

}  // namespace ftx::app
