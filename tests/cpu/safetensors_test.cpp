// safetensors: round trips in every float dtype the reader converts, bf16 rounding on values chosen
// to hit each rounding case, and a clear error (naming file and tensor) for each way a file can be
// corrupt: its header, the layout of its data, a tensor's bytes against their checksum, non-finite
// values; files without checksums (Hugging Face's) still load; a failed write leaves no file behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "core/error.h"
#include "core/fs.h"
#include "io/safetensors.h"

namespace {

namespace stdfs = std::filesystem;
using tk::SafeTensorsFile;
using tk::SafeTensorsWriter;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 3.f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

class SafeTensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = stdfs::temp_directory_path() /
           ("tk_safetensors_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    stdfs::remove_all(dir_);
    stdfs::create_directories(dir_);
  }
  void TearDown() override { stdfs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file written byte by byte: the length field, the header text and the data section.
  std::string write_raw(const std::string& name, const std::string& header, size_t data_bytes) {
    std::string p = path(name);
    std::ofstream f(p, std::ios::binary);
    uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header;
    f << std::string(data_bytes, '\x11');
    return p;
  }

  // Opening `p` must fail with a message holding every one of `parts`.
  static void expect_open_error(const std::string& p, std::initializer_list<std::string> parts) {
    try {
      SafeTensorsFile::open(p);
      FAIL() << "opening " << p << " did not fail";
    } catch (const tk::Error& e) {
      std::string msg = e.what();
      for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg;
    }
  }

  stdfs::path dir_;
};

TEST_F(SafeTensorsTest, RoundTripF32KeepsEveryBitShapeAndMetadata) {
  auto a = random_floats(7 * 5, 1), b = random_floats(13, 2), c = random_floats(2 * 3 * 4, 3);
  SafeTensorsWriter w;
  w.add_f32("model.layers.0.mlp.down_proj.weight", {7, 5}, a.data());
  w.add_f32("model.norm.weight", {13}, b.data());
  w.add_borrowed("cube", "F32", {2, 3, 4}, c.data(), c.size() * 4);
  w.set_metadata("format", "pt");
  w.write(path("m.safetensors"));

  auto f = SafeTensorsFile::open(path("m.safetensors"));
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  const auto* info = f->find("model.layers.0.mlp.down_proj.weight");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->dtype, "F32");
  EXPECT_EQ(info->shape, (std::vector<int64_t>{7, 5}));
  EXPECT_EQ(f->read_f32("model.layers.0.mlp.down_proj.weight"), a);
  EXPECT_EQ(f->read_f32("model.norm.weight"), b);
  EXPECT_EQ(f->read_f32("cube"), c);
  EXPECT_EQ(f->find("absent"), nullptr);
  EXPECT_THROW(f->read_f32("absent"), tk::Error);
}

TEST_F(SafeTensorsTest, DataSectionIsEightByteAligned) {
  auto a = random_floats(3, 4);
  SafeTensorsWriter w;
  w.add_f32("x", {3}, a.data());
  w.write(path("a.safetensors"));
  std::ifstream in(path("a.safetensors"), std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(stdfs::file_size(path("a.safetensors")), 8 + n + 12);
}

// Each value sits where round-to-nearest-even decides something: exact, below/at/above a halfway
// point (ties go to the even mantissa), overflow to infinity, the smallest normal, NaN and infinity.
TEST_F(SafeTensorsTest, Bf16RoundsToNearestEven) {
  const float h = std::ldexp(1.f, -8);  // half a bf16 ulp at 1.0
  struct Case { float in, out; };
  const Case cases[] = {
      {1.f, 1.f},
      {1.f + h, 1.f},                                               // tie, 1.0 is even: down
      {1.f + 3 * h, 1.f + 4 * h},                                   // tie, 1+2h is odd: up
      {1.f + h + std::ldexp(1.f, -20), 1.f + 2 * h},                // just above the tie: up
      {1.f + h - std::ldexp(1.f, -20), 1.f},                        // just below the tie: down
      {-(1.f + 3 * h), -(1.f + 4 * h)},                             // the sign does not matter
      {std::numeric_limits<float>::max(), INFINITY},                // past the largest bf16
      {std::numeric_limits<float>::min(), std::numeric_limits<float>::min()},
      {INFINITY, INFINITY},
      {-INFINITY, -INFINITY},
      {0.f, 0.f},
  };
  std::vector<float> in;
  for (const Case& c : cases) in.push_back(c.in);
  in.push_back(std::numeric_limits<float>::quiet_NaN());
  auto random = random_floats(1000, 5);
  in.insert(in.end(), random.begin(), random.end());

  SafeTensorsWriter w;
  w.add_f32_as_bf16("w", {int64_t(in.size())}, in.data());
  w.write(path("b.safetensors"));
  auto f = SafeTensorsFile::open(path("b.safetensors"));
  EXPECT_EQ(f->find("w")->dtype, "BF16");
  // The raw bf16 values: read_f32 refuses infinities and NaNs (NonFiniteValuesAreRefused).
  std::vector<float> out(in.size());
  const auto* bf16 = static_cast<const uint16_t*>(f->data(*f->find("w")));
  for (size_t i = 0; i < in.size(); i++) out[i] = std::bit_cast<float>(uint32_t(bf16[i]) << 16);
  size_t n_cases = std::size(cases);
  for (size_t i = 0; i < n_cases; i++) EXPECT_EQ(out[i], cases[i].out) << "input " << cases[i].in;
  EXPECT_TRUE(std::isnan(out[n_cases]));
  for (size_t i = n_cases + 1; i < in.size(); i++) {
    EXPECT_LE(std::fabs(out[i] - in[i]), std::ldexp(std::fabs(in[i]), -8)) << in[i];
    EXPECT_EQ(std::bit_cast<uint32_t>(out[i]) & 0xffffu, 0u);  // a bf16 value, exactly
  }
}

TEST_F(SafeTensorsTest, ReadsF16AndF64AsF32) {
  // Half floats spelled out: 1, -2, the largest (65504), the smallest subnormal (2^-24), the most negative, 1/3.
  const uint16_t halves[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0xfbff, 0x3555};
  const float expect[] = {1.f, -2.f, 65504.f, std::ldexp(1.f, -24), -65504.f, 0.333251953125f};
  std::mt19937 rng(6);
  std::normal_distribution<double> dist(0.0, 5.0);
  std::vector<double> doubles(17);
  for (auto& d : doubles) d = dist(rng);

  SafeTensorsWriter w;
  w.add("half", "F16", {6}, halves, sizeof(halves));
  w.add("double", "F64", {17}, doubles.data(), doubles.size() * 8);
  int32_t ints[2] = {3, 4};
  w.add("ints", "I32", {2}, ints, 8);
  w.write(path("h.safetensors"));

  auto f = SafeTensorsFile::open(path("h.safetensors"));
  auto half = f->read_f32("half");
  for (int i = 0; i < 6; i++) EXPECT_EQ(half[i], expect[i]) << i;
  auto dbl = f->read_f32("double");
  for (size_t i = 0; i < doubles.size(); i++) EXPECT_EQ(dbl[i], float(doubles[i]));
  EXPECT_EQ(std::memcmp(f->data(*f->find("ints")), ints, 8), 0);
  EXPECT_THROW(f->read_f32("ints"), tk::Error);
}

TEST_F(SafeTensorsTest, WriterRejectsInconsistentTensors) {
  float x[6] = {1, 2, 3, 4, 5, 6};
  SafeTensorsWriter w;
  EXPECT_THROW(w.add("a", "F32", {2, 3}, x, 20), tk::Error);  // 6 floats are 24 bytes
  EXPECT_THROW(w.add("a", "F33", {6}, x, 24), tk::Error);
  EXPECT_THROW(w.add("__metadata__", "F32", {6}, x, 24), tk::Error);
  w.add("a", "F32", {6}, x, 24);
  EXPECT_THROW(w.add_f32("a", {6}, x), tk::Error);
}

TEST_F(SafeTensorsTest, TruncatedFileNamesTheTensor) {
  auto a = random_floats(64, 7);
  SafeTensorsWriter w;
  w.add_f32("layer.weight", {8, 8}, a.data());
  w.write(path("t.safetensors"));
  stdfs::resize_file(path("t.safetensors"), stdfs::file_size(path("t.safetensors")) - 10);
  expect_open_error(path("t.safetensors"), {path("t.safetensors"), "layer.weight", "truncated"});
}

TEST_F(SafeTensorsTest, TooShortFile) {
  std::ofstream(path("s.safetensors")) << "abc";
  expect_open_error(path("s.safetensors"), {path("s.safetensors"), "too short"});
}

TEST_F(SafeTensorsTest, HeaderLengthBeyondFile) {
  std::string p = path("l.safetensors");
  std::ofstream f(p, std::ios::binary);
  uint64_t n = 1000;
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  f.close();
  expect_open_error(p, {p, "header claims 1000 bytes"});
}

TEST_F(SafeTensorsTest, BadJson) {
  std::string p = write_raw("j.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", 4);
  expect_open_error(p, {p, "not valid JSON"});
  p = write_raw("k.safetensors", R"([1, 2])", 0);
  expect_open_error(p, {p, "not an object"});
}

TEST_F(SafeTensorsTest, OffsetsOutOfRange) {
  std::string p = write_raw("o.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 16);
  expect_open_error(p, {p, "\"w\"", "[8, 24]", "past the end"});
  p = write_raw("r.safetensors", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 16);
  expect_open_error(p, {p, "\"w\"", "end before they begin"});
}

TEST_F(SafeTensorsTest, OverlappingTensors) {
  std::string p = write_raw("v.safetensors",
                            R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                            R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                            24);
  expect_open_error(p, {p, "\"a\"", "\"b\"", "overlap"});
}

TEST_F(SafeTensorsTest, DataShorterThanShape) {
  std::string p = write_raw("d.safetensors", R"({"w":{"dtype":"BF16","shape":[3,4],"data_offsets":[0,20]}})", 24);
  expect_open_error(p, {p, "\"w\"", "holds 20 bytes", "BF16[3, 4] needs 24"});
}

TEST_F(SafeTensorsTest, UnknownDtypeAndMalformedEntries) {
  std::string p = write_raw("u.safetensors", R"({"w":{"dtype":"F48","shape":[1],"data_offsets":[0,6]}})", 6);
  expect_open_error(p, {p, "\"w\"", "unknown dtype \"F48\""});
  p = write_raw("n.safetensors", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4);
  expect_open_error(p, {p, "\"w\"", "shape is -1"});
  p = write_raw("m.safetensors", R"({"w":{"dtype":"F32","shape":[1]}})", 4);
  expect_open_error(p, {p, "\"w\"", "data_offsets"});
  p = write_raw("x.safetensors", R"({"__metadata__":{"format":1}})", 0);
  expect_open_error(p, {p, "__metadata__"});
}

// Shapes and offsets are integers that fit: no fraction truncated, no huge value wrapped, no product
// overflowing into a small byte count.
TEST_F(SafeTensorsTest, ShapeAndOffsetsAreCheckedIntegers) {
  std::string p = write_raw("f.safetensors", R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4);
  expect_open_error(p, {p, "\"w\" shape is 1.5, not an integer"});
  p = write_raw("g.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", 4);
  expect_open_error(p, {p, "\"w\" data_offsets is 4.0, not an integer"});
  p = write_raw("h.safetensors", R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})", 4);
  expect_open_error(p, {p, "\"w\" shape is 18446744073709551615"});
  // 2^32 x 2^32 elements: the product overflows 64 bits.
  p = write_raw("o.safetensors", R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4);
  expect_open_error(p, {p, "\"w\"", "overflows"});
  // 2^61 elements of 8 bytes: the byte count overflows.
  p = write_raw("b.safetensors", R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}})", 8);
  expect_open_error(p, {p, "\"w\"", "overflows"});
}

// The data section must be exactly the tensors' bytes, back to back, as the format requires:
// bytes appended after the last tensor, or lying between tensors, are refused.
TEST_F(SafeTensorsTest, TrailingBytesAndGapsAreRefused) {
  auto a = random_floats(6, 10);
  SafeTensorsWriter w;
  w.add_f32("a", {6}, a.data());
  w.write(path("t.safetensors"));
  std::ofstream(path("t.safetensors"), std::ios::binary | std::ios::app) << "garbage";
  expect_open_error(path("t.safetensors"), {path("t.safetensors"), "7 bytes follow the end of the last tensor (\"a\")"});

  std::string p = write_raw("g.safetensors",
                            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                            12);
  expect_open_error(p, {p, "bytes [4, 8) of the data, after \"a\" and before \"b\", belong to no tensor"});
  p = write_raw("z.safetensors", R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8);
  expect_open_error(p, {p, "bytes [0, 4) of the data, before \"b\", belong to no tensor"});
  p = write_raw("e.safetensors", R"({})", 3);
  expect_open_error(p, {p, "3 bytes follow the end of the last tensor"});
}

// Every file tokamak writes records each tensor's XXH3-64; a flipped bit in a tensor's bytes is
// found when that tensor is read, naming the file and the tensor.
TEST_F(SafeTensorsTest, ChecksumsAreRecordedAndAFlippedByteIsFound) {
  auto a = random_floats(64, 11), b = random_floats(32, 12);
  SafeTensorsWriter w;
  w.set_metadata("format", "pt");
  w.add_f32("a", {8, 8}, a.data());
  w.add_f32_as_bf16("b", {32}, b.data());
  w.write(path("c.safetensors"));
  {
    auto f = SafeTensorsFile::open(path("c.safetensors"));
    EXPECT_EQ(f->metadata().at("format"), "pt");
    ASSERT_TRUE(f->find("a")->checksum.has_value());
    ASSERT_TRUE(f->find("b")->checksum.has_value());
    EXPECT_EQ(f->metadata().at(tk::safetensors_checksum_key("a")).size(), 16u);
    EXPECT_EQ(f->read_f32("a"), a);
  }
  const size_t file_size = stdfs::file_size(path("c.safetensors"));
  std::fstream io(path("c.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(std::streamoff(file_size - 10));  // inside "b", the last tensor
  const char byte = char(io.get() ^ 0x01);
  io.seekp(std::streamoff(file_size - 10));
  io.put(byte);
  io.close();
  auto f = SafeTensorsFile::open(path("c.safetensors"));
  EXPECT_EQ(f->read_f32("a"), a);
  try {
    f->read_f32("b");
    FAIL() << "a corrupt tensor was read";
  } catch (const tk::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path("c.safetensors") + ": tensor \"b\" is corrupt: its bytes hash to"),
              std::string::npos)
        << e.what();
  }
}

// A file cannot switch its checksums off: renaming `xxh3_64:NAME` by one byte made it an unknown key, the tensor
// unchecked and its corrupted bytes loaded. A file tokamak wrote says so (tokamak_format), and a file that says so,
// or holds any checksum, must hold every tensor's.
TEST_F(SafeTensorsTest, ChecksumsCannotBeSwitchedOffByTheFile) {
  const auto a = random_floats(16, 21), b = random_floats(8, 22);
  auto write = [&](const std::string& name, bool two) {
    SafeTensorsWriter w;
    w.add_f32("a", {16}, a.data());
    if (two) w.add_f32("b", {8}, b.data());
    w.write(path(name));
    return path(name);
  };
  // Replaces the first `from` in the file's header with `to` (as long), and flips a byte of the last tensor.
  auto edit = [&](const std::string& p, const std::string& from, const std::string& to, bool corrupt) {
    std::string bytes = tk::fs::read_file(p);
    const size_t at = bytes.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    bytes.replace(at, from.size(), to);
    if (corrupt) bytes[bytes.size() - 3] ^= 0x40;
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  };
  const std::string one = write("one.safetensors", false);
  EXPECT_EQ(SafeTensorsFile::open(one)->metadata().at("tokamak_format"), "1");
  edit(one, "\"xxh3_64:a\"", "\"xxh3_65:a\"", true);
  expect_open_error(one, {one, "tensor \"a\" has no checksum (no __metadata__ \"xxh3_64:a\"), though the file says "
                               "tokamak wrote it (tokamak_format 1)"});

  const std::string marker_gone = write("marker.safetensors", true);
  edit(marker_gone, "\"tokamak_format\"", "\"tokamak_formaT\"", false);
  EXPECT_EQ(SafeTensorsFile::open(marker_gone)->read_f32("b"), b);  // every checksum is still there and checked
  edit(marker_gone, "\"xxh3_64:b\"", "\"xxh3_64_b\"", true);
  expect_open_error(marker_gone, {"tensor \"b\" has no checksum", "records checksums for other tensors"});

  const std::string newer = write("newer.safetensors", false);
  edit(newer, "\"tokamak_format\":\"1\"", "\"tokamak_format\":\"2\"", false);
  expect_open_error(newer, {newer, "__metadata__ tokamak_format is \"2\""});
  SafeTensorsWriter w;
  EXPECT_THROW(w.set_metadata("tokamak_format", "1"), tk::Error);
}

TEST_F(SafeTensorsTest, FilesWithoutChecksumsLoadAsTheyAre) {
  const float v[2] = {1.5f, -2.f};
  std::string p = path("hf.safetensors");
  std::ofstream f(p, std::ios::binary);
  const std::string header = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header;
  f.write(reinterpret_cast<const char*>(v), 8);
  f.close();
  auto st = SafeTensorsFile::open(p);
  EXPECT_FALSE(st->find("w")->checksum.has_value());
  EXPECT_EQ(st->read_f32("w"), (std::vector<float>{1.5f, -2.f}));
}

TEST_F(SafeTensorsTest, MalformedChecksumsAreRefused) {
  std::string p = write_raw("m.safetensors",
                            R"({"__metadata__":{"xxh3_64:w":"12"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                            4);
  expect_open_error(p, {p, "the checksum of tensor \"w\" is \"12\", not 16 hex digits"});
  p = write_raw("x.safetensors",
                R"({"__metadata__":{"xxh3_64:v":"0123456789abcdef"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                4);
  expect_open_error(p, {p, "a checksum for tensor \"v\", which the file does not have"});
  SafeTensorsWriter w;
  EXPECT_THROW(w.set_metadata("xxh3_64:w", "0"), tk::Error);
}

// NaN or infinite weights (a corrupt file, a diverged run) are refused on load, naming the tensor, so
// that eval and generate never report a NaN loss or print garbage from them.
TEST_F(SafeTensorsTest, NonFiniteValuesAreRefused) {
  std::vector<float> v = random_floats(8, 13);
  v[3] = std::numeric_limits<float>::quiet_NaN();
  SafeTensorsWriter w;
  w.add_f32("model.norm.weight", {8}, v.data());
  v[3] = 1.f;
  v[5] = -INFINITY;
  w.add_f32_as_bf16("exp_avg.model.norm.weight", {8}, v.data());
  const uint16_t half_inf = 0x7c00;
  w.add("h", "F16", {1}, &half_inf, 2);
  w.write(path("n.safetensors"));
  auto f = SafeTensorsFile::open(path("n.safetensors"));
  auto message = [&](const std::string& name) {
    try {
      f->read_f32(name);
    } catch (const tk::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("model.norm.weight").find(path("n.safetensors") + ": tensor \"model.norm.weight\" holds NaN at element 3 of 8"),
            std::string::npos)
      << message("model.norm.weight");
  EXPECT_NE(message("exp_avg.model.norm.weight").find("\"exp_avg.model.norm.weight\" holds an infinity at element 5"),
            std::string::npos);
  EXPECT_NE(message("h").find("\"h\" holds an infinity at element 0 of 1"), std::string::npos);
}

TEST_F(SafeTensorsTest, MissingFileIsAClearError) {
  expect_open_error(path("nope.safetensors"), {path("nope.safetensors"), "cannot open"});
}

// RLIMIT_FSIZE makes the kernel refuse to grow a file (EFBIG) just as a full disk would (ENOSPC):
// the write must fail with a tk::Error, leave the previous file intact and no temporary file behind.
TEST_F(SafeTensorsTest, FailedWriteLeavesNoFile) {
  auto small = random_floats(4, 8);
  SafeTensorsWriter before;
  before.add_f32("x", {4}, small.data());
  before.write(path("w.safetensors"));
  auto size_before = stdfs::file_size(path("w.safetensors"));

  auto big = random_floats(1 << 18, 9);  // 1 MiB
  SafeTensorsWriter w;
  w.add_f32("x", {int64_t(big.size())}, big.data());

  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 64 << 10;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  std::string msg;
  try {
    w.write(path("w.safetensors"));
  } catch (const tk::Error& e) {
    msg = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  signal(SIGXFSZ, old_handler);

  EXPECT_NE(msg.find(path("w.safetensors")), std::string::npos) << "message: " << msg;
  int files = 0;
  for ([[maybe_unused]] const auto& e : stdfs::directory_iterator(dir_)) files++;
  EXPECT_EQ(files, 1) << "a temporary file was left behind";
  EXPECT_EQ(stdfs::file_size(path("w.safetensors")), size_before);
  EXPECT_EQ(SafeTensorsFile::open(path("w.safetensors"))->read_f32("x"), small);
}

}  // namespace
