// What belongs to a run in its directory, by name; replacing a run removes those entries only, and every
// file is written atomically (core/fs.h) so an interrupted run never leaves half a config or tokenizer. The lock that
// keeps a second writer out, and the record of its holder that names it in the refusal.
#include "train/run_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/format.h"
#include "core/fs.h"
#include "core/log.h"
#include "data/tokenizer.h"
#include "train/checkpoint.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

constexpr const char* kTokenizerDir = "tokenizer";

bool is_run_entry(const std::string& name) {
  return name == "config.json" || name == "config.toml" || name == "log.jsonl" || name == kTokenizerDir ||
         starts_with(name, "events.out.tfevents.") || starts_with(name, "step_") || starts_with(name, ".tmp-step_") ||
         starts_with(name, ".del-");
}

std::vector<stdfs::path> run_entries(const std::string& run_dir) {
  std::vector<stdfs::path> out;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(run_dir, ec))
    if (is_run_entry(e.path().filename().string())) out.push_back(e.path());
  return out;
}

std::string file_in(const std::string& dir, const char* name) { return (stdfs::path(dir) / name).string(); }

// fs::AtomicFile's temporary of one of the run's own files: "config.json.tmp.<pid>".
bool is_run_file_temporary(const std::string& name) {
  for (const char* file : {"config.json", "config.toml", "memory.json", "log.jsonl"}) {
    const std::string prefix = std::string(file) + ".tmp.";
    if (starts_with(name, prefix.c_str()) && name.size() > prefix.size() &&
        name.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
      return true;
  }
  return false;
}

std::string this_host() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("?");
}

// This process's command line, its arguments joined by spaces (at most 1000 characters).
std::string this_command_line() {
  std::string cmdline;
  try {
    cmdline = fs::read_file("/proc/self/cmdline");
  } catch (const Error&) {
    return "";
  }
  for (char& c : cmdline)
    if (c == '\0') c = ' ';
  while (!cmdline.empty() && cmdline.back() == ' ') cmdline.pop_back();
  return cmdline.size() > 1000 ? cmdline.substr(0, 1000) + "..." : cmdline;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Who holds the lock, in words, from the record its holder wrote. The record is a claim: a holder that has
// not written it yet leaves it empty or stale, a pid may live in another PID namespace, so a pid that does
// not run on this host is said to be so rather than named as the holder.
std::string describe_holder(int fd, const std::string& lock_path) {
  char buf[4096];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  const nlohmann::json j = nlohmann::json::parse(std::string(buf, n > 0 ? size_t(n) : 0), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer())
    return fmt::format("a process that has not recorded itself in {} (one starting now, or another program)",
                       lock_path);
  const int64_t pid = j["pid"].get<int64_t>();
  const std::string host = j.value("host", std::string("?")), command = j.value("command", std::string());
  std::string who = fmt::format("pid {} on {}", pid, host);
  if (host == this_host() && pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH)
    who += fmt::format(" according to {}, but no such process runs here: the holder is one that has not recorded "
                       "itself yet, or one in another PID namespace",
                       lock_path);
  if (!command.empty()) who += fmt::format(", running `{}`", command);
  if (j.contains("started") && j["started"].is_number())
    who += fmt::format(", for {}", format_duration(std::max(0.0, unix_now() - j["started"].get<double>())));
  return who;
}

// Only the lock file (and the marker of a run that wrote nothing else) is left in the directory.
bool holds_only_the_lock(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(dir, ec))
    if (e.path().filename() != RunDirLock::kFileName && e.path().filename() != RunDir::kMarkerName) return false;
  return !ec;
}

// A run's config.json as every version of tokamak train writes it: an object with the train flags and the model.
// (A Hugging Face config.json has neither.)
bool is_run_config(const std::string& path) {
  std::error_code ec;
  if (!stdfs::is_regular_file(path, ec)) return false;
  const nlohmann::json j = nlohmann::json::parse(fs::read_file(path), nullptr, false);
  return j.is_object() && j.contains("train") && j["train"].is_object() && j.contains("model") &&
         j["model"].is_object();
}

// The run entries' names, for a message: "config.json, log.jsonl and 2 more".
std::string some_names(const std::vector<stdfs::path>& entries) {
  std::string s;
  for (size_t i = 0; i < entries.size() && i < 4; i++) s += (i ? ", " : "") + entries[i].filename().string();
  if (entries.size() > 4) s += fmt::format(" and {} more", entries.size() - 4);
  return s;
}

}  // namespace

std::string RunDir::log_path() const { return file_in(path_, "log.jsonl"); }

bool RunDir::made_by_a_run() const {
  std::error_code ec;
  return stdfs::is_regular_file(file_in(path_, kMarkerName), ec) || is_run_config(file_in(path_, "config.json"));
}

void RunDir::check_free(bool overwrite) const {
  std::vector<stdfs::path> entries = run_entries(path_);
  if (entries.empty()) return;
  std::sort(entries.begin(), entries.end());
  TK_CHECK(made_by_a_run(),
           "{} is not a run directory: it holds {}, which a run would replace, but no {} (the mark tokamak train "
           "leaves in each run directory it makes) and no config.json of a run; {}choose another --out",
           path_, some_names(entries), kMarkerName,
           overwrite ? "--overwrite replaces only a run's directory, never one holding other files (a model, an "
                       "export); "
                     : "");
  if (overwrite) return;
  fail("{} already holds a run ({} checkpoint(s), {}): pass --resume to continue it, --overwrite to replace it, "
       "or choose another --out",
       path_, list_checkpoints(path_).size(), stdfs::exists(log_path()) ? "a log" : "no log");
}

void RunDir::clear() const {
  for (const stdfs::path& p : run_entries(path_)) {
    if (starts_with(p.filename().string(), "step_")) {
      remove_checkpoint(p.string());
      continue;
    }
    std::error_code ec;
    stdfs::remove_all(p, ec);
    if (ec) fail("cannot remove {} from the old run: {}", p.string(), ec.message());
  }
  std::error_code ec;
  stdfs::create_directories(path_, ec);
  if (ec) fail("cannot create the run directory {}: {}", path_, ec.message());
  fs::write_file_atomic(file_in(path_, kMarkerName), "{\"written_by\": \"tokamak train\"}\n");
}

void RunDir::remove_interrupted_work() const {
  remove_interrupted_checkpoints(path_);
  std::vector<stdfs::path> left;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(path_, ec))
    if (is_run_file_temporary(e.path().filename().string())) left.push_back(e.path());
  for (const stdfs::path& p : left) {
    log::info("removing {}: left by an interrupted write", p.string());
    stdfs::remove(p, ec);
    if (ec) fail("cannot remove {}: {}", p.string(), ec.message());
  }
}

void RunDir::drop_checkpoints_after(int64_t step, bool overwrite) const {
  std::vector<std::string> later;
  for (const std::string& c : list_checkpoints(path_))
    if (read_trainer_state(c).step > step) later.push_back(c);
  if (later.empty()) return;
  TK_CHECK(overwrite,
           "{} holds {} checkpoint(s) after step {} (the newest: {}): resuming from step {} would mix two histories; "
           "pass --overwrite to delete the later ones, or resume into another --out",
           path_, later.size(), step, later.back(), step);
  for (const std::string& c : later) {
    log::warn("deleting {}: it comes after step {}, which the run continues from", c, step);
    remove_checkpoint(c);
  }
}

std::string RunDir::keep_tokenizer(const std::string& path) const {
  if (path.empty()) return "";
  const stdfs::path copy = stdfs::path(path_) / kTokenizerDir, recorded = stdfs::path("..") / kTokenizerDir;
  std::error_code ec;
  if (!stdfs::exists(path, ec)) {
    if (stdfs::is_directory(copy, ec) && !stdfs::is_empty(copy, ec)) {
      log::warn("the run's tokenizer {} is gone: its copy in {} is kept", path, copy.string());
      return recorded.string();
    }
    return path;
  }
  const std::vector<std::string> files = Tokenizer::files(path);
  stdfs::create_directories(copy, ec);
  if (ec) fail("cannot create {} for a copy of the tokenizer {}: {}", copy.string(), path, ec.message());
  for (const std::string& f : files)
    fs::write_file_atomic((copy / stdfs::path(f).filename()).string(), fs::read_file(f));
  return (stdfs::is_directory(path, ec) ? recorded : recorded / stdfs::path(files.front()).filename()).string();
}

void RunDir::write_config(const nlohmann::ordered_json& config) const {
  fs::write_file_atomic(file_in(path_, "config.json"), config.dump(2) + "\n");
}

void RunDir::write_config_file(const std::string& toml) const { fs::write_file_atomic(file_in(path_, "config.toml"), toml); }

void RunDir::write_memory_table(const nlohmann::ordered_json& table) const {
  fs::write_file_atomic(file_in(path_, "memory.json"), table.dump(2) + "\n");
}

RunDirLock::RunDirLock(std::string dir) : dir_(std::move(dir)), path_(file_in(dir_, kFileName)) {
  std::error_code ec;
  created_dir_ = stdfs::create_directories(dir_, ec);
  if (ec) fail("cannot create the run directory {}: {}", dir_, ec.message());
  open_lock_file();
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = err == EWOULDBLOCK ? describe_holder(fd_, path_) : "";
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) fail("cannot lock {}: {}", path_, fs::error_cause(err));
    fail("{} is in use by another process: {}. Two processes writing into one run directory would destroy each "
         "other's checkpoints: wait for that one to end, or choose another directory",
         dir_, holder);
  }
  try {
    record_holder();
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

// The lock file is written (the holder's record) and emptied at the end, so it must be tokamak's own: a symbolic
// link is not followed (O_NOFOLLOW), and a file that is not a regular one, or one with another name (a hard link),
// is refused. O_NONBLOCK: opening a FIFO never waits for a writer.
void RunDirLock::open_lock_file() {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd_ < 0 && errno == ELOOP)
    fail("{} is a symbolic link: a run directory's lock file is a regular file that tokamak makes and writes, and "
         "it does not follow a link there into the file it names; remove the link",
         path_);
  if (fd_ < 0) fail("cannot open the run directory's lock file {}: {}", path_, fs::error_cause(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd_, &st) == 0;
  const std::string why = !stat_ok             ? fs::error_cause(errno)
                          : !S_ISREG(st.st_mode) ? "it is not a regular file"
                          : st.st_nlink != 1     ? fmt::format("it has {} names (hard links)", st.st_nlink)
                                                 : "";
  if (why.empty()) return;
  ::close(fd_);
  fd_ = -1;
  fail("{} cannot be the run directory's lock file: {}. tokamak makes that file itself and writes into it; remove "
       "what is there",
       path_, why);
}

void RunDirLock::record_holder() const {
  const nlohmann::json j = {
      {"pid", int64_t(::getpid())}, {"host", this_host()}, {"command", this_command_line()}, {"started", unix_now()}};
  const std::string text = j.dump() + "\n";
  if (::ftruncate(fd_, 0) != 0) fail("cannot write {}: {}", path_, fs::error_cause(errno));
  const ssize_t written = ::pwrite(fd_, text.data(), text.size(), 0);
  if (written != ssize_t(text.size()))
    fail("cannot write {}: {}", path_, fs::error_cause(written < 0 ? errno : ENOSPC));
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  if (created_dir_ && holds_only_the_lock(dir_)) {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  } else if (::ftruncate(fd_, 0) != 0) {
    log::debug("cannot clear {}: the next holder overwrites it", path_);
  }
  ::close(fd_);
}

}  // namespace tk
