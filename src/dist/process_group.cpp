// The process group's event loop: one poll() over a signalfd (SIGCHLD and the signals to forward, blocked while the
// group runs) and the pipes that carry the ranks' stderr. Everything a child needs is prepared before fork(), so
// that between fork and exec it makes only async-signal-safe calls.
#include "dist/process_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "core/error.h"

extern char** environ;

namespace tk::dist {

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : fmt::format("signal {}", sig);
}

std::string RankExit::describe() const {
  if (signaled) return "was killed by " + signal_name(code);
  if (code == 127) return "could not be started (status 127)";
  return fmt::format("exited with status {}", code);
}

namespace {

using clock = std::chrono::steady_clock;

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the log's reader went away: nothing better to do with the text
    s.remove_prefix(size_t(n));
  }
}

// PATH lookup in the parent (execvp may allocate, which a child of a threaded process must not).
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/bin:/bin";
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
  }
  return name;  // execve fails on it and the child reports ENOENT
}

// This process's environment with `overrides` ("NAME=value") replacing or adding variables.
std::vector<std::string> child_environment(const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; e++) {
    const std::string kv(*e);
    vars[kv.substr(0, kv.find('='))] = kv;
  }
  for (const std::string& kv : overrides) {
    TK_CHECK(kv.find('=') != std::string::npos, "process group: '{}' is not NAME=value", kv);
    vars[kv.substr(0, kv.find('='))] = kv;
  }
  std::vector<std::string> out;
  for (auto& [name, kv] : vars) out.push_back(kv);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    TK_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "process group: pipe2 failed: {}", std::strerror(errno));
    read = fds[0];
    write = fds[1];
  }
};

// One rank: its process, and the stderr it sends through a pipe (ranks other than 0).
struct Child {
  int rank = 0;
  pid_t pid = -1;
  int err_pipe = -1;       // read end; -1 once closed
  std::string partial;     // the stderr line being assembled
  std::optional<RankExit> exit;
};

// In the child, after fork(): async-signal-safe calls only. Reports exec's errno through status_fd.
[[noreturn]] void exec_child(const char* path, char* const* argv, char* const* envp, pid_t parent,
                             const sigset_t& mask, int in_fd, int out_fd, int err_fd, int status_fd) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent died before the line above took effect
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  ::dup2(in_fd, 0);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  ::execve(path, argv, envp);
  const int err = errno;
  [[maybe_unused]] ssize_t n = ::write(status_fd, &err, sizeof err);
  ::_exit(127);
}

class Group {
 public:
  Group(const std::vector<ChildCommand>& commands, const ProcessGroupOptions& o) : o_(o), commands_(commands) {}

  ProcessGroupResult run() {
    sigset_t watched, previous;
    sigemptyset(&watched);
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&watched, s);
    TK_CHECK(::sigprocmask(SIG_BLOCK, &watched, &previous) == 0, "process group: sigprocmask failed");
    signal_fd_ = ::signalfd(-1, &watched, SFD_CLOEXEC | SFD_NONBLOCK);
    try {
      TK_CHECK(signal_fd_ >= 0, "process group: signalfd failed: {}", std::strerror(errno));
      for (size_t r = 0; r < commands_.size(); r++) start(int(r), previous);
      loop();
    } catch (...) {
      kill_all(SIGKILL);
      reap_remaining();
      restore(previous);
      throw;
    }
    restore(previous);
    return result();
  }

 private:
  void restore(const sigset_t& previous) {
    if (signal_fd_ >= 0) ::close(signal_fd_);
    for (Child& c : children_)
      if (c.err_pipe >= 0) ::close(c.err_pipe);
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
  }

  void start(int rank, const sigset_t& child_mask) {
    const ChildCommand& cmd = commands_[size_t(rank)];
    TK_CHECK(!cmd.argv.empty(), "process group: rank {} has no command", rank);
    std::string path = resolve_program(cmd.argv[0]);
    std::vector<std::string> args = cmd.argv;
    std::vector<std::string> env = child_environment(cmd.env);
    std::vector<char*> argv = c_strings(args), envp = c_strings(env);
    const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    TK_CHECK(null_fd >= 0, "process group: cannot open /dev/null: {}", std::strerror(errno));
    std::optional<Pipe> err;
    if (rank > 0) err.emplace();
    Pipe status;
    const int out_fd = rank == 0 ? o_.out_fd : null_fd;
    const int err_fd = rank == 0 ? o_.err_fd : err->write;

    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) exec_child(path.c_str(), argv.data(), envp.data(), parent, child_mask, null_fd, out_fd, err_fd,
                             status.write);
    const int fork_errno = errno;
    ::close(null_fd);
    ::close(status.write);
    if (err) ::close(err->write);
    if (pid < 0) {
      ::close(status.read);
      if (err) ::close(err->read);
      fail("process group: fork failed for rank {}: {}", rank, std::strerror(fork_errno));
    }
    ::setpgid(pid, pid);  // as the child does: whichever runs first, the group exists before any signal is sent

    Child c;
    c.rank = rank;
    c.pid = pid;
    c.err_pipe = err ? err->read : -1;
    int exec_errno = 0;
    ssize_t n;
    do n = ::read(status.read, &exec_errno, sizeof exec_errno);
    while (n < 0 && errno == EINTR);
    ::close(status.read);
    children_.push_back(std::move(c));
    if (n == ssize_t(sizeof exec_errno))
      say(fmt::format("rank {} could not start {}: {}", rank, path, std::strerror(exec_errno)));
  }

  void loop() {
    std::optional<clock::time_point> kill_at, drain_until;
    while (true) {
      if (live() == 0 && !drain_until) drain_until = clock::now() + std::chrono::seconds(1);
      if (drain_until && (open_pipes() == 0 || clock::now() >= *drain_until)) return;
      if (kill_at && clock::now() >= *kill_at) {
        for (Child& c : children_)
          if (!c.exit) {
            say(fmt::format("rank {} (pid {}) did not stop within {} s of SIGTERM: sending SIGKILL", c.rank, c.pid,
                            double(o_.stop_grace.count()) / 1000.0));
            ::killpg(c.pid, SIGKILL);
          }
        kill_at.reset();
      }
      std::optional<clock::time_point> wake = kill_at ? kill_at : drain_until;
      int timeout_ms = -1;
      if (wake)
        timeout_ms = int(std::max<int64_t>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(*wake - clock::now()).count() + 1));

      std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
      for (Child& c : children_)
        if (c.err_pipe >= 0) fds.push_back({c.err_pipe, POLLIN, 0});
      const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
      TK_CHECK(ready >= 0 || errno == EINTR, "process group: poll failed: {}", std::strerror(errno));
      if (ready <= 0) continue;
      if (fds[0].revents & POLLIN) {
        if (on_signals() && !kill_at) kill_at = clock::now() + o_.stop_grace;
      }
      for (size_t i = 1; i < fds.size(); i++)
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_stderr(fds[i].fd);
    }
  }

  // Handles the signals queued on the signalfd. Returns true when a rank's failure has just started the stop.
  bool on_signals() {
    bool stop_now = false;
    signalfd_siginfo si;
    while (::read(signal_fd_, &si, sizeof si) == ssize_t(sizeof si)) {
      const int sig = int(si.ssi_signo);
      if (sig == SIGCHLD) {
        stop_now |= reap();
      } else {
        if (forwarded_ == 0) forwarded_ = sig;
        for (Child& c : children_)
          if (!c.exit) ::killpg(c.pid, sig);
      }
    }
    return stop_now;
  }

  // Collects every rank that has ended. Returns true when one failed of its own accord and the others must stop.
  bool reap() {
    bool stop_now = false;
    for (Child& c : children_) {
      if (c.exit) continue;
      int status = 0;
      const pid_t p = ::waitpid(c.pid, &status, WNOHANG);
      if (p != c.pid) continue;
      RankExit e;
      e.rank = c.rank;
      e.pid = c.pid;
      e.signaled = WIFSIGNALED(status);
      e.code = e.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
      e.stopped_by_group = stopping_;
      c.exit = e;
      if (!e.failed() || stopping_ || answers_forwarded_signal(e)) continue;
      first_failure_ = c.rank;
      stopping_ = true;
      stop_now = true;
      drain(c);  // its last words before the message about its end
      say(fmt::format("rank {} (pid {}) {}; stopping the other ranks", c.rank, c.pid, e.describe()));
      for (Child& other : children_)
        if (!other.exit) ::killpg(other.pid, SIGTERM);
    }
    return stop_now;
  }

  // After a forwarded signal, a rank ending by it, or with 128 + it (a clean stop), did what it was asked.
  bool answers_forwarded_signal(const RankExit& e) const {
    return forwarded_ != 0 && (e.signaled ? e.code == forwarded_ : e.code == 128 + forwarded_);
  }

  void read_stderr(int fd) {
    Child* c = nullptr;
    for (Child& ch : children_)
      if (ch.err_pipe == fd) c = &ch;
    if (c == nullptr) return;  // drained to its end and closed earlier in this round of poll()
    char buf[65536];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      if (!c->partial.empty()) emit_line(*c, c->partial + "\n");
      c->partial.clear();
      ::close(fd);
      c->err_pipe = -1;
      return;
    }
    c->partial.append(buf, size_t(n));
    size_t start = 0;
    for (size_t nl; (nl = c->partial.find('\n', start)) != std::string::npos; start = nl + 1)
      emit_line(*c, c->partial.substr(start, nl + 1 - start));
    c->partial.erase(0, start);
    if (c->partial.size() > sizeof buf) {  // a line without end: pass it on in pieces
      emit_line(*c, c->partial + "\n");
      c->partial.clear();
    }
  }

  // Reads what the rank's stderr pipe holds now, without waiting for more.
  void drain(Child& c) {
    while (c.err_pipe >= 0) {
      pollfd p{c.err_pipe, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) return;
      read_stderr(c.err_pipe);
    }
  }

  void emit_line(const Child& c, const std::string& line) { write_all(o_.err_fd, fmt::format("[rank {}] {}", c.rank, line)); }
  void say(const std::string& msg) { write_all(o_.err_fd, "tokamak: " + msg + "\n"); }

  void kill_all(int sig) {
    for (Child& c : children_)
      if (!c.exit) ::killpg(c.pid, sig);
  }
  void reap_remaining() {
    for (Child& c : children_)
      if (!c.exit) ::waitpid(c.pid, nullptr, 0);
  }
  int live() const {
    int n = 0;
    for (const Child& c : children_) n += c.exit ? 0 : 1;
    return n;
  }
  int open_pipes() const {
    int n = 0;
    for (const Child& c : children_) n += c.err_pipe >= 0 ? 1 : 0;
    return n;
  }

  ProcessGroupResult result() const {
    ProcessGroupResult r;
    r.failed_rank = first_failure_;
    for (const Child& c : children_) r.ranks.push_back(*c.exit);
    auto status = [](const RankExit& e) { return e.signaled ? 128 + e.code : e.code; };
    if (first_failure_ >= 0) {
      r.exit_code = status(r.ranks[size_t(first_failure_)]);
    } else {
      for (const RankExit& e : r.ranks)
        if (e.failed()) {
          r.exit_code = status(e);
          break;
        }
    }
    return r;
  }

  const ProcessGroupOptions& o_;
  const std::vector<ChildCommand>& commands_;
  std::vector<Child> children_;
  int signal_fd_ = -1;
  int forwarded_ = 0;  // the first signal forwarded to the ranks (0: none)
  bool stopping_ = false;
  int first_failure_ = -1;
};

}  // namespace

ProcessGroupResult run_process_group(const std::vector<ChildCommand>& ranks, const ProcessGroupOptions& options) {
  TK_CHECK(!ranks.empty(), "process group: no ranks to run");
  return Group(ranks, options).run();
}

}  // namespace tk::dist
