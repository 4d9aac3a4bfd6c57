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

#include "cli/command.h"
#include "cli/conventions.h"
#include "core/checked.h"
#include "core/format.h"
#include "core/log.h"
#include "model/model.h"
#include "ops/backend.h"
#include "ops/gpu_clocks.h"
#include "train/machine_fit.h"
#include "train/memory_plan.h"
#include "train/metrics.h"
#include "train/optimizer.h"
#include "train/precision_choice.h"
#include "train/recipe.h"
#include "train/run_log.h"

namespace {

// The model, device and shape default to train's (the tiny preset, 8 x 256); the speed table's rows and the PyTorch
// peer's are measured at 8 x 2048 (bench/run.sh passes it).
struct BenchOptions {
  std::string model = "tiny";
  std::string device = "auto";
  std::string moments = "f32";
  int batch = 8, seq = 256, steps = 10, warmup = 3;
  int64_t batch_tokens = 0;  // 0: one micro-batch a step
  std::string recompute = "none";
  std::string offload = "none";
  std::string memory_budget;  // "": the setting as given
  int logits_chunk_mib = 0;  // 0: the backend's default
  bool gemm_tuning = true;
  std::string precision = tk::kDefaultPrecision;
  bool fp8 = false;
  std::string fp8_scaling = "delayed";
  int fp8_margin = 1;  // as train's default
  bool fp8_lm_head = false;
  uint64_t seed = 1;
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

// The recipe of the flags: train's (micro-batch, accumulation, precision, recompute, offload, logits chunk), with
// no document mask.
tk::Recipe bench_recipe(const BenchOptions& o, const tk::ModelConfig& cfg, bool gpu) {
  tk::Recipe r;
  r.model = cfg;
  r.gpu = gpu;
  r.batch = o.batch;
  r.seq = o.seq;
  r.accumulation = tk::micro_batches_per_step(o.batch_tokens, o.batch, o.seq);
  r.recompute = tk::Recompute::parse(o.recompute);
  r.optimizer.moments = tk::parse_moments(o.moments);
  r.set_offload(o.offload);
  r.backend.precision = tk::resolve_precision(o.precision, o.fp8, o.fp8_scaling, o.fp8_margin, o.fp8_lm_head,
                                             gpu ? tk::current_gpu() : std::nullopt, cfg, o.batch, o.seq,
                                             r.precision_note);
  r.backend.gemm_tuning = o.gemm_tuning;
  if (o.logits_chunk_mib > 0) r.backend.logits_chunk_bytes = size_t(o.logits_chunk_mib) << 20;
  return r;
}

// --memory-budget: train's search on this device (memory_plan.h choose_plan) for the same tokens a step: the fastest
// micro-batch (at most --batch) with its accumulation, recompute policy, offload and logits chunk (unless
// --logits-chunk fixes it) whose planned memory fits.
tk::Recipe fit_memory_budget(const tk::Recipe& base, const BenchOptions& o, const tk::Backend& be) {
  TK_CHECK(be.gpu, "--memory-budget plans device memory: it needs the CUDA backend (--device cuda)");
  const double budget = tk::parse_bytes(o.memory_budget);
  tk::PlanTarget target = tk::running_plan_target(be);
  target.choose_logits_chunk = o.logits_chunk_mib == 0;
  const tk::MemoryPlan p = tk::choose_plan(base, base.micro_tokens() * base.accumulation, budget, target);
  fmt::print(stderr, "memory budget {}: micro-batch {} x {} with {} accumulation step(s), recompute {}, offload {}, "
             "logits chunk {}; planned {}\n", tk::format_bytes(budget), p.recipe.batch, p.recipe.seq,
             p.recipe.accumulation, p.recipe.recompute.describe(), p.recipe.offload_name(),
             tk::format_bytes(double(p.recipe.logits_chunk_bytes())), tk::format_bytes(p.total_bytes));
  return p.recipe;
}

// What the row's engine name adds to the precision for a setting other than bench's plain one.
std::string setting_suffix(const tk::Recipe& r, const BenchOptions& o) {
  std::string s;
  if (!o.memory_budget.empty()) s += fmt::format(", within {}", tk::format_bytes(tk::parse_bytes(o.memory_budget)));
  if (r.accumulation > 1) s += fmt::format(", {} x {} rows", r.accumulation, r.batch);
  if (r.recompute.any()) s += ", recompute " + r.recompute.describe();
  if (r.optimizer.offload) s += ", offload " + r.offload_name();
  if (o.logits_chunk_mib > 0 || !o.memory_budget.empty())
    s += fmt::format(", logits chunk {} MiB", r.logits_chunk_bytes() >> 20);
  return s;
}

int run_bench(const BenchOptions& o) {
  using clock = std::chrono::steady_clock;
  // With -v, how long each part of the setting up took (a row's wall time beyond its steps).
  clock::time_point phase_start = clock::now();
  auto phase_done = [&](const char* what) {
    const clock::time_point now = clock::now();
    tk::log::debug("bench: {} in {:.2f} s", what, std::chrono::duration<double>(now - phase_start).count());
    phase_start = now;
  };
  tk::ModelConfig cfg = tk::ModelConfig::resolve(o.model);
  tk::Backend be = tk::make_backend(o.device);
  phase_done("the backend made");
  tk::Recipe recipe = bench_recipe(o, cfg, be.gpu);
  if (!o.memory_budget.empty()) recipe = fit_memory_budget(recipe, o, be);
  if (!recipe.precision_note.empty()) fmt::print(stderr, "{}\n", recipe.precision_note);
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
  for (int i = 0; i < o.warmup; i++) step(i);
  be.ops->synchronize();
  const double warm_s = std::chrono::duration<double>(clock::now() - t0).count();
  if (const std::string tuning = tk::gemm_tuning_summary(*be.ops); !tuning.empty()) fmt::print(stderr, "{}\n", tuning);
  size_t mem_peak = tk::memory_in_use_bytes(be.gpu);
  const int64_t recasts_before = fp8 ? tk::fp8_recasts(*be.ops) : -1;
  std::optional<tk::ClockSampler> clocks;  // the GPU's clock over the timed steps (the power limit lowers it)
  if (be.gpu) clocks.emplace().start();
  t0 = clock::now();
  for (int i = 0; i < o.steps; i++) step(i);
  be.ops->synchronize();
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  const tk::ClockSummary clock_summary = clocks ? clocks->stop() : tk::ClockSummary{};
  mem_peak = std::max(mem_peak, tk::memory_in_use_bytes(be.gpu));
  // The timed steps' recasts: delayed scaling's guards casting a saturated operand again (each step's are counted
  // by the commit at its optimizer step).
  const int64_t recasts = recasts_before >= 0 ? tk::fp8_recasts(*be.ops) - recasts_before : -1;

  tk::ThroughputModel tm(cfg, o.seq, tk::describe_device(be.gpu, 0), recipe.recompute.flops_per_token(cfg, o.seq));
  tk::StepMetrics m = tm.measure(tokens * o.steps, secs, 0);
  const double mem_gib = double(be.gpu ? mem_peak - mem_before : mem_peak) / double(1ull << 30);
  nlohmann::json row = {{"config", o.model},
                        {"engine", !fp8 ? "tokamak" : o.fp8_scaling == "current" ? "tokamak fp8 current" : "tokamak fp8"},
                        {"device", tm.device().name},
                        {"params", cfg.total_params()},
                        {"tokens_per_step", tokens},
                        {"step_ms", std::round(secs / o.steps * 1e5) / 100},
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
  if (o.json) {
    fmt::print("{}\n", row.dump());
  } else {
    fmt::print("{}{}{} on {}: {:.1f} ms/step, {:.0f} tok/s, {}, MFU {}, memory {:.1f} GiB, loss {:.3f}\n",
               o.model, !fp8 ? "" : fp8_lm_head ? " (FP8 linears and LM head)" : " (FP8 linears)",
               setting_suffix(recipe, o), tm.device().name, secs / o.steps * 1e3, m.tokens_per_s, tk::format_flop_rate(m.achieved_flops),
               m.mfu < 0 ? std::string("n/a (") + tm.peak_description() + ")" : fmt::format("{:.1f}%", m.mfu * 100), mem_gib,
               loss);
    if (row.contains("fp8_recasts"))
      fmt::print("FP8 casts done again by their guards (saturated): {} over {} timed steps\n", recasts, o.steps);
    if (!clock_summary.empty()) fmt::print("GPU clock over the timed steps: {}\n", tk::describe_clocks(clock_summary));
  }
  return 0;
}

void add_options(CLI::App& app, BenchOptions& o) {
  app.add_option("--model", o.model, "Preset, config.json or HF model directory (as train's)")->capture_default_str();
  tk::cli::one_of(app.add_option("--device", o.device, "Where to run (auto: a CUDA GPU when one is visible, else the CPU)"),
                  {"auto", "cpu", "cuda"})
      ->capture_default_str();
  app.add_option("--batch", o.batch, "Micro-batch rows")->capture_default_str();
  app.add_option("--seq", o.seq, "Sequence length (the speed table and bench/run.sh: 2048)")->capture_default_str();
  app.add_option("--steps", o.steps, "Timed steps")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed steps first")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of weights and tokens")->capture_default_str();
  tk::cli::one_of(app.add_option("--moments", o.moments, "AdamW's m and v (as train's)"), {"f32", "bf16", "int8"})
      ->capture_default_str();
  app.add_option("--batch-tokens", o.batch_tokens,
                 "Tokens a step, a multiple of B*T: accumulation makes up the rest (default: B*T, as train's)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  app.add_option("--recompute", o.recompute, "What the backward recomputes instead of keeping (as train's)")
      ->check(tk::cli::parsed_by([](const std::string& v) { tk::Recompute::parse(v); }))
      ->capture_default_str();
  tk::cli::one_of(app.add_option("--offload", o.offload, "State in host memory (as train's)"),
                  {"none", "optimizer", "optimizer,gradients"})
      ->capture_default_str();
  app.add_option("--memory-budget", o.memory_budget,
                 "Device memory to fit, e.g. 34GiB: the fastest micro-batch (at most --batch), accumulation, "
                 "recompute, offload and logits chunk the planner finds for the same tokens a step (as train's)");
  app.add_option("--logits-chunk", o.logits_chunk_mib, "MiB of the LM head's logits chunk (CUDA; default 512)")
      ->check(CLI::Range(1, 65536));
  tk::cli::add_on_off_flag(app, "gemm-tuning", o.gemm_tuning,
                           "GEMM algorithms chosen by timing, kept in the cache (as train's)");
  CLI::Option* precision = tk::cli::one_of(app.add_option("--precision", o.precision,
                                                          "auto, bf16 or fp8: the matmuls' precision (as train's)"),
                                           {"auto", "bf16", "fp8"})
                               ->capture_default_str();
  app.add_flag("--fp8", o.fp8, "The linear layers' GEMMs in FP8 (as train's): --precision fp8")->excludes(precision);
  app.add_flag("--fp8-lm-head", o.fp8_lm_head, "The LM head's GEMMs in FP8 too (as train's)");
  app.add_option("--fp8-margin", o.fp8_margin, "Delayed scaling's headroom (as train's)")
      ->check(CLI::Range(0, 8))
      ->capture_default_str();
  app.add_option("--fp8-scaling", o.fp8_scaling, "delayed or current (as train's)")
      ->check(CLI::IsMember({"current", "delayed"}))
      ->capture_default_str();
  app.add_flag("--json", o.json, "Print one JSON row (the peer benchmark's fields)");
}

tk::cli::Command bench_cmd("bench", "Time full training steps of a model shape on random tokens (no data loading)",
                           [](CLI::App& app) -> tk::cli::Runner {
                             auto o = std::make_shared<BenchOptions>();
                             add_options(app, *o);
                             return [o] { return run_bench(*o); };
                           });

}  // namespace
