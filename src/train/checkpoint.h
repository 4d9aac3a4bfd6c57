// Checkpoints: RUN_DIR/step_000123/ holds config.json and model.safetensors (fp32 weights with Hugging Face
// names, so the directory loads as an HF model), optimizer.safetensors (the AdamW moments; under ZeRO 1-3 one
// optimizer-RRRRR-of-NNNNN.safetensors per rank instead, each its slice of every parameter), trainer_state.json
// (step, tokens seen, seeds, loader position, train config, tokenizer, FP8 scales) and, written last once the
// others are durable, complete.json (each file's size, and the JSON files' checksums, checked when they are read): a
// directory counts as a checkpoint only when complete.
// Each is written into .tmp-step_N/ and renamed into place whole; the last K are kept, the older ones renamed to
// .del-step_N/ before they are deleted (docs/reliability.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/model.h"
#include "optim/optimizer.h"

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
  // --fp8 with delayed scaling: the backend's amax histories by parameter name (Ops::fp8_scaling_state), null
  // otherwise. save_checkpoint takes them from the model's backend, load_checkpoint gives them back to it.
  nlohmann::json fp8_scaling;

  nlohmann::json to_json() const;
  static TrainerState from_json(const nlohmann::json& j, const std::string& source);
};

// FP8 delayed scaling's state (Ops::fp8_scaling_state) as trainer_state.json's "fp8_scaling": {"history_len",
// "steps", "amax": {parameter name: values}}, null when the backend keeps none; and back, every name checked
// against the model's layout (a tk::Error naming `source` otherwise).
nlohmann::json fp8_scaling_json(const Ops::Fp8ScalingState& state);
Ops::Fp8ScalingState fp8_scaling_from_json(const nlohmann::json& j, const ParamLayout& layout,
                                           const std::string& source);

std::string checkpoint_dir_name(int64_t step);  // "step_000123"
// The complete checkpoints of a run directory, oldest (lowest step) first. Incomplete step_* directories
// are left out, each named in a warning (once per process).
std::vector<std::string> list_checkpoints(const std::string& run_dir);
// Whether the run directory holds any step_* directory, complete or not.
bool holds_checkpoint_dirs(const std::string& run_dir);
// Why `dir` is not a complete checkpoint, "" when it is. Complete: complete.json lists every file with its size
// and each has that size; or, for a checkpoint written before complete.json existed (its trainer_state.json has
// no "checkpoint_format"), the four files are there and each safetensors file is whole.
std::string checkpoint_incomplete_reason(const std::string& dir);
bool is_checkpoint(const std::string& dir);
// Whether `dir` is meant as a tokamak checkpoint, complete or not (a step_* name, trainer_state.json,
// complete.json or optimizer.safetensors): one that resolve_checkpoint judges rather than one to read as a
// Hugging Face model directory.
bool looks_like_checkpoint(const std::string& dir);
// A complete checkpoint directory as given, or the latest complete checkpoint of a run directory (also
// spelled RUN_DIR/latest). A tk::Error for an incomplete checkpoint, a run directory with none, or a checkpoint whose
// JSON files differ from the checksums its complete.json records (an edited checkpoint is never taken for another).
std::string resolve_checkpoint(const std::string& path);
// Deletes a checkpoint: renamed to .del-step_N first, so that a kill never leaves half of one as step_N.
void remove_checkpoint(const std::string& dir);
// Removes what an interrupted save or deletion left in a run directory: .tmp-step_*, .del-* (and step_*.old
// from earlier versions). Only for the process that holds the run directory's lock (run_dir.h).
void remove_interrupted_checkpoints(const std::string& run_dir);

class DataParallel;

// Writes the checkpoint of `state.step` (with the backend's FP8 scaling state) and then removes all but the newest
// keep_last checkpoints, with any step_* directory older than them (keep_last <= 0 keeps every one). Returns the
// checkpoint's directory. A failed save removes what it wrote and leaves the run's other checkpoints as they were.
// With `dp` every rank calls it: rank 0 writes all but a sharded optimizer's state, which each rank writes as
// optimizer-RRRRR-of-NNNNN.safetensors (its slice of each parameter), and completes the checkpoint once every rank's
// files are durable; the run directory must be on a file system every rank sees.
std::string save_checkpoint(const std::string& run_dir, const Model& model, const AdamW& optimizer,
                            const TrainerState& state, int keep_last, DataParallel* dp = nullptr);

// The checkpoint's trainer_state.json, after checking it against the checksum its complete.json records.
TrainerState read_trainer_state(const std::string& checkpoint_dir);
// The tokenizer the checkpoint recorded, as a path to load: a relative one (the run directory's copy,
// "../tokenizer": run_dir.h) taken from the checkpoint's directory, an absolute one (checkpoints of runs that kept no
// copy) as it is; "" when none was recorded. Whether it still exists is the caller's question.
std::string checkpoint_tokenizer(const std::string& checkpoint_dir);

// A tk::Error naming the first field in which the checkpoint's model differs from the one built,
// with both values.
void check_same_model(const ModelConfig& built, const ModelConfig& saved, const std::string& source);

// Validates the checkpoint against the model (config, every tensor present with its shape), then
// loads the weights, the optimizer state and the backend's FP8 scaling state. Returns the trainer state to
// continue from. The optimizer state may be whole or the shards of a sharded run of any world size: each
// parameter's moments are put together from the shards, and a sharded AdamW keeps the part it owns.
TrainerState load_checkpoint(const std::string& checkpoint_dir, Model& model, AdamW& optimizer);

}  // namespace tk
