// ftx bench: the command and its benchmarks' options; each benchmark is its own file
// (cmd_bench_train.cpp, cmd_bench_ops.cpp, cmd_bench_mapper.cpp, cmd_bench_generate.cpp), what
// they share is bench_common.h.
// Deliberately not here: anything written to disk (the run store is ":memory:"), and data or
// weights that matter (a reshaped model trains on uniform random tokens, generation runs random
// weights: throughput depends on neither).
#include "app/bench_common.h"
#include "app/common.h"

namespace ftx::app {

void add_bench_options(CLI::App& app, BenchArgs& a) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  // The training configuration of bench train and bench ops.
  auto add_training = [&a](CLI::App* c) {
    add_shape_options(c, a.shape);
    c->add_option("--vocab", a.vocab, "Vocabulary size (other than 29: uniform random tokens)");
    c->add_option("--seq-len", a.seq_len, "Predicted positions T (other than 65: uniform random tokens)");
    c->add_option("--batch", a.batch, "Sequences per step")->capture_default_str();
    c->add_option("--warmup", a.warmup, "Untimed steps first")->capture_default_str();
    c->add_option("--steps", a.steps, "Timed steps")->capture_default_str();
    add_device_options(c, a.device, a.precision);
  };
  auto* c = bench->add_subcommand("train", "Training throughput (tokens/s, model TFLOP/s) of a preset, maybe reshaped");
  c->callback([&a] { a.command = "train"; });
  add_training(c);
  c->add_option("--processes", a.processes,
                "Data-parallel processes (relaunched under mpirun; --batch stays the global batch)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option(
       "--bucket-mb", a.bucket_mb,
       "With --processes, on the CPU or with NCCL: gradient buckets overlapped with the backward (0: after it)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--gemm-peak-seconds", a.gemm_peak_seconds,
                "On the CPU: after the steps, the machine's GEMM peak at the step's precision measured this long "
                "(0: not measured)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  auto* ops = bench->add_subcommand("ops", "Each op of a training step timed alone: time per call, share of the step");
  ops->callback([&a] { a.command = "ops"; });
  add_training(ops);
  ops->add_option("--reps", a.ops_reps, "Timed calls per op (after up to 3 untimed ones)")->capture_default_str();

  auto* mp = bench->add_subcommand("mapper", "Binary mapper backward against the GEMM of the same shape");
  mp->callback([&a] { a.command = "mapper"; });
  mp->add_option("--tokens", a.mapper.tokens, "Rows N")->capture_default_str();
  mp->add_option("--dim", a.mapper.dim, "Model width C")->capture_default_str();
  mp->add_option("--latent-bits", a.mapper.latent_bits, "H (2^H codes)")->capture_default_str();
  mp->add_option("--warmup", a.mapper.warmup, "Untimed calls first")->capture_default_str();
  mp->add_option("--steps", a.mapper.steps, "Timed calls")->capture_default_str();
  add_device_options(mp, a.mapper.device, a.mapper.precision);

  auto* g = bench->add_subcommand("generate", "Generation throughput (tokens/s) with the KV cache, random weights");
  g->callback([&a] { a.command = "generate"; });
  add_shape_options(g, a.shape);
  g->add_option("--vocab", a.vocab, "Vocabulary size (default: the preset's)");
  g->add_option("--batch", a.generate.batch, "Sequences generated together (default 64; 1 for a language model)");
  g->add_option("--len", a.generate.len, "Positions per run (raises the model's max_seq_len if needed)")
      ->capture_default_str();
  g->add_option("--warmup", a.generate.warmup, "Untimed runs first")->capture_default_str();
  g->add_option("--steps", a.generate.steps, "Timed runs")->capture_default_str();
  g->add_option("--checkpoint", a.generate.checkpoint,
                "A language model file (directory or .gguf): prefill and decode against the memory bandwidth");
  g->add_flag("--random-init", a.generate.random_init,
              "A language model with random bf16 weights of --preset's shape (or --checkpoint's)");
  g->add_option("--prompt-len", a.generate.prompt_len, "Language model: prompt tokens prefilled")
      ->capture_default_str();
  g->add_option("--decode-len", a.generate.decode_len, "Language model: tokens decoded")->capture_default_str();
  g->add_option("--bandwidth-gib", a.generate.bandwidth_gib, "Buffer of the read-bandwidth measurement (GiB)")
      ->capture_default_str();
  add_device_options(g, a.device, a.precision);
}

int run_bench(const BenchArgs& a) {
  if (a.command == "mapper") return run_bench_mapper(a.mapper);
  if (a.command == "ops") return run_bench_ops(a);
  if (a.command == "generate") return run_bench_generate(a);
  return run_bench_train(a);
}

}  // namespace ftx::app
