#include "core/io/model_file.h"

#include <omp.h>

#include <cmath>
#include <deque>
#include <filesystem>
#include <unordered_map>

#include "core/io/gguf.h"
#include "core/io/gguf_llama.h"
#include "core/io/hf_checkpoint.h"
#include "core/io/safetensors.h"
#include "core/model/params.h"
#include "core/text/bpe_tokenizer.h"
#include "kernels/base/philox.h"

namespace ftx {
namespace {

int64_t model_params(const ModelConfig& c) { return param_count(param_specs(c)); }

// Takes every tensor of the model through `take` (in parameter order, reporting progress), then
// builds the inference model on what was taken.
Result<std::unique_ptr<Model>> build(Backend& backend, const ModelConfig& cfg, const ModelFile::Progress& progress,
                                     const std::function<Result<WeightRef>(const ParamSpec&)>& take) {
  const std::vector<ParamSpec> specs = param_specs(cfg);
  std::unordered_map<std::string, WeightRef> taken;
  int64_t done = 0;
  const int64_t total = param_count(specs);
  for (const ParamSpec& s : specs) {
    auto w = take(s);
    if (!w) return w.error();
    taken[s.name] = *w;
    done += s.numel;
    if (progress) progress(done, total);
  }
  return Model::create_inference(backend, cfg, [&](const ParamSpec& s) { return taken.at(s.name); });
}

// ---- Hugging Face layout --------------------------------------------------------------------

class HfModelFile : public ModelFile {
 public:
  explicit HfModelFile(HfCheckpoint ck) : ck_(std::move(ck)) {}
  Status describe() {
    const std::string& dir = ck_.dir();
    info_.path = dir;
    info_.format = "safetensors";
    info_.name = std::filesystem::path(dir).lexically_normal().filename().string();
    if (info_.name.empty()) info_.name = std::filesystem::path(dir).parent_path().filename().string();
    info_.config = ck_.config();
    if (!ck_.tokenizer_json_path().empty()) {
      auto t = bpe_from_tokenizer_json(ck_.tokenizer_json_path());
      if (!t) return t.error();
      if (auto fits = check_tokenizer_fits(**t, info_.config.vocab_size); !fits)
        return make_error(ck_.tokenizer_json_path() + ": " + fits.error().message);
      info_.add_bos = (*t)->add_bos();
      info_.tokenizer = std::shared_ptr<const Tokenizer>(std::move(*t));
    } else {
      info_.tokenizer = ck_.config_tokenizer();
    }
    info_.eos_ids = ck_.eos_ids();
    if (info_.eos_ids.empty() && info_.tokenizer && info_.tokenizer->special_tokens().eos)
      info_.eos_ids.push_back(*info_.tokenizer->special_tokens().eos);
    info_.chat_template = ck_.chat_template();
    for (const HfTensor& t : ck_.tensors()) info_.tensors.push_back({t.name, dtype_name(t.dtype), t.shape, t.bytes});
    info_.n_params = model_params(info_.config);
    info_.file_bytes = uint64_t(ck_.file_bytes());
    return {};
  }
  Result<std::unique_ptr<Model>> load(Backend& backend, const Progress& progress, DType gemm_dtype) override {
    (void)gemm_dtype;  // the file's dtype
    return build(backend, info_.config, progress, [&](const ParamSpec& s) -> Result<WeightRef> {
      FTX_TRY(ck_.check_finite(s));
      return ck_.tensor_for(s);
    });
  }

 private:
  HfCheckpoint ck_;
};

// ---- GGUF -----------------------------------------------------------------------------------

class GgufModelFile : public ModelFile {
 public:
  GgufModelFile(GgufFile f, GgufLlama m) : file_(std::move(f)), m_(std::move(m)) {}
  Status describe() {
    info_.path = file_.path();
    info_.format = "gguf";
    info_.name = m_.name.empty() ? std::filesystem::path(file_.path()).stem().string() : m_.name;
    info_.config = m_.config;
    auto t = bpe_from_vocab(m_.vocab, file_.path());
    if (!t) return t.error();
    info_.add_bos = (*t)->add_bos();
    info_.tokenizer = std::shared_ptr<const Tokenizer>(std::move(*t));
    info_.eos_ids = m_.eos_ids;
    info_.chat_template = m_.chat_template;
    for (const GgufTensor& t : file_.tensors())
      info_.tensors.push_back({t.name, ggml_type_name(t.type), t.shape(), t.nbytes});
    info_.n_params = model_params(info_.config);
    info_.file_bytes = file_.file_size();
    return {};
  }
  // Every weight dequantized at load: GEMM weights to bf16, the rest to fp32, into buffers this
  // object keeps for the model's lifetime.
  Result<std::unique_ptr<Model>> load(Backend& backend, const Progress& progress, DType gemm_dtype) override {
    bf16_.clear(), f32_.clear();
    return build(backend, info_.config, progress, [&](const ParamSpec& s) -> Result<WeightRef> {
      if (s.gemm_weight && gemm_dtype == DType::BF16) {
        std::vector<uint16_t>& buf = bf16_.emplace_back(size_t(s.numel));
        FTX_TRY(gguf_tensor_bf16(file_, m_, s.name, buf.data(), s.numel));
        FTX_TRY(check_finite_values(file_.path(), s.name, SafetensorsDType::BF16, buf.data(), s.numel));
        return bf16_weight(buf.data());
      }
      std::vector<float>& buf = f32_.emplace_back(size_t(s.numel));
      FTX_TRY(gguf_tensor_f32(file_, m_, s.name, buf.data(), s.numel));
      FTX_TRY(check_finite_values(file_.path(), s.name, SafetensorsDType::F32, buf.data(), s.numel));
      return f32_weight(buf.data());
    });
  }

 private:
  GgufFile file_;
  GgufLlama m_;
  std::deque<std::vector<uint16_t>> bf16_;  // deque: elements stay where they are as it grows
  std::deque<std::vector<float>> f32_;
};

// ---- random weights -------------------------------------------------------------------------

class RandomModelFile : public ModelFile {
 public:
  RandomModelFile(const ModelConfig& c, std::shared_ptr<const Tokenizer> t, uint64_t seed) : seed_(seed) {
    info_.path = "(random)";
    info_.format = "random";
    info_.name = "random init";
    info_.config = c;
    info_.tokenizer = std::move(t);
    if (info_.tokenizer && info_.tokenizer->special_tokens().eos)
      info_.eos_ids.push_back(*info_.tokenizer->special_tokens().eos);
    for (const ParamSpec& s : param_specs(c))
      info_.tensors.push_back(
          {s.name, s.gemm_weight ? "BF16" : "F32", s.shape, uint64_t(s.numel) * (s.gemm_weight ? 2 : 4)});
    info_.n_params = model_params(c);
  }
  // N(0, 0.02) weights (Philox, parallel over blocks of 4 values), norms 1, biases 0, zeta N(0, 1).
  Result<std::unique_ptr<Model>> load(Backend& backend, const Progress& progress, DType gemm_dtype) override {
    bf16_.clear(), f32_.clear();
    int64_t index = 0;
    return build(backend, info_.config, progress, [&](const ParamSpec& s) -> Result<WeightRef> {
      const uint64_t stream = kStreamInit + uint64_t(index++);
      const float std = s.name == "free.zeta" ? 1.0f : 0.02f;
      auto normal = [&](int64_t i) {
        const Philox4 r = philox_block(seed_, stream, uint64_t(i) / 2);
        const int k = int(i % 2) * 2;
        const float u1 = std::max(float(r.v[k] >> 8) * (1.0f / 16777216.0f), 1e-7f);
        const float u2 = float(r.v[k + 1] >> 8) * (1.0f / 16777216.0f);
        return std * std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530718f * u2);
      };
      if (s.gemm_weight && gemm_dtype == DType::BF16) {
        std::vector<uint16_t>& buf = bf16_.emplace_back(size_t(s.numel));
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < s.numel; ++i) buf[size_t(i)] = fp32_to_bf16(normal(i));
        return bf16_weight(buf.data());
      }
      std::vector<float>& buf = f32_.emplace_back(size_t(s.numel));
#pragma omp parallel for schedule(static) if (s.numel > (1 << 16))
      for (int64_t i = 0; i < s.numel; ++i)
        buf[size_t(i)] = s.init == ParamInit::Normal ? normal(i) : fixed_init_value(s.init, i);
      return f32_weight(buf.data());
    });
  }

 private:
  uint64_t seed_;
  std::deque<std::vector<uint16_t>> bf16_;
  std::deque<std::vector<float>> f32_;
};

}  // namespace

Result<std::unique_ptr<ModelFile>> ModelFile::open(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    auto ck = HfCheckpoint::open(path);
    if (!ck) return ck.error();
    auto f = std::make_unique<HfModelFile>(std::move(*ck));
    FTX_TRY(f->describe());
    return std::unique_ptr<ModelFile>(std::move(f));
  }
  if (!std::filesystem::exists(path, ec)) return make_error(path + ": no such file or directory");
  auto g = GgufFile::open(path);
  if (!g) {
    // Not a GGUF file at all: say what is expected rather than "bad magic".
    if (!path.ends_with(".gguf") && g.error().message.find("magic") != std::string::npos)
      return make_error(path + ": not a model (expected a checkpoint directory or a .gguf file)");
    return g.error();
  }
  auto m = read_gguf_llama(*g);
  if (!m) return m.error();
  auto f = std::make_unique<GgufModelFile>(std::move(*g), std::move(*m));
  FTX_TRY(f->describe());
  return std::unique_ptr<ModelFile>(std::move(f));
}

std::unique_ptr<ModelFile> random_model_file(const ModelConfig& config, std::shared_ptr<const Tokenizer> tokenizer,
                                             uint64_t seed) {
  return std::make_unique<RandomModelFile>(config, std::move(tokenizer), seed);
}

}  // namespace ftx
