// `tokamak plan`: what a training run of a model needs on the device, component by component, and the
// fastest micro-batch and recompute policy that fit a memory budget, with predicted tokens/s. Runs
// without a GPU: it computes the plan, it allocates nothing.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/conventions.h"
#include "core/format.h"
#include "train/memory_plan.h"
#include "train/metrics.h"
#include "train/model_source.h"
#include "train/recipe.h"

namespace {

// The model and shape default to train's (the tiny preset, 8 x 256); the device to cuda, not train's auto: a plan is
// for a GPU run, made on any machine.
struct PlanFlags {
  std::string model = "tiny", budget, device = "cuda", gpu = "NVIDIA H100 80GB HBM3", host_memory;
  std::string moments = "f32";
  int batch = 8, seq = 256;
  int64_t batch_tokens = 0;
  double efficiency = 0.75, attention_fwd = 0.33, attention_bwd = 0.175, bandwidth_gbs = 3350, host_gbs = 45;
  bool json = false, all = false, doc_mask = false, fp8 = false, fp8_lm_head = false;
  std::string fp8_scaling = "delayed";
  int logits_chunk_mib = 0;
};

nlohmann::ordered_json to_json(const tk::MemoryPlan& p, double budget, const tk::PlanTarget& target) {
  const tk::Recipe& r = p.recipe;
  nlohmann::ordered_json j;
  j["micro_batch"] = r.batch;
  j["seq"] = r.seq;
  j["accumulation_steps"] = r.accumulation;
  j["recompute"] = r.recompute.describe();
  j["offload"] = r.offload_name();
  j["moments"] = tk::moments_name(r.optimizer.moments);
  if (r.gpu) j["logits_chunk_bytes"] = double(r.logits_chunk_bytes());
  j["total_bytes"] = p.total_bytes;
  j["host_bytes"] = p.host_bytes;
  j["fits"] = p.fits(budget, target);
  j["predicted_tokens_per_s"] = p.predicted_tokens_per_s;
  j["rows"] = nlohmann::ordered_json::array();
  for (const tk::PlanRow& row : p.rows)
    j["rows"].push_back({{"component", row.component}, {"bytes", row.bytes}, {"exact", row.exact}, {"host", row.host}});
  return j;
}

// The recipe the flags describe: train's for the same flags, with the micro-batch at its largest.
tk::Recipe plan_recipe(const PlanFlags& f, const tk::ModelConfig& cfg, int64_t global) {
  tk::Recipe r;
  r.model = cfg;
  r.gpu = f.device != "cpu";
  r.batch = f.batch;
  r.seq = f.seq;
  r.accumulation = int(global / (int64_t(f.batch) * f.seq));
  r.doc_mask = f.doc_mask;
  r.optimizer.moments = tk::parse_moments(f.moments);
  r.backend.precision = tk::Precision::parse(f.fp8, f.fp8_scaling, 1, f.fp8_lm_head);
  if (f.logits_chunk_mib > 0) r.backend.logits_chunk_bytes = size_t(f.logits_chunk_mib) << 20;
  return r;
}

int run(const PlanFlags& f) {
  const tk::ModelConfig cfg = tk::find_model_source(f.model).config;
  const int64_t global = f.batch_tokens > 0 ? f.batch_tokens : int64_t(f.batch) * f.seq;
  const tk::Recipe recipe = plan_recipe(f, cfg, global);
  tk::PlanTarget target;
  target.peak_flops = tk::gpu_peak_flops(f.gpu);
  if (target.peak_flops <= 0) target.peak_flops = 989e12;
  target.matmul_efficiency = f.efficiency;
  target.attention_forward_efficiency = f.attention_fwd;
  target.attention_backward_efficiency = f.attention_bwd;
  target.bandwidth = f.bandwidth_gbs * 1e9;
  target.host_bandwidth = f.host_gbs * 1e9;
  target.host_memory_limit = f.host_memory.empty() ? tk::local_host_memory_limit() : tk::parse_bytes(f.host_memory);
  target.own_attention_sms = recipe.gpu ? tk::hopper_multiprocessors(f.gpu) : 0;
  const double budget = f.budget.empty() ? 0 : tk::parse_bytes(f.budget);
  target.choose_logits_chunk = budget > 0 && f.logits_chunk_mib == 0;
  const std::vector<tk::MemoryPlan> all = tk::plan_candidates(recipe, global, target);
  const tk::MemoryPlan chosen =
      budget > 0 ? tk::choose_plan(recipe, global, budget, target) : tk::plan_memory(recipe, target);
  if (f.json) {
    nlohmann::ordered_json j;
    j["model"] = cfg.name;
    j["budget_bytes"] = budget;
    j["chosen"] = to_json(chosen, budget, target);
    j["candidates"] = nlohmann::ordered_json::array();
    for (const tk::MemoryPlan& p : all) j["candidates"].push_back(to_json(p, budget, target));
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("{}: {} on {} ({}), global batch {} tokens\n", f.model, cfg.name, recipe.gpu ? f.gpu : "the CPU",
             budget > 0 ? "budget " + tk::format_bytes(budget) : "no budget", global);
  fmt::print("{}", tk::format_plan(chosen, budget));
  if (f.all || budget > 0) {
    fmt::print("\nsettings tried, fastest first:\n  {:>6} {:>6} {:<28} {:<19} {:>10} {:>11} {:>12}  fits\n", "B",
               "accum", "recompute", "offload", "logits", "memory", "tokens/s");
    for (const tk::MemoryPlan& p : all) {
      const tk::Recipe& r = p.recipe;
      const std::string chunk = r.gpu ? tk::format_bytes(double(r.logits_chunk_bytes())) : "-";
      fmt::print("  {:>6} {:>6} {:<28} {:<19} {:>10} {:>11} {:>12.0f}  {}\n", r.batch, r.accumulation,
                 r.recompute.describe(), r.offload_name(), chunk, tk::format_bytes(p.total_bytes),
                 p.predicted_tokens_per_s,
                 budget <= 0 ? "" : (p.fits(budget, target) ? "yes" : "no"));
    }
  }
  return 0;
}

tk::cli::Command plan_cmd("plan", "The memory a training run needs, and the fastest setting that fits a budget (no GPU needed)",
                          [](CLI::App& app) -> tk::cli::Runner {
                            auto f = std::make_shared<PlanFlags>();
                            app.add_option("--model", f->model, "Preset, config.json or HF model directory (as train's)")
                                ->capture_default_str();
                            app.add_option("--batch", f->batch, "Largest micro-batch rows to consider")->capture_default_str();
                            app.add_option("--seq", f->seq, "Sequence length")->capture_default_str();
                            app.add_option("--batch-tokens", f->batch_tokens, "Global batch in tokens (default: batch x seq)");
                            app.add_option("--memory-budget", f->budget, "Device memory to fit, e.g. 16GiB (default: none; the plan as given)");
                            tk::cli::one_of(app.add_option("--device", f->device,
                                                           "The device of the run planned: cuda (bf16) or cpu (the "
                                                           "default is cuda, not train's auto: plans are for GPU runs, "
                                                           "and need no GPU to make)"),
                                            {"cuda", "cpu"})
                                ->capture_default_str();
                            app.add_option("--gpu", f->gpu, "GPU name for the peak FLOP rate")->capture_default_str();
                            app.add_option("--matmul-efficiency", f->efficiency,
                                           "Achieved share of the peak on the GEMMs, for the speed prediction")
                                ->capture_default_str();
                            app.add_option("--attention-efficiency", f->attention_fwd,
                                           "Achieved share of the peak in the attention's forward")
                                ->capture_default_str();
                            app.add_option("--attention-backward-efficiency", f->attention_bwd,
                                           "Achieved share of the peak in the attention's backward")
                                ->capture_default_str();
                            app.add_option("--bandwidth", f->bandwidth_gbs, "Memory bandwidth in GB/s")->capture_default_str();
                            app.add_option("--host-bandwidth", f->host_gbs,
                                           "GB/s each way between host memory and the GPU (offload)")
                                ->capture_default_str();
                            app.add_option("--host-memory", f->host_memory,
                                           "Page-locked host memory offload may take, e.g. 100GiB (default: 80% of "
                                           "this machine's memory)");
                            app.add_flag("--doc-mask", f->doc_mask, "Plan for train --doc-mask (with its attention mask)");
                            app.add_flag("--fp8", f->fp8, "Plan for train --fp8 (with the FP8 copies of the operands)");
                            app.add_flag("--fp8-lm-head", f->fp8_lm_head, "Plan for train --fp8 --fp8-lm-head");
                            app.add_option("--logits-chunk", f->logits_chunk_mib,
                                           "MiB of the LM head's logits chunk as train --logits-chunk (default 512, or "
                                           "chosen with --memory-budget)")
                                ->check(CLI::Range(1, 65536));
                            app.add_option("--fp8-scaling", f->fp8_scaling, "As train --fp8-scaling: delayed or current")
                                ->check(CLI::IsMember({"current", "delayed"}))
                                ->capture_default_str();
                            tk::cli::one_of(app.add_option("--moments", f->moments,
                                           "AdamW's m and v as train --moments: f32, bf16 or int8 (every setting "
                                           "tried keeps it)"),
                                            {"f32", "bf16", "int8"})
                                ->capture_default_str();
                            app.add_flag("--all", f->all, "List every setting tried");
                            app.add_flag("--json", f->json, "Print the plan as JSON");
                            return [f] { return run(*f); };
                          });

}  // namespace
