// Checkpoints: RUN_DIR/step_000123/ holds config.json and model.safetensors (fp32 weights with Hugging
// Face names, so the directory loads as an HF model), optimizer.safetensors (the AdamW moments) and
// trainer_state.json (step, tokens seen, seeds, loader position, train config, tokenizer). Each is
// written into a temporary directory that is renamed into place whole; the last K are kept.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/model.h"
#include "train/optimizer.h"

namespace tk {

// Everything besides the tensors that a resumed run needs to continue exactly where this one stopped.
struct TrainerState {
  int64_t step = 0;          // optimizer steps completed
  int64_t tokens_seen = 0;   // training tokens consumed
  nlohmann::json rng = nlohmann::json::object();           // the seeds the run derives its randomness from
  nlohmann::json loader = nlohmann::json::object();        // DataLoader::state() of the training split
  nlohmann::json train_config = nlohmann::json::object();  // the resolved TrainConfig
  std::string tokenizer_path;                              // "" when unknown
  uint64_t tokenizer_fingerprint = 0;                      // of the dataset's tokenizer
  // --fp8 with delayed scaling: the amax histories by parameter name (trainer.cpp), null otherwise.
  nlohmann::json fp8_scaling;

  nlohmann::json to_json() const;
  static TrainerState from_json(const nlohmann::json& j, const std::string& source);
};

std::string checkpoint_dir_name(int64_t step);  // "step_000123"
// The checkpoints of a run directory, oldest (lowest step) first.
std::vector<std::string> list_checkpoints(const std::string& run_dir);
bool is_checkpoint(const std::string& dir);
// A checkpoint directory as given, or the latest checkpoint of a run directory (also spelled
// RUN_DIR/latest). A tk::Error when there is none.
std::string resolve_checkpoint(const std::string& path);

// Writes the checkpoint of `state.step` and then removes all but the newest keep_last checkpoints
// (keep_last <= 0 keeps every one). Returns the checkpoint's directory.
std::string save_checkpoint(const std::string& run_dir, const Model& model, const AdamW& optimizer,
                            const TrainerState& state, int keep_last);

TrainerState read_trainer_state(const std::string& checkpoint_dir);

// A tk::Error naming the first field in which the checkpoint's model differs from the one built,
// with both values.
void check_same_model(const ModelConfig& built, const ModelConfig& saved, const std::string& source);

// Validates the checkpoint against the model (config, every tensor present with its shape), then
// loads the weights and the optimizer state. Returns the trainer state to continue from.
TrainerState load_checkpoint(const std::string& checkpoint_dir, Model& model, AdamW& optimizer);

}  // namespace tk
