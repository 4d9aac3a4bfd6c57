// Reading a run directory for the report: the log line by line, the JSON files whole, each leniently.
#include "report/run_files.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/fs.h"

namespace tk::report {
namespace {

namespace stdfs = std::filesystem;
using json = nlohmann::json;

StepLine step_line(const json& j) {
  StepLine s;
  s.step = j["step"].get<int64_t>();
  s.loss = number(j, "loss");
  s.lr = number(j, "lr");
  s.grad_norm = number(j, "grad_norm");
  s.clip_scale = number(j, "clip_scale");
  s.tokens = number(j, "tokens");
  s.step_time_s = number(j, "step_time_s");
  s.tokens_per_s = number(j, "tokens_per_s");
  s.flops_per_s = number(j, "flops_per_s");
  s.mfu = number(j, "mfu");
  s.hfu = number(j, "hfu");
  s.data_wait_s = number(j, "data_wait_s");
  s.memory_bytes = number(j, "memory_bytes");
  s.time = number(j, "time");
  s.elapsed_s = number(j, "elapsed_s");
  s.comm_s = number(j, "comm_s");
  s.comm_exposed_s = number(j, "comm_exposed_s");
  s.comm_host_s = number(j, "comm_host_s");
  s.comm_max_s = number(j, "comm_max_s");
  s.comm_max_rank = number(j, "comm_max_rank");
  s.comm_exposed_max_s = number(j, "comm_exposed_max_s");
  s.comm_exposed_max_rank = number(j, "comm_exposed_max_rank");
  s.data_wait_max_s = number(j, "data_wait_max_s");
  s.data_wait_max_rank = number(j, "data_wait_max_rank");
  s.sm_clock_mhz = number(j, "sm_clock_mhz");
  s.power_w = number(j, "power_w");
  if (const json& by = child(j, "clock_held_back_by"); by.is_string()) s.clock_held_back_by = by.get<std::string>();
  if (const json& by_rank = child(j, "data_wait_by_rank_s"); by_rank.is_array())
    for (const json& v : by_rank) s.data_wait_by_rank_s.push_back(v.is_number() ? v.get<double>() : kMissing);
  return s;
}

bool is_true(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

ValLine val_line(const json& j) {
  ValLine v;
  v.step = j["step"].get<int64_t>();
  v.val_loss = number(j, "val_loss");
  v.val_tokens = number(j, "val_tokens");
  v.time = number(j, "time");
  return v;
}

// The file as JSON, or null with a note when it is absent or not JSON.
json read_optional_json(const stdfs::path& path, const std::string& absent_note, std::vector<std::string>& notes) {
  if (!stdfs::exists(path)) {
    if (!absent_note.empty()) notes.push_back(absent_note);
    return nullptr;
  }
  json j = parse_json_lenient(fs::read_file(path.string()));
  if (j.is_discarded() || !j.is_object()) {
    notes.push_back(fmt::format("{} is not a JSON object: its section is left out.", path.filename().string()));
    return nullptr;
  }
  return j;
}

}  // namespace

double number(const json& j, const char* key) {
  if (!j.is_object()) return kMissing;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : kMissing;
}

std::string text(const json& j, const char* key, const std::string& fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

const json& child(const json& j, const char* key) {
  static const json null_value;
  if (!j.is_object()) return null_value;
  auto it = j.find(key);
  return it != j.end() ? *it : null_value;
}

json parse_json_lenient(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_discarded()) return j;
  // Outside strings, the bare words NaN, Infinity and -Infinity become null.
  std::string fixed;
  fixed.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); i++) {
    const char c = text[i];
    if (in_string) {
      fixed += c;
      if (c == '\\' && i + 1 < text.size()) fixed += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (std::string_view word : {"-Infinity", "Infinity", "NaN"}) {
      if (text.substr(i, word.size()) == word) {
        fixed += "null";
        i += word.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) fixed += c;
  }
  return json::parse(fixed, nullptr, false);
}

RunHistory parse_run_history(std::string_view text) {
  RunHistory h;
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    const bool complete = end != std::string_view::npos;
    const std::string_view line = text.substr(pos, complete ? end - pos : std::string_view::npos);
    pos = complete ? end + 1 : text.size();
    line_no++;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const json j = parse_json_lenient(line);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
      h.notes.push_back(complete ? fmt::format("Line {} of log.jsonl is not a log record: it was skipped.", line_no)
                                 : fmt::format("The last line of log.jsonl (line {}) is incomplete, as a run leaves it "
                                               "while writing it: it was skipped.",
                                               line_no));
      continue;
    }
    if (is_true(j, "diverged"))
      h.diverged = DivergedLine{j["step"].get<int64_t>(), number(j, "loss"), number(j, "grad_norm")};
    else if (j.contains("val_loss"))
      h.vals.push_back(val_line(j));
    else if (j.contains("loss"))
      h.steps.push_back(step_line(j));
  }
  return h;
}

RunFiles read_run_files(const std::string& run_dir) {
  TK_CHECK(stdfs::is_directory(run_dir), "{} is not a directory: give the run directory of `tokamak train` (its --out)",
           run_dir);
  const stdfs::path dir(run_dir);
  TK_CHECK(stdfs::exists(dir / "log.jsonl"),
           "{} has no log.jsonl: it is not the run directory of `tokamak train` (its --out), or the run has not "
           "started logging yet",
           run_dir);
  RunFiles r;
  r.dir = run_dir;
  r.history = parse_run_history(fs::read_file((dir / "log.jsonl").string()));
  r.notes = r.history.notes;
  if (r.history.steps.empty()) r.notes.push_back("log.jsonl holds no step yet: the charts are empty.");
  r.config = read_optional_json(dir / "config.json", "config.json is missing: the model and device are not known.",
                                r.notes);
  r.memory = read_optional_json(dir / "memory.json", "", r.notes);
  r.profile = read_optional_json(dir / "profile.json", "", r.notes);
  return r;
}

}  // namespace tk::report
