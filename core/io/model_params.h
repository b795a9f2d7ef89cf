// The fp32 parameters of a model file, whatever its format (core/io/model_file.h): what training
// starts from when it starts from a real model (ftx upcycle, ftx train --init). GGUF tensors are
// dequantized to fp32 (quantized blocks expand exactly), BF16/F16 tensors widened exactly, F32
// copied: the arena holds the very values the file's inference model computes with in fp32.
//
// Deliberately not here: changing the model (core/model/upcycle.h), writing (core/io/checkpoint.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/io/model_file.h"
#include "kernels/base/result.h"

namespace ftx {

struct ModelParams {
  ModelInfo info;             // config, tokenizer, name of the file
  std::vector<float> params;  // arena order of param_specs(info.config)
};

// Opens `path` (a checkpoint directory, ours or Hugging Face's, or a .gguf file) and reads every
// parameter in fp32. Errors are the file's one-line errors.
Result<ModelParams> read_model_params(const std::string& path);

}  // namespace ftx

#include "core/model/upcycle.h"

namespace ftx {

// ftx upcycle: reads the Llama-family model at `from`, upcycles it (core/model/upcycle.h) and
// writes the checkpoint directory `out_dir` (config.json with "free_transformer" when H > 0,
// model.safetensors in F32, the file's tokenizer). upcycle.json beside records where it came from
// and, when kappa_nats >= 0, {"train": {"kappa_nats": ...}}: the kappa `ftx train --init` uses.
// Returns the written model's config. Errors name `from` (not a plain decoder, bad H, routing
// that does not fit) or `out_dir`.
Result<ModelConfig> upcycle_model_file(const std::string& from, const UpcycleOptions& opt, float kappa_nats,
                                       const std::string& out_dir);

inline constexpr const char* kUpcycleFileName = "upcycle.json";

// What `ftx train --init` reads from upcycle.json of a checkpoint directory: the recorded kappa,
// or a negative value when there is none (a GGUF file, an HF directory, no record).
float recorded_kappa_nats(const std::string& path);

}  // namespace ftx
