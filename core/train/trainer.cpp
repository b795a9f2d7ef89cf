#include "core/train/trainer.h"

#include "core/eval/bench/bench_suite.h"
#include "core/eval/bench/model_lm.h"
#include "core/eval/bench/record.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <span>

#include <unistd.h>

#include <omp.h>
#include <nlohmann/json.hpp>

#include "core/dist/comm.h"
#include "core/io/checkpoint.h"
#include "core/io/config_json.h"
#include "core/model/flops.h"
#include "core/text/tokenizer.h"
#include "core/train/run_config.h"
#include "core/util/sha256.h"
#include "kernels/base/philox.h"
#include "kernels/device_comm.h"

namespace ftx {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Where a checkpoint stands: step, data position, thread count. trainer.json is a file a user can
// edit or damage, so every field is checked before it reaches the dataset or the loop.
struct TrainerPosition {
  int step = 0;
  int64_t data_position = 0;
  int threads = 0;
};

Result<TrainerPosition> read_position(const json& j, const std::string& where) {
  TrainerPosition p;
  if (!j.is_object()) return make_error(where + ": expected a JSON object");
  auto get_int = [&](const char* key, int64_t lo, int64_t hi, int64_t& out) -> Status {
    if (!j.contains(key)) return make_error(where + ": missing \"" + key + "\"");
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < lo || j[key].get<int64_t>() > hi)
      return make_error(where + ": \"" + key + "\" must be an integer in " + std::to_string(lo) + ".." +
                        std::to_string(hi) + ", got " + j[key].dump());
    out = j[key].get<int64_t>();
    return {};
  };
  int64_t step = 0, threads = 0;
  FTX_TRY(get_int("step", 0, std::numeric_limits<int>::max(), step));
  FTX_TRY(get_int("data_position", 0, std::numeric_limits<int64_t>::max() / 2, p.data_position));
  if (j.contains("threads")) FTX_TRY(get_int("threads", 1, 1 << 16, threads));
  p.step = static_cast<int>(step), p.threads = static_cast<int>(threads);
  return p;
}

}  // namespace

// Training holds parameters, gradients and two AdamW moments, plus activations for the batch and
// a validation batch of at most 64 sequences. Refuse before allocating what the machine lacks.
Status check_training_memory(const ModelConfig& m, const TrainConfig& t, int seq_len, FieldName name) {
  const double params = static_cast<double>(param_count(param_specs(m)));
  const int T = seq_len - 1;
  const double need = 16.0 * params + static_cast<double>(Model::state_bytes(m, t.batch, T)) +
                      static_cast<double>(Model::state_bytes(m, std::min(t.batch, 64), T));
  const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (need > 0.9 * have) {
    const std::string batch = name(find_field<TrainConfig>("batch"));
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "training needs %.1f GiB (weights, optimizer, activations for %s %d), more than the %.1f GiB of "
                  "memory here: lower %s or the model size",
                  need / (1 << 30), batch.c_str(), t.batch, have / (1 << 30), batch.c_str());
    return make_error(buf);
  }
  return {};
}

std::string checkpoint_rel_path(const std::string& db_path, const std::string& run, int step) {
  char leaf[32];
  std::snprintf(leaf, sizeof leaf, "step-%06d", step);
  return (std::filesystem::path(std::filesystem::path(db_path).stem().string() + ".checkpoints") / run / leaf).string();
}

std::string resolve_checkpoint_path(const std::string& db_path, const std::string& stored) {
  const std::filesystem::path p(stored);
  return p.is_absolute() ? stored : (std::filesystem::path(db_path).parent_path() / p).string();
}

std::string checkpoint_dir(const std::string& db_path, const std::string& run, int step) {
  return resolve_checkpoint_path(db_path, checkpoint_rel_path(db_path, run, step));
}

Result<CheckpointRef> find_run_checkpoint(RunStore& store, const std::string& run, std::optional<int> step) {
  auto info = store.find_run(run);
  if (!info) return info.error();
  auto rows = store.checkpoints(info->id);
  if (!rows) return rows.error();
  if (rows->empty()) return make_error("run '" + run + "' in " + store.path() + " has no checkpoint yet");
  const CheckpointRow* pick = &rows->back();
  if (step) {
    pick = nullptr;
    for (const auto& r : *rows)
      if (r.step == *step) pick = &r;
    if (!pick) {
      std::string have;
      for (const auto& r : *rows) have += (have.empty() ? "" : ", ") + std::to_string(r.step);
      return make_error("run '" + run + "' has no checkpoint at step " + std::to_string(*step) + " (have: " + have +
                        ")");
    }
  }
  return CheckpointRef{resolve_checkpoint_path(store.path(), pick->path), static_cast<int>(pick->step)};
}

Trainer::Trainer(Backend& be, RunStore store, std::unique_ptr<Model> model, std::shared_ptr<const Tokenizer> tokenizer,
                 const TrainConfig& tcfg, std::string db, std::string run)
    : be_(be),
      store_(std::move(store)),
      model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      tcfg_(tcfg),
      db_path_(std::move(db)),
      run_(std::move(run)) {
  grad_norm_ = static_cast<float*>(be_.try_alloc(sizeof(float)).value_or(nullptr));
  for (const ParamSpec& p : model_->specs())
    adam_segments_.push_back(
        {static_cast<size_t>(p.offset), static_cast<size_t>(p.numel), p.decay ? tcfg_.weight_decay : 0.0f});
  moment_len_ = moment_chunk_ = model_->num_params();
  moment_segments_ = adam_segments_;
}

bool Trainer::allocate_moments() {
  const size_t bytes = moment_chunk_ * sizeof(float);
  adam_m_ = static_cast<float*>(be_.try_alloc(bytes).value_or(nullptr));
  adam_v_ = static_cast<float*>(be_.try_alloc(bytes).value_or(nullptr));
  if (!adam_m_ || !adam_v_) return false;
  if (!resume_m_.empty()) {  // a checkpoint's moments, this process's slice of them
    be_.upload(adam_m_, resume_m_.data() + moment_lo_, moment_len_ * sizeof(float));
    be_.upload(adam_v_, resume_v_.data() + moment_lo_, moment_len_ * sizeof(float));
    resume_m_ = {}, resume_v_ = {};
  } else {
    be_.fill(adam_m_, 0.0f, moment_chunk_);
    be_.fill(adam_v_, 0.0f, moment_chunk_);
  }
  return true;
}

Result<std::unique_ptr<Trainer>> Trainer::make(Backend& be, RunStore store, const ModelConfig& mcfg,
                                               std::shared_ptr<const Tokenizer> tokenizer, const TrainConfig& tcfg,
                                               std::string db, std::string run) {
  auto model = Model::create(be, mcfg);
  if (!model) return model.error();
  std::unique_ptr<Trainer> t(
      new Trainer(be, std::move(store), std::move(*model), std::move(tokenizer), tcfg, std::move(db), std::move(run)));
  // One process takes its AdamW moments now; a job's ranks when they know their slice (use_comm).
  if (!t->grad_norm_ || !t->model_->allocate_grads().ok() || (launched_processes() == 1 && !t->allocate_moments()))
    return make_error(std::string(be.name()) + ": not enough memory to train " +
                      std::to_string(t->model_->num_params()) +
                      " parameters (weights, gradients and two AdamW moments: 16 bytes each)");
  return t;
}

Trainer::~Trainer() {
  be_.release(adam_m_);
  be_.release(adam_v_);
  be_.release(grad_norm_);
}

Result<std::unique_ptr<Trainer>> Trainer::start(Backend& be, const ModelConfig& mcfg,
                                                std::shared_ptr<const Tokenizer> tokenizer, const TrainConfig& tcfg,
                                                int seq_len, const std::string& db_path, const std::string& run,
                                                const std::vector<float>* init_params) {
  FTX_TRY(mcfg.validate());
  FTX_TRY(tcfg.validate());
  if (tokenizer) FTX_TRY(check_tokenizer_fits(*tokenizer, mcfg.vocab_size));
  FTX_TRY(check_training_memory(mcfg, tcfg, seq_len));
  if (init_params && int64_t(init_params->size()) != param_count(param_specs(mcfg)))
    return make_error("initial weights: " + std::to_string(init_params->size()) + " values where the model has " +
                      std::to_string(param_count(param_specs(mcfg))) + " parameters");
  auto store = RunStore::open(db_path);
  if (!store) return store.error();
  // Allocate before recording the run: a model too big for the device leaves no run behind.
  auto made = make(be, std::move(*store), mcfg, tokenizer, tcfg, db_path, run);
  if (!made) return made.error();
  std::unique_ptr<Trainer> t = std::move(*made);
  auto id = t->store_.create_run(run, run_config_json(mcfg, tokenizer.get(), tcfg));
  if (!id) return id.error();
  t->run_id_ = *id;
  if (init_params) {
    t->model_->load_params(init_params->data());
    t->eval_at_start_ = true;
    FTX_TRY(t->store_.add_event(*id, 0, "init", json{{"from", tcfg.init_from}}.dump()));
  } else {
    t->model_->init_weights(tcfg.seed, tcfg.init);
  }
  return t;
}

Result<std::unique_ptr<Trainer>> Trainer::from_checkpoint(Backend& be, RunStore store, const std::string& dir,
                                                          std::optional<int> steps, const std::string& db_path,
                                                          const std::string& run) {
  auto ck = load_checkpoint(dir, true);
  if (!ck) return ck.error();
  if (!ck->has_training_state) return make_error(dir + ": no training state (optimizer moments) to resume from");
  auto pos = read_position(ck->trainer, dir + "/trainer.json");
  if (!pos) return pos.error();
  auto tcfg = train_config_from_json(ck->trainer.value("train", json::object()), dir + "/trainer.json");
  if (!tcfg) return tcfg.error();
  if (steps) tcfg->steps = *steps;
  FTX_TRY(tcfg->validate());
  auto made = make(be, std::move(store), ck->config, ck->tokenizer, *tcfg, db_path, run);
  if (!made) return made.error();
  std::unique_ptr<Trainer> t = std::move(*made);
  t->step_ = pos->step;
  t->data_position_ = pos->data_position;
  t->last_checkpoint_step_ = t->step_;
  t->checkpoint_dir_ = dir;
  t->model_->load_params(ck->params.data());
  if (t->adam_m_) {
    const size_t bytes = t->model_->num_params() * sizeof(float);
    be.upload(t->adam_m_, ck->adam_m.data(), bytes);
    be.upload(t->adam_v_, ck->adam_v.data(), bytes);
  } else {  // a job's rank: uploaded when it allocates its slice
    t->resume_m_ = std::move(ck->adam_m), t->resume_v_ = std::move(ck->adam_v);
  }
  t->thread_change_ = pos->threads > 0 && pos->threads != omp_get_max_threads();
  t->threads_before_ = pos->threads;
  return t;
}

Result<std::unique_ptr<Trainer>> Trainer::resume(Backend& be, const std::string& db_path, const std::string& run,
                                                 std::optional<int> steps) {
  if (!std::filesystem::exists(db_path))
    return make_error(db_path + ": no such run store (run '" + run + "' cannot be resumed)");
  auto store = RunStore::open(db_path);
  if (!store) return store.error();
  auto info = store->find_run(run);
  if (!info) return info.error();
  auto ref = find_run_checkpoint(*store, run, std::nullopt);
  if (!ref) return ref.error();
  auto made = from_checkpoint(be, std::move(*store), ref->dir, steps, db_path, run);
  if (!made) return made.error();
  std::unique_ptr<Trainer> t = std::move(*made);
  t->run_id_ = info->id;
  // The curve continues from the checkpoint: rows a killed process wrote past it are recomputed.
  FTX_TRY(t->store_.delete_metrics_after(info->id, t->step_));
  FTX_TRY(t->store_.add_event(
      info->id, t->step_, "resumed",
      json{{"checkpoint", ref->dir}, {"threads_before", t->threads_before_}, {"threads", omp_get_max_threads()}}
          .dump()));
  return t;
}

Result<std::unique_ptr<Trainer>> Trainer::follow(Backend& be, const std::string& checkpoint, const std::string& db_path,
                                                 const std::string& run, std::optional<int> steps) {
  auto store = RunStore::open(db_path);
  if (!store) return store.error();
  auto made = from_checkpoint(be, std::move(*store), checkpoint, steps, db_path, run);
  if (!made) return made.error();
  std::unique_ptr<Trainer> t = std::move(*made);
  auto id = t->store_.create_run(run, run_config_json(t->model_->config(), t->tokenizer_.get(), t->tcfg_));
  if (!id) return id.error();
  t->run_id_ = *id;
  return t;
}

void Trainer::train_step(BatchSource& data, StepReport& rep) {
  // The global batch from the stream (the same sequences however many processes share it), then
  // this process's rows of it.
  const int G = tcfg_.batch, B = state_->B, S = data.seq_len(), T = S - 1;
  batch_.resize(size_t(G) * S), inputs_.resize(size_t(B) * T), targets_.resize(size_t(B) * T);
  data.next(batch_.data(), G);
  data_position_ = data.position();
  split_inputs_targets(batch_.data() + size_t(state_->first_seq) * S, B, S, inputs_.data(), targets_.data());
  const float kappa = tcfg_.kappa_at(step_);
  const float lr = tcfg_.lr_at(step_);
  const AdamWStep adam{lr, tcfg_.beta1, tcfg_.beta2, tcfg_.adam_eps, step_ + 1};
  // Everything between upload and download is one step graph: on CUDA it is recorded once and
  // replayed (only lr, t, kappa and the Philox stream change from step to step).
  const uint64_t stream = kStreamLatent + static_cast<uint64_t>(step_);
  model_->upload_batch(*state_, inputs_.data(), targets_.data(), tcfg_.seed, stream);
  // A data-parallel step talks to the other ranks between its parts: no step graph.
  const bool graph = model_->step_graphable() && !data_parallel();
  if (graph) be_.begin_graph();
  model_->zero_grad();
  model_->forward_ops(*state_, nullptr, tcfg_.seed, stream, kappa, tcfg_.free_bits_form());
  if (data_parallel()) collective([&] { reduce_kl_batch_mean(); });
  if (data_parallel() && bucket_floats_ > 0) {  // the sums start while the backward runs
    bucket_lo_ = bucket_hi_ = 0;
    model_->backward(*state_, [this](int layer) { on_block_grads(layer); });
    collective([&] { finish_bucketed_gradients(); });  // the part the backward did not hide
  } else {
    model_->backward(*state_);
    if (data_parallel()) collective([&] { reduce_gradients(); });
  }
  be_.clip_grad_norm(model_->grads(), model_->num_params(), tcfg_.grad_clip, grad_norm_);
  be_.adamw_update(model_->params() + moment_lo_, model_->grads() + moment_lo_, adam_m_, adam_v_,
                   moment_segments_.data(), static_cast<int>(moment_segments_.size()), adam);
  if (shard_) collective([&] { gather_params(); });  // every rank's updated slice, on every rank
  if (graph) be_.end_graph();
  rep.stats = model_->read_stats(*state_);
  if (data_parallel()) collective([&] { reduce_stats(rep.stats); });
  float norm = 0;
  be_.download(&norm, grad_norm_, sizeof norm);
  rep.grad_norm = norm;
  rep.lr = lr, rep.kappa = kappa;
  ++step_;
  rep.step = step_;
}

std::optional<double> Trainer::routed_share() const {
  const ModelConfig& m = model_->config();
  if (!state_ || m.routing.kind == Routing::None) return std::nullopt;
  int64_t computed = 0, offered = 0;
  for (int l = 0; l < m.n_layers; ++l) {
    if (!m.routed(l)) continue;
    for (const auto& seq : model_->read_route_choice(*state_, l)) computed += int64_t(seq.size());
    offered += int64_t(state_->B) * state_->T;
  }
  return offered > 0 ? std::optional<double>(double(computed) / double(offered)) : std::nullopt;
}

void Trainer::ensure_state(const BatchSource& data) {
  if (state_) return;
  if (!adam_m_ && !allocate_moments()) {
    std::fprintf(stderr, "ftx: %s: not enough memory for AdamW's moments (%zu parameters of %lld, 8 bytes each)\n",
                 be_.name(), moment_chunk_, static_cast<long long>(model_->num_params()));
    std::exit(1);
  }
  const int P = comm_ ? comm_->size() : 1, r = comm_ ? comm_->rank() : 0;
  state_ = model_->make_state(tcfg_.batch / P, data.seq_len() - 1);
  state_->first_seq = int64_t(r) * (tcfg_.batch / P);
}

bool Trainer::data_parallel() const { return comm_ != nullptr && comm_->size() > 1; }
bool Trainer::writes() const { return comm_ == nullptr || comm_->root(); }

// A collective failing mid-step leaves the ranks out of step: nothing to recover, so it stops the
// process with the error's line (mpirun then ends the job).
static void must(const Status& st) {
  if (!st) {
    std::fprintf(stderr, "ftx: %s\n", st.error().message.c_str());
    std::exit(1);
  }
}

Status Trainer::use_comm(Comm& comm, std::unique_ptr<DeviceComm> device, DataParallelOptions options) {
  const bool shard_optimizer = options.shard_optimizer;
  if (state_) return make_error("run '" + run_ + "': use_comm after the first step");
  const int P = comm.size();
  if (P > 1 && tcfg_.batch % P != 0)
    return make_error("--batch " + std::to_string(tcfg_.batch) + ": must be a multiple of the " + std::to_string(P) +
                      " processes (it stays the global batch)");
  if (device && (device->size() != P || device->rank() != comm.rank()))
    return make_error("the device communicator is rank " + std::to_string(device->rank()) + " of " +
                      std::to_string(device->size()) + ", the job's rank " + std::to_string(comm.rank()) + " of " +
                      std::to_string(P));
  comm_ = &comm;
  device_comm_ = std::move(device);
  // Buckets where a sum can start while the backward goes on: the CPU's host path (the gradients
  // are host memory, MPI_Iallreduce) and NCCL (a stream of its own). Not a GPU's host path, which
  // must download the gradients first.
  if (P > 1 && options.bucket_mb > 0 && (device_comm_ || be_.kind() == DeviceKind::Cpu)) {
    const size_t n = model_->num_params(), L = size_t(model_->config().n_layers);
    block_spans_.assign(L, {n, 0});
    std::vector<size_t> covered(L, 0);
    for (const ParamSpec& p : model_->specs()) {
      size_t l = 0;
      if (std::sscanf(p.name.c_str(), "model.layers.%zu.", &l) != 1 || l >= L) continue;
      auto& [lo, hi] = block_spans_[l];
      lo = std::min(lo, size_t(p.offset)), hi = std::max(hi, size_t(p.offset + p.numel));
      covered[l] += size_t(p.numel);
    }
    bool contiguous = true;
    for (size_t l = 0; l < L; ++l)
      contiguous &= covered[l] > 0 && covered[l] == block_spans_[l].second - block_spans_[l].first;
    if (contiguous) {
      std::vector<std::pair<size_t, size_t>> sorted = block_spans_;
      std::sort(sorted.begin(), sorted.end());
      size_t at = 0;
      for (const auto& [lo, hi] : sorted) {
        if (lo > at) rest_spans_.push_back({at, lo});
        at = hi;
      }
      if (at < n) rest_spans_.push_back({at, n});
      bucket_floats_ = std::max<size_t>(1, size_t(options.bucket_mb * 1e6 / sizeof(float)));
    }
  }
  if (shard_optimizer && P > 1) {
    // ZeRO-1: this rank keeps and updates the moments of parameters [lo, lo + len), chunks of
    // ceil(n / P) in rank order (the last may be shorter).
    const size_t n = model_->num_params();
    shard_ = true;
    moment_chunk_ = (n + size_t(P) - 1) / size_t(P);
    moment_lo_ = std::min(n, size_t(comm.rank()) * moment_chunk_);
    moment_len_ = std::min(moment_chunk_, n - moment_lo_);
    moment_segments_.clear();
    for (const AdamWSegment& g : adam_segments_) {
      const size_t a = std::max(g.offset, moment_lo_), b = std::min(g.offset + g.numel, moment_lo_ + moment_len_);
      if (a < b) moment_segments_.push_back({a - moment_lo_, b - a, g.weight_decay});
    }
    if (adam_m_) {  // allocated whole (a trainer made outside the launcher): keep the slice only
      std::vector<float> m(n), v(n);
      be_.download(m.data(), adam_m_, n * sizeof(float));
      be_.download(v.data(), adam_v_, n * sizeof(float));
      be_.release(adam_m_), be_.release(adam_v_);
      adam_m_ = adam_v_ = nullptr;
      resume_m_ = std::move(m), resume_v_ = std::move(v);
      if (!allocate_moments()) return make_error(std::string(be_.name()) + ": not enough memory for AdamW's moments");
    }
  }
  return {};
}

Status Trainer::agree_on_start(BatchSource& data) {
  const int P = comm_->size();
  // What every rank must share, each as a digest: the run's configuration, the data it reads (the
  // tokenizer and the tokens of the next global batch: the same file and position) and the build.
  const std::string configs =
      config_to_json(model_->config()).dump() + train_config_to_json(tcfg_).dump() + (shard_ ? " shard-optimizer" : "");
  std::vector<int32_t> first(size_t(tcfg_.batch) * size_t(data.seq_len()));
  data.seek(data_position_);
  data.next(first.data(), tcfg_.batch);
  data.seek(data_position_);
  const std::string tokens = data.tokenizer().fingerprint() + sha256_hex(first.data(), first.size() * sizeof(int32_t));
  struct Part {
    const char* what;  // "rank q of P <what> than rank 0<note>"
    const char* note;
    std::string digest;
  };
  const Part parts[] = {
      {"was started with another model or training configuration", "", sha256_hex(configs.data(), configs.size())},
      {"reads other data", " (another file, tokenizer or position)", sha256_hex(tokens.data(), tokens.size())},
      {"runs another build of ftx", " (another executable)", build_digest()}};
  constexpr size_t kHex = 64;
  std::string mine;
  for (const Part& part : parts)
    mine += part.digest.substr(0, kHex) + std::string(kHex - std::min(kHex, part.digest.size()), '-');
  std::vector<char> all(mine.size() * size_t(P));
  FTX_TRY(comm_->allgather(mine.data(), mine.size(), all.data()));
  for (int q = 1; q < P; ++q)
    for (size_t i = 0; i < std::size(parts); ++i)
      if (std::string_view(all.data() + size_t(q) * mine.size() + i * kHex, kHex) !=
          std::string_view(all.data() + i * kHex, kHex))
        return make_error("rank " + std::to_string(q) + " of " + std::to_string(P) + " " + parts[i].what +
                          " than rank 0" + parts[i].note);
  return {};
}

template <class F>
void Trainer::collective(F&& f) {
  if (!time_collectives_) return f();
  be_.synchronize();  // the device's work before it is not the collective's
  const auto t0 = Clock::now();
  f();
  be_.synchronize();  // NCCL's reduce runs on the device
  collective_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<size_t> Trainer::slice_counts() const {
  const size_t n = model_->num_params();
  std::vector<size_t> counts;
  for (int q = 0; q < comm_->size(); ++q) {
    const size_t lo = std::min(n, size_t(q) * moment_chunk_);
    counts.push_back(std::min(moment_chunk_, n - lo));
  }
  return counts;
}

void Trainer::gather_params() {
  const std::vector<size_t> counts = slice_counts();
  float* params = model_->params();
  if (device_comm_) {  // on the GPUs, in place
    must(device_comm_->allgather_blocks(params, counts));
    return;
  }
  if (be_.kind() == DeviceKind::Cpu) {  // the parameters are in host memory: gathered in place
    must(comm_->allgather_blocks(params, counts));
    return;
  }
  const size_t n = model_->num_params();
  host_gathered_.resize(n);
  be_.download(host_gathered_.data() + moment_lo_, params + moment_lo_, moment_len_ * sizeof(float));
  must(comm_->allgather_blocks(host_gathered_.data(), counts));
  be_.upload(params, host_gathered_.data(), n * sizeof(float));
}

void Trainer::gather_moments() {
  const std::vector<size_t> counts = slice_counts();
  for (auto [slice, whole] : {std::pair{adam_m_, &gathered_m_}, std::pair{adam_v_, &gathered_v_}}) {
    const float* mine = slice;
    if (be_.kind() != DeviceKind::Cpu) {
      host_slice_.resize(moment_len_);
      be_.download(host_slice_.data(), slice, moment_len_ * sizeof(float));
      mine = host_slice_.data();
    }
    if (writes()) whole->resize(model_->num_params());  // rank 0 alone writes the checkpoint
    must(comm_->gather_blocks(mine, writes() ? whole->data() : nullptr, counts, 0));
  }
  host_slice_ = {};
}

void Trainer::reduce_kl_batch_mean() {
  if (!state_->free || tcfg_.free_bits_form() != FreeBitsForm::BatchMean) return;
  const int T = state_->T;
  host_kl_mean_.resize(size_t(T));
  model_->read_kl_batch_mean(*state_, host_kl_mean_.data());
  const float share = float(state_->B) / float(tcfg_.batch);  // a rank's mean counts B / G
  for (float& x : host_kl_mean_) x *= share;
  must(comm_->allreduce_sum(host_kl_mean_.data(), host_kl_mean_.size()));
  model_->write_kl_batch_mean(*state_, host_kl_mean_.data());
}

void Trainer::reduce_gradients() {
  const size_t n = model_->num_params();
  const float inv = 1.0f / float(comm_->size());  // each rank's gradient is a mean over its tokens
  if (device_comm_) {  // on the GPUs (NCCL, in stream order); the stop request through the host
    must(device_comm_->allreduce_sum(model_->grads(), n));
    be_.scale(model_->grads(), inv, n);
    share_stop_request();
    return;
  }
  host_grads_.resize(n + 1);
  be_.download(host_grads_.data(), model_->grads(), n * sizeof(float));
  host_grads_[n] = stop_asked_ ? 1.0f : 0.0f;
  must(comm_->allreduce_sum(host_grads_.data(), host_grads_.size()));
  stop_all_ = host_grads_[n] > 0.0f;
  for (size_t i = 0; i < n; ++i) host_grads_[i] *= inv;
  be_.upload(model_->grads(), host_grads_.data(), n * sizeof(float));
}

void Trainer::start_gradient_sum(size_t lo, size_t hi) {
  float* g = model_->grads() + lo;
  must(device_comm_ ? device_comm_->start_allreduce_sum(g, hi - lo) : comm_->start_allreduce_sum(g, hi - lo));
}

void Trainer::on_block_grads(int layer) {
  const auto [lo, hi] = block_spans_[size_t(layer)];
  if (bucket_lo_ < bucket_hi_ && hi != bucket_lo_) {  // not adjacent to the open bucket: send it
    start_gradient_sum(bucket_lo_, bucket_hi_);
    bucket_lo_ = bucket_hi_ = 0;
  }
  if (bucket_lo_ == bucket_hi_) bucket_hi_ = hi;
  bucket_lo_ = lo;
  if (bucket_hi_ - bucket_lo_ >= bucket_floats_) {
    start_gradient_sum(bucket_lo_, bucket_hi_);
    bucket_lo_ = bucket_hi_ = 0;
  } else if (!device_comm_) {
    must(comm_->progress());  // Open MPI moves the host sums along only inside its calls
  }
}

void Trainer::finish_bucketed_gradients() {
  float* g = model_->grads();
  if (bucket_lo_ < bucket_hi_) start_gradient_sum(bucket_lo_, bucket_hi_);
  for (const auto& [lo, hi] : rest_spans_) start_gradient_sum(lo, hi);
  must(device_comm_ ? device_comm_->finish_allreduces() : comm_->finish_allreduces());
  be_.scale(g, 1.0f / float(comm_->size()), model_->num_params());
  share_stop_request();
}

void Trainer::share_stop_request() {
  float stop = stop_asked_ ? 1.0f : 0.0f;
  must(comm_->allreduce_sum(&stop, 1));
  stop_all_ = stop > 0.0f;
}

void Trainer::reduce_stats(StepStats& st) {
  // CE, KL, per-pair free bits and the routers' terms are means over equal shares of the batch:
  // the global mean is the ranks' average. Batch-mean free bits: from the global batch means.
  double v[4] = {st.ce, st.kl, st.kl_excess, st.route};
  must(comm_->allreduce_sum(v, 4));
  for (double& x : v) x /= comm_->size();
  st.ce = v[0], st.kl = v[1], st.kl_excess = v[2], st.route = v[3];
  if (state_->free && tcfg_.free_bits_form() == FreeBitsForm::BatchMean)  // the global means: a batch of one
    st.kl_excess = summarize_kl(host_kl_mean_.data(), 1, state_->T, state_->kappa, FreeBitsForm::BatchMean).excess;
  st.loss = st.ce + st.kl_excess + st.route;
}

StepReport Trainer::step_once(BatchSource& data) {
  ensure_state(data);
  StepReport rep;
  train_step(data, rep);
  rep.total_steps = tcfg_.steps;
  return rep;
}

Status Trainer::set_kappa(float kappa_nats) {
  TrainConfig next = tcfg_;
  next.kappa_nats = kappa_nats, next.kappa_start_nats = -1, next.kappa_anneal_steps = 0;
  FTX_TRY(next.validate());
  const float before = tcfg_.kappa_at(step_);
  tcfg_ = next;
  return store_.add_event(run_id_, step_, "kappa", json{{"from_nats", before}, {"to_nats", kappa_nats}}.dump());
}

Status Trainer::save_checkpoint() {
  if (step_ == last_checkpoint_step_) return {};
  last_checkpoint_step_ = step_;
  CheckpointData ck;
  ck.config = model_->config();
  ck.tokenizer = tokenizer_;
  const size_t n = model_->num_params();
  ck.params.resize(n), ck.adam_m.resize(n), ck.adam_v.resize(n);
  model_->save_params(ck.params.data());
  if (shard_) {  // gathered from every rank just before (gather_moments): the layout of one process
    FT_ASSERT(gathered_m_.size() == n && gathered_v_.size() == n, "checkpoint of a sharded optimizer: not gathered");
    ck.adam_m = std::move(gathered_m_), ck.adam_v = std::move(gathered_v_);
  } else {
    be_.download(ck.adam_m.data(), adam_m_, n * sizeof(float));
    be_.download(ck.adam_v.data(), adam_v_, n * sizeof(float));
  }
  ck.has_training_state = true;
  ck.trainer = json{{"step", step_},
                    {"data_position", data_position_},
                    {"rng", {{"generator", "philox4x32-10"}, {"seed", tcfg_.seed}, {"latent_stream_next", step_}}},
                    {"run", run_},
                    {"threads", omp_get_max_threads()},
                    {"train", train_config_to_json(tcfg_)}};
  const std::string dir = checkpoint_dir(db_path_, run_, step_);
  FTX_TRY(ftx::save_checkpoint(dir, ck));
  auto digest = sha256_file(dir + "/model.safetensors");
  if (!digest) return digest.error();
  FTX_TRY(store_.flush());
  FTX_TRY(store_.add_checkpoint(run_id_, step_, checkpoint_rel_path(db_path_, run_, step_), *digest));
  FTX_TRY(store_.add_event(run_id_, step_, "checkpoint", json{{"path", dir}}.dump()));
  return prune_checkpoints();
}

// The best checkpoint is the one whose step has the lowest val/ce_prior: what generation sees for
// a Free Transformer (Z from the prior), the plain CE for the baseline (the Evaluator writes both
// under that key). Checkpoints of steps without an evaluation are only kept as "last".
Status Trainer::prune_checkpoints() {
  const int keep = tcfg_.keep_checkpoints;
  if (keep <= 0) return {};
  auto rows = store_.checkpoints(run_id_);
  if (!rows) return rows.error();
  if (static_cast<int>(rows->size()) <= keep) return {};
  FTX_TRY(store_.flush());
  auto ce = store_.metrics(run_id_, "val/ce_prior");
  if (!ce) return ce.error();
  std::optional<int64_t> best;
  double best_ce = std::numeric_limits<double>::infinity();
  for (const CheckpointRow& r : *rows)
    for (const MetricRow& m : *ce)
      if (m.step == r.step && std::isfinite(m.value) && m.value < best_ce) best_ce = m.value, best = r.step;
  const size_t first_kept = rows->size() - size_t(keep);
  for (size_t i = 0; i < first_kept; ++i) {
    const CheckpointRow& r = (*rows)[i];
    if (best && r.step == *best) continue;
    FTX_TRY(store_.delete_checkpoint(run_id_, r.step));
    std::error_code ec;
    const std::string dir = resolve_checkpoint_path(db_path_, r.path);
    std::filesystem::remove_all(dir, ec);
    if (ec) return make_error(dir + ": cannot remove an old checkpoint: " + ec.message());
    FTX_TRY(store_.add_event(run_id_, step_, "checkpoint_removed", json{{"step", r.step}, {"path", dir}}.dump()));
  }
  return {};
}

// The evaluation's first prompt, one independent and one fixed-Z group, kept with their codes so
// that a viewer can show how generations change as training goes.
Status Trainer::record_generations(const std::vector<GroupResult>& groups, const Tokenizer& tokenizer) {
  for (const GroupResult& g : groups)
    for (size_t i = 0; i < g.gens.size(); ++i) {
      GenerationRow row;
      row.run_id = run_id_, row.step = step_, row.group_id = g.group;
      row.policy = g.fixed ? "fixed" : "independent";
      row.seed = g.latent_seeds[i];
      row.codes = g.gens[i].codes;
      const std::vector<int32_t>& tokens = g.gens[i].tokens;
      row.text = tokenizer.decode(tokens);
      row.prompt = tokenizer.decode(std::span(tokens).first(std::min<size_t>(2, tokens.size())));  // "<letter>>"
      FTX_TRY(store_.add_generation(row));
    }
  return {};
}

Status Trainer::eval_and_record(BatchSource& data, const TrainerCallbacks& cb) {
  EvalConfig ec;
  ec.synthetic = tcfg_.dataset == "synthetic";
  ec.seed = tcfg_.seed * 7919 + step_;
  ec.val_sequences = tcfg_.val_sequences;
  ec.batch = std::min(tcfg_.batch, 64);  // the validation batch check_training_memory counted
  std::vector<GroupResult> samples;
  EvalReport rep{step_, evaluate(*model_, data, ec, tcfg_.kappa_at(step_), &samples)};
  // What a predicted token costs (core/model/flops.h): a routed run's x-axis against dense runs.
  // Threshold mode computes a share of its own: the one this evaluation measured.
  std::optional<double> share;
  if (model_->config().routing.mode == RouteMode::Threshold)
    for (const auto& [k, v] : rep.metrics)
      if (k == "route/capacity") share = v;
  rep.metrics.emplace_back("model/flops_per_token", train_flops_per_token(model_->config(), data.seq_len() - 1, share));
  for (const auto& [k, v] : rep.metrics) store_.add_metric(run_id_, step_, k, v);
  FTX_TRY(record_generations(samples, data.tokenizer()));
  if (cb.on_eval) cb.on_eval(rep);
  return store_.flush();
}

Status Trainer::bench_and_record(const BatchSource& data, const TrainerCallbacks& cb) {
  const bench::TokenRoles roles = bench::token_roles(*tokenizer_);
  bench::ModelLm lm(*model_, *tokenizer_, roles.add_bos, roles.prefix_id, roles.eos_ids,
                    bench::ModelLmOptions{.seed = tcfg_.seed});
  bench::EvalOptions o;
  o.max_new_tokens = tcfg_.bench_max_new_tokens;
  o.seed = 1;  // the same generation seeds (and Z) at every step: only the model changes
  auto results = bench_->run(lm, o);
  if (!results)
    return make_error("run '" + run_ + "': benchmarks at step " + std::to_string(step_) + ": " +
                      results.error().message);
  const int64_t tokens = int64_t{step_} * tcfg_.batch * (data.seq_len() - 1);
  EvalReport rep{step_, {}};
  for (const bench::TaskResult& r : *results) {
    FTX_TRY(bench::record_task_result(store_, run_id_, step_, tokens, r));
    for (const bench::MetricValue& m : r.metrics) rep.metrics.emplace_back("bench/" + r.task + "/" + m.metric, m.value);
  }
  if (cb.on_eval) cb.on_eval(rep);
  return {};
}

Status Trainer::check_data(const BatchSource& data) const {
  const ModelConfig& m = model_->config();
  const int T = data.seq_len() - 1;
  if (T > m.max_seq_len)
    return make_error("dataset " + data.name() + ": sequences of " + std::to_string(T) +
                      " positions exceed the model's max_seq_len " + std::to_string(m.max_seq_len));
  const Tokenizer& tok = data.tokenizer();
  if (auto fits = check_tokenizer_fits(tok, m.vocab_size); !fits)
    return make_error("dataset " + data.name() + ": " + fits.error().message);
  if (tokenizer_ && tokenizer_->fingerprint() != tok.fingerprint())
    return make_error("dataset " + data.name() + ": its tokenizer (" + tok.type() + ", fingerprint " +
                      tok.fingerprint().substr(0, 12) + ") is not the one run '" + run_ + "' was trained with (" +
                      tokenizer_->type() + ", fingerprint " + tokenizer_->fingerprint().substr(0, 12) + ")");
  return {};
}

void Trainer::use_bench_suite(std::unique_ptr<bench::BenchSuite> suite) { bench_ = std::move(suite); }

Status Trainer::run(BatchSource& data, const std::atomic<bool>& stop, const TrainerCallbacks& cb) {
  FTX_TRY(check_data(data));
  if (data_parallel())
    if (Status agreed = agree_on_start(data); !agreed) {
      // A new run refused at the start leaves nothing behind (a resumed one keeps its history).
      if (writes() && checkpoint_dir_.empty() && step_ == 0) (void)store_.delete_run(run_id_);
      return agreed;
    }
  const int T = data.seq_len() - 1;
  ensure_state(data);
  data.seek(data_position_);
  FTX_TRY(store_.set_status(run_id_, "running"));
  if (writes()) {  // the job that trains from here (the studio's run row shows the last)
    const int P = comm_ ? comm_->size() : 1;
    store_.add_metric(run_id_, step_, "job/processes", P);
    store_.add_metric(run_id_, step_, "job/gpus", be_.kind() == DeviceKind::Cuda ? P : 0);
  }
  const auto t0 = Clock::now();
  auto last_flush = t0;
  const int first_step = step_;
  bool stopped = false;
  if (!tcfg_.bench_tasks.empty() && !bench_) {
    if (!tokenizer_) return make_error("run '" + run_ + "': benchmarks need a model with a tokenizer");
    auto specs = bench::parse_bench_tasks(tcfg_.bench_tasks);
    if (!specs) return specs.error();
    auto suite = bench::BenchSuite::load(*specs, tcfg_.bench_data);
    if (!suite) return suite.error();
    bench_ = std::make_unique<bench::BenchSuite>(std::move(*suite));
  }
  if (eval_at_start_ && step_ == 0 && tcfg_.eval_every > 0 && writes()) FTX_TRY(eval_and_record(data, cb));
  eval_at_start_ = false;
  if (bench_ && step_ == 0 && writes()) FTX_TRY(bench_and_record(data, cb));
  bool root_busy = true;  // the first step: rank 0 may have evaluated at step 0
  while (step_ < tcfg_.steps) {
    const bool stop_here = stop.load() || (cb.before_step && !cb.before_step());
    if (stop_here && !data_parallel()) {
      stopped = true;
      break;
    }
    stop_asked_ = stop_here;  // a job's ranks stop together, after the step that carried the request
    if (comm_) {              // what a hang message names, and whether rank 0 worked alone since the last step
      comm_->set_context("step " + std::to_string(step_ + 1));
      comm_->set_root_busy(root_busy);
    }
    const auto ts = Clock::now();
    StepReport rep;
    train_step(data, rep);
    const auto te = Clock::now();
    const double dt = std::chrono::duration<double>(te - ts).count();
    rep.total_steps = tcfg_.steps;
    rep.tokens_per_s = double(tcfg_.batch) * T / dt;
    rep.elapsed_s = std::chrono::duration<double>(te - t0).count();
    rep.eta_s = rep.elapsed_s / (step_ - first_step) * (tcfg_.steps - step_);
    const int s = step_;
    store_.add_metric(run_id_, s, "train/ce", rep.stats.ce);
    store_.add_metric(run_id_, s, "train/kl", rep.stats.kl);
    store_.add_metric(run_id_, s, "train/loss", rep.stats.loss);
    store_.add_metric(run_id_, s, "train/kl_excess", rep.stats.kl_excess);
    if (model_->config().routing.kind != Routing::None) store_.add_metric(run_id_, s, "train/route", rep.stats.route);
    store_.add_metric(run_id_, s, "train/grad_norm", rep.grad_norm);
    store_.add_metric(run_id_, s, "lr", rep.lr);
    store_.add_metric(run_id_, s, "kappa", rep.kappa);
    store_.add_metric(run_id_, s, "perf/tokens_per_s", rep.tokens_per_s);
    if (cb.on_step) cb.on_step(rep);
    if (!std::isfinite(rep.stats.loss)) {
      (void)store_.flush();
      (void)store_.add_event(run_id_, s, "diverged", json{{"loss", "non-finite"}}.dump());
      (void)store_.set_status(run_id_, "failed");
      return make_error("run '" + run_ + "': loss became non-finite at step " + std::to_string(s) +
                        " (try a lower learning rate)");
    }
    if (std::chrono::duration<double>(te - last_flush).count() >= 1.0) {
      FTX_TRY(store_.flush());
      last_flush = te;
    }
    if (stop_all_) {
      stopped = true;
      break;
    }
    const bool eval = tcfg_.eval_every > 0 && s % tcfg_.eval_every == 0;
    const bool bench = bench_ && tcfg_.bench_every > 0 && s % tcfg_.bench_every == 0;
    const bool checkpoint = tcfg_.checkpoint_every > 0 && s % tcfg_.checkpoint_every == 0 && s < tcfg_.steps;
    root_busy = eval || bench || checkpoint;     // every rank knows it from the shared configuration
    if (checkpoint && shard_) gather_moments();  // every rank: rank 0's checkpoint holds them all
    if (!writes()) continue;                     // a job's other ranks only train
    if (eval) FTX_TRY(eval_and_record(data, cb));
    if (bench) FTX_TRY(bench_and_record(data, cb));
    if (checkpoint) {
      FTX_TRY(save_checkpoint());
      if (cb.on_checkpoint) cb.on_checkpoint(s, checkpoint_dir(db_path_, run_, s));
    }
  }
  if (shard_) gather_moments();  // for the last checkpoint, on every rank
  if (writes()) {
    if (!stopped && tcfg_.eval_every > 0 && step_ % tcfg_.eval_every != 0) FTX_TRY(eval_and_record(data, cb));
    if (!stopped && bench_ && (tcfg_.bench_every == 0 || step_ % tcfg_.bench_every != 0))
      FTX_TRY(bench_and_record(data, cb));
    FTX_TRY(save_checkpoint());
    if (cb.on_checkpoint) cb.on_checkpoint(step_, checkpoint_dir(db_path_, run_, step_));
  }
  if (stopped) FTX_TRY(store_.add_event(run_id_, step_, "stopped", "{}"));
  FTX_TRY(store_.set_status(run_id_, stopped ? "stopped" : "done"));
  return store_.flush();
}

}  // namespace ftx
