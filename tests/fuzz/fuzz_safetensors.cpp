// libFuzzer target for the safetensors reader, the config.json reader and HfCheckpoint
// (docs/testing.md). The first byte modulo 3 picks the mode, the rest is the input:
//   0: a whole safetensors file. parse_safetensors (from memory) validates it; when valid, every
//      F32/F16/BF16 tensor is decoded from memory, and the same bytes are opened from a file
//      (SafetensorsFile::open, pread) whose tensors and values must be the same.
//   1: a config.json text. parse_json_strict, config_from_json and special_token_ids_from_json;
//      an accepted config must survive config_to_json -> config_from_json unchanged, and its
//      param_specs are built (their sizes must not overflow).
//   2: the model.safetensors of a directory whose config.json is kHfConfig (a one-layer llama with
//      attention biases). When HfCheckpoint::open accepts it, tensor_for must give every tensor's
//      values as SafetensorsFile::read_f32 reads them (rounded to bf16 where it converts F16),
//      and check_finite must agree with a scan of those values.
// A disagreement aborts (a bug, not bad input); bad input only ever returns an error.
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/io/config_json.h"
#include "core/io/hf_checkpoint.h"
#include "core/io/safetensors.h"
#include "core/model/params.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_safetensors: %s\n", what);
    std::abort();
  }
}

// One in-memory file for SafetensorsFile::open, reused across inputs.
const std::string& memfd_path(const uint8_t* data, size_t size) {
  static int fd = ::memfd_create("fuzz_safetensors", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  check(fd >= 0, "memfd_create failed");
  check(::ftruncate(fd, 0) == 0, "ftruncate failed");
  check(size == 0 || ::pwrite(fd, data, size, 0) == ssize_t(size), "pwrite failed");
  return path;
}

bool readable(ftx::SafetensorsDType d) {
  using D = ftx::SafetensorsDType;
  return d == D::F32 || d == D::F16 || d == D::BF16;
}

void fuzz_safetensors(const uint8_t* data, size_t size) {
  auto h = ftx::parse_safetensors("fuzz.safetensors", data, size);
  auto f = ftx::SafetensorsFile::open(memfd_path(data, size));
  check(h.ok() == f.ok(), "memory and file readers disagree on validity");
  if (!h.ok()) {
    check(h.error().message.find('\n') == std::string::npos, "multi-line error");
    return;
  }
  check(h->tensors.size() == f->tensors().size(), "tensor counts differ");
  check(h->data_offset() == f->data_offset(), "data offsets differ");
  for (size_t i = 0; i < h->tensors.size(); ++i) {
    const ftx::TensorInfo& t = h->tensors[i];
    const ftx::TensorInfo* ft = f->find(t.name);
    check(ft != nullptr && ft->begin == t.begin && ft->end == t.end && ft->shape == t.shape, "tensor entries differ");
    check(h->data_offset() + t.end <= size, "tensor past the end of the input");
    if (!readable(t.dtype)) continue;
    std::vector<float> mem(size_t(t.numel));
    check(ftx::decode_f32(t.dtype, data + h->data_offset() + t.begin, t.numel, mem.data()), "decode_f32 refused");
    auto file = f->read_f32(t.name);
    check(file.ok(), "read_f32 failed on a valid tensor");
    check(file->size() == mem.size() &&
              (mem.empty() || std::memcmp(mem.data(), file->data(), mem.size() * sizeof(float)) == 0),
          "memory and file values differ");
  }
}

void fuzz_config(const uint8_t* data, size_t size) {
  auto j = ftx::parse_json_strict(std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
  if (!j.ok()) return;
  std::shared_ptr<const ftx::Tokenizer> tokenizer;
  auto c = ftx::config_from_json(*j, "config.json", &tokenizer);
  if (!c.ok()) {
    check(c.error().message.find('\n') == std::string::npos, "multi-line error");
    return;
  }
  (void)ftx::special_token_ids_from_json(*j, "config.json", c->vocab_size);
  const nlohmann::json written = ftx::config_to_json(*c, tokenizer.get());
  auto back = ftx::config_from_json(nlohmann::json::parse(written.dump()), "written.json");
  check(back.ok(), "config_to_json wrote a config config_from_json refuses");
  check(ftx::config_to_json(*back, tokenizer.get()) == written, "config round trip changed the config");
  check(back->rope_scaling == c->rope_scaling && back->qkv_bias == c->qkv_bias && back->o_bias == c->o_bias,
        "config round trip changed scaling or biases");
  const auto specs = ftx::param_specs(*c);
  check(ftx::param_count(specs) > 0, "empty parameter layout");
}

constexpr const char* kHfConfig = R"({"model_type": "llama", "vocab_size": 8, "hidden_size": 4,
  "intermediate_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
  "max_position_embeddings": 16, "rms_norm_eps": 1e-6, "attention_bias": true, "tie_word_embeddings": true})";

// A directory holding kHfConfig, made once and removed at exit; model.safetensors is rewritten
// for each input.
struct HfDir {
  std::string path;
  HfDir() {
    char tmpl[] = "/tmp/fuzz_hf_XXXXXX";
    check(::mkdtemp(tmpl) != nullptr, "mkdtemp failed");
    path = tmpl;
    FILE* f = std::fopen((path + "/config.json").c_str(), "w");
    check(f != nullptr && std::fputs(kHfConfig, f) >= 0 && std::fclose(f) == 0, "cannot write config.json");
  }
  ~HfDir() {
    ::unlink((path + "/config.json").c_str());
    ::unlink((path + "/model.safetensors").c_str());
    ::rmdir(path.c_str());
  }
};

const std::string& hf_dir() {
  static const HfDir dir;
  return dir.path;
}

void fuzz_hf_dir(const uint8_t* data, size_t size) {
  const std::string path = hf_dir() + "/model.safetensors";
  FILE* f = std::fopen(path.c_str(), "wb");
  check(f != nullptr && std::fwrite(data, 1, size, f) == size && std::fclose(f) == 0, "cannot write the model");
  auto ck = ftx::HfCheckpoint::open(hf_dir());
  if (!ck.ok()) {
    check(ck.error().message.find('\n') == std::string::npos, "multi-line error");
    return;
  }
  auto file = ftx::SafetensorsFile::open(path);
  check(file.ok(), "HfCheckpoint accepted a file SafetensorsFile refuses");
  for (const ftx::ParamSpec& s : ftx::param_specs(ck->config())) {
    auto w = ck->tensor_for(s);
    check(w.ok(), "tensor_for failed on an accepted checkpoint");
    auto want = file->read_f32(s.name);
    check(want.ok(), "read_f32 failed on an accepted tensor");
    bool finite = true;
    for (size_t i = 0; i < want->size(); ++i) {
      const float x = (*want)[i];
      finite &= std::isfinite(x);
      const float got = w->dtype == ftx::DType::F32 ? w->f32()[i] : ftx::bf16_to_fp32(w->bf16()[i]);
      const float expect = w->dtype == ftx::DType::F32 ? x : ftx::bf16_to_fp32(ftx::fp32_to_bf16(x));
      check(std::memcmp(&got, &expect, 4) == 0 || (std::isnan(got) && std::isnan(expect)), "tensor_for values differ");
    }
    check(ck->check_finite(s).ok() == finite, "check_finite disagrees with the values");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  switch (data[0] % 3) {
    case 0:
      fuzz_safetensors(data + 1, size - 1);
      break;
    case 1:
      fuzz_config(data + 1, size - 1);
      break;
    default:
      fuzz_hf_dir(data + 1, size - 1);
  }
  return 0;
}
