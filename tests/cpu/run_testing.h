// What the trainer's and the run directory's tests share: a prepared dataset of byte tokens, a tiny model's
// config.json, and the built tokamak binary run as a child process (its output in files, waited for or
// signalled), for what only a separate process shows: a lock held by another process, a kill, a file size limit.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/fs.h"
#include "data/prepare.h"
#include "data_testing.h"
#include "model/config.h"
#include "model_testing.h"

extern char** environ;

namespace tk::testing {

// A prepared dataset (train and val splits) of byte tokens, vocab 257, in DIR/data.
inline std::string make_byte_dataset(const TempDir& dir) {
  std::mt19937_64 rng(7);
  for (int d = 0; d < 24; d++) write_text(dir.path("text/doc" + std::to_string(d) + ".txt"), random_document(rng, 120));
  PrepareOptions o;
  o.inputs = {dir.path("text")};
  o.out_dir = dir.path("data");
  o.val_fraction = 0.2;
  o.threads = 1;
  o.progress = false;
  prepare(ByteTokenizer(), o);
  return o.out_dir;
}

inline std::string write_model_config(const TempDir& dir, const ModelConfig& c,
                                      const std::string& name = "model.json") {
  std::string path = dir.path(name);
  fs::write_file_atomic(path, c.to_hf_json().dump(2));
  return path;
}

const std::string kTokamak = std::string(TK_BINARY_DIR) + "/tokamak";

// How a child ended: its exit status, or the signal that ended it.
struct ChildExit {
  bool signaled = false;
  int code = 0;
};

// `tokamak ARGS...` as a child process, stdout and stderr in OUTPUT.out and OUTPUT.err, on one thread (OpenMP,
// OpenBLAS: the runs are tiny and their results the same on any count). file_size_limit > 0 starts it under that
// limit in bytes (what `ulimit -f` sets) with SIGXFSZ at its default, as from a shell, and its stdout to
// /dev/null, which no limit stops.
class TokamakChild {
 public:
  // launcher: a command that runs tokamak itself (e.g. {"mpirun", "-np", "2"}); the arguments then follow kTokamak.
  TokamakChild(const std::vector<std::string>& args, const std::string& output, rlim_t file_size_limit = 0,
               const std::vector<std::string>& launcher = {})
      : output_(output) {
    std::vector<std::string> argv = launcher;
    argv.push_back(kTokamak);
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::vector<std::string> env = {"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "OMP_WAIT_POLICY=passive"};
    for (char** e = environ; *e; e++)
      if (std::string(*e).rfind("OMP_", 0) != 0 && std::string(*e).rfind("OPENBLAS_", 0) != 0) env.push_back(*e);
    std::vector<char*> cenv;
    for (std::string& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    const std::string out = file_size_limit > 0 ? "/dev/null" : output + ".out";
    posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&files, 2, (output + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGXFSZ);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
    rlimit saved{};
    getrlimit(RLIMIT_FSIZE, &saved);
    if (file_size_limit > 0) {  // the child inherits it; the parent has it only while it starts the child
      rlimit limited = saved;
      limited.rlim_cur = file_size_limit;
      setrlimit(RLIMIT_FSIZE, &limited);
    }
    const int rc = posix_spawn(&pid_, cargv[0], &files, &attr, cargv.data(), cenv.data());
    setrlimit(RLIMIT_FSIZE, &saved);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&files);
    if (rc != 0) {
      ADD_FAILURE() << "cannot start " << cargv[0] << ": " << std::strerror(rc);
      pid_ = -1;
    }
  }
  ~TokamakChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  TokamakChild(const TokamakChild&) = delete;
  TokamakChild& operator=(const TokamakChild&) = delete;

  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  ChildExit wait() {
    ChildExit e;
    int status = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &status, 0) != pid_) return {true, -1};
    pid_ = -1;
    e.signaled = WIFSIGNALED(status);
    e.code = e.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
    return e;
  }
  pid_t pid() const { return pid_; }
  std::string err() const { return read_text(output_ + ".err"); }
  std::string out() const { return read_text(output_ + ".out"); }

 private:
  std::string output_;
  pid_t pid_ = -1;
};

// Runs `tokamak ARGS...` to its end.
inline ChildExit run_tokamak(const std::vector<std::string>& args, const std::string& output,
                             std::string* err = nullptr, rlim_t file_size_limit = 0) {
  TokamakChild child(args, output, file_size_limit);
  const ChildExit e = child.wait();
  if (err) *err = child.err();
  return e;
}

}  // namespace tk::testing
