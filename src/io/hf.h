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

// The config of an HF model directory or a tokamak checkpoint: its config.json through
// ModelConfig::from_hf_json. A missing or malformed file is a tk::Error naming it.
ModelConfig load_hf_config(const std::string& dir);

// config.json (ModelConfig::to_hf_json, with torch_dtype and dtype), generation_config.json (bos and eos ids; a
// vocabulary padded past the tokenizer's has its padding ids as suppress_tokens) and model.safetensors (dtype "BF16"
// or "F32", HF names, metadata format "pt"; no lm_head.weight when tied) into out_dir, plus the tokenizer files
// found in tokenizer_dir (tokenizer.json, tokenizer_config.json, special_tokens_map.json, vocab.json, merges.txt,
// encoder.json, vocab.bpe, chat_template.jinja; or tokenizer_dir is itself one file, a tokenizer.json with the
// tokenizer_config.json beside it) if given, with tokenizer_config.json's model_max_length set to the model's
// max_position_embeddings and its chat_template set from a chat_template.jinja that it lacks. GPT-2's files alone
// get the tokenizer.json and tokenizer_config.json they amount to, so that every export with a tokenizer loads with
// AutoTokenizer (a tiktoken file's does not: transformers reads no .tiktoken).
// Written into a new sibling directory that is renamed into place whole, with a marker file (.tokamak-export)
// that says an export wrote it. See check_export_dir for what may be at out_dir already.
void export_hf(const ModelConfig& cfg, const ParamLayout& layout, const std::vector<float>& params,
               const std::string& out_dir, const std::string& dtype, const std::string& tokenizer_dir,
               bool overwrite = false, const std::string& source_dir = "");

// The tk::Error export_hf gives for out_dir, so that a caller can refuse before loading a large model. out_dir
// may be absent or empty; with `overwrite`, it may be an earlier export (it holds the marker). It is never a
// file, nor a directory that holds source_dir (the model being exported) or the current directory.
void check_export_dir(const std::string& out_dir, bool overwrite, const std::string& source_dir = "");

}  // namespace tk
