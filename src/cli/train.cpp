// `tokamak train`: every TrainConfig field as a flag. With --resume, the checkpoint's saved config is
// the starting point and only the flags given on the command line change it, so `tokamak train
// --resume RUN_DIR` alone continues a run exactly.
#include <algorithm>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/train_options.h"
#include "core/error.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace tk::cli {

void add_recipe_options(CLI::App& app, TrainConfig& c) {
  app.add_option("--model", c.model, "Preset name, config.json, Hugging Face model directory or checkpoint")
      ->capture_default_str();
  app.add_option("--data", c.data, "Directory written by `tokamak prepare`");
  app.add_option("--tokenizer", c.tokenizer, "The data's tokenizer (default: the one recorded in its meta.json)");
  app.add_option("--device", c.device, "auto, cpu or cuda")->capture_default_str();
  app.add_option("--batch", c.batch, "Micro-batch rows B")->capture_default_str();
  app.add_option("--seq", c.seq, "Sequence length T")->capture_default_str();
  app.add_option("--batch-tokens", c.batch_tokens, "Global batch in tokens, a multiple of B*T (default: B*T)");
  app.add_flag("--doc-mask", c.doc_mask, "Attend only within each document");
  app.add_flag("--gemm-tuning,!--no-gemm-tuning", c.gemm_tuning,
               "Time cuBLASLt's candidate algorithms once per GEMM shape and keep the fastest in the cache folder "
               "(gemm-algorithms.json); runs sharing that file run the same algorithms, bit for bit (default on; "
               "--no-gemm-tuning takes cuBLASLt's first choice)");
  app.add_flag("--fp8", c.fp8,
               "The linear layers' GEMMs in FP8 (e4m3 weights and activations, e5m2 gradients, per-tensor scales; "
               "CUDA on compute capability 8.9+). The LM head (unless --fp8-lm-head), attention and everything else "
               "stay bf16");
  app.add_option("--fp8-scaling", c.fp8_scaling,
                 "Where --fp8 takes each tensor's scale from: delayed (the largest maximum of the same tensor over "
                 "the last 16 steps, recorded by the casts themselves; a cast past its scale is done again with the "
                 "tensor's own maximum) or current (the tensor's own maximum, a pass of its own before every cast: "
                 "a few percent slower)")
      ->check(CLI::IsMember({"current", "delayed"}))
      ->capture_default_str();
  app.add_flag("--fp8-lm-head", c.fp8_lm_head,
               "With --fp8, the LM head's three GEMMs in FP8 as well (e4m3 weight and input, e5m2 logit gradients "
               "scaled by their bound; the logits stay bf16 and the softmax f32): faster where the vocabulary is "
               "large against the model, at a small cost in the loss's precision (bench/NOTES.md measures it)");
  app.add_option("--fp8-margin", c.fp8_margin,
                 "Delayed scaling's headroom: scale by 2^M times the history's maximum, so that a tensor whose maximum "
                 "grows by less than 2^M past its history is not cast twice (its guard recasts a saturated cast); "
                 "costs M binades at the bottom of e4m3's range (1: no recasts in the first steps, the same loss)")
      ->check(CLI::Range(0, 8))
      ->capture_default_str();
  app.add_option("--recompute", c.recompute,
                 "What the backward recomputes instead of keeping: none, or any of norm, swiglu, attention, qkv, block "
                 "joined by commas (same results, less memory)")
      ->capture_default_str();
  app.add_option("--offload", c.offload,
                 "optimizer: keep AdamW's moments and the fp32 master weights in host memory, streamed through the "
                 "device in chunks at each update (same results, less device memory); optimizer,gradients: the "
                 "gradients too, each layer's brought to the device for its backward")
      ->capture_default_str();
  app.add_option("--offload-chunk", c.offload_chunk,
                 "Elements of optimizer state per device round trip (rounded down to a multiple of 256)")
      ->capture_default_str();
  app.add_option("--moments", c.moments,
                 "AdamW's m and v: f32, bf16 (half the memory) or int8 (a quarter: blocks of 256 with a scale each, "
                 "logarithmic codes); bf16 and int8 round stochastically (docs/memory.md)")
      ->capture_default_str();
  app.add_option("--memory-budget", c.memory_budget,
                 "Fit the run into this much device memory (e.g. 16GiB): picks the micro-batch (at most --batch), the "
                 "recompute policy, the offload and the LM head's logits chunk, keeping the global batch");
  app.add_option("--logits-chunk", c.logits_chunk_mib,
                 "MiB of the LM head's bf16 logits chunk (CUDA; default 512, or what --memory-budget chooses): larger "
                 "chunks pass over the f32 LM-head gradient fewer times")
      ->check(CLI::Range(1, 65536));
  app.add_option("--vocab-size", c.vocab_size,
                 "Vocabulary of a model trained from scratch, e.g. that of a tokenizer made by train-tokenizer "
                 "(default: the preset's or config's)");
  app.add_option("--steps", c.steps, "Optimizer steps")->capture_default_str();
  app.add_option("--lr", c.lr, "Peak learning rate")->capture_default_str();
  app.add_option("--min-lr-ratio", c.min_lr_ratio, "Final learning rate as a fraction of the peak")->capture_default_str();
  app.add_option("--warmup", c.warmup, "Linear warmup steps")->capture_default_str();
  app.add_option("--schedule", c.schedule, "cosine, linear or wsd (warmup-stable-decay)")->capture_default_str();
  app.add_option("--decay-fraction", c.decay_fraction, "wsd: share of the steps spent decaying")->capture_default_str();
  app.add_option("--beta1", c.beta1, "AdamW beta1")->capture_default_str();
  app.add_option("--beta2", c.beta2, "AdamW beta2")->capture_default_str();
  app.add_option("--adam-eps", c.adam_eps, "AdamW epsilon")->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "AdamW weight decay (matrices only)")->capture_default_str();
  app.add_option("--grad-clip", c.grad_clip, "Clip the global gradient norm to this (0: off)")->capture_default_str();
  app.add_option("--seed", c.seed, "Seed of the initial weights and the data order")->capture_default_str();
  app.add_option("--eval-every", c.eval_every, "Validate every N steps (0: only at the end)")->capture_default_str();
  app.add_option("--eval-tokens", c.eval_tokens, "Validation tokens (0: no validation)")->capture_default_str();
  app.add_option("--save-every", c.save_every, "Checkpoint every N steps (0: only at the end; -1: never, except when stopped by a signal)")->capture_default_str();
  app.add_option("--keep-checkpoints", c.keep_checkpoints, "Keep the newest K checkpoints (0: all)")->capture_default_str();
  app.add_option("--peak-tflops", c.peak_tflops, "The GPU's dense bf16 peak, for MFU when it is not in the table");
}

}  // namespace tk::cli

namespace {

using tk::TrainConfig;

void add_options(CLI::App& app, TrainConfig& c, std::string& resume) {
  tk::cli::add_recipe_options(app, c);
  app.add_option("--out", c.out, "Run directory (default: runs/<model>)");
  app.add_option("--resume", resume, "Continue a run: its directory or a checkpoint (default: the --out directory)")
      ->expected(0, 1);
  app.add_flag("--overwrite", c.overwrite,
               "Replace the run already in --out (with --resume: delete the checkpoints after the one resumed from)");
}

std::string default_run_dir(const std::string& model) {
  std::string name = std::filesystem::path(model).filename().string();
  if (name.empty()) name = std::filesystem::path(model).parent_path().filename().string();
  return (std::filesystem::path("runs") / name).string();
}

// The saved recipe of the run being resumed, with the flags given on this command line on top.
TrainConfig resumed_config(const CLI::App& app, const TrainConfig& given) {
  const std::string where = !given.resume_from.empty() ? given.resume_from : given.out;
  TK_CHECK(!where.empty(), "--resume needs to know which run: --resume RUN_DIR or --out RUN_DIR");
  nlohmann::json merged = tk::read_trainer_state(tk::resolve_checkpoint(where)).train_config;
  const nlohmann::json cli = given.to_json();
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_lnames().empty()) continue;
    std::string key = opt->get_lnames().front();
    std::replace(key.begin(), key.end(), '-', '_');
    if (cli.contains(key)) merged[key] = cli[key];
  }
  TrainConfig c = TrainConfig::from_json(merged);
  c.resume = true;
  c.resume_from = given.resume_from;
  c.out = given.out;  // empty: the directory of the checkpoint resumed from
  return c;
}

tk::cli::Command train_cmd("train", "Train a model on prepared data", [](CLI::App& app) -> tk::cli::Runner {
  auto cfg = std::make_shared<TrainConfig>();
  auto resume = std::make_shared<std::string>();
  add_options(app, *cfg, *resume);
  return [&app, cfg, resume] {
    TrainConfig c = *cfg;
    if (app.get_option("--resume")->count() > 0) {
      c.resume_from = *resume;
      c = resumed_config(app, c);
    } else if (c.out.empty()) {
      c.out = default_run_dir(c.model);
    }
    tk::Trainer trainer(c);
    return trainer.run().exit_code;
  };
});

}  // namespace
