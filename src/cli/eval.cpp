// `tokamak eval`: the mean loss and perplexity of a trained model on a prepared split, read as
// consecutive windows from its start (docs/eval.md), so another implementation can check the number.
#include <cmath>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/command.h"
#include "cli/conventions.h"
#include "core/error.h"
#include "core/log.h"
#include "io/hf.h"
#include "train/checkpoint.h"
#include "train/dataset.h"
#include "train/evaluate.h"
#include "train/model_source.h"

namespace {

struct EvalArgs {
  std::string model, data, split = "val", device = "auto";
  int batch = 4, seq = 0;
  int64_t max_tokens = 0;
  bool json = false;
};

// The window length the model was trained with when its checkpoint says so, else its context (at most 1024).
int default_seq(const tk::ModelSource& source) {
  if (!source.checkpoint_dir.empty()) {
    const nlohmann::json cfg = tk::read_trainer_state(source.checkpoint_dir).train_config;
    if (cfg.contains("seq")) return cfg["seq"].get<int>();
  }
  return std::min(source.config.max_seq, 1024);
}

int run_eval(const EvalArgs& a) {
  TK_CHECK(!a.model.empty() && !a.data.empty(), "eval needs --model and --data");
  const tk::ModelSource source = tk::find_model_source(a.model);
  TK_CHECK(!source.weights_path.empty(),
           "{} has no weights (it is a preset or a bare config.json): evaluate a checkpoint, a run directory or a "
           "Hugging Face model directory",
           a.model);
  tk::check_dataset_fits_model(a.data, tk::read_dataset_meta(a.data), source.config, source.tokenizer_path);

  tk::SplitEvalOptions o;
  o.data_dir = a.data;
  o.split = a.split;
  o.B = a.batch;
  o.T = a.seq > 0 ? a.seq : default_seq(source);
  o.max_tokens = a.max_tokens;
  o.progress = true;
  tk::Backend backend = tk::make_backend(a.device);
  const std::vector<float> weights =
      tk::load_params(source.config, tk::ParamLayout::build(source.config), source.weights_path);
  const tk::SplitEval r = tk::evaluate_split(source.config, weights, *backend.ops, o);

  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = source.weights_path;
    j["data"] = a.data;
    j["split"] = a.split;
    j["seq"] = o.T;
    j["windows"] = r.windows;
    j["tokens"] = r.tokens;
    j["loss"] = r.loss;
    j["perplexity"] = r.perplexity;
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{} loss {:.4f} nats, perplexity {:.3f}: {} tokens in {} windows of {} from {} ({})\n", a.split,
               r.loss, r.perplexity, r.tokens, r.windows, o.T, a.data, source.weights_path);
  }
  return 0;
}

tk::cli::Runner setup_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  app.add_option("--model", a->model, "Checkpoint, run directory or Hugging Face model directory")->required();
  app.add_option("--data", a->data, "Directory written by `tokamak prepare`")->required();
  tk::cli::one_of(app.add_option("--split", a->split, "train or val"), {"train", "val"})->capture_default_str();
  app.add_option("--max-tokens", a->max_tokens, "Evaluate the first max(1, N / seq) windows (default: all of them)");
  app.add_option("--batch", a->batch, "Windows per forward pass (speed only)")->capture_default_str();
  app.add_option("--seq", a->seq, "Window length T (default: the checkpoint's training length, else min(context, 1024))");
  tk::cli::one_of(app.add_option("--device", a->device, "auto, cpu or cuda"), {"auto", "cpu", "cuda"})
      ->capture_default_str();
  app.add_flag("--json", a->json, "Print one JSON object");
  return [a] { return run_eval(*a); };
}

tk::cli::Command eval_cmd("eval", "Validation loss and perplexity of a model on prepared data", setup_eval);

}  // namespace
