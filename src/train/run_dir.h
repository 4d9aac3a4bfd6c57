// A training run's directory (`tokamak train --out`) and the rules for the files a run keeps there:
//   .lock         held by the one process that writes into the directory (RunDirLock)
//   .tokamak-run  the mark that a run made the directory: --overwrite replaces only such a directory (or one of an
//                 earlier version, which its config.json, a run's, tells), never one that holds other files
//   config.json   the resolved recipe, the model and the device, written before step 1
//   config.toml   the resolved train flags as a config file: `tokamak train --config` repeats the run from it
//   log.jsonl     one JSON record per step and per validation (run_log.h)
//   events.out.tfevents.*  the same numbers for TensorBoard, a file per process that ran (unless --tensorboard
//                 puts them elsewhere or nowhere)
//   memory.json   the memory table after the first step
//   tokenizer/    a copy of the run's tokenizer, which its checkpoints name as ../tokenizer: the run directory holds
//                 what generate and export need, wherever the tokenizer it was trained with goes
//   step_N/       the checkpoints (checkpoint.h), each written in .tmp-step_N/ and renamed whole, deleted
//                 by way of .del-step_N/
// Other files (profile.json and trace.json, report.html) may share the directory; a new run leaves them alone.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace tk {

// Owned by one run from its set-up to its end; touches nothing on disk until asked.
class RunDir {
 public:
  explicit RunDir(std::string path) : path_(std::move(path)) {}

  const std::string& path() const { return path_; }
  std::string log_path() const;

  // A fresh run needs a directory holding no other run, unless `overwrite` allows replacing it; a directory holding
  // files of a run's names (config.json, step_*, ...) that no run made is refused either way.
  void check_free(bool overwrite) const;
  // Whether a run made the directory: it holds the marker, or a run's config.json (runs of earlier versions).
  bool made_by_a_run() const;
  // Removes the old run's files (only those: other files stay), creates the directory and leaves the marker.
  void clear() const;

  static constexpr const char* kMarkerName = ".tokamak-run";
  // Removes what a killed run left half done: checkpoints being saved or deleted, and the temporary files of
  // config.json, memory.json and log.jsonl. Only for the holder of the directory's lock.
  void remove_interrupted_work() const;
  // A run resumed in place from `step`: checkpoints after it belong to another history, which the run would
  // mix with its own; deleted with `overwrite`, otherwise a tk::Error.
  void drop_checkpoints_after(int64_t step, bool overwrite) const;

  // Copies the tokenizer at `path` (its files: Tokenizer::files) into tokenizer/, each file atomically under its own
  // name, and returns what the run's checkpoints record for it, relative to a checkpoint's directory: "../tokenizer",
  // or "../tokenizer/NAME" for a tokenizer named by its file. A `path` that no longer exists is recorded as it is,
  // unless tokenizer/ holds a copy already (a run resumed after its tokenizer moved): that copy is kept. "" stays "".
  std::string keep_tokenizer(const std::string& path) const;

  void write_config(const nlohmann::ordered_json& config) const;
  void write_config_file(const std::string& toml) const;
  void write_memory_table(const nlohmann::ordered_json& table) const;

 private:
  std::string path_;
};

// One writer per run directory: flock(2) on DIR/.lock, taken by `tokamak train` (fresh or resumed) and
// `tokamak profile` before they write anything there, and held until destruction. The kernel releases it
// when its process ends, however it ends, so the lock of a killed run never blocks the next one. The file
// records the holder (pid, host, command line, start time) for the refusal's message only: whether the
// directory is taken is decided by the flock alone, and the record is checked before it is repeated. The lock
// file is a regular file of one name: a symbolic link there is not followed, anything else is refused.
class RunDirLock {
 public:
  // Creates the directory when missing. A tk::Error naming the holder when another process (or another
  // RunDirLock of this one) holds the lock.
  explicit RunDirLock(std::string dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  static constexpr const char* kFileName = ".lock";

 private:
  void open_lock_file();
  void record_holder() const;

  std::string dir_, path_;
  int fd_ = -1;
  bool created_dir_ = false;  // a run that wrote nothing leaves no directory behind
};

}  // namespace tk
