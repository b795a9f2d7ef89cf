// Tests of core/io/checkpoint and core/io/config_json: round trips (Free Transformer, baseline,
// tied embeddings, training state), strict loading against param_specs (shape, dtype, missing,
// extra, NaN, lm_head/tie and free_transformer consistency), config.json validation, sharded
// checkpoints with an index, atomic save under a full disk, and truncated files.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/io/config_json.h"
#include "core/io/safetensors.h"
#include "core/model/params.h"
#include "core/text/bpe_tokenizer.h"
#include "core/text/char_tokenizer.h"
#include "core/text/unicode_text.h"
#include "datasets/synthetic.h"
#include "kernels/base/dtype.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

ModelConfig tiny_config(int latent_bits, bool tied = false) {
  ModelConfig c;
  c.vocab_size = 29, c.dim = 16, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 2, c.head_dim = 8;
  c.ffn_hidden = 24, c.max_seq_len = 80, c.rms_norm_eps = 1e-6f, c.rope_theta = 10000.0f;
  c.tie_embeddings = tied, c.latent_bits = latent_bits, c.inject_after = 1;
  return c;
}

const CharTokenizer kSynthetic(kSyntheticAlphabet);

std::vector<float> random_arena(const ModelConfig& c, uint32_t seed, bool positive = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  std::vector<float> a(static_cast<size_t>(param_count(param_specs(c))));
  for (float& x : a) x = positive ? std::fabs(nd(rng)) * 1e-3f : nd(rng);
  return a;
}

CheckpointData make_checkpoint(const ModelConfig& c, uint32_t seed, bool with_state) {
  CheckpointData ck;
  ck.config = c;
  ck.tokenizer = kSynthetic.clone();
  ck.params = random_arena(c, seed);
  if (with_state) {
    ck.has_training_state = true;
    ck.adam_m = random_arena(c, seed + 1);
    ck.adam_v = random_arena(c, seed + 2, true);
    ck.trainer = {{"step", 1234}, {"data_position", 98765}, {"rng_seed", 42}, {"train", {{"lr", 3e-4}}}};
  }
  return ck;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.ffn_hidden, b.ffn_hidden);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings);
  EXPECT_EQ(a.latent_bits, b.latent_bits);
  if (a.is_free()) {
    EXPECT_EQ(a.inject_after, b.inject_after);
  }
  EXPECT_EQ(a.readout_bias, b.readout_bias);
}

// A fresh checkpoint root per test under testing::TempDir(), removed afterwards.
class Checkpoint : public test::TempDirTest {
 protected:
  Checkpoint() : TempDirTest("ftx_ck_") {}
  std::string path(const std::string& name) const { return in_dir(name); }

  static void write_text(const std::string& p, const std::string& text) { ASSERT_TRUE(test::write_file(p, text)); }
  static json read_json(const std::string& p) {
    std::ifstream in(p);
    return json::parse(in);
  }

  // A checkpoint dir whose model.safetensors holds `tensors` and whose config.json is `cfg`.
  std::string manual_checkpoint(const std::string& name, const json& cfg, const std::vector<NamedTensor>& tensors) {
    const std::string dir = path(name);
    fs::create_directories(dir);
    write_text(dir + "/config.json", cfg.dump(2));
    EXPECT_TRUE(write_safetensors(dir + "/model.safetensors", tensors).ok());
    return dir;
  }

  // The tensors of `ck` by param_specs, optionally edited by the caller.
  static std::vector<NamedTensor> tensors_of(const CheckpointData& ck) {
    std::vector<NamedTensor> out;
    for (const auto& s : param_specs(ck.config)) out.push_back({s.name, s.shape, ck.params.data() + s.offset});
    return out;
  }

  // Expects load_checkpoint(dir) to fail with a message containing every string in `words`.
  static void expect_load_error(const std::string& dir, const std::vector<std::string>& words,
                                bool with_state = false) {
    auto r = load_checkpoint(dir, with_state);
    ASSERT_FALSE(r.ok()) << "load succeeded; expected an error with '" << words[0] << "'";
    const std::string& msg = r.error().message;
    for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "expected '" << w << "' in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }

  // Names in dir_ that look like leftovers of a save (temp or aside directories).
  std::vector<std::string> leftovers() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (n.find(".tmp-") != std::string::npos || n.find(".old-") != std::string::npos) out.push_back(n);
    }
    return out;
  }
};

// ---- round trips ------------------------------------------------------------------------------

TEST_F(Checkpoint, RoundTripFreeTransformerWithTrainingState) {
  const CheckpointData ck = make_checkpoint(tiny_config(3), 11, true);
  const std::string dir = path("ft");
  ASSERT_TRUE(save_checkpoint(dir, ck).ok());
  for (const char* f : {"config.json", "model.safetensors", "training_state.safetensors", "trainer.json"})
    EXPECT_TRUE(fs::is_regular_file(dir + "/" + f)) << f;
  EXPECT_TRUE(leftovers().empty());
  const json cfg = read_json(dir + "/config.json");
  EXPECT_EQ(cfg["free_transformer"]["latent_bits"], 3);
  EXPECT_EQ(cfg["free_transformer"]["inject_after_layer"], 1);
  EXPECT_EQ(cfg["tokenizer"]["alphabet"], kSyntheticAlphabet);
  EXPECT_EQ(cfg["architectures"][0], "LlamaForCausalLM");

  auto r = load_checkpoint(dir, true);
  ASSERT_TRUE(r.ok()) << r.error().message;
  expect_same_config(r->config, ck.config);
  ASSERT_TRUE(r->tokenizer);
  EXPECT_EQ(r->tokenizer->fingerprint(), kSynthetic.fingerprint());
  EXPECT_TRUE(bit_identical(r->params, ck.params));
  ASSERT_TRUE(r->has_training_state);
  EXPECT_TRUE(bit_identical(r->adam_m, ck.adam_m));
  EXPECT_TRUE(bit_identical(r->adam_v, ck.adam_v));
  EXPECT_EQ(r->trainer, ck.trainer);

  auto inference_only = load_checkpoint(dir, false);
  ASSERT_TRUE(inference_only.ok());
  EXPECT_FALSE(inference_only->has_training_state);
  EXPECT_TRUE(inference_only->adam_m.empty());
  EXPECT_TRUE(bit_identical(inference_only->params, ck.params));
}

TEST_F(Checkpoint, BF16WeightsHalveTheFileAndLoadRounded) {
  CheckpointData ck = make_checkpoint(tiny_config(3), 12, false);
  const std::string f32_dir = path("f32"), bf16_dir = path("bf16");
  ASSERT_TRUE(save_checkpoint(f32_dir, ck).ok());
  ck.weights_dtype = SafetensorsDType::BF16;
  ASSERT_TRUE(save_checkpoint(bf16_dir, ck).ok());
  const auto f32_size = fs::file_size(f32_dir + "/model.safetensors");
  const auto bf16_size = fs::file_size(bf16_dir + "/model.safetensors");
  EXPECT_LT(bf16_size, f32_size / 2 + 4096);
  auto r = load_checkpoint(bf16_dir, false);
  ASSERT_TRUE(r.ok()) << r.error().message;
  expect_same_config(r->config, ck.config);
  ASSERT_EQ(r->params.size(), ck.params.size());
  for (size_t i = 0; i < ck.params.size(); ++i) ASSERT_EQ(r->params[i], bf16_to_fp32(fp32_to_bf16(ck.params[i]))) << i;
}

TEST_F(Checkpoint, BpeTokenizerRoundTripsThroughItsOwnFile) {
  // A GGUF-made (llama.cpp rules) and a tokenizer.json-made BPE tokenizer: config.json refers to
  // tokenizer.json beside it; loading gives the same fingerprint and ids.
  auto from_json = bpe_from_tokenizer_json(FTX_FIXTURE_DIR "/real/tok_gpt2.json");
  ASSERT_TRUE(from_json.ok()) << from_json.error().message;
  BpeVocab v;
  for (int i = 0; i < 256; ++i) v.tokens.push_back(std::string(text::byte_spelling(static_cast<uint8_t>(i))));
  v.tokens.push_back("<|endoftext|>");
  v.token_types.assign(v.tokens.size(), 1);
  v.token_types.back() = 3;
  v.merges = {"Ġ t"};
  v.tokens.push_back("Ġt");
  v.token_types.push_back(1);
  v.pre = "smollm";
  v.special.eos = 256;
  auto from_gguf = bpe_from_vocab(v, "m.gguf");
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.error().message;
  int k = 0;
  for (const BpeTokenizer* t : {from_json->get(), from_gguf->get()}) {
    CheckpointData ck = make_checkpoint(tiny_config(0), 5, false);
    ck.config.vocab_size = t->vocab_size() + 3;  // padded embeddings
    ck.params = random_arena(ck.config, 5);
    ck.tokenizer = t->clone();
    const std::string dir = path("bpe" + std::to_string(k++));
    ASSERT_TRUE(save_checkpoint(dir, ck).ok());
    const json cfg = read_json(dir + "/config.json");
    EXPECT_EQ(cfg["tokenizer"], (json{{"type", "bpe"},
                                      {"file", "tokenizer.json"},
                                      {"fingerprint", t->fingerprint()},
                                      {"vocab_size", t->vocab_size()}}));
    EXPECT_TRUE(fs::is_regular_file(dir + "/tokenizer.json"));
    auto r = load_checkpoint(dir, false);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_TRUE(r->tokenizer);
    EXPECT_EQ(r->tokenizer->type(), "bpe");
    EXPECT_EQ(r->tokenizer->fingerprint(), t->fingerprint());
    const std::string sample = "the cat<|endoftext|> sat 123";
    EXPECT_EQ(*r->tokenizer->encode(sample), *t->encode(sample));
    // A run row keeps only the reference, which config_from_json accepts without the file.
    const json row = config_to_json(ck.config, t);
    EXPECT_FALSE(row["tokenizer"].contains("file"));
    EXPECT_TRUE(config_from_json(row, "run row").ok());
  }
  // A tokenizer.json swapped for another is refused, naming config.json.
  fs::copy_file(path("bpe0") + "/tokenizer.json", path("bpe1") + "/tokenizer.json",
                fs::copy_options::overwrite_existing);
  auto bad = load_checkpoint(path("bpe1"), false);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("config.json: key 'tokenizer.fingerprint'"), std::string::npos)
      << bad.error().message;
  fs::remove(path("bpe0") + "/tokenizer.json");
  bad = load_checkpoint(path("bpe0"), false);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("tokenizer.json"), std::string::npos) << bad.error().message;
}

TEST_F(Checkpoint, CharsConfigJsonIsUnchanged) {
  const CheckpointData ck = make_checkpoint(tiny_config(3), 11, false);
  ASSERT_TRUE(save_checkpoint(path("chars"), ck).ok());
  EXPECT_EQ(test::read_file(path("chars") + "/config.json"), config_to_json(ck.config, &kSynthetic).dump(2) + "\n");
  EXPECT_FALSE(fs::exists(path("chars") + "/tokenizer.json"));
}

TEST_F(Checkpoint, RoundTripBaseline) {
  const CheckpointData ck = make_checkpoint(tiny_config(0), 21, false);
  const std::string dir = path("base");
  ASSERT_TRUE(save_checkpoint(dir, ck).ok());
  EXPECT_FALSE(read_json(dir + "/config.json").contains("free_transformer"));
  EXPECT_FALSE(fs::exists(dir + "/training_state.safetensors"));
  auto r = load_checkpoint(dir, false);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->config.latent_bits, 0);
  expect_same_config(r->config, ck.config);
  EXPECT_TRUE(bit_identical(r->params, ck.params));
  auto with_state = load_checkpoint(dir, true);
  ASSERT_FALSE(with_state.ok());
  EXPECT_NE(with_state.error().message.find("training_state.safetensors"), std::string::npos);
}

TEST_F(Checkpoint, RoundTripTiedEmbeddings) {
  const CheckpointData ck = make_checkpoint(tiny_config(3, true), 31, true);
  const std::string dir = path("tied");
  ASSERT_TRUE(save_checkpoint(dir, ck).ok());
  auto f = SafetensorsFile::open(dir + "/model.safetensors");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->find("lm_head.weight"), nullptr);
  auto r = load_checkpoint(dir, true);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->config.tie_embeddings);
  EXPECT_TRUE(bit_identical(r->params, ck.params));
  EXPECT_TRUE(bit_identical(r->adam_v, ck.adam_v));
}

TEST_F(Checkpoint, ReadoutBiasDetectedFromTensors) {
  ModelConfig c = tiny_config(2);
  c.readout_bias = true;
  const CheckpointData ck = make_checkpoint(c, 41, false);
  ASSERT_TRUE(save_checkpoint(path("bias"), ck).ok());
  auto r = load_checkpoint(path("bias"), false);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->config.readout_bias);
  EXPECT_TRUE(bit_identical(r->params, ck.params));
}

TEST_F(Checkpoint, SaveReplacesPreviousCheckpoint) {
  const std::string dir = path("run/step");
  ASSERT_TRUE(save_checkpoint(dir, make_checkpoint(tiny_config(3), 1, true)).ok());
  const CheckpointData second = make_checkpoint(tiny_config(0), 2, false);
  ASSERT_TRUE(save_checkpoint(dir + "/", second).ok());
  auto r = load_checkpoint(dir, false);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->config.latent_bits, 0);
  EXPECT_TRUE(bit_identical(r->params, second.params));
  EXPECT_FALSE(fs::exists(dir + "/training_state.safetensors")) << "old files must not survive";
  for (const auto& e : fs::directory_iterator(path("run")))
    EXPECT_EQ(e.path().filename(), "step") << "leftover " << e.path();
}

TEST_F(Checkpoint, BF16AndF16TensorsLoadConverted) {
  const ModelConfig c = tiny_config(1, true);
  const auto specs = param_specs(c);
  // Hand-built safetensors: every tensor BF16 except model.norm.weight in F16, values 0.5*(i%7)-1.
  std::string header = "{", data;
  std::vector<float> expect(static_cast<size_t>(param_count(specs)));
  for (const auto& s : specs) {
    const bool f16 = s.name == "model.norm.weight";
    const size_t begin = data.size();
    for (int64_t i = 0; i < s.numel; ++i) {
      const float v = 0.5f * float(i % 7) - 1.0f;  // exact in both formats
      expect[size_t(s.offset + i)] = v;
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      uint16_t h = f16 ? uint16_t(v == 0 ? 0
                                         : ((bits >> 16) & 0x8000) | ((((bits >> 23) & 0xff) - 112) << 10) |
                                               ((bits >> 13) & 0x3ff))
                       : uint16_t(bits >> 16);
      data += char(h & 0xff), data += char(h >> 8);
    }
    if (header.size() > 1) header += ",";
    header += json(s.name).dump() + ":{\"dtype\":\"" + (f16 ? "F16" : "BF16") + "\",\"shape\":" + json(s.shape).dump() +
              ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  }
  header += "}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = char((header.size() >> (8 * i)) & 0xff);
  const std::string dir = path("bf16");
  fs::create_directories(dir);
  write_text(dir + "/config.json", config_to_json(c).dump());
  write_text(dir + "/model.safetensors", bytes + header + data);
  auto r = load_checkpoint(dir, false);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(bit_identical(r->params, expect));
}

// ---- strict loading ---------------------------------------------------------------------------

TEST_F(Checkpoint, ShapeMismatchNamesFileTensorAndShapes) {
  const CheckpointData ck = make_checkpoint(tiny_config(3), 5, false);
  auto tensors = tensors_of(ck);
  std::vector<float> wrong(17, 1.0f);
  for (auto& t : tensors)
    if (t.name == "model.norm.weight") t.shape = {17}, t.data = wrong.data();
  const std::string dir = manual_checkpoint("shape", config_to_json(ck.config), tensors);
  expect_load_error(
      dir, {dir + "/model.safetensors", "tensor 'model.norm.weight'", "shape [17] does not match config [16]"});
}

TEST_F(Checkpoint, TransposedMatrixRejected) {
  const CheckpointData ck = make_checkpoint(tiny_config(3), 5, false);
  auto tensors = tensors_of(ck);
  for (auto& t : tensors)
    if (t.name == "model.layers.0.mlp.up_proj.weight") t.shape = {16, 24};
  const std::string dir = manual_checkpoint("transposed", config_to_json(ck.config), tensors);
  expect_load_error(dir, {"'model.layers.0.mlp.up_proj.weight'", "shape [16, 24] does not match config [24, 16]"});
}

TEST_F(Checkpoint, UnsupportedDtypeRejected) {
  const CheckpointData ck = make_checkpoint(tiny_config(0), 6, false);
  const std::string dir = path("dtype");
  ASSERT_TRUE(save_checkpoint(dir, ck).ok());
  // Rewrite the F32 tensor model.norm.weight [16] as I32 [16] in place: same byte size.
  const std::string file = dir + "/model.safetensors";
  std::string bytes = test::read_file(file);
  const std::string needle = R"("model.norm.weight":{"data_offsets":)";
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  const size_t dt = bytes.find("\"dtype\":\"F32\"", at);
  ASSERT_NE(dt, std::string::npos);
  bytes.replace(dt, 13, "\"dtype\":\"I32\"");
  write_text(file, bytes);
  expect_load_error(dir, {file, "'model.norm.weight'", "dtype I32"});
}

TEST_F(Checkpoint, MissingTensorRejected) {
  const CheckpointData ck = make_checkpoint(tiny_config(3), 7, false);
  auto tensors = tensors_of(ck);
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                               [](const NamedTensor& t) { return t.name == "model.layers.1.self_attn.v_proj.weight"; }),
                tensors.end());
  const std::string dir = manual_checkpoint("missing", config_to_json(ck.config), tensors);
  expect_load_error(dir, {"model.safetensors", "'model.layers.1.self_attn.v_proj.weight'", "missing"});
}

TEST_F(Checkpoint, NaNWeightRejected) {
  CheckpointData ck = make_checkpoint(tiny_config(3), 8, false);
  const auto specs = param_specs(ck.config);
  const ParamSpec* s = find_param(specs, "free.post_sampler.weight");
  ASSERT_NE(s, nullptr);
  std::vector<float> bad(ck.params.begin() + s->offset, ck.params.begin() + s->offset + s->numel);
  bad[5] = std::nanf("");
  auto tensors = tensors_of(ck);
  for (auto& t : tensors)
    if (t.name == s->name) t.data = bad.data();
  const std::string dir = manual_checkpoint("nan", config_to_json(ck.config), tensors);
  expect_load_error(dir, {"'free.post_sampler.weight'", "NaN", "element 5"});
  bad[5] = -INFINITY;
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors", tensors).ok());
  expect_load_error(dir, {"'free.post_sampler.weight'", "Inf"});
}

TEST_F(Checkpoint, SaveRefusesNonFiniteOrMissizedArenas) {
  CheckpointData ck = make_checkpoint(tiny_config(3), 9, true);
  ck.adam_v[3] = std::nanf("");
  auto st = save_checkpoint(path("refuse"), ck);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("NaN"), std::string::npos) << st.error().message;
  ck = make_checkpoint(tiny_config(3), 9, false);
  ck.params.pop_back();
  ASSERT_FALSE(save_checkpoint(path("refuse"), ck).ok());
  EXPECT_FALSE(fs::exists(path("refuse")));
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(Checkpoint, UnknownExtraTensorRejectedButInvFreqIgnored) {
  const CheckpointData ck = make_checkpoint(tiny_config(0), 10, false);
  std::vector<float> extra(4, 0.5f);
  auto tensors = tensors_of(ck);
  tensors.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {4}, extra.data()});
  const std::string ok_dir = manual_checkpoint("invfreq", config_to_json(ck.config), tensors);
  auto r = load_checkpoint(ok_dir, false);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(bit_identical(r->params, ck.params));
  tensors.push_back({"model.layers.0.self_attn.q_proj.bias", {16}, ck.params.data()});
  const std::string bad_dir = manual_checkpoint("extra", config_to_json(ck.config), tensors);
  expect_load_error(bad_dir, {"model.safetensors", "unexpected tensor 'model.layers.0.self_attn.q_proj.bias'"});
}

TEST_F(Checkpoint, LmHeadMustMatchTieWordEmbeddings) {
  const CheckpointData untied = make_checkpoint(tiny_config(0, false), 12, false);
  json tied_cfg = config_to_json(untied.config);
  tied_cfg["tie_word_embeddings"] = true;
  const std::string d1 = manual_checkpoint("tied_with_head", tied_cfg, tensors_of(untied));
  expect_load_error(d1, {"'lm_head.weight'", "tie_word_embeddings true"});
  const CheckpointData tied = make_checkpoint(tiny_config(0, true), 13, false);
  json untied_cfg = config_to_json(tied.config);
  untied_cfg["tie_word_embeddings"] = false;
  const std::string d2 = manual_checkpoint("untied_no_head", untied_cfg, tensors_of(tied));
  expect_load_error(d2, {"'lm_head.weight'", "missing", "tie_word_embeddings false"});
}

TEST_F(Checkpoint, FreeTransformerKeyAndTensorsMustAgree) {
  const CheckpointData ft = make_checkpoint(tiny_config(3), 14, false);
  json no_key = config_to_json(ft.config);
  no_key.erase("free_transformer");
  const std::string d1 = manual_checkpoint("free_tensors_no_key", no_key, tensors_of(ft));
  expect_load_error(d1, {"unexpected tensor 'free.", "no free_transformer"});
  const CheckpointData base = make_checkpoint(tiny_config(0), 15, false);
  json with_key = config_to_json(base.config);
  with_key["free_transformer"] = {{"latent_bits", 3}, {"inject_after_layer", 1}};
  const std::string d2 = manual_checkpoint("key_no_free_tensors", with_key, tensors_of(base));
  expect_load_error(d2, {"'free.", "missing", "free_transformer"});
}

TEST_F(Checkpoint, TruncatedModelFileNamed) {
  const std::string dir = path("trunc");
  ASSERT_TRUE(save_checkpoint(dir, make_checkpoint(tiny_config(3), 16, false)).ok());
  const std::string file = dir + "/model.safetensors";
  fs::resize_file(file, fs::file_size(file) - 10);
  expect_load_error(dir, {file, "truncated"});
}

TEST_F(Checkpoint, TrainingStateProblemsNamed) {
  const CheckpointData ck = make_checkpoint(tiny_config(3), 17, true);
  const std::string dir = path("state");
  ASSERT_TRUE(save_checkpoint(dir, ck).ok());
  fs::remove(dir + "/trainer.json");
  expect_load_error(dir, {"trainer.json"}, true);
  write_text(dir + "/trainer.json", "[1, 2]");
  expect_load_error(dir, {"trainer.json", "object"}, true);
  write_text(dir + "/trainer.json", R"({"step": 1, "step": 2})");
  expect_load_error(dir, {"trainer.json", "duplicate"}, true);
  std::vector<float> m(ck.adam_m.size(), 0.0f);  // moments file without adam_v.*
  std::vector<NamedTensor> only_m;
  for (const auto& s : param_specs(ck.config)) only_m.push_back({"adam_m." + s.name, s.shape, m.data() + s.offset});
  ASSERT_TRUE(write_safetensors(dir + "/training_state.safetensors", only_m).ok());
  write_text(dir + "/trainer.json", "{}");
  expect_load_error(dir, {"training_state.safetensors", "'adam_v.model.embed_tokens.weight'", "missing"}, true);
}

TEST_F(Checkpoint, MissingDirectoryOrFilesNamed) {
  expect_load_error(path("nowhere"), {"nowhere/config.json"});
  const std::string dir = path("no_model");
  fs::create_directories(dir);
  write_text(dir + "/config.json", config_to_json(tiny_config(0)).dump());
  expect_load_error(dir, {dir, "model.safetensors"});
}

// Interop: checkpoints written by an independent writer (tests/fixtures/make_golden.py, Python
// struct.pack + json.dumps) load, and every tensor lands at its param_specs offset.
TEST_F(Checkpoint, LoadsIndependentlyWrittenGoldenCheckpoints) {
  const std::string golden = std::string(FTX_FIXTURE_DIR) + "/golden";
  if (!fs::exists(golden + "/free/config.json")) GTEST_SKIP() << "no golden fixtures at " << golden;
  for (const char* name : {"free", "baseline"}) {
    const std::string dir = golden + "/" + name;
    auto r = load_checkpoint(dir, false);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->config.is_free(), std::string(name) == "free");
    auto f = SafetensorsFile::open(dir + "/model.safetensors");
    ASSERT_TRUE(f.ok()) << f.error().message;
    const auto specs = param_specs(r->config);
    ASSERT_EQ(f->tensors().size(), specs.size());
    for (const auto& s : specs) {
      auto t = f->read_f32(s.name);
      ASSERT_TRUE(t.ok()) << t.error().message;
      EXPECT_EQ(std::memcmp(t->data(), r->params.data() + s.offset, size_t(s.numel) * 4), 0) << s.name;
    }
  }
}

// ---- disk full during save --------------------------------------------------------------------

// The save runs in a forked child with a file size limit, so write() fails with EFBIG. The error
// must name the file, the previous checkpoint must load bit-identically, and no temp dir remains.
TEST_F(Checkpoint, DiskFullDuringSaveKeepsPreviousCheckpoint) {
  const std::string dir = path("ck");
  const CheckpointData previous = make_checkpoint(tiny_config(3), 100, true);
  ASSERT_TRUE(save_checkpoint(dir, previous).ok());
  const CheckpointData next = make_checkpoint(tiny_config(3), 200, true);
  ASSERT_GT(next.params.size() * 4, 8192u);
  const test::LimitedRun child = test::run_with_file_size_limit(8192, [&] { return save_checkpoint(dir, next); });
  ASSERT_TRUE(child.reaped);
  ASSERT_TRUE(WIFEXITED(child.status));
  const std::string& msg = child.msg;
  EXPECT_EQ(WEXITSTATUS(child.status), 0) << "save must fail under RLIMIT_FSIZE; got: " << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_TRUE(leftovers().empty()) << leftovers()[0];

  auto r = load_checkpoint(dir, true);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(bit_identical(r->params, previous.params));
  EXPECT_TRUE(bit_identical(r->adam_m, previous.adam_m));
  EXPECT_TRUE(bit_identical(r->adam_v, previous.adam_v));
  EXPECT_EQ(r->trainer, previous.trainer);
}

// ---- sharded checkpoints ----------------------------------------------------------------------

class CheckpointSharded : public Checkpoint {
 protected:
  // Writes ck as two shards + index (first half of the specs in shard 1) and returns the dir.
  std::string write_sharded(const std::string& name, const CheckpointData& ck) {
    const std::string dir = path(name);
    fs::create_directories(dir);
    write_text(dir + "/config.json", config_to_json(ck.config).dump(2));
    const auto all = tensors_of(ck);
    const size_t half = all.size() / 2;
    const std::vector<NamedTensor> a(all.begin(), all.begin() + long(half)), b(all.begin() + long(half), all.end());
    const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
    EXPECT_TRUE(write_safetensors(dir + "/" + s1, a, {{"format", "pt"}}).ok());
    EXPECT_TRUE(write_safetensors(dir + "/" + s2, b, {{"format", "pt"}}).ok());
    index_ = {{"metadata", {{"total_size", ck.params.size() * 4}}}, {"weight_map", json::object()}};
    for (const auto& t : a) index_["weight_map"][t.name] = s1;
    for (const auto& t : b) index_["weight_map"][t.name] = s2;
    write_text(dir + "/model.safetensors.index.json", index_.dump(2));
    return dir;
  }
  json index_;
};

TEST_F(CheckpointSharded, LoadsLikeSingleFile) {
  const CheckpointData ck = make_checkpoint(tiny_config(3), 300, false);
  const std::string dir = write_sharded("sharded", ck);
  auto r = load_checkpoint(dir, false);
  ASSERT_TRUE(r.ok()) << r.error().message;
  expect_same_config(r->config, ck.config);
  EXPECT_TRUE(bit_identical(r->params, ck.params));
}

TEST_F(CheckpointSharded, ShardNameWithPathRejected) {
  const CheckpointData ck = make_checkpoint(tiny_config(0), 301, false);
  const std::string dir = write_sharded("escape", ck);
  for (const char* bad : {"../model-00001-of-00002.safetensors", "sub/model.safetensors", "..", "/etc/passwd"}) {
    json idx = index_;
    idx["weight_map"]["model.norm.weight"] = bad;
    write_text(dir + "/model.safetensors.index.json", idx.dump());
    expect_load_error(dir, {"model.safetensors.index.json", "plain file name"});
  }
}

TEST_F(CheckpointSharded, IndexInconsistenciesRejected) {
  const CheckpointData ck = make_checkpoint(tiny_config(0), 302, false);
  const std::string dir = write_sharded("inconsistent", ck);
  const std::string first = index_["weight_map"]["model.embed_tokens.weight"];
  json idx = index_;  // mapped to the wrong shard: it appears in a shard the index does not name
  idx["weight_map"]["model.embed_tokens.weight"] = "model-00002-of-00002.safetensors";
  write_text(dir + "/model.safetensors.index.json", idx.dump());
  expect_load_error(dir, {"'model.embed_tokens.weight'", "maps it to"});
  idx = index_;  // a tensor the index does not list
  idx["weight_map"].erase("model.norm.weight");
  write_text(dir + "/model.safetensors.index.json", idx.dump());
  expect_load_error(dir, {"'model.norm.weight'", "not listed"});
  idx = index_;  // a listed tensor its shard lacks
  idx["weight_map"]["model.layers.9.mlp.up_proj.weight"] = first;
  write_text(dir + "/model.safetensors.index.json", idx.dump());
  expect_load_error(dir, {"'model.layers.9.mlp.up_proj.weight'", "lacks"});
  idx = index_;
  idx["metadata"]["total_size"] = 12;
  write_text(dir + "/model.safetensors.index.json", idx.dump());
  expect_load_error(dir, {"total_size"});
  write_text(dir + "/model.safetensors.index.json", R"({"weight_map": {"a": "x", "a": "y"}})");
  expect_load_error(dir, {"model.safetensors.index.json", "duplicate"});
  idx = index_;
  idx["weight_map"]["model.norm.weight"] = "model-00003-of-00003.safetensors";
  write_text(dir + "/model.safetensors.index.json", idx.dump());
  expect_load_error(dir, {"model-00003-of-00003.safetensors"});
}

// A checkpoint without a tokenizer holds token ids only: config.json has no "tokenizer" and it
// loads with none. One whose tokenizer has more tokens than vocab_size is never written.
TEST_F(Checkpoint, TokenizerIsOptionalAndNeverWiderThanTheVocabulary) {
  CheckpointData ck = make_checkpoint(tiny_config(0), 5, false);
  ck.tokenizer = nullptr;
  const std::string dir = path("ids");
  ASSERT_TRUE(save_checkpoint(dir, ck).ok());
  EXPECT_FALSE(read_json(dir + "/config.json").contains("tokenizer"));
  auto r = load_checkpoint(dir, false);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->tokenizer);
  EXPECT_TRUE(bit_identical(r->params, ck.params));

  ck.tokenizer = std::make_shared<CharTokenizer>(std::string(kSyntheticAlphabet) + "a");
  Status st = save_checkpoint(path("wide"), ck);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("30 tokens, more than the model's vocab_size 29"), std::string::npos)
      << st.error().message;
  EXPECT_FALSE(fs::exists(path("wide")));
}

// ---- config.json ------------------------------------------------------------------------------

class CheckpointConfig : public ::testing::Test {
 protected:
  // Expects config_from_json(j) to fail with every string of `words` in the message.
  static void expect_bad(const json& j, const std::vector<std::string>& words) {
    auto r = config_from_json(j, "/x/config.json");
    ASSERT_FALSE(r.ok()) << "accepted: " << j.dump();
    for (const auto& w : words)
      EXPECT_NE(r.error().message.find(w), std::string::npos) << "expected '" << w << "' in: " << r.error().message;
    EXPECT_EQ(r.error().message.rfind("/x/config.json: ", 0), 0u) << r.error().message;
  }
  json base_ = config_to_json(tiny_config(3), &kSynthetic);
};

TEST_F(CheckpointConfig, RoundTripAndShortFloats) {
  const ModelConfig c = tiny_config(3);
  auto r = config_from_json(config_to_json(c), "c.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  expect_same_config(*r, c);
  const std::string text = config_to_json(c).dump();
  EXPECT_NE(text.find("\"rms_norm_eps\":1e-06"), std::string::npos) << text;
  EXPECT_NE(text.find("\"torch_dtype\":\"float32\""), std::string::npos);
  EXPECT_NE(text.find("\"model_type\":\"llama\""), std::string::npos);
  ModelConfig odd = c;
  odd.rms_norm_eps = 1.234567e-5f, odd.rope_theta = 500000.0f;
  auto r2 = config_from_json(json::parse(config_to_json(odd).dump()), "c.json");
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->rms_norm_eps, odd.rms_norm_eps);
  EXPECT_EQ(r2->rope_theta, odd.rope_theta);
}

// A tokenizer may use fewer ids than the embedding has rows (a padded vocabulary), never more.
TEST_F(CheckpointConfig, TokenizerSmallerThanTheVocabularyIsAccepted) {
  json j = base_;
  j["tokenizer"]["alphabet"] = "abc";
  std::shared_ptr<const Tokenizer> tokenizer;
  auto r = config_from_json(j, "c.json", &tokenizer);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->vocab_size, 29);
  ASSERT_TRUE(tokenizer);
  EXPECT_EQ(tokenizer->vocab_size(), 3);
  EXPECT_EQ(tokenizer->fingerprint(), CharTokenizer("abc").fingerprint());
}

TEST_F(CheckpointConfig, HuggingFaceDefaultsAndV5RopeParameters) {
  json j = base_;
  j.erase("head_dim");
  j.erase("num_key_value_heads");
  j.erase("rope_theta");
  j.erase("tokenizer");
  j.erase("free_transformer");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  j["dtype"] = "bfloat16";
  j["bos_token_id"] = 1;
  j["eos_token_id"] = json::array({2, 3});
  std::shared_ptr<const Tokenizer> tokenizer = kSynthetic.clone();
  auto r = config_from_json(j, "c.json", &tokenizer);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(tokenizer) << "no \"tokenizer\": token ids only";
  EXPECT_EQ(r->head_dim, 8);
  EXPECT_EQ(r->n_kv_heads, 2);
  EXPECT_EQ(r->rope_theta, 500000.0f);
  EXPECT_EQ(r->latent_bits, 0);
  j.erase("rope_parameters");
  auto r2 = config_from_json(j, "c.json");
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->rope_theta, 10000.0f);  // Hugging Face default
}

TEST_F(CheckpointConfig, MissingKey) {
  json j = base_;
  j.erase("hidden_size");
  expect_bad(j, {"key 'hidden_size'", "missing"});
  j = base_;
  j["free_transformer"].erase("inject_after_layer");
  expect_bad(j, {"key 'free_transformer.inject_after_layer'", "missing"});
}

TEST_F(CheckpointConfig, WrongType) {
  json j = base_;
  j["hidden_size"] = "16";
  expect_bad(j, {"key 'hidden_size'", "integer"});
  j = base_;
  j["num_hidden_layers"] = 2.0;
  expect_bad(j, {"key 'num_hidden_layers'", "integer"});
  j = base_;
  j["tie_word_embeddings"] = 1;
  expect_bad(j, {"key 'tie_word_embeddings'", "true or false"});
  j = base_;
  j["rms_norm_eps"] = "1e-6";
  expect_bad(j, {"key 'rms_norm_eps'", "number"});
  j = base_;
  j["free_transformer"] = 3;
  expect_bad(j, {"key 'free_transformer'", "object"});
  expect_bad(json::array(), {"object"});
}

TEST_F(CheckpointConfig, LatentBitsOutsideRange) {
  for (int h : {21, -1, 1000}) {
    json j = base_;
    j["free_transformer"]["latent_bits"] = h;
    expect_bad(j, {"key 'free_transformer.latent_bits'", "0..20", std::to_string(h)});
  }
  json j = base_;
  j["free_transformer"]["latent_bits"] = 20;
  j["free_transformer"]["inject_after_layer"] = 2;  // == n_layers: no block left after injection
  expect_bad(j, {"inject_after_layer"});
}

TEST_F(CheckpointConfig, RangesAndUnsupportedFeatures) {
  json j = base_;
  j["vocab_size"] = 0;
  expect_bad(j, {"key 'vocab_size'"});
  j = base_;
  j["hidden_size"] = 18446744073709551615ull;
  expect_bad(j, {"key 'hidden_size'", "must be in"});
  j = base_;
  j["rms_norm_eps"] = -1e-6;
  expect_bad(j, {"key 'rms_norm_eps'"});
  j = base_;
  j["num_key_value_heads"] = 3;  // 2 heads not a multiple of 3
  expect_bad(j, {"n_kv_heads"});
  j = base_;
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0}};  // llama3 is read (test_hf_checkpoint)
  expect_bad(j, {"rope_scaling.rope_type", "not supported"});
  j = base_;
  j["mlp_bias"] = true;  // attention_bias is read (test_hf_checkpoint)
  expect_bad(j, {"mlp_bias"});
  j = base_;
  j["hidden_act"] = "gelu";
  expect_bad(j, {"hidden_act"});
  j = base_;
  j["tokenizer"] = {{"type", "words"}};
  expect_bad(j, {"tokenizer.type"});
  j = base_;
  j["tokenizer"]["alphabet"] = std::string(kSyntheticAlphabet) + "a";  // 30 characters, vocab 29
  expect_bad(j, {"the tokenizer has 30 tokens, more than the model's vocab_size 29"});
  j = base_;
  j["rope_parameters"] = {{"rope_theta", 5.0}};  // conflicts with the top-level 10000
  expect_bad(j, {"rope_theta", "conflicts"});
}

TEST_F(CheckpointConfig, ConfigFileErrorsNamePath) {
  const std::string tmpl = test::make_temp_dir("ftx_cfg_");
  ASSERT_FALSE(tmpl.empty());
  const std::string file = tmpl + "/config.json";
  std::ofstream(file) << R"({"vocab_size": 29, "vocab_size": 30})";
  auto dup = load_checkpoint_config(tmpl);
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.error().message.find(file), std::string::npos);
  EXPECT_NE(dup.error().message.find("duplicate"), std::string::npos) << dup.error().message;
  std::ofstream(file) << R"({"vocab_size": )";
  auto bad = load_checkpoint_config(tmpl);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("invalid JSON"), std::string::npos) << bad.error().message;
  EXPECT_EQ(bad.error().message.find('\n'), std::string::npos);
  test::remove_tree(tmpl);
}

}  // namespace
}  // namespace ftx
