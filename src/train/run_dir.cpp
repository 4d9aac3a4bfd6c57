// What belongs to a run in its directory, by name; replacing a run removes those entries only, and every
// file is written atomically (core/fs.h) so an interrupted run never leaves half a config.
#include "train/run_dir.h"

#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "train/checkpoint.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;

bool is_run_entry(const std::string& name) {
  return name == "config.json" || name == "log.jsonl" || name.rfind("step_", 0) == 0 || name.rfind(".tmp-step_", 0) == 0;
}

std::vector<stdfs::path> run_entries(const std::string& run_dir) {
  std::vector<stdfs::path> out;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(run_dir, ec))
    if (is_run_entry(e.path().filename().string())) out.push_back(e.path());
  return out;
}

std::string file_in(const std::string& dir, const char* name) { return (stdfs::path(dir) / name).string(); }

}  // namespace

std::string RunDir::log_path() const { return file_in(path_, "log.jsonl"); }

void RunDir::check_free(bool overwrite) const {
  if (overwrite || run_entries(path_).empty()) return;
  fail("{} already holds a run ({} checkpoint(s), {}): pass --resume to continue it, --overwrite to replace it, "
       "or choose another --out",
       path_, list_checkpoints(path_).size(), stdfs::exists(log_path()) ? "a log" : "no log");
}

void RunDir::clear() const {
  for (const stdfs::path& p : run_entries(path_)) {
    std::error_code ec;
    stdfs::remove_all(p, ec);
    if (ec) fail("cannot remove {} from the old run: {}", p.string(), ec.message());
  }
  std::error_code ec;
  stdfs::create_directories(path_, ec);
  if (ec) fail("cannot create the run directory {}: {}", path_, ec.message());
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
    std::error_code ec;
    stdfs::remove_all(c, ec);
    if (ec) fail("cannot remove {}: {}", c, ec.message());
  }
}

void RunDir::write_config(const nlohmann::ordered_json& config) const {
  fs::write_file_atomic(file_in(path_, "config.json"), config.dump(2) + "\n");
}

void RunDir::write_memory_table(const nlohmann::ordered_json& table) const {
  fs::write_file_atomic(file_in(path_, "memory.json"), table.dump(2) + "\n");
}

}  // namespace tk
