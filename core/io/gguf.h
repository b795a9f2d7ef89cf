// GGUF (llama.cpp's model file, versions 2 and 3): a strict reader of the header, the metadata
// key-value pairs and the tensor-info table (ggml docs/gguf.md; the checks of ggml's
// gguf_init_from_reader and more). GgufFile::open() maps the file (ftx::MappedFile) and parses only
// the header, so opening a multi-GB model touches none of its tensor data; tensor_data() then
// points into the mapping.
//
// Everything is validated before anything is trusted, in the order of docs/design.md: magic,
// version (2 or 3; byte-swapped files refused), counts capped by the bytes left before anything
// is allocated, every length and count checked against the bytes left with overflow-checked
// 64-bit arithmetic (strings <= 1 GiB, arrays <= 2^30 elements), keys non-empty and unique, value
// types 0..12 without nested arrays, BOOL bytes 0 or 1, general.alignment a UINT32 power of two;
// tensor names non-empty, < 64 bytes and unique, n_dims <= 4, dims >= 0, element and byte counts
// without overflow, known ggml types with ne[0] a multiple of the block, offsets aligned and equal
// to the padded running sum of the previous tensors (as llama.cpp requires), data inside the file.
// Every error is one line "PATH: problem", naming the key or tensor:
//   "m.gguf: tensor 'blk.0.attn_q.weight': offset 123 is not aligned to 32".
//
// Deliberately not here: writing GGUF, big-endian files, the spec's key grammar and UTF-8
// validation (llama.cpp checks neither), what the keys mean (core/io/gguf_llama.h), dequantization
// (core/io/ggml_quants.h).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/io/ggml_quants.h"
#include "core/io/mapped_file.h"
#include "kernels/base/result.h"

namespace ftx {

// gguf_type: the value types of the metadata.
enum class GgufType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* gguf_type_name(GgufType t);  // "uint32", "string", "array"

// One metadata entry. Scalars are held decoded; strings and string arrays as std::string; numeric
// and bool arrays stay in the file and are read by the typed getters.
struct GgufKv {
  std::string key;
  GgufType type = GgufType::UINT8;
  GgufType elem_type = GgufType::UINT8;  // ARRAY: the element type (never ARRAY)
  uint64_t count = 0;                    // ARRAY: the element count
  uint64_t u = 0;                        // UINT8..UINT64 and BOOL
  int64_t i = 0;                         // INT8..INT64
  double f = 0;                          // FLOAT32 (widened, exact) and FLOAT64
  std::string str;                       // STRING
  std::vector<std::string> strings;      // ARRAY of STRING
  uint64_t array_offset = 0;             // ARRAY of a fixed-size type: file offset of element 0

  // "uint32", "string", "array[string, 49152]" (what `ftx inspect` prints beside the key).
  std::string type_text() const;
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // GGUF / ggml order: ne[0] is the contiguous axis; n_dims entries
  uint64_t offset = 0;      // bytes from the start of the data section
  uint64_t nbytes = 0;
  int64_t numel = 0;

  // Row-major (PyTorch) shape: ne reversed. ne [576, 192] is a (192, 576) nn.Linear weight.
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
  int64_t rows() const { return ne.empty() ? 1 : ne[0] == 0 ? 0 : numel / ne[0]; }  // numel / ne[0]
  uint64_t row_bytes() const;                                                       // bytes of ne[0] elements
};

// "[576, 49152]" for messages.
std::string gguf_dims_str(const std::vector<int64_t>& ne);

class GgufFile {
 public:
  static Result<GgufFile> open(const std::string& path);
  // Parses a GGUF image already in memory (fuzzing, tests): `bytes` must outlive the GgufFile and
  // `name` stands for the path in messages.
  static Result<GgufFile> parse(const std::string& name, const uint8_t* bytes, uint64_t size);

  GgufFile(GgufFile&&) = default;
  GgufFile& operator=(GgufFile&&) = default;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section
  uint64_t file_size() const { return size_; }

  // Metadata in file order, and lookup by key (nullptr when absent).
  const std::vector<GgufKv>& kvs() const { return kvs_; }
  const GgufKv* find_kv(const std::string& key) const;
  bool has(const std::string& key) const { return find_kv(key) != nullptr; }
  // Typed getters: an error names the file and the key, for a missing key or another type
  // ("m.gguf: key 'llama.block_count' is string, expected an integer").
  Result<std::string> get_string(const std::string& key) const;
  Result<int64_t> get_int(const std::string& key) const;   // any integer type; UINT64 above INT64_MAX refused
  Result<double> get_float(const std::string& key) const;  // FLOAT32 or FLOAT64
  Result<bool> get_bool(const std::string& key) const;
  Result<std::span<const std::string>> get_string_array(const std::string& key) const;
  Result<std::vector<int64_t>> get_int_array(const std::string& key) const;   // arrays of any integer type
  Result<std::vector<double>> get_float_array(const std::string& key) const;  // FLOAT32 or FLOAT64 arrays
  // The value as text for a listing: strings quoted and cut at max_chars, arrays by their first
  // elements ("['Ġ t', 'Ġ a', 'i n', ...]").
  std::string value_text(const GgufKv& kv, size_t max_chars = 80) const;

  // Tensors in file order, lookup by name (nullptr when absent), and a tensor's bytes in the map.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(const std::string& name) const;
  const uint8_t* tensor_data(const GgufTensor& t) const { return base_ + data_offset_ + t.offset; }
  // madvise(WILLNEED) over the tensor's bytes before a pass over them (a hint; no-op in memory).
  void will_need(const GgufTensor& t) const { map_.will_need(data_offset_ + t.offset, t.nbytes); }

 private:
  GgufFile() = default;
  Status parse_all();
  Status parse_tensor_layout(uint64_t infos_end);
  Result<const GgufKv*> lookup(const std::string& key) const;
  Error wrong_type(const GgufKv& kv, const char* expected) const;

  std::string path_;
  MappedFile map_;  // empty when parsed from memory
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace ftx
