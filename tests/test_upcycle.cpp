// Tests of upcycling and of training from a model file (core/model/upcycle.h,
// core/io/model_params.h, Trainer::start with initial weights, --keep-checkpoints): the upcycled
// Free Transformer's logits equal the source Llama's exactly (bit for bit, same CPU backend, fp32)
// on tiny fixtures and on the real SmolLM2; the encoder is a copy of the injection block; a
// Free Transformer source and a bad H are refused in one line; a run started from a checkpoint
// evaluates at step 0 to the source's validation CE; --keep-checkpoints keeps exactly the last N
// and the best; shape flags with --init are refused; the studio's Session starts from a file too.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/data/token_file.h"
#include "core/eval/evaluator.h"
#include "core/io/checkpoint.h"
#include "core/io/model_params.h"
#include "core/model/upcycle.h"
#include "core/session/session.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "datasets/registry.h"
#include "datasets/synthetic.h"
#include "datasets/text.h"
#include "tests/real_model.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

namespace fs = std::filesystem;
const std::string kReal = std::string(FTX_FIXTURE_DIR) + "/real/";

Backend& cpu() {
  static std::unique_ptr<Backend> be = make_cpu_backend();
  return *be;
}

// Logits (T, V) of a trainable fp32 model with these weights on `tokens`; codes (T) for a Free
// Transformer (Z given, as generation gives it).
std::vector<float> logits_of(const ModelConfig& c, const std::vector<float>& params, const std::vector<int32_t>& tokens,
                             const std::vector<uint32_t>& codes) {
  auto m = Model::create(cpu(), c);
  EXPECT_TRUE(m.ok());
  (*m)->load_params(params.data());
  const int T = int(tokens.size());
  auto s = (*m)->make_state(1, T);
  (*m)->forward(*s, tokens.data(), nullptr, c.is_free() ? codes.data() : nullptr, 1, 0, 0.0f);
  std::vector<float> out(size_t(T) * c.vocab_size);
  (*m)->read_logits(*s, out.data());
  return out;
}

// Upcycles the model at `path` to H bits and compares logits on a fixed prompt; returns the
// largest absolute difference.
float upcycled_logit_diff(const std::string& path, int H, bool bitlinear, int T, RoutingConfig routing = {}) {
  auto src = read_model_params(path);
  EXPECT_TRUE(src.ok()) << (src.ok() ? "" : src.error().message);
  if (!src) return -1;
  UpcycleOptions opt;
  opt.latent_bits = H, opt.bitlinear_post_sampler = bitlinear, opt.seed = 5, opt.routing = routing;
  auto up = upcycle(cpu(), src->info.config, src->params, opt);
  EXPECT_TRUE(up.ok()) << (up.ok() ? "" : up.error().message);
  if (!up) return -1;
  EXPECT_EQ(up->config.inject_after, src->info.config.n_layers / 2);
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  std::vector<uint32_t> codes(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t)
    tokens[size_t(t)] = (t * 37 + 11) % src->info.config.vocab_size,
    codes[size_t(t)] = uint32_t(t * 2654435761u) & uint32_t(up->config.num_codes() - 1);
  const std::vector<float> a = logits_of(src->info.config, src->params, tokens, codes);
  const std::vector<float> b = logits_of(up->config, up->params, tokens, codes);
  EXPECT_EQ(a.size(), b.size());
  float diff = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
  if (H == 0) return diff;
  // The encoder starts as the injection block.
  const auto specs = param_specs(up->config);
  const auto sspecs = param_specs(src->info.config);
  const std::string inj = "model.layers." + std::to_string(up->config.inject_after) + ".";
  for (const char* leaf : {"self_attn.q_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight"}) {
    const ParamSpec* e = find_param(specs, std::string("free.encoder.") + leaf);
    const ParamSpec* s = find_param(sspecs, inj + leaf);
    EXPECT_TRUE(std::equal(up->params.begin() + e->offset, up->params.begin() + e->offset + e->numel,
                           src->params.begin() + s->offset))
        << leaf;
  }
  return diff;
}

TEST(Upcycle, ZeroPostSamplerGivesTheLlamasLogitsExactly) {
  for (const char* f : {"tiny_gqa_llama3", "tiny_tied_bias", "tiny_qwen2", "tiny_mistral", "tiny_f16"})
    EXPECT_EQ(upcycled_logit_diff(kReal + f, 4, false, 12), 0.0f) << f;
}

TEST(Upcycle, BitLinearPostSamplerMakesZMatter) {
  EXPECT_GT(upcycled_logit_diff(kReal + "tiny_gqa_llama3", 4, true, 12), 1e-4f);
}

TEST(Upcycle, RealSmolLM2LogitsUnchanged) {
  const std::string path = test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(path);
  EXPECT_EQ(upcycled_logit_diff(path, 16, false, 16), 0.0f);
}

// Routed compute on an upcycled model: at capacity 1 with the gate held at 1 every routed block
// computes every token and writes its output whole, so the logits are the source's, bit for bit,
// with and without Z, for every router; the router's tensors are there to train.
RoutingConfig full_hard(Routing kind) {
  RoutingConfig r;
  r.kind = kind, r.capacity = 1.0f, r.hard_gate = true;
  return r;
}

TEST(Upcycle, RoutedAtCapacityOneWithAHardGateKeepsTheLogits) {
  for (Routing kind : {Routing::Random, Routing::Mod, Routing::Sdt, Routing::Stt}) {
    SCOPED_TRACE(routing_name(kind));
    EXPECT_EQ(upcycled_logit_diff(kReal + "tiny_gqa_llama3", 0, false, 12, full_hard(kind)), 0.0f);
  }
  // With Z the 3-block fixture has no block to route: Z enters block 1, the only odd one.
  auto src = read_model_params(kReal + "tiny_gqa_llama3");
  ASSERT_TRUE(src.ok());
  UpcycleOptions opt;
  opt.latent_bits = 4, opt.routing = full_hard(Routing::Sdt);
  auto refused = upcycle(cpu(), src->info.config, src->params, opt);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("no block of 3 can be routed"), std::string::npos) << refused.error().message;
  RoutingConfig soft = full_hard(Routing::Mod);
  soft.capacity = 0.5f, soft.hard_gate = false;
  EXPECT_GT(upcycled_logit_diff(kReal + "tiny_gqa_llama3", 0, false, 12, soft), 1e-4f)
      << "half the tokens through a gate changes the logits";
}

TEST(Upcycle, RealSmolLM2RoutedAtCapacityOneKeepsTheLogits) {
  const std::string path = test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(path);
  EXPECT_EQ(upcycled_logit_diff(path, 0, false, 16, full_hard(Routing::Sdt)), 0.0f);
  EXPECT_EQ(upcycled_logit_diff(path, 16, false, 16, full_hard(Routing::Mod)), 0.0f) << "with Z";
}

TEST(Upcycle, LatentBitsZeroIsThePlainModel) {
  auto src = read_model_params(kReal + "tiny_gqa_llama3");
  ASSERT_TRUE(src.ok());
  UpcycleOptions opt;
  opt.latent_bits = 0;
  auto up = upcycle(cpu(), src->info.config, src->params, opt);
  ASSERT_TRUE(up.ok());
  EXPECT_FALSE(up->config.is_free());
  EXPECT_EQ(up->params, src->params);
}

TEST(Upcycle, RefusesAFreeTransformerAndABadH) {
  auto src = read_model_params(kReal + "tiny_gqa_llama3");
  ASSERT_TRUE(src.ok());
  UpcycleOptions opt;
  opt.latent_bits = kMaxLatentBits + 1;
  auto bad = upcycle(cpu(), src->info.config, src->params, opt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("latent bits must be in 0..20"), std::string::npos) << bad.error().message;
  opt.latent_bits = 4;
  auto up = upcycle(cpu(), src->info.config, src->params, opt);
  ASSERT_TRUE(up.ok());
  auto again = upcycle(cpu(), up->config, up->params, opt);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("already a Free Transformer"), std::string::npos);
  // One block (a quantized GGUF fixture): no middle block to inject Z into.
  auto shallow = read_model_params(kReal + "gguf_tiny_qwen2.gguf");
  ASSERT_TRUE(shallow.ok()) << shallow.error().message;
  auto refused = upcycle(cpu(), shallow->info.config, shallow->params, opt);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("at least 2 blocks"), std::string::npos);
}

// ---- training from a checkpoint --------------------------------------------------------------

std::shared_ptr<const Tokenizer> synthetic_tokenizer() { return SyntheticDataset(0).tokenizer().clone(); }

// A plain tiny model with random weights, as an ftx checkpoint with the synthetic task's tokenizer.
std::string plain_checkpoint(const test::TempDir& dir, std::vector<float>* params, ModelConfig* cfg) {
  ModelConfig c = *model_preset("tiny");
  c.latent_bits = 0, c.vocab_size = 29;
  Model m(cpu(), c);
  m.init_weights(3, InitConfig{});
  CheckpointData ck;
  ck.config = c;
  ck.tokenizer = synthetic_tokenizer();
  ck.params.resize(size_t(m.num_params()));
  m.save_params(ck.params.data());
  const std::string path = dir / "plain";
  EXPECT_TRUE(save_checkpoint(path, ck).ok());
  *params = ck.params, *cfg = c;
  return path;
}

double metric_at(const std::string& db, const std::string& run, const std::string& key, int step) {
  auto store = RunStore::open_readonly(db);
  auto info = store->find_run(run);
  auto rows = store->metrics(info->id, key);
  for (const MetricRow& m : *rows)
    if (m.step == step) return m.value;
  ADD_FAILURE() << key << " @" << step << " missing";
  return 0;
}

TEST(TrainInit, FirstEvaluationIsTheSourcesValidationCe) {
  test::TempDir dir("ftx_test_upcycle_");
  std::vector<float> src_params;
  ModelConfig src_cfg;
  const std::string plain = plain_checkpoint(dir, &src_params, &src_cfg);
  UpcycleOptions opt;
  opt.latent_bits = 3;
  ASSERT_TRUE(upcycle_model_file(plain, opt, float(bits_to_nats(0.5)), dir / "up").ok());
  EXPECT_NEAR(recorded_kappa_nats(dir / "up"), bits_to_nats(0.5), 1e-6);
  EXPECT_LT(recorded_kappa_nats(plain), 0);

  TrainConfig tc;
  tc.preset = "custom", tc.steps = 2, tc.batch = 4, tc.eval_every = 2, tc.checkpoint_every = 0, tc.seed = 9;
  tc.val_sequences = 8;
  SyntheticDataset data(tc.seed);
  // The source's own CE on the validation batches the trainer's step-0 evaluation uses.
  auto src_model = Model::create(cpu(), src_cfg);
  (*src_model)->load_params(src_params.data());
  EvalConfig ec;
  ec.synthetic = false, ec.seed = tc.seed * 7919, ec.val_sequences = tc.val_sequences, ec.batch = tc.batch;
  double src_ce = -1;
  for (const auto& [k, v] : evaluate(**src_model, data, ec, 0.0f))
    if (k == "val/ce_prior") src_ce = v;

  for (const std::string& from : {plain, dir / "up"}) {
    auto init = read_model_params(from);
    ASSERT_TRUE(init.ok()) << init.error().message;
    tc.init_from = from;
    const std::string run = fs::path(from).filename().string();
    auto t = Trainer::start(cpu(), init->info.config, init->info.tokenizer, tc, data.seq_len(), dir / "r.db", run,
                            &init->params);
    ASSERT_TRUE(t.ok()) << t.error().message;
    std::atomic<bool> stop{false};
    ASSERT_TRUE((*t)->run(data, stop, {}).ok());
    EXPECT_EQ(metric_at(dir / "r.db", run, "val/ce_prior", 0), src_ce) << from;
  }
}

TEST(TrainInit, KeepCheckpointsKeepsTheLastNAndTheBest) {
  test::TempDir dir("ftx_test_upcycle_");
  ModelConfig c = *model_preset("tiny");
  c.latent_bits = 3, c.inject_after = c.n_layers / 2, c.vocab_size = 29;
  TrainConfig tc;
  tc.preset = "tiny", tc.steps = 12, tc.batch = 4, tc.eval_every = 2, tc.checkpoint_every = 2, tc.seed = 4;
  tc.val_sequences = 8, tc.keep_checkpoints = 2, tc.lr = 3e-2f;  // a high lr: the best is rarely the last
  SyntheticDataset data(tc.seed);
  const std::string db = dir / "k.db";
  auto t = Trainer::start(cpu(), c, synthetic_tokenizer(), tc, data.seq_len(), db, "k");
  ASSERT_TRUE(t.ok()) << t.error().message;
  std::atomic<bool> stop{false};
  ASSERT_TRUE((*t)->run(data, stop, {}).ok());
  // Expected: steps 10 and 12, and the step of the lowest val/ce_prior among checkpoint steps.
  int best = -1;
  double best_ce = 1e30;
  for (int s = 2; s <= 12; s += 2)
    if (const double v = metric_at(db, "k", "val/ce_prior", s); v < best_ce) best_ce = v, best = s;
  std::set<int> want = {10, 12, best};
  auto store = RunStore::open_readonly(db);
  std::set<int> rows;
  auto ckpts = store->checkpoints(store->find_run("k")->id);
  for (const CheckpointRow& r : *ckpts) {
    rows.insert(int(r.step));
    EXPECT_TRUE(fs::is_directory(resolve_checkpoint_path(db, r.path))) << r.path;
  }
  EXPECT_EQ(rows, want);
  std::set<int> dirs;
  for (const auto& e : fs::directory_iterator(fs::path(checkpoint_dir(db, "k", 2)).parent_path()))
    dirs.insert(std::stoi(e.path().filename().string().substr(5)));
  EXPECT_EQ(dirs, want);
}

// A token file of `docs` short texts encoded by `tok`.
std::string token_file(const std::string& path, const Tokenizer& tok, int docs) {
  auto w = TokenFileWriter::create(path, tok, 0);
  EXPECT_TRUE(w.ok());
  for (int d = 0; d < docs; ++d) {
    std::string text;
    for (int i = 0; i < 40; ++i) text += "ab c" + std::to_string((d * 7 + i) % 10) + (i % 3 ? " " : "\n");
    auto ids = tok.encode(text);
    EXPECT_TRUE(ids.ok());
    EXPECT_TRUE((*w)->add_document(*ids, document_hash(text)).ok());
  }
  EXPECT_TRUE((*w)->finish(0.3).ok());
  return path;
}

// The baseline straight from a quantized GGUF file (no ftx checkpoint in between) on text data.
TEST(TrainInit, BaselineFromAGgufFileStartsAtItsCe) {
  test::TempDir dir("ftx_test_upcycle_");
  const std::string gguf = kReal + "gguf_tiny_qwen2.gguf";
  auto init = read_model_params(gguf);
  ASSERT_TRUE(init.ok()) << init.error().message;
  auto file = TokenFile::open(token_file(dir / "d.tok", *init->info.tokenizer, 12));
  ASSERT_TRUE(file.ok()) << file.error().message;
  TrainConfig tc;
  tc.dataset = "text", tc.preset = "custom", tc.steps = 1, tc.batch = 2, tc.eval_every = 1, tc.checkpoint_every = 0;
  tc.val_sequences = 4, tc.init_from = gguf, tc.seed = 3;
  TextDataset data(*file, 16, tc.seed);
  auto src = Model::create(cpu(), init->info.config);
  (*src)->load_params(init->params.data());
  EvalConfig ec;
  ec.synthetic = false, ec.seed = tc.seed * 7919, ec.val_sequences = tc.val_sequences, ec.batch = tc.batch;
  double src_ce = -1;
  for (const auto& [k, v] : evaluate(**src, data, ec, 0.0f))
    if (k == "val/ce_prior") src_ce = v;
  auto t = Trainer::start(cpu(), init->info.config, init->info.tokenizer, tc, data.seq_len(), dir / "r.db", "g",
                          &init->params);
  ASSERT_TRUE(t.ok()) << t.error().message;
  std::atomic<bool> stop{false};
  ASSERT_TRUE((*t)->run(data, stop, {}).ok());
  EXPECT_EQ(metric_at(dir / "r.db", "g", "val/ce_prior", 0), src_ce);
  EXPECT_GT(src_ce, 0.0);
}

// The studio's Session starts the same run from a model file (the Train form's "Start from"):
// the file's shape and weights (the first evaluation is the file's CE), refused before anything
// is queued when the data's tokenizer is another.
TEST(TrainInit, SessionStartsFromAModelFileOnText) {
  test::TempDir dir("ftx_test_upcycle_");
  const std::string gguf = kReal + "gguf_tiny_qwen2.gguf";
  auto init = read_model_params(gguf);
  ASSERT_TRUE(init.ok()) << init.error().message;
  const std::string data_path = token_file(dir / "d.tok", *init->info.tokenizer, 12);
  TrainRequest req;
  req.db_path = dir / "s.db", req.run = "from-file", req.threads = 1;
  req.shape.preset = "tiny", req.shape.latent_bits = 4;  // ignored: the shape is the file's
  req.train.dataset = "text", req.train.dataset_options = {{"text_data", data_path}, {"text_seq_len", 16}};
  req.train.steps = 2, req.train.batch = 2, req.train.eval_every = 2, req.train.checkpoint_every = 0;
  req.train.val_sequences = 4, req.train.init_from = gguf, req.train.seed = 3;

  auto file = TokenFile::open(data_path);
  ASSERT_TRUE(file.ok());
  TextDataset data(*file, 16, req.train.seed);
  auto src = Model::create(cpu(), init->info.config);
  (*src)->load_params(init->params.data());
  EvalConfig ec;
  ec.synthetic = false, ec.seed = req.train.seed * 7919, ec.val_sequences = 4, ec.batch = 2;
  double src_ce = -1;
  for (const auto& [k, v] : evaluate(**src, data, ec, 0.0f))
    if (k == "val/ce_prior") src_ce = v;

  Session session(make_dataset);
  ASSERT_TRUE(session.start({req}).ok());
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (session.busy() && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const SessionSnapshot snap = session.snapshot();
  ASSERT_EQ(snap.state, SessionState::Finished) << snap.message;
  EXPECT_EQ(metric_at(req.db_path, req.run, "val/ce_prior", 0), src_ce);
  auto store = RunStore::open_readonly(req.db_path);
  auto row = store->find_run(req.run);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(nlohmann::json::parse(row->config_json)["model"]["hidden_size"], init->info.config.dim);
  EXPECT_EQ(nlohmann::json::parse(row->config_json)["train"]["init_from"], gguf);

  TrainRequest other = req;  // data from the other tiny model's tokenizer
  other.run = "mismatch", other.train.init_from = kReal + "tiny_qwen2";
  Status st = session.start({other});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find(data_path), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("tiny_qwen2"), std::string::npos) << st.error().message;
  EXPECT_FALSE(session.busy());
  EXPECT_FALSE(store->find_run("mismatch").ok());
}

// ---- the command line -------------------------------------------------------------------------

// Runs ftx with `args`; returns the exit code and stderr's lines.
int ftx_cli(const std::string& args, std::vector<std::string>* err_lines) {
  const std::string cmd = std::string(FTX_BINARY) + " " + args + " 2>&1 >/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) err_lines->push_back(buf);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(UpcycleCli, BadInputsAreOneLine) {
  test::TempDir dir("ftx_test_upcycle_");
  std::vector<std::string> e;
  EXPECT_EQ(ftx_cli("upcycle --from " + kReal + "tiny_gqa_llama3 --latent-bits 21 --out " + (dir / "o"), &e), 1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("--latent-bits must be in 0..20"), std::string::npos) << e[0];
  e.clear();
  EXPECT_EQ(ftx_cli("upcycle --from " + (dir / "missing.gguf") + " --latent-bits 4 --out " + (dir / "o"), &e), 1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("missing.gguf"), std::string::npos) << e[0];
  e.clear();
  EXPECT_EQ(ftx_cli("train --init " + kReal + "tiny_gqa_llama3 --dim 64 --run x --db " + (dir / "d.db"), &e), 1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("--dim cannot be used with --init"), std::string::npos) << e[0];
  // Data tokenized by another tokenizer than the model's: one line naming both files.
  auto other = read_model_params(kReal + "gguf_tiny_qwen2.gguf");
  ASSERT_TRUE(other.ok());
  const std::string data = token_file(dir / "q.tok", *other->info.tokenizer, 6);
  e.clear();
  EXPECT_EQ(ftx_cli("train --init " + kReal + "tiny_qwen2 --dataset text --data " + data +
                        " --seq-len 16 --run x --db " + (dir / "d.db"),
                    &e),
            1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find(data), std::string::npos) << e[0];
  EXPECT_NE(e[0].find("tiny_qwen2"), std::string::npos) << e[0];
  // Routing: an unknown router, settings without one; nothing written either time.
  e.clear();
  EXPECT_EQ(
      ftx_cli("upcycle --from " + kReal + "tiny_gqa_llama3 --latent-bits 0 --routing bogus --out " + (dir / "r"), &e),
      1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("--routing 'bogus': unknown"), std::string::npos) << e[0];
  e.clear();
  EXPECT_EQ(
      ftx_cli("upcycle --from " + kReal + "tiny_gqa_llama3 --latent-bits 0 --capacity 0.25 --out " + (dir / "r"), &e),
      1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("--capacity and the other routing settings need --routing"), std::string::npos) << e[0];
  EXPECT_FALSE(std::filesystem::exists(dir / "r"));
  // a good one writes a routed checkpoint
  EXPECT_EQ(
      ftx_cli("upcycle --from " + kReal + "tiny_gqa_llama3 --latent-bits 0 --routing mod --out " + (dir / "r"), &e), 0);
  auto written = read_model_params(dir / "r");
  ASSERT_TRUE(written.ok()) << written.error().message;
  EXPECT_EQ(written->info.config.routing.kind, Routing::Mod);
}

}  // namespace
}  // namespace ftx
