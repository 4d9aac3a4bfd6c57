// The per-machine cache files (core/cache.h): where they live, and that reading or writing them never fails
// a run: missing, corrupt or unwritable files give an empty table or a warning, and writes are whole.
#include "core/cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/fs.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;

class CacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = stdfs::temp_directory_path() / ("tk-cache-test-" + std::to_string(::getpid()));
    stdfs::remove_all(dir_);
    stdfs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    stdfs::remove_all(dir_, ec);
  }
  stdfs::path dir_;
};

TEST_F(CacheTest, PathFollowsXdgCacheHomeThenHome) {
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old_xdg ? old_xdg : "";
  ::setenv("XDG_CACHE_HOME", dir_.c_str(), 1);
  EXPECT_EQ(cache::path_of("x.json"), (dir_ / "tokamak" / "x.json").string());
  ::setenv("XDG_CACHE_HOME", "", 1);
  const char* home = std::getenv("HOME");
  if (home && *home) EXPECT_EQ(cache::path_of("x.json"), (stdfs::path(home) / ".cache" / "tokamak" / "x.json").string());
  if (old_xdg) ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else ::unsetenv("XDG_CACHE_HOME");
}

TEST_F(CacheTest, RoundTripCreatesTheFolder) {
  const std::string path = (dir_ / "sub" / "folder" / "t.json").string();
  EXPECT_TRUE(cache::read(path, "things").empty());  // missing: empty, no error
  nlohmann::json j = {{"H200", {{"a", 1}, {"b", 2.5}}}};
  ASSERT_TRUE(cache::write(path, j));
  EXPECT_EQ(cache::read(path, "things"), j);
  j["H200"]["a"] = 3;
  ASSERT_TRUE(cache::write(path, j));  // rewritten whole
  EXPECT_EQ(cache::read(path, "things")["H200"]["a"], 3);
}

TEST_F(CacheTest, CorruptOrForeignFilesReadAsEmpty) {
  const std::string path = (dir_ / "t.json").string();
  for (const char* text : {"{\"truncated\": ", "[1, 2, 3]", "not json at all", ""}) {
    std::ofstream(path) << text;
    EXPECT_TRUE(cache::read(path, "things").empty()) << text;
  }
  // And the next write replaces it.
  ASSERT_TRUE(cache::write(path, {{"k", 1}}));
  EXPECT_EQ(cache::read(path, "things")["k"], 1);
}

TEST_F(CacheTest, UnwritablePlaceIsAWarningNotAnError) {
  // A folder that cannot exist (its parent is a file): fails for root too.
  std::ofstream(dir_ / "file") << "x";
  EXPECT_FALSE(cache::write((dir_ / "file" / "t.json").string(), {{"k", 1}}));
  EXPECT_TRUE(cache::read((dir_ / "file" / "t.json").string(), "things").empty());
}

}  // namespace
}  // namespace tk
