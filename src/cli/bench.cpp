// `tokamak bench`: the throughput of full training steps (forward, backward, AdamW) of a model
// shape on random tokens, with no data loading: what the GPU itself reaches, comparable with the
// PyTorch peer's benchmark (same shapes, same FLOP count, JSON row with the same fields).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/command.h"
#include "cli/conventions.h"
#include "core/format.h"
#include "core/log.h"
#include "model/model.h"
#include "ops/backend.h"
#include "train/metrics.h"
#include "train/optimizer.h"
#include "train/precision_choice.h"
#include "train/recipe.h"

namespace {

// The model, device and shape default to train's (the tiny preset, 8 x 256); the speed table's rows and the PyTorch
// peer's are measured at 8 x 2048 (bench/run.sh passes it).
struct BenchOptions {
  std::string model = "tiny";
  std::string device = "auto";
  std::string moments = "f32";
  int batch = 8, seq = 256, steps = 10, warmup = 3;
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

// Four batches of uniform random tokens, cycled (as the peer does), each row one document.
std::vector<tk::OwnedBatch> random_batches(int B, int T, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<tk::OwnedBatch> batches;
  for (int i = 0; i < 4; i++) {
    std::vector<int32_t> tokens(size_t(B) * (T + 1));
    for (auto& t : tokens) t = tok(rng);
    batches.emplace_back(B, T, tokens);
  }
  return batches;
}

// The recipe of the flags: train's, with no recompute, no offload and no document mask.
tk::Recipe bench_recipe(const BenchOptions& o, const tk::ModelConfig& cfg, bool gpu) {
  tk::Recipe r;
  r.model = cfg;
  r.gpu = gpu;
  r.batch = o.batch;
  r.seq = o.seq;
  r.optimizer.moments = tk::parse_moments(o.moments);
  r.backend.precision = tk::resolve_precision(o.precision, o.fp8, o.fp8_scaling, o.fp8_margin, o.fp8_lm_head,
                                             gpu ? tk::current_gpu() : std::nullopt, cfg, o.batch, o.seq,
                                             r.precision_note);
  r.backend.gemm_tuning = o.gemm_tuning;
  if (o.logits_chunk_mib > 0) r.backend.logits_chunk_bytes = size_t(o.logits_chunk_mib) << 20;
  return r;
}

int run_bench(const BenchOptions& o) {
  tk::ModelConfig cfg = tk::ModelConfig::resolve(o.model);
  tk::Backend be = tk::make_backend(o.device);
  const tk::Recipe recipe = bench_recipe(o, cfg, be.gpu);
  if (!recipe.precision_note.empty()) fmt::print(stderr, "{}\n", recipe.precision_note);
  const bool fp8 = recipe.backend.precision.fp8, fp8_lm_head = recipe.backend.precision.fp8_lm_head();
  const size_t mem_before = tk::memory_in_use_bytes(be.gpu);
  tk::configure_backend(*be.ops, recipe.backend);
  const std::unique_ptr<tk::Model> model = tk::make_model(recipe, *be.ops);
  model->init_params(o.seed);
  tk::AdamW opt(*model, recipe.adamw_options());
  const std::vector<tk::OwnedBatch> batches = random_batches(o.batch, o.seq, cfg.vocab_size, o.seed + 1);
  const float grad_scale = 1.0f / float(int64_t(o.batch) * o.seq);

  double loss = 0;
  auto step = [&](int i) {
    model->zero_grads();
    loss = model->forward_backward(batches[i % 4].batch(), grad_scale).mean();
    opt.step(1e-4);
  };
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  for (int i = 0; i < o.warmup; i++) step(i);
  be.ops->synchronize();
  const double warm_s = std::chrono::duration<double>(clock::now() - t0).count();
  if (const std::string tuning = tk::gemm_tuning_summary(*be.ops); !tuning.empty()) fmt::print(stderr, "{}\n", tuning);
  size_t mem_peak = tk::memory_in_use_bytes(be.gpu);
  const int64_t recasts_before = fp8 ? tk::fp8_recasts(*be.ops) : -1;
  t0 = clock::now();
  for (int i = 0; i < o.steps; i++) step(i);
  be.ops->synchronize();
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  mem_peak = std::max(mem_peak, tk::memory_in_use_bytes(be.gpu));
  // The timed steps' recasts: delayed scaling's guards casting a saturated operand again (each step's are counted
  // by the commit at its optimizer step).
  const int64_t recasts = recasts_before >= 0 ? tk::fp8_recasts(*be.ops) - recasts_before : -1;

  tk::ThroughputModel tm(cfg, o.seq, tk::describe_device(be.gpu, 0), 0);
  const int64_t tokens = int64_t(o.batch) * o.seq;
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
                        {"loss", std::round(loss * 1000) / 1000}};
  if (fp8 && o.fp8_scaling == "delayed" && recasts >= 0) row["fp8_recasts"] = recasts;
  if (fp8_lm_head) row["engine"] = row["engine"].get<std::string>() + " + LM head";
  if (o.logits_chunk_mib > 0) row["engine"] = row["engine"].get<std::string>() + fmt::format(", logits chunk {} MiB", o.logits_chunk_mib);
  if (o.json) {
    fmt::print("{}\n", row.dump());
  } else {
    fmt::print("{}{} on {}: {:.1f} ms/step, {:.0f} tok/s, {}, MFU {}, memory {:.1f} GiB, loss {:.3f}\n",
               o.model, !fp8 ? "" : fp8_lm_head ? " (FP8 linears and LM head)" : " (FP8 linears)", tm.device().name, secs / o.steps * 1e3, m.tokens_per_s, tk::format_flop_rate(m.achieved_flops),
               m.mfu < 0 ? std::string("n/a (") + tm.peak_description() + ")" : fmt::format("{:.1f}%", m.mfu * 100), mem_gib,
               loss);
    if (row.contains("fp8_recasts"))
      fmt::print("FP8 casts done again by their guards (saturated): {} over {} timed steps\n", recasts, o.steps);
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
