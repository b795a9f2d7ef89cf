// safetensors reader and writer (see safetensors.h for the validation list and the non-goals).
// Validation order follows docs/design.md section 8: sizes bounded before allocating, then the JSON,
// then each entry (dtype, exact integers, overflow-checked sizes), then the layout of all
// entries against each other and against the file size.
#include "core/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/io/config_json.h"
#include "kernels/base/dtype.h"

namespace ftx {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swapping");

namespace {

using nlohmann::json;

// Reference implementation's MAX_HEADER_SIZE (safetensors tensor.rs).
constexpr uint64_t kMaxHeaderLen = 100'000'000;
// Elements converted per chunk when reading F16/BF16 (bounds the staging buffer to 2 MiB).
constexpr int64_t kConvertChunk = int64_t{1} << 20;

struct DTypeRow {
  SafetensorsDType type;
  const char* name;
  int bits;
};

constexpr DTypeRow kDTypes[] = {
    {SafetensorsDType::BOOL, "BOOL", 8},
    {SafetensorsDType::U8, "U8", 8},
    {SafetensorsDType::I8, "I8", 8},
    {SafetensorsDType::I16, "I16", 16},
    {SafetensorsDType::U16, "U16", 16},
    {SafetensorsDType::F16, "F16", 16},
    {SafetensorsDType::BF16, "BF16", 16},
    {SafetensorsDType::I32, "I32", 32},
    {SafetensorsDType::U32, "U32", 32},
    {SafetensorsDType::F32, "F32", 32},
    {SafetensorsDType::I64, "I64", 64},
    {SafetensorsDType::U64, "U64", 64},
    {SafetensorsDType::F64, "F64", 64},
    {SafetensorsDType::C64, "C64", 64},
    {SafetensorsDType::F8_E5M2, "F8_E5M2", 8},
    {SafetensorsDType::F8_E4M3, "F8_E4M3", 8},
    {SafetensorsDType::F8_E8M0, "F8_E8M0", 8},
    {SafetensorsDType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {SafetensorsDType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {SafetensorsDType::F4, "F4", 4},
    {SafetensorsDType::F6_E2M3, "F6_E2M3", 6},
    {SafetensorsDType::F6_E3M2, "F6_E3M2", 6},
};

const DTypeRow& dtype_row(SafetensorsDType t) {
  for (const auto& r : kDTypes)
    if (r.type == t) return r;
  FT_ASSERT(false, "unknown SafetensorsDType %d", static_cast<int>(t));
  return kDTypes[0];
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

// Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF). Returns the offset of the
// first bad byte, or npos.
size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = 0;
    uint32_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0x80)
      len = 1;
    else if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
      len = 3, lo = (c == 0xE0 ? 0xA0 : 0x80), hi = (c == 0xED ? 0x9F : 0xBF);
    else if (c >= 0xF0 && c <= 0xF4)
      len = 4, lo = (c == 0xF0 ? 0x90 : 0x80), hi = (c == 0xF4 ? 0x8F : 0xBF);
    else
      return i;
    if (i + len > s.size()) return i;
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

// Exact non-negative integer that fits in int64 (JSON floats, negatives, bools rejected).
bool json_to_u63(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s < 0) return false;
    *out = static_cast<uint64_t>(s);
  } else {
    return false;
  }
  return *out <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

Status parse_metadata(const std::string& path, const json& v, std::map<std::string, std::string>* out) {
  if (!v.is_object()) return make_error(path + ": __metadata__ must be an object of strings, got " + v.type_name());
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_string())
      return make_error(path + ": __metadata__ key " + quote_name(it.key()) + ": value must be a string, got " +
                        it.value().type_name());
    (*out)[it.key()] = it.value().get<std::string>();
  }
  return {};
}

Status parse_shape(const std::string& where, const json& v, TensorInfo* t) {
  if (!v.is_array()) return make_error(where + ": 'shape' must be an array, got " + v.type_name());
  uint64_t numel = 1;
  for (size_t i = 0; i < v.size(); ++i) {
    uint64_t d = 0;
    if (!json_to_u63(v[i], &d))
      return make_error(where + ": shape[" + std::to_string(i) + "] must be a non-negative integer, got " +
                        v[i].dump());
    t->shape.push_back(static_cast<int64_t>(d));
    if (mul_overflows(numel, d, &numel) || numel > uint64_t(std::numeric_limits<int64_t>::max()))
      return make_error(where + ": shape " + v.dump() + ": element count overflows 64 bits");
  }
  t->numel = static_cast<int64_t>(numel);
  return {};
}

Status parse_offsets(const std::string& where, const json& v, TensorInfo* t) {
  if (!v.is_array() || v.size() != 2)
    return make_error(where + ": 'data_offsets' must be an array [BEGIN, END], got " + v.dump());
  if (!json_to_u63(v[0], &t->begin) || !json_to_u63(v[1], &t->end))
    return make_error(where + ": data_offsets " + v.dump() + " must be non-negative integers");
  if (t->end < t->begin) return make_error(where + ": data_offsets " + v.dump() + ": END is before BEGIN");
  return {};
}

// One header entry "name": {"dtype", "shape", "data_offsets"}; checks the byte count.
Status parse_entry(const std::string& path, const std::string& name, const json& v, TensorInfo* t) {
  const std::string where = path + ": tensor " + quote_name(name);
  if (name.find('\0') != std::string::npos) return make_error(where + ": tensor name contains a NUL byte");
  if (!v.is_object()) return make_error(where + ": entry must be an object, got " + v.type_name());
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
      return make_error(where + ": unknown field " + quote_name(it.key()));
  for (const char* k : {"dtype", "shape", "data_offsets"})
    if (!v.contains(k)) return make_error(where + ": missing field '" + k + "'");
  t->name = name;
  const json& dt = v["dtype"];
  if (!dt.is_string()) return make_error(where + ": unknown dtype " + dt.dump());
  auto dtype = parse_dtype(dt.get<std::string>());
  if (!dtype) return make_error(where + ": " + dtype.error().message);
  t->dtype = *dtype;
  FTX_TRY(parse_shape(where, v["shape"], t));
  FTX_TRY(parse_offsets(where, v["data_offsets"], t));
  uint64_t bits = 0;
  if (mul_overflows(static_cast<uint64_t>(t->numel), dtype_row(t->dtype).bits, &bits))
    return make_error(where + ": shape " + shape_str(t->shape) + ": bit count overflows 64 bits");
  if (bits % 8 != 0)
    return make_error(where + ": shape " + shape_str(t->shape) + " of " + dtype_name(t->dtype) +
                      " is not a whole number of bytes");
  if (t->end - t->begin != bits / 8)
    return make_error(where + ": size mismatch: data_offsets [" + std::to_string(t->begin) + ", " +
                      std::to_string(t->end) + "] hold " + std::to_string(t->end - t->begin) + " bytes but shape " +
                      shape_str(t->shape) + " of " + dtype_name(t->dtype) + " needs " + std::to_string(bits / 8));
  return {};
}

// Offsets sorted, contiguous from 0, and ending exactly at the end of the file.
Status check_layout(const std::string& path, std::vector<TensorInfo>* tensors, uint64_t data_size) {
  for (const auto& t : *tensors)
    if (t.end > data_size)
      return make_error(path + ": tensor " + quote_name(t.name) + ": data_offsets [" + std::to_string(t.begin) + ", " +
                        std::to_string(t.end) + "] are out of range: past the end of the " + std::to_string(data_size) +
                        "-byte data buffer (file truncated?)");
  std::sort(tensors->begin(), tensors->end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : *tensors) {
    std::string range = "[";  // appended, not "[" + std::string: GCC 12 -Wrestrict false positive
    range += std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
    const std::string after = prev ? "the previous tensor " + quote_name(prev->name) : "the start of the data buffer";
    if (t.begin < pos)
      return make_error(path + ": tensor " + quote_name(t.name) + ": data_offsets " + range + " overlap " + after +
                        " (ends at " + std::to_string(pos) + ")");
    if (t.begin > pos)
      return make_error(path + ": tensor " + quote_name(t.name) + ": data_offsets " + range + " leave a gap of " +
                        std::to_string(t.begin - pos) + " bytes after " + after);
    pos = t.end;
    prev = &t;
  }
  if (pos != data_size)
    return make_error(path + ": " + std::to_string(data_size - pos) + " trailing bytes after the last tensor " +
                      "(data ends at " + std::to_string(pos) + " of a " + std::to_string(data_size) +
                      "-byte data buffer)");
  return {};
}

}  // namespace

const char* dtype_name(SafetensorsDType t) { return dtype_row(t).name; }
int dtype_bits(SafetensorsDType t) { return dtype_row(t).bits; }

Result<SafetensorsDType> parse_dtype(const std::string& s) {
  for (const auto& r : kDTypes)
    if (s == r.name) return r.type;
  return make_error("unknown dtype " + quote_name(s));
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string quote_name(const std::string& s) {
  std::string out = "'";
  for (unsigned char ch : s) {
    if (ch < 0x20 || ch == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[ch >> 4];
      out += hex[ch & 15];
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "'";
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // Inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // normal: rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: value = mant * 2^-24, exactly representable as a normal f32.
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_f32(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

// The header length from the 8-byte prefix, bounded and checked against the file size.
Result<uint64_t> header_length(const std::string& path, const unsigned char* prefix, uint64_t size) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];  // little-endian u64
  if (n > kMaxHeaderLen)
    return make_error(path + ": header length " + std::to_string(n) + " exceeds the " + std::to_string(kMaxHeaderLen) +
                      "-byte limit (corrupt or not a safetensors file)");
  if (n > size - 8)
    return make_error(path + ": header length " + std::to_string(n) + " runs past the end of the file (" +
                      std::to_string(size) + " bytes; truncated?)");
  return n;
}

Status too_short(const std::string& path, uint64_t size) {
  return make_error(path + ": file too short (" + std::to_string(size) +
                    " bytes): a safetensors file starts with an 8-byte header length");
}

// The JSON header text of a file whose data buffer has `data_size` bytes.
Status parse_header(const std::string& path, std::string_view header, uint64_t data_size, SafetensorsHeader* out) {
  if (header.empty() || header[0] != '{')
    return make_error(path + ": header is not a JSON object (first byte must be '{')");
  if (const size_t bad = find_invalid_utf8(header); bad != std::string_view::npos)
    return make_error(path + ": header is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  auto parsed = parse_json_strict(header, path + ": header");
  if (!parsed) return parsed.error();
  const json& j = *parsed;
  if (!j.is_object()) return make_error(path + ": header is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      FTX_TRY(parse_metadata(path, it.value(), &out->metadata));
      continue;
    }
    TensorInfo t;
    FTX_TRY(parse_entry(path, it.key(), it.value(), &t));
    out->tensors.push_back(std::move(t));
  }
  return check_layout(path, &out->tensors, data_size);
}

}  // namespace

Result<SafetensorsHeader> parse_safetensors(const std::string& path, const uint8_t* data, uint64_t size) {
  try {
    if (size < 8) return too_short(path, size).error();
    auto n = header_length(path, data, size);
    if (!n) return n.error();
    SafetensorsHeader h;
    h.header_len = *n;
    const std::string_view header(reinterpret_cast<const char*>(data) + 8, *n);
    FTX_TRY(parse_header(path, header, size - 8 - *n, &h));
    return h;
  } catch (const std::exception& e) {
    return make_error(path + ": cannot read header: " + e.what());
  }
}

bool decode_f32(SafetensorsDType dtype, const void* src, int64_t n, float* dst) {
  const auto* p = static_cast<const unsigned char*>(src);
  if (dtype != SafetensorsDType::F32 && dtype != SafetensorsDType::F16 && dtype != SafetensorsDType::BF16) return false;
  if (n <= 0) return true;  // an empty tensor: dst may be null (an empty vector's data())
  if (dtype == SafetensorsDType::F32) {
    std::memcpy(dst, p, size_t(n) * 4);
    return true;
  }
  float (*convert)(uint16_t) = dtype == SafetensorsDType::F16 ? f16_to_f32 : bf16_to_f32;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = convert(h);
  }
  return true;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  try {
    SafetensorsFile f;
    f.path_ = path;
    uint64_t size = 0;
    auto fd = open_for_read(path, &size);
    if (!fd) return fd.error();
    f.fd_ = std::move(*fd);
    if (size < 8) return too_short(path, size).error();
    unsigned char prefix[8];
    FTX_TRY(pread_exact(f.fd_.get(), prefix, 8, 0, path));
    auto n = header_length(path, prefix, size);
    if (!n) return n.error();
    f.header_len_ = *n;
    std::string header(*n, '\0');
    FTX_TRY(pread_exact(f.fd_.get(), header.data(), *n, 8, path));
    SafetensorsHeader h;
    FTX_TRY(parse_header(path, header, size - 8 - *n, &h));
    f.tensors_ = std::move(h.tensors);
    f.metadata_ = std::move(h.metadata);
    for (size_t i = 0; i < f.tensors_.size(); ++i) f.by_name_.emplace(f.tensors_[i].name, i);
    return f;
  } catch (const std::exception& e) {
    return make_error(path + ": cannot read header: " + e.what());
  }
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Result<const TensorInfo*> SafetensorsFile::lookup(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) return make_error(path_ + ": tensor " + quote_name(name) + " not found");
  return t;
}

Status SafetensorsFile::read_raw(const std::string& name, void* dst, uint64_t bytes) const {
  auto t = lookup(name);
  if (!t) return t.error();
  const TensorInfo& ti = **t;
  if (bytes != ti.end - ti.begin)
    return make_error(path_ + ": tensor " + quote_name(name) + ": caller expects " + std::to_string(bytes) +
                      " bytes, the tensor has " + std::to_string(ti.end - ti.begin));
  return pread_exact(fd_.get(), dst, bytes, data_offset() + ti.begin, path_);
}

Status SafetensorsFile::read_f32_into(const std::string& name, float* dst, int64_t count) const {
  auto t = lookup(name);
  if (!t) return t.error();
  const TensorInfo& ti = **t;
  if (count != ti.numel)
    return make_error(path_ + ": tensor " + quote_name(name) + ": caller expects " + std::to_string(count) +
                      " elements, the tensor has " + std::to_string(ti.numel) + " " + shape_str(ti.shape));
  if (ti.dtype == SafetensorsDType::F32)
    return pread_exact(fd_.get(), dst, ti.end - ti.begin, data_offset() + ti.begin, path_);
  if (ti.dtype != SafetensorsDType::F16 && ti.dtype != SafetensorsDType::BF16)
    return make_error(path_ + ": tensor " + quote_name(name) + ": dtype " + dtype_name(ti.dtype) +
                      " cannot be read as fp32 (supported: F32, F16, BF16)");
  std::vector<uint16_t> staging(static_cast<size_t>(std::min(count, kConvertChunk)));
  for (int64_t i0 = 0; i0 < count; i0 += kConvertChunk) {
    const int64_t n = std::min(kConvertChunk, count - i0);
    const uint64_t at = data_offset() + ti.begin + uint64_t(i0) * 2;
    FTX_TRY(pread_exact(fd_.get(), staging.data(), uint64_t(n) * 2, at, path_));
    decode_f32(ti.dtype, staging.data(), n, dst + i0);
  }
  return {};
}

Result<std::vector<float>> SafetensorsFile::read_f32(const std::string& name) const {
  auto t = lookup(name);
  if (!t) return t.error();
  std::vector<float> out;
  try {
    out.resize(static_cast<size_t>((*t)->numel));
  } catch (const std::exception&) {
    return make_error(path_ + ": tensor " + quote_name(name) + ": cannot allocate " + std::to_string((*t)->numel) +
                      " floats");
  }
  FTX_TRY(read_f32_into(name, out.data(), (*t)->numel));
  return out;
}

namespace {

// The JSON header for `tensors` laid out back to back in order, padded to a multiple of 8.
Result<std::string> build_header(const std::string& path, const std::vector<NamedTensor>& tensors,
                                 const std::map<std::string, std::string>& metadata, std::vector<uint64_t>* sizes) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::string where = path + ": tensor " + quote_name(t.name);
    if (t.name.empty() || t.name.find('\0') != std::string::npos || t.name == "__metadata__")
      return make_error(where + ": invalid tensor name (empty, NUL byte or reserved)");
    if (h.contains(t.name)) return make_error(where + ": duplicate tensor name");
    uint64_t numel = 1, bytes = 0;
    for (int64_t d : t.shape)
      if (d < 0 || mul_overflows(numel, uint64_t(d), &numel))
        return make_error(where + ": invalid shape " + shape_str(t.shape));
    if (t.dtype != SafetensorsDType::F32 && t.dtype != SafetensorsDType::BF16)
      return make_error(where + ": cannot write dtype " + dtype_name(t.dtype) + " (F32 or BF16)");
    if (mul_overflows(numel, uint64_t(dtype_bits(t.dtype) / 8), &bytes) || (bytes > 0 && t.data == nullptr))
      return make_error(where + ": shape " + shape_str(t.shape) + " too large or data missing");
    h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    sizes->push_back(bytes);
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  try {
    std::vector<uint64_t> sizes;
    auto header = build_header(path, tensors, metadata, &sizes);
    if (!header) return header.error();
    unsigned char prefix[8];
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(uint64_t(header->size()) >> (8 * i));
    auto w = FileWriter::create(path);
    if (!w) return w.error();
    FTX_TRY(w->write(prefix, 8));
    FTX_TRY(w->write(header->data(), header->size()));
    std::vector<uint16_t> half;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const NamedTensor& t = tensors[i];
      if (t.dtype == SafetensorsDType::F32) {
        FTX_TRY(w->write(t.data, sizes[i]));
        continue;
      }
      half.resize(sizes[i] / 2);
      for (size_t j = 0; j < half.size(); ++j) {
        half[j] = fp32_to_bf16(t.data[j]);
        if ((half[j] & 0x7F80u) == 0x7F80u && std::isfinite(t.data[j]))
          return make_error(path + ": tensor " + quote_name(t.name) + ": element " + std::to_string(j) + " (" +
                            std::to_string(t.data[j]) + ") overflows BF16");
      }
      FTX_TRY(w->write(half.data(), sizes[i]));
    }
    return w->finish();
  } catch (const std::exception& e) {
    return make_error(path + ": cannot write: " + e.what());
  }
}

namespace {

// Elements per block when scanning for non-finite values (the scan is a branch-free OR per block).
constexpr int64_t kScanBlock = int64_t{1} << 16;

// Index of the first non-finite element of n values of `dtype` at p (any alignment), or -1.
// Non-finite = exponent all ones: the same test for NaN and Inf in each format.
template <class U>
int64_t first_nonfinite(const uint8_t* p, int64_t n, U exp_mask) {
  for (int64_t i0 = 0; i0 < n; i0 += kScanBlock) {
    const int64_t m = std::min(kScanBlock, n - i0);
    bool bad = false;
    for (int64_t i = 0; i < m; ++i) {
      U u;
      std::memcpy(&u, p + (i0 + i) * int64_t(sizeof(U)), sizeof(U));
      bad |= (u & exp_mask) == exp_mask;
    }
    if (!bad) continue;
    for (int64_t i = 0; i < m; ++i) {
      U u;
      std::memcpy(&u, p + (i0 + i) * int64_t(sizeof(U)), sizeof(U));
      if ((u & exp_mask) == exp_mask) return i0 + i;
    }
  }
  return -1;
}

}  // namespace

Status check_finite_values(const std::string& file, const std::string& tensor, SafetensorsDType dtype, const void* p,
                           int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(p);
  int64_t bad = -1;
  bool nan = false;
  if (dtype == SafetensorsDType::F32) {
    bad = first_nonfinite<uint32_t>(bytes, n, 0x7F800000u);
    if (bad >= 0) {
      uint32_t u;
      std::memcpy(&u, bytes + 4 * bad, 4);
      nan = (u & 0x007FFFFFu) != 0;
    }
  } else {
    FT_ASSERT(dtype == SafetensorsDType::F16 || dtype == SafetensorsDType::BF16, "check_finite_values: %s",
              dtype_name(dtype));
    const bool f16 = dtype == SafetensorsDType::F16;
    bad = first_nonfinite<uint16_t>(bytes, n, f16 ? uint16_t(0x7C00) : uint16_t(0x7F80));
    if (bad >= 0) {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * bad, 2);
      nan = (h & (f16 ? 0x03FF : 0x007F)) != 0;
    }
  }
  if (bad < 0) return {};
  return make_error(file + ": tensor " + quote_name(tensor) + ": element " + std::to_string(bad) + " is " +
                    (nan ? "NaN" : "Inf") + " (non-finite weights are refused)");
}

}  // namespace ftx
