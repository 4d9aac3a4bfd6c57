// safetensors: round trips in every float dtype the reader converts, bf16 rounding on values chosen
// to hit each rounding case, and a clear error (naming file and tensor) for each way a file can be
// corrupt; a failed write leaves no file behind.
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
  auto out = f->read_f32("w");
  size_t n_cases = std::size(cases);
  for (size_t i = 0; i < n_cases; i++) EXPECT_EQ(out[i], cases[i].out) << "input " << cases[i].in;
  EXPECT_TRUE(std::isnan(out[n_cases]));
  for (size_t i = n_cases + 1; i < in.size(); i++) {
    EXPECT_LE(std::fabs(out[i] - in[i]), std::ldexp(std::fabs(in[i]), -8)) << in[i];
    EXPECT_EQ(std::bit_cast<uint32_t>(out[i]) & 0xffffu, 0u);  // a bf16 value, exactly
  }
}

TEST_F(SafeTensorsTest, ReadsF16AndF64AsF32) {
  // Half floats spelled out: 1, -2, the largest (65504), the smallest subnormal (2^-24), infinity, 1/3.
  const uint16_t halves[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x3555};
  const float expect[] = {1.f, -2.f, 65504.f, std::ldexp(1.f, -24), INFINITY, 0.333251953125f};
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
  expect_open_error(p, {p, "\"w\"", "invalid shape"});
  p = write_raw("m.safetensors", R"({"w":{"dtype":"F32","shape":[1]}})", 4);
  expect_open_error(p, {p, "\"w\"", "data_offsets"});
  p = write_raw("x.safetensors", R"({"__metadata__":{"format":1}})", 0);
  expect_open_error(p, {p, "__metadata__"});
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
