// Wiring shared by the ftx commands: datasets by name, loading a run's checkpoint, terminal
// colours, the one-line error convention (print "ftx: <message>", exit code 1).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "app/commands.h"
#include "app/options.h"
#include "core/data/batch_source.h"
#include "core/io/model_file.h"
#include "core/model/model.h"
#include "core/text/tokenizer.h"
#include "core/train/train_config.h"
#include "datasets/registry.h"
#include "kernels/base/result.h"

namespace CLI {
class App;
}

namespace ftx::app {

// Where ./test.sh and ./run.sh put benchmark data (HumanEval): $FTX_DATA_CACHE, else
// ~/.cache/ftx/data. The default of --bench-data.
std::string data_cache_dir();

int fail(const Error& e);  // prints the error, returns 1
int fail(const std::string& message);

// --device and --precision, for every command that computes.
void add_device_options(CLI::App* c, std::string& device, std::string& precision);
// --db PATH, the run store every command that reads or writes runs takes (default kDefaultDb);
// `note` is added to its help ("created if missing").
void add_db_option(CLI::App* c, std::string& db, const std::string& note = "");
// A kappa in bits as people write it ("1/8", "0.125", "2 bits"; core/model/kappa.h); a bad value
// is refused while parsing, with the reason.
CLI::Option* add_kappa_bits_option(CLI::App* c, const std::string& flag, std::optional<double>& bits,
                                   const std::string& help);
// The backend named by --device with its GEMMs at --precision ("": the backend's default), or a
// one-line error naming the option.
Result<std::unique_ptr<Backend>> make_backend(const std::string& device, const std::string& precision);
// What multiplies on a CPU backend at bf16 (kernels/cpu/ops_matmul_bf16.h, bf16_inputs_engine);
// null on another device or precision.
const char* cpu_bf16_engine(const Backend& be);

// A loaded model with its tokenizer, checkpoint directory and step. `file` holds the weights a
// model loaded from a file uses in place: it is declared first so that it outlives the model.
struct LoadedModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;  // null when config.json has none (token ids only)
  std::string dir;
  int step = 0;
};
// Any model file (ModelFile::open: our checkpoints, Hugging Face directories, GGUF) as an
// inference model; loading progress on stderr when it takes a while and stderr is a terminal.
Result<LoadedModel> load_model_dir(const std::string& dir, const std::string& device, const std::string& precision);

// Adds --checkpoint (required unless random_only_ok) and, with random, --random-init, --preset, --latent-bits.
void add_model_source_options(CLI::App* c, ModelSourceArgs& a, bool random);
Result<LoadedModel> load_model(const ModelSourceArgs& a, const std::string& device, const std::string& precision);
// The --independent / --fixed-groups / --group-size rules (none negative, some sequence, at most
// 4096 sequences).
Status check_groups(int independent, int fixed_groups, int group_size);
// ftx generate on a routed model: which router chooses the computed tokens ("routing sdt on blocks
// 1, 3: student: ..."); empty for a dense model.
std::string generation_router_text(const ModelConfig& m, const SampleConfig& sc);
// The checkpoint of run `run` at `step` (latest when absent) in the database.
Result<LoadedModel> load_run_model(const std::string& db, const std::string& run, std::optional<int> step,
                                   const std::string& device, const std::string& precision);

// Creates the folder that will hold the run store `db` (an error names it when it cannot).
Status make_store_folder(const std::string& db);

// Terminal styling (only when stdout is a terminal and NO_COLOR is unset).
bool use_color();
std::string style(const std::string& text, const char* ansi);  // ansi e.g. "1;33"
std::string format_duration(double seconds);

}  // namespace ftx::app
