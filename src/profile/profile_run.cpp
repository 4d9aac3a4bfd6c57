// The profile run: the ceilings first (before the model takes the memory), then the trainer's steps on
// ProfilingOps with a loader that notes its waits; warm-up steps are run and dropped, measured steps
// resolved into op spans after each step (so the timing never synchronises inside one), then summed
// (profile_report.cpp) and advised on (profile_advice.cpp). On many ranks every rank runs the steps alike and rank
// 0 reports.
#include "profile/profile_run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/fs.h"
#include "ops/device_info.h"
#include "plan/memory_plan.h"
#include "plan/metrics.h"
#include "plan/recipe.h"
#include "profile/profile_advice.h"

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
  if (gpu) {
    const std::optional<GpuMemory> m = gpu_memory();
    return m ? double(m->free_bytes) : 0.0;
  }
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  double kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
  std::fclose(f);
  return kib * 1024;
}

bool has_fp8_tensor_cores(bool gpu) {
  const std::optional<GpuInfo> g = gpu ? current_gpu() : std::nullopt;
  return g && g->fp8_tensor_cores();
}

// Runs the steps and turns each measured one into spans on its timeline.
class StepRunner {
 public:
  StepRunner(const TrainConfig& cfg, bool print_progress, dist::Communicator* comm)
      : print_(print_progress), rank_(comm ? comm->rank() : 0) {
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
    steps_ = std::make_unique<Trainer>(cfg, comm, std::move(hooks));
    steps_->start_steps();
    if (print_) steps_->print_plan();
  }

  const Trainer& steps() const { return *steps_; }

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
    const RankStepTimes* mine = r.communication.empty() ? nullptr : &r.communication.ranks[size_t(rank_)];
    if (print_) {
      fmt::print("profile: {} | {:.2f} ms | data wait {:.2f} ms{} | loss {:.4f}\n", label, r.seconds * 1e3,
                 r.metrics.data_wait_s * 1e3, mine ? " | " + format_step_communication(*mine) : "", r.loss);
      std::fflush(stdout);
    }
    if (!measured) return std::nullopt;
    MeasuredStep m;
    m.wall_ms = r.seconds * 1e3;
    m.data_wait_ms = r.metrics.data_wait_s * 1e3;
    if (mine) m.communication_ms = (mine->comm_exposed_s + mine->comm_host_s) * 1e3;
    m.communication = r.communication;
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
  int rank_;
  ProfilingOps* ops_ = nullptr;
  WaitRecordingLoader* loader_ = nullptr;
  std::unique_ptr<Trainer> steps_;
  std::optional<Clock::time_point> first_measured_;
};

}  // namespace

std::optional<ProfileReport> run_profile(const ProfileOptions& o, dist::Communicator* comm) {
  TK_CHECK(o.warmup_steps >= 0, "--warmup-steps must be 0 or more, not {}", o.warmup_steps);
  TK_CHECK(o.measure_steps >= 1, "--measure-steps must be 1 or more, not {}", o.measure_steps);
  TrainConfig cfg = o.train;
  cfg.steps = std::max<int64_t>(cfg.steps, o.warmup_steps + o.measure_steps);  // the LR schedule covers every step
  const bool gpu = backend_is_gpu(cfg.device);
  const DeviceInfo device = describe_device(gpu, cfg.peak_tflops * 1e12);

  const bool reports = comm == nullptr || comm->rank() == 0;
  ProfileReport rep;
  if (reports) rep.ceilings = o.ceilings ? *o.ceilings : find_ceilings(cfg.device, device.name, gpu);
  if (comm) {
    // The other ranks wait here while rank 0 measures, so that their set-up (CPU ranks share the host) does not
    // disturb its ceilings.
    const char here = 1;
    std::vector<char> all(size_t(comm->world_size()));
    comm->host_all_gather(&here, all.data(), 1);
  }
  StepRunner runner(cfg, o.print_progress, comm);
  for (int i = 1; i <= o.warmup_steps; i++) runner.run(fmt::format("warm-up step {}/{}", i, o.warmup_steps), false);
  // The clock over the measured steps: a GPU at its power or temperature limit runs every kernel slower.
  std::optional<ClockSampler> clocks;
  if (gpu && reports) clocks.emplace().start();
  for (int i = 1; i <= o.measure_steps; i++)
    rep.measured.push_back(*runner.run(fmt::format("measured step {}/{}", i, o.measure_steps), true));
  if (!reports) return std::nullopt;
  if (clocks) rep.clocks = clocks->stop();

  const Trainer& steps = runner.steps();
  const TrainConfig& c = steps.config();
  const Recipe& recipe = steps.recipe();  // what the steps ran
  const ThroughputModel& tm = steps.throughput();
  rep.device = tm.device().name;
  rep.backend = gpu ? "cuda" : "cpu";
  rep.model = steps.model().config().name;
  rep.data_dir = c.data;
  rep.mount_type = fs::mount_type(c.data);
  rep.steps = o.measure_steps;
  rep.micro_batch = recipe.batch;
  rep.seq = recipe.seq;
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
  if (comm) rep.communication = ProfileCommunication{comm->name(), recipe.zero_stage, summarize_communication(rep.measured)};

  AdviceInputs in;
  in.totals = rep.totals;
  in.ops = rep.ops;
  in.ceilings = rep.ceilings;
  in.gpu = gpu;
  in.fp8_tensor_cores = has_fp8_tensor_cores(gpu);
  const MatmulPrecision& precision = recipe.backend.precision;
  in.fp8 = precision.fp8;
  in.fp8_delayed = precision.delayed_fp8();
  in.fp8_lm_head = precision.fp8_lm_head();
  in.lm_head_fp8_shape = recipe.lm_head_fp8_shapes();
  in.lm_head_cast_bytes = rep.accumulation_steps * fp8_lm_head_cast_bytes(recipe.model, double(recipe.micro_tokens()),
                                                                          in.fp8_delayed);
  in.micro_batch = recipe.batch;
  in.seq = recipe.seq;
  in.vocab_size = steps.model().config().vocab_size;
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
  in.communication = rep.communication;
  in.clocks = rep.clocks;
  rep.advice = rank_advice(in);
  rep.largest_share = largest_share(in);
  return rep;
}

}  // namespace tk
