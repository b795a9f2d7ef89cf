// ModelLm (core/eval/bench/model_lm.h), the model side of benchmarks, against transformers:
// lm-evaluation-harness tokenization of (context, continuation) requests and the summed
// log-likelihoods of SmolLM2-135M-Instruct, and greedy generations
// (tests/fixtures/real/make_bench_fixtures.py wrote the reference).
#include "core/eval/bench/model_lm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/io/model_file.h"
#include "core/sample/sampler.h"
#include "kernels/backend.h"
#include "kernels/base/philox.h"
#include "tests/real_model.h"

namespace ftx {
namespace {

using bench::GenRequest;
using bench::LoglikRequest;
using bench::ModelLm;

nlohmann::json reference() {
  std::ifstream f(std::string(FTX_FIXTURE_DIR) + "/real/smollm2_q4_1/loglik.json");
  return nlohmann::json::parse(f);
}

class ModelLmSmolLM2 : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = test::smollm2_gguf_path();
    REQUIRE_REAL_MODEL(path);
    auto f = ModelFile::open(path);
    ASSERT_TRUE(f.ok()) << f.error().message;
    file_ = std::move(*f);
    be_ = make_cpu_backend();
    // fp32 weights: the reference is transformers in float32 on the same dequantized values.
    auto m = file_->load(*be_, {}, DType::F32);
    ASSERT_TRUE(m.ok()) << m.error().message;
    model_ = std::move(*m);
    const ModelInfo& info = file_->info();
    lm_ = std::make_unique<ModelLm>(*model_, *info.tokenizer, info.add_bos, 0, info.eos_ids);
  }
  std::unique_ptr<ModelFile> file_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ModelLm> lm_;
};

TEST_F(ModelLmSmolLM2, TokenizesRequestsAsLmEvalAndMatchesTransformersLogLikelihoods) {
  const nlohmann::json ref = reference();
  std::vector<LoglikRequest> reqs;
  for (const auto& r : ref["requests"]) reqs.push_back({r["context"], r["continuation"]});
  // The fixture already moved trailing spaces; request 1 gives the unmoved form of request 0.
  reqs[1] = {"The capital of France is ", "Paris"};
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto e = lm_->encode_request(reqs[i]);
    ASSERT_TRUE(e.ok()) << e.error().message;
    EXPECT_EQ(e->tokens, ref["requests"][i]["tokens"].get<std::vector<int32_t>>()) << "request " << i;
    EXPECT_EQ(e->continuation_start, ref["requests"][i]["continuation_start"].get<int>()) << "request " << i;
  }
  auto got = lm_->loglikelihood(reqs);
  ASSERT_TRUE(got.ok()) << got.error().message;
  ASSERT_EQ(got->size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& r = ref["requests"][i];
    // fp32 on both sides; sums of up to 12 tokens' log-probs agree to about 1e-4 per token.
    EXPECT_NEAR((*got)[i].logprob, r["logprob"].get<double>(), 2e-3) << "request " << i;
    EXPECT_EQ((*got)[i].n_tokens, static_cast<int>(r["tokens"].size()) - r["continuation_start"].get<int>());
  }
  // Batching is invisible: one request alone scores as it did among the others.
  auto alone = lm_->loglikelihood({reqs[9]});
  ASSERT_TRUE(alone.ok());
  EXPECT_NEAR((*alone)[0].logprob, (*got)[9].logprob, 1e-4);
}

TEST_F(ModelLmSmolLM2, GreedyGenerationsEqualTransformers) {
  const nlohmann::json ref = reference();
  std::vector<GenRequest> reqs;
  for (const auto& g : ref["greedy"])
    reqs.push_back({.prompt = g["prompt"], .stop = {}, .max_new_tokens = g["max_new_tokens"].get<int>()});
  auto got = lm_->generate(reqs);
  ASSERT_TRUE(got.ok()) << got.error().message;
  // transformers does not stop at <|im_end|>; ours does (an end-of-generation id), without its text.
  std::string want1 = ref["greedy"][1]["text"];
  want1 = want1.substr(0, want1.find("<|im_end|>"));
  EXPECT_EQ((*got)[0], ref["greedy"][0]["text"].get<std::string>());
  EXPECT_EQ((*got)[1], want1);
  // A stop string cuts the text before it.
  reqs[0].stop = {"\n\n"};
  auto cut = lm_->generate({reqs[0]});
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ((*cut)[0], "```");
}

// End to end against lm-evaluation-harness: its MMLU, HellaSwag and ARC runs with a tiny Llama
// through transformers (tests/fixtures/make_lmeval_fixtures.py) logged every request's
// log-likelihood; our tasks through ModelLm on the same checkpoint give the same log-likelihoods
// (fp32 on both sides: within 1e-4 nats) and the same choice for every item.
TEST(ModelLmLmEval, SameLogLikelihoodsAndChoicesAsLmEvalOnTheSameModel) {
  const std::string dir = std::string(FTX_FIXTURE_DIR) + "/bench/";
  auto f = ModelFile::open(dir + "lmeval_llama");
  ASSERT_TRUE(f.ok()) << f.error().message;
  auto be = make_cpu_backend();
  auto model = (*f)->load(*be, {}, DType::F32);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const ModelInfo& info = (*f)->info();
  ASSERT_TRUE(info.tokenizer);
  const bench::TokenRoles roles = bench::token_roles(*info.tokenizer);
  ModelLm lm(**model, *info.tokenizer, roles.add_bos, roles.prefix_id, roles.eos_ids);
  // Records what the tasks ask and what the model answers.
  struct Recorder final : bench::LanguageModel {
    ModelLm& inner;
    std::map<std::pair<std::string, std::string>, double> seen;
    explicit Recorder(ModelLm& m) : inner(m) {}
    Result<std::vector<bench::LoglikResult>> loglikelihood(const std::vector<LoglikRequest>& rs) override {
      auto out = inner.loglikelihood(rs);
      if (out)
        for (size_t i = 0; i < rs.size(); ++i) seen[{rs[i].context, rs[i].continuation}] = (*out)[i].logprob;
      return out;
    }
    Result<std::vector<std::string>> generate(const std::vector<GenRequest>& rs) override { return inner.generate(rs); }
  } rec(lm);
  std::ifstream in(dir + "lmeval_choice.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  int items = 0, requests = 0;
  for (const auto& [name, t] : ref["tasks"].items()) {
    SCOPED_TRACE(name);
    auto task = name == "mmlu" ? bench::load_task(name, dir + "mmlu.jsonl", dir + "mmlu_dev.jsonl")
                               : bench::load_task(name, dir + name + ".jsonl");
    ASSERT_TRUE(task.ok()) << task.error().message;
    std::vector<size_t> all((*task)->size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    bench::EvalOptions o;
    o.shots = t["num_fewshot"];
    auto r = (*task)->evaluate(rec, all, o);
    ASSERT_TRUE(r.ok()) << r.error().message;
    for (size_t k = 0; k < r->items.size(); ++k) {
      const auto& want = t["items"][k];
      for (const auto& q : want["requests"]) {
        auto at = rec.seen.find({q["context"], q["continuation"]});
        ASSERT_NE(at, rec.seen.end()) << "request not made: " << q["continuation"];
        EXPECT_NEAR(at->second, q["loglik"].get<double>(), 1e-4) << q["continuation"];
        ++requests;
      }
      EXPECT_EQ(r->items[k].detail["pred"]["acc"], want["pred"]) << "item " << k;
      EXPECT_EQ(r->items[k].detail["pred"]["acc_char"], want["pred_norm"]) << "item " << k;
      ++items;
    }
  }
  EXPECT_EQ(items, 18);
  EXPECT_GT(requests, 60);
}

// A Free Transformer scores with Z from the prior: log of the mean probability over K draws, each
// draw's codes the same whatever the batch. Checked against forward passes with those codes.
TEST(ModelLmFree, LogLikelihoodIsLogMeanOverPriorDraws) {
  auto be = make_cpu_backend();
  ModelConfig cfg;
  cfg.vocab_size = 29, cfg.latent_bits = 4, cfg.max_seq_len = 64;
  Model model(*be, cfg);
  model.init_weights(3, InitConfig{.post_sampler_std = 1.0f, .post_sampler_bitlinear = false});
  struct Bytes final : Tokenizer {  // one token per byte value below 29
    std::string type() const override { return "test"; }
    int vocab_size() const override { return 29; }
    Result<std::vector<int32_t>> encode(std::string_view t) const override {
      std::vector<int32_t> ids;
      for (char c : t) ids.push_back(static_cast<unsigned char>(c) % 29);
      return ids;
    }
    std::string_view token_bytes(int32_t) const override { return "?"; }
    std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<Bytes>(); }
  } tok;
  const int K = 3;
  ModelLm lm(model, tok, false, 0, {}, bench::ModelLmOptions{.latent_draws = K, .seed = 7});
  const std::vector<LoglikRequest> reqs = {{"abcdefgh", "ijk"}, {"hello there", " you"}};
  auto got = lm.loglikelihood(reqs);
  ASSERT_TRUE(got.ok());
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto e = lm.encode_request(reqs[i]);
    ASSERT_TRUE(e.ok());
    const int T = static_cast<int>(e->tokens.size()) - 1;
    auto state = model.make_state(1, T);
    double mean_p = 0, lo = 1e9, hi = -1e9;
    for (int k = 0; k < K; ++k) {
      uint64_t h = 1469598103934665603ull;  // FNV-1a of the context: the draws' key
      for (unsigned char c : reqs[i].context) h = (h ^ c) * 1099511628211ull;
      const auto codes = uniform_codes(derive_seed(7, h, k), T, cfg.latent_bits);
      model.forward(*state, e->tokens.data(), e->tokens.data() + 1, codes.data(), 0, 0, 0.0f);
      std::vector<float> loss(T);
      model.read_token_losses(*state, loss.data());
      double lp = 0;
      for (int p = e->continuation_start - 1; p < T; ++p) lp -= loss[p];
      mean_p += std::exp(lp) / K, lo = std::min(lo, lp), hi = std::max(hi, lp);
    }
    EXPECT_LT(hi - lo, 50.0);
    EXPECT_GT(hi - lo, 1e-4) << "the draws of Z should change the likelihood of a random model";
    EXPECT_NEAR((*got)[i].logprob, std::log(mean_p), 1e-4) << "request " << i;
  }
}

}  // namespace
}  // namespace ftx
