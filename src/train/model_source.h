// Where a model comes from, as --model names it: a preset, a config.json, a Hugging Face model
// directory (config.json + safetensors weights), a tokamak checkpoint, or a run directory (its latest
// checkpoint). Shared by train, eval and generate.
#pragma once
#include <string>

#include "model/config.h"

namespace tk {

struct ModelSource {
  ModelConfig config;
  std::string weights_path;    // a directory holding the weights; "" for a fresh (random) model
  std::string checkpoint_dir;  // set when the source is a tokamak checkpoint
  std::string tokenizer_path;  // the model's tokenizer when known (HF directory or checkpoint), else ""
};

ModelSource find_model_source(const std::string& spec);
bool is_preset_name(const std::string& spec);

}  // namespace tk
