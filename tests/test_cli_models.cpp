// The ftx commands on model files (inspect, tokenize, generate --checkpoint, score, bench generate)
// as a user runs them, and their answers to bad input: one line "ftx: PATH: problem" on stderr,
// exit code 1, never a crash or a hang. The readers' own tests (test_gguf, test_hf_checkpoint,
// test_bpe) cover every defect in detail; here each kind reaches the command line once.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/real_model.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

namespace fs = std::filesystem;
using test::Outcome;

const std::string kFixtures = std::string(FTX_FIXTURE_DIR) + "/real";

constexpr auto ftx = test::run_ftx;
using test::describe;
using test::expect_one_line_error;

void copy_prefix(const std::string& from, const std::string& to, size_t bytes) {
  std::ifstream in(from, std::ios::binary);
  std::string data(bytes, '\0');
  in.read(data.data(), std::streamsize(bytes));
  data.resize(size_t(in.gcount()));
  std::ofstream(to, std::ios::binary) << data;
}

class CliModels : public test::TempDirTest {
 protected:
  CliModels() : TempDirTest("ftx_test_cli_models_") {}
  // A copy of a tiny fixture checkpoint to damage.
  std::string copy_tiny(const std::string& name) {
    const std::string dst = dir_ + "/" + name;
    fs::copy(kFixtures + "/tiny_" + name, dst, fs::copy_options::recursive);
    return dst;
  }
};

TEST_F(CliModels, InspectReadsTheHeaders) {
  const Outcome r = ftx({"inspect", kFixtures + "/tiny_gqa_llama3", "--json"}, dir_);
  ASSERT_EQ(r.code, 0) << describe(r);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "safetensors");
  EXPECT_EQ(j["rope_scaling"], "llama3");
  EXPECT_EQ(j["kv_heads"], 2);
  EXPECT_EQ(j["free_transformer"], false);
}

TEST_F(CliModels, BadFilesAreOneLineErrors) {
  // A truncated safetensors shard.
  const std::string cut = copy_tiny("tied_bias");
  const auto size = fs::file_size(cut + "/model.safetensors");
  fs::resize_file(cut + "/model.safetensors", size - 100);
  expect_one_line_error(ftx({"inspect", cut}, dir_), {cut + "/model.safetensors"});
  // An index naming a shard that is not there.
  const std::string sharded = copy_tiny("sharded");
  std::string shard;
  for (const auto& e : fs::directory_iterator(sharded))
    if (e.path().filename().string().starts_with("model-")) shard = e.path().filename().string();
  ASSERT_FALSE(shard.empty());
  fs::remove(sharded + "/" + shard);
  expect_one_line_error(ftx({"inspect", sharded}, dir_), {shard});
  // Shapes that disagree with config.json.
  const std::string shapes = copy_tiny("mistral");
  auto cfg = nlohmann::json::parse(std::ifstream(shapes + "/config.json"));
  cfg["intermediate_size"] = cfg["intermediate_size"].get<int>() + 8;
  std::ofstream(shapes + "/config.json") << cfg.dump();
  expect_one_line_error(ftx({"inspect", shapes}, dir_), {"mlp"});
  // A tokenizer.json with a broken merge.
  const std::string tok = copy_tiny("gqa_llama3");
  std::ofstream(tok + "/tokenizer.json")
      << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a"]}, "decoder": {"type": "ByteLevel"}})";
  expect_one_line_error(ftx({"inspect", tok}, dir_), {tok + "/tokenizer.json"});
  // Not a model at all.
  expect_one_line_error(ftx({"inspect", "/etc/hostname"}, dir_), {"/etc/hostname"});
}

TEST_F(CliModels, BadGgufFilesAreOneLineErrors) {
  const std::string gguf = test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(gguf);
  // Truncated inside the header and inside the tensor data.
  for (size_t bytes : {size_t(1000), size_t(5'000'000)}) {
    const std::string cut = dir_ + "/cut" + std::to_string(bytes) + ".gguf";
    copy_prefix(gguf, cut, bytes);
    expect_one_line_error(ftx({"inspect", cut}, dir_), {cut});
  }
  // An unknown ggml type id in the first tensor's info.
  const std::string bad = dir_ + "/badtype.gguf";
  fs::copy_file(gguf, bad);
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    std::string head(2'000'000, '\0');
    f.read(head.data(), std::streamsize(head.size()));
    const std::string name = "token_embd.weight";
    const size_t at = head.find(name);  // name, then n_dims (u32), dims (2 x u64), type (u32)
    ASSERT_NE(at, std::string::npos);
    f.seekp(std::streamoff(at + name.size() + 4 + 16));
    const uint32_t type = 99;
    f.write(reinterpret_cast<const char*>(&type), 4);
  }
  expect_one_line_error(ftx({"inspect", bad}, dir_), {bad, "99"});
}

TEST_F(CliModels, TokenizeAndGenerateOnSmolLM2) {
  const std::string gguf = test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(gguf);
  Outcome r = ftx({"tokenize", "--checkpoint", gguf, "--text", "The capital of France is"}, dir_);
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(r.out, "504 3575 282 4649 314\n");
  r = ftx({"tokenize", "--checkpoint", gguf, "--decode", "--text", "504 3575 282 4649 314"}, dir_);
  EXPECT_EQ(r.out, "The capital of France is\n");
  expect_one_line_error(ftx({"tokenize", "--checkpoint", gguf, "--decode", "--text", "504 99999"}, dir_), {"99999"});

  r = ftx({"generate", "--checkpoint", gguf, "--chat", "--prompt", "What is the capital of France?", "--temperature",
           "0", "--max-new-tokens", "16", "--json"},
          dir_);
  ASSERT_EQ(r.code, 0) << describe(r);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["text"], "The capital of France is Paris.");
  EXPECT_EQ(j["finish"], "eos");

  // A prompt and a length beyond the context; fixed-Z groups on a plain decoder.
  expect_one_line_error(ftx({"generate", "--checkpoint", gguf, "--prompt", "Hi", "--max-new-tokens", "9000"}, dir_),
                        {"exceed the context of 8192"});
  expect_one_line_error(ftx({"generate", "--checkpoint", gguf, "--prompt", "Hi", "--fixed-groups", "2"}, dir_),
                        {"plain decoder"});
}

// A Free Transformer with random weights on SmolLM2's tokenizer: independent and fixed-Z groups.
// ftx tokenize --kinds: a corpus folder with one subfolder per kind becomes a token file and
// DATA.kinds.json (each kind's documents, tokens, token share, and the chance agreement); a bad
// corpus is one line naming the file or folder, and nothing is written.
TEST_F(CliModels, TokenizeACorpusOfKinds) {
  const std::string gguf = test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(gguf);
  const std::string corpus = in_dir("corpus"), out = in_dir("kinds.tok");
  fs::create_directories(corpus + "/python/lib");
  fs::create_directories(corpus + "/prose");
  std::ofstream(corpus + "/python/a.py") << "import os\n\ndef f(x):\n    return os.path.join(x, 'y')\n";
  std::ofstream(corpus + "/python/lib/b.py") << "class A:\n    pass\n";
  std::ofstream(corpus + "/prose/licence") << "You may copy and distribute verbatim copies of this document.\n";
  const std::vector<std::string> cmd = {"tokenize", "--checkpoint", gguf, "--input", corpus, "--out", out, "--kinds"};
  auto with = [&](const std::string& kinds) {
    std::vector<std::string> c = cmd;
    c.push_back(kinds);
    return ftx(c, dir_);
  };
  Outcome r = with("python,prose");
  ASSERT_EQ(r.code, 0) << describe(r);
  std::ifstream in(out + ".kinds.json");
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["kinds"].size(), 2u);
  EXPECT_EQ(j["kinds"][0]["kind"], "python");
  EXPECT_EQ(j["kinds"][0]["documents"], 2);
  EXPECT_EQ(j["kinds"][1]["documents"], 1);
  const double a = j["kinds"][0]["token_share"], b = j["kinds"][1]["token_share"];
  EXPECT_NEAR(a + b, 1.0, 1e-12);
  EXPECT_NEAR(double(j["chance_agreement"]), a * a + b * b, 1e-12);
  fs::remove(out);
  fs::remove(out + ".kinds.json");

  auto refused = [&](const std::string& kinds, const std::vector<std::string>& needles) {
    expect_one_line_error(with(kinds), needles);
    EXPECT_FALSE(fs::exists(out)) << "nothing written";
    EXPECT_FALSE(fs::exists(out + ".kinds.json")) << "nothing written";
  };
  refused("python,prose,perl", {corpus + "/perl", "no files of kind perl"});
  refused("python,,prose", {"--kinds"});
  std::ofstream(corpus + "/stray.txt") << "hello\n";
  refused("python,prose", {corpus + "/stray.txt", "not in a kind folder"});
  fs::remove(corpus + "/stray.txt");
  std::ofstream(corpus + "/python/bin.py", std::ios::binary) << std::string("x = 1\0\1", 7);
  refused("python,prose", {corpus + "/python/bin.py", "binary"});
  std::ofstream(corpus + "/python/bin.py", std::ios::binary) << "x = '\xff'\n";
  refused("python,prose", {corpus + "/python/bin.py", "not UTF-8"});
  std::ofstream(corpus + "/python/bin.py", std::ios::trunc);
  refused("python,prose", {corpus + "/python/bin.py", "empty"});
  fs::remove(corpus + "/python/bin.py");
  const std::string nothing = in_dir("nothing");
  fs::create_directories(nothing);
  expect_one_line_error(
      ftx({"tokenize", "--checkpoint", gguf, "--input", nothing, "--out", out, "--kinds", "python"}, dir_),
      {nothing, "no files"});
}

TEST_F(CliModels, RandomFreeTransformerGroups) {
  const std::string gguf = test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(gguf);
  const Outcome r =
      ftx({"generate", "--checkpoint", gguf, "--random-init", "--latent-bits", "4", "--prompt", "Once upon a time",
           "--max-new-tokens", "4", "--independent", "2", "--fixed-groups", "1", "--group-size", "2", "--json"},
          dir_);
  ASSERT_EQ(r.code, 0) << describe(r);
  std::vector<nlohmann::json> rows;
  for (size_t at = 0, nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1)
    rows.push_back(nlohmann::json::parse(r.out.substr(at, nl - at)));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["policy"], "independent");
  EXPECT_NE(rows[0]["codes"], rows[1]["codes"]) << "independent sequences draw their own Z";
  EXPECT_EQ(rows[2]["policy"], "fixed");
  EXPECT_EQ(rows[2]["codes"], rows[3]["codes"]) << "a fixed group shares one Z";
}

TEST_F(CliModels, ScoreAGgufFile) {
  const std::string gguf = test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(gguf);
  const std::string in = dir_ + "/in.json";
  std::ofstream(in) << R"({"tokens": [[504, 3575, 282, 4649, 314, 7042]]})";
  const Outcome r = ftx({"score", "--checkpoint", gguf, "--input", in}, dir_);
  ASSERT_EQ(r.code, 0) << describe(r);
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["logprobs"][0].size(), 5u);
  // "The capital of France is" -> " Paris": likely.
  EXPECT_GT(j["logprobs"][0][4].get<double>(), -3.0);
  std::ofstream(in) << R"({"tokens": [[504, 49152]]})";
  expect_one_line_error(ftx({"score", "--checkpoint", gguf, "--input", in}, dir_), {in, "49152"});
}

}  // namespace
}  // namespace ftx
