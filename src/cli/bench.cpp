// `tokamak bench`: the throughput of full training steps (forward, backward, AdamW) of a model
// shape on random tokens, with no data loading: what the GPU itself reaches, comparable with the
// PyTorch peer's benchmark (same shapes, same FLOP count, JSON row with the same fields).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>

#include "backend/backend.h"
#include "cli/command.h"
#include "cli/conventions.h"
#include "cli/step_options.h"
#include "core/format.h"
#include "core/log.h"
#include "model/model.h"
#include "ops/gpu_clocks.h"
#include "optim/optimizer.h"
#include "plan/machine_fit.h"
#include "plan/memory_plan.h"
#include "plan/metrics.h"
#include "plan/precision_choice.h"
#include "plan/recipe.h"
#include "plan/step_options.h"
#include "train/run_log.h"

namespace {

// The step's options are train's (cli/step_options.h), with its defaults but for the seed; the speed table's rows and
// the PyTorch peer's are measured at 8 x 2048 (bench/run.sh passes it).
struct BenchArgs {
  tk::StepOptions step = [] {
    tk::StepOptions o;
    o.seed = 1;
    return o;
  }();
  int steps = 10, warmup = 3;
  bool json = false;
};

// Four steps' worth of micro-batches of uniform random tokens, cycled (as the peer does), each row one document.
// The tokens are drawn in one sequence, so a step of `accumulation` micro-batches of B rows holds the rows one
// micro-batch of accumulation x B would.
std::vector<tk::OwnedBatch> random_batches(int B, int T, int accumulation, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<tk::OwnedBatch> batches;
  for (int i = 0; i < 4 * accumulation; i++) {
    std::vector<int32_t> tokens(size_t(B) * (T + 1));
    for (auto& t : tokens) t = tok(rng);
    batches.emplace_back(B, T, tokens);
  }
  return batches;
}

// What the row's engine name adds to the precision for a setting other than bench's plain one.
std::string setting_suffix(const tk::Recipe& r, const tk::StepOptions& o) {
  std::string s;
  if (!o.memory_budget.empty()) s += fmt::format(", within {}", tk::format_bytes(tk::parse_bytes(o.memory_budget)));
  if (r.accumulation > 1) s += fmt::format(", {} x {} rows", r.accumulation, r.batch);
  if (r.recompute.any()) s += ", recompute " + r.recompute.describe();
  if (r.optimizer.offload) s += ", offload " + r.offload_name();
  if (o.logits_chunk_mib > 0 || !o.memory_budget.empty())
    s += fmt::format(", logits chunk {} MiB", r.logits_chunk_bytes() >> 20);
  return s;
}

int run_bench(const BenchArgs& b) {
  const tk::StepOptions& o = b.step;
  using clock = std::chrono::steady_clock;
  // With -v, how long each part of the setting up took (a row's wall time beyond its steps).
  clock::time_point phase_start = clock::now();
  auto phase_done = [&](const char* what) {
    const clock::time_point now = clock::now();
    tk::log::debug("bench: {} in {:.2f} s", what, std::chrono::duration<double>(now - phase_start).count());
    phase_start = now;
  };
  tk::ModelConfig cfg = tk::ModelConfig::resolve(o.model);
  if (o.vocab_size > 0) cfg.vocab_size = o.vocab_size;
  tk::Backend be = tk::make_backend(o.device);
  phase_done("the backend made");
  tk::Recipe recipe = tk::make_recipe(o, cfg, be.gpu, be.gpu ? tk::current_gpu() : std::nullopt);
  if (!recipe.precision_note.empty()) fmt::print(stderr, "{}\n", recipe.precision_note);
  const tk::PlanTarget target = tk::running_plan_target(be, o.peak_tflops);
  if (!o.memory_budget.empty()) {
    std::string line;
    recipe = tk::fit_memory_budget(recipe, o, target, line).recipe;
    fmt::print(stderr, "{}\n", line);
  }
  // As train does: a setting larger than the machine is refused before anything is allocated.
  tk::refuse_plan_larger_than(cfg, tk::plan_memory(recipe, target), tk::machine_memory(be.gpu));
  const bool fp8 = recipe.backend.precision.fp8, fp8_lm_head = recipe.backend.precision.fp8_lm_head();
  const size_t mem_before = tk::memory_in_use_bytes(be.gpu);
  tk::configure_backend(*be.ops, recipe.backend);
  const std::unique_ptr<tk::Model> model = tk::make_model(recipe, *be.ops);
  phase_done("the model made");
  model->init_params(o.seed);
  be.ops->synchronize();
  phase_done("its parameters drawn");
  tk::AdamW opt(*model, recipe.adamw_options());
  const int accumulation = recipe.accumulation;
  const std::vector<tk::OwnedBatch> batches =
      random_batches(recipe.batch, o.seq, accumulation, cfg.vocab_size, o.seed + 1);
  const int64_t tokens = recipe.micro_tokens() * accumulation;
  const float grad_scale = float(1.0 / double(tokens));

  double loss = 0;
  auto step = [&](int i) {
    model->zero_grads();
    tk::LossSum sum;
    for (int k = 0; k < accumulation; k++) {
      const tk::LossSum l = model->forward_backward(batches[size_t((i % 4) * accumulation + k)].batch(), grad_scale);
      sum.sum += l.sum;
      sum.count += l.count;
    }
    loss = sum.mean();
    opt.step(1e-4);
  };
  phase_done("the optimizer and the batches made");
  auto t0 = clock::now();
  for (int i = 0; i < b.warmup; i++) step(i);
  be.ops->synchronize();
  const double warm_s = std::chrono::duration<double>(clock::now() - t0).count();
  if (const std::string tuning = tk::gemm_tuning_summary(*be.ops); !tuning.empty()) fmt::print(stderr, "{}\n", tuning);
  size_t mem_peak = tk::memory_in_use_bytes(be.gpu);
  const int64_t recasts_before = fp8 ? tk::fp8_recasts(*be.ops) : -1;
  std::optional<tk::ClockSampler> clocks;  // the GPU's clock over the timed steps (the power limit lowers it)
  if (be.gpu) clocks.emplace().start();
  t0 = clock::now();
  for (int i = 0; i < b.steps; i++) step(i);
  be.ops->synchronize();
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  const tk::ClockSummary clock_summary = clocks ? clocks->stop() : tk::ClockSummary{};
  mem_peak = std::max(mem_peak, tk::memory_in_use_bytes(be.gpu));
  // The timed steps' recasts: delayed scaling's guards casting a saturated operand again (each step's are counted
  // by the commit at its optimizer step).
  const int64_t recasts = recasts_before >= 0 ? tk::fp8_recasts(*be.ops) - recasts_before : -1;

  tk::ThroughputModel tm(cfg, o.seq, tk::describe_device(be.gpu, o.peak_tflops * 1e12), recipe.recompute.flops_per_token(cfg, o.seq));
  tk::StepMetrics m = tm.measure(tokens * b.steps, secs, 0);
  const double mem_gib = double(be.gpu ? mem_peak - mem_before : mem_peak) / double(1ull << 30);
  nlohmann::json row = {{"config", o.model},
                        {"engine", !fp8 ? "tokamak" : o.fp8_scaling == "current" ? "tokamak fp8 current" : "tokamak fp8"},
                        {"device", tm.device().name},
                        {"params", cfg.total_params()},
                        {"tokens_per_step", tokens},
                        {"step_ms", std::round(secs / b.steps * 1e5) / 100},
                        {"tok_s", std::llround(m.tokens_per_s)},
                        {"tflops", std::round(m.achieved_flops / 1e11) / 10},
                        {"gflops", std::round(m.achieved_flops / 1e7) / 100},  // a CPU's rate, which TFLOP/s rounds to 0
                        {"mfu", m.mfu < 0 ? nlohmann::json() : nlohmann::json(std::round(m.mfu * 1000) / 1000)},
                        {"peak_mem_gib", std::round(mem_gib * 10) / 10},
                        {"warm_s", std::round(warm_s * 10) / 10},
                        {"loss", std::round(loss * 1e6) / 1e6}};
  if (fp8 && o.fp8_scaling == "delayed" && recasts >= 0) row["fp8_recasts"] = recasts;
  if (fp8_lm_head) row["engine"] = row["engine"].get<std::string>() + " + LM head";
  row["engine"] = row["engine"].get<std::string>() + setting_suffix(recipe, o);
  row["micro_batch"] = recipe.batch;
  row["accumulation"] = accumulation;
  row["recompute"] = recipe.recompute.describe();
  row["offload"] = recipe.offload_name();
  if (be.gpu) row["logits_chunk_mib"] = recipe.logits_chunk_bytes() >> 20;
  if (!o.memory_budget.empty()) row["memory_budget_gib"] = std::round(tk::parse_bytes(o.memory_budget) / double(1ull << 30) * 10) / 10;
  row["hfu"] = m.hfu < 0 ? nlohmann::json() : nlohmann::json(std::round(m.hfu * 1000) / 1000);
  tk::add_clock_fields(row, clock_summary);
  if (b.json) {
    fmt::print("{}\n", row.dump());
  } else {
    fmt::print("{}{}{} on {}: {:.1f} ms/step, {:.0f} tok/s, {}, MFU {}, memory {:.1f} GiB, loss {:.3f}\n",
               o.model, !fp8 ? "" : fp8_lm_head ? " (FP8 linears and LM head)" : " (FP8 linears)",
               setting_suffix(recipe, o), tm.device().name, secs / b.steps * 1e3, m.tokens_per_s, tk::format_flop_rate(m.achieved_flops),
               m.mfu < 0 ? std::string("n/a (") + tm.peak_description() + ")" : fmt::format("{:.1f}%", m.mfu * 100), mem_gib,
               loss);
    if (row.contains("fp8_recasts"))
      fmt::print("FP8 casts done again by their guards (saturated): {} over {} timed steps\n", recasts, b.steps);
    if (!clock_summary.empty()) fmt::print("GPU clock over the timed steps: {}\n", tk::describe_clocks(clock_summary));
  }
  return 0;
}

void add_options(CLI::App& app, BenchArgs& b) {
  tk::cli::add_step_options(app, b.step);
  tk::cli::refuse_step_options(app, {"--data", "--tokenizer", "--zero"}, "bench",
                               "it times one process's steps on random tokens");
  const std::string group = "Timing";
  app.add_option("--steps", b.steps, "Timed steps")->check(CLI::PositiveNumber)->capture_default_str()->group(group);
  app.add_option("--warmup", b.warmup, "Untimed steps first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(group);
  app.add_flag("--json", b.json, "Print one JSON row (the peer benchmark's fields)")->group(group);
}

tk::cli::Command bench_cmd("bench", "Time full training steps of a model shape on random tokens (no data loading)",
                           [](CLI::App& app) -> tk::cli::Runner {
                             auto o = std::make_shared<BenchArgs>();
                             add_options(app, *o);
                             return [o] {
                               tk::cli::require_valid(o->step);
                               return run_bench(*o);
                             };
                           });

}  // namespace
