// The step's and the run's flags (step_options.h).
#include "cli/step_options.h"

#include <limits>

#include <fmt/format.h>

#include "cli/conventions.h"
#include "core/error.h"
#include "plan/flag_values.h"

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

void add_step_options(CLI::App& app, StepOptions& c) {
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
      ->check(CLI::Range(0, kMaxFp8Margin))
      ->capture_default_str()
      ->group(precision);
  app.add_option("--recompute", c.recompute,
                 "What the backward recomputes instead of keeping: none, or any of norm, swiglu, attention, qkv, block "
                 "joined by commas (same results, less memory)")
      ->check(parsed_by([](const std::string& v) { parse_recompute(v); }))
      ->capture_default_str()
      ->group(precision);
  app.add_option("--offload", c.offload,
                 "none; optimizer: keep AdamW's moments and the fp32 master weights in host memory, streamed through "
                 "the device in chunks at each update (same results, less device memory); optimizer,gradients: the "
                 "gradients too, each layer's brought to the device for its backward (on many ranks, ZeRO 2 and 3: "
                 "each rank's slice of them)")
      ->check(parsed_by([](const std::string& v) { parse_offload(v); }))
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
      ->check(CLI::Range(0, kMaxLogitsChunkMib))
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


void refuse_step_options(CLI::App& app, const std::vector<std::string>& flags, const std::string& command,
                         const std::string& why) {
  for (const std::string& flag : flags) {
    CLI::Option* opt = app.get_option(flag);
    opt->group("");  // hidden from --help
    opt->each([flag, command, why](const std::string&) {
      usage_error("{} does not apply to `tokamak {}`: {}", flag, command, why);
    });
  }
}

void require_valid(const StepOptions& o) {
  try {
    check_step_options(o);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

void require_valid(const TrainConfig& c) {
  try {
    check_train_config(c);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

}  // namespace tk::cli
