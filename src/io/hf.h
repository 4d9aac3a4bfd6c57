// Hugging Face interop: load a model directory (config.json + model.safetensors or a sharded
// index) into tokamak's flat parameter layout, and export one that transformers loads.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "model/params.h"

namespace tk {

// Reads the tensors of `layout` from a safetensors file or a directory (model.safetensors or
// model.safetensors.index.json) into host float32, layout order. A missing tensor, or one whose
// shape differs from the config's, is a tk::Error naming the tensor and both shapes. With tied
// embeddings an lm_head.weight in the file is ignored.
std::vector<float> load_params(const ModelConfig& cfg, const ParamLayout& layout, const std::string& path);

// config.json (ModelConfig::to_hf_json) + model.safetensors (dtype "BF16" or "F32") into out_dir,
// written atomically (temporary directory, then rename), plus the tokenizer files found in
// tokenizer_dir (tokenizer.json, tokenizer_config.json, special_tokens_map.json, encoder.json, vocab.bpe) if given.
void export_hf(const ModelConfig& cfg, const ParamLayout& layout, const std::vector<float>& params,
               const std::string& out_dir, const std::string& dtype, const std::string& tokenizer_dir);

}  // namespace tk
