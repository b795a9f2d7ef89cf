// libFuzzer target for the GGUF reader (core/io/gguf.h), the Llama mapping (core/io/gguf_llama.h)
// and dequantization (core/io/ggml_quants.h): parses the input in memory, reads every key through
// its getters, dequantizes every tensor that validated (up to a size cap) and, when the file is a
// model, every Hugging Face tensor. Errors must be one line; anything else (a crash, a sanitizer
// report, an allocation over -rss_limit_mb) is a finding. Seeds: tests/fuzz/corpus/gguf/.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/io/gguf.h"
#include "core/io/gguf_llama.h"

namespace {

constexpr int64_t kMaxElements = int64_t{1} << 22;  // dequantize tensors up to 16 MB of fp32

void check_one_line(const std::string& msg) {
  if (msg.find('\n') != std::string::npos || msg.rfind("fuzz.gguf: ", 0) != 0) std::abort();
}

void read_metadata(const ftx::GgufFile& f) {
  for (const ftx::GgufKv& kv : f.kvs()) {
    (void)f.value_text(kv);
    if (auto v = f.get_int(kv.key); !v) check_one_line(v.error().message);
    if (auto v = f.get_float(kv.key); !v) check_one_line(v.error().message);
    if (auto v = f.get_string(kv.key); !v) check_one_line(v.error().message);
    if (auto v = f.get_bool(kv.key); !v) check_one_line(v.error().message);
    if (auto v = f.get_int_array(kv.key); !v) check_one_line(v.error().message);
    if (auto v = f.get_float_array(kv.key); !v) check_one_line(v.error().message);
    if (auto v = f.get_string_array(kv.key); !v) check_one_line(v.error().message);
  }
}

void dequantize_all(const ftx::GgufFile& f) {
  std::vector<float> x;
  std::vector<uint16_t> b;
  for (const ftx::GgufTensor& t : f.tensors()) {
    if (!ftx::ggml_type_info(t.type).dequantizable || t.numel > kMaxElements || t.numel == 0) continue;
    x.resize(size_t(t.numel));
    b.resize(size_t(t.numel));
    const int64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
    for (int64_t r = 0; r < t.rows(); ++r) {
      ftx::dequantize_row_f32(t.type, f.tensor_data(t) + uint64_t(r) * t.row_bytes(), ne0, x.data() + r * ne0);
      ftx::dequantize_row_bf16(t.type, f.tensor_data(t) + uint64_t(r) * t.row_bytes(), ne0, b.data() + r * ne0);
    }
  }
}

void read_model(const ftx::GgufFile& f) {
  auto m = ftx::read_gguf_llama(f);
  if (!m) return check_one_line(m.error().message);
  std::vector<float> x;
  for (const std::string& hf : ftx::gguf_hf_tensor_names(*m)) {
    auto t = ftx::gguf_tensor_for_hf(f, *m, hf);
    if (!t) std::abort();  // read_gguf_llama checked every tensor
    if ((*t)->numel > kMaxElements) continue;
    x.resize(size_t((*t)->numel));
    if (!ftx::gguf_tensor_f32(f, *m, hf, x.data(), (*t)->numel)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = ftx::GgufFile::parse("fuzz.gguf", data, size);
  if (!f) {
    check_one_line(f.error().message);
    return 0;
  }
  read_metadata(*f);
  dequantize_all(*f);
  read_model(*f);
  return 0;
}
