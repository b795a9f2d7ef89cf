// ModelWorker: the studio's model files (core/io/model_file.h: a Hugging Face checkpoint
// directory, a GGUF file, a random-weight Free Transformer) opened, loaded and run on a thread of
// their own, so that the window never waits on a load, a generation or an encoder pass. Requests
// arrive as queued slot calls, results leave as signals: loading progress (the ModelFile's
// progress callback, at most ~30 signals a second), generated text as it streams (the TokenSink's
// pieces gathered and sent at most once a frame), the latent of a text. The thread yields to the
// UI thread (SCHED_IDLE, like training) so that the event loop keeps its latency budget.
//
// Deliberately not here: what the views show (they ask), the model math (core/explore/text_explorer.h),
// run checkpoints of the store (ExploreWorker).
#pragma once
#include <QMetaType>
#include <QObject>
#include <QString>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/explore/text_explorer.h"
#include "core/io/model_file.h"

namespace ftx {

// One press of Generate (or Resample Z / Freeze Z) in the Generations view for a model file.
struct TextJob {
  quint64 id = 0;  // the view's request number: every reply names it
  int model = 0;
  std::string prompt;  // as typed
  bool chat = false;   // wrap it in the model's chat format first
  ftx::TextGroupsRequest groups;
};

// What a job generates, sent before its first token: the groups' places and seeds.
struct TextJobPlan {
  quint64 id = 0;
  bool has_latent = false;
  std::vector<ftx::TextGroup> groups;
  std::vector<uint64_t> latent_seeds, sample_seeds;  // per sequence
  std::string prompt_text;                           // what the model was given (chat format applied)
  int prompt_tokens = 0;                             // BOS included
};

// Text that arrived since the last batch: (sequence, piece) in arrival order.
using TextPieces = std::vector<std::pair<int, std::string>>;

struct TextJobResult {
  quint64 id = 0;
  QString error;                    // one line; empty when the job ran
  bool cancelled = false;           // Stop: the texts so far are kept
  std::vector<std::string> texts;   // per sequence, the generated part
  std::vector<std::string> finish;  // per sequence: "length", "eos", "stop", "cancelled"
  int new_tokens = 0;               // over all sequences
  double seconds = 0;
};

class ModelWorker : public QObject {
  Q_OBJECT
 public:
  ModelWorker();
  ~ModelWorker() override;
  // Thread-safe (call from the UI thread): every job up to `job` stops at its next token, and one
  // still queued does not start.
  void cancel(quint64 job);
  // Thread-safe (call from the UI thread): the last inspection regenerated with these (position,
  // bit) flips; only the newest of several requests is computed.
  void request_edit(const std::vector<std::pair<int, int>>& flips);
  static void register_meta_types();

 public slots:
  void start();  // on the worker's thread (connect to QThread::started): lowers its priority
  // Opens and loads `path` as model `id`: opened (headers read), load_progress..., then loaded or
  // open_failed.
  void open(int id, QString path);
  // A Free Transformer of shape `config` with random weights (seed) and model `tokenizer_of`'s
  // tokenizer, chat template, BOS and end ids, as model `id`; the same signals as open.
  void open_random(int id, ftx::ModelConfig config, int tokenizer_of, quint64 seed);
  void close(int id);
  void generate(TextJob job);
  // The encoder's bit probabilities and KL over `text` (tokenized as a prompt: BOS when the model
  // wants one); `request` is echoed back. When its first `prompt_bytes` bytes are a prompt (a
  // generation's), the inspection also holds the regeneration from it, and flips can be asked for.
  void inspect(quint64 request, int id, QString text, int prompt_bytes, quint64 seed);

 signals:
  void opened(int id, std::shared_ptr<const ftx::ModelInfo> info);
  void load_progress(int id, qint64 done, qint64 total);
  void loaded(int id, double seconds);
  void open_failed(int id, QString message);
  void planned(TextJobPlan plan);
  void text_arrived(quint64 job, TextPieces pieces);
  void finished(TextJobResult result);
  void latent_ready(quint64 request, ftx::LatentInspection inspection, QString model);
  void latent_failed(quint64 request, QString message);
  // The regeneration for the newest request_edit: its tokens' bytes (prompt included) and text.
  void edited_ready(std::vector<std::string> tokens, QString text);
  void edit_failed(QString message);

 private slots:
  void process_edit();

 private:
  struct Entry {
    std::unique_ptr<ftx::ModelFile> file;
    std::unique_ptr<ftx::Model> model;  // destroyed before file (the file holds its weights)
    std::shared_ptr<const ftx::ModelInfo> info;
  };
  void load(int id, Entry entry);
  ftx::Result<TextJobResult> run_job(const TextJob& job, Entry& e);
  bool cancelled(quint64 job) const { return job <= cancelled_up_to_.load(); }

  std::unique_ptr<ftx::Backend> be_;
  std::map<int, Entry> models_;
  std::atomic<quint64> cancelled_up_to_{0};
  // The last inspection with a prompt (what flips regenerate).
  struct Inspected {
    int model = 0;
    std::vector<int32_t> tokens;
    int prompt_len = 0;
    ftx::LatentInspection li;
  };
  std::optional<Inspected> inspected_;
  std::mutex edit_mu_;
  std::vector<std::pair<int, int>> pending_flips_;
  uint64_t edit_requested_ = 0, edit_done_ = 0;
};

}  // namespace ftx

Q_DECLARE_METATYPE(std::shared_ptr<const ftx::ModelInfo>)
Q_DECLARE_METATYPE(ftx::TextJob)
Q_DECLARE_METATYPE(ftx::TextJobPlan)
Q_DECLARE_METATYPE(ftx::TextPieces)
Q_DECLARE_METATYPE(ftx::TextJobResult)
Q_DECLARE_METATYPE(ftx::ModelConfig)
Q_DECLARE_METATYPE(std::vector<std::string>)
