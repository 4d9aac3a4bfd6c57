// Model sources: preset names first (as ModelConfig::resolve does), then checkpoints and run
// directories (their config.json is an HF one too), then HF directories, then config.json files.
#include "train/model_source.h"

#include <filesystem>

#include "io/hf.h"
#include "train/checkpoint.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;

bool has_weights(const stdfs::path& dir) {
  return stdfs::exists(dir / "model.safetensors") || stdfs::exists(dir / "model.safetensors.index.json");
}

bool has_tokenizer(const stdfs::path& dir) {
  return stdfs::exists(dir / "tokenizer.json") || (stdfs::exists(dir / "encoder.json") && stdfs::exists(dir / "vocab.bpe"));
}

// A run directory holding step_* directories, complete or not: resolve_checkpoint takes its latest complete one, or
// says why there is none.
bool is_run_dir(const stdfs::path& p) {
  stdfs::path run = p.filename() == "latest" ? p.parent_path() : p;
  return stdfs::is_directory(run) && holds_checkpoint_dirs(run.string());
}

}  // namespace

bool is_preset_name(const std::string& spec) {
  for (const std::string& name : ModelConfig::preset_names())
    if (spec == name) return true;
  return false;
}

ModelSource find_model_source(const std::string& spec) {
  ModelSource s;
  const stdfs::path p(spec);
  if (is_preset_name(spec)) {
    s.config = ModelConfig::preset(spec);
    return s;
  }
  if (looks_like_checkpoint(spec) || is_run_dir(p)) {  // an incomplete checkpoint is refused, never read as HF weights
    s.checkpoint_dir = resolve_checkpoint(spec);
    s.weights_path = s.checkpoint_dir;
    s.config = load_hf_config(s.checkpoint_dir);
    const std::string recorded = checkpoint_tokenizer(s.checkpoint_dir);
    if (!recorded.empty() && stdfs::exists(recorded)) s.tokenizer_path = recorded;
    return s;
  }
  if (stdfs::is_directory(p) && has_weights(p)) {
    s.config = load_hf_config(spec);
    s.weights_path = spec;
    if (has_tokenizer(p)) s.tokenizer_path = spec;
    return s;
  }
  s.config = ModelConfig::resolve(spec);
  if (stdfs::is_directory(p) && has_tokenizer(p)) s.tokenizer_path = spec;
  return s;
}

}  // namespace tk
