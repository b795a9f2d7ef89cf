// core/io/gguf, ggml_quants and gguf_llama: the GGUF reader, ggml dequantization and the Llama
// mapping, checked against llama.cpp's own Python package (gguf-py) and against the real
// SmolLM2-135M-Instruct.Q4_1.gguf (facts read from the file with gguf-py). Fixtures:
// tests/fixtures/real/make_gguf_fixtures.py.
//
// - every dequantizable ggml type against gguf-py's dequantize() on random blocks, fp32 and bf16;
// - files written by gguf-py's GGUFWriter: every value type, alignment 64, tiny llama and qwen2
//   models whose every weight must read back in Hugging Face order (the llama q/k un-permutation
//   against convert_hf_to_gguf.py's permute);
// - SmolLM2: header facts, config, vocabulary, check values read by an independent parser, and exact bit-pattern
// checksums of
//   every tensor (fp32 and bf16) and of every q/k row against gguf-py + NumPy;
// - bad input: a GGUF writer below builds files with one defect each (truncated at every byte,
//   bad magic, versions, huge lengths and counts, duplicates, nested arrays, bad alignment, bad
//   dims, types and offsets); each must give one line naming the file, never a crash.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>

#include "core/io/ggml_quants.h"
#include "core/io/gguf.h"
#include "core/io/gguf_llama.h"
#include "core/io/safetensors.h"
#include "kernels/base/dtype.h"
#include "tests/real_model.h"

namespace ftx {
namespace {

namespace fs = std::filesystem;

const std::string kReal = std::string(FTX_FIXTURE_DIR) + "/real/";

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// ---------------------------------------------------------------------------------------------
// A GGUF writer for the tests: KVs and tensors in order, defaults that make a valid file, and
// fields to break it with.

template <class T>
void put(std::vector<uint8_t>* out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out->insert(out->end(), p, p + sizeof(T));
}
void put_str(std::vector<uint8_t>* out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out->insert(out->end(), s.begin(), s.end());
}

struct TensorSpec {
  std::string name;
  uint32_t type = 0;
  std::vector<int64_t> ne;
  std::vector<uint8_t> data;
  std::optional<uint64_t> offset;  // default: the padded running sum
  std::optional<uint32_t> n_dims;  // default: ne.size()
};

class GgufBuilder {
 public:
  std::string magic = "GGUF";
  uint32_t version = 3;
  uint64_t alignment = 32;  // padding used; set general.alignment too to change the file's
  std::optional<uint64_t> tensor_count, kv_count;

  void kv(const std::string& key, GgufType type, std::vector<uint8_t> payload) {
    for (auto& e : kvs_)
      if (e.key == key) {
        e.type = type;
        e.payload = std::move(payload);
        return;
      }
    kvs_.push_back({key, type, std::move(payload)});
  }
  void remove_kv(const std::string& key) {
    std::erase_if(kvs_, [&](const Kv& e) { return e.key == key; });
  }
  template <class T>
  void scalar(const std::string& key, GgufType type, T v) {
    std::vector<uint8_t> p;
    put(&p, v);
    kv(key, type, p);
  }
  void u32(const std::string& key, uint32_t v) { scalar(key, GgufType::UINT32, v); }
  void f32(const std::string& key, float v) { scalar(key, GgufType::FLOAT32, v); }
  void boolean(const std::string& key, bool v) { scalar(key, GgufType::BOOL, uint8_t(v)); }
  void str(const std::string& key, const std::string& s) {
    std::vector<uint8_t> p;
    put_str(&p, s);
    kv(key, GgufType::STRING, p);
  }
  void str_array(const std::string& key, const std::vector<std::string>& v) {
    std::vector<uint8_t> p;
    put(&p, uint32_t(GgufType::STRING));
    put<uint64_t>(&p, v.size());
    for (const auto& s : v) put_str(&p, s);
    kv(key, GgufType::ARRAY, p);
  }
  void i32_array(const std::string& key, const std::vector<int32_t>& v) {
    std::vector<uint8_t> p;
    put(&p, uint32_t(GgufType::INT32));
    put<uint64_t>(&p, v.size());
    for (int32_t x : v) put(&p, x);
    kv(key, GgufType::ARRAY, p);
  }

  // A tensor of `type` with dims ne (GGUF order); data zero unless given.
  TensorSpec& tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne) {
    const GgmlTypeInfo& info = ggml_type_info(type);
    int64_t numel = 1;
    for (int64_t d : ne) numel *= d;
    TensorSpec t;
    t.name = name;
    t.type = uint32_t(type);
    t.ne = ne;
    t.data.resize(size_t(numel / info.block_elems * info.block_bytes));
    remove_tensor(name);
    tensors_.push_back(t);
    return tensors_.back();
  }
  // An F32 tensor with element k = f(k).
  template <class F>
  TensorSpec& f32_tensor(const std::string& name, std::vector<int64_t> ne, F&& f) {
    TensorSpec& t = tensor(name, GgmlType::F32, ne);
    for (size_t k = 0; k < t.data.size() / 4; ++k) {
      const float v = f(int64_t(k));
      std::memcpy(t.data.data() + 4 * k, &v, 4);
    }
    return t;
  }
  void remove_tensor(const std::string& name) {
    std::erase_if(tensors_, [&](const TensorSpec& t) { return t.name == name; });
  }
  TensorSpec* find_tensor(const std::string& name) {
    for (auto& t : tensors_)
      if (t.name == name) return &t;
    return nullptr;
  }
  std::vector<TensorSpec>& tensors() { return tensors_; }

  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out(magic.begin(), magic.end());
    put(&out, version);
    put<uint64_t>(&out, tensor_count.value_or(tensors_.size()));
    put<uint64_t>(&out, kv_count.value_or(kvs_.size()));
    for (const auto& e : kvs_) {
      put_str(&out, e.key);
      put(&out, uint32_t(e.type));
      out.insert(out.end(), e.payload.begin(), e.payload.end());
    }
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
      put_str(&out, t.name);
      put(&out, t.n_dims.value_or(uint32_t(t.ne.size())));
      for (int64_t d : t.ne) put(&out, d);
      put(&out, t.type);
      put(&out, t.offset.value_or(offset));
      offset += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    pad(&out);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.insert(out.end(), tensors_[i].data.begin(), tensors_[i].data.end());
      if (i + 1 < tensors_.size()) pad(&out);  // the last tensor ends the file
    }
    return out;
  }

 private:
  struct Kv {
    std::string key;
    GgufType type;
    std::vector<uint8_t> payload;
  };
  void pad(std::vector<uint8_t>* out) const {
    while (out->size() % alignment) out->push_back(0);
  }
  std::vector<Kv> kvs_;
  std::vector<TensorSpec> tensors_;
};

// A valid 1-layer llama: dim 32, 4 heads of 8, 2 KV heads, FFN 64, 8 tokens, every tensor F32.
// attn_q's stored row r holds the value r in every column (for the un-permutation test).
GgufBuilder tiny_llama(const std::string& arch = "llama") {
  GgufBuilder b;
  const std::string p = arch + ".";
  b.str("general.architecture", arch);
  b.str("general.name", "tiny");
  b.u32(p + "block_count", 1);
  b.u32(p + "context_length", 64);
  b.u32(p + "embedding_length", 32);
  b.u32(p + "feed_forward_length", 64);
  b.u32(p + "attention.head_count", 4);
  b.u32(p + "attention.head_count_kv", 2);
  b.f32(p + "attention.layer_norm_rms_epsilon", 1e-5f);
  b.f32(p + "rope.freq_base", 10000.0f);
  b.str("tokenizer.ggml.model", "gpt2");
  b.str("tokenizer.ggml.pre", "smollm");
  b.str_array("tokenizer.ggml.tokens", {"<|endoftext|>", "<|im_end|>", "a", "b", "ab", "\xc4\xa0", "c", "d"});
  b.i32_array("tokenizer.ggml.token_type", {3, 3, 1, 1, 1, 1, 1, 1});
  b.str_array("tokenizer.ggml.merges", {"a b"});
  b.u32("tokenizer.ggml.eos_token_id", 1);
  auto wave = [](int64_t k) { return float(k % 13) * 0.125f - 0.75f; };
  b.f32_tensor("token_embd.weight", {32, 8}, wave);
  b.f32_tensor("output_norm.weight", {32}, wave);
  b.f32_tensor("blk.0.attn_norm.weight", {32}, wave);
  b.f32_tensor("blk.0.attn_q.weight", {32, 32}, [](int64_t k) { return float(k / 32); });
  b.f32_tensor("blk.0.attn_k.weight", {32, 16}, [](int64_t k) { return float(k / 32); });
  b.f32_tensor("blk.0.attn_v.weight", {32, 16}, wave);
  b.f32_tensor("blk.0.attn_output.weight", {32, 32}, wave);
  b.f32_tensor("blk.0.ffn_norm.weight", {32}, wave);
  b.f32_tensor("blk.0.ffn_gate.weight", {32, 64}, wave);
  b.f32_tensor("blk.0.ffn_up.weight", {32, 64}, wave);
  b.f32_tensor("blk.0.ffn_down.weight", {64, 32}, wave);
  return b;
}

// A scratch directory per test binary run.
std::string scratch_dir() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / ("ftx_test_gguf_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d.string();
  }();
  return dir;
}

std::string write_file(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  return path;
}

// Opens `bytes` as a file and returns the error message, checking the one-line convention.
std::string open_error(const GgufBuilder& b, const std::string& name = "bad.gguf") {
  const std::string path = write_file(name, b.bytes());
  auto f = GgufFile::open(path);
  if (f) return "(opened)";
  const std::string& msg = f.error().message;
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  return msg;
}

// The error of read_gguf_llama on the builder's file, under the same checks.
std::string llama_error(const GgufBuilder& b, const std::string& name = "bad_model.gguf") {
  const std::string path = write_file(name, b.bytes());
  auto f = GgufFile::open(path);
  if (!f) return "(not opened) " + f.error().message;
  auto m = read_gguf_llama(*f);
  if (m) return "(read)";
  const std::string& msg = m.error().message;
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  return msg;
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

// ---------------------------------------------------------------------------------------------
// ggml types and dequantization

TEST(GgmlQuants, TypeTableMatchesGgml) {
  // (block elements, block bytes) from gguf-py's GGML_QUANT_SIZES.
  struct Row {
    uint32_t id;
    const char* name;
    int64_t elems, bytes;
  };
  for (const Row& r : {Row{0, "F32", 1, 4}, Row{1, "F16", 1, 2}, Row{2, "Q4_0", 32, 18}, Row{3, "Q4_1", 32, 20},
                       Row{6, "Q5_0", 32, 22}, Row{7, "Q5_1", 32, 24}, Row{8, "Q8_0", 32, 34}, Row{10, "Q2_K", 256, 84},
                       Row{11, "Q3_K", 256, 110}, Row{12, "Q4_K", 256, 144}, Row{13, "Q5_K", 256, 176},
                       Row{14, "Q6_K", 256, 210}, Row{16, "IQ2_XXS", 256, 66}, Row{23, "IQ4_XS", 256, 136},
                       Row{30, "BF16", 1, 2}, Row{35, "TQ2_0", 256, 66}, Row{39, "MXFP4", 32, 17}}) {
    const GgmlTypeInfo* info = ggml_type_info(r.id);
    ASSERT_NE(info, nullptr) << r.name;
    EXPECT_STREQ(info->name, r.name);
    EXPECT_EQ(info->block_elems, r.elems) << r.name;
    EXPECT_EQ(info->block_bytes, r.bytes) << r.name;
  }
  for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 42u, 1000u})
    EXPECT_EQ(ggml_type_info(removed), nullptr) << removed;
  EXPECT_EQ(ggml_dequantizable_names(), "F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16");
}

// Every binary16 value against a direct evaluation of the format: (-1)^s 2^(e-15) (1 + m/1024).
TEST(GgmlQuants, F16ToF32IsExactForEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const float got = ggml_f16_to_f32(uint16_t(h));
    if (e == 31) {
      EXPECT_TRUE(m ? std::isnan(got) : std::isinf(got)) << h;
      EXPECT_EQ(std::signbit(got), bool(s)) << h;
      continue;
    }
    const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    const float want = float(s ? -mag : mag);
    ASSERT_EQ(bits_of(got), bits_of(want)) << "f16 bits " << h;
  }
}

// gguf_quants.gguf: raw.T, f32.T = gguf-py's dequantize(raw.T), bf16.T = its bf16 rounding.
// Exact: this file is built without fused multiply-adds and follows ggml's order of operations,
// as NumPy does; NaN compares by being NaN (payloads may differ through quieting).
TEST(GgmlQuants, DequantizationMatchesGgufPyForEveryType) {
  auto f = GgufFile::open(kReal + "gguf_quants.gguf");
  ASSERT_TRUE(f) << f.error().message;
  int types = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeInfo* info = ggml_type_info(id);
    if (!info || !info->dequantizable) continue;
    ++types;
    const std::string n = info->name;
    const GgufTensor* raw = f->find_tensor("raw." + n);
    const GgufTensor* want = f->find_tensor("f32." + n);
    const GgufTensor* want16 = f->find_tensor("bf16." + n);
    ASSERT_TRUE(raw && want && want16) << n;
    ASSERT_EQ(raw->type, info->type);
    ASSERT_EQ(raw->ne, (std::vector<int64_t>{256, 8}));
    const auto* ref = reinterpret_cast<const float*>(f->tensor_data(*want));
    const auto* ref16 = reinterpret_cast<const uint16_t*>(f->tensor_data(*want16));
    std::vector<float> got(256);
    std::vector<uint16_t> got16(256);
    int nans = 0;
    for (int64_t row = 0; row < 8; ++row) {
      const uint8_t* src = f->tensor_data(*raw) + row * raw->row_bytes();
      dequantize_row_f32(info->type, src, 256, got.data());
      dequantize_row_bf16(info->type, src, 256, got16.data());
      for (int k = 0; k < 256; ++k) {
        float r;
        std::memcpy(&r, ref + row * 256 + k, 4);  // the fixture's data need not be 4-aligned
        uint16_t r16;
        std::memcpy(&r16, ref16 + row * 256 + k, 2);
        if (std::isnan(r)) {
          ++nans;
          EXPECT_TRUE(std::isnan(got[k])) << n << " row " << row << " elem " << k;
          EXPECT_TRUE(std::isnan(bf16_to_fp32(got16[k]))) << n << " row " << row << " elem " << k;
          continue;
        }
        ASSERT_EQ(bits_of(got[k]), bits_of(r)) << n << " row " << row << " elem " << k << ": " << got[k] << " vs " << r;
        ASSERT_EQ(got16[k], r16) << n << " bf16 row " << row << " elem " << k;
      }
    }
    if (info->type == GgmlType::F32 || info->type == GgmlType::F16 || info->type == GgmlType::BF16) {
      EXPECT_GT(nans, 0) << n << ": the fixture should hold NaNs";
    }
  }
  EXPECT_EQ(types, 13);
}

TEST(GgmlQuants, RowsNeedNotBeAligned) {
  auto f = GgufFile::open(kReal + "gguf_quants.gguf");
  ASSERT_TRUE(f) << f.error().message;
  const GgufTensor* raw = f->find_tensor("raw.Q5_K");
  ASSERT_NE(raw, nullptr);
  std::vector<uint8_t> shifted(raw->row_bytes() + 1);
  std::memcpy(shifted.data() + 1, f->tensor_data(*raw), raw->row_bytes());
  std::vector<float> a(256), b(256);
  dequantize_row_f32(GgmlType::Q5_K, f->tensor_data(*raw), 256, a.data());
  dequantize_row_f32(GgmlType::Q5_K, shifted.data() + 1, 256, b.data());
  EXPECT_EQ(a, b);
}

// ---------------------------------------------------------------------------------------------
// Files written by gguf-py

TEST(Gguf, ReadsEveryValueTypeWrittenByGgufPy) {
  const std::string path = std::string(FTX_FIXTURE_DIR) + "/../fuzz/corpus/gguf/metadata_only.gguf";
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(*f->get_int("t.u8"), 200);
  EXPECT_EQ(*f->get_int("t.i8"), -5);
  EXPECT_EQ(*f->get_int("t.u16"), 60000);
  EXPECT_EQ(*f->get_int("t.i16"), -30000);
  EXPECT_EQ(*f->get_int("t.u32"), 4000000000);
  EXPECT_EQ(*f->get_int("t.i32"), -2000000000);
  EXPECT_EQ(*f->get_int("t.i64"), -(int64_t{1} << 40));
  EXPECT_EQ(*f->get_float("t.f32"), 1.5);
  EXPECT_EQ(*f->get_float("t.f64"), -2.25);
  EXPECT_EQ(*f->get_bool("t.bool"), true);
  EXPECT_EQ(*f->get_string("t.str"), "h\xc3\xa9llo");
  auto strs = f->get_string_array("t.arr_str");
  ASSERT_TRUE(strs);
  EXPECT_EQ(std::vector<std::string>(strs->begin(), strs->end()), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(*f->get_int_array("t.arr_i32"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*f->get_float_array("t.arr_f32"), (std::vector<double>{0.5, 1.5}));
  // u64 above INT64_MAX is refused by get_int, with the key and the value.
  auto big = f->get_int("t.u64");
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().message, path + ": key 't.u64' = 9223372036854775813 does not fit in int64");
  // Wrong types and missing keys name the key.
  EXPECT_EQ(f->get_string("t.u32").error().message, path + ": key 't.u32' is uint32, expected a string");
  EXPECT_EQ(f->get_int("t.arr_i32").error().message,
            path + ": key 't.arr_i32' is array[int32, 3], expected an integer");
  EXPECT_EQ(f->get_float("nope").error().message, path + ": key 'nope' is missing");
  EXPECT_EQ(f->get_int_array("t.arr_f32").error().message,
            path + ": key 't.arr_f32' is array[float32, 2], expected an array of integers");
  // The listing `ftx inspect` prints.
  const GgufKv* kv = f->find_kv("t.arr_str");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->type_text(), "array[string, 3]");
  EXPECT_EQ(f->value_text(*kv), "['a', 'bc', '']");
  EXPECT_EQ(f->value_text(*f->find_kv("t.arr_bool")), "[true, false]");
  EXPECT_EQ(f->value_text(*f->find_kv("t.f32")), "1.5");
  EXPECT_EQ(f->kvs().front().key, "general.architecture");
  // Tensors: x is F32 arange(64) as (2, 32); y is Q8_0.
  const GgufTensor* x = f->find_tensor("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->ne, (std::vector<int64_t>{32, 2}));
  EXPECT_EQ(x->shape(), (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(x->nbytes, 256u);
  std::vector<float> v(64);
  dequantize_row_f32(x->type, f->tensor_data(*x), 64, v.data());
  for (int k = 0; k < 64; ++k) EXPECT_EQ(v[k], float(k));
  const GgufTensor* y = f->find_tensor("y");
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(y->type, GgmlType::Q8_0);
  EXPECT_EQ(y->offset, 256u);  // x's 256 bytes padded to 64
  EXPECT_EQ(y->nbytes, 68u);
  EXPECT_EQ(f->find_tensor("z"), nullptr);
}

// Opening reads the header only: a 1 GiB tensor in a sparse file stays out of the page cache
// (mincore), so a multi-GB model opens in constant time and memory.
TEST(Gguf, OpeningTouchesNoTensorData) {
  GgufBuilder b;
  b.str("general.architecture", "llama");
  TensorSpec& t = b.tensor("big", GgmlType::F32, {1});
  t.ne = {int64_t{1} << 28};
  t.data.clear();
  const auto header = b.bytes();  // header and infos, padded: the data would follow
  const std::string path = write_file("sparse.gguf", header);
  const uint64_t size = header.size() + (uint64_t{1} << 30);
  ASSERT_EQ(::truncate(path.c_str(), off_t(size)), 0);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f) << f.error().message;
  const GgufTensor& big = f->tensors()[0];
  EXPECT_EQ(big.nbytes, uint64_t{1} << 30);
  EXPECT_EQ(f->data_offset() + big.nbytes, size);
  const long page = ::sysconf(_SC_PAGESIZE);
  const auto first =
      reinterpret_cast<uintptr_t>(f->tensor_data(big)) / uintptr_t(page) * uintptr_t(page) + uintptr_t(page);
  const size_t len = size_t(big.nbytes) - size_t(page) * 2;
  std::vector<unsigned char> resident((len + size_t(page) - 1) / size_t(page));
  ASSERT_EQ(::mincore(reinterpret_cast<void*>(first), len, resident.data()), 0);
  size_t touched = 0;
  for (unsigned char r : resident) touched += r & 1;
  EXPECT_EQ(touched, 0u) << "pages of tensor data read by open()";
  fs::remove(path);
}

// The same bytes through parse() (memory) and open() (a file) give the same result.
TEST(Gguf, ParseFromMemoryEqualsOpen) {
  const auto bytes = tiny_llama().bytes();
  auto a = GgufFile::parse("mem.gguf", bytes.data(), bytes.size());
  auto b = GgufFile::open(write_file("mem.gguf", bytes));
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    const GgufTensor &s = a->tensors()[i], &t = b->tensors()[i];
    EXPECT_EQ(s.name, t.name);
    EXPECT_EQ(s.offset, t.offset);
    EXPECT_EQ(0, std::memcmp(a->tensor_data(s), b->tensor_data(t), s.nbytes));
  }
  EXPECT_EQ(a->data_offset(), b->data_offset());
}

// ---------------------------------------------------------------------------------------------
// Llama mapping on tiny models written by gguf-py

// gguf_tiny_expected.safetensors: "<arch>.<Hugging Face name>" -> fp32 in Hugging Face row order.
const SafetensorsFile& expected_file() {
  static SafetensorsFile file = [] {
    auto r = SafetensorsFile::open(kReal + "gguf_tiny_expected.safetensors");
    if (!r) {
      std::fprintf(stderr, "%s\n", r.error().message.c_str());
      std::abort();
    }
    return std::move(*r);
  }();
  return file;
}

// Every Hugging Face tensor of `m` read back exactly (fp32) and as bf16 (fp32 rounded).
void expect_weights(const GgufFile& f, const GgufLlama& m, const std::string& prefix) {
  for (const std::string& hf : gguf_hf_tensor_names(m)) {
    SCOPED_TRACE(hf);
    auto read = expected_file().read_f32(prefix + hf);
    ASSERT_TRUE(read) << read.error().message;
    const std::vector<float>& want = *read;
    auto t = gguf_tensor_for_hf(f, m, hf);
    ASSERT_TRUE(t) << t.error().message;
    const TensorInfo* info = expected_file().find(prefix + hf);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ((*t)->shape(), info->shape);
    std::vector<float> got(want.size());
    std::vector<uint16_t> got16(want.size());
    ASSERT_TRUE(gguf_tensor_f32(f, m, hf, got.data(), int64_t(got.size())));
    ASSERT_TRUE(gguf_tensor_bf16(f, m, hf, got16.data(), int64_t(got16.size())));
    for (size_t k = 0; k < want.size(); ++k) {
      ASSERT_EQ(bits_of(got[k]), bits_of(want[k])) << "element " << k;
      ASSERT_EQ(got16[k], fp32_to_bf16(want[k])) << "element " << k;
    }
  }
}

TEST(GgufLlama, TinyLlamaFromGgufPy) {
  const std::string path = kReal + "gguf_tiny_llama.gguf";
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f) << f.error().message;
  auto m = read_gguf_llama(*f);
  ASSERT_TRUE(m) << m.error().message;
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.vocab_size, 41);  // 38 tokens + 3 padded rows
  EXPECT_EQ(c.dim, 32);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.ffn_hidden, 64);
  EXPECT_EQ(c.max_seq_len, 256);
  EXPECT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_theta, 50000.0f);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.latent_bits, 0);
  EXPECT_EQ(c.rope_scaling.kind, RopeScalingKind::Divisors);
  EXPECT_EQ(c.rope_scaling.divisors, (std::vector<float>{1.0f, 1.0f, 2.5f, 8.0f}));
  EXPECT_TRUE(m->permuted_qk);
  EXPECT_EQ(m->name, "tiny llama");
  EXPECT_EQ(m->vocab.tokens.size(), 38u);
  EXPECT_EQ(m->vocab.tokens[2], "<|im_end|>");
  EXPECT_EQ(m->vocab.token_types[0], 3);
  EXPECT_EQ(m->vocab.merges, (std::vector<std::string>{"\xc4\xa0 t", "h e", "\xc4\xa0t he", "i n", "\xc4\xa0 a"}));
  EXPECT_EQ(m->vocab.pre, "llama-bpe");
  EXPECT_TRUE(m->vocab.add_bos);  // no add_bos_token key: llama-bpe's default
  EXPECT_EQ(m->vocab.special.eos, 2);
  EXPECT_EQ(m->vocab.special.pad, 0);
  EXPECT_FALSE(m->vocab.special.bos);
  EXPECT_EQ(m->eos_ids, (std::vector<int32_t>{2, 0}));  // eos <|im_end|>, then <|endoftext|> by its text
  EXPECT_NE(m->chat_template.find("<|im_start|>"), std::string::npos);
  const auto names = gguf_hf_tensor_names(*m);
  EXPECT_EQ(names.size(), 1u + 2 * 9 + 1);
  EXPECT_EQ(names.back(), "model.norm.weight");
  expect_weights(*f, *m, "llama.");
  // Tied: lm_head reads the embedding.
  auto head = gguf_tensor_for_hf(*f, *m, "lm_head.weight");
  ASSERT_TRUE(head);
  EXPECT_EQ((*head)->name, "token_embd.weight");
}

TEST(GgufLlama, TinyQwen2FromGgufPy) {
  auto f = GgufFile::open(kReal + "gguf_tiny_qwen2.gguf");
  ASSERT_TRUE(f) << f.error().message;
  auto m = read_gguf_llama(*f);
  ASSERT_TRUE(m) << m.error().message;
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_EQ(c.n_layers, 1);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.rope_scaling.kind, RopeScalingKind::None);
  EXPECT_FALSE(m->permuted_qk);  // qwen2 files keep Hugging Face's row order
  EXPECT_EQ(m->vocab.pre, "qwen2");
  EXPECT_FALSE(m->vocab.add_bos);
  EXPECT_EQ(m->eos_ids, (std::vector<int32_t>{0, 2}));  // eos <|endoftext|>, then <|im_end|>
  const auto names = gguf_hf_tensor_names(*m);
  EXPECT_EQ(names.size(), 1u + 12 + 1 + 1);
  EXPECT_EQ(names.back(), "lm_head.weight");
  EXPECT_EQ(names[3], "model.layers.0.self_attn.k_proj.weight");
  expect_weights(*f, *m, "qwen2.");
}

// The un-permutation rule written out: HF row h*hd + j*hd/2 + i is GGUF row h*hd + 2i + j. tiny_llama() stores
// the row index in every element of attn_q and attn_k.
TEST(GgufLlama, QkRowsAreUnpermutedRowByRow) {
  const auto bytes = tiny_llama().bytes();
  auto f = GgufFile::parse("tiny.gguf", bytes.data(), bytes.size());
  ASSERT_TRUE(f) << f.error().message;
  auto m = read_gguf_llama(*f);
  ASSERT_TRUE(m) << m.error().message;
  for (const auto& [name, heads] :
       {std::pair<std::string, int>{"self_attn.q_proj.weight", 4}, {"self_attn.k_proj.weight", 2}}) {
    const int hd = 8, rows = heads * hd;
    std::vector<float> w(size_t(rows) * 32);
    ASSERT_TRUE(gguf_tensor_f32(*f, *m, "model.layers.0." + name, w.data(), int64_t(w.size())));
    for (int h = 0; h < heads; ++h)
      for (int j = 0; j < 2; ++j)
        for (int i = 0; i < hd / 2; ++i)
          for (int col = 0; col < 32; ++col)
            ASSERT_EQ(w[size_t(h * hd + j * hd / 2 + i) * 32 + col], float(h * hd + 2 * i + j)) << name;
  }
  // The same file as qwen2 keeps the stored order.
  GgufBuilder q = tiny_llama("qwen2");
  for (const char* b : {"attn_q.bias", "attn_k.bias", "attn_v.bias"})
    q.f32_tensor(std::string("blk.0.") + b, {std::string(b) == "attn_q.bias" ? 32 : 16},
                 [](int64_t k) { return float(k); });
  const auto qb = q.bytes();
  auto qf = GgufFile::parse("q.gguf", qb.data(), qb.size());
  ASSERT_TRUE(qf) << qf.error().message;
  auto qm = read_gguf_llama(*qf);
  ASSERT_TRUE(qm) << qm.error().message;
  std::vector<float> w(32 * 32), bias(32);
  ASSERT_TRUE(gguf_tensor_f32(*qf, *qm, "model.layers.0.self_attn.q_proj.weight", w.data(), 32 * 32));
  ASSERT_TRUE(gguf_tensor_f32(*qf, *qm, "model.layers.0.self_attn.q_proj.bias", bias.data(), 32));
  for (int r = 0; r < 32; ++r) {
    EXPECT_EQ(w[size_t(r) * 32], float(r));
    EXPECT_EQ(bias[size_t(r)], float(r));
  }
}

TEST(GgufLlama, BadHfNamesAndSizes) {
  const auto bytes = tiny_llama().bytes();
  auto f = GgufFile::parse("tiny.gguf", bytes.data(), bytes.size());
  ASSERT_TRUE(f);
  auto m = read_gguf_llama(*f);
  ASSERT_TRUE(m) << m.error().message;
  std::vector<float> buf(4096);
  for (const char* name :
       {"model.layers.1.mlp.up_proj.weight", "model.layers.00.mlp.up_proj.weight", "model.layers.0.mlp.nope",
        "model.layers..mlp.up_proj.weight", "x", "model.layers.0.self_attn.q_proj.bias"}) {
    auto st = gguf_tensor_f32(*f, *m, name, buf.data(), 32);
    ASSERT_FALSE(st) << name;
    EXPECT_EQ(st.error().message, std::string("tiny.gguf: no tensor for Hugging Face name '") + name + "'");
  }
  auto st = gguf_tensor_f32(*f, *m, "model.norm.weight", buf.data(), 31);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message,
            "tiny.gguf: tensor 'output_norm.weight' (model.norm.weight) has 32 elements, the caller expects 31");
}

TEST(GgufLlama, AcceptsMistralAndPlainRopeScalingKeys) {
  GgufBuilder b = tiny_llama("mistral");
  b.str("mistral.rope.scaling.type", "none");
  EXPECT_EQ(llama_error(b, "mistral.gguf"), "(read)");
  GgufBuilder l = tiny_llama();
  l.str("llama.rope.scaling.type", "linear");
  l.f32("llama.rope.scaling.factor", 1.0f);
  EXPECT_EQ(llama_error(l, "linear1.gguf"), "(read)");
}

TEST(GgufLlama, RefusesWhatTheModelCannotCompute) {
  struct Case {
    const char* name;
    std::function<void(GgufBuilder&)> edit;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"arch", [](GgufBuilder& b) { b.str("general.architecture", "gemma2"); },
       "architecture 'gemma2' is not supported (llama, mistral, qwen2)"},
      {"sentencepiece", [](GgufBuilder& b) { b.str("tokenizer.ggml.model", "llama"); },
       "tokenizer.ggml.model 'llama' is not supported: only byte-level BPE ('gpt2') is (this is a SentencePiece "
       "vocabulary)"},
      {"moe", [](GgufBuilder& b) { b.u32("llama.expert_count", 8); },
       "mixture of experts (8 experts) is not supported"},
      {"swa", [](GgufBuilder& b) { b.u32("llama.attention.sliding_window", 4096); },
       "sliding-window attention is not supported"},
      {"yarn", [](GgufBuilder& b) { b.str("llama.rope.scaling.type", "yarn"); },
       "rope scaling 'yarn' is not supported"},
      {"longrope", [](GgufBuilder& b) { b.str("llama.rope.scaling.type", "longrope"); },
       "rope scaling 'longrope' is not supported"},
      {"linear", [](GgufBuilder& b) { b.f32("llama.rope.scaling.factor", 4.0f); },
       "rope scaling 'linear' is not supported"},
      {"missing key", [](GgufBuilder& b) { b.remove_kv("llama.block_count"); }, "key 'llama.block_count' is missing"},
      {"zero heads", [](GgufBuilder& b) { b.u32("llama.attention.head_count", 0); },
       "key 'llama.attention.head_count' = 0 must be in 1..2147483647"},
      {"per-layer heads", [](GgufBuilder& b) { b.i32_array("llama.attention.head_count", {4}); },
       "key 'llama.attention.head_count' is array[int32, 1], expected an integer"},
      {"partial rotary", [](GgufBuilder& b) { b.u32("llama.rope.dimension_count", 4); },
       "rope.dimension_count 4 is not the head size 8: partial rotary embeddings are not supported"},
      {"gqa", [](GgufBuilder& b) { b.u32("llama.attention.head_count_kv", 3); },
       "n_heads (4) must be a multiple of n_kv_heads (3)"},
      {"eos range", [](GgufBuilder& b) { b.u32("tokenizer.ggml.eos_token_id", 8); },
       "key 'tokenizer.ggml.eos_token_id' = 8 is not a token id (the vocabulary has 8 tokens)"},
      {"token types",
       [](GgufBuilder& b) {
         b.i32_array("tokenizer.ggml.token_type", {1, 1});
       },
       "tokenizer.ggml.token_type has 2 entries for 8 tokens"},
      {"no merges", [](GgufBuilder& b) { b.remove_kv("tokenizer.ggml.merges"); },
       "key 'tokenizer.ggml.merges' is missing"},
      {"too many tokens",
       [](GgufBuilder& b) {
         b.str_array("tokenizer.ggml.tokens", std::vector<std::string>(9, "t"));
         b.remove_kv("tokenizer.ggml.token_type");
       },
       "the vocabulary has 9 tokens, more than the 8 rows of token_embd.weight"},
      {"vocab_size key", [](GgufBuilder& b) { b.u32("llama.vocab_size", 9); },
       "key 'llama.vocab_size' = 9 but token_embd.weight has 8 rows"},
      {"missing tensor", [](GgufBuilder& b) { b.remove_tensor("blk.0.ffn_up.weight"); },
       "tensor 'blk.0.ffn_up.weight' is missing"},
      {"shape",
       [](GgufBuilder& b) {
         b.f32_tensor("blk.0.attn_k.weight", {32, 24}, [](int64_t) { return 0.f; });
       },
       "tensor 'blk.0.attn_k.weight' has dims [32, 24], expected [32, 16] (GGUF order, ne[0] first)"},
      {"transposed",
       [](GgufBuilder& b) {
         b.f32_tensor("blk.0.ffn_down.weight", {32, 64}, [](int64_t) { return 0.f; });
       },
       "tensor 'blk.0.ffn_down.weight' has dims [32, 64], expected [64, 32]"},
      {"embedding",
       [](GgufBuilder& b) {
         b.f32_tensor("token_embd.weight", {16, 8}, [](int64_t) { return 0.f; });
       },
       "tensor 'token_embd.weight' has dims [16, 8], expected [32, vocab_size]"},
      {"extra tensor", [](GgufBuilder& b) { b.f32_tensor("blk.0.attn_rot_embd", {32}, [](int64_t) { return 0.f; }); },
       "tensor 'blk.0.attn_rot_embd' is not part of a llama model with 1 layers and no attention biases"},
      {"extra layer", [](GgufBuilder& b) { b.f32_tensor("blk.1.attn_norm.weight", {32}, [](int64_t) { return 0.f; }); },
       "tensor 'blk.1.attn_norm.weight' is not part of a llama model"},
      {"layers", [](GgufBuilder& b) { b.u32("llama.block_count", 1000000); },
       "block_count 1000000 needs at least 9000000 tensors, the file has 11"},
      {"rope_freqs", [](GgufBuilder& b) { b.f32_tensor("rope_freqs.weight", {4}, [](int64_t) { return -1.f; }); },
       "rope frequency divisors must be positive and finite"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    GgufBuilder b = tiny_llama();
    c.edit(b);
    EXPECT_HAS(llama_error(b), c.error);
  }
}

TEST(GgufLlama, RefusesTypesThatCannotBeDequantized) {
  // dim 256 so that an IQ2_XXS row (256 elements a block) fits attn_output's ne[0].
  GgufBuilder b = tiny_llama();
  b.u32("llama.embedding_length", 256);
  b.u32("llama.attention.head_count", 4);
  for (auto& t : b.tensors()) {
    for (auto& d : t.ne)
      if (d == 32) d = 256;
    if (t.name == "blk.0.attn_k.weight" || t.name == "blk.0.attn_v.weight") t.ne = {256, 128};
    int64_t n = 1;
    for (auto d : t.ne) n *= d;
    t.data.assign(size_t(n) * 4, 0);
  }
  b.tensor("blk.0.attn_output.weight", GgmlType::IQ2_XXS, {256, 256});
  EXPECT_HAS(llama_error(b, "iq.gguf"),
             "tensor 'blk.0.attn_output.weight' has ggml type IQ2_XXS, which cannot be dequantized (supported: F32, "
             "F16, Q4_0");
}

// ---------------------------------------------------------------------------------------------
// Bad files: one line naming the file, never a crash.

GgufBuilder small_valid() {
  GgufBuilder b;
  b.str("general.architecture", "llama");
  b.u32("general.alignment", 32);
  b.scalar("a.u8", GgufType::UINT8, uint8_t(7));
  b.scalar("a.f64", GgufType::FLOAT64, 2.5);
  b.boolean("a.bool", true);
  b.str_array("a.strs", {"x", "yz"});
  b.i32_array("a.ints", {1, 2, 3});
  b.f32_tensor("t0", {32, 2}, [](int64_t k) { return float(k); });
  b.tensor("t1", GgmlType::Q8_0, {64});
  return b;
}

TEST(GgufBad, TruncatedAtEveryByte) {
  const auto bytes = small_valid().bytes();
  ASSERT_TRUE(GgufFile::parse("whole.gguf", bytes.data(), bytes.size()));
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    std::vector<uint8_t> part(bytes.begin(), bytes.begin() + ptrdiff_t(cut));  // exact size: ASan sees overreads
    auto f = GgufFile::parse("cut.gguf", part.data(), part.size());
    ASSERT_FALSE(f) << "cut at " << cut;
    const std::string& msg = f.error().message;
    EXPECT_EQ(msg.rfind("cut.gguf: ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    if (cut >= 4) {
      EXPECT_HAS(msg, "truncated");
    }
  }
  // A few as real files, through open().
  for (size_t cut : {size_t(0), size_t(3), size_t(10), bytes.size() / 2, bytes.size() - 1}) {
    const std::string path =
        write_file("cut" + std::to_string(cut) + ".gguf", {bytes.begin(), bytes.begin() + ptrdiff_t(cut)});
    auto f = GgufFile::open(path);
    ASSERT_FALSE(f);
    EXPECT_EQ(f.error().message.rfind(path + ": ", 0), 0u) << f.error().message;
  }
  EXPECT_EQ(GgufFile::open(scratch_dir() + "/absent.gguf").error().message.rfind(scratch_dir() + "/absent.gguf: ", 0),
            0u);
}

TEST(GgufBad, HeaderAndMetadata) {
  struct Case {
    const char* name;
    std::function<void(GgufBuilder&)> edit;
    std::string error;
  };
  auto kv_raw = [](GgufBuilder& b, GgufType type, std::vector<uint8_t> payload) { b.kv("z.bad", type, payload); };
  auto array_header = [](uint32_t elem, uint64_t count) {
    std::vector<uint8_t> p;
    put(&p, elem);
    put(&p, count);
    return p;
  };
  const std::vector<Case> cases = {
      {"magic", [](GgufBuilder& b) { b.magic = "GGML"; }, "not a GGUF file: starts with 'GGML', expected 'GGUF'"},
      {"version 1", [](GgufBuilder& b) { b.version = 1; },
       "GGUF version 1 is obsolete and not supported (versions 2 and 3 are)"},
      {"version 4", [](GgufBuilder& b) { b.version = 4; }, "GGUF version 4 is not supported (versions 2 and 3 are)"},
      {"version 0", [](GgufBuilder& b) { b.version = 0; }, "GGUF version 0 is not supported"},
      {"big-endian", [](GgufBuilder& b) { b.version = 0x03000000; },
       "GGUF version 50331648 looks byte-swapped: big-endian files are not supported"},
      {"kv count", [](GgufBuilder& b) { b.kv_count = uint64_t{1} << 62; },
       "metadata count 4611686018427387904 cannot fit in the"},
      {"negative count", [](GgufBuilder& b) { b.tensor_count = ~uint64_t{0}; },
       "tensor count 18446744073709551615 cannot fit in the"},
      {"huge string",
       [&](GgufBuilder& b) {
         std::vector<uint8_t> p;
         put<uint64_t>(&p, uint64_t{1} << 62);
         kv_raw(b, GgufType::STRING, p);
       },
       "the value of 'z.bad': string length 4611686018427387904 at byte"},
      {"string past end",
       [&](GgufBuilder& b) {
         std::vector<uint8_t> p;
         put<uint64_t>(&p, 100000);
         kv_raw(b, GgufType::STRING, p);
       },
       "truncated: the value of 'z.bad' (100000 bytes) needs 100000 bytes at byte"},
      {"huge array", [&](GgufBuilder& b) { kv_raw(b, GgufType::ARRAY, array_header(4, uint64_t{1} << 40)); },
       "key 'z.bad': array of 1099511627776 elements is over the 2^30 limit"},
      {"array past end", [&](GgufBuilder& b) { kv_raw(b, GgufType::ARRAY, array_header(10, 1u << 20)); },
       "key 'z.bad': array of 1048576 uint64 elements at byte"},
      {"string array past end", [&](GgufBuilder& b) { kv_raw(b, GgufType::ARRAY, array_header(8, 1u << 20)); },
       "key 'z.bad': array of 1048576 string elements at byte"},
      {"nested array", [&](GgufBuilder& b) { kv_raw(b, GgufType::ARRAY, array_header(9, 1)); },
       "key 'z.bad': arrays of arrays are not supported"},
      {"array elem type", [&](GgufBuilder& b) { kv_raw(b, GgufType::ARRAY, array_header(13, 1)); },
       "key 'z.bad': unknown array element type 13"},
      {"value type",
       [&](GgufBuilder& b) {
         kv_raw(b, GgufType(13), {0, 0, 0, 0});
       },
       "key 'z.bad': unknown value type 13"},
      {"bool", [&](GgufBuilder& b) { kv_raw(b, GgufType::BOOL, {2}); }, "key 'z.bad': bool byte 2, expected 0 or 1"},
      {"bool array",
       [&](GgufBuilder& b) {
         auto p = array_header(7, 2);
         p.push_back(1);
         p.push_back(5);
         kv_raw(b, GgufType::ARRAY, p);
       },
       "key 'z.bad': element 1 is bool byte 5, expected 0 or 1"},
      {"empty key", [&](GgufBuilder& b) { b.kv("", GgufType::UINT8, {1}); }, "metadata entry 7 has an empty key"},
      {"alignment 48", [](GgufBuilder& b) { b.u32("general.alignment", 48); },
       "key 'general.alignment' must be a uint32 power of two, got uint32 48"},
      {"alignment 0", [](GgufBuilder& b) { b.u32("general.alignment", 0); },
       "key 'general.alignment' must be a uint32 power of two, got uint32 0"},
      {"alignment u64", [](GgufBuilder& b) { b.scalar("general.alignment", GgufType::UINT64, uint64_t{32}); },
       "key 'general.alignment' must be a uint32 power of two, got uint64 32"},
      {"control bytes", [&](GgufBuilder& b) { b.kv("z\nkey", GgufType::BOOL, {9}); },
       "key 'z\\x0akey': bool byte 9, expected 0 or 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    GgufBuilder b = small_valid();
    c.edit(b);
    EXPECT_HAS(open_error(b), c.error);
  }
  // A duplicate key: the builder replaces keys, so write the entry twice by hand.
  GgufBuilder b = small_valid();
  auto bytes = b.bytes();
  std::vector<uint8_t> entry;
  put_str(&entry, "a.u8");
  put(&entry, uint32_t(GgufType::UINT8));
  entry.push_back(9);
  const size_t kv_start = 24;
  bytes.insert(bytes.begin() + kv_start, entry.begin(), entry.end());
  bytes[16] += 1;  // kv_count
  const std::string path = write_file("dup.gguf", bytes);
  auto f = GgufFile::open(path);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().message, path + ": key 'a.u8' appears twice (metadata entries 0 and 3)");
}

TEST(GgufBad, TensorInfosAndLayout) {
  struct Case {
    const char* name;
    std::function<void(GgufBuilder&)> edit;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"duplicate name", [](GgufBuilder& b) { b.tensors()[1].name = "t0"; },
       "tensor 't0' appears twice (tensors 0 and 1)"},
      {"empty name", [](GgufBuilder& b) { b.tensors()[1].name = ""; }, "tensor 1 has an empty name"},
      {"long name", [](GgufBuilder& b) { b.tensors()[1].name = std::string(64, 'n'); },
       "name of 64 bytes is over ggml's limit of 63"},
      {"n_dims 5",
       [](GgufBuilder& b) {
         b.tensors()[0].ne = {32, 2, 1, 1, 1};
       },
       "tensor 't0': n_dims 5 is more than 4"},
      {"negative dim",
       [](GgufBuilder& b) {
         b.tensors()[0].ne = {32, -2};
       },
       "tensor 't0': dim 1 is negative (-2)"},
      {"overflow",
       [](GgufBuilder& b) {
         b.tensors()[0].ne = {int64_t{1} << 40, int64_t{1} << 40};
       },
       "tensor 't0': dims [1099511627776, 1099511627776]: element count overflows 64 bits"},
      {"unknown type", [](GgufBuilder& b) { b.tensors()[0].type = 99; }, "tensor 't0': unknown ggml type id 99"},
      {"removed type", [](GgufBuilder& b) { b.tensors()[0].type = 4; }, "tensor 't0': unknown ggml type id 4"},
      {"block", [](GgufBuilder& b) { b.tensors()[1].ne = {48}; },
       "tensor 't1': dims [48]: ne[0] = 48 is not a multiple of the Q8_0 block of 32"},
      {"unaligned", [](GgufBuilder& b) { b.tensors()[1].offset = 260; },
       "tensor 't1': offset 260 is not aligned to 32"},
      {"gap", [](GgufBuilder& b) { b.tensors()[1].offset = 288; },
       "tensor 't1': offset 288, expected 256 (tensors follow each other in info order, each padded to 32 bytes)"},
      {"overlap", [](GgufBuilder& b) { b.tensors()[1].offset = 0; }, "tensor 't1': offset 0, expected 256"},
      {"first not at 0", [](GgufBuilder& b) { b.tensors()[0].offset = 32; }, "tensor 't0': offset 32, expected 0"},
      {"past eof", [](GgufBuilder& b) { b.tensors()[1].ne = {640}; }, "truncated: tensor 't1': data ["},
      {"huge tensor", [](GgufBuilder& b) { b.tensors()[1].ne = {int64_t{1} << 50}; }, "runs past the end of the"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    GgufBuilder b = small_valid();
    c.edit(b);
    EXPECT_HAS(open_error(b), c.error);
  }
}

void check_fuzz_input(const std::string& path) {
  SCOPED_TRACE(path);
  auto f = GgufFile::open(path);
  if (!f) {
    EXPECT_EQ(f.error().message.find('\n'), std::string::npos);
    return;
  }
  auto m = read_gguf_llama(*f);
  if (!m) {
    EXPECT_EQ(m.error().message.find('\n'), std::string::npos);
    return;
  }
  for (const std::string& hf : gguf_hf_tensor_names(*m)) {
    auto t = gguf_tensor_for_hf(*f, *m, hf);
    ASSERT_TRUE(t);
    std::vector<float> buf(size_t((*t)->numel));
    EXPECT_TRUE(gguf_tensor_f32(*f, *m, hf, buf.data(), (*t)->numel));
  }
}

// The fuzzer's seeds (tests/fuzz/corpus/gguf/) and every input that once crashed or hung
// tests/fuzz/fuzz_gguf.cpp (tests/fixtures/fuzz/gguf/, none so far): each must open or fail with
// one line, and whatever opens as a model must read.
TEST(GgufBad, FuzzSeedsAndRegressions) {
  int inputs = 0;
  for (const fs::path& dir :
       {fs::path(FTX_FIXTURE_DIR) / "fuzz" / "gguf", fs::path(FTX_FIXTURE_DIR) / ".." / "fuzz" / "corpus" / "gguf"}) {
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      ++inputs;
      check_fuzz_input(e.path().string());
    }
  }
  EXPECT_GE(inputs, 2);
}

// ---------------------------------------------------------------------------------------------
// The real SmolLM2-135M-Instruct.Q4_1.gguf (facts read from the file with an independent parser)

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(GgufReal, SmolLM2HeaderAndConfig) {
  const std::string path = test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(path);
  const auto t0 = std::chrono::steady_clock::now();
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f) << f.error().message;
  const double open_s = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  auto m = read_gguf_llama(*f);
  ASSERT_TRUE(m) << m.error().message;
  std::printf("SmolLM2 header: GgufFile::open %.1f ms, read_gguf_llama %.1f ms\n", open_s * 1e3,
              seconds_since(t1) * 1e3);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->tensors().size(), 272u);
  EXPECT_EQ(f->kvs().size(), 33u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset(), 1785664u);
  EXPECT_EQ(f->file_size(), 98362432u);
  EXPECT_EQ(f->kvs()[0].key, "general.architecture");
  EXPECT_EQ(f->kvs()[32].key, "general.quantization_version");
  EXPECT_EQ(f->find_kv("tokenizer.ggml.tokens")->type_text(), "array[string, 49152]");
  EXPECT_EQ(f->find_kv("tokenizer.ggml.merges")->type_text(), "array[string, 48900]");
  EXPECT_EQ(*f->get_int("general.file_type"), 3);
  const GgufTensor* embd = f->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, GgmlType::Q8_0);
  EXPECT_EQ(embd->ne, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(embd->nbytes, 30081024u);
  EXPECT_EQ(f->find_tensor("blk.0.ffn_down.weight")->ne, (std::vector<int64_t>{1536, 576}));
  EXPECT_EQ(f->find_tensor("blk.0.ffn_down.weight")->type, GgmlType::Q4_1);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  const GgufTensor& last = f->tensors().back();
  EXPECT_EQ(f->data_offset() + last.offset + last.nbytes, f->file_size());  // the last tensor ends the file

  const ModelConfig& c = m->config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.dim, 576);
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.ffn_hidden, 1536);
  EXPECT_EQ(c.max_seq_len, 8192);
  EXPECT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.rope_scaling.kind, RopeScalingKind::None);
  EXPECT_EQ(c.latent_bits, 0);
  EXPECT_EQ(m->name, "Smollm2 135M 8k Lc100K Mix1 Ep2");
  EXPECT_EQ(m->chat_template.size(), 368u);
  const BpeVocab& v = m->vocab;
  EXPECT_EQ(v.tokens.size(), 49152u);
  EXPECT_EQ(v.tokens[0], "<|endoftext|>");
  EXPECT_EQ(v.tokens[17], "!");
  EXPECT_EQ(v.token_types.size(), 49152u);
  EXPECT_EQ(v.token_types[16], 3);
  EXPECT_EQ(v.token_types[17], 1);
  EXPECT_EQ(v.merges.size(), 48900u);
  EXPECT_EQ(v.merges[0], "\xc4\xa0 t");
  EXPECT_EQ(v.tokens[252], "\xc4\xa0t");  // tokens[252 + r] = the r-th merge's result
  EXPECT_EQ(v.pre, "smollm");
  EXPECT_FALSE(v.add_bos);
  EXPECT_EQ(v.special.bos, 1);
  EXPECT_EQ(v.special.eos, 2);
  EXPECT_EQ(v.special.pad, 2);
  EXPECT_EQ(m->eos_ids, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(gguf_hf_tensor_names(*m).size(), 272u);
}

// Check values read from the file by an independent parser, in GGUF order, straight from the map.
TEST(GgufReal, SmolLM2CheckValues) {
  const std::string path = test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(path);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f) << f.error().message;
  auto row = [&](const char* name, int64_t r) {
    const GgufTensor* t = f->find_tensor(name);
    std::vector<float> out(size_t(t->ne[0]));
    dequantize_row_f32(t->type, f->tensor_data(*t) + r * t->row_bytes(), t->ne[0], out.data());
    return out;
  };
  const auto e0 = row("token_embd.weight", 0), e504 = row("token_embd.weight", 504);
  const auto q0 = row("blk.0.attn_q.weight", 0), norm = row("output_norm.weight", 0);
  const std::vector<float> want_e0 = {-0.10654449f, 0.032978058f, 0.0481987f, -0.022830963f};
  const std::vector<float> want_e504 = {0.10960388f, 0.017436981f, -0.094657898f, 0.082202911f};
  const std::vector<float> want_q0 = {-0.096313477f, 0.15734863f, -0.096313477f, -0.73046875f};
  const std::vector<float> want_norm = {1.7578125f, 1.8203125f, 1.78125f, 1.6015625f};
  for (int k = 0; k < 4; ++k) {
    EXPECT_FLOAT_EQ(e0[k], want_e0[k]);
    EXPECT_FLOAT_EQ(e504[k], want_e504[k]);
    EXPECT_FLOAT_EQ(q0[k], want_q0[k]);
    EXPECT_EQ(norm[k], want_norm[k]);
  }
  EXPECT_FLOAT_EQ(q0[16], -0.22314453f);
  const GgufTensor* q = f->find_tensor("blk.0.attn_q.weight");
  const uint8_t* block = f->tensor_data(*q);
  EXPECT_EQ(ggml_f16_to_f32(uint16_t(block[0] | block[1] << 8)), 0.12683105f);
  EXPECT_EQ(ggml_f16_to_f32(uint16_t(block[2] | block[3] << 8)), -0.73046875f);
  EXPECT_EQ(block[4], 0x45);
}

// Every tensor, through the Hugging Face names, against gguf-py + NumPy: float64 sums (also literal for four
// of them) and exact bit-pattern sums of the fp32 and bf16 values, and the bit sums of every row of
// layers 0 and 29's q_proj and k_proj (which fail if a single row is out of place).
TEST(GgufReal, SmolLM2EveryTensorMatchesGgufPy) {
  const std::string path = test::smollm2_gguf_path();
  REQUIRE_REAL_MODEL(path);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f) << f.error().message;
  auto m = read_gguf_llama(*f);
  ASSERT_TRUE(m) << m.error().message;
  std::ifstream in(kReal + "gguf_smollm2_expected.json");
  const nlohmann::json want = nlohmann::json::parse(in);
  double f32_s = 0, bf16_s = 0;
  std::vector<float> x;
  std::vector<uint16_t> b;
  for (const std::string& hf : gguf_hf_tensor_names(*m)) {
    SCOPED_TRACE(hf);
    const auto& w = want.at("tensors").at(hf);
    const int64_t n = (*gguf_tensor_for_hf(*f, *m, hf))->numel;
    x.resize(size_t(n));
    b.resize(size_t(n));
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(gguf_tensor_f32(*f, *m, hf, x.data(), n));
    f32_s += seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(gguf_tensor_bf16(*f, *m, hf, b.data(), n));
    bf16_s += seconds_since(t0);
    double sum = 0;
    uint64_t bits = 0, bits16 = 0;
    for (int64_t k = 0; k < n; ++k) {
      sum += x[size_t(k)];
      bits += bits_of(x[size_t(k)]);
      bits16 += b[size_t(k)];
    }
    EXPECT_NEAR(sum, w.at("sum").get<double>(), 1e-9 * std::max(1.0, std::abs(sum)));
    EXPECT_EQ(std::to_string(bits), w.at("f32_bits").get<std::string>());
    EXPECT_EQ(std::to_string(bits16), w.at("bf16_bits").get<std::string>());
    const std::map<std::string, double> e5_sums = {{"model.embed_tokens.weight", -15353.0445},
                                                   {"model.layers.0.self_attn.q_proj.weight", 59.223221},
                                                   {"model.layers.29.mlp.down_proj.weight", 49.835709},
                                                   {"model.norm.weight", 1038.332031}};
    if (auto it = e5_sums.find(hf); it != e5_sums.end()) {
      EXPECT_NEAR(sum, it->second, 1e-4);  // the literals have 4 to 6 decimals
    }
    if (!want.at("rows").contains(hf)) continue;
    const auto& rows = want.at("rows").at(hf).at("f32_bits");
    const int64_t cols = 576;
    ASSERT_EQ(int64_t(rows.size()) * cols, n);
    for (size_t r = 0; r < rows.size(); ++r) {
      uint64_t rb = 0;
      for (int64_t k = 0; k < cols; ++k) rb += bits_of(x[r * cols + size_t(k)]);
      ASSERT_EQ(std::to_string(rb), rows[r].get<std::string>()) << "row " << r;
    }
  }
  std::printf("SmolLM2 dequantization of all 272 tensors: fp32 %.2f s, bf16 %.2f s\n", f32_s, bf16_s);
}

}  // namespace
}  // namespace ftx
