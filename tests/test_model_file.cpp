// Real model files through ModelFile (core/io/model_file.h) and text generation
// (core/sample/generator.h):
//   * SmolLM2-135M-Instruct (GGUF, Q4_1): next-token log-probabilities of a chat prompt against a
//     float64 NumPy forward pass of the same dequantized weights (docs/testing.md, "real models"),
//     fp32 within 2e-3, bf16 within a stated bound; the greedy answer "The capital of France is
//     Paris." ending in <|im_end|>.
//   * prefill (GEMM chunks) against decode steps one token at a time; prompts of different lengths
//     in one batch against each alone; stop strings; a prompt longer than the context.
//   * a Free Transformer with random weights on SmolLM2's tokenizer: the latent policies' mechanics
//     (a fixed Z repeats, another Z changes the logits).
#include "core/io/model_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/sample/generator.h"
#include "kernels/backend.h"
#include "kernels/cpu/isa.h"
#include "tests/real_model.h"

namespace ftx {
namespace {

// E5's chat prompt: <|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n
const std::vector<int32_t> kChatPrompt = {1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198};
// The float64 reference's next-token log-probabilities after kChatPrompt.
const std::vector<std::pair<int32_t, double>> kNextLogProbs = {
    {504, -0.587}, {60, -2.317}, {38634, -2.345}, {15319, -2.484}, {7026, -3.265}};
const std::vector<int32_t> kGreedyAnswer = {504, 3575, 282, 4649,
                                            314, 7042, 30,  2};  // "The capital ... Paris.<|im_end|>"

std::vector<double> log_softmax(const float* logits, int V) {
  const double m = *std::max_element(logits, logits + V);
  double z = 0;
  for (int i = 0; i < V; ++i) z += std::exp(double(logits[i]) - m);
  std::vector<double> out(static_cast<size_t>(V));
  for (int i = 0; i < V; ++i) out[size_t(i)] = double(logits[i]) - m - std::log(z);
  return out;
}

class SmolLM2 : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = test::smollm2_gguf_path();
    REQUIRE_REAL_MODEL(path_);
    auto f = ModelFile::open(path_);
    ASSERT_TRUE(f.ok()) << f.error().message;
    file_ = std::move(*f);
  }
  std::unique_ptr<Model> load(DType dtype) {
    auto m = file_->load(*be_, {}, dtype);
    EXPECT_TRUE(m.ok()) << m.error().message;
    return m.ok() ? std::move(*m) : nullptr;
  }
  std::vector<double> next_log_probs(Model& m, const std::vector<int32_t>& prompt) {
    auto d = m.make_decode_state(1, int(prompt.size()));
    std::vector<float> logits(size_t(m.config().vocab_size));
    m.prefill(*d, 0, prompt.data(), nullptr, int(prompt.size()), 0, Model::PrefillLogits::Last, logits.data());
    return log_softmax(logits.data(), m.config().vocab_size);
  }
  std::string path_;
  std::unique_ptr<Backend> be_ = make_cpu_backend();
  std::unique_ptr<ModelFile> file_;
};

TEST_F(SmolLM2, InfoFromTheHeaders) {
  const ModelInfo& i = file_->info();
  EXPECT_EQ(i.format, "gguf");
  EXPECT_EQ(i.config.n_layers, 30);
  EXPECT_EQ(i.config.dim, 576);
  EXPECT_EQ(i.config.n_kv_heads, 3);
  EXPECT_TRUE(i.config.tie_embeddings);
  EXPECT_FALSE(i.config.is_free());
  EXPECT_EQ(i.n_params, 134515008);
  ASSERT_TRUE(i.tokenizer);
  EXPECT_EQ(i.tokenizer->vocab_size(), 49152);
  EXPECT_FALSE(i.add_bos);
  EXPECT_NE(std::find(i.eos_ids.begin(), i.eos_ids.end(), 2), i.eos_ids.end());
  EXPECT_NE(i.chat_template.find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(i.tensors.size(), 272u);
  auto ids = i.tokenizer->encode("The capital of France is");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{504, 3575, 282, 4649, 314}));
}

TEST_F(SmolLM2, Fp32LogProbsMatchTheFloat64Reference) {
  auto m = load(DType::F32);
  ASSERT_TRUE(m);
  const std::vector<double> lp = next_log_probs(*m, kChatPrompt);
  for (auto [id, want] : kNextLogProbs) EXPECT_NEAR(lp[size_t(id)], want, 2e-3) << "token " << id;
}

// bf16 weights (the Q4_1 values rounded to bf16: the weights move by up to 2^-9 of themselves) and,
// on AVX512_BF16 CPUs, activations rounded to bf16 inside the products: the log-probabilities of
// the likely tokens move by up to 0.1 (0.056 measured with fp32 activations, docs/performance.md).
TEST_F(SmolLM2, Bf16LogProbsStayWithinTheStatedBound) {
  auto m = load(DType::BF16);
  ASSERT_TRUE(m);
  const std::vector<double> lp = next_log_probs(*m, kChatPrompt);
  double worst = 0;
  for (auto [id, want] : kNextLogProbs) {
    EXPECT_NEAR(lp[size_t(id)], want, 0.1) << "token " << id;
    worst = std::max(worst, std::abs(lp[size_t(id)] - want));
  }
  std::printf("bf16: largest |log-prob difference| against the float64 reference: %.4f\n", worst);
}

TEST_F(SmolLM2, GreedyAnswerAndStops) {
  auto m = load(DType::BF16);
  ASSERT_TRUE(m);
  const ModelInfo& info = file_->info();
  SampleConfig sc;
  sc.temperature = 0, sc.max_new_tokens = 12;
  StopRule stop{info.eos_ids, {}};
  std::string streamed;
  auto g =
      generate_text(*m, info.tokenizer.get(), {{kChatPrompt, {}}}, sc, stop, [&](int, int32_t, const std::string& t) {
        streamed += t;
        return true;
      });
  ASSERT_TRUE(g.ok()) << g.error().message;
  const std::vector<int32_t> answer((*g)[0].tokens.begin() + int(kChatPrompt.size()), (*g)[0].tokens.end());
  EXPECT_EQ(answer, kGreedyAnswer);
  EXPECT_EQ((*g)[0].finish, FinishReason::Eos);
  EXPECT_EQ((*g)[0].text, "The capital of France is Paris.");
  EXPECT_EQ(streamed, (*g)[0].text);

  // A stop string ends the sequence and is cut from its text.
  stop.stop_strings = {" Paris"};
  streamed.clear();
  g = generate_text(*m, info.tokenizer.get(), {{kChatPrompt, {}}}, sc, stop, [&](int, int32_t, const std::string& t) {
    streamed += t;
    return true;
  });
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)[0].finish, FinishReason::StopString);
  EXPECT_EQ((*g)[0].text, "The capital of France is");
  EXPECT_EQ(streamed, "The capital of France is");
}

// Prefill through GEMM chunks, logits at every position, against feeding the tokens one by one.
TEST_F(SmolLM2, PrefillEqualsDecodeSteps) {
  auto m = load(DType::F32);
  ASSERT_TRUE(m);
  const int V = m->config().vocab_size, n = int(kChatPrompt.size());
  auto d = m->make_decode_state(1, n);
  std::vector<float> all(size_t(n) * V), step(static_cast<size_t>(V));
  m->prefill(*d, 0, kChatPrompt.data(), nullptr, n, 0, Model::PrefillLogits::All, all.data());
  auto d2 = m->make_decode_state(1, n);
  for (int p = 0; p < n; ++p) {
    m->decode_step(*d2, &kChatPrompt[size_t(p)], nullptr, p, step.data());
    double worst = 0;
    for (int v = 0; v < V; ++v) worst = std::max(worst, double(std::abs(step[size_t(v)] - all[size_t(p) * V + v])));
    EXPECT_LT(worst, 2e-3) << "position " << p;
  }
}

// Prompts of different lengths share one batch: each sequence's greedy tokens equal its run alone.
// Six of them: on AMX the batch decodes on the tiles (from 5 sequences on) and each alone on the
// AVX512_BF16 kernel, two engines that must agree.
TEST_F(SmolLM2, BatchOfDifferentPromptsEqualsEachAlone) {
  auto m = load(DType::BF16);
  ASSERT_TRUE(m);
  const Tokenizer& t = *file_->info().tokenizer;
  std::vector<GenerationRequest> reqs;
  for (const char* text : {"The capital of France is", "Hello", "def fibonacci(n):\n    \"\"\"Return the n-th",
                           "Water boils at", "The three primary colours are", "import numpy as np\n"})
    reqs.push_back({*t.encode(text), {}});
  SampleConfig sc;
  sc.temperature = 0, sc.max_new_tokens = 10;
  auto batch = generate_text(*m, &t, reqs, sc, {});
  ASSERT_TRUE(batch.ok()) << batch.error().message;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto alone = generate_text(*m, &t, {reqs[i]}, sc, {});
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ((*batch)[i].tokens, (*alone)[0].tokens) << "prompt " << i;
  }
}

TEST_F(SmolLM2, PromptLongerThanTheContextIsAOneLineError) {
  auto m = load(DType::BF16);
  ASSERT_TRUE(m);
  SampleConfig sc;
  sc.max_new_tokens = 64;
  std::vector<int32_t> long_prompt(size_t(m->config().max_seq_len), 504);
  auto g = generate_text(*m, nullptr, {{long_prompt, {}}}, sc, {});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("exceed the context of 8192 positions"), std::string::npos) << g.error().message;
}

// A Free Transformer with random weights on SmolLM2's tokenizer: the latent policies' mechanics.
TEST_F(SmolLM2, RandomFreeTransformerLatentMechanics) {
  ModelConfig c = file_->info().config;
  c.n_layers = 4, c.dim = 128, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 32, c.ffn_hidden = 256;
  c.latent_bits = 8, c.inject_after = 2, c.max_seq_len = 256;
  auto file = random_model_file(c, file_->info().tokenizer, 7);
  auto m = file->load(*be_);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const std::vector<int32_t> prompt = *file_->info().tokenizer->encode("Once upon a time");
  SampleConfig sc;
  sc.temperature = 1.0f, sc.max_new_tokens = 12;
  const int n_in = int(prompt.size()) + sc.max_new_tokens - 1;
  const std::vector<uint32_t> z = uniform_codes(5, n_in, 8), z2 = uniform_codes(6, n_in, 8);
  // Same Z and same sampling seed: the same sequence; the codes are the ones given.
  auto g = generate_text(**m, nullptr,
                         {{prompt, {LatentPolicy::fixed(z), 1}},
                          {prompt, {LatentPolicy::fixed(z), 1}},
                          {prompt, {LatentPolicy::fixed(z2), 1}}},
                         sc, {});
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ((*g)[0].tokens, (*g)[1].tokens);
  EXPECT_EQ((*g)[0].codes, z);
  // Edited: the fixed codes with exactly the asked bits flipped; FromEncoder: the prompt's codes
  // sampled by the encoder reading the prompt, the prior's after it.
  auto e = generate_text(
      **m, nullptr,
      {{prompt, {LatentPolicy::edited(z, {{0, 3}, {5, 7}}), 1}}, {prompt, {LatentPolicy::from_encoder(9), 1}}}, sc, {});
  ASSERT_TRUE(e.ok()) << e.error().message;
  std::vector<uint32_t> flipped = z;
  flipped[0] ^= 1u << 3, flipped[5] ^= 1u << 7;
  EXPECT_EQ((*e)[0].codes, flipped);
  const std::vector<uint32_t> enc = encoder_prompt_codes(**m, prompt, 9), prior = uniform_codes(9, n_in, 8);
  for (int t = 0; t < n_in; ++t)
    EXPECT_EQ((*e)[1].codes[size_t(t)], t < int(prompt.size()) ? enc[size_t(t)] : prior[size_t(t)]) << t;
  // Another Z changes the next-token distribution after the prompt.
  auto d = (*m)->make_decode_state(2, int(prompt.size()));
  std::vector<float> a(size_t(c.vocab_size)), b(size_t(c.vocab_size));
  (*m)->prefill(*d, 0, prompt.data(), z.data(), int(prompt.size()), 0, Model::PrefillLogits::Last, a.data());
  (*m)->prefill(*d, 1, prompt.data(), z2.data(), int(prompt.size()), 0, Model::PrefillLogits::Last, b.data());
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, double(std::abs(a[i] - b[i])));
  EXPECT_GT(diff, 1e-4);
}

// ---- against Hugging Face transformers (tests/fixtures/real/README.md) ------------------------

std::vector<float> read_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// Tiny random Llama, Qwen2 and Mistral checkpoints written by transformers' save_pretrained (GQA,
// llama3 rope scaling, tied and untied, q/k/v and o biases, F16, BF16, shards, both config forms):
// our logits at every position of each sequence equal transformers' fp32 logits, and the greedy
// continuation equals its generate(), up to the first step whose top-2 margin is below 1e-3.
class TinyTransformersCheckpoint : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyTransformersCheckpoint, LogitsAndGreedyMatchTransformers) {
  const std::string dir = std::string(FTX_FIXTURE_DIR) + "/real/tiny_" + GetParam();
  auto j = nlohmann::json::parse(std::ifstream(dir + "/expected.json"));
  const std::vector<float> want = read_floats(dir + "/expected_logits.bin");
  auto file = ModelFile::open(dir);
  ASSERT_TRUE(file.ok()) << file.error().message;
  auto be = make_cpu_backend();
  auto m = (*file)->load(*be);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const int V = (*m)->config().vocab_size;
  for (const auto& seq : j["sequences"]) {
    const std::vector<int32_t> ids = seq["ids"].get<std::vector<int32_t>>();
    const size_t off = seq["logits_offset"].get<size_t>();
    const int n = int(ids.size());
    auto d = (*m)->make_decode_state(1, n);
    std::vector<float> got(size_t(n) * V);
    (*m)->prefill(*d, 0, ids.data(), nullptr, n, 0, Model::PrefillLogits::All, got.data());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, double(std::abs(got[i] - want[off + i])));
      scale = std::max(scale, double(std::abs(want[off + i])));
    }
    // fp32 against fp32 in another order; a bf16 checkpoint's weights are exact in both, an F16
    // one's are rounded to bf16. The AVX512_BF16 path also rounds the activations to bf16 inside
    // bf16 products (2^-9 relative each; 2.7% of the largest logit measured on these random
    // weights of std 0.2, whose logits reach 7): its own bound, and the AMX path's, which rounds alike.
    const double bound = cpu::cpu_isa() >= cpu::CpuIsa::Avx512Bf16 ? 5e-2 : 2e-2;
    EXPECT_LT(worst, bound * std::max(1.0, scale)) << n << " tokens";
    // Greedy continuation (temperature 0) up to the first near-tie.
    SampleConfig sc;
    sc.temperature = 0, sc.max_new_tokens = int(seq["greedy"].size());
    auto g = generate_text(**m, nullptr, {{ids, {}}}, sc, {});
    ASSERT_TRUE(g.ok()) << g.error().message;
    const auto greedy = seq["greedy"].get<std::vector<int32_t>>();
    const auto margins = seq["greedy_margins"].get<std::vector<double>>();
    for (size_t k = 0; k < greedy.size() && margins[k] > 1e-3 * std::max(1.0, scale); ++k)
      ASSERT_EQ((*g)[0].tokens[ids.size() + k], greedy[k]) << "greedy step " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, TinyTransformersCheckpoint,
                         ::testing::Values("gqa_llama3", "gqa_llama3_v4form", "sharded", "tied_bias", "f16", "qwen2",
                                           "mistral"));

// SmolLM2 loaded by transformers from the same GGUF: last-position logits of each prompt.
TEST_F(SmolLM2, LastLogitsMatchTransformers) {
  const std::string dir = std::string(FTX_FIXTURE_DIR) + "/real/smollm2_q4_1";
  auto j = nlohmann::json::parse(std::ifstream(dir + "/expected.json"));
  const std::vector<float> want = read_floats(dir + "/last_logits.bin");
  auto m = load(DType::F32);
  ASSERT_TRUE(m);
  const int V = m->config().vocab_size;
  size_t k = 0;
  for (const auto& p : j["prompts"]) {
    const std::vector<int32_t> ids = p["ids"].get<std::vector<int32_t>>();
    auto d = m->make_decode_state(1, int(ids.size()));
    std::vector<float> got(static_cast<size_t>(V));
    m->prefill(*d, 0, ids.data(), nullptr, int(ids.size()), 0, Model::PrefillLogits::Last, got.data());
    double worst = 0;
    for (int v = 0; v < V; ++v) worst = std::max(worst, double(std::abs(got[size_t(v)] - want[k * V + size_t(v)])));
    EXPECT_LT(worst, 2e-2) << p["name"].get<std::string>();
    ++k;
  }
}

TEST(ModelFileErrors, MissingAndForeignFiles) {
  auto missing = ModelFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("/nonexistent/model.gguf"), std::string::npos);
  auto foreign = ModelFile::open("/etc/hostname");
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.error().message.find("/etc/hostname"), std::string::npos) << foreign.error().message;
}

}  // namespace
}  // namespace ftx
