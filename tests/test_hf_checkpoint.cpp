// Tests of core/io/hf_checkpoint (Hugging Face-layout directories, memory-mapped) and of the
// config.json dialects core/io/config_json reads for it: transformers 4 and 5 spellings giving one
// ModelConfig, llama3 RoPE scaling, the three architectures and their biases, one-line refusals of
// what the model does not compute; shards and their index (a missing shard, a tensor in two
// shards, a truncated shard), shapes against config.json, values checked only by check_finite,
// F16 converted exactly, alignment, the side files (generation config, chat template), our own
// checkpoints opened through the same reader and giving the same logits, an 8B-shaped sparse
// checkpoint opened from its headers alone, and the tiny checkpoints transformers wrote
// (tests/fixtures/real/tiny_*, skipped while absent); the fuzz target's seeds are valid inputs of
// their modes and every input it crashed on (tests/fixtures/fuzz/safetensors) replays cleanly.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/io/config_json.h"
#include "core/io/hf_checkpoint.h"
#include "core/io/safetensors.h"
#include "core/model/model.h"
#include "core/model/params.h"
#include "core/text/char_tokenizer.h"
#include "kernels/backend.h"
#include "kernels/cpu/isa.h"
#include "tests/test_util.h"

// The fuzz target itself, so that the inputs it crashed on replay here through the very same
// checks (it aborts on any disagreement); LLVMFuzzerTestOneInput is an ordinary function here.
#include "tests/fuzz/fuzz_safetensors.cpp"

namespace ftx {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- writing checkpoints byte by byte -------------------------------------------------------------

struct RawTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F16", "I8", ...
  std::vector<int64_t> shape;
  std::string bytes;  // little-endian elements
};

// An f16 bit pattern's value, decoded here with ldexp (subnormals included).
float f16_value(uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const float mag = e == 0 ? std::ldexp(float(m), -24) : std::ldexp(1.0f + float(m) / 1024.0f, e - 15);
  return (h & 0x8000) ? -mag : mag;
}

int dtype_bytes(const std::string& d) { return d == "F32" ? 4 : (d == "BF16" || d == "F16") ? 2 : 1; }

// The header of `tensors` laid out back to back; its length N padded with spaces so that the data
// buffer starts at 8 + N = `data_align` (mod 8): 0 as every writer does, odd to misalign all data.
std::string header_for(const std::vector<RawTensor>& tensors, const std::vector<uint64_t>& sizes, int data_align) {
  json h = json::object();
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t at = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    h[tensors[i].name] = {
        {"dtype", tensors[i].dtype}, {"shape", tensors[i].shape}, {"data_offsets", {at, at + sizes[i]}}};
    at += sizes[i];
  }
  std::string text = h.dump();
  while ((8 + text.size()) % 8 != size_t(data_align)) text += ' ';
  return text;
}

std::string prefix_for(const std::string& header) {
  std::string p(8, '\0');
  for (int i = 0; i < 8; ++i) p[i] = char(uint64_t(header.size()) >> (8 * i));
  return p;
}

void write_safetensors_raw(const std::string& path, const std::vector<RawTensor>& tensors, int data_align = 0) {
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.bytes.size());
  const std::string header = header_for(tensors, sizes, data_align);
  std::string file = prefix_for(header) + header;
  for (const auto& t : tensors) file += t.bytes;
  ASSERT_TRUE(test::write_file(path, file)) << path;
}

// A file whose data buffer is a hole: the header, then ftruncate to the full size (sparse).
void write_safetensors_sparse(const std::string& path, const std::vector<RawTensor>& tensors) {
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const auto& t : tensors) {
    uint64_t n = uint64_t(dtype_bytes(t.dtype));
    for (int64_t d : t.shape) n *= uint64_t(d);
    sizes.push_back(n);
    total += n;
  }
  const std::string header = header_for(tensors, sizes, 0);
  ASSERT_TRUE(test::write_file(path, prefix_for(header) + header));
  ASSERT_EQ(::truncate(path.c_str(), off_t(8 + header.size() + total)), 0) << path << ": " << std::strerror(errno);
}

void write_json(const std::string& path, const json& j) { ASSERT_TRUE(test::write_file(path, j.dump(2))); }

// Random values in `dtype`, stored as the file holds them; `values` gets them exactly as fp32,
// decoded here independently of the reader (bits for BF16, ldexp for F16).
std::string random_bytes(const std::string& dtype, int64_t n, std::mt19937& rng, std::vector<float>* values) {
  std::string out;
  std::uniform_int_distribution<uint32_t> bits;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t r = bits(rng);
    float v = 0;
    if (dtype == "F32") {
      v = std::ldexp(float(r % 20001) - 10000.0f, -14);  // |v| < 0.62, many mantissa bits
      out.append(reinterpret_cast<const char*>(&v), 4);
    } else if (dtype == "BF16") {
      const uint16_t b = uint16_t((r & 0x8000u) | ((121u + r % 8u) << 7) | ((r >> 8) & 0x7Fu));
      const uint32_t u = uint32_t(b) << 16;
      std::memcpy(&v, &u, 4);
      out.append(reinterpret_cast<const char*>(&b), 2);
    } else {  // F16: exponent 10..17 (values in [2^-5, 8)), any mantissa
      const uint16_t h = uint16_t((r & 0x8000u) | ((10u + r % 8u) << 10) | ((r >> 8) & 0x3FFu));
      v = f16_value(h);
      out.append(reinterpret_cast<const char*>(&h), 2);
    }
    values->push_back(v);
  }
  return out;
}

// Every tensor of param_specs(c) in `dtype`, random; values[name] as fp32.
std::vector<RawTensor> model_tensors(const ModelConfig& c, const std::string& dtype, uint32_t seed,
                                     std::map<std::string, std::vector<float>>* values = nullptr) {
  std::mt19937 rng(seed);
  std::vector<RawTensor> out;
  for (const ParamSpec& s : param_specs(c)) {
    std::vector<float> v;
    out.push_back(RawTensor{s.name, dtype, s.shape, random_bytes(dtype, s.numel, rng, &v)});
    if (values) (*values)[s.name] = std::move(v);
  }
  return out;
}

RawTensor* find_raw(std::vector<RawTensor>& ts, const std::string& name) {
  for (auto& t : ts)
    if (t.name == name) return &t;
  return nullptr;
}

// model-0000i-of-0000n.safetensors, tensors dealt in order, and the index over them.
void write_sharded(const std::string& dir, const std::vector<RawTensor>& ts, int n) {
  json wm = json::object();
  uint64_t total = 0;
  for (int i = 0; i < n; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i + 1, n);
    std::vector<RawTensor> part;
    for (size_t k = size_t(i) * ts.size() / n; k < size_t(i + 1) * ts.size() / n; ++k) {
      part.push_back(ts[k]);
      wm[ts[k].name] = name;
      total += ts[k].bytes.size();
    }
    write_safetensors_raw(dir + "/" + name, part);
  }
  write_json(dir + "/model.safetensors.index.json", {{"metadata", {{"total_size", total}}}, {"weight_map", wm}});
}

ModelConfig tiny_config(int latent_bits = 0, bool tied = false) {
  ModelConfig c;
  c.vocab_size = 29, c.dim = 16, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 4;
  c.ffn_hidden = 24, c.max_seq_len = 32, c.rms_norm_eps = 1e-5f, c.rope_theta = 10000.0f;
  c.tie_embeddings = tied, c.latent_bits = latent_bits, c.inject_after = 1;
  return c;
}

bool has(const std::string& message, const std::string& part) { return message.find(part) != std::string::npos; }

// ---- config.json dialects -----------------------------------------------------------------------------

// Llama-3.2-1B's config.json as transformers 4 writes it (docs/reference_formats.md, section B).
json llama32_1b_v4() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072,
    "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

// The same model as transformers 5 writes it: rope_parameters, dtype.
json llama32_1b_v5() {
  json j = llama32_1b_v4();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j.erase("torch_dtype");
  j["dtype"] = "bfloat16";
  j["rope_parameters"] = {{"factor", 32.0},         {"high_freq_factor", 4.0},
                          {"low_freq_factor", 1.0}, {"original_max_position_embeddings", 8192},
                          {"rope_theta", 500000.0}, {"rope_type", "llama3"}};
  j["transformers_version"] = "5.0.0";
  return j;
}

void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(config_to_json(a), config_to_json(b));
  EXPECT_EQ(a.rope_scaling, b.rope_scaling);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.o_bias, b.o_bias);
  EXPECT_EQ(a.architecture, b.architecture);
}

TEST(HfConfig, TransformersV4AndV5FormsGiveTheSameConfig) {
  auto v4 = config_from_json(llama32_1b_v4(), "v4/config.json");
  auto v5 = config_from_json(llama32_1b_v5(), "v5/config.json");
  ASSERT_TRUE(v4.ok()) << v4.error().message;
  ASSERT_TRUE(v5.ok()) << v5.error().message;
  expect_same(*v4, *v5);
  EXPECT_EQ(v4->architecture, "llama");
  EXPECT_EQ(v4->n_heads, 32);
  EXPECT_EQ(v4->n_kv_heads, 8);
  EXPECT_EQ(v4->head_dim, 64);
  EXPECT_EQ(v4->rope_theta, 500000.0f);
  EXPECT_TRUE(v4->tie_embeddings);
  EXPECT_FALSE(v4->qkv_bias || v4->o_bias);
  const RopeScaling& s = v4->rope_scaling;
  EXPECT_EQ(s.kind, RopeScalingKind::Llama3);
  EXPECT_EQ(s.factor, 32.0f);
  EXPECT_EQ(s.low_freq_factor, 1.0f);
  EXPECT_EQ(s.high_freq_factor, 4.0f);
  EXPECT_EQ(s.original_max_position, 8192);

  // The legacy spelling "type" reads the same; a "default" type is plain RoPE.
  json legacy = llama32_1b_v4();
  legacy["rope_scaling"].erase("rope_type");
  legacy["rope_scaling"]["type"] = "llama3";
  auto l = config_from_json(legacy, "legacy/config.json");
  ASSERT_TRUE(l.ok()) << l.error().message;
  expect_same(*l, *v4);
  json plain = llama32_1b_v5();
  plain["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  auto p = config_from_json(plain, "plain/config.json");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->rope_scaling.kind, RopeScalingKind::None);
}

// Llama-3.2-1B's llama3 rope scaling (factor 32, low 1, high 4, original 8192) keeps 15 of the 32
// frequencies, divides 14 by the factor and blends 3 (docs/reference_formats.md, section B).
TEST(HfConfig, Llama3ScalingKeepsDividesAndBlendsTheDocumentedFrequencies) {
  auto c = config_from_json(llama32_1b_v4(), "config.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  const std::vector<float> scaled = rope_inv_freq(*c);
  ModelConfig plain_cfg = *c;
  plain_cfg.rope_scaling = RopeScaling{};
  const std::vector<float> plain = rope_inv_freq(plain_cfg);
  ASSERT_EQ(scaled.size(), 32u);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < scaled.size(); ++i) {
    const double r = double(plain[i]) / double(scaled[i]);
    if (std::fabs(r - 1) < 1e-6)
      ++kept;
    else if (std::fabs(r - 32) < 32e-6)
      ++divided;
    else if (r > 1 && r < 32)
      ++blended;
  }
  EXPECT_EQ(kept, 15);
  EXPECT_EQ(divided, 14);
  EXPECT_EQ(blended, 3);
}

json mistral_v5() {
  return json::parse(R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 64,
    "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 4, "hidden_act": "silu", "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    "sliding_window": null, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
    "dtype": "bfloat16"})");
}

json qwen2_v5() {
  return json::parse(R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 64,
    "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "hidden_act": "silu", "max_position_embeddings": 32768, "max_window_layers": 28,
    "layer_types": ["full_attention", "full_attention"], "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_window": null,
    "use_sliding_window": false, "tie_word_embeddings": true, "bos_token_id": null, "eos_token_id": null})");
}

TEST(HfConfig, ArchitecturesTheirBiasesAndTransformersDefaults) {
  auto m = config_from_json(mistral_v5(), "m/config.json");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->architecture, "mistral");
  EXPECT_FALSE(m->qkv_bias || m->o_bias);
  EXPECT_EQ(m->rope_theta, 1e6f);
  json mj = mistral_v5();
  mj.erase("num_key_value_heads");  // MistralConfig's default: 8
  mj.erase("sliding_window");       // absent: taken as null
  mj["num_attention_heads"] = 16;
  mj.erase("head_dim");  // hidden / heads = 1: odd, so give it
  mj["head_dim"] = 4;
  auto m8 = config_from_json(mj, "m/config.json");
  ASSERT_TRUE(m8.ok()) << m8.error().message;
  EXPECT_EQ(m8->n_kv_heads, 8);
  mj["num_key_value_heads"] = nullptr;  // null: num_attention_heads
  auto m16 = config_from_json(mj, "m/config.json");
  ASSERT_TRUE(m16.ok()) << m16.error().message;
  EXPECT_EQ(m16->n_kv_heads, 16);

  json qj = qwen2_v5();
  auto q = config_from_json(qj, "q/config.json");
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->architecture, "qwen2");
  EXPECT_TRUE(q->qkv_bias);
  EXPECT_FALSE(q->o_bias);
  EXPECT_TRUE(q->tie_embeddings);
  EXPECT_EQ(q->head_dim, 4);    // hidden / heads
  qj["sliding_window"] = 4096;  // meaningless while use_sliding_window is false
  qj.erase("layer_types");
  qj.erase("tie_word_embeddings");
  auto q2 = config_from_json(qj, "q/config.json");
  ASSERT_TRUE(q2.ok()) << q2.error().message;
  EXPECT_FALSE(q2->tie_embeddings);  // Qwen2Config's default

  json lj = config_to_json(tiny_config());
  lj["attention_bias"] = true;
  lj.erase("num_key_value_heads");
  auto l = config_from_json(lj, "l/config.json");
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_TRUE(l->qkv_bias && l->o_bias);  // Llama's attention_bias also biases o_proj
  EXPECT_EQ(l->n_kv_heads, l->n_heads);
  lj.erase("model_type");  // hand-written configs: llama
  auto l2 = config_from_json(lj, "l/config.json");
  ASSERT_TRUE(l2.ok()) << l2.error().message;
  EXPECT_EQ(l2->architecture, "llama");
}

// config_from_json(config_to_json(c)) == c for the new fields.
TEST(HfConfig, RoundTripOfArchitectureScalingAndBiases) {
  std::vector<ModelConfig> configs;
  ModelConfig c = tiny_config();
  c.rope_scaling = RopeScaling{RopeScalingKind::Llama3, 8.0f, 1.0f, 4.0f, 64, {}};
  configs.push_back(c);
  c.qkv_bias = c.o_bias = true;
  configs.push_back(c);
  c = tiny_config(3);
  c.rope_scaling.kind = RopeScalingKind::Divisors;
  c.rope_scaling.divisors = {1.0f, 2.5f};
  configs.push_back(c);
  c = tiny_config();
  c.architecture = "mistral";
  configs.push_back(c);
  c.architecture = "qwen2", c.qkv_bias = true, c.tie_embeddings = true;
  configs.push_back(c);
  for (const ModelConfig& want : configs) {
    const json j = json::parse(config_to_json(want).dump());
    auto got = config_from_json(j, "c.json");
    ASSERT_TRUE(got.ok()) << got.error().message << "\n" << j.dump();
    expect_same(*got, want);
  }
  EXPECT_EQ(config_to_json(configs[0])["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(config_to_json(configs[1])["attention_bias"], true);
  EXPECT_EQ(config_to_json(configs[3])["model_type"], "mistral");
  EXPECT_TRUE(config_to_json(configs[3])["sliding_window"].is_null());
  EXPECT_EQ(config_to_json(configs[4])["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_FALSE(config_to_json(tiny_config()).contains("rope_scaling"));
}

// Each refusal is one line "PATH: ..." naming the feature.
TEST(HfConfig, UnsupportedFeaturesAreRefusedInOneLine) {
  struct Case {
    json j;
    std::vector<std::string> words;
  };
  auto with = [](json j, const std::string& key, const json& v) {
    j[key] = v;
    return j;
  };
  json rope_yarn = llama32_1b_v5();
  rope_yarn["rope_parameters"]["rope_type"] = "yarn";
  json conflict = llama32_1b_v4();
  conflict["rope_parameters"] = {{"rope_type", "llama3"},
                                 {"factor", 16.0},
                                 {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 8192}};
  json no_factor = llama32_1b_v4();
  no_factor["rope_scaling"].erase("factor");
  const std::vector<Case> cases = {
      {with(llama32_1b_v4(), "model_type", "gemma"), {"model_type", "\"gemma\"", "not supported"}},
      {with(mistral_v5(), "sliding_window", 4096), {"sliding_window 4096: sliding-window attention is not supported"}},
      {with(qwen2_v5(), "use_sliding_window", true), {"use_sliding_window true", "sliding-window"}},
      {with(qwen2_v5(), "layer_types", {"full_attention", "sliding_attention"}),
       {"sliding_attention", "sliding-window"}},
      {rope_yarn, {"rope_parameters.rope_type", "\"yarn\"", "not supported"}},
      {with(llama32_1b_v4(), "rope_scaling", {{"type", "linear"}, {"factor", 2.0}}), {"rope_scaling.type", "linear"}},
      {with(llama32_1b_v4(), "rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}), {"dynamic"}},
      {with(llama32_1b_v4(), "rope_scaling", {{"rope_type", "longrope"}}), {"longrope"}},
      {conflict, {"rope_parameters", "conflicts with rope_scaling"}},
      {no_factor, {"rope_scaling.factor", "missing"}},
      {with(llama32_1b_v4(), "mlp_bias", true), {"mlp_bias", "not supported"}},
      {with(llama32_1b_v4(), "num_local_experts", 8), {"num_local_experts", "mixture-of-experts"}},
      {with(qwen2_v5(), "num_experts", 60), {"num_experts", "mixture-of-experts"}},
      {with(llama32_1b_v4(), "hidden_act", "gelu"), {"hidden_act", "gelu"}},
      {with(llama32_1b_v4(), "attention_bias", 1), {"attention_bias", "true or false"}},
  };
  for (const Case& k : cases) {
    auto r = config_from_json(k.j, "/m/config.json");
    ASSERT_FALSE(r.ok()) << "accepted: " << k.j.dump();
    const std::string& msg = r.error().message;
    EXPECT_EQ(msg.rfind("/m/config.json: ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& w : k.words) EXPECT_TRUE(has(msg, w)) << "expected '" << w << "' in: " << msg;
  }
}

TEST(HfConfig, SpecialTokenIds) {
  auto ids = special_token_ids_from_json(llama32_1b_v4(), "c.json", 128256);
  ASSERT_TRUE(ids.ok()) << ids.error().message;
  EXPECT_EQ(ids->bos, 128000);
  EXPECT_EQ(ids->eos, (std::vector<int32_t>{128001, 128008, 128009}));
  auto one = special_token_ids_from_json(json{{"eos_token_id", 2}, {"bos_token_id", nullptr}}, "c.json", 64);
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->bos);
  EXPECT_EQ(one->eos, std::vector<int32_t>{2});
  auto none = special_token_ids_from_json(json::object(), "c.json", 64);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->eos);
  for (const json& bad : {json{{"eos_token_id", 64}}, json{{"eos_token_id", {1, -1}}}, json{{"bos_token_id", "1"}}}) {
    auto r = special_token_ids_from_json(bad, "/m/generation_config.json", 64);
    ASSERT_FALSE(r.ok()) << bad.dump();
    EXPECT_EQ(r.error().message.rfind("/m/generation_config.json: key '", 0), 0u) << r.error().message;
  }
}

// ---- opening directories ------------------------------------------------------------------------------

class HfCheckpointTest : public test::TempDirTest {
 protected:
  HfCheckpointTest() : TempDirTest("ftx_hf_") {}

  // A checkpoint directory `name` with config `c` and `tensors` in one file.
  std::string make_dir(const std::string& name, const json& config, const std::vector<RawTensor>& tensors,
                       int data_align = 0) {
    const std::string d = in_dir(name);
    fs::create_directories(d);
    write_json(d + "/config.json", config);
    write_safetensors_raw(d + "/model.safetensors", tensors, data_align);
    return d;
  }

  // Expects HfCheckpoint::open(dir) to fail with every string of `words` in its one-line message.
  static void expect_refused(const std::string& dir, const std::vector<std::string>& words) {
    auto r = HfCheckpoint::open(dir);
    ASSERT_FALSE(r.ok()) << dir << " opened";
    const std::string& msg = r.error().message;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& w : words) EXPECT_TRUE(has(msg, w)) << "expected '" << w << "' in: " << msg;
  }
};

TEST_F(HfCheckpointTest, Bf16TensorsAreUsedInPlaceAndTheSideFilesRead) {
  ModelConfig c = tiny_config();
  c.architecture = "qwen2", c.qkv_bias = true;
  std::map<std::string, std::vector<float>> values;
  auto tensors = model_tensors(c, "BF16", 1, &values);
  tensors.push_back(RawTensor{"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {2}, std::string(8, '\0')});
  json cj = config_to_json(c);
  cj["eos_token_id"] = 3;
  cj["bos_token_id"] = 1;
  const std::string d = make_dir("qwen", cj, tensors);
  write_json(d + "/generation_config.json", {{"eos_token_id", {3, 7}}, {"do_sample", true}});
  write_json(d + "/tokenizer_config.json", {{"chat_template", "{{ messages }}"}});
  ASSERT_TRUE(test::write_file(d + "/tokenizer.json", "{}"));

  auto ck = HfCheckpoint::open(d);
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  EXPECT_TRUE(ck->config().qkv_bias);
  EXPECT_EQ(ck->eos_ids(), (std::vector<int32_t>{3, 7}));  // generation_config.json wins
  EXPECT_EQ(ck->bos_id(), 1);
  EXPECT_EQ(ck->chat_template(), "{{ messages }}");
  EXPECT_EQ(ck->tokenizer_json_path(), d + "/tokenizer.json");
  EXPECT_FALSE(ck->config_tokenizer());
  EXPECT_EQ(ck->tensors().size(), param_specs(c).size() + 1);
  EXPECT_EQ(ck->file_bytes(), int64_t(fs::file_size(d + "/model.safetensors")));
  int biases = 0;
  for (const ParamSpec& s : param_specs(ck->config())) {
    biases += s.name.find("_proj.bias") != std::string::npos;
    auto w = ck->tensor_for(s);
    ASSERT_TRUE(w.ok()) << w.error().message;
    EXPECT_EQ(w->dtype, DType::BF16) << s.name;  // norms too: create_inference widens them
    EXPECT_EQ(w->ptr, ck->find(s.name)->data) << s.name << " not used in place";
    const std::vector<float>& want = values[s.name];
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(bf16_to_fp32(w->bf16()[i]), want[i]) << s.name << " " << i;
    EXPECT_TRUE(ck->check_finite(s).ok());
  }
  EXPECT_EQ(biases, 3 * c.n_layers);

  // The chat template: the list form's "default" entry; chat_template.jinja wins over both.
  write_json(
      d + "/tokenizer_config.json",
      {{"chat_template", {{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}}}});
  auto listed = HfCheckpoint::open(d);
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  EXPECT_EQ(listed->chat_template(), "D");
  ASSERT_TRUE(test::write_file(d + "/chat_template.jinja", "J"));
  auto jinja = HfCheckpoint::open(d);
  ASSERT_TRUE(jinja.ok()) << jinja.error().message;
  EXPECT_EQ(jinja->chat_template(), "J");
  fs::remove(d + "/chat_template.jinja");
  write_json(d + "/tokenizer_config.json", {{"chat_template", 3}});
  expect_refused(d, {d + "/tokenizer_config.json", "chat_template"});
}

// F16 GEMM weights become BF16, rounding to nearest even (exact where BF16 holds the value); other
// F16 tensors become F32, exactly.
TEST_F(HfCheckpointTest, F16ConvertsToBf16ForGemmWeightsAndF32ForTheRest) {
  const ModelConfig c = tiny_config();
  std::map<std::string, std::vector<float>> values;
  auto tensors = model_tensors(c, "F16", 2, &values);
  // The embedding's first values: f16 bit patterns, then what bf16 must hold (exact when the f16
  // mantissa's last 3 bits are 0; else round to nearest, ties to even).
  const std::vector<std::pair<uint16_t, uint16_t>> f16_to_bf16 = {
      {0x3C00, 0x3F80},                    // 1
      {0xC700, 0xC0E0},                    // -7
      {0x3A00, 0x3F40},                    // 0.75
      {0x0400, 0x3880},                    // 2^-14, smallest normal f16
      {0x0001, 0x3380},                    // 2^-24, smallest subnormal
      {0x0003, 0x3440},                    // 3 * 2^-24
      {0x7BF8, 0x477F},                    // 65280, exactly representable in bf16
      {0x0000, 0x0000}, {0x8000, 0x8000},  // signed zeros
      {0x3C01, 0x3F80},                    // 1 + 2^-10: below half an ulp, down
      {0x3C04, 0x3F80},                    // 1 + 2^-8: a tie, to even (down)
      {0x3C0C, 0x3F82},                    // 1 + 3 * 2^-8: a tie, to even (up)
      {0x3C0F, 0x3F82},                    // 1 + 15 * 2^-10: above half, up
  };
  RawTensor* emb = find_raw(tensors, "model.embed_tokens.weight");
  for (size_t i = 0; i < f16_to_bf16.size(); ++i) {
    std::memcpy(&emb->bytes[2 * i], &f16_to_bf16[i].first, 2);
    values["model.embed_tokens.weight"][i] = f16_value(f16_to_bf16[i].first);
  }
  RawTensor* norm = find_raw(tensors, "model.norm.weight");
  const uint16_t norm0 = 0x3555;  // 0.33325195..., 10 mantissa bits: exact in f32 only
  std::memcpy(&norm->bytes[0], &norm0, 2);
  values["model.norm.weight"][0] = f16_value(norm0);
  auto ck = HfCheckpoint::open(make_dir("f16", config_to_json(c), tensors));
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  for (const ParamSpec& s : param_specs(c)) {
    auto w = ck->tensor_for(s);
    ASSERT_TRUE(w.ok()) << w.error().message;
    ASSERT_EQ(w->dtype, s.gemm_weight ? DType::BF16 : DType::F32) << s.name;
    const std::vector<float>& want = values[s.name];
    for (size_t i = 0; i < want.size(); ++i) {
      if (s.gemm_weight) {
        ASSERT_EQ(w->bf16()[i], fp32_to_bf16(want[i])) << s.name << " " << i;
      } else {
        ASSERT_EQ(w->f32()[i], want[i]) << s.name << " " << i;
      }
    }
    auto again = ck->tensor_for(s);  // converted once
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->ptr, w->ptr);
  }
  auto e = ck->tensor_for(*find_param(param_specs(c), "model.embed_tokens.weight"));
  ASSERT_TRUE(e.ok());
  for (size_t i = 0; i < f16_to_bf16.size(); ++i) EXPECT_EQ(e->bf16()[i], f16_to_bf16[i].second) << i;
}

// A data buffer at an odd offset: nothing can be used in place, so everything is copied, exactly.
TEST_F(HfCheckpointTest, MisalignedTensorsAreCopied) {
  const ModelConfig c = tiny_config();
  for (const std::string dtype : {"BF16", "F32"}) {
    SCOPED_TRACE(dtype);
    std::map<std::string, std::vector<float>> values;
    const auto tensors = model_tensors(c, dtype, 3, &values);
    auto ck = HfCheckpoint::open(make_dir("odd" + dtype, config_to_json(c), tensors, /*data_align=*/1));
    ASSERT_TRUE(ck.ok()) << ck.error().message;
    for (const ParamSpec& s : param_specs(c)) {
      auto w = ck->tensor_for(s);
      ASSERT_TRUE(w.ok()) << w.error().message;
      EXPECT_NE(w->ptr, ck->find(s.name)->data);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(w->ptr) % dtype_size(w->dtype), 0u);
      const std::vector<float>& want = values[s.name];
      for (size_t i = 0; i < want.size(); ++i) {
        const float got = w->dtype == DType::BF16 ? bf16_to_fp32(w->bf16()[i]) : w->f32()[i];
        ASSERT_EQ(got, want[i]) << s.name << " " << i;
      }
    }
  }
}

TEST_F(HfCheckpointTest, ShardsWithAnIndex) {
  const ModelConfig c = tiny_config(0, /*tied=*/true);
  std::map<std::string, std::vector<float>> values;
  const auto tensors = model_tensors(c, "BF16", 4, &values);
  const std::string d = in_dir("sharded");
  fs::create_directories(d);
  write_json(d + "/config.json", config_to_json(c));
  write_sharded(d, tensors, 3);
  write_safetensors_raw(d + "/model-00009-of-00009.safetensors", {});  // not in the index: not opened
  ASSERT_TRUE(test::write_file(d + "/model-00010-of-00010.safetensors", "garbage"));
  auto ck = HfCheckpoint::open(d);
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  int64_t bytes = 0;
  for (int i = 1; i <= 3; ++i)
    bytes += int64_t(fs::file_size(d + "/model-0000" + std::to_string(i) + "-of-00003.safetensors"));
  EXPECT_EQ(ck->file_bytes(), bytes);
  std::set<std::string> files;
  for (const ParamSpec& s : param_specs(c)) {
    const HfTensor* t = ck->find(s.name);
    ASSERT_NE(t, nullptr) << s.name;
    files.insert(t->file);
    auto w = ck->tensor_for(s);
    ASSERT_TRUE(w.ok()) << w.error().message;
    EXPECT_EQ(bf16_to_fp32(w->bf16()[0]), values[s.name][0]) << s.name;
  }
  EXPECT_EQ(files.size(), 3u);
}

TEST_F(HfCheckpointTest, AnIndexNamingAMissingShard) {
  const ModelConfig c = tiny_config();
  const std::string d = in_dir("missing_shard");
  fs::create_directories(d);
  write_json(d + "/config.json", config_to_json(c));
  write_sharded(d, model_tensors(c, "BF16", 5), 2);
  fs::remove(d + "/model-00002-of-00002.safetensors");
  expect_refused(d, {d + "/model.safetensors.index.json", "'model-00002-of-00002.safetensors'", "missing"});
}

TEST_F(HfCheckpointTest, ATensorInTwoShards) {
  const ModelConfig c = tiny_config();
  const std::string d = in_dir("twice");
  fs::create_directories(d);
  write_json(d + "/config.json", config_to_json(c));
  auto tensors = model_tensors(c, "BF16", 6);
  write_sharded(d, tensors, 2);
  // Shard 2 also holds the embedding, which the index maps to shard 1.
  std::vector<RawTensor> second;
  for (size_t k = tensors.size() / 2; k < tensors.size(); ++k) second.push_back(tensors[k]);
  second.push_back(tensors[0]);
  write_safetensors_raw(d + "/model-00002-of-00002.safetensors", second);
  expect_refused(d, {d + "/model-00002-of-00002.safetensors", "'model.embed_tokens.weight'", "also in this shard",
                     "model-00001-of-00002.safetensors"});
}

TEST_F(HfCheckpointTest, ShardNamesMustBePlainFileNames) {
  const ModelConfig c = tiny_config();
  const std::string d = in_dir("escape");
  fs::create_directories(d);
  write_json(d + "/config.json", config_to_json(c));
  json wm = json::object();
  for (const ParamSpec& s : param_specs(c)) wm[s.name] = "../model.safetensors";
  write_json(d + "/model.safetensors.index.json", {{"weight_map", wm}});
  expect_refused(d, {"model.safetensors.index.json", "plain file name"});
}

TEST_F(HfCheckpointTest, ATruncatedShard) {
  const ModelConfig c = tiny_config();
  const std::string d = in_dir("truncated");
  fs::create_directories(d);
  write_json(d + "/config.json", config_to_json(c));
  write_sharded(d, model_tensors(c, "BF16", 7), 2);
  const std::string shard = d + "/model-00001-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 10);
  expect_refused(d, {shard, "truncated"});
}

TEST_F(HfCheckpointTest, ShapesAndVocabularyAgainstConfigJson) {
  const ModelConfig c = tiny_config();
  auto tensors = model_tensors(c, "BF16", 8);
  find_raw(tensors, "model.layers.1.mlp.up_proj.weight")->shape = {12, 32};  // same bytes, other shape
  std::string d = make_dir("shape", config_to_json(c), tensors);
  expect_refused(
      d, {d + "/model.safetensors", "'model.layers.1.mlp.up_proj.weight'", "[12, 32]", "[24, 16]", d + "/config.json"});

  ModelConfig v = c;
  v.vocab_size = 30;  // the tensors have 29 rows
  d = make_dir("vocab", config_to_json(v), model_tensors(c, "BF16", 8));
  expect_refused(d, {"'model.embed_tokens.weight'", "[29, 16]", "[30, 16]", "vocab_size 30"});
}

TEST_F(HfCheckpointTest, TheTensorSetMustBeTheConfigsExactly) {
  const ModelConfig c = tiny_config();
  auto tensors = model_tensors(c, "BF16", 9);

  auto missing = tensors;
  missing.erase(missing.begin() + 3);
  expect_refused(make_dir("missing", config_to_json(c), missing), {"'" + tensors[3].name + "'", "is missing"});

  auto extra = tensors;
  extra.push_back(RawTensor{"model.layers.0.self_attn.q_proj.bias", "BF16", {16}, std::string(32, '\0')});
  expect_refused(make_dir("extra", config_to_json(c), extra), {"unexpected tensor", "q_proj.bias", "attention_bias"});

  auto int8 = tensors;
  find_raw(int8, "model.norm.weight")->dtype = "I8";
  find_raw(int8, "model.norm.weight")->bytes.resize(16);  // 16 elements of one byte
  expect_refused(make_dir("int8", config_to_json(c), int8), {"'model.norm.weight'", "dtype I8", "not supported"});

  auto free_only = tensors;
  free_only.push_back(RawTensor{"free.zeta", "BF16", {16}, std::string(32, '\0')});
  expect_refused(make_dir("free", config_to_json(c), free_only), {"'free.zeta'", "free_transformer"});

  ModelConfig biased = c;
  biased.qkv_bias = biased.o_bias = true;
  expect_refused(make_dir("nobias", config_to_json(biased), tensors),
                 {"'model.layers.0.self_attn.q_proj.bias'", "is missing", "attention_bias true"});

  // Tied: an lm_head.weight beside the embedding is ignored as transformers ignores it, when it
  // has the head's shape.
  const ModelConfig tied = tiny_config(0, true);
  auto with_head = model_tensors(c, "BF16", 9);  // untied set: has lm_head.weight
  auto ck = HfCheckpoint::open(make_dir("tied_head", config_to_json(tied), with_head));
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  EXPECT_EQ(find_param(param_specs(ck->config()), "lm_head.weight"), nullptr);
  find_raw(with_head, "lm_head.weight")->shape = {16, 29};
  expect_refused(make_dir("tied_bad", config_to_json(tied), with_head), {"'lm_head.weight'", "[16, 29]", "[29, 16]"});
}

TEST_F(HfCheckpointTest, NonFiniteValuesAreFoundByCheckFiniteNotAtOpen) {
  const ModelConfig c = tiny_config();
  struct Case {
    std::string dtype, tensor;
    int64_t element;
    std::string bits, what;
  };
  const uint32_t f32_inf = 0xFF800000u;  // -Inf
  const uint16_t bf16_nan = 0x7FC1, f16_inf = 0x7C00, f16_nan = 0xFE00;
  const std::vector<Case> cases = {
      {"BF16", "model.layers.1.self_attn.k_proj.weight", 37, std::string(reinterpret_cast<const char*>(&bf16_nan), 2),
       "NaN"},
      {"F32", "model.norm.weight", 5, std::string(reinterpret_cast<const char*>(&f32_inf), 4), "Inf"},
      {"F16", "model.embed_tokens.weight", 100, std::string(reinterpret_cast<const char*>(&f16_inf), 2), "Inf"},
      {"F16", "model.layers.0.input_layernorm.weight", 15, std::string(reinterpret_cast<const char*>(&f16_nan), 2),
       "NaN"},
  };
  for (const Case& k : cases) {
    auto tensors = model_tensors(c, k.dtype, 10);
    RawTensor* t = find_raw(tensors, k.tensor);
    t->bytes.replace(size_t(k.element) * k.bits.size(), k.bits.size(), k.bits);
    const std::string d = make_dir("nan" + k.dtype + std::to_string(k.element), config_to_json(c), tensors);
    auto ck = HfCheckpoint::open(d);
    ASSERT_TRUE(ck.ok()) << ck.error().message;
    for (const ParamSpec& s : param_specs(c)) {
      Status st = ck->check_finite(s);
      if (s.name != k.tensor) {
        EXPECT_TRUE(st.ok()) << st.error().message;
        continue;
      }
      ASSERT_FALSE(st.ok()) << k.tensor;
      EXPECT_EQ(st.error().message, d + "/model.safetensors: tensor '" + k.tensor + "': element " +
                                        std::to_string(k.element) + " is " + k.what +
                                        " (non-finite weights are refused)");
    }
  }
}

TEST_F(HfCheckpointTest, ErrorsOfTheDirectoryItself) {
  expect_refused(in_dir("nothing"), {in_dir("nothing") + "/config.json"});
  const std::string d = in_dir("no_weights");
  fs::create_directories(d);
  write_json(d + "/config.json", config_to_json(tiny_config()));
  ASSERT_TRUE(test::write_file(d + "/pytorch_model.bin", "x"));
  expect_refused(d, {d + ": checkpoint has neither model.safetensors nor model.safetensors.index.json",
                     "pytorch_model.bin is not read"});
  json gemma = config_to_json(tiny_config());
  gemma["model_type"] = "gemma2";
  write_json(d + "/config.json", gemma);
  expect_refused(d, {d + "/config.json: key 'model_type': \"gemma2\" is not supported"});
  write_json(d + "/config.json", config_to_json(tiny_config()));
  write_json(d + "/generation_config.json", {{"eos_token_id", 1000}});
  write_safetensors_raw(d + "/model.safetensors", model_tensors(tiny_config(), "BF16", 1));
  expect_refused(d, {d + "/generation_config.json: key 'eos_token_id'", "vocab_size 29"});
}

// ---- our own checkpoints --------------------------------------------------------------------------------

std::unique_ptr<Backend>& cpu() {
  static std::unique_ptr<Backend> b = make_cpu_backend();
  return b;
}

// Logits (B, T, V) of `m` on fixed tokens and codes.
std::vector<float> logits_of(Model& m) {
  const int B = 2, T = 7, V = m.config().vocab_size;
  std::vector<int32_t> in(size_t(B) * T);
  std::vector<uint32_t> codes(size_t(B) * T);
  for (size_t i = 0; i < in.size(); ++i) in[i] = int32_t((i * 7 + 3) % size_t(V)), codes[i] = uint32_t(i * 5 % 8);
  auto st = m.make_state(B, T);
  (void)m.forward(*st, in.data(), nullptr, m.config().is_free() ? codes.data() : nullptr, 1, 2, 0.0f);
  std::vector<float> l(size_t(B) * T * V);
  m.read_logits(*st, l.data());
  return l;
}

// save_checkpoint's directories (F32, with and without free.*) open through HfCheckpoint: every
// tensor in place, the config and tokenizer as load_checkpoint gives them, and a model made from
// tensor_for computes exactly the logits of the model load_checkpoint fills.
TEST_F(HfCheckpointTest, OurOwnCheckpointsOpenAndGiveTheSameLogits) {
  for (const int bits : {0, 3}) {
    for (const bool readout_bias : {false, true}) {
      if (bits == 0 && readout_bias) continue;
      SCOPED_TRACE("latent_bits " + std::to_string(bits) + (readout_bias ? " with readout bias" : ""));
      CheckpointData data;
      data.config = tiny_config(bits, bits > 0);
      data.config.readout_bias = readout_bias;
      data.tokenizer = std::make_shared<CharTokenizer>("_!>ABCDEFGHIJKLMNOPQRSTUVWXYZ");
      std::mt19937 rng(11 + bits);
      std::normal_distribution<float> nd(0.0f, 0.3f);
      data.params.resize(size_t(param_count(param_specs(data.config))));
      for (float& x : data.params) x = nd(rng);
      const std::string d = in_dir("own" + std::to_string(bits) + (readout_bias ? "b" : ""));
      ASSERT_TRUE(save_checkpoint(d, data).ok());

      auto ck = HfCheckpoint::open(d);
      ASSERT_TRUE(ck.ok()) << ck.error().message;
      auto loaded = load_checkpoint(d, false);
      ASSERT_TRUE(loaded.ok()) << loaded.error().message;
      EXPECT_EQ(config_to_json(ck->config()), config_to_json(loaded->config));
      EXPECT_EQ(ck->config().readout_bias, readout_bias);
      ASSERT_TRUE(ck->config_tokenizer());
      EXPECT_EQ(ck->config_tokenizer()->fingerprint(), data.tokenizer->fingerprint());
      EXPECT_TRUE(ck->eos_ids().empty());
      EXPECT_EQ(ck->chat_template(), "");
      EXPECT_EQ(ck->tokenizer_json_path(), "");

      const auto specs = param_specs(ck->config());
      for (const ParamSpec& s : specs) {
        auto w = ck->tensor_for(s);
        ASSERT_TRUE(w.ok()) << w.error().message;
        ASSERT_EQ(w->dtype, DType::F32);
        EXPECT_EQ(w->ptr, ck->find(s.name)->data) << s.name;
        EXPECT_EQ(std::memcmp(w->ptr, data.params.data() + s.offset, size_t(s.numel) * 4), 0) << s.name;
        EXPECT_TRUE(ck->check_finite(s).ok());
      }
      Model ref(*cpu(), loaded->config);
      ref.load_params(loaded->params.data());
      auto inf = Model::create_inference(*cpu(), ck->config(), [&](const ParamSpec& s) {
        auto w = ck->tensor_for(s);
        return w.ok() ? *w : WeightRef{};
      });
      ASSERT_TRUE(inf.ok()) << inf.error().message;
      const std::vector<float> a = logits_of(ref), b = logits_of(**inf);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "same fp32 weights, same ops";
    }
  }
}

// The bf16 model made from tensor_for (GEMM weights in place, norms widened by create_inference)
// computes the products of the fp32 model on the same values widened: logits equal to the
// rounding of a reordered sum (test_model's kSameProductsTol, 1e-5, for the same reason). On the
// Generic kernel path, which keeps the activations in fp32 (AVX512_BF16 rounds them to bf16).
TEST_F(HfCheckpointTest, Bf16CheckpointGivesTheLogitsOfItsValuesInFp32) {
  constexpr float kSameProductsTol = 1e-5f;
  cpu::set_cpu_isa_for_tests(cpu::CpuIsa::Generic);
  struct Reset {
    ~Reset() { cpu::reset_cpu_isa_for_tests(); }
  } reset;
  const ModelConfig c = tiny_config();
  std::map<std::string, std::vector<float>> values;
  auto ck = HfCheckpoint::open(make_dir("bf16", config_to_json(c), model_tensors(c, "BF16", 12, &values)));
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  Model ref(*cpu(), c);
  std::vector<float> arena(size_t(ref.num_params()));
  for (const ParamSpec& s : ref.specs())
    std::copy(values[s.name].begin(), values[s.name].end(), arena.begin() + s.offset);
  ref.load_params(arena.data());
  auto inf = Model::create_inference(*cpu(), ck->config(), [&](const ParamSpec& s) {
    auto w = ck->tensor_for(s);
    return w.ok() ? *w : WeightRef{};
  });
  ASSERT_TRUE(inf.ok()) << inf.error().message;
  const std::vector<float> a = logits_of(ref), b = logits_of(**inf);
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  EXPECT_LT(worst, kSameProductsTol);
}

// ---- an 8B-shaped checkpoint, sparse --------------------------------------------------------------------

// Llama-3-8B's shape with a vocabulary of 2^17 (8,053,329,920 parameters, 16.1 GB in bf16:
// docs/reference_formats.md, section B), in 4 shards whose data are holes: open() must read the
// headers only.
TEST_F(HfCheckpointTest, AnEightBillionParameterCheckpointOpensFromItsHeaders) {
  json cj = llama32_1b_v4();
  cj["hidden_size"] = 4096, cj["intermediate_size"] = 14336, cj["num_hidden_layers"] = 32;
  cj["num_attention_heads"] = 32, cj["num_key_value_heads"] = 8, cj["head_dim"] = 128;
  cj["vocab_size"] = 131072, cj["tie_word_embeddings"] = false, cj["max_position_embeddings"] = 8192;
  cj["eos_token_id"] = 128001, cj.erase("rope_scaling");
  auto cfg = config_from_json(cj, "8b");
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  const auto specs = param_specs(*cfg);
  EXPECT_EQ(param_count(specs), 8'053'329'920);
  const std::string d = in_dir("llama8b");
  fs::create_directories(d);
  write_json(d + "/config.json", cj);
  std::vector<RawTensor> ts;
  for (const ParamSpec& s : specs) ts.push_back(RawTensor{s.name, "BF16", s.shape, ""});
  json wm = json::object();
  const int n = 4;
  for (int i = 0; i < n; ++i) {
    const std::string name = "model-0000" + std::to_string(i + 1) + "-of-00004.safetensors";
    std::vector<RawTensor> part(ts.begin() + long(i * ts.size() / n), ts.begin() + long((i + 1) * ts.size() / n));
    for (const auto& t : part) wm[t.name] = name;
    write_safetensors_sparse(d + "/" + name, part);
  }
  write_json(d + "/model.safetensors.index.json",
             {{"metadata", {{"total_size", 16'106'659'840ll}}}, {"weight_map", wm}});

  const auto t0 = std::chrono::steady_clock::now();
  auto ck = HfCheckpoint::open(d);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  std::printf("opened an 8B-parameter checkpoint (%.2f GB in 4 shards) in %.1f ms\n", double(ck->file_bytes()) / 1e9,
              ms);
  EXPECT_GT(ck->file_bytes(), 16'106'659'840ll);
  EXPECT_EQ(ck->tensors().size(), specs.size());
  EXPECT_EQ(ck->eos_ids(), std::vector<int32_t>{128001});
  auto head = ck->tensor_for(*find_param(specs, "lm_head.weight"));  // in place: no byte read
  ASSERT_TRUE(head.ok()) << head.error().message;
  EXPECT_EQ(head->ptr, ck->find("lm_head.weight")->data);
}

// ---- checkpoints written by transformers (tests/fixtures/real/tiny_*) -----------------------------------

std::vector<std::string> real_fixture_dirs() {
  std::vector<std::string> out;
  const fs::path root = fs::path(FTX_FIXTURE_DIR) / "real";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.is_directory() && e.path().filename().string().rfind("tiny_", 0) == 0) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

json read_json_file(const std::string& path) { return json::parse(test::read_file(path)); }

// The rope object of a config, v4 or v5 spelling; null when plain.
json rope_object(const json& j) {
  for (const char* k : {"rope_scaling", "rope_parameters"})
    if (j.contains(k) && j[k].is_object()) {
      const json& o = j[k];
      const std::string t = o.value("rope_type", o.value("type", std::string("default")));
      if (t != "default") return o;
    }
  return nullptr;
}

TEST(HfRealFixtures, TransformersCheckpointsOpenWithTheirConfigAndValues) {
  const auto dirs = real_fixture_dirs();
  if (dirs.empty()) GTEST_SKIP() << FTX_FIXTURE_DIR << "/real/tiny_* not present yet";
  bool saw_gqa = false, saw_llama3 = false, saw_qkv = false, saw_o = false, saw_f16 = false, saw_shards = false;
  for (const std::string& d : dirs) {
    SCOPED_TRACE(d);
    auto ck = HfCheckpoint::open(d);
    ASSERT_TRUE(ck.ok()) << ck.error().message;
    const json j = read_json_file(d + "/config.json");
    const ModelConfig& c = ck->config();
    // The config, against config.json read here directly.
    EXPECT_EQ(c.architecture, j.value("model_type", std::string("llama")));
    EXPECT_EQ(c.vocab_size, j["vocab_size"].get<int>());
    EXPECT_EQ(c.n_heads, j["num_attention_heads"].get<int>());
    if (j.contains("num_key_value_heads")) {
      EXPECT_EQ(c.n_kv_heads, j["num_key_value_heads"].get<int>());
    }
    EXPECT_EQ(c.tie_embeddings, j.value("tie_word_embeddings", false));
    saw_gqa |= c.n_kv_heads < c.n_heads;
    const json rope = rope_object(j);
    if (!rope.is_null()) {
      saw_llama3 = true;
      EXPECT_EQ(c.rope_scaling.kind, RopeScalingKind::Llama3);
      EXPECT_EQ(c.rope_scaling.factor, rope["factor"].get<float>());
      EXPECT_EQ(c.rope_scaling.low_freq_factor, rope["low_freq_factor"].get<float>());
      EXPECT_EQ(c.rope_scaling.high_freq_factor, rope["high_freq_factor"].get<float>());
      EXPECT_EQ(c.rope_scaling.original_max_position, rope["original_max_position_embeddings"].get<int>());
    } else {
      EXPECT_EQ(c.rope_scaling.kind, RopeScalingKind::None);
    }
    const bool qwen = c.architecture == "qwen2",
               llama_bias = c.architecture == "llama" && j.value("attention_bias", false);
    EXPECT_EQ(c.qkv_bias, qwen || llama_bias);
    EXPECT_EQ(c.o_bias, llama_bias);
    saw_qkv |= c.qkv_bias, saw_o |= c.o_bias;
    saw_shards |= fs::exists(d + "/model.safetensors.index.json");
    // Every tensor: the dtype tensor_for promises, and its first values as SafetensorsFile reads them.
    for (const ParamSpec& s : param_specs(c)) {
      const HfTensor* t = ck->find(s.name);
      ASSERT_NE(t, nullptr) << s.name;
      saw_f16 |= t->dtype == SafetensorsDType::F16;
      auto w = ck->tensor_for(s);
      ASSERT_TRUE(w.ok()) << w.error().message;
      const bool to_bf16 = t->dtype == SafetensorsDType::BF16 || (t->dtype == SafetensorsDType::F16 && s.gemm_weight);
      EXPECT_EQ(w->dtype, to_bf16 ? DType::BF16 : DType::F32) << s.name;
      auto file = SafetensorsFile::open(t->file);
      ASSERT_TRUE(file.ok()) << file.error().message;
      auto want = file->read_f32(s.name);
      ASSERT_TRUE(want.ok()) << want.error().message;
      for (size_t i = 0; i < std::min<size_t>(16, want->size()); ++i) {
        if (w->dtype == DType::F32)
          EXPECT_EQ(w->f32()[i], (*want)[i]) << s.name << " " << i;
        else
          EXPECT_EQ(w->bf16()[i], fp32_to_bf16((*want)[i])) << s.name << " " << i;
      }
      EXPECT_TRUE(ck->check_finite(s).ok()) << s.name;
    }
  }
  // What the fixtures are for: each feature by at least one of them.
  EXPECT_TRUE(saw_gqa) << "no fixture with grouped-query attention";
  EXPECT_TRUE(saw_llama3) << "no fixture with llama3 rope scaling";
  EXPECT_TRUE(saw_qkv) << "no fixture with q/k/v biases";
  EXPECT_TRUE(saw_o) << "no fixture with attention_bias (o_proj bias)";
  EXPECT_TRUE(saw_f16) << "no F16 fixture";
  EXPECT_TRUE(saw_shards) << "no sharded fixture";
}

// ---- the fuzz target: its seeds and the inputs it crashed on ---------------------------------------------

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

void run_fuzz_input(const std::string& bytes) {
  (void)LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// Each seed is a valid input of the mode its first byte picks, so fuzzing starts deep in each.
TEST(FuzzSafetensors, SeedsAreValidInputsOfTheirModes) {
  const auto seeds = files_in(fs::path(FTX_FIXTURE_DIR).parent_path() / "fuzz" / "corpus" / "safetensors");
  ASSERT_GE(seeds.size(), 9u);
  int modes[3] = {0, 0, 0};
  for (const std::string& path : seeds) {
    SCOPED_TRACE(path);
    const std::string bytes = test::read_file(path);
    ASSERT_FALSE(bytes.empty());
    const std::string body = bytes.substr(1);
    const int mode = static_cast<unsigned char>(bytes[0]) % 3;
    ++modes[mode];
    run_fuzz_input(bytes);
    if (mode == 0) {
      auto h = parse_safetensors(path, reinterpret_cast<const uint8_t*>(body.data()), body.size());
      EXPECT_TRUE(h.ok()) << h.error().message;
    } else if (mode == 1) {
      auto c = config_from_json(json::parse(body), path);
      EXPECT_TRUE(c.ok()) << c.error().message;
    } else {
      auto ck = HfCheckpoint::open(hf_dir());  // fuzz_hf_dir left this seed's model.safetensors there
      EXPECT_TRUE(ck.ok()) << ck.error().message;
    }
  }
  EXPECT_GT(modes[0], 0);
  EXPECT_GT(modes[1], 0);
  EXPECT_GT(modes[2], 0);
}

// Run under the sanitizer build (docs/testing.md) these are the crashes the fuzzer found.
// empty_f32_tensor_decode: a [0, 4] F32 tensor decoded into an empty vector (decode_f32's memcpy
// to a null destination).
TEST(FuzzSafetensors, InputsThatCrashedReplayCleanly) {
  const auto inputs = files_in(fs::path(FTX_FIXTURE_DIR) / "fuzz" / "safetensors");
  ASSERT_FALSE(inputs.empty());
  for (const std::string& path : inputs) {
    SCOPED_TRACE(path);
    run_fuzz_input(test::read_file(path));
  }
  EXPECT_TRUE(decode_f32(SafetensorsDType::BF16, nullptr, 0, nullptr));
  EXPECT_FALSE(decode_f32(SafetensorsDType::I8, nullptr, 0, nullptr));
}

}  // namespace
}  // namespace ftx
