// A training run's directory (`tokamak train --out`) and the rules for the files a run keeps there:
//   config.json   the resolved recipe, the model and the device, written before step 1
//   log.jsonl     one JSON record per step and per validation (run_log.h)
//   memory.json   the memory table after the first step
//   step_N/       the checkpoints (checkpoint.h), each written in .tmp-step_N/ and renamed whole
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

  // A fresh run needs a directory holding no other run, unless `overwrite` allows replacing it.
  void check_free(bool overwrite) const;
  // Removes the old run's files (only those: other files stay) and creates the directory.
  void clear() const;
  // A run resumed in place from `step`: checkpoints after it belong to another history, which the run would
  // mix with its own; deleted with `overwrite`, otherwise a tk::Error.
  void drop_checkpoints_after(int64_t step, bool overwrite) const;

  void write_config(const nlohmann::ordered_json& config) const;
  void write_memory_table(const nlohmann::ordered_json& table) const;

 private:
  std::string path_;
};

}  // namespace tk
