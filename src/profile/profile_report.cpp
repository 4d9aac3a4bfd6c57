// The profile's arithmetic and its three forms: measured steps summed into the per-op table and the
// step's totals (so that ops + gaps + data wait + communication + unexplained = the step) and each rank's
// communication, then profile.json, the Chrome trace and the terminal table.
#include "profile/profile_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "core/format.h"
#include "core/fs.h"

namespace tk {
namespace {

using json = nlohmann::ordered_json;

json number_or_null(double v) { return v >= 0 && std::isfinite(v) ? json(v) : json(nullptr); }

json communication_json(const ProfileCommunication& c) {
  json ranks = json::array();
  for (size_t i = 0; i < c.per_step.ranks.size(); i++) {
    const RankStepTimes& t = c.per_step.ranks[i];
    ranks.push_back({{"rank", i},
                     {"collectives", t.collectives},
                     {"comm_ms", t.comm_s * 1e3},
                     {"comm_exposed_ms", t.comm_exposed_s * 1e3},
                     {"comm_host_ms", t.comm_host_s * 1e3},
                     {"data_wait_ms", t.data_wait_s * 1e3}});
  }
  const RankPeak exposed = c.most_exposed(), slowest = c.slowest_loader();
  return {{"world_size", c.world_size()},
          {"communicator", c.communicator},
          {"zero_stage", c.zero_stage},
          {"ranks", ranks},
          {"most_exposed", {{"rank", exposed.rank}, {"comm_exposed_ms", exposed.seconds * 1e3}}},
          {"slowest_loader", {{"rank", slowest.rank}, {"data_wait_ms", slowest.seconds * 1e3}}}};
}

// Each rank's communication and data wait, per step, and the two ranks that stand out.
std::string format_communication(const ProfileCommunication& c, double step_ms) {
  auto pct = [&](double seconds) { return step_ms > 0 ? 100 * seconds * 1e3 / step_ms : 0.0; };
  std::string out = "\ncommunication and data wait, per step (each rank's mean over the measured steps):\n";
  out += fmt::format("{:>6} {:>11} {:>10} {:>11} {:>15} {:>13}\n", "rank", "collectives", "comm ms", "exposed ms",
                     "host gathers ms", "data wait ms");
  for (size_t i = 0; i < c.per_step.ranks.size(); i++) {
    const RankStepTimes& x = c.per_step.ranks[i];
    out += fmt::format("{:>6} {:>11} {:>10.3f} {:>11.3f} {:>15.3f} {:>13.3f}\n", i, x.collectives, x.comm_s * 1e3,
                       x.comm_exposed_s * 1e3, x.comm_host_s * 1e3, x.data_wait_s * 1e3);
  }
  if (c.world_size() < 2) return out;
  const RankPeak exposed = c.most_exposed(), slowest = c.slowest_loader();
  out += fmt::format("the most exposed communication: rank {}, {:.3f} ms ({:.1f}% of the step); the slowest loader: "
                     "rank {}, {:.3f} ms ({:.1f}%)\n",
                     exposed.rank, exposed.seconds * 1e3, pct(exposed.seconds), slowest.rank, slowest.seconds * 1e3,
                     pct(slowest.seconds));
  return out;
}

}  // namespace

// What the mark of an op faster than its ceiling says (OpRow::above_ceiling).
constexpr const char* kAboveCeilingNote =
    "* faster than the ceiling measured, counted at 100%: the ceiling was measured at another moment of a busy "
    "machine, or the op's bytes stayed in cache; its own rate is as measured\n";

std::vector<OpRow> summarize_ops(const std::vector<MeasuredStep>& steps, double step_ms, const Ceilings& c) {
  std::map<std::string, OpRow> by_name;
  for (const MeasuredStep& m : steps)
    for (const TraceSpan& s : m.ops) {
      OpRow& r = by_name[s.name];
      r.name = s.name;
      r.category = s.category;
      r.calls += 1;
      r.ms += s.dur_ms;
      r.flops += s.flops;
      r.bytes += s.bytes;
    }
  const double n = std::max<double>(1, double(steps.size()));
  // An op whose FLOPs per byte reach the ceilings' ratio would meet the matmul ceiling before the copy one.
  const double ridge = c.copy_bytes_per_s > 0 ? c.matmul_flops / c.copy_bytes_per_s : 0;
  std::vector<OpRow> rows;
  for (auto& [name, r] : by_name) {
    r.calls /= n;
    r.ms /= n;
    r.flops /= n;
    r.bytes /= n;
    r.share = step_ms > 0 ? r.ms / step_ms : 0;
    const double seconds = r.ms * 1e-3;
    r.tflops = seconds > 0 ? r.flops / seconds / 1e12 : 0;
    r.gbps = seconds > 0 ? r.bytes / seconds / 1e9 : 0;
    r.compute_bound = r.bytes > 0 ? r.flops / r.bytes >= ridge : r.flops > 0;
    if (r.compute_bound)
      r.ceiling_share = c.matmul_flops > 0 ? r.tflops * 1e12 / c.matmul_flops : 0;
    else
      r.ceiling_share = c.copy_bytes_per_s > 0 ? r.gbps * 1e9 / c.copy_bytes_per_s : 0;
    r.above_ceiling = r.ceiling_share > 1;
    r.ceiling_share = std::min(r.ceiling_share, 1.0);
    rows.push_back(r);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const OpRow& a, const OpRow& b) { return a.ms > b.ms; });
  return rows;
}

StepTotals summarize_step(const std::vector<MeasuredStep>& steps, double recompute_flops_per_step,
                          const std::vector<OpRow>& ops) {
  StepTotals t;
  double measured_recompute = 0;  // the ops run inside the model's "recompute" range
  for (const MeasuredStep& m : steps) {
    double kernels = 0;
    for (const TraceSpan& s : m.ops) {
      kernels += s.dur_ms;
      if (s.recompute) measured_recompute += s.dur_ms;
    }
    // The timeline runs from a mark before the step to one after it; where it and the host clock
    // disagree, the shorter bounds the gaps and the difference is left unexplained. Exposed communication runs
    // between ops (the host in a collective or gather, or the device's compute queue blocked on one).
    const double outside_ops = m.data_wait_ms + m.communication_ms;
    const double gaps = std::max(0.0, std::min(m.timeline_ms, m.wall_ms) - kernels - outside_ops);
    t.step_ms += m.wall_ms;
    t.kernels_ms += kernels;
    t.data_wait_ms += m.data_wait_ms;
    t.communication_ms += m.communication_ms;
    t.gaps_ms += gaps;
    t.unexplained_ms += m.wall_ms - kernels - outside_ops - gaps;
  }
  const double n = std::max<double>(1, double(steps.size()));
  t.step_ms /= n;
  t.kernels_ms /= n;
  t.data_wait_ms /= n;
  t.communication_ms /= n;
  t.gaps_ms /= n;
  t.unexplained_ms /= n;
  double mm_flops = 0, mm_ms = 0;
  for (const OpRow& r : ops)
    if (r.category == OpCategory::Matmul) {
      mm_flops += r.flops;
      mm_ms += r.ms;
    }
  // Measured when the model marked its recomputation; else estimated from the FLOPs it repeats.
  if (measured_recompute > 0) {
    t.recompute_ms = measured_recompute / n;
  } else if (recompute_flops_per_step > 0 && mm_flops > 0) {
    t.recompute_ms = recompute_flops_per_step / mm_flops * mm_ms;
  }
  return t;
}

StepCommunication summarize_communication(const std::vector<MeasuredStep>& steps) {
  CommunicationSummary sum;
  for (const MeasuredStep& m : steps) sum.add(m.communication, m.wall_ms * 1e-3);
  return sum.per_step();
}

std::string format_clocks(const ClockSummary& c) {
  if (c.empty()) return "";
  std::string out = "clock: " + describe_clocks(c);
  if (c.limit() != ClockLimit::None)
    out += ": every rate below is at that clock (a kernel timed alone, below the limit, runs faster)";
  return out + "\n";
}

json profile_json(const ProfileReport& r) {
  json j;
  j["device"] = r.device;
  j["backend"] = r.backend;
  j["steps"] = r.steps;
  j["step_ms"] = r.totals.step_ms;
  j["tokens_per_step"] = r.tokens_per_step;
  j["tokens_per_s"] = r.tokens_per_s;
  j["mfu"] = number_or_null(r.mfu);
  j["hfu"] = number_or_null(r.hfu);
  j["peak_tflops"] = r.peak_tflops > 0 ? json(r.peak_tflops) : json(nullptr);
  j["ceilings"] = {{"matmul_tflops", r.ceilings.matmul_flops / 1e12},
                   {"copy_gbps", r.ceilings.copy_bytes_per_s / 1e9},
                   {"source", r.ceilings.source}};
  if (!r.clocks.empty()) {
    const ClockSummary& c = r.clocks;
    j["clocks"] = {{"samples", c.samples},
                   {"sm_mhz_mean", c.sm_mhz_mean},
                   {"sm_mhz_min", c.sm_mhz_min},
                   {"sm_mhz_max", c.max_sm_mhz},
                   {"power_w_mean", c.power_w_mean},
                   {"power_limit_w", c.power_limit_w},
                   {"power_capped_share", c.power_capped_share},
                   {"thermal_share", c.thermal_share},
                   {"temperature_c_max", c.temperature_c_max},
                   {"held_back_by", c.held_back_by().empty() ? json(nullptr) : json(c.held_back_by())}};
  }
  json ops = json::array();
  for (const OpRow& o : r.ops)
    ops.push_back({{"name", o.name},
                   {"category", category_name(o.category)},
                   {"calls", o.calls},
                   {"ms", o.ms},
                   {"share", o.share},
                   {"flops", o.flops},
                   {"bytes", o.bytes},
                   {"tflops", o.tflops},
                   {"gbps", o.gbps},
                   {"ceiling_share", o.ceiling_share},
                   {"above_ceiling", o.above_ceiling},
                   {"bound", o.compute_bound ? "compute" : "memory"}});
  j["ops"] = ops;
  j["totals"] = {{"kernels_ms", r.totals.kernels_ms},
                 {"gaps_ms", r.totals.gaps_ms},
                 {"data_wait_ms", r.totals.data_wait_ms},
                 {"communication_ms", r.totals.communication_ms},
                 {"recompute_ms", r.totals.recompute_ms},
                 {"unexplained_ms", r.totals.unexplained_ms}};
  if (r.communication) j["communication"] = communication_json(*r.communication);
  json advice = json::array();
  for (const Advice& a : r.advice) advice.push_back(
        {{"title", a.title}, {"payoff_pct", a.payoff_pct}, {"detail", a.detail}, {"actionable", a.actionable}});
  j["advice"] = advice;
  if (r.largest_share)
    j["largest_share"] = {{"title", r.largest_share->title}, {"share_pct", r.largest_share->payoff_pct},
                          {"detail", r.largest_share->detail}};
  return j;
}

// Process 1 is the host (the steps and the data waits), process 2 the device's compute stream (on the
// CPU: the ops, which run on the calling thread). Times in microseconds from the first measured step.
json trace_json(const ProfileReport& r) {
  json events = json::array();
  auto meta = [&](const char* what, int pid, int tid, const std::string& name) {
    json e = {{"ph", "M"}, {"name", what}, {"pid", pid}};
    if (tid > 0) e["tid"] = tid;
    e["args"] = {{"name", name}};
    events.push_back(e);
  };
  meta("process_name", 1, 0, "host");
  meta("thread_name", 1, 1, "training steps");
  meta("thread_name", 1, 2, "data loader waits");
  meta("process_name", 2, 0, r.backend == "cuda" ? "GPU: " + r.device : "CPU backend");
  meta("thread_name", 2, 1, r.backend == "cuda" ? "compute stream" : "ops");
  auto span = [&](const std::string& name, const char* cat, int pid, int tid, double ts_us, double dur_us, json args) {
    events.push_back({{"name", name}, {"cat", cat}, {"ph", "X"}, {"ts", ts_us}, {"dur", dur_us}, {"pid", pid},
                      {"tid", tid}, {"args", std::move(args)}});
  };
  for (size_t i = 0; i < r.measured.size(); i++) {
    const MeasuredStep& m = r.measured[i];
    json step_args = {{"data_wait_ms", m.data_wait_ms}, {"timeline_ms", m.timeline_ms}};
    if (!m.communication.empty()) step_args["communication_ms"] = m.communication_ms;
    span(fmt::format("step {}", i + 1), "step", 1, 1, m.host_start_us, m.wall_ms * 1e3, std::move(step_args));
    for (const TraceSpan& w : m.waits)
      span(w.name, "data", 1, 2, m.host_start_us + w.start_ms * 1e3, w.dur_ms * 1e3, json::object());
    for (const TraceSpan& s : m.ops)
      span(s.name, category_name(s.category), 2, 1, m.host_start_us + s.start_ms * 1e3, s.dur_ms * 1e3,
           {{"shapes", s.detail}, {"flops", s.flops}, {"bytes", s.bytes}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

std::string format_profile(const ProfileReport& r) {
  const bool gpu = r.backend == "cuda";
  const StepTotals& t = r.totals;
  const std::string ranks =
      r.communication ? fmt::format(" x {} ranks", r.communication->world_size()) : std::string();
  std::string out =
      fmt::format("\nprofile of {} on {} ({}): {} measured steps of {} tokens ({} x {} x {} micro-batches{})\n",
                  r.model, r.device, r.backend, r.steps, r.tokens_per_step, r.micro_batch, r.seq,
                  r.accumulation_steps, ranks);
  if (r.communication)
    out += fmt::format(
        "data parallel over {}, ZeRO {}: the op table and the step's totals are rank 0's (its ops alone are timed)\n",
        r.communication->communicator, r.communication->zero_stage);
  out += fmt::format("step {:.2f} ms | {:.0f} tokens/s | ", t.step_ms, r.tokens_per_s);
  out += r.mfu >= 0 ? fmt::format("MFU {:.1f}% HFU {:.1f}% of {}\n", 100 * r.mfu, 100 * r.hfu,
                                  format_flop_rate(r.peak_tflops * 1e12))
                    : std::string("no MFU (no peak rate known for this device: --peak-tflops gives one)\n");
  const std::string unit = gpu ? "TFLOP/s" : "GFLOP/s";
  const double scale = gpu ? 1.0 : 1e3;  // OpRow::tflops to the unit shown
  out += format_clocks(r.clocks);
  out += fmt::format("ceilings: matmul {:.2f} {}, copy {:.1f} GB/s ({})\n\n", r.ceilings.matmul_flops / 1e12 * scale,
                     unit, r.ceilings.copy_bytes_per_s / 1e9, r.ceilings.source);
  out += fmt::format("{:<26} {:<10} {:>7} {:>10} {:>7} {:>10} {:>10} {:>9} {:>9} {:>8}  {}\n", "op", "category",
                     "calls", "ms", "share", "GFLOP", "MB", unit, "GB/s", "ceiling", "bound");
  bool above = false;
  for (const OpRow& o : r.ops) {
    out += fmt::format("{:<26} {:<10} {:>7.0f} {:>10.3f} {:>6.1f}% {:>10.3f} {:>10.2f} {:>9.2f} {:>9.2f} {:>7.1f}%{} "
                       "{}\n",
                       o.name, category_name(o.category), o.calls, o.ms, 100 * o.share, o.flops / 1e9, o.bytes / 1e6,
                       o.tflops * scale, o.gbps, 100 * o.ceiling_share, o.above_ceiling ? "*" : " ",
                       o.compute_bound ? "compute" : "memory");
    above = above || o.above_ceiling;
  }
  if (above) out += kAboveCeilingNote;
  auto total = [&](const char* what, double ms) {
    out += fmt::format("{:<45} {:>10.3f} {:>6.1f}%\n", what, ms, t.step_ms > 0 ? 100 * ms / t.step_ms : 0.0);
  };
  out += "\n";
  total("ops (kernels)", t.kernels_ms);
  total("host/launch gaps", t.gaps_ms);
  total("data wait", t.data_wait_ms);
  if (r.communication) total("exposed communication and host gathers", t.communication_ms);
  total("unexplained", t.unexplained_ms);
  total("step (wall)", t.step_ms);
  if (t.recompute_ms > 0) total("  of the ops: recompute", t.recompute_ms);
  if (r.communication) out += format_communication(*r.communication, t.step_ms);
  if (r.largest_share)
    out += fmt::format("\nwhere the time goes: {}\n     {}\n", r.largest_share->title, r.largest_share->detail);
  out += "\nadvice, largest payoff first (changes tokamak cannot make yet last):\n";
  if (r.advice.empty()) out += "  nothing stands out: no change is estimated to save 1% of the step\n";
  for (size_t i = 0; i < r.advice.size(); i++)
    out += fmt::format("{:>3}. [{:.1f}% of the step] {}{}\n     {}\n", i + 1, r.advice[i].payoff_pct, r.advice[i].title,
                       r.advice[i].actionable ? "" : " (not available in tokamak yet)", r.advice[i].detail);
  return out;
}

void write_profile(const ProfileReport& r, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("cannot create the profile directory {}: {}", dir, ec.message());
  fs::write_file_atomic((std::filesystem::path(dir) / "profile.json").string(), profile_json(r).dump(2) + "\n");
  fs::write_file_atomic((std::filesystem::path(dir) / "trace.json").string(), trace_json(r).dump() + "\n");
}

}  // namespace tk
