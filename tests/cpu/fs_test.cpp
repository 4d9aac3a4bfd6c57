// Atomic files appear whole or not at all, a failed write says which file and why, and mount types
// are read from the system (or the TOKAMAK_FAKE_MOUNT_TYPE override).
#include "core/fs.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "data_testing.h"

namespace tk {
namespace {

using testing::error_of;
using testing::files_in;
using testing::read_text;
using testing::TempDir;

TEST(AtomicFile, AppearsOnlyOnCommit) {
  TempDir dir;
  const std::string path = dir.path("out.bin");
  fs::AtomicFile f(path);
  f.write("hello ");
  f.write("world");
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(f.size(), 11u);
  f.commit();
  EXPECT_EQ(read_text(path), "hello world");
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFile, AbandonedFileLeavesNothing) {
  TempDir dir;
  { fs::AtomicFile f(dir.path("out.bin")); f.write("partial"); }
  EXPECT_TRUE(files_in(dir.path()).empty());
}

TEST(AtomicFile, ReplacesAnOldFileOnlyOnCommit) {
  TempDir dir;
  const std::string path = dir.path("meta.json");
  fs::write_file_atomic(path, "old");
  {
    fs::AtomicFile f(path);
    f.write("new");
    EXPECT_EQ(read_text(path), "old");
  }
  EXPECT_EQ(read_text(path), "old");
  fs::write_file_atomic(path, "new");
  EXPECT_EQ(read_text(path), "new");
}

TEST(AtomicFile, WriteAtPatchesEarlierBytes) {
  TempDir dir;
  const std::string path = dir.path("out.bin");
  fs::AtomicFile f(path);
  f.write("0000-body");
  f.write_at(0, "HEAD", 4);
  f.commit();
  EXPECT_EQ(read_text(path), "HEAD-body");
}

TEST(AtomicFile, FullDiskIsAClearErrorAndLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.path("big.bin");
  const std::string block(1 << 20, 'x');
  std::string msg;
  {
    testing::FileSizeLimit limit(256 << 10);
    msg = error_of([&] {
      fs::AtomicFile f(path);
      for (int i = 0; i < 8; i++) f.write(block);
      f.commit();
    });
  }
  EXPECT_NE(msg.find("cannot write " + path + ": File too large"), std::string::npos) << msg;
  EXPECT_TRUE(files_in(dir.path()).empty());
}

TEST(AtomicFile, UnwritableDirectoryIsAClearError) {
  const std::string msg = error_of([] { fs::AtomicFile f("/nonexistent-dir/out.bin"); });
  EXPECT_NE(msg.find("cannot create /nonexistent-dir/out.bin: No such file or directory"), std::string::npos) << msg;
}

TEST(ReadFile, MissingFileIsAClearError) {
  const std::string msg = error_of([] { fs::read_file("/nonexistent-dir/meta.json"); });
  EXPECT_NE(msg.find("cannot read /nonexistent-dir/meta.json"), std::string::npos) << msg;
}

TEST(MountType, ReadsTheSystemsMountTable) {
  unsetenv("TOKAMAK_FAKE_MOUNT_TYPE");
  EXPECT_EQ(fs::mount_type("/proc"), "proc");
  EXPECT_EQ(fs::mount_type("/proc/self/status"), "proc");
  TempDir dir;
  const std::string type = fs::mount_type(dir.path());
  EXPECT_NE(type, "");
  EXPECT_NE(type, "proc");
}

TEST(MountType, CanBeFakedForTests) {
  setenv("TOKAMAK_FAKE_MOUNT_TYPE", "9p", 1);
  EXPECT_EQ(fs::mount_type("/proc"), "9p");
  unsetenv("TOKAMAK_FAKE_MOUNT_TYPE");
}

TEST(MountType, KnowsWhichMountsAreSlow) {
  for (const char* slow : {"9p", "v9fs", "drvfs", "nfs", "nfs4", "fuse", "fuse.sshfs", "fuseblk", "cifs", "smb3"})
    EXPECT_TRUE(fs::is_slow_mount(slow)) << slow;
  for (const char* fast : {"ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "unknown"})
    EXPECT_FALSE(fs::is_slow_mount(fast)) << fast;
}

}  // namespace
}  // namespace tk
