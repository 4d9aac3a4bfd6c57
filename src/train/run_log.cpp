// The log's records, field by field in the order readers see them, and the file they go to: a record
// is one write(2) of a whole line (no buffer that could write half of it later), and a failed one is an
// error with the path and the cause in the message.
#include "train/run_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/fs.h"

namespace tk {
namespace {

using json = nlohmann::ordered_json;

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json number_or_null(double v) { return v >= 0 && std::isfinite(v) ? json(v) : json(nullptr); }
json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// A data-parallel step's fields: the slowest rank's data wait and every rank's, then rank 0's communication and the
// most any rank had, each with the rank.
void add_communication(json& j, const StepCommunication& c) {
  const RankPeak wait = c.peak(&RankStepTimes::data_wait_s);
  j["data_wait_max_s"] = wait.seconds;
  j["data_wait_max_rank"] = wait.rank;
  json& by_rank = j["data_wait_by_rank_s"] = json::array();
  for (const RankStepTimes& t : c.ranks) by_rank.push_back(t.data_wait_s);
  const RankStepTimes& first = c.ranks.front();
  j["comm_s"] = first.comm_s;
  j["comm_exposed_s"] = first.comm_exposed_s;
  j["comm_host_s"] = first.comm_host_s;
  j["comm_collectives"] = first.collectives;
  const RankPeak comm = c.peak(&RankStepTimes::comm_s), exposed = c.peak(&RankStepTimes::comm_exposed_s);
  j["comm_max_s"] = comm.seconds;
  j["comm_max_rank"] = comm.rank;
  j["comm_exposed_max_s"] = exposed.seconds;
  j["comm_exposed_max_rank"] = exposed.rank;
}

}  // namespace

RunLog::RunLog(const std::string& path, const std::string& tensorboard_dir) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot open {} for writing: {}", path, fs::error_cause(errno));
  if (!tensorboard_dir.empty()) events_ = std::make_unique<EventFileWriter>(tensorboard_dir);
}

RunLog::~RunLog() { ::close(fd_); }

void RunLog::write(const json& record) {
  const std::string line = record.dump() + "\n";
  for (size_t done = 0; done < line.size();) {
    const ssize_t w = ::write(fd_, line.data() + done, line.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("cannot write to {}: {}", path_, fs::error_cause(w < 0 ? errno : ENOSPC));
    done += size_t(w);
  }
  if (!events_) return;
  Scalars scalars;
  for (const auto& [name, value] : record.items())
    if (value.is_number() && name != "step" && name != "time") scalars.emplace_back(name, value.get<double>());
  events_->scalars(record["time"].get<double>(), record["step"].get<int64_t>(), scalars);
}

std::string tensorboard_dir(const std::string& flag, const std::string& run_dir) {
  return flag.empty() ? run_dir : flag == "none" ? "" : flag;
}

void RunLog::step(const StepRecord& r, double elapsed_s) {
  const StepMetrics& m = r.metrics;
  json j;
  j["step"] = r.step;
  j["loss"] = r.loss;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;
  j["clip_scale"] = r.clip_scale;
  j["tokens"] = r.tokens_seen;
  j["trained_tokens"] = r.trained_tokens;
  j["step_time_s"] = r.seconds;
  j["tokens_per_s"] = m.tokens_per_s;
  j["flops_per_s"] = m.achieved_flops;
  j["mfu"] = number_or_null(m.mfu);
  j["hfu"] = number_or_null(m.hfu);
  j["data_wait_s"] = m.data_wait_s;
  if (!r.communication.empty()) add_communication(j, r.communication);
  j["memory_bytes"] = m.memory_bytes;
  add_clock_fields(j, r.clocks);
  j["time"] = unix_time();
  j["elapsed_s"] = elapsed_s;
  write(j);
}

void RunLog::validation(int64_t step, const LossSum& loss, double seconds) {
  json j;
  j["step"] = step;
  j["val_loss"] = loss.mean();
  j["val_tokens"] = loss.count;
  j["val_time_s"] = seconds;
  j["time"] = unix_time();
  write(j);
}

void RunLog::diverged(int64_t step, double loss, double lr, double grad_norm, double elapsed_s) {
  json j;
  j["step"] = step;
  j["loss"] = finite_or_null(loss);
  j["lr"] = lr;
  j["grad_norm"] = finite_or_null(grad_norm);
  j["diverged"] = true;
  j["time"] = unix_time();
  j["elapsed_s"] = elapsed_s;
  write(j);
}

void truncate_run_log(const std::string& path, int64_t step) {
  if (!std::filesystem::exists(path)) return;
  std::istringstream in(fs::read_file(path));
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("step", int64_t(0)) <= step) kept += line + "\n";
  }
  fs::write_file_atomic(path, kept);
}

}  // namespace tk
