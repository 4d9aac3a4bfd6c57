// TrainConfig (train_config.h): its JSON, read back exactly, and the checks of the run's own options.
#include "train/train_config.h"

#include <cmath>

#include "core/error.h"
#include "plan/flag_values.h"

namespace tk {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TrainConfig, model, data, out, tokenizer, device, batch, seq,
                                                batch_tokens, doc_mask, gemm_tuning, logits_chunk_mib, precision, fp8,
                                                fp8_scaling, fp8_margin, fp8_lm_head, recompute, offload,
                                                offload_chunk, moments, zero, memory_budget, vocab_size, steps, lr,
                                                min_lr_ratio, warmup, schedule, decay_fraction, beta1, beta2, adam_eps,
                                                weight_decay, grad_clip, seed, eval_every, eval_tokens, save_every,
                                                keep_checkpoints, peak_tflops, log_every, tensorboard)

nlohmann::json TrainConfig::to_json() const { return *this; }

TrainConfig TrainConfig::from_json(const nlohmann::json& j) {
  TrainConfig c;
  try {
    c = j.get<TrainConfig>();
  } catch (const nlohmann::json::exception& e) {
    fail("the train config is not valid: {}", e.what());
  }
  // nlohmann converts numbers to the field's type without a word (4294967298 into an int is 2): each value must come
  // back as it was given.
  const nlohmann::json back = c.to_json();
  for (const auto& [key, value] : j.items()) {
    if (!back.contains(key) || !value.is_number()) continue;
    const nlohmann::json& held = back[key];
    // Integers by their digits (nlohmann's == takes the unsigned 2^64 - 1 for -1), floats by value (an integer
    // given for a float field is that float).
    const bool same = held.is_number_float()
                          ? held.get<double>() == value.get<double>() ||
                                (std::isnan(value.get<double>()) && std::isnan(held.get<double>()))
                          : held.dump() == value.dump();
    TK_CHECK(same, "{} = {} does not fit its flag --{}, which holds {}", key, value.dump(), key, held.dump());
  }
  return c;
}

Recipe train_recipe(const TrainConfig& c, const ModelConfig& model, bool gpu, int world) {
  Recipe r = make_recipe(c, model, gpu, gpu ? current_gpu() : std::nullopt, world);
  r.optimizer.beta1 = c.beta1;
  r.optimizer.beta2 = c.beta2;
  r.optimizer.eps = c.adam_eps;
  r.optimizer.weight_decay = c.weight_decay;
  r.optimizer.max_grad_norm = c.grad_clip;
  return r;
}

void check_train_config(const TrainConfig& c) {
  check_step_options(c);
  for (const auto& [flag, value] : {std::pair<const char*, double>{"lr", c.lr}, {"min-lr-ratio", c.min_lr_ratio},
                                    {"decay-fraction", c.decay_fraction}, {"beta1", c.beta1}, {"beta2", c.beta2},
                                    {"adam-eps", c.adam_eps}, {"weight-decay", c.weight_decay},
                                    {"grad-clip", c.grad_clip}})
    TK_CHECK(std::isfinite(value), "--{} must be a finite number, not {}", flag, value);
  TK_CHECK(c.lr >= 0, "--lr must not be negative, not {}", c.lr);
  TK_CHECK(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1,
           "--beta1 and --beta2 must be in [0, 1), not {} and {}", c.beta1, c.beta2);
  TK_CHECK(c.adam_eps > 0, "--adam-eps must be above 0, not {}", c.adam_eps);
  TK_CHECK(c.weight_decay >= 0, "--weight-decay must not be negative, not {}", c.weight_decay);
  TK_CHECK(c.steps >= 0 && c.warmup >= 0, "--steps and --warmup must not be negative, not {} and {}", c.steps,
           c.warmup);
  TK_CHECK(c.eval_every >= 0 && c.eval_tokens >= 0, "--eval-every and --eval-tokens must not be negative");
  TK_CHECK(c.save_every >= -1, "--save-every must be -1 (never), 0 (at the end) or a step count, not {}", c.save_every);
  TK_CHECK(c.keep_checkpoints >= 0, "--keep-checkpoints must not be negative, not {}", c.keep_checkpoints);
  TK_CHECK(c.log_every >= 1, "--log-every must be at least 1, not {}", c.log_every);
  parse_lr_decay(c.schedule);
}

}  // namespace tk
