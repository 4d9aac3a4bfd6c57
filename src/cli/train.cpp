// `tokamak train`: every TrainConfig field as a flag, and as a key of a config file (--config FILE, TOML):
// the file's values over the defaults, the flags given on the command line over the file. With --resume, the
// checkpoint's saved config is the starting point and only the file and the flags given change it, so
// `tokamak train --resume RUN_DIR` alone continues a run exactly.
#include <algorithm>
#include <filesystem>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/conventions.h"
#include "cli/train_options.h"
#include "core/error.h"
#include "train/checkpoint.h"
#include "train/config_file.h"
#include "train/trainer.h"

namespace tk::cli {
namespace {

// A number no smaller than `least` (--help shows the type alone: the text says what the numbers mean).
CLI::Validator at_least(double least) {
  return CLI::Validator(
      [least](std::string& value) {
        double v = 0;
        if (!CLI::detail::lexical_cast(value, v)) return fmt::format("{} is not a number", value);
        return v >= least ? std::string() : fmt::format("must be at least {}, not {}", least, value);
      },
      "");
}

// What a TOML integer holds, for a flag whose type would hold more (a config.toml records it).
CLI::Validator at_most_int64() {
  CLI::Validator v = CLI::Range(uint64_t(0), uint64_t(std::numeric_limits<int64_t>::max()));
  v.description("");
  return v;
}

}  // namespace

void add_step_options(CLI::App& app, TrainConfig& c) {
  const std::string model = "Model and data", batch = "Batch and device", precision = "Precision and memory";
  app.add_option("--model", c.model, "Preset name, config.json, Hugging Face model directory or checkpoint")
      ->capture_default_str()
      ->group(model);
  app.add_option("--data", c.data, "Directory written by `tokamak prepare` (required)")->group(model);
  app.add_option("--tokenizer", c.tokenizer, "The data's tokenizer (default: the one recorded in its meta.json)")
      ->group(model);
  app.add_option("--vocab-size", c.vocab_size,
                 "Vocabulary of a model trained from scratch (default: the data's tokenizer's, padded to a multiple "
                 "of 64; a model with weights keeps its own)")
      ->check(at_least(0))
      ->group(model);
  app.add_option("--seed", c.seed, "Seed of the initial weights and the data order")
      ->check(at_most_int64())
      ->capture_default_str()
      ->group(model);
  one_of(app.add_option("--device", c.device, "Where to train (auto: a CUDA GPU when one is visible, else the CPU)"),
         {"auto", "cpu", "cuda"})
      ->capture_default_str()
      ->group(batch);
  app.add_option("--batch", c.batch, "Micro-batch rows B")->check(at_least(1))->capture_default_str()->group(batch);
  app.add_option("--seq", c.seq, "Sequence length T")->check(at_least(1))->capture_default_str()->group(batch);
  app.add_option("--batch-tokens", c.batch_tokens, "Global batch in tokens, a multiple of B*T (default: B*T)")
      ->check(at_least(0))
      ->group(batch);
  app.add_flag("--doc-mask", c.doc_mask, "Attend only within each document")->group(batch);
  add_on_off_flag(app, "gemm-tuning", c.gemm_tuning,
                  "Time cuBLASLt's candidate algorithms once per GEMM shape and keep the fastest in the cache folder "
                  "(gemm-algorithms.json); runs sharing that file run the same algorithms, bit for bit "
                  "(--no-gemm-tuning takes cuBLASLt's first choice)")
      ->group(precision);
  CLI::Option* matmuls =
      one_of(app.add_option("--precision", c.precision,
                            "The matmuls' precision: bf16, fp8 (as --fp8), or auto: FP8 linears and LM head where the "
                            "GPU has FP8 tensor cores, the model's shapes take the FP8 path and the plan predicts a "
                            "gain, else bf16 (f32 on the CPU); the run prints what it chose and why"),
             {"auto", "bf16", "fp8"})
          ->capture_default_str()
          ->group(precision);
  app.add_flag("--fp8", c.fp8,
               "The linear layers' GEMMs in FP8 (e4m3 weights and activations, e5m2 gradients, per-tensor scales; "
               "CUDA on compute capability 8.9+). The LM head (unless --fp8-lm-head), attention and everything else "
               "stay bf16. The same as --precision fp8")
      ->excludes(matmuls)
      ->group(precision);
  one_of(app.add_option("--fp8-scaling", c.fp8_scaling,
                        "Where --fp8 takes each tensor's scale from: delayed (the largest maximum of the same tensor "
                        "over the last 16 steps, recorded by the casts themselves; a cast past its scale is done again "
                        "with the tensor's own maximum) or current (the tensor's own maximum, a pass of its own before "
                        "every cast: a few percent slower)"),
         {"current", "delayed"})
      ->capture_default_str()
      ->group(precision);
  app.add_flag("--fp8-lm-head", c.fp8_lm_head,
               "With --fp8 (or --precision fp8), the LM head's three GEMMs in FP8 as well (e4m3 weight and input, "
               "e5m2 logit gradients scaled by their bound; the logits stay bf16 and the softmax f32): faster where "
               "the vocabulary is large against the model, at a small cost in the loss's precision (bench/NOTES.md "
               "measures it)")
      ->group(precision);
  app.add_option("--fp8-margin", c.fp8_margin,
                 "Delayed scaling's headroom: scale by 2^M times the history's maximum, so that a tensor whose maximum "
                 "grows by less than 2^M past its history is not cast twice (its guard recasts a saturated cast); "
                 "costs M binades at the bottom of e4m3's range (1: no recasts in the first steps, the same loss)")
      ->check(CLI::Range(0, 8))
      ->capture_default_str()
      ->group(precision);
  app.add_option("--recompute", c.recompute,
                 "What the backward recomputes instead of keeping: none, or any of norm, swiglu, attention, qkv, block "
                 "joined by commas (same results, less memory)")
      ->check(parsed_by([](const std::string& v) { Recompute::parse(v); }))
      ->capture_default_str()
      ->group(precision);
  app.add_option("--offload", c.offload,
                 "none; optimizer: keep AdamW's moments and the fp32 master weights in host memory, streamed through "
                 "the device in chunks at each update (same results, less device memory); optimizer,gradients: the "
                 "gradients too, each layer's brought to the device for its backward (on many ranks, ZeRO 2 and 3: "
                 "each rank's slice of them)")
      ->check(parsed_by([](const std::string& v) {
        TK_CHECK(v == "none" || v == "optimizer" || v == "optimizer,gradients",
                 "--offload must be none, optimizer or optimizer,gradients, not '{}'", v);
      }))
      ->capture_default_str()
      ->group(precision);
  app.add_option("--offload-chunk", c.offload_chunk,
                 "Elements of optimizer state per device round trip (rounded down to a multiple of 256)")
      ->check(at_least(1))
      ->capture_default_str()
      ->group(precision);
  one_of(app.add_option("--moments", c.moments,
                        "AdamW's m and v: f32, bf16 (half the memory) or int8 (a quarter: blocks of 256 with a scale "
                        "each, logarithmic codes); bf16 and int8 round stochastically (docs/memory.md)"),
         {"f32", "bf16", "int8"})
      ->capture_default_str()
      ->group(precision);
  app.add_option("--zero", c.zero,
                 "Data parallelism's ZeRO stage, on the ranks of --gpus, mpirun or srun: 0 keeps the optimizer state "
                 "whole on every rank, 1 gives each rank a slice of it (and of the fp32 master weights), 2 also "
                 "reduce-scatters the gradients, 3 also shards the parameters, gathering each layer before its use "
                 "(docs/distributed.md; default: 0, or with --memory-budget on many ranks the planner's choice)")
      ->check(CLI::Range(0, 3))
      ->group(precision);
  app.add_option("--memory-budget", c.memory_budget,
                 "Fit the run into this much device memory (e.g. 16GiB): picks the micro-batch (at most --batch), the "
                 "recompute policy, the offload and the LM head's logits chunk, keeping the global batch, and on many "
                 "ranks the ZeRO stage unless --zero is given (per GPU; default: none, the flags as given)")
      ->group(precision);
  app.add_option("--logits-chunk", c.logits_chunk_mib,
                 "MiB of the LM head's bf16 logits chunk (CUDA; 0, the default: 512, or what --memory-budget chooses): "
                 "larger chunks pass over the f32 LM-head gradient fewer times")
      ->check(CLI::Range(0, 65536))
      ->capture_default_str()
      ->group(precision);
  app.add_option("--peak-tflops", c.peak_tflops,
                 "The GPU's dense bf16 peak, for MFU (default: from the table of known GPUs)")
      ->group(precision);
}

void add_run_options(CLI::App& app, TrainConfig& c) {
  const std::string schedule = "Schedule and optimizer", checkpoints = "Validation and checkpoints";
  app.add_option("--steps", c.steps, "Optimizer steps")->check(at_least(0))->capture_default_str()->group(schedule);
  app.add_option("--lr", c.lr, "Peak learning rate")->check(at_least(0))->capture_default_str()->group(schedule);
  app.add_option("--min-lr-ratio", c.min_lr_ratio, "Final learning rate as a fraction of the peak")
      ->capture_default_str()
      ->group(schedule);
  app.add_option("--warmup", c.warmup, "Linear warmup steps")
      ->check(at_least(0))
      ->capture_default_str()
      ->group(schedule);
  one_of(app.add_option("--schedule", c.schedule, "cosine, linear or wsd (warmup-stable-decay)"),
         {"cosine", "linear", "wsd"})
      ->capture_default_str()
      ->group(schedule);
  app.add_option("--decay-fraction", c.decay_fraction, "wsd: share of the steps spent decaying")
      ->capture_default_str()
      ->group(schedule);
  app.add_option("--beta1", c.beta1, "AdamW beta1")->capture_default_str()->group(schedule);
  app.add_option("--beta2", c.beta2, "AdamW beta2")->capture_default_str()->group(schedule);
  app.add_option("--adam-eps", c.adam_eps, "AdamW epsilon")->capture_default_str()->group(schedule);
  app.add_option("--weight-decay", c.weight_decay, "AdamW weight decay (matrices only)")
      ->capture_default_str()
      ->group(schedule);
  app.add_option("--grad-clip", c.grad_clip, "Clip the global gradient norm to this (0: off)")
      ->capture_default_str()
      ->group(schedule);
  app.add_option("--eval-every", c.eval_every, "Validate every N steps (0: only at the end)")
      ->check(at_least(0))
      ->capture_default_str()
      ->group(checkpoints);
  app.add_option("--eval-tokens", c.eval_tokens, "Validation tokens (0: no validation)")
      ->check(at_least(0))
      ->capture_default_str()
      ->group(checkpoints);
  app.add_option("--save-every", c.save_every,
                 "Checkpoint every N steps (0: only at the end; -1: never, except when stopped by a signal)")
      ->check(at_least(-1))
      ->capture_default_str()
      ->group(checkpoints);
  app.add_option("--keep-checkpoints", c.keep_checkpoints, "Keep the newest K checkpoints (0: all)")
      ->check(at_least(0))
      ->capture_default_str()
      ->group(checkpoints);
  app.add_option("--log-every", c.log_every, "A terminal line every N steps, and the first and last (log.jsonl: all)")
      ->check(at_least(1))
      ->capture_default_str()
      ->group("Logging");
  app.add_option("--tensorboard", c.tensorboard,
                 "Directory of TensorBoard's event files: log.jsonl's numbers as scalars (default: the run directory, "
                 "so `tensorboard --logdir runs` shows every run; none: no event files)")
      ->group("Logging");
}

}  // namespace tk::cli

namespace {

using tk::TrainConfig;
using json = nlohmann::json;
namespace stdfs = std::filesystem;

struct TrainArgs {
  TrainConfig config;
  std::string resume, config_file;
};

// The flags that say where a run goes and how it starts, not what it is: the command line's alone.
const char* const kNotInConfigFiles[] = {"config", "resume", "overwrite", "gpus", "help"};

void add_options(CLI::App& app, TrainArgs& a) {
  tk::cli::add_step_options(app, a.config);
  tk::cli::add_run_options(app, a.config);
  const std::string run = "Run directory";
  app.add_option("--out", a.config.out, "Run directory (default: runs/<model>)")->group(run);
  app.add_option("--config", a.config_file,
                 "A TOML file of train flags (keys: the flags' names, e.g. batch-tokens = 65536); flags given on the "
                 "command line override it. A run's config.toml repeats that run (docs/config.md)")
      ->group(run);
  app.add_option("--resume", a.resume, "Continue a run: its directory or a checkpoint (default: the --out directory)")
      ->expected(0, 1)
      ->group(run);
  app.add_flag("--overwrite", a.config.overwrite,
               "Replace the run already in --out (with --resume: delete the checkpoints after the one resumed from)")
      ->group(run);
}

std::string default_run_dir(const std::string& model) {
  std::string name = stdfs::path(model).filename().string();
  if (name.empty()) name = stdfs::path(model).parent_path().filename().string();
  return (stdfs::path("runs") / name).string();
}

// What a config value must be, from the type of the flag it sets.
void check_type(const CLI::Option& opt, const tk::ConfigEntry& e, const std::string& where) {
  const std::string type = tk::cli::is_flag(opt) ? "BOOL" : opt.get_type_name();
  const json& v = e.value;
  const bool integer = v.is_number_integer(), ok = type == "BOOL"                    ? v.is_boolean()
                                                  : type.rfind("INT", 0) == 0 ||
                                                            type.rfind("UINT", 0) == 0 ? integer
                                                  : type.rfind("FLOAT", 0) == 0        ? v.is_number()
                                                                                       : v.is_string();
  if (ok) return;
  const char* wanted = type == "BOOL"                                                    ? "true or false"
                       : type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0          ? "an integer"
                       : type.rfind("FLOAT", 0) == 0                                      ? "a number"
                                                                                          : "a string (in quotes)";
  tk::cli::usage_error("{}: `{}` must be {}, like its flag --{}; the file gives {}", where, e.key, wanted, e.key,
                       v.dump());
}

// The value as it would be typed after the flag, for the flag's own checks.
std::string as_typed(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{}", v.get<double>());
  return v.dump();
}

// The checks CLI11 runs on the option's values (it tells their number only by throwing past the last).
std::vector<CLI::Validator*> checks_of(CLI::Option& opt) {
  std::vector<CLI::Validator*> checks;
  try {
    for (int i = 0;; i++) checks.push_back(opt.get_validator(i));
  } catch (const CLI::OptionNotFound&) {
  }
  return checks;
}

// The file's values as TrainConfig JSON keys, each checked as its flag is: the key names a flag of `tokamak
// train`, the value has the flag's type and passes the flag's checks. Every mistake names the file and line.
json config_file_values(CLI::App& app, const std::string& path) {
  tk::ConfigFile file;
  try {
    file = tk::read_config_file(path);
  } catch (const tk::Error& e) {
    tk::cli::usage_error("{}", e.what());
  }
  json values = json::object();
  for (const tk::ConfigEntry& e : file.entries) {
    const std::string where = fmt::format("{}:{}", path, e.line);
    for (const char* own : kNotInConfigFiles)
      if (e.key == own)
        tk::cli::usage_error("{}: `{}` cannot be set in a config file: it says where a run goes or how it starts, not "
                             "what it is; pass --{} on the command line",
                             where, e.key, e.key);
    CLI::Option* opt = e.key.empty() || e.key[0] == '-' ? nullptr : app.get_option_no_throw("--" + e.key);
    if (!opt) {
      std::string dashed = e.key;
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      tk::cli::usage_error("{}: unknown key `{}`: `tokamak train` has no --{}{}", where, e.key, e.key,
                           dashed != e.key && app.get_option_no_throw("--" + dashed)
                               ? fmt::format(" (the keys are the flags' names: `{}`)", dashed)
                               : " (`tokamak train --help` lists the flags; the keys are their names)");
    }
    check_type(*opt, e, where);
    for (CLI::Validator* check : checks_of(*opt)) {
      std::string typed = as_typed(e.value);
      if (const std::string error = (*check)(typed); !error.empty())
        tk::cli::usage_error("{}: {} = {}: {}", where, e.key, e.value.dump(), error);
    }
    values[tk::config_key_of_flag(e.key)] = e.value;
  }
  return values;
}

// `base` (the defaults, or the saved config of the run resumed), the config file's values over it, and the flags
// given on this command line over both.
TrainConfig merged_config(const CLI::App& app, json base, const json& file_values, const TrainConfig& given) {
  for (const auto& [key, value] : file_values.items()) base[key] = value;
  const json cli = given.to_json();
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_lnames().empty()) continue;
    const std::string key = tk::config_key_of_flag(opt->get_lnames().front());
    if (cli.contains(key)) base[key] = cli[key];
  }
  return TrainConfig::from_json(base);
}

// A run's own config.toml, given back with neither --out nor --overwrite, would replace that run: refused,
// saying how to repeat it instead.
void refuse_replacing_the_recorded_run(const std::string& config_file, const TrainConfig& c) {
  if (config_file.empty() || c.overwrite) return;
  std::error_code ec;
  const stdfs::path recorded = stdfs::path(config_file).parent_path();
  if (!stdfs::equivalent(recorded.empty() ? "." : recorded, c.out, ec)) return;
  if (!stdfs::exists(stdfs::path(c.out) / "config.json") && !stdfs::exists(stdfs::path(c.out) / "log.jsonl")) return;
  tk::cli::usage_error("{} is the configuration of the run in {}: to repeat that run, pass --out NEW_DIR (or "
                       "--overwrite to replace it; --resume continues it)",
                       config_file, c.out);
}

tk::cli::Command train_cmd("train", "Train a model on prepared data", [](CLI::App& app) -> tk::cli::Runner {
  auto args = std::make_shared<TrainArgs>();
  add_options(app, *args);
  return [&app, args] {
    const json file_values = args->config_file.empty() ? json::object() : config_file_values(app, args->config_file);
    TrainConfig c;
    if (app.get_option("--resume")->count() > 0) {
      const std::string where = !args->resume.empty() ? args->resume : args->config.out;
      if (where.empty()) tk::cli::usage_error("--resume needs to know which run: --resume RUN_DIR or --out RUN_DIR");
      const json saved = tk::read_trainer_state(tk::resolve_checkpoint(where)).train_config;
      c = merged_config(app, saved, file_values, args->config);
      c.resume = true;
      c.resume_from = args->resume;
      // --out, else the file's out, else "": the directory of the checkpoint resumed from.
      c.out = app.get_option("--out")->count() > 0 ? args->config.out : file_values.value("out", std::string());
    } else {
      c = merged_config(app, TrainConfig().to_json(), file_values, args->config);
      if (c.data.empty())
        tk::cli::usage_error("no dataset given: pass --data DIR (a directory written by `tokamak prepare`), or set "
                             "data in the --config file");
      if (c.out.empty()) c.out = default_run_dir(c.model);
      c.overwrite = args->config.overwrite;
      refuse_replacing_the_recorded_run(args->config_file, c);
    }
    c.overwrite = args->config.overwrite;
    tk::Trainer trainer(c, tk::cli::communicator());
    return trainer.run().exit_code;
  };
});

}  // namespace
