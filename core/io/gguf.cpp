// GGUF reader (see gguf.h for the list of checks and the non-goals). One pass over the header
// with a bounds-checked cursor: every read first checks the bytes left, every count is capped by
// them before anything is reserved, and every size is computed with overflow-checked 64-bit
// arithmetic. Messages are built only on failure, so the 1.7 MB header of a 49k-token vocabulary
// parses in milliseconds.
#include "core/io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/io/safetensors.h"  // quote_name

namespace ftx {

static_assert(std::endian::native == std::endian::little, "GGUF files are read as little-endian");

namespace {

constexpr uint64_t kMaxString = uint64_t{1} << 30;           // ggml's limit on one string
constexpr uint64_t kMaxArray = uint64_t{1} << 30;            // ggml's limit on one array's elements
constexpr uint64_t kMaxTensorName = 63;                      // GGML_MAX_NAME (64) less the NUL
constexpr int kMaxDims = 4;                                  // GGML_MAX_DIMS
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;              // key length, 1-byte key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 4 + 8;  // name length, name, n_dims, type, offset
constexpr uint64_t kReserveCap = uint64_t{1} << 16;          // elements reserved up front; more grow as parsed

struct TypeRow {
  const char* name;
  uint64_t size;  // bytes of one value; 0 for STRING and ARRAY
};

constexpr TypeRow kTypeRows[] = {
    {"uint8", 1}, {"int8", 1},   {"uint16", 2}, {"int16", 2},  {"uint32", 4}, {"int32", 4},   {"float32", 4},
    {"bool", 1},  {"string", 0}, {"array", 0},  {"uint64", 8}, {"int64", 8},  {"float64", 8},
};
constexpr uint32_t kTypeCount = sizeof(kTypeRows) / sizeof(kTypeRows[0]);

bool is_unsigned(GgufType t) {
  return t == GgufType::UINT8 || t == GgufType::UINT16 || t == GgufType::UINT32 || t == GgufType::UINT64;
}
bool is_signed(GgufType t) {
  return t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 || t == GgufType::INT64;
}
bool is_float(GgufType t) { return t == GgufType::FLOAT32 || t == GgufType::FLOAT64; }

// One fixed-size value at p, decoded into the GgufKv fields that hold its kind.
void decode_scalar(GgufType t, const uint8_t* p, GgufKv* kv) {
  switch (t) {
    case GgufType::UINT8:
    case GgufType::BOOL:
      kv->u = p[0];
      break;
    case GgufType::INT8:
      kv->i = int8_t(p[0]);
      break;
    case GgufType::UINT16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      kv->u = v;
    } break;
    case GgufType::INT16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      kv->i = v;
    } break;
    case GgufType::UINT32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      kv->u = v;
    } break;
    case GgufType::INT32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      kv->i = v;
    } break;
    case GgufType::FLOAT32: {
      float v;
      std::memcpy(&v, p, 4);
      kv->f = v;
    } break;
    case GgufType::UINT64:
      std::memcpy(&kv->u, p, 8);
      break;
    case GgufType::INT64:
      std::memcpy(&kv->i, p, 8);
      break;
    case GgufType::FLOAT64:
      std::memcpy(&kv->f, p, 8);
      break;
    default:
      FT_ASSERT(false, "decode_scalar: %s is not a fixed-size type", gguf_type_name(t));
  }
}

bool add_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }
bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
// x rounded up to a multiple of a (a power of two); false on overflow.
bool align_up(uint64_t x, uint64_t a, uint64_t* out) {
  if (!add_ok(x, a - 1, out)) return false;
  *out &= ~(a - 1);
  return true;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  const auto id = uint32_t(t);
  return id < kTypeCount ? kTypeRows[id].name : "unknown";
}

std::string GgufKv::type_text() const {
  if (type != GgufType::ARRAY) return gguf_type_name(type);
  return std::string("array[") + gguf_type_name(elem_type) + ", " + std::to_string(count) + "]";
}

uint64_t GgufTensor::row_bytes() const {
  if (ne.empty()) return ggml_type_info(type).block_bytes;
  const GgmlTypeInfo& info = ggml_type_info(type);
  return uint64_t(ne[0] / info.block_elems) * uint64_t(info.block_bytes);
}

std::string gguf_dims_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

namespace {

// The cursor over the file's bytes. Each read checks the bytes left; on failure it returns false
// and the caller builds the message with truncated(), which knows where and how much was wanted.
struct Cursor {
  const std::string& path;
  const uint8_t* data;
  uint64_t size;
  uint64_t pos = 0;
  uint64_t want = 0;  // bytes the failed read asked for

  uint64_t left() const { return size - pos; }
  bool take(uint64_t n, const uint8_t** p) {
    if (n > left()) {
      want = n;
      return false;
    }
    *p = data + pos;
    pos += n;
    return true;
  }
  template <class T>
  bool read(T* v) {
    const uint8_t* p;
    if (!take(sizeof(T), &p)) return false;
    std::memcpy(v, p, sizeof(T));
    return true;
  }
  Error truncated(const std::string& what) const {
    return make_error(path + ": truncated: " + what + " needs " + std::to_string(want) + " bytes at byte " +
                      std::to_string(pos) + " but the " + std::to_string(size) + "-byte file has " +
                      std::to_string(left()) + " left");
  }
  Error bad(const std::string& what) const { return make_error(path + ": " + what); }
  // A GGUF string (u64 length + bytes) into *s; `what` names it in errors (built only then).
  template <class What>
  Status string(std::string* s, What&& what) {
    uint64_t len = 0;
    if (!read(&len)) return truncated("the length of " + what());
    if (len > kMaxString)
      return bad(what() + ": string length " + std::to_string(len) + " at byte " + std::to_string(pos - 8) +
                 " is over the 1 GiB limit");
    const uint8_t* p;
    if (!take(len, &p)) return truncated(what() + " (" + std::to_string(len) + " bytes)");
    s->assign(reinterpret_cast<const char*>(p), size_t(len));
    return {};
  }
};

Status parse_header(Cursor& r, uint32_t* version, uint64_t* n_tensors, uint64_t* n_kv) {
  uint32_t magic = 0;
  if (!r.read(&magic)) return r.bad("not a GGUF file: " + std::to_string(r.size) + " bytes, too short for the magic");
  if (std::memcmp(&magic, "GGUF", 4) != 0) {
    std::string got(reinterpret_cast<const char*>(r.data), 4);
    return r.bad("not a GGUF file: starts with " + quote_name(got) + ", expected 'GGUF'");
  }
  if (!r.read(version)) return r.truncated("the version");
  if (*version != 0 && (*version & 0xFFFF) == 0)
    return r.bad("GGUF version " + std::to_string(*version) +
                 " looks byte-swapped: big-endian files are not supported");
  if (*version == 1) return r.bad("GGUF version 1 is obsolete and not supported (versions 2 and 3 are)");
  if (*version != 2 && *version != 3)
    return r.bad("GGUF version " + std::to_string(*version) + " is not supported (versions 2 and 3 are)");
  if (!r.read(n_tensors)) return r.truncated("the tensor count");
  if (!r.read(n_kv)) return r.truncated("the metadata count");
  // Counts are i64 in llama.cpp; each entry takes at least a few bytes, so the bytes left cap them.
  if (*n_kv > r.left() / kMinKvBytes)
    return r.bad("metadata count " + std::to_string(*n_kv) + " cannot fit in the " + std::to_string(r.left()) +
                 " bytes left (each entry takes at least " + std::to_string(kMinKvBytes) + "): truncated or corrupt");
  if (*n_tensors > r.left() / kMinTensorInfoBytes)
    return r.bad("tensor count " + std::to_string(*n_tensors) + " cannot fit in the " + std::to_string(r.left()) +
                 " bytes left (each tensor info takes at least " + std::to_string(kMinTensorInfoBytes) +
                 "): truncated or corrupt");
  return {};
}

// An array value: element type, count and elements (strings parsed, fixed-size types skipped over
// and read later by the getters).
Status parse_array(Cursor& r, GgufKv* kv) {
  const std::string& key = kv->key;
  uint32_t et = 0;
  if (!r.read(&et)) return r.truncated("the element type of " + quote_name(key));
  if (et >= kTypeCount) return r.bad("key " + quote_name(key) + ": unknown array element type " + std::to_string(et));
  kv->elem_type = GgufType(et);
  if (kv->elem_type == GgufType::ARRAY) return r.bad("key " + quote_name(key) + ": arrays of arrays are not supported");
  if (!r.read(&kv->count)) return r.truncated("the element count of " + quote_name(key));
  if (kv->count > kMaxArray)
    return r.bad("key " + quote_name(key) + ": array of " + std::to_string(kv->count) +
                 " elements is over the 2^30 limit");
  const uint64_t elem = kv->elem_type == GgufType::STRING ? 8 : kTypeRows[et].size;  // string: its length at least
  uint64_t bytes = 0;
  if (!mul_ok(kv->count, elem, &bytes) || bytes > r.left())
    return r.bad("key " + quote_name(key) + ": array of " + std::to_string(kv->count) + " " +
                 gguf_type_name(kv->elem_type) + " elements at byte " + std::to_string(r.pos) + " cannot fit in the " +
                 std::to_string(r.left()) + " bytes left: truncated or corrupt");
  if (kv->elem_type == GgufType::STRING) {
    kv->strings.reserve(size_t(std::min(kv->count, kReserveCap)));
    for (uint64_t j = 0; j < kv->count; ++j) {
      FTX_TRY(r.string(&kv->strings.emplace_back(),
                       [&] { return "element " + std::to_string(j) + " of " + quote_name(key); }));
    }
    return {};
  }
  kv->array_offset = r.pos;
  const uint8_t* p;
  if (!r.take(bytes, &p)) return r.truncated("the elements of " + quote_name(key));
  if (kv->elem_type == GgufType::BOOL)
    for (uint64_t j = 0; j < kv->count; ++j)
      if (p[j] > 1)
        return r.bad("key " + quote_name(key) + ": element " + std::to_string(j) + " is bool byte " +
                     std::to_string(p[j]) + ", expected 0 or 1");
  return {};
}

Status parse_value(Cursor& r, GgufKv* kv) {
  const std::string& key = kv->key;
  if (kv->type == GgufType::STRING) return r.string(&kv->str, [&] { return "the value of " + quote_name(key); });
  if (kv->type == GgufType::ARRAY) return parse_array(r, kv);
  const uint8_t* p;
  if (!r.take(kTypeRows[uint32_t(kv->type)].size, &p)) return r.truncated("the value of " + quote_name(key));
  decode_scalar(kv->type, p, kv);
  if (kv->type == GgufType::BOOL && kv->u > 1)
    return r.bad("key " + quote_name(key) + ": bool byte " + std::to_string(kv->u) + ", expected 0 or 1");
  return {};
}

Status parse_kv(Cursor& r, uint64_t index, GgufKv* kv) {
  FTX_TRY(r.string(&kv->key, [&] { return "the key of metadata entry " + std::to_string(index); }));
  if (kv->key.empty()) return r.bad("metadata entry " + std::to_string(index) + " has an empty key");
  uint32_t t = 0;
  if (!r.read(&t)) return r.truncated("the value type of " + quote_name(kv->key));
  if (t >= kTypeCount) return r.bad("key " + quote_name(kv->key) + ": unknown value type " + std::to_string(t));
  kv->type = GgufType(t);
  return parse_value(r, kv);
}

// One tensor info: name, dims, type, offset; element and byte counts computed with overflow checks.
Status parse_tensor_info(Cursor& r, uint64_t index, GgufTensor* t) {
  FTX_TRY(r.string(&t->name, [&] { return "the name of tensor " + std::to_string(index); }));
  if (t->name.empty()) return r.bad("tensor " + std::to_string(index) + " has an empty name");
  const std::string where = "tensor " + quote_name(t->name);
  if (t->name.size() > kMaxTensorName)
    return r.bad(where + ": name of " + std::to_string(t->name.size()) + " bytes is over ggml's limit of 63");
  uint32_t n_dims = 0;
  if (!r.read(&n_dims)) return r.truncated(where + ": n_dims");
  if (n_dims > uint32_t(kMaxDims))
    return r.bad(where + ": n_dims " + std::to_string(n_dims) + " is more than " + std::to_string(kMaxDims));
  t->ne.resize(n_dims);
  uint64_t numel = 1;
  for (uint32_t k = 0; k < n_dims; ++k) {
    if (!r.read(&t->ne[k])) return r.truncated(where + ": dim " + std::to_string(k));
    if (t->ne[k] < 0)
      return r.bad(where + ": dim " + std::to_string(k) + " is negative (" + std::to_string(t->ne[k]) + ")");
    if (!mul_ok(numel, uint64_t(t->ne[k]), &numel) || numel > uint64_t(std::numeric_limits<int64_t>::max()))
      return r.bad(where + ": dims " + gguf_dims_str(t->ne) + ": element count overflows 64 bits");
  }
  uint32_t type = 0;
  if (!r.read(&type)) return r.truncated(where + ": type");
  const GgmlTypeInfo* info = ggml_type_info(type);
  if (!info) return r.bad(where + ": unknown ggml type id " + std::to_string(type));
  t->type = info->type;
  if (!r.read(&t->offset)) return r.truncated(where + ": offset");
  const int64_t ne0 = n_dims ? t->ne[0] : 1;
  if (ne0 % info->block_elems != 0)
    return r.bad(where + ": dims " + gguf_dims_str(t->ne) + ": ne[0] = " + std::to_string(ne0) +
                 " is not a multiple of the " + info->name + " block of " + std::to_string(info->block_elems));
  t->numel = int64_t(numel);
  // Bytes = blocks * block bytes; blocks = numel / block_elems exactly, since ne[0] is a multiple.
  if (!mul_ok(numel / uint64_t(info->block_elems), uint64_t(info->block_bytes), &t->nbytes))
    return r.bad(where + ": dims " + gguf_dims_str(t->ne) + ": byte count overflows 64 bits");
  return {};
}

}  // namespace

Result<GgufFile> GgufFile::open(const std::string& path) {
  auto map = MappedFile::open(path);
  if (!map) return map.error();
  GgufFile f;
  f.path_ = path;
  f.map_ = std::move(*map);
  f.base_ = f.map_.data();
  f.size_ = f.map_.size();
  FTX_TRY(f.parse_all());
  return f;
}

Result<GgufFile> GgufFile::parse(const std::string& name, const uint8_t* bytes, uint64_t size) {
  GgufFile f;
  f.path_ = name;
  f.base_ = bytes;
  f.size_ = size;
  FTX_TRY(f.parse_all());
  return f;
}

Status GgufFile::parse_all() {
  Cursor r{path_, base_, size_};
  uint64_t n_tensors = 0, n_kv = 0;
  FTX_TRY(parse_header(r, &version_, &n_tensors, &n_kv));
  kvs_.reserve(size_t(std::min(n_kv, kReserveCap)));
  for (uint64_t i = 0; i < n_kv; ++i) {
    GgufKv kv;
    FTX_TRY(parse_kv(r, i, &kv));
    if (!kv_index_.emplace(kv.key, kvs_.size()).second)
      return r.bad("key " + quote_name(kv.key) + " appears twice (metadata entries " +
                   std::to_string(kv_index_[kv.key]) + " and " + std::to_string(i) + ")");
    if (kv.key == "general.alignment") {
      if (kv.type != GgufType::UINT32 || kv.u == 0 || (kv.u & (kv.u - 1)) != 0)
        return r.bad("key 'general.alignment' must be a uint32 power of two, got " + kv.type_text() + " " +
                     value_text(kv));
      alignment_ = kv.u;
    }
    kvs_.push_back(std::move(kv));
  }
  tensors_.reserve(size_t(std::min(n_tensors, kReserveCap)));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    FTX_TRY(parse_tensor_info(r, i, &t));
    if (!tensor_index_.emplace(t.name, tensors_.size()).second)
      return r.bad("tensor " + quote_name(t.name) + " appears twice (tensors " + std::to_string(tensor_index_[t.name]) +
                   " and " + std::to_string(i) + ")");
    tensors_.push_back(std::move(t));
  }
  return parse_tensor_layout(r.pos);
}

// The data section starts at the first aligned byte after the infos; tensor i must start at the
// padded running sum of tensors 0..i-1 (llama.cpp's rule) and end inside the file.
Status GgufFile::parse_tensor_layout(uint64_t infos_end) {
  auto bad = [&](const std::string& what) { return make_error(path_ + ": " + what); };
  if (!align_up(infos_end, alignment_, &data_offset_) || (!tensors_.empty() && data_offset_ > size_))
    return bad("truncated: the data section would start at byte " + std::to_string(data_offset_) +
               " (tensor infos end at " + std::to_string(infos_end) + ", aligned to " + std::to_string(alignment_) +
               ") but the file has " + std::to_string(size_) + " bytes");
  uint64_t expected = 0;
  for (const GgufTensor& t : tensors_) {
    const std::string where = "tensor " + quote_name(t.name);
    if (t.offset % alignment_ != 0)
      return bad(where + ": offset " + std::to_string(t.offset) + " is not aligned to " + std::to_string(alignment_));
    if (t.offset != expected)
      return bad(where + ": offset " + std::to_string(t.offset) + ", expected " + std::to_string(expected) +
                 " (tensors follow each other in info order, each padded to " + std::to_string(alignment_) + " bytes)");
    uint64_t begin = 0, end = 0;
    if (!add_ok(data_offset_, t.offset, &begin) || !add_ok(begin, t.nbytes, &end) || end > size_)
      return bad("truncated: " + where + ": data [" + std::to_string(begin) + ", " + std::to_string(begin) + " + " +
                 std::to_string(t.nbytes) + ") runs past the end of the " + std::to_string(size_) + "-byte file");
    if (!align_up(t.offset + t.nbytes, alignment_, &expected)) return bad(where + ": offset + size overflows 64 bits");
  }
  return {};
}

const GgufKv* GgufFile::find_kv(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<const GgufKv*> GgufFile::lookup(const std::string& key) const {
  const GgufKv* kv = find_kv(key);
  if (!kv) return make_error(path_ + ": key " + quote_name(key) + " is missing");
  return kv;
}

Error GgufFile::wrong_type(const GgufKv& kv, const char* expected) const {
  return make_error(path_ + ": key " + quote_name(kv.key) + " is " + kv.type_text() + ", expected " + expected);
}

Result<std::string> GgufFile::get_string(const std::string& key) const {
  auto kv = lookup(key);
  if (!kv) return kv.error();
  if ((*kv)->type != GgufType::STRING) return wrong_type(**kv, "a string");
  return (*kv)->str;
}

Result<int64_t> GgufFile::get_int(const std::string& key) const {
  auto kv = lookup(key);
  if (!kv) return kv.error();
  const GgufKv& v = **kv;
  if (is_signed(v.type)) return v.i;
  if (!is_unsigned(v.type)) return wrong_type(v, "an integer");
  if (v.u > uint64_t(std::numeric_limits<int64_t>::max()))
    return make_error(path_ + ": key " + quote_name(key) + " = " + std::to_string(v.u) + " does not fit in int64");
  return int64_t(v.u);
}

Result<double> GgufFile::get_float(const std::string& key) const {
  auto kv = lookup(key);
  if (!kv) return kv.error();
  if (!is_float((*kv)->type)) return wrong_type(**kv, "a float");
  return (*kv)->f;
}

Result<bool> GgufFile::get_bool(const std::string& key) const {
  auto kv = lookup(key);
  if (!kv) return kv.error();
  if ((*kv)->type != GgufType::BOOL) return wrong_type(**kv, "a bool");
  return (*kv)->u != 0;
}

Result<std::span<const std::string>> GgufFile::get_string_array(const std::string& key) const {
  auto kv = lookup(key);
  if (!kv) return kv.error();
  if ((*kv)->type != GgufType::ARRAY || (*kv)->elem_type != GgufType::STRING)
    return wrong_type(**kv, "an array of strings");
  return std::span<const std::string>((*kv)->strings);
}

Result<std::vector<int64_t>> GgufFile::get_int_array(const std::string& key) const {
  auto kv = lookup(key);
  if (!kv) return kv.error();
  const GgufKv& v = **kv;
  if (v.type != GgufType::ARRAY || !(is_signed(v.elem_type) || is_unsigned(v.elem_type)))
    return wrong_type(v, "an array of integers");
  const uint64_t size = kTypeRows[uint32_t(v.elem_type)].size;
  std::vector<int64_t> out(size_t(v.count));
  GgufKv one;
  for (uint64_t j = 0; j < v.count; ++j) {
    decode_scalar(v.elem_type, base_ + v.array_offset + j * size, &one);
    if (is_unsigned(v.elem_type) && one.u > uint64_t(std::numeric_limits<int64_t>::max()))
      return make_error(path_ + ": key " + quote_name(key) + ": element " + std::to_string(j) + " = " +
                        std::to_string(one.u) + " does not fit in int64");
    out[size_t(j)] = is_signed(v.elem_type) ? one.i : int64_t(one.u);
  }
  return out;
}

Result<std::vector<double>> GgufFile::get_float_array(const std::string& key) const {
  auto kv = lookup(key);
  if (!kv) return kv.error();
  const GgufKv& v = **kv;
  if (v.type != GgufType::ARRAY || !is_float(v.elem_type)) return wrong_type(v, "an array of floats");
  const uint64_t size = kTypeRows[uint32_t(v.elem_type)].size;
  std::vector<double> out(size_t(v.count));
  GgufKv one;
  for (uint64_t j = 0; j < v.count; ++j) {
    decode_scalar(v.elem_type, base_ + v.array_offset + j * size, &one);
    out[size_t(j)] = one.f;
  }
  return out;
}

namespace {

std::string scalar_text(GgufType t, const GgufKv& v) {
  if (t == GgufType::BOOL) return v.u ? "true" : "false";
  if (is_unsigned(t)) return std::to_string(v.u);
  if (is_signed(t)) return std::to_string(v.i);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v.f);
  return buf;
}

std::string cut(const std::string& s, size_t max_chars) {
  return s.size() <= max_chars ? quote_name(s) : quote_name(s.substr(0, max_chars)) + "...";
}

}  // namespace

std::string GgufFile::value_text(const GgufKv& kv, size_t max_chars) const {
  if (kv.type == GgufType::STRING) return cut(kv.str, max_chars);
  if (kv.type != GgufType::ARRAY) return scalar_text(kv.type, kv);
  std::string s = "[";
  for (uint64_t j = 0; j < kv.count; ++j) {
    if (s.size() >= max_chars) return s + "...]";
    if (j) s += ", ";
    if (kv.elem_type == GgufType::STRING) {
      s += cut(kv.strings[size_t(j)], max_chars);
    } else {
      GgufKv one;
      const uint64_t size = kTypeRows[uint32_t(kv.elem_type)].size;
      decode_scalar(kv.elem_type, base_ + kv.array_offset + j * size, &one);
      s += scalar_text(kv.elem_type, one);
    }
  }
  return s + "]";
}

}  // namespace ftx
