// What the report reads from a run directory: log.jsonl (the trainer's step and validation lines),
// config.json, memory.json and profile.json. Reading forgives what a live or damaged run leaves
// behind (a half-written last line, NaN written as a bare word, a missing file) and notes each thing
// it skipped, so that the page can say so instead of failing.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tk::report {

// One step line of log.jsonl (src/train/trainer.cpp writes them). A value absent, null or not a
// number is NaN.
constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

struct StepLine {
  int64_t step = 0;
  double loss = kMissing, lr = kMissing, grad_norm = kMissing, clip_scale = kMissing;
  double tokens = kMissing;  // tokens seen after this step
  double step_time_s = kMissing, tokens_per_s = kMissing, flops_per_s = kMissing;
  double mfu = kMissing, hfu = kMissing;  // fractions of the device's peak; null on the CPU
  double data_wait_s = kMissing, memory_bytes = kMissing, time = kMissing, elapsed_s = kMissing;
  // A data-parallel run's (docs/distributed.md): rank 0's communication, the most of any rank and that rank, and each
  // rank's data wait in rank order (empty when not logged).
  double comm_s = kMissing, comm_exposed_s = kMissing, comm_host_s = kMissing;
  double comm_max_s = kMissing, comm_max_rank = kMissing, comm_exposed_max_s = kMissing,
         comm_exposed_max_rank = kMissing;
  double data_wait_max_s = kMissing, data_wait_max_rank = kMissing;
  std::vector<double> data_wait_by_rank_s;
  // On a GPU: the SM clock and power over the step, and what held the clock back ("" when nothing or not logged).
  double sm_clock_mhz = kMissing, power_w = kMissing;
  std::string clock_held_back_by;
};

struct ValLine {
  int64_t step = 0;
  double val_loss = kMissing, val_tokens = kMissing, time = kMissing;
};

// The step at which the run diverged (its loss or gradient norm not finite), where the trainer stopped it.
struct DivergedLine {
  int64_t step = 0;
  double loss = kMissing, grad_norm = kMissing;  // the one that was not finite is missing
};

struct RunHistory {
  std::vector<StepLine> steps;
  std::vector<ValLine> vals;
  std::optional<DivergedLine> diverged;  // the last such record of the log
  std::vector<std::string> notes;  // sentences about lines that were skipped
};

// Parses log.jsonl's text; never fails: an unreadable line is skipped with a note.
RunHistory parse_run_history(std::string_view text);

// JSON as Python and JavaScript write it too: bare NaN, Infinity and -Infinity are read as null.
// A discarded value (is_discarded()) when the text is not JSON even so.
nlohmann::json parse_json_lenient(std::string_view text);

struct RunFiles {
  std::string dir;
  RunHistory history;
  nlohmann::json config, memory, profile;  // null when the file is absent or unreadable
  std::vector<std::string> notes;          // the history's notes and those about the other files
};

// Lookups that never throw, for files whose fields may be missing: a number (NaN when absent or not
// a number), a string (`fallback` when absent or not a string), an object member (null when absent).
double number(const nlohmann::json& j, const char* key);
std::string text(const nlohmann::json& j, const char* key, const std::string& fallback = "");
const nlohmann::json& child(const nlohmann::json& j, const char* key);

// Reads RUN_DIR. A tk::Error when it does not exist or holds no log.jsonl.
RunFiles read_run_files(const std::string& run_dir);

}  // namespace tk::report
