// Tests of core/io/safetensors: writer/reader round trip, interop with a file laid out byte by
// byte as the format's README describes (not produced by our writer), F16/BF16 conversion, and
// the corrupt-file suite (docs/design.md section 5): every malformed file must give a clean
// one-line error naming the file and the problem.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/io/safetensors.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test under testing::TempDir(), removed afterwards.
class Safetensors : public test::TempDirTest {
 protected:
  Safetensors() : TempDirTest("ftx_st_") {}
  std::string file(const std::string& name) const { return in_dir(name); }

  static void write_bytes(const std::string& path, const std::string& bytes) {
    ASSERT_TRUE(test::write_file(path, bytes));
  }

  // Writes `bytes` to a file, opens it, and expects an error naming the file and containing `word`.
  void expect_rejected(const std::string& bytes, const std::string& word) {
    const std::string path = file("bad.safetensors");
    write_bytes(path, bytes);
    auto f = SafetensorsFile::open(path);
    ASSERT_FALSE(f.ok()) << "accepted a corrupt file; expected an error about '" << word << "'";
    const std::string& msg = f.error().message;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(word), std::string::npos) << "expected '" << word << "' in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "error must be one line: " << msg;
  }
};

// [u64 LE length][header][data], exactly as the format's README lays it out. No padding.
std::string layout(const std::string& header, const std::string& data, uint64_t length_field) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((length_field >> (8 * i)) & 0xff);
  return out + header + data;
}
std::string layout(const std::string& header, const std::string& data) { return layout(header, data, header.size()); }

std::string f32_bytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::string u16_bytes(const std::vector<uint16_t>& v) {
  std::string s;
  for (uint16_t x : v) s += static_cast<char>(x & 0xff), s += static_cast<char>(x >> 8);  // little-endian
  return s;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// ---- valid files ------------------------------------------------------------------------------

TEST_F(Safetensors, RoundTripF32WithMetadata) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> a(3 * 5), b(7), scalar{42.5f};
  for (float& x : a) x = nd(rng);
  for (float& x : b) x = nd(rng);
  b[3] = -0.0f;
  const std::string path = file("rt.safetensors");
  ASSERT_TRUE(
      write_safetensors(
          path,
          {{"layer.a", {3, 5}, a.data()}, {"b", {7}, b.data()}, {"s", {}, scalar.data()}, {"empty", {0, 4}, nullptr}},
          {{"format", "pt"}, {"note", "h\u00e9llo"}})
          .ok());

  // The header is padded with spaces to a multiple of 8, so the data buffer starts 8-aligned.
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  EXPECT_EQ(n % 8, 0u);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  EXPECT_EQ(header.front(), '{');

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->data_offset(), 8 + n);
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "h\u00e9llo");
  const TensorInfo* ta = f->find("layer.a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, SafetensorsDType::F32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(f->find("s")->shape, std::vector<int64_t>{});
  EXPECT_EQ(f->find("s")->numel, 1);
  EXPECT_EQ(f->find("empty")->numel, 0);
  EXPECT_EQ(f->find("missing"), nullptr);
  auto ra = f->read_f32("layer.a");
  auto rb = f->read_f32("b");
  auto rs = f->read_f32("s");
  auto re = f->read_f32("empty");
  ASSERT_TRUE(ra.ok() && rb.ok() && rs.ok() && re.ok());
  ASSERT_EQ(ra->size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits((*ra)[i], a[i])) << i;
  for (size_t i = 0; i < b.size(); ++i) EXPECT_TRUE(same_bits((*rb)[i], b[i])) << i;
  EXPECT_EQ((*rs)[0], 42.5f);
  EXPECT_TRUE(re->empty());
}

TEST_F(Safetensors, WritesBF16RoundedToNearestEven) {
  // 1 + 2^-8 is halfway between two bf16 values: ties go to the even one (1.0); 1 + 3 * 2^-8 is
  // also a tie and goes up to 1 + 2^-6; -2.5 and 0 are exact; a small value keeps its sign.
  const std::vector<float> x{1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, 0.0f, -1e-30f};
  const std::string path = file("bf16.safetensors");
  ASSERT_TRUE(write_safetensors(path, {{"w", {5}, x.data(), SafetensorsDType::BF16}, {"f", {1}, x.data()}}).ok());
  EXPECT_EQ(fs::file_size(path) % 2, 0u);
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->find("w")->dtype, SafetensorsDType::BF16);
  EXPECT_EQ(f->find("w")->end - f->find("w")->begin, 10u);
  EXPECT_EQ(f->find("f")->dtype, SafetensorsDType::F32);
  auto w = f->read_f32("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)[0], 1.0f);
  EXPECT_EQ((*w)[1], 1.0f + 0x1p-6f);
  EXPECT_EQ((*w)[2], -2.5f);
  EXPECT_EQ((*w)[3], 0.0f);
  EXPECT_TRUE(std::signbit((*w)[4]));
  EXPECT_EQ((*f->read_f32("f"))[0], x[0]);

  // A finite value past bf16's range would be read back as infinity: refused, naming it.
  const std::vector<float> big{3.4e38f};
  auto bad = write_safetensors(file("big.safetensors"), {{"big", {1}, big.data(), SafetensorsDType::BF16}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'big'"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("overflows BF16"), std::string::npos);
  EXPECT_FALSE(fs::exists(file("big.safetensors")));
  auto f16 = write_safetensors(file("f16.safetensors"), {{"h", {1}, big.data(), SafetensorsDType::F16}});
  ASSERT_FALSE(f16.ok());
  EXPECT_NE(f16.error().message.find("cannot write dtype F16"), std::string::npos) << f16.error().message;
}

TEST_F(Safetensors, ReadErrorsNameFileAndTensor) {
  std::vector<float> a{1, 2, 3};
  const std::string path = file("r.safetensors");
  ASSERT_TRUE(write_safetensors(path, {{"a", {3}, a.data()}}).ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok());
  auto missing = f->read_f32("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find(path), std::string::npos);
  EXPECT_NE(missing.error().message.find("'nope'"), std::string::npos);
  float dst[2];
  auto wrong_count = f->read_f32_into("a", dst, 2);
  ASSERT_FALSE(wrong_count.ok());
  EXPECT_NE(wrong_count.error().message.find("'a'"), std::string::npos);
}

TEST_F(Safetensors, WriterRejectsBadInputAndNamesPath) {
  std::vector<float> a{1, 2};
  auto dup = write_safetensors(file("d.safetensors"), {{"a", {2}, a.data()}, {"a", {2}, a.data()}});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.error().message.find("duplicate"), std::string::npos);
  auto nul = write_safetensors(file("n.safetensors"), {{std::string("a\0b", 3), {2}, a.data()}});
  ASSERT_FALSE(nul.ok());
  const std::string no_dir = file("no/such/dir/x.safetensors");
  auto io = write_safetensors(no_dir, {{"a", {2}, a.data()}});
  ASSERT_FALSE(io.ok());
  EXPECT_NE(io.error().message.find(no_dir), std::string::npos) << io.error().message;
}

// A write that fails with EFBIG (file size limit) returns an error and leaves no partial file.
TEST_F(Safetensors, WriterReportsEfbigAndRemovesPartialFile) {
  const std::string path = file("big.safetensors");
  std::vector<float> big(64 * 1024, 1.0f);  // 256 KiB > the 16 KiB limit below
  const test::LimitedRun child = test::run_with_file_size_limit(16 * 1024, [&] {
    return write_safetensors(path, {{"big", {64, 1024}, big.data()}});
  });
  ASSERT_TRUE(child.reaped);
  ASSERT_TRUE(WIFEXITED(child.status));
  const std::string& msg = child.msg;
  EXPECT_EQ(WEXITSTATUS(child.status), 0) << "save under RLIMIT_FSIZE must fail, got: " << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("write failed"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path)) << "partial file left behind";
}

// Interop: a file built by hand as the README specifies: unpadded 8-byte-unaligned header,
// header order different from data order, F32 + F16 + BF16 + I32 + scalar + empty tensors.
TEST_F(Safetensors, HandBuiltFileFromSpec) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                             R"("__metadata__":{"format":"pt"},)"
                             R"("h":{"dtype":"F16","shape":[3],"data_offsets":[16,22]},)"
                             R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[22,26]},)"
                             R"("e":{"dtype":"F32","shape":[4,0],"data_offsets":[26,26]},)"
                             R"("i":{"dtype":"I32","shape":[],"data_offsets":[26,30]}})";
  ASSERT_NE(header.size() % 8, 0u) << "the test wants an unaligned data buffer";
  const std::string data = f32_bytes({1.5f, -2.0f, 0.25f, 1e-30f}) + u16_bytes({0x3C00, 0xC000, 0x3555}) +
                           u16_bytes({0x4049, 0xBF80}) + std::string("\x07\x00\x00\x00", 4);
  const std::string path = file("spec.safetensors");
  write_bytes(path, layout(header, data));
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  ASSERT_EQ(f->tensors().size(), 5u);
  EXPECT_EQ(f->tensors()[0].name, "w");  // file order = data order
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(*f->read_f32("w"), (std::vector<float>{1.5f, -2.0f, 0.25f, 1e-30f}));
  EXPECT_EQ(*f->read_f32("h"), (std::vector<float>{1.0f, -2.0f, 0.333251953125f}));
  EXPECT_EQ(*f->read_f32("b"), (std::vector<float>{3.140625f, -1.0f}));
  EXPECT_TRUE(f->read_f32("e")->empty());
  EXPECT_EQ(f->find("i")->dtype, SafetensorsDType::I32);
  auto as_float = f->read_f32("i");
  ASSERT_FALSE(as_float.ok());
  EXPECT_NE(as_float.error().message.find("I32"), std::string::npos);
  int32_t raw = 0;
  ASSERT_TRUE(f->read_raw("i", &raw, 4).ok());
  EXPECT_EQ(raw, 7);
}

// Header padded with trailing spaces (as the Rust writer does) is valid.
TEST_F(Safetensors, SpacePaddedHeaderAccepted) {
  const std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})" + std::string(9, ' ');
  write_bytes(file("p.safetensors"), layout(header, f32_bytes({3.0f})));
  auto f = SafetensorsFile::open(file("p.safetensors"));
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->read_f32("x")->at(0), 3.0f);
}

// As in the reference (checked fold over the dims), a zero dim makes the tensor empty even when
// the other dims are huge: accepted, 0 elements.
TEST_F(Safetensors, ZeroDimBeforeHugeDimsIsEmpty) {
  write_bytes(file("z.safetensors"),
              layout(R"({"a":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", ""));
  auto f = SafetensorsFile::open(file("z.safetensors"));
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->find("a")->numel, 0);
}

// A 12 GiB tensor opens without reading or allocating its data (sparse file), and a tensor
// behind it, past the 4 GiB mark, reads back (64-bit offsets throughout).
TEST_F(Safetensors, LargeFileOpensReadingOnlyTheHeader) {
  const uint64_t numel = uint64_t{3} << 30, big_bytes = numel * 4;
  const std::string header = R"({"big":{"dtype":"F32","shape":[)" + std::to_string(numel) + R"(],"data_offsets":[0,)" +
                             std::to_string(big_bytes) + R"(]},"tail":{"dtype":"F32","shape":[2],"data_offsets":[)" +
                             std::to_string(big_bytes) + "," + std::to_string(big_bytes + 8) + "]}}";
  const std::string path = file("sparse.safetensors");
  write_bytes(path, layout(header, ""));
  std::error_code ec;
  fs::resize_file(path, 8 + header.size() + big_bytes, ec);
  if (ec) GTEST_SKIP() << "file system cannot hold a sparse 12 GiB file: " << ec.message();
  {
    std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
    out.seekp(static_cast<std::streamoff>(8 + header.size() + big_bytes));
    const std::string tail = f32_bytes({-1.25f, 8.0f});
    out.write(tail.data(), 8);
    ASSERT_TRUE(out.good());
  }
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->find("big")->numel, static_cast<int64_t>(numel));
  EXPECT_EQ(*f->read_f32("tail"), (std::vector<float>{-1.25f, 8.0f}));
}

// ---- dtype conversion -------------------------------------------------------------------------

TEST(SafetensorsConvert, F16AllValuesExact) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const float got = f16_to_f32(static_cast<uint16_t>(h));
    if (e == 31) {
      if (m == 0)
        EXPECT_TRUE(std::isinf(got) && std::signbit(got) == (s == 1)) << h;
      else
        EXPECT_TRUE(std::isnan(got)) << h;
      continue;
    }
    const double mag = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(1.0 + m / 1024.0, int(e) - 15);
    const double want = s ? -mag : mag;
    ASSERT_EQ(double(got), want) << "f16 bits 0x" << std::hex << h;
    ASSERT_EQ(std::signbit(got), s == 1) << h;
  }
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
}

TEST(SafetensorsConvert, BF16IsTheTopHalfOfF32) {
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t bits = rng() & 0xffff0000u;
    float want;
    std::memcpy(&want, &bits, 4);
    const float got = bf16_to_f32(static_cast<uint16_t>(bits >> 16));
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got));
    else
      ASSERT_TRUE(same_bits(got, want)) << std::hex << bits;
  }
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC040), -3.0f);
  EXPECT_TRUE(std::isinf(bf16_to_f32(0x7F80)));
  EXPECT_EQ(bf16_to_f32(0x0001), 0x1p-133f);
}

TEST(SafetensorsConvert, DTypeNamesAndBits) {
  auto bf16 = parse_dtype("BF16");
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(*bf16, SafetensorsDType::BF16);
  EXPECT_EQ(dtype_bits(*bf16), 16);
  auto f8 = parse_dtype("F8_E4M3FNUZ");
  ASSERT_TRUE(f8.ok());
  EXPECT_EQ(dtype_bits(*f8), 8);
  auto f4 = parse_dtype("F4");
  ASSERT_TRUE(f4.ok());
  EXPECT_EQ(dtype_bits(*f4), 4);
  EXPECT_STREQ(dtype_name(SafetensorsDType::F6_E3M2), "F6_E3M2");
  for (const char* unknown : {"F128", "f32"}) {
    auto r = parse_dtype(unknown);
    ASSERT_FALSE(r.ok()) << unknown;
    EXPECT_EQ(r.error().message, std::string("unknown dtype '") + unknown + "'");
  }
}

// ---- corrupt files ----------------------------------------------------------------------------

const char* kOne = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
const std::string kEight = std::string(8, '\x01');

TEST_F(Safetensors, CorruptTruncatedData) {
  const std::string good = layout(std::string("{") + kOne + "}", kEight);
  expect_rejected(good.substr(0, good.size() - 3), "truncated");
}

TEST_F(Safetensors, CorruptShorterThan8Bytes) { expect_rejected(std::string("\x05\0\0", 3), "too short"); }

TEST_F(Safetensors, CorruptEmptyFile) { expect_rejected("", "too short"); }

TEST_F(Safetensors, CorruptHeaderLengthPastFile) {
  expect_rejected(layout(std::string("{") + kOne + "}", kEight, 1000), "past the end");
}

TEST_F(Safetensors, CorruptHugeHeaderLength) {
  expect_rejected(layout("{}", "", 1'000'000'000'000'000ull), "exceeds");
  expect_rejected(layout("{}", "", ~0ull), "exceeds");
}

TEST_F(Safetensors, CorruptInvalidJson) {
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8])", kEight), "invalid JSON");
  expect_rejected(layout(R"({"a" 1})", ""), "invalid JSON");
  expect_rejected(layout(std::string("{}") + std::string(3, '\0'), ""), "invalid JSON");
}

TEST_F(Safetensors, CorruptHeaderNotAnObject) {
  expect_rejected(layout("[]", ""), "object");
  expect_rejected(layout("  {}", ""), "object");
  expect_rejected(layout(R"({"a": 3})", ""), "object");
}

TEST_F(Safetensors, CorruptInvalidUtf8) {
  expect_rejected(layout("{\"a\xff\":{}}", ""), "UTF-8");
  expect_rejected(layout("{\"\xc0\xaf\":{}}", ""), "UTF-8");  // overlong '/'
}

TEST_F(Safetensors, CorruptDuplicateNames) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_rejected(layout(h, kEight), "duplicate");
}

TEST_F(Safetensors, CorruptDuplicateFieldInsideEntry) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[1],"shape":[2],"data_offsets":[0,8]}})";
  expect_rejected(layout(h, kEight), "duplicate");
}

TEST_F(Safetensors, CorruptOverlappingOffsets) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_rejected(layout(h, std::string(12, 'x')), "overlap");
}

TEST_F(Safetensors, CorruptAliasedTensors) {  // many tensors on one region (DoS in the threat model)
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  expect_rejected(layout(h, kEight), "overlap");
}

TEST_F(Safetensors, CorruptGapBetweenTensors) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  expect_rejected(layout(h, std::string(20, 'x')), "gap");
}

TEST_F(Safetensors, CorruptGapAtStart) {
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", std::string(12, 'x')), "gap");
}

TEST_F(Safetensors, CorruptOutOfRangeOffset) {
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[1000,1016]}})", std::string(16, 'x')),
                  "out of range");
  expect_rejected(layout(R"({"a":{"dtype":"U8","shape":[16],)"
                         R"("data_offsets":[9223372036854775800,9223372036854775816]}})",
                         std::string(16, 'x')),
                  "non-negative integer");  // END beyond 2^63
}

TEST_F(Safetensors, CorruptEndBeforeBegin) {
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", kEight), "before");
}

TEST_F(Safetensors, CorruptNegativeDim) {
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", kEight), "non-negative integer");
}

TEST_F(Safetensors, CorruptFloatDim) {
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", kEight),
                  "non-negative integer");
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}})", kEight),
                  "non-negative integer");
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[true],"data_offsets":[0,8]}})", kEight),
                  "non-negative integer");
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})", kEight),
                  "non-negative integer");
}

TEST_F(Safetensors, CorruptNegativeOrFloatOffset) {
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", kEight), "non-negative");
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})", kEight), "non-negative");
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", kEight), "data_offsets");
}

TEST_F(Safetensors, CorruptShapeSizeMismatch) {
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", kEight), "size mismatch");
  expect_rejected(layout(R"({"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", kEight), "size mismatch");
}

TEST_F(Safetensors, CorruptOverflowingShapeProduct) {
  // 2^32 * 2^32 wraps to 0 in unchecked u64 math: the classic bounds-check bypass.
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
                  "overflows");
  // Element count fits, bit count (x32) does not.
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[2305843009213693952],"data_offsets":[0,0]}})", ""),
                  "overflows");
}

TEST_F(Safetensors, CorruptUnknownDtype) {
  expect_rejected(layout(R"({"a":{"dtype":"F128","shape":[2],"data_offsets":[0,8]}})", kEight), "unknown dtype");
  expect_rejected(layout(R"({"a":{"dtype":32,"shape":[2],"data_offsets":[0,8]}})", kEight), "unknown dtype");
}

TEST_F(Safetensors, CorruptSubByteTotal) {
  expect_rejected(layout(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", "xx"), "whole number of bytes");
}

TEST_F(Safetensors, CorruptTrailingBytes) {
  expect_rejected(layout(std::string("{") + kOne + "}", kEight + "junk"), "trailing");
  expect_rejected(layout("{}", "x"), "trailing");
}

TEST_F(Safetensors, CorruptNulInName) {
  expect_rejected(layout(R"({"a\u0000b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", kEight), "NUL");
}

TEST_F(Safetensors, CorruptMetadataNonString) {
  expect_rejected(layout(R"({"__metadata__":{"format":1}})", ""), "must be a string");
  expect_rejected(layout(R"({"__metadata__":{"nested":{"a":"b"}}})", ""), "must be a string");
  expect_rejected(layout(R"({"__metadata__":["pt"]})", ""), "__metadata__");
}

TEST_F(Safetensors, CorruptEntryFields) {
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[2]}})", ""), "missing field");
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", kEight), "unknown field");
  expect_rejected(layout(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", kEight), "shape");
}

TEST_F(Safetensors, MissingFileNamesPath) {
  auto f = SafetensorsFile::open(file("does_not_exist.safetensors"));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("does_not_exist.safetensors"), std::string::npos);
  auto d = SafetensorsFile::open(dir_);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("directory"), std::string::npos) << d.error().message;
}

}  // namespace
}  // namespace ftx
