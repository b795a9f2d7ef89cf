// The ftx subcommands: each declares its flags once (with help text) and runs from its args.
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "core/model/config.h"
#include "core/sample/sampler.h"
#include "core/train/train_config.h"

namespace ftx::app {

inline constexpr const char* kDefaultDb = "workspace/runs.db";

// Where a command's model comes from: --checkpoint PATH, or --random-init with --preset NAME or
// with the shape and tokenizer of --checkpoint; --latent-bits makes a random model a Free
// Transformer (0: the plain decoder).
struct ModelSourceArgs {
  std::string checkpoint, preset;
  bool random_init = false;
  std::optional<int> latent_bits;
  uint64_t seed = 1;
};

struct TrainArgs {
  TrainConfig train;     // its fields are options (app/options.h), kappa also in bits below
  ShapeOverrides shape;  // --preset and its overrides
  std::optional<double> kappa_bits, kappa_start_bits;
  bool steps_given = false;      // --steps given (a resumed run keeps its own otherwise)
  double hang_timeout_s = 600;   // --hang-timeout: a job's deadline for a rank to reach a collective
  bool shard_optimizer = false;  // --shard-optimizer: ZeRO-1 in a job (core/train/trainer.h, DataParallelOptions)
  double bucket_mb = 25;         // --bucket-mb: gradient buckets overlapped with the backward
  std::string shape_flag_given;  // a shape option given (refused with --init), e.g. "--dim"
  bool kappa_given = false;      // --kappa-bits/-nats given (else --init's recorded kappa)
  std::string db = kDefaultDb, run, device = "cpu", precision;
  bool resume = false, quiet = false;
};
void add_train_options(CLI::App& app, TrainArgs& a);
// Every ftx train option but --run and --resume (ftx sweep shares them).
void add_train_flags(CLI::App* c, TrainArgs& a);
int run_train(TrainArgs& a);

struct GenerateArgs {
  std::string db = kDefaultDb, run, prompt, device = "cpu", precision;
  std::optional<int> step;
  // Group sizes; when not given: 8 / 3 / 8 for a run, 4 / 2 / 4 for a Free Transformer file, one
  // sequence for a plain decoder.
  std::optional<int> independent, fixed_groups, group_size;
  uint64_t seed = 1;
  SampleConfig sample;  // --temperature, --top-k, --top-p; a run's length comes from its data
  bool json = false;
  // A model file instead of a run: free text, streamed; --chat applies the file's chat format.
  ModelSourceArgs source;
  bool chat = false;
  std::vector<std::string> stop;
  bool kinds = false;      // judge each sequence's kind of text and each group's kind agreement
  std::string kinds_data;  // the corpus's token file (chance level, KL profile); a run's own by default
};
int run_generate_text(const GenerateArgs& a);
int run_generate_kinds(const GenerateArgs& a);  // --kinds (app/cmd_generate_kinds.cpp)
void add_generate_options(CLI::App& app, GenerateArgs& a);
int run_generate(const GenerateArgs& a);

struct ScoreArgs {
  std::string checkpoint, input, device = "cpu", precision;
  std::string router = "teacher";  // routed models: who chooses the tokens (teacher | student)
  uint64_t seed = 1;
};
void add_score_options(CLI::App& app, ScoreArgs& a);
int run_score(const ScoreArgs& a);

struct InspectArgs {
  std::string path;
  bool json = false, tensors = false;
};
void add_inspect_options(CLI::App& app, InspectArgs& a);
int run_inspect(const InspectArgs& a);

struct TokenizeArgs {
  std::string checkpoint, text;
  bool decode = false, no_bos = false, json = false;
  // A token data file (core/data/token_file.h) from files and directories: one document a file.
  std::vector<std::string> inputs;
  std::string out, ext;  // ext: ".py,.txt" filters files found in directories ("" = all)
  double val_frac = 0.01;
  // "python,c,perl,prose": the input is one folder with a subfolder per kind; every file must be
  // text, and DATA.kinds.json records each kind's documents and tokens (docs/text_latent.md).
  std::string kinds;
  // > 0: no --checkpoint; a byte-level BPE of this many tokens trained on the training documents.
  int bpe_vocab = 0;
};
void add_tokenize_options(CLI::App& app, TokenizeArgs& a);
int run_tokenize(const TokenizeArgs& a);

struct EvalArgs {
  ModelSourceArgs source;  // --checkpoint (or --random-init for a quick look)
  std::string task, data, fewshot, samples_out, score_samples, db = kDefaultDb, run, device = "cpu", precision;
  std::optional<int> step;  // with --run of a training run: its checkpoint at this step
  int limit = 0;
  std::optional<int> shots;
  int num_samples = 1, latent_draws = 4, max_new_tokens = 0, parallel = 0;
  float temperature = 0.8f;
  uint64_t seed = 1;
  bool json = false, no_store = false;
};
void add_eval_options(CLI::App& app, EvalArgs& a);
int run_eval(const EvalArgs& a);

struct StoreArgs {
  std::string db = kDefaultDb, run, key;
  bool csv = false;
  bool benchmarks = false;  // ftx metrics --benchmarks: the run's benchmark values instead
};
void add_runs_options(CLI::App& app, StoreArgs& a);
void add_metrics_options(CLI::App& app, StoreArgs& a);
int run_runs(const StoreArgs& a);
int run_metrics(const StoreArgs& a);

// ftx bench train | mapper. `command` is the subcommand given (set while parsing).
struct BenchArgs {
  std::string command;
  ShapeOverrides shape;
  std::optional<int> vocab;    // another vocabulary than the synthetic task's: random tokens
  std::optional<int> seq_len;  // predicted positions; with another --vocab: random tokens
  std::string device = "cpu";
  std::string precision;  // fp32 | tf32 | bf16; empty: the backend's default
  int batch = 64, warmup = 5, steps = 20;
  int processes = 1;               // bench train --processes: a data-parallel job of this many (app/job.h)
  double bucket_mb = 25;           // bench train --bucket-mb (core/train/trainer.h, DataParallelOptions)
  double gemm_peak_seconds = 0.5;  // bench train on the CPU: the GEMM peak measured this long (0: not)
  int ops_reps = 20;               // bench ops: timed calls per op
  struct Mapper {                  // binary_mapper_backward against the GEMM of the same shape
    std::string device = "cpu", precision;
    int tokens = 8192, dim = 768, latent_bits = 16, warmup = 3, steps = 10;
  } mapper;
  // decode_step with the KV cache; the shape, --batch, --device and --precision are the ones above.
  struct Generate {
    int len = 66, warmup = 1, steps = 3;  // len: positions per run (the synthetic task's length)
    // A language model (--checkpoint, or --random-init of the preset's shape in bf16): prefill of
    // --prompt-len tokens and decode of --decode-len tokens against the machine's read bandwidth.
    std::string checkpoint;
    bool random_init = false;
    int prompt_len = 512, decode_len = 128;
    std::optional<int> batch;    // --batch of bench generate: 64 for the synthetic task, 1 for a language model
    double bandwidth_gib = 2.0;  // buffer of the bandwidth measurement
  } generate;
};
void add_bench_options(CLI::App& app, BenchArgs& a);
int run_bench(const BenchArgs& a);

struct UpcycleArgs {
  std::string from, out, post_sampler = "zero";
  int latent_bits = 16;
  std::optional<double> kappa_bits;
  uint64_t seed = 1;
  RouteOverrides routing;  // --routing and its settings
};
void add_upcycle_options(CLI::App& app, UpcycleArgs& a);
int run_upcycle(const UpcycleArgs& a);

// ftx sweep: the runs of one experiment, one per kappa, trained (or resumed) one after another,
// then measured with the Figure 4 protocol (core/eval/figure4.h) and printed as one table.
struct SweepArgs {
  TrainArgs train;                  // every ftx train option; --run and --kappa-* come from below
  std::string name = "sweep";       // runs are <name>-<kappa>, e.g. sweep-1_8bit
  std::vector<std::string> kappas;  // "BITS[:STEPS]", BITS a number or a fraction ("1/8")
  std::vector<std::string> runs;    // instead of --kappas: measure these runs of the store, train nothing
  std::vector<std::string> prompts{"K>", "Q>"};
  int independent = 1000, fixed_groups = 32, group_size = 8;
  uint64_t measure_seed = 7;
  bool measure_only = false;
};
void add_sweep_options(CLI::App& app, SweepArgs& a);
int run_sweep(SweepArgs& a);
// The run of a --kappas entry: sweep_run_name("fig4", "1/8:2000") == "fig4-1_8bit".
std::string sweep_run_name(const std::string& name, const std::string& kappa);
// The Figure 4 recipe (docs/figure4.md): what made the shipped models and what ftx demo
// --retrain runs, its runs named <name>-<kappa> in `db`.
SweepArgs figure4_recipe(const std::string& db, const std::string& name);

struct BundleArgs {
  std::string db = kDefaultDb, run, out, as;
  std::optional<int> step;
  bool f32 = false;
  std::vector<std::string> dirs;  // ftx import
};
void add_export_options(CLI::App& app, BundleArgs& a);
void add_import_options(CLI::App& app, BundleArgs& a);
int run_export(const BundleArgs& a);
int run_import(const BundleArgs& a);

struct DemoArgs {
  std::string workspace = "workspace";
  std::string models = "resources/models";  // the shipped models (ftx export folders)
  bool retrain = false;
};
void add_demo_options(CLI::App& app, DemoArgs& a);
int run_demo(const DemoArgs& a);

}  // namespace ftx::app
