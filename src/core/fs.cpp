// Atomic file writing (temp file, fsync, rename) and mount-type detection from /proc/self/mountinfo.
#include "core/fs.h"

#include <fcntl.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.h"

namespace tk::fs {
namespace {

constexpr size_t kBufferBytes = 4 << 20;

}  // namespace

std::string error_cause(int err) {
  std::string s = std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) s += " (the disk is full: free some space or write elsewhere)";
  if (err == EFBIG) s += " (the file size limit was reached)";
  return s;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  tmp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("create", errno);
  buffer_.reserve(kBufferBytes);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

void AtomicFile::fail(const char* action, int err) {
  // The partial temp file is useless and may be large (a full disk): free it before reporting.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_path_.c_str());
  tk::fail("cannot {} {}: {}", action, path_, error_cause(err));
}

void AtomicFile::write(const void* data, size_t n) {
  TK_CHECK(fd_ >= 0 && !committed_, "internal error: write to {} after it was closed", path_);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t take = std::min(n, kBufferBytes - buffer_.size());
    buffer_.insert(buffer_.end(), p, p + take);
    p += take;
    n -= take;
    if (buffer_.size() == kBufferBytes) flush();
  }
}

void AtomicFile::flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    ssize_t w = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("write", errno);
    done += size_t(w);
  }
  flushed_ += done;
  buffer_.clear();
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t n) {
  TK_CHECK(offset + n <= size(), "internal error: write_at past the end of {}", path_);
  flush();
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, p, n, off_t(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("write", errno);
    p += w;
    offset += uint64_t(w);
    n -= size_t(w);
  }
}

void AtomicFile::commit() {
  flush();
  // A full disk or a network filesystem may report a failed write only at fsync or close.
  if (::fsync(fd_) != 0) fail("write", errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("write", errno);
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) fail("rename the finished temporary file to", errno);
  committed_ = true;
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  sync_directory(dir.empty() ? "." : dir);
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFile f(path);
  f.write(contents);
  f.commit();
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) tk::fail("cannot open the directory {} to sync it: {}", dir, error_cause(errno));
  const int rc = ::fsync(fd), err = errno;
  ::close(fd);
  // EINVAL: a filesystem that has no directory sync (the renames are as durable as it makes them).
  if (rc != 0 && err != EINVAL) tk::fail("cannot sync the directory {}: {}", dir, error_cause(err));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) tk::fail("cannot read {}: {}", path, std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) tk::fail("cannot read {}: {}", path, std::strerror(errno));
  return s.str();
}

std::vector<std::string> make_directories(const std::string& dir) {
  namespace stdfs = std::filesystem;
  std::vector<std::string> missing;
  std::error_code ec;
  for (stdfs::path p = stdfs::absolute(dir, ec).lexically_normal(); !p.empty() && !stdfs::exists(p, ec);
       p = p.parent_path()) {
    if (p.has_filename()) missing.push_back(p.string());
    if (p == p.parent_path()) break;
  }
  stdfs::create_directories(dir, ec);
  if (ec) {
    remove_made_directories(missing);
    tk::fail("cannot create the directory {}: {}", dir, ec.message());
  }
  return missing;
}

void remove_made_directories(const std::vector<std::string>& made) {
  std::error_code ec;
  for (const std::string& d : made) std::filesystem::remove(d, ec);  // only an empty directory goes
}

namespace {

// mountinfo escapes space, tab, newline and backslash in paths as \ooo octal.
std::string unescape_octal(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    auto digit = [&](size_t j) { return j < s.size() && s[j] >= '0' && s[j] <= '7'; };
    bool octal = s[i] == '\\' && digit(i + 1) && digit(i + 2) && digit(i + 3);
    if (octal) {
      out += char((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool is_under(const std::string& path, const std::string& mount_point) {
  if (mount_point == "/") return true;
  return path.compare(0, mount_point.size(), mount_point) == 0 &&
         (path.size() == mount_point.size() || path[mount_point.size()] == '/');
}

// The fstype of the deepest mount point holding `path`; the last such line wins, as later mounts
// hide earlier ones at the same point. Line format: proc(5), /proc/[pid]/mountinfo.
std::optional<std::string> type_from_mountinfo(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::optional<std::string> best;
  size_t best_len = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    if (!(fields >> id >> parent >> dev >> root >> mount_point)) continue;
    size_t sep = line.find(" - ");
    if (sep == std::string::npos) continue;
    std::istringstream tail(line.substr(sep + 3));
    std::string fstype;
    if (!(tail >> fstype)) continue;
    mount_point = unescape_octal(mount_point);
    if (is_under(path, mount_point) && mount_point.size() >= best_len) {
      best = fstype;
      best_len = mount_point.size();
    }
  }
  return best;
}

// statfs magic numbers (linux/magic.h and the filesystems' sources) for when /proc is unavailable.
std::string type_from_statfs(const std::string& path) {
  struct statfs st;
  if (::statfs(path.c_str(), &st) != 0) return "unknown";
  switch (static_cast<uint64_t>(st.f_type)) {
    case 0x01021997: return "9p";
    case 0x6969: return "nfs";
    case 0x65735546: return "fuse";
    case 0xff534d42: return "cifs";
    case 0xfe534d42: return "smb2";
    case 0xef53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683e: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794c7630: return "overlay";
    default: return "unknown";
  }
}

}  // namespace

std::string mount_type(const std::string& path) {
  if (const char* fake = std::getenv("TOKAMAK_FAKE_MOUNT_TYPE"); fake && *fake) return fake;
  std::error_code ec;
  std::string real = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec).string();
  if (ec) real = path;
  if (auto t = type_from_mountinfo(real)) return *t;
  return type_from_statfs(path);
}

bool is_slow_mount(std::string_view type) {
  auto starts = [&](std::string_view p) { return type.substr(0, p.size()) == p; };
  return type == "9p" || type == "v9fs" || type == "drvfs" || starts("nfs") || starts("fuse") ||
         type == "cifs" || starts("smb");
}

}  // namespace tk::fs
