// The profile run: the ceilings first (before the model takes the memory), then the trainer's steps on
// ProfilingOps with a loader that notes its waits; warm-up steps are run and dropped, measured steps
// resolved into op spans after each step (so the timing never synchronises inside one), then the
// summaries, profile.json, the Chrome trace and the terminal table.
#include "train/profile_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/fs.h"
#include "train/backend.h"
#include "train/memory_plan.h"
#include "train/metrics.h"
#include "train/profile_advice.h"

#ifdef TK_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace tk {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The loader the steps read from, noting when each next() started and ended (the trace's data waits).
class WaitRecordingLoader final : public DataLoader {
 public:
  using Span = std::pair<Clock::time_point, Clock::time_point>;
  explicit WaitRecordingLoader(std::unique_ptr<DataLoader> inner) : inner_(std::move(inner)) {}

  const Batch& next() override {
    const Clock::time_point start = Clock::now();
    const Batch& b = inner_->next();
    waits_.emplace_back(start, Clock::now());
    return b;
  }
  double take_wait_seconds() override { return inner_->take_wait_seconds(); }
  nlohmann::json state() const override { return inner_->state(); }
  void restore(const nlohmann::json& state) override { inner_->restore(state); }
  int64_t batches_per_epoch() const override { return inner_->batches_per_epoch(); }
  int64_t tokens_in_split() const override { return inner_->tokens_in_split(); }
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  uint64_t tokenizer_fingerprint() const override { return inner_->tokenizer_fingerprint(); }

  std::vector<Span> take_waits() { return std::exchange(waits_, {}); }

 private:
  std::unique_ptr<DataLoader> inner_;
  std::vector<Span> waits_;
};

std::string describe_shape(const Tensor& t) {
  if (t.ndim == 0) return "";
  std::string s = fmt::format("{}[", dtype_name(t.dtype));
  for (int i = 0; i < t.ndim; i++) s += fmt::format("{}{}", i ? ", " : "", t.shape[i]);
  return s + "]";
}

std::string describe_op(const OpRecord& r) {
  const std::string in = describe_shape(r.in), out = describe_shape(r.out);
  if (in.empty() || out.empty()) return in + out;
  return in + " -> " + out;
}

// Memory free for more activations: on the GPU as the driver reports it, else the kernel's MemAvailable.
double free_memory_bytes(bool gpu) {
#ifdef TK_HAVE_CUDA
  if (gpu) {
    size_t free_b = 0, total_b = 0;
    return cudaMemGetInfo(&free_b, &total_b) == cudaSuccess ? double(free_b) : 0.0;
  }
#endif
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  double kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
  std::fclose(f);
  return kib * 1024;
}

// FP8 tensor cores arrived with compute capability 8.9 (Ada) and 9.0 (Hopper).
bool has_fp8_tensor_cores(bool gpu) {
#ifdef TK_HAVE_CUDA
  cudaDeviceProp p{};
  int dev = 0;
  if (gpu && cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess)
    return p.major * 10 + p.minor >= 89;
#endif
  return false;
}

// Runs the steps and turns each measured one into spans on its timeline.
class StepRunner {
 public:
  StepRunner(const TrainConfig& cfg, bool print_progress) : print_(print_progress) {
    StepHooks hooks;
    hooks.wrap_ops = [this](std::unique_ptr<Ops> ops) {
      auto p = std::make_unique<ProfilingOps>(std::move(ops));
      ops_ = p.get();
      return std::unique_ptr<Ops>(std::move(p));
    };
    hooks.wrap_loader = [this](std::unique_ptr<DataLoader> loader) {
      auto p = std::make_unique<WaitRecordingLoader>(std::move(loader));
      loader_ = p.get();
      return std::unique_ptr<DataLoader>(std::move(p));
    };
    steps_ = std::make_unique<TrainingSteps>(cfg, std::move(hooks));
    if (print_) steps_->print_plan();
  }

  const TrainingSteps& steps() const { return *steps_; }

  // One step; returned resolved when measured.
  std::optional<MeasuredStep> run(const std::string& label, bool measured) {
    ops_->clear_records();
    loader_->take_waits();
    const Clock::time_point host_start = Clock::now();
    if (!first_measured_ && measured) first_measured_ = host_start;
    ops_->range_push(label.c_str());
    const int64_t begin = ops_->timing_mark();
    const StepRecord r = steps_->next_step();
    const int64_t end = ops_->timing_mark();
    ops_->range_pop();
    if (print_) {
      fmt::print("profile: {} | {:.2f} ms | data wait {:.2f} ms | loss {:.4f}\n", label, r.seconds * 1e3,
                 r.metrics.data_wait_s * 1e3, r.loss);
      std::fflush(stdout);
    }
    if (!measured) return std::nullopt;
    MeasuredStep m;
    m.wall_ms = r.seconds * 1e3;
    m.data_wait_ms = r.metrics.data_wait_s * 1e3;
    m.timeline_ms = ops_->timing_elapsed_ms(begin, end);
    m.host_start_us = ms_between(*first_measured_, host_start) * 1e3;
    for (const OpRecord& rec : ops_->records()) {
      TraceSpan s;
      s.name = rec.name;
      s.detail = describe_op(rec);
      s.category = rec.category;
      s.recompute = rec.recompute;
      s.start_ms = ops_->timing_elapsed_ms(begin, rec.begin);
      s.dur_ms = ops_->timing_elapsed_ms(rec.begin, rec.end);
      s.flops = rec.cost.flops;
      s.bytes = rec.cost.bytes;
      m.ops.push_back(std::move(s));
    }
    for (const auto& [a, b] : loader_->take_waits()) {
      TraceSpan s;
      s.name = "data wait";
      s.start_ms = ms_between(host_start, a);
      s.dur_ms = ms_between(a, b);
      m.waits.push_back(std::move(s));
    }
    return m;
  }

 private:
  bool print_;
  ProfilingOps* ops_ = nullptr;
  WaitRecordingLoader* loader_ = nullptr;
  std::unique_ptr<TrainingSteps> steps_;
  std::optional<Clock::time_point> first_measured_;
};

json number_or_null(double v) { return v >= 0 && std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace

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
    // disagree, the shorter bounds the gaps and the difference is left unexplained.
    const double gaps = std::max(0.0, std::min(m.timeline_ms, m.wall_ms) - kernels - m.data_wait_ms);
    t.step_ms += m.wall_ms;
    t.kernels_ms += kernels;
    t.data_wait_ms += m.data_wait_ms;
    t.gaps_ms += gaps;
    t.unexplained_ms += m.wall_ms - kernels - m.data_wait_ms - gaps;
  }
  const double n = std::max<double>(1, double(steps.size()));
  t.step_ms /= n;
  t.kernels_ms /= n;
  t.data_wait_ms /= n;
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

ProfileReport run_profile(const ProfileOptions& o) {
  TK_CHECK(o.warmup_steps >= 0, "--warmup-steps must be 0 or more, not {}", o.warmup_steps);
  TK_CHECK(o.measure_steps >= 1, "--measure-steps must be 1 or more, not {}", o.measure_steps);
  TrainConfig cfg = o.train;
  cfg.steps = std::max<int64_t>(cfg.steps, o.warmup_steps + o.measure_steps);  // the LR schedule covers every step
  const bool gpu = backend_is_gpu(cfg.device);
  const DeviceInfo device = describe_device(gpu, cfg.peak_tflops * 1e12);

  ProfileReport rep;
  rep.ceilings = o.ceilings ? *o.ceilings : find_ceilings(cfg.device, device.name, gpu);
  StepRunner runner(cfg, o.print_progress);
  for (int i = 1; i <= o.warmup_steps; i++) runner.run(fmt::format("warm-up step {}/{}", i, o.warmup_steps), false);
  for (int i = 1; i <= o.measure_steps; i++)
    rep.measured.push_back(*runner.run(fmt::format("measured step {}/{}", i, o.measure_steps), true));

  const TrainingSteps& steps = runner.steps();
  const TrainConfig& c = steps.config();
  const ThroughputModel& tm = steps.throughput();
  rep.device = tm.device().name;
  rep.backend = gpu ? "cuda" : "cpu";
  rep.model = steps.model().config().name;
  rep.data_dir = c.data;
  rep.mount_type = fs::mount_type(c.data);
  rep.steps = o.measure_steps;
  rep.micro_batch = c.batch;
  rep.seq = c.seq;
  rep.accumulation_steps = steps.accumulation_steps();
  rep.tokens_per_step = steps.tokens_per_step();
  rep.peak_tflops = tm.device().peak_flops / 1e12;

  double wall_s = 0, wait_s = 0;
  for (const MeasuredStep& m : rep.measured) {
    wall_s += m.wall_ms * 1e-3;
    wait_s += m.data_wait_ms * 1e-3;
  }
  // The trainer's own arithmetic over the measured steps: the MFU a train log shows for them.
  const StepMetrics metrics = tm.measure(rep.tokens_per_step * rep.steps, wall_s, wait_s);
  rep.tokens_per_s = metrics.tokens_per_s;
  rep.mfu = metrics.mfu;
  rep.hfu = metrics.hfu;

  const double step_ms = wall_s * 1e3 / rep.steps;
  rep.ops = summarize_ops(rep.measured, step_ms, rep.ceilings);
  const double recompute_flops =
      (tm.hardware_flops_per_token() - tm.model_flops_per_token()) * double(rep.tokens_per_step);
  rep.totals = summarize_step(rep.measured, recompute_flops, rep.ops);

  AdviceInputs in;
  in.totals = rep.totals;
  in.ops = rep.ops;
  in.ceilings = rep.ceilings;
  in.gpu = gpu;
  in.fp8_tensor_cores = has_fp8_tensor_cores(gpu);
  in.fp8 = c.fp8;
  in.fp8_delayed = c.fp8 && c.fp8_scaling == "delayed";
  in.fp8_lm_head = c.fp8 && c.fp8_lm_head;
  in.lm_head_fp8_shape = fp8_lm_head_applies(steps.model().config(), int64_t(c.batch) * c.seq);
  in.lm_head_cast_bytes = rep.accumulation_steps * fp8_lm_head_cast_bytes(steps.model().config(),
                                                                          double(c.batch) * c.seq, in.fp8_delayed);
  in.micro_batch = c.batch;
  in.seq = c.seq;
  in.accumulation_steps = rep.accumulation_steps;
  in.data_dir = c.data;
  in.mount_type = rep.mount_type;
  in.free_memory_bytes = free_memory_bytes(gpu);
  in.activation_bytes = double(steps.model().activation_bytes());
  {
    const Model& m = steps.model();
    ModelOptions keep = m.options();
    keep.recompute = Recompute();
    double now = 0, all = 0;
    const DType act = m.ops().act_dtype(), grad = m.ops().grad_dtype();
    for (const auto& [label, bytes] : model_memory(m.config(), m.options(), act, grad)) now += double(bytes);
    for (const auto& [label, bytes] : model_memory(m.config(), keep, act, grad)) all += double(bytes);
    in.recompute = m.options().recompute.describe();
    in.recompute_saved_bytes = all - now;
  }
  rep.advice = rank_advice(in);
  return rep;
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
  j["peak_tflops"] = r.peak_tflops;
  j["ceilings"] = {{"matmul_tflops", r.ceilings.matmul_flops / 1e12},
                   {"copy_gbps", r.ceilings.copy_bytes_per_s / 1e9},
                   {"source", r.ceilings.source}};
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
                   {"bound", o.compute_bound ? "compute" : "memory"}});
  j["ops"] = ops;
  j["totals"] = {{"kernels_ms", r.totals.kernels_ms},
                 {"gaps_ms", r.totals.gaps_ms},
                 {"data_wait_ms", r.totals.data_wait_ms},
                 {"recompute_ms", r.totals.recompute_ms},
                 {"unexplained_ms", r.totals.unexplained_ms}};
  json advice = json::array();
  for (const Advice& a : r.advice) advice.push_back(
        {{"title", a.title}, {"payoff_pct", a.payoff_pct}, {"detail", a.detail}, {"actionable", a.actionable}});
  j["advice"] = advice;
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
    span(fmt::format("step {}", i + 1), "step", 1, 1, m.host_start_us, m.wall_ms * 1e3,
         {{"data_wait_ms", m.data_wait_ms}, {"timeline_ms", m.timeline_ms}});
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
  std::string out = fmt::format("\nprofile of {} on {} ({}): {} measured steps of {} tokens ({} x {} x {} micro-batches)\n",
                                r.model, r.device, r.backend, r.steps, r.tokens_per_step, r.micro_batch, r.seq,
                                r.accumulation_steps);
  out += fmt::format("step {:.2f} ms | {:.0f} tokens/s | ", t.step_ms, r.tokens_per_s);
  out += r.mfu >= 0 ? fmt::format("MFU {:.1f}% HFU {:.1f}% of {:.1f} TFLOP/s\n", 100 * r.mfu, 100 * r.hfu, r.peak_tflops)
                    : std::string("no MFU (no peak rate known for this device: --peak-tflops gives one)\n");
  const std::string unit = gpu ? "TFLOP/s" : "GFLOP/s";
  const double scale = gpu ? 1.0 : 1e3;  // OpRow::tflops to the unit shown
  out += fmt::format("ceilings: matmul {:.2f} {}, copy {:.1f} GB/s ({})\n\n", r.ceilings.matmul_flops / 1e12 * scale,
                     unit, r.ceilings.copy_bytes_per_s / 1e9, r.ceilings.source);
  out += fmt::format("{:<26} {:<10} {:>7} {:>10} {:>7} {:>10} {:>10} {:>9} {:>9} {:>8}  {}\n", "op", "category",
                     "calls", "ms", "share", "GFLOP", "MB", unit, "GB/s", "ceiling", "bound");
  for (const OpRow& o : r.ops)
    out += fmt::format("{:<26} {:<10} {:>7.0f} {:>10.3f} {:>6.1f}% {:>10.3f} {:>10.2f} {:>9.2f} {:>9.2f} {:>7.1f}%  {}\n",
                       o.name, category_name(o.category), o.calls, o.ms, 100 * o.share, o.flops / 1e9, o.bytes / 1e6,
                       o.tflops * scale, o.gbps, 100 * o.ceiling_share, o.compute_bound ? "compute" : "memory");
  auto total = [&](const char* what, double ms) {
    out += fmt::format("{:<45} {:>10.3f} {:>6.1f}%\n", what, ms, t.step_ms > 0 ? 100 * ms / t.step_ms : 0.0);
  };
  out += "\n";
  total("ops (kernels)", t.kernels_ms);
  total("host/launch gaps", t.gaps_ms);
  total("data wait", t.data_wait_ms);
  total("unexplained", t.unexplained_ms);
  total("step (wall)", t.step_ms);
  if (t.recompute_ms > 0) total("  of the ops: recompute", t.recompute_ms);
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
