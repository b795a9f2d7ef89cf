// safetensors: a strict reader and a simple fp32 / bf16 writer (docs/design.md section 5).
//
// Layout: [u64 little-endian N][N bytes of UTF-8 JSON header][data buffer to end of file].
// SafetensorsFile::open() reads only the 8-byte prefix and the header (never the data buffer, so
// multi-GB files open in constant memory) and validates everything before anything is trusted:
// header length capped (100 MB) and checked against the file size before allocating, UTF-8 and
// JSON, duplicate keys rejected explicitly, exact non-negative integer dims and offsets, known
// dtypes, overflow-checked element and byte counts, END-BEGIN == numel * dtype size, offsets
// contiguous from 0 (no gaps, no overlaps), last END + 8 + N == file size, no NUL in names,
// __metadata__ a flat string->string map. Tensor data is read later, on demand, with pread
// (never assuming alignment), converted to fp32 for F32, F16 and BF16.
//
// parse_safetensors() runs the same validation on a whole file already in memory (a MappedFile,
// a fuzzer's input): it reads only the prefix and the header bytes.
//
// Deliberately not here: the mapping itself (core/io/mapped_file.h), writing dtypes other than
// F32 and BF16, big-endian hosts, sharded sets (core/io/checkpoint.cpp and core/io/hf_checkpoint.cpp read
// the index).
// Every error is one line "<path>: <problem>", naming the tensor and offsets where relevant.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/util/fs.h"
#include "kernels/base/result.h"

namespace ftx {

// Every dtype string of the safetensors format; anything else is rejected at open(). A storage
// type of the file, not a compute type: the backend's weight dtypes are ftx::DType (kernels/base/dtype.h).
enum class SafetensorsDType {
  BOOL,
  U8,
  I8,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  I64,
  U64,
  F64,
  C64,
  F8_E5M2,
  F8_E4M3,
  F8_E8M0,
  F8_E4M3FNUZ,
  F8_E5M2FNUZ,
  F4,
  F6_E2M3,
  F6_E3M2
};

const char* dtype_name(SafetensorsDType t);                  // "BF16"
int dtype_bits(SafetensorsDType t);                          // 16 (4 for F4, 6 for F6_*)
Result<SafetensorsDType> parse_dtype(const std::string& s);  // "BF16" -> BF16; an error for unknown strings

struct TensorInfo {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::F32;
  std::vector<int64_t> shape;   // row-major; [] = scalar (1 element)
  uint64_t begin = 0, end = 0;  // byte offsets relative to the start of the data buffer
  int64_t numel = 0;            // product of shape (overflow-checked at open)
};

// "[2, 3]" for error messages.
std::string shape_str(const std::vector<int64_t>& shape);
// A name from a file, quoted for a one-line message: 'a\x0ab' (control bytes escaped).
std::string quote_name(const std::string& s);

// Converters used by the reader (exposed for tests). Exact: every f16/bf16 value is an f32.
float f16_to_f32(uint16_t h);

// The first NaN or Inf among n values of `dtype` (F32, F16 or BF16) at p (any alignment) as the
// one-line error of every weight loader: "FILE: tensor 'NAME': element I is NaN (non-finite
// weights are refused)"; ok when all are finite. Non-finite = exponent all ones, scanned
// branch-free block by block.
Status check_finite_values(const std::string& file, const std::string& tensor, SafetensorsDType dtype, const void* p,
                           int64_t n);
float bf16_to_f32(uint16_t b);

// n elements of F32, F16 or BF16 at `src` (any alignment) widened to fp32 (exact); false, with
// nothing written, for any other dtype.
bool decode_f32(SafetensorsDType dtype, const void* src, int64_t n, float* dst);

// A validated header: what SafetensorsFile::open checks, from a whole file in memory.
struct SafetensorsHeader {
  uint64_t header_len = 0;          // N
  std::vector<TensorInfo> tensors;  // sorted by data offset
  std::map<std::string, std::string> metadata;
  // File offset of the data buffer (8 + N): tensor bytes are at data_offset() + begin.
  uint64_t data_offset() const { return 8 + header_len; }
};

// Validates the `size` bytes at `data` as a whole safetensors file (every check of
// SafetensorsFile::open); `path` names it in errors. Reads only the first 8 + N bytes.
Result<SafetensorsHeader> parse_safetensors(const std::string& path, const uint8_t* data, uint64_t size);

class SafetensorsFile {
 public:
  // Opens and fully validates the header of `path`. The file stays open for the reads below.
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  // Tensors in file order (sorted by data offset).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // File offset of the data buffer (8 + N): tensor bytes are at data_offset() + begin.
  uint64_t data_offset() const { return 8 + header_len_; }

  // Reads tensor `name` converted to fp32 (F32, F16 and BF16 supported; other dtypes are an
  // error). Errors name the file and the tensor.
  Result<std::vector<float>> read_f32(const std::string& name) const;
  // Same into caller memory; `count` must equal the tensor's element count.
  Status read_f32_into(const std::string& name, float* dst, int64_t count) const;
  // The tensor's raw bytes (any dtype); `bytes` must equal end - begin.
  Status read_raw(const std::string& name, void* dst, uint64_t bytes) const;

 private:
  SafetensorsFile() = default;
  Result<const TensorInfo*> lookup(const std::string& name) const;
  std::string path_;
  UniqueFd fd_;
  uint64_t header_len_ = 0;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// One fp32 tensor to write; `data` holds numel(shape) floats (no alignment needed). `dtype` is
// what the file stores: F32 as is, or BF16 rounded to nearest even (half the bytes).
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
  SafetensorsDType dtype = SafetensorsDType::F32;
};

// Writes a safetensors file: tensors laid out in the given order as F32 or BF16, header padded with
// spaces to a multiple of 8, file fsynced. Names must be unique, non-empty, without NUL, and not
// "__metadata__". On any I/O failure (ENOSPC, EFBIG, EACCES, ...) the partial file is removed and
// the error names the path.
Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace ftx
