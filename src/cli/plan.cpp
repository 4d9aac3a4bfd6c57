// `tokamak plan`: what a training run of a model needs on the device, component by component, and the
// fastest micro-batch, recompute policy, offload and (for a named card) precision that fit a memory budget or the
// card's memory, with predicted tokens/s and what bounds it; on N GPUs, per ZeRO stage. Runs without a GPU: it
// computes the plan, it allocates nothing.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/conventions.h"
#include "cli/step_options.h"
#include "core/format.h"
#include "core/log.h"
#include "plan/gpu_specs.h"
#include "plan/memory_plan.h"
#include "plan/metrics.h"
#include "plan/precision_choice.h"
#include "plan/recipe.h"
#include "plan/step_options.h"
#include "plan/zero_plan.h"
#include "train/model_source.h"

namespace {

// The step's options are train's (cli/step_options.h) with the device defaulting to cuda, not train's auto: a plan is
// for a GPU run, made on any machine. The card defaults to the H100 SXM with no budget; naming one (--gpu) plans for
// its memory, its rates and, unless a precision is given, the faster of bf16 and FP8 where it has FP8.
struct PlanArgs {
  tk::StepOptions step = [] {
    tk::StepOptions o;
    o.device = "cuda";
    return o;
  }();
  std::string gpu = "H100 SXM", host_memory;
  std::string interconnect;  // "": the card's own link
  int gpus = 1;
  double efficiency = tk::PlanTarget{}.matmul_efficiency, attention_fwd = tk::PlanTarget{}.attention_forward_efficiency,
         attention_bwd = tk::PlanTarget{}.attention_backward_efficiency, bandwidth_gbs = 0, host_gbs = 0;
  double link_gbs = 0;
  bool json = false, all = false;
  bool gpu_given = false, precision_given = false;
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
  j["precision"] = tk::precision_name(r);
  j["world_size"] = r.world_size;
  j["zero_stage"] = r.zero_stage;
  if (r.gpu) j["logits_chunk_bytes"] = double(r.logits_chunk_bytes());
  j["total_bytes"] = p.total_bytes;
  j["host_bytes"] = p.host_bytes;
  j["fits"] = p.fits(budget, target);
  j["predicted_tokens_per_s"] = r.gpu ? nlohmann::ordered_json(p.predicted_tokens_per_s) : nullptr;
  j["communication_bytes_per_step"] = p.communication.bytes;
  j["communication_s_per_step"] = p.communication.seconds;
  j["exposed_communication_s_per_step"] = p.communication.exposed_seconds;
  j["seconds_per_token"] = {{"matmul", p.time.matmul},       {"memory", p.time.memory},
                            {"optimizer", p.time.optimizer}, {"offload", p.time.offload},
                            {"communication", p.time.communication}};
  j["rows"] = nlohmann::ordered_json::array();
  for (const tk::PlanRow& row : p.rows)
    j["rows"].push_back({{"component", row.component}, {"bytes", row.bytes}, {"exact", row.exact}, {"host", row.host}});
  return j;
}

// The card --gpu names, or a usage error listing the cards whose names begin with it (or all of them).
const tk::GpuSpec& find_card(const std::string& text) {
  const tk::GpuLookup found = tk::find_gpu_spec(text);
  if (found.card) return *found.card;
  std::string names;
  for (const tk::GpuSpec* g : found.candidates) names += fmt::format("{}\"{}\"", names.empty() ? "" : ", ", g->name);
  if (found.candidates.size() > 1)
    tk::cli::usage_error("--gpu \"{}\" names several GPUs: {}; give one of them", text, names);
  if (!found.candidates.empty())
    tk::cli::usage_error("--gpu \"{}\" is no GPU's whole name: did you mean {}? (a card tokamak does not know is "
                         "never planned as another)",
                         text, names);
  for (const tk::GpuSpec& g : tk::gpu_specs()) names += fmt::format("{}\"{}\"", names.empty() ? "" : ", ", g.name);
  tk::cli::usage_error("--gpu \"{}\" is not a GPU tokamak knows; the GPUs are {}", text, names);
}

// The recipe the flags describe: train's for the same flags on the card, with the micro-batch at its largest. The
// precision is the flags' (auto's line printed, predicted for this recipe on `target`), unless `search` leaves it to
// the candidates.
tk::Recipe plan_recipe(const PlanArgs& f, const tk::ModelConfig& cfg, const tk::GpuSpec& card,
                       const tk::PlanTarget& target, bool search) {
  const bool gpu = f.step.device != "cpu";
  const tk::GpuInfo device{card.name, card.sms, card.cc_major, card.cc_minor, size_t(card.memory_gib * (1ull << 30))};
  tk::StepOptions o = f.step;
  if (search) {  // bf16 here; the candidates add FP8 with these settings
    o.precision = "bf16";
    o.fp8 = o.fp8_lm_head = false;
  }
  tk::Recipe r = tk::make_recipe(o, cfg, gpu, device, f.gpus);
  if (!search && gpu && !o.fp8 && o.precision == "auto")  // auto's line for the recipe itself, as the table plans it
    r.backend.precision = tk::resolve_precision(o.precision, o.fp8, o.fp8_scaling, o.fp8_margin, o.fp8_lm_head,
                                                device, r, target, r.precision_note);
  TK_CHECK(!r.backend.precision.fp8 || card.fp8_tensor_cores(),
           "the {} (compute capability {}) has no FP8 tensor cores: FP8 cannot run there", card.name,
           card.compute_capability());
  return r;
}

tk::PlanTarget plan_target(const PlanArgs& f, const tk::GpuSpec& card, bool gpu) {
  tk::PlanTarget target = tk::plan_target_for(card);
  target.matmul_efficiency = f.efficiency;
  target.attention_forward_efficiency = f.attention_fwd;
  target.attention_backward_efficiency = f.attention_bwd;
  if (f.bandwidth_gbs > 0) target.bandwidth = f.bandwidth_gbs * 1e9;
  if (f.host_gbs > 0) target.host_bandwidth = f.host_gbs * 1e9;
  target.host_memory_limit = f.host_memory.empty() ? tk::local_host_memory_limit() : tk::parse_bytes(f.host_memory);
  target.host_memory_limit_given = !f.host_memory.empty();
  if (f.link_gbs > 0) target.link_bandwidth = f.link_gbs * 1e9;
  else if (!f.interconnect.empty()) target.link_bandwidth = tk::interconnect_bandwidth(f.interconnect);
  if (!gpu) target.own_attention_sms = 0;
  return target;
}

// One stage's plan: the fastest setting that fits the budget (an error naming why none does), or the recipe as given.
struct StagePlan {
  int stage = 0;
  std::optional<tk::MemoryPlan> plan;
  std::string refusal;
};
StagePlan plan_stage(tk::Recipe r, int stage, int64_t global, double budget, const tk::PlanTarget& target) {
  r.zero_stage = stage;
  if (budget <= 0) return {stage, tk::plan_memory(r, target), ""};
  try {
    return {stage, tk::choose_plan(r, global, budget, target), ""};
  } catch (const tk::Error& e) {
    return {stage, std::nullopt, e.what()};
  }
}

// A plan's tokens/s in a table: "-" for the CPU, which the speed model does not describe.
std::string tokens_per_s(const tk::MemoryPlan& p) {
  return p.recipe.gpu ? fmt::format("{:.0f}", p.predicted_tokens_per_s) : "-";
}

void print_settings_tried(const std::vector<tk::MemoryPlan>& all, double budget, const tk::PlanTarget& target) {
  const bool gpu = !all.empty() && all[0].recipe.gpu;
  fmt::print("\nsettings tried, {}:\n  {:>6} {:>6} {:<26} {:<28} {:<19} {:>10} {:>11} {:>12}  fits\n",
             gpu ? "fastest first" : "in the order tried (the CPU's speed is not predicted)", "B",
             "accum", "precision", "recompute", "offload", "logits", "memory", "tokens/s");
  for (const tk::MemoryPlan& p : all) {
    const tk::Recipe& r = p.recipe;
    const std::string chunk = r.gpu ? tk::format_bytes(double(r.logits_chunk_bytes())) : "-";
    fmt::print("  {:>6} {:>6} {:<26} {:<28} {:<19} {:>10} {:>11} {:>12}  {}\n", r.batch, r.accumulation,
               tk::precision_name(r), r.recompute.describe(), r.offload_name(), chunk, tk::format_bytes(p.total_bytes),
               tokens_per_s(p), budget <= 0 ? "" : (p.fits(budget, target) ? "yes" : "no"));
  }
}

// ZeRO 0-3 side by side: each stage's fastest setting (that fits the budget, when there is one).
void print_stages(const std::vector<StagePlan>& stages, int gpus) {
  auto row = [&](const std::string& label, auto cell) {
    std::string line = fmt::format("  {:<26}", label);
    for (const StagePlan& s : stages) line += fmt::format(" {:>26}", s.plan ? cell(*s.plan) : std::string("-"));
    fmt::print("{}\n", line);
  };
  std::string head = fmt::format("  {:<26}", "ZeRO stage");
  for (const StagePlan& s : stages) head += fmt::format(" {:>26}", s.stage);
  fmt::print("{}\n", head);
  row("memory per GPU", [](const tk::MemoryPlan& p) { return tk::format_bytes(p.total_bytes); });
  row("micro-batch x accumulation",
      [](const tk::MemoryPlan& p) { return fmt::format("{} x {}", p.recipe.batch, p.recipe.accumulation); });
  row("recompute", [](const tk::MemoryPlan& p) { return p.recipe.recompute.describe(); });
  row("offload", [](const tk::MemoryPlan& p) { return p.recipe.offload_name(); });
  row("precision", [](const tk::MemoryPlan& p) { return tk::precision_name(p.recipe); });
  row("moved per GPU per step", [](const tk::MemoryPlan& p) { return tk::format_bytes(p.communication.bytes); });
  row("communication per step",
      [](const tk::MemoryPlan& p) { return fmt::format("{:.1f} ms", p.communication.seconds * 1e3); });
  row("  of it exposed",
      [](const tk::MemoryPlan& p) { return fmt::format("{:.1f} ms", p.communication.exposed_seconds * 1e3); });
  row(fmt::format("tokens/s (all {} GPUs)", gpus),
      [](const tk::MemoryPlan& p) { return tokens_per_s(p); });
  for (const StagePlan& s : stages)
    if (!s.plan) fmt::print("  ZeRO-{}: {}\n", s.stage, s.refusal);
}

// With a budget on many GPUs, the stage train --memory-budget runs (memory_plan.h choose_zero_stage): the fastest that
// fits, the lowest on a tie; none fitting is the search's error.
std::optional<tk::StageChoice> choose_stage(const tk::Recipe& recipe, int zero, int64_t global, double budget,
                                            const tk::PlanTarget& target) {
  if (budget <= 0 || recipe.world_size <= 1) return std::nullopt;
  return tk::choose_zero_stage(tk::zero_stage_recipes(recipe, zero), global, budget, target);
}

void print_json(const tk::ModelConfig& cfg, const tk::GpuSpec& card, const tk::Recipe& recipe,
                const std::vector<StagePlan>& stages, const std::optional<tk::StageChoice>& choice, int64_t global,
                double budget, const tk::PlanTarget& target) {
  nlohmann::ordered_json j;
  j["model"] = cfg.name;
  j["gpu"] = card.name;
  j["budget_bytes"] = budget;
  j["stages"] = nlohmann::ordered_json::array();
  for (const StagePlan& s : stages)
    j["stages"].push_back(s.plan ? to_json(*s.plan, budget, target)
                                 : nlohmann::ordered_json{{"zero_stage", s.stage}, {"refused", s.refusal}});
  if (choice) {
    j["chosen"] = to_json(choice->plan, budget, target);
    j["chosen_because"] = choice->why;
  }
  if (stages.size() == 1) {
    j["chosen"] = to_json(*stages[0].plan, budget, target);
    j["candidates"] = nlohmann::ordered_json::array();
    tk::Recipe base = recipe;
    base.zero_stage = stages[0].stage;
    for (const tk::MemoryPlan& p : tk::plan_candidates(base, global, target))
      j["candidates"].push_back(to_json(p, budget, target));
  }
  fmt::print("{}\n", j.dump(2));
}

void print_card(const tk::GpuSpec& card) {
  fmt::print("{}: {:g} GiB, {:g} GB/s, {:g} TFLOP/s bf16, {}, compute capability {}, {} SMs, PCIe {} x{} (dense "
             "datasheet figures, cited in src/plan/gpu_specs.cpp)\n",
             card.name, card.memory_gib, card.bandwidth_gbs, card.bf16_tflops,
             card.fp8_tensor_cores() ? fmt::format("{:g} TFLOP/s FP8", card.fp8_tflops) : std::string("no FP8"),
             card.compute_capability(), card.sms, card.pcie_gen, card.pcie_lanes);
}

// The setting chosen (one stage's, or the fastest stage's), its memory, its speed and what bounds it.
void print_chosen(const tk::MemoryPlan& chosen, double budget, const tk::PlanTarget& target) {
  fmt::print("precision {}, {}", tk::precision_name(chosen.recipe), tk::format_plan(chosen, budget));
  fmt::print("{}", tk::format_speed(chosen, target));
  if (chosen.recipe.world_size > 1)
    fmt::print("communication per optimizer step (ZeRO-{}): {} per GPU, {:.1f} ms at {:.0f} GB/s, {:.1f} ms exposed\n",
               chosen.recipe.zero_stage, tk::format_bytes(chosen.communication.bytes),
               chosen.communication.seconds * 1e3, target.link_bandwidth / 1e9,
               chosen.communication.exposed_seconds * 1e3);
}

// "budget 15.00 GiB each: 16 GiB less 1.00 GiB for the display and driver, docs/plan.md", or "no budget".
std::string describe_budget(double budget, bool card_budget, const tk::GpuSpec& card, int gpus) {
  if (budget <= 0) return "no budget";
  std::string out = "budget " + tk::format_bytes(budget) + (gpus > 1 ? " each" : "");
  if (card_budget && card.display)
    out += fmt::format(": {:g} GiB less {} for the display and driver, docs/plan.md", card.memory_gib,
                       tk::format_bytes(tk::kDisplayHeadroomBytes));
  return out;
}

// A plan made without a budget that the card it is timed on cannot hold.
void warn_over_the_card(const tk::MemoryPlan& p, const tk::GpuSpec& card) {
  if (p.total_bytes <= card.memory_gib * double(1ull << 30)) return;
  std::fflush(stdout);  // after the table it is about
  const bool many = p.recipe.world_size > 1;
  tk::log::warn("this setting needs {}{}, more than the {}'s {:g} GiB: it would not run there; --memory-budget SIZE or "
                "--gpu \"{}\" finds the fastest setting that fits",
                tk::format_bytes(p.total_bytes), many ? fmt::format(" per GPU (ZeRO-{})", p.recipe.zero_stage) : "",
                card.name, card.memory_gib, card.name);
}

int run(const PlanArgs& f) {
  const tk::StepOptions& o = f.step;
  const tk::GpuSpec& card = find_card(f.gpu);
  tk::ModelConfig cfg = tk::find_model_source(o.model).config;
  if (o.vocab_size > 0) cfg.vocab_size = o.vocab_size;
  const int64_t global = tk::global_batch_tokens(o, f.gpus);
  const bool gpu = o.device != "cpu";
  const bool search = gpu && f.gpu_given && !f.precision_given && !o.fp8;
  tk::PlanTarget target = plan_target(f, card, gpu);
  const tk::Recipe recipe = plan_recipe(f, cfg, card, target, search);
  target.try_fp8 = search && card.fp8_tensor_cores();
  const bool card_budget = o.memory_budget.empty() && f.gpu_given && gpu;
  const double budget = !o.memory_budget.empty() ? tk::parse_bytes(o.memory_budget) : card_budget ? tk::plan_budget_bytes(card) : 0;
  target.choose_logits_chunk = budget > 0 && o.logits_chunk_mib == 0;
  std::vector<StagePlan> stages;
  if (f.gpus > 1 && o.zero < 0)
    for (int k = 0; k <= 3; k++) stages.push_back(plan_stage(recipe, k, global, budget, target));
  else
    stages.push_back(plan_stage(recipe, std::max(o.zero, 0), global, budget, target));
  if (stages.size() == 1 && !stages[0].plan) tk::fail("{}", stages[0].refusal);
  const std::optional<tk::StageChoice> choice = choose_stage(recipe, o.zero, global, budget, target);
  if (f.json) {
    print_json(cfg, card, recipe, stages, choice, global, budget, target);
    return 0;
  }
  if (gpu && f.gpu_given) print_card(card);
  if (!recipe.precision_note.empty()) fmt::print("{}\n", recipe.precision_note);
  fmt::print("{}: {} on {}{} ({}), global batch {} tokens\n", o.model, cfg.name,
             f.gpus > 1 ? fmt::format("{} x ", f.gpus) : "", gpu ? card.name : "the CPU",
             describe_budget(budget, card_budget, card, f.gpus), global);
  const StagePlan* best = nullptr;
  for (const StagePlan& s : stages)
    if (s.plan && (!best || s.plan->predicted_tokens_per_s > best->plan->predicted_tokens_per_s)) best = &s;
  const tk::MemoryPlan& chosen = choice ? choice->plan : *best->plan;
  if (stages.size() > 1) {
    fmt::print("ZeRO stages side by side ({} interconnect, {:.0f} GB/s bus bandwidth):\n",
               f.link_gbs > 0                ? std::string("given")
               : !f.interconnect.empty()     ? f.interconnect
                                             : fmt::format("{}, the {}'s", card.link, card.name),
               target.link_bandwidth / 1e9);
    print_stages(stages, f.gpus);
    if (choice) fmt::print("\nchosen for the budget: ZeRO-{} ({})\n", chosen.recipe.zero_stage, choice->why);
    else fmt::print("\nfastest: ZeRO-{}\n", chosen.recipe.zero_stage);
  } else if (choice) {
    fmt::print("ZeRO-{} on each of {} GPUs ({})\n", chosen.recipe.zero_stage, f.gpus, choice->why);
  }
  print_chosen(chosen, budget, target);
  if (gpu && budget <= 0) warn_over_the_card(chosen, card);
  if (f.all) {
    tk::Recipe base = recipe;
    base.zero_stage = chosen.recipe.zero_stage;
    print_settings_tried(tk::plan_candidates(base, global, target), budget, target);
  }
  return 0;
}

void add_options(CLI::App& app, PlanArgs& f) {
  tk::cli::add_step_options(app, f.step);
  tk::cli::refuse_step_options(app, {"--data", "--tokenizer", "--seed", "--gemm-tuning", "--peak-tflops"}, "plan",
                               "a plan is made from the model's shapes and the card's rates, with no data, no weights "
                               "and no GPU");
  app.get_option("--batch")->description("Largest micro-batch rows to consider (per GPU)");
  app.get_option("--memory-budget")
      ->description("Device memory to fit, e.g. 16GiB (default: the memory of the card --gpu names; without --gpu, "
                    "none: the plan as given)");
  app.get_option("--device")->description("The device of the run planned: cuda (bf16) or cpu (the default is cuda, "
                                          "not train's auto: plans are for GPU runs, and need no GPU to make)");
  app.add_option("--gpu", f.gpu,
                 "The GPU planned for, by its name (case-insensitive, listed below): its memory is the budget (less "
                 "1 GiB on a card that drives displays), its rates time the step, and without --precision the faster "
                 "of bf16 and FP8 is chosen where it has FP8 (the default card is planned with no budget, in the "
                 "given precision)")
      ->capture_default_str();
  app.add_option("--gpus", f.gpus, "Data-parallel GPUs: memory per GPU and the run's tokens/s with communication")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  tk::cli::one_of(app.add_option("--interconnect", f.interconnect,
                                 "The GPUs' link: nvlink (NVLink 4, 360 GB/s bus bandwidth), nvlink5 (720), nvlink3 "
                                 "(240), pcie (gen 4 x16, 25 GB/s), pcie4, or pcie5 (50 GB/s); default: the card's "
                                 "(SXM boards NVLink, others PCIe; docs/plan.md says where the figures come from)"),
                  std::vector<std::string>(std::begin(tk::kInterconnects), std::end(tk::kInterconnects)));
  app.add_option("--link-bandwidth", f.link_gbs,
                 "Measured bus bandwidth between the GPUs in GB/s (replaces --interconnect's)");
  app.add_option("--matmul-efficiency", f.efficiency,
                 "Achieved share of the peak on the GEMMs, for the speed prediction (measured on the H200)")
      ->capture_default_str();
  app.add_option("--attention-efficiency", f.attention_fwd,
                 "Achieved share of the peak in the attention's forward at sequence 2048 (longer sequences run faster: "
                 "2 T / (T + 2048) times this)")
      ->capture_default_str();
  app.add_option("--attention-backward-efficiency", f.attention_bwd,
                 "Achieved share of the peak in the attention's backward at sequence 2048 (scaled as the forward's)")
      ->capture_default_str();
  app.add_option("--bandwidth", f.bandwidth_gbs,
                 "Memory bandwidth the memory-bound ops reach, GB/s (default: the card's datasheet figure x 0.89, the "
                 "share a device copy reached on the H200)");
  app.add_option("--host-bandwidth", f.host_gbs,
                 "GB/s each way between host memory and the GPU (offload; default: by the card's PCIe link, 45 for gen "
                 "5 x16, 22.5 for gen 4 x16)");
  app.add_option("--host-memory", f.host_memory,
                 "Page-locked host memory offload may take, e.g. 100GiB (default: 80% of this machine's memory)");
  app.add_flag("--all", f.all, "List every setting tried");
  app.add_flag("--json", f.json, "Print the plan as JSON");
}

tk::cli::Command plan_cmd("plan",
                          "The memory a training run needs, and the fastest setting that fits a budget or a GPU, on "
                          "one GPU or many (no GPU needed)",
                          [](CLI::App& app) -> tk::cli::Runner {
                            auto f = std::make_shared<PlanArgs>();
                            add_options(app, *f);
                            app.footer("The GPUs --gpu knows (src/train/gpu_specs.cpp): " + tk::gpu_names() + "\n");
                            const CLI::Option* gpu = app.get_option("--gpu");
                            const CLI::Option* precision = app.get_option("--precision");
                            const CLI::Option* fp8 = app.get_option("--fp8");
                            return [f, gpu, precision, fp8] {
                              f->gpu_given = gpu->count() > 0;
                              f->precision_given = precision->count() > 0 || fp8->count() > 0;
                              tk::cli::require_valid(f->step);
                              return run(*f);
                            };
                          });

}  // namespace
