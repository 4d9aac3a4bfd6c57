// Files written whole or not at all, and what kind of filesystem a path lives on. Atomic writing
// serves every output that a later run trusts (token shards, meta.json, checkpoints); the mount type
// lets the loader tell a user that their data sits on a slow network or VM-shared disk.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tk::fs {

// A file that appears at `path` only when commit() succeeds. Bytes go to `path.tmp.<pid>`; commit()
// flushes, fsyncs and renames it over `path`. An AtomicFile destroyed without commit() (an error, an
// exception) removes its temporary file. Every failure (ENOSPC, EFBIG, EIO...) is a tk::Error naming
// `path` and the cause.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Overwrites bytes already written, e.g. a header whose counts are known only at the end.
  void write_at(uint64_t offset, const void* data, size_t n);
  void commit();

  uint64_t size() const { return flushed_ + buffer_.size(); }
  const std::string& path() const { return path_; }

 private:
  void flush();
  [[noreturn]] void fail(const char* action, int err);

  std::string path_, tmp_path_;
  int fd_ = -1;
  std::vector<char> buffer_;  // writes are gathered into large blocks before reaching the kernel
  uint64_t flushed_ = 0;
  bool committed_ = false;
};

void write_file_atomic(const std::string& path, std::string_view contents);
// strerror(err), with what to do added for a full disk (ENOSPC, EDQUOT) or a file size limit (EFBIG).
std::string error_cause(int err);
// fsync(2) of a directory: the renames and removals inside it survive a crash once it returns. A tk::Error
// naming `dir` when the filesystem reports a failure (one that cannot sync a directory at all is not one).
void sync_directory(const std::string& dir);
// The whole file; a tk::Error naming it when it cannot be read.
std::string read_file(const std::string& path);
// Creates `dir` and every directory above it that is missing; returns those it made, deepest first, so that a
// command that fails can remove what it made (remove_made_directories) and leave the tree as it found it. A
// tk::Error naming `dir` when one cannot be made.
std::vector<std::string> make_directories(const std::string& dir);
// Removes each of `made` (make_directories' list) that is empty, deepest first; what holds anything stays.
void remove_made_directories(const std::vector<std::string>& made);

// The type of the filesystem holding `path`, as /proc/self/mountinfo names it ("ext4", "9p", "nfs4",
// "fuse.sshfs", "cifs", ...), else from statfs(2)'s f_type, else "unknown". The environment variable
// TOKAMAK_FAKE_MOUNT_TYPE, when set, is returned instead: tests and users can see the slow-mount path.
std::string mount_type(const std::string& path);

// True for the network and VM-shared filesystems that read far slower than a local disk: 9p and
// drvfs/v9fs (WSL's /mnt/c), NFS, FUSE, CIFS/SMB.
bool is_slow_mount(std::string_view type);

}  // namespace tk::fs
