#include "core/io/model_params.h"

#include <cstring>

#include "core/model/params.h"
#include "kernels/backend.h"

namespace ftx {

Result<ModelParams> read_model_params(const std::string& path) {
  auto file = ModelFile::open(path);
  if (!file) return file.error();
  // The inference model on the CPU backend keeps every tensor in host memory (fp32 where the
  // file's dtype allows, the file's bf16 otherwise): its tensors() are read back, widened.
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  auto model = (*file)->load(*cpu, {}, DType::F32);
  if (!model) return model.error();
  ModelParams out;
  out.info = (*file)->info();
  const std::vector<ParamSpec>& specs = (*model)->specs();
  out.params.resize(size_t(param_count(specs)));
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& s = specs[i];
    const WeightRef w = (*model)->tensors()[i];
    float* dst = out.params.data() + s.offset;
    if (w.dtype == DType::F32) {
      std::memcpy(dst, w.f32(), size_t(s.numel) * sizeof(float));
    } else if (w.dtype == DType::BF16) {
      const uint16_t* src = w.bf16();
      for (int64_t k = 0; k < s.numel; ++k) dst[k] = bf16_to_fp32(src[k]);
    } else {
      return make_error(path + ": tensor " + s.name + " is " + dtype_name(w.dtype) + ", not readable as fp32");
    }
  }
  return out;
}

}  // namespace ftx

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/io/checkpoint.h"

namespace ftx {

Result<ModelConfig> upcycle_model_file(const std::string& from, const UpcycleOptions& opt, float kappa_nats,
                                       const std::string& out_dir) {
  auto src = read_model_params(from);
  if (!src) return src.error();
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  auto up = upcycle(*cpu, src->info.config, src->params, opt);
  if (!up) return make_error(from + ": " + up.error().message);
  src->params = {};  // the source's arena is no longer needed: the checkpoint is built next
  CheckpointData ck;
  ck.config = up->config;
  ck.tokenizer = src->info.tokenizer;
  ck.params = std::move(up->params);
  FTX_TRY(save_checkpoint(out_dir, ck));
  // Beside the checkpoint (which has no training state, hence no trainer.json): how it was made.
  nlohmann::json rec{{"upcycled_from", from},
                     {"latent_bits", opt.latent_bits},
                     {"post_sampler", opt.bitlinear_post_sampler ? "bitlinear" : "zero"},
                     {"seed", opt.seed}};
  if (kappa_nats >= 0) rec["train"] = {{"kappa_nats", kappa_nats}};
  const std::string path = (std::filesystem::path(out_dir) / kUpcycleFileName).string();
  std::ofstream out(path);
  out << rec.dump(2) << "\n";
  if (!out.flush()) return make_error(path + ": cannot write");
  return ck.config;
}

float recorded_kappa_nats(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::path(path) / kUpcycleFileName;
  if (!std::filesystem::is_regular_file(p, ec)) return -1;
  std::ifstream in(p);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("train") || !j["train"].is_object()) return -1;
  const nlohmann::json& k = j["train"].value("kappa_nats", nlohmann::json());
  return k.is_number() && k.get<double>() >= 0 ? k.get<float>() : -1;
}

}  // namespace ftx
