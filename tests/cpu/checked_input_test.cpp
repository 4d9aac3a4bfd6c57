// The checked readers every parser shares: JSON integers with their range (no truncated fraction, no
// wrapped value), size arithmetic that refuses to overflow, and file names from data files confined to
// their directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/confined_path.h"
#include "core/error.h"
#include "core/json_integer.h"
#include "data_testing.h"

namespace tk {
namespace {

using nlohmann::json;
using testing::error_of;
using testing::TempDir;

TEST(JsonInteger, ReadsIntegersInRange) {
  EXPECT_EQ(json_integer<int>(json::parse("64"), "f.json", "hidden_size"), 64);
  EXPECT_EQ(json_integer<int>(json::parse("-3"), "f.json", "x"), -3);
  EXPECT_EQ(json_integer<int64_t>(json::parse("9223372036854775807"), "f.json", "x"), INT64_MAX);
  EXPECT_EQ(json_integer<uint64_t>(json::parse("18446744073709551615"), "f.json", "x"), UINT64_MAX);
  EXPECT_EQ(json_integer<int>(json::parse("7"), "f.json", "x", 1, 7), 7);
}

// nlohmann::json's get<int>() gives 64 for 64.5 and 512 for 4294967808: both must be errors naming the
// file, the field and the value.
TEST(JsonInteger, RefusesFractionsAndValuesThatDoNotFit) {
  std::string msg = error_of([] { json_integer<int>(json::parse("64.5"), "cfg/config.json", "hidden_size"); });
  EXPECT_EQ(msg, "cfg/config.json: hidden_size is 64.5, not an integer");
  msg = error_of([] { json_integer<int>(json::parse("4294967808"), "config.json", "vocab_size"); });
  EXPECT_EQ(msg, "config.json: vocab_size is 4294967808; it must be an integer from -2147483648 to 2147483647");
  msg = error_of([] { json_integer<int>(json::parse("-1"), "m.json", "tokens", 0); });
  EXPECT_EQ(msg, "m.json: tokens is -1; it must be an integer from 0 to 2147483647");
  msg = error_of([] { json_integer<uint64_t>(json::parse("-1"), "m.json", "tokens"); });
  EXPECT_NE(msg.find("m.json: tokens is -1; it must be an integer from 0"), std::string::npos) << msg;
  msg = error_of([] { json_integer<int64_t>(json::parse("18446744073709551615"), "s.json", "step"); });
  EXPECT_NE(msg.find("s.json: step is 18446744073709551615; it must be"), std::string::npos) << msg;
  // A number past uint64 is parsed as floating point: not an integer either.
  msg = error_of([] { json_integer<uint64_t>(json::parse("18446744073709551616"), "s.json", "n"); });
  EXPECT_NE(msg.find("not an integer"), std::string::npos) << msg;
  for (const char* text : {"\"64\"", "true", "null", "[1]", "{}", "1e3", "64.0"})
    EXPECT_NE(error_of([&] { json_integer<int>(json::parse(text), "f", "x"); }).find("not an integer"),
              std::string::npos)
        << text;
  EXPECT_NE(error_of([] { json_integer<int>(json::parse("8"), "f", "x", 1, 7); }).find("from 1 to 7"),
            std::string::npos);
}

TEST(CheckedArithmetic, ExactOrAnErrorNamingTheQuantity) {
  EXPECT_EQ(checked_mul<int64_t>(3037000499, 3037000499, "n"), 9223372030926249001);
  EXPECT_EQ(checked_add<size_t>(SIZE_MAX - 1, 1, "n"), SIZE_MAX);
  std::string msg = error_of([] { checked_mul<int64_t>(int64_t(1) << 40, int64_t(1) << 40, "the parameter count"); });
  EXPECT_NE(msg.find("the parameter count overflows: 1099511627776 x 1099511627776"), std::string::npos) << msg;
  EXPECT_NE(error_of([] { checked_add<size_t>(SIZE_MAX, 1, "the size"); }).find("the size overflows"),
            std::string::npos);
  EXPECT_EQ(checked_cast<int>(int64_t(INT32_MAX), "x"), INT32_MAX);
  EXPECT_NE(error_of([] { checked_cast<int>(int64_t(1) << 32, "the width"); }).find("the width is 4294967296"),
            std::string::npos);
  EXPECT_NE(error_of([] { checked_cast<size_t>(int64_t(-1), "the count"); }).find("the count is -1"),
            std::string::npos);
}

// The micro-batches of a step: exact, or an error naming the flags (never a count wrapped through an int).
TEST(CheckedArithmetic, MicroBatchesPerStepFitAnInt) {
  EXPECT_EQ(micro_batches_per_step(0, 2, 16), 1);
  EXPECT_EQ(micro_batches_per_step(32, 2, 16), 1);
  EXPECT_EQ(micro_batches_per_step(int64_t(INT_MAX) * 32, 2, 16), INT_MAX);
  EXPECT_EQ(micro_batches_per_step(INT_MAX, INT_MAX, 1), 1);
  std::string msg = error_of([] { micro_batches_per_step(9223372036854775776, 2, 16); });
  EXPECT_NE(msg.find("--batch-tokens 9223372036854775776 is 288230376151711743 micro-batches of 32 tokens"),
            std::string::npos)
      << msg;
  msg = error_of([] { micro_batches_per_step(137438953504, 2, 16); });
  EXPECT_NE(msg.find("is 4294967297 micro-batches of 32 tokens (--batch 2 x --seq 16)"), std::string::npos) << msg;
  msg = error_of([] { micro_batches_per_step(0, 65536, 65536); });
  EXPECT_NE(msg.find("--batch 65536 x --seq 65536 is 4294967296 tokens a micro-batch"), std::string::npos) << msg;
  msg = error_of([] { micro_batches_per_step(33, 2, 16); });
  EXPECT_NE(msg.find("--batch-tokens 33 is not a multiple of the micro-batch's 32 tokens"), std::string::npos) << msg;
  EXPECT_NE(error_of([] { micro_batches_per_step(-32, 2, 16); }).find("--batch-tokens -32 is not a multiple"),
            std::string::npos);
  EXPECT_NE(error_of([] { micro_batches_per_step(32, 0, 16); }).find("must be positive"), std::string::npos);
}

TEST(PathInside, JoinsNamesThatStayInside) {
  TempDir dir;
  testing::write_text(dir.path("data/train_000000.bin"), "x");
  EXPECT_EQ(path_inside(dir.path("data"), "train_000000.bin", "meta.json"), dir.path("data") + "/train_000000.bin");
  EXPECT_EQ(path_inside(dir.path("data"), "sub/./later.bin", "meta.json"), dir.path("data") + "/sub/./later.bin");
}

TEST(PathInside, RefusesAbsoluteDotDotAndLinksLeadingOut) {
  TempDir dir;
  testing::write_text(dir.path("data/a.bin"), "x");
  testing::write_text(dir.path("secret"), "x");
  for (const char* name : {"/etc/passwd", "../secret", "x/../../secret", "..", ""}) {
    const std::string msg = error_of([&] { path_inside(dir.path("data"), name, "data/meta.json"); });
    EXPECT_NE(msg.find("data/meta.json names the file \"" + std::string(name) + "\""), std::string::npos) << msg;
  }
  std::filesystem::create_symlink(dir.path("secret"), dir.path("data/link.bin"));
  const std::string msg = error_of([&] { path_inside(dir.path("data"), "link.bin", "data/meta.json"); });
  EXPECT_NE(msg.find("which is a link to " + dir.path("secret")), std::string::npos) << msg;
  // A link that stays inside is fine.
  std::filesystem::create_symlink(dir.path("data/a.bin"), dir.path("data/b.bin"));
  EXPECT_EQ(path_inside(dir.path("data"), "b.bin", "m"), dir.path("data") + "/b.bin");
}

}  // namespace
}  // namespace tk
