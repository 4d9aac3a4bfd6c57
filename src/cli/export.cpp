// `tokamak export`: a checkpoint (or a run directory's latest one, or any HF model directory) to a
// Hugging Face model directory that transformers' AutoModelForCausalLM and AutoTokenizer load: config.json,
// generation_config.json, model.safetensors in bf16 or f32, and the tokenizer the model was trained with.
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"
#include "io/hf.h"
#include "train/checkpoint.h"

namespace {

namespace stdfs = std::filesystem;

struct ExportOptions {
  std::string checkpoint, out, dtype = "bf16", tokenizer;
  bool overwrite = false;
};

bool has_tokenizer_files(const std::string& dir) {
  for (const char* name : {"tokenizer.json", "encoder.json", "vocab.json"})
    if (stdfs::exists(stdfs::path(dir) / name)) return true;
  return false;
}

// The directory whose model is exported, and what it is. A run directory also holds a config.json (the
// run's), so checkpoints and runs are recognised first, and a Hugging Face model directory last. Only a
// complete checkpoint is exported: an incomplete one named here is refused (resolve_checkpoint), never read as
// a Hugging Face directory, and a run's incomplete ones are passed over.
struct Source {
  std::string dir, what;
};
Source find_source(const std::string& path) {
  const bool latest = stdfs::path(path).filename() == "latest";
  if (!latest && tk::looks_like_checkpoint(path) && !tk::holds_checkpoint_dirs(path))
    return {tk::resolve_checkpoint(path), "checkpoint " + path};
  if (latest || tk::holds_checkpoint_dirs(path)) {
    const std::string dir = tk::resolve_checkpoint(path);
    const std::string run = latest ? stdfs::path(path).parent_path().string() : path;
    return {dir, fmt::format("the latest checkpoint of run {}: {}", run, dir)};
  }
  TK_CHECK(stdfs::exists(stdfs::path(path) / "config.json"),
           "--checkpoint {} is neither a checkpoint, a run directory (step_* checkpoints), RUN/latest, nor a Hugging "
           "Face model directory (config.json)",
           path);
  return {path, "the Hugging Face model directory " + path};
}

// An export inside a checkpoint would be deleted with it when its run prunes checkpoints (or replaces the step), and
// one named as a checkpoint of a run directory would be taken for one: --out is neither, nor inside one.
void refuse_checkpoint_out(const std::string& out) {
  const stdfs::path target = stdfs::weakly_canonical(stdfs::absolute(out));
  const std::string name = target.filename().string();
  TK_CHECK(!(name.rfind("step_", 0) == 0 && tk::holds_checkpoint_dirs(target.parent_path().string())),
           "refusing to export to {}: that is the name of a checkpoint of the run in {}; choose a directory outside "
           "the run's checkpoints",
           out, target.parent_path().string());
  for (stdfs::path p = target; !p.empty(); p = p.parent_path()) {
    std::error_code ec;
    if (stdfs::exists(p / "trainer_state.json", ec) || stdfs::exists(p / "complete.json", ec))
      tk::fail("refusing to export to {}: {} is a checkpoint, and an export inside it would be deleted with it when "
               "its run prunes or saves again; choose a directory outside the checkpoint",
               out, p.string());
    if (p == p.parent_path()) break;
  }
}

// --tokenizer, else the tokenizer the checkpoint's run recorded, else the files of an HF model dir.
std::string tokenizer_source(const ExportOptions& o, const std::string& dir) {
  if (!o.tokenizer.empty()) return o.tokenizer;
  if (tk::is_checkpoint(dir)) {
    const std::string recorded = tk::checkpoint_tokenizer(dir);
    if (!recorded.empty() && stdfs::exists(recorded)) return recorded;
    if (!recorded.empty()) {
      tk::log::warn("the tokenizer this checkpoint was trained with ({}) is gone: exporting the model without one "
                    "(--tokenizer DIR adds it)", recorded);
      return "";
    }
  }
  if (has_tokenizer_files(dir)) return dir;
  tk::log::warn("no tokenizer found for {}: exporting the model without one (--tokenizer DIR adds it)", dir);
  return "";
}

int run_export(const ExportOptions& o) {
  TK_CHECK(o.dtype == "bf16" || o.dtype == "f32", "--dtype must be bf16 or f32, not \"{}\"", o.dtype);
  const Source source = find_source(o.checkpoint);
  const std::string& dir = source.dir;
  refuse_checkpoint_out(o.out);
  tk::check_export_dir(o.out, o.overwrite, dir);
  tk::log::info("exporting {}", source.what);
  tk::ModelConfig cfg = tk::load_hf_config(dir);
  tk::ParamLayout layout = tk::ParamLayout::build(cfg);
  std::vector<float> params = tk::load_params(cfg, layout, dir);
  std::string tokenizer = tokenizer_source(o, dir);
  tk::export_hf(cfg, layout, params, o.out, o.dtype, tokenizer, o.overwrite, dir);
  tk::log::info("exported {} to {}: {} with {} layers, {:.2f}M parameters as {}{}", dir, o.out,
                tk::arch_hf_class(cfg.arch), cfg.n_layers, double(layout.total) / 1e6, o.dtype,
                tokenizer.empty() ? "" : ", and its tokenizer");
  return 0;
}

tk::cli::Command export_cmd("export", "Write a checkpoint as a Hugging Face model directory",
                            [](CLI::App& app) -> tk::cli::Runner {
                              auto o = std::make_shared<ExportOptions>();
                              app.add_option("--checkpoint", o->checkpoint,
                                             "Checkpoint, run directory (its latest checkpoint), RUN/latest, or HF "
                                             "model directory")
                                  ->required();
                              app.add_option("--out", o->out, "Directory to write the Hugging Face model into")
                                  ->required();
                              app.add_option("--dtype", o->dtype, "Weight dtype of model.safetensors")
                                  ->check(CLI::IsMember({"bf16", "f32"}))
                                  ->capture_default_str();
                              app.add_option("--tokenizer", o->tokenizer,
                                             "Tokenizer directory or file to copy (default: the one the run used)");
                              app.add_flag("--overwrite", o->overwrite,
                                           "Replace an earlier export at --out (never any other directory)");
                              return [o] { return run_export(*o); };
                            });

}  // namespace
