// What the ranks of a training run must have been given alike, beyond the command line that the launch compares
// (cli/main.cpp): the files one command names can differ from host to host, or from one working directory to
// another. Compared once at start (dist/agreement.h), before anything is allocated, so that a rank with other data,
// another model, tokenizer, configuration file or checkpoint is refused, named, instead of training apart.
#pragma once
#include <cstdint>
#include <string>

#include "dist/agreement.h"
#include "train/model_source.h"
#include "train/trainer.h"

namespace tk {

// The parts, each named as the refusal names it:
//  - "configuration": the run's resolved settings (defaults, config file, flags), less the paths of what the next
//    parts compare by content;
//  - "model": its config and, loaded from files, each safetensors file's name, size and header (shapes, dtypes,
//    offsets, and in tokamak's checkpoints each tensor's checksum), not its gigabytes of data;
//  - "data": the dataset's meta.json (its splits, shards, token counts and tokenizer) less the host's tokenizer path;
//  - "tokenizer": the fingerprint of the tokenizer the data was prepared with;
//  - "checkpoint resumed": the checkpoint's complete.json (every file and its size; trainer_state.json in a checkpoint
//    older than complete.json), when resuming.
dist::Fingerprint run_inputs_fingerprint(const TrainConfig& cfg, const ModelSource& model, uint64_t tokenizer_fingerprint,
                                         const std::string& resume_checkpoint);

}  // namespace tk
