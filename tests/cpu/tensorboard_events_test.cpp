// TensorBoard's event files as tokamak writes them: CRC-32C against the published test vectors (RFC 3720's, and
// the common check value of "123456789"), TFRecord's masked CRC, and a file read back by a decoder written here from
// the formats (the framing with both CRCs checked, then Event and Summary field by field).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "core/tensorboard_events.h"
#include "data_testing.h"
#include "tensorboard_testing.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;
using testing::Event;
using testing::event;
using testing::records;

std::string bytes(std::initializer_list<int> values) {
  std::string s;
  for (int v : values) s += char(uint8_t(v));
  return s;
}

TEST(Crc32c, PublishedTestVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; i++) up += char(i), down += char(31 - i);
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("6789", crc32c("12345")), crc32c("123456789"));  // continued
  // Masked: rotated right by 15, plus 0xa282ead8.
  EXPECT_EQ(masked_crc32c("123456789"), 0xC78AB0E5u);
}

TEST(TfRecord, FramesTheBytesWithTheirLengthAndBothCrcs) {
  const std::string r = tfrecord("abc");
  ASSERT_EQ(r.size(), 8 + 4 + 3 + 4u);
  EXPECT_EQ(r.substr(0, 8), bytes({3, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(records(r), std::vector<std::string>{"abc"});
  EXPECT_EQ(records(tfrecord("")), std::vector<std::string>{""});
}

TEST(EventFile, WritesTheVersionASessionStartAndEachStepsScalars) {
  testing::TempDir dir;
  std::string path;
  {
    EventFileWriter w(dir.path("tb"));
    path = w.path();
    w.scalars(1700000000.25, 5, {{"loss", 2.5}, {"lr", 3e-4}});
    w.scalars(1700000001.5, 6, {{"loss", 2.25}, {"memory_bytes", 262004736.0}});
  }
  EXPECT_EQ(stdfs::path(path).parent_path(), stdfs::path(dir.path("tb")));
  EXPECT_EQ(stdfs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
  const std::vector<std::string> rs = records(fs::read_file(path));
  ASSERT_EQ(rs.size(), 4u);
  const Event version = event(rs[0]), start = event(rs[1]), a = event(rs[2]), b = event(rs[3]);
  EXPECT_EQ(version.file_version, "brain.Event:2");
  EXPECT_GT(version.wall_time, 1.6e9);
  EXPECT_EQ(start.session_status, 1);  // START, at the first step written
  EXPECT_EQ(start.step, 5);
  EXPECT_EQ(a.wall_time, 1700000000.25);
  EXPECT_EQ(a.step, 5);
  EXPECT_EQ(a.values, (std::vector<std::pair<std::string, float>>{{"loss", 2.5f}, {"lr", 3e-4f}}));
  EXPECT_EQ(b.step, 6);
  EXPECT_EQ(b.values, (std::vector<std::pair<std::string, float>>{{"loss", 2.25f}, {"memory_bytes", 262004736.0f}}));
}

TEST(EventFile, AFileThatCannotBeMadeIsNamed) {
  testing::TempDir dir;
  testing::write_text(dir.path("file"), "a file where the directory would go");
  try {
    EventFileWriter w(dir.path("file/tb"));
    ADD_FAILURE() << "no tk::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path("file/tb")), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tk
