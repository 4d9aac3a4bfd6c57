// Checkpoint directories: writing them whole (temporary directory, then rename), finding the latest,
// pruning old ones, and loading one back after checking that it fits the model.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/fs.h"
#include "io/hf.h"
#include "io/safetensors.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kPrefix = "step_";
constexpr const char* kTempPrefix = ".tmp-step_";
constexpr const char* kExpAvg = "exp_avg.";
constexpr const char* kExpAvgSq = "exp_avg_sq.";

std::string join_path(const std::string& dir, const std::string& name) { return (stdfs::path(dir) / name).string(); }

// The step of a "step_000123" directory name, or -1 for any other name.
int64_t step_of(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0 || name.size() == std::strlen(kPrefix)) return -1;
  int64_t step = 0;
  for (char c : name.substr(std::strlen(kPrefix))) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

// Makes renames inside `dir` durable; a failure only weakens crash safety, so it is not an error.
void sync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void remove_all_or_fail(const std::string& path) {
  std::error_code ec;
  stdfs::remove_all(path, ec);
  if (ec) fail("cannot remove {}: {}", path, ec.message());
}

void rename_or_fail(const std::string& from, const std::string& to) {
  std::error_code ec;
  stdfs::rename(from, to, ec);
  if (ec) fail("cannot rename {} to {}: {}", from, to, ec.message());
}

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Both files are written a tensor at a time, each made from the optimizer's state as the write reaches it.
void write_model_weights(const std::string& path, const ParamLayout& layout, const AdamW& optimizer) {
  SafeTensorsWriter w;
  w.set_metadata("format", "pt");
  for (const ParamInfo& p : layout.params)
    w.add_generated(p.name, "F32", p.shape, size_t(p.numel) * sizeof(float), [&optimizer, p](void* dst) {
      optimizer.weights_f32(p.offset, p.numel, static_cast<float*>(dst));
    });
  w.write(path);
}

void write_optimizer_state(const std::string& path, const ParamLayout& layout, const AdamW& optimizer) {
  SafeTensorsWriter w;
  w.set_metadata("format", "pt");
  for (const ParamInfo& p : layout.params) {
    const size_t bytes = size_t(p.numel) * sizeof(float);
    w.add_generated(kExpAvg + p.name, "F32", p.shape, bytes, [&optimizer, p](void* dst) {
      optimizer.exp_avg_f32(p.offset, p.numel, static_cast<float*>(dst));
    });
    w.add_generated(kExpAvgSq + p.name, "F32", p.shape, bytes, [&optimizer, p](void* dst) {
      optimizer.exp_avg_sq_f32(p.offset, p.numel, static_cast<float*>(dst));
    });
  }
  w.write(path);
}

// Reads one per-parameter tensor of a checkpoint file into its place in a flat buffer.
void read_state_tensor(const SafeTensorsFile& f, const std::string& name, const ParamInfo& p, float* flat,
                       const char* what = "the optimizer state") {
  const SafeTensorInfo* t = f.find(name);
  TK_CHECK(t, "{} has no tensor {}: {} is incomplete", f.path(), name, what);
  TK_CHECK(t->shape == p.shape, "{}: tensor {} has shape {} but the model's {} has shape {}", f.path(), name,
           shape_str(t->shape), p.name, shape_str(p.shape));
  f.read_f32(*t, flat + p.offset);
}

// What an interrupted save leaves behind: a temporary directory, or the ".old" copy of a re-saved step.
void remove_stale_temporaries(const std::string& run_dir) {
  for (const auto& e : stdfs::directory_iterator(run_dir)) {
    const std::string name = e.path().filename().string();
    bool old_copy = name.rfind(kPrefix, 0) == 0 && name.ends_with(".old");
    if (name.rfind(kTempPrefix, 0) == 0 || old_copy) remove_all_or_fail(e.path().string());
  }
}

void prune(const std::string& run_dir, int keep_last) {
  if (keep_last <= 0) return;
  std::vector<std::string> all = list_checkpoints(run_dir);
  for (size_t i = 0; i + size_t(keep_last) < all.size(); i++) remove_all_or_fail(all[i]);
}

std::string hex16(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace

json TrainerState::to_json() const {
  json j = {{"step", step},
          {"tokens_seen", tokens_seen},
          {"rng", rng},
          {"loader", loader},
          {"train_config", train_config},
          {"tokenizer", {{"path", tokenizer_path}, {"fingerprint", hex16(tokenizer_fingerprint)}}}};
  if (!fp8_scaling.is_null()) j["fp8_scaling"] = fp8_scaling;
  return j;
}

TrainerState TrainerState::from_json(const json& j, const std::string& source) {
  try {
    TrainerState s;
    s.step = j.at("step").get<int64_t>();
    s.tokens_seen = j.at("tokens_seen").get<int64_t>();
    s.rng = j.at("rng");
    s.loader = j.at("loader");
    s.train_config = j.at("train_config");
    s.tokenizer_path = j.at("tokenizer").at("path").get<std::string>();
    s.tokenizer_fingerprint = std::stoull(j.at("tokenizer").at("fingerprint").get<std::string>(), nullptr, 16);
    if (j.contains("fp8_scaling")) s.fp8_scaling = j.at("fp8_scaling");
    return s;
  } catch (const std::exception& e) {
    fail("{} is not a valid trainer state: {}", source, e.what());
  }
}

std::string checkpoint_dir_name(int64_t step) { return fmt::format("{}{:06}", kPrefix, step); }

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(run_dir, ec)) {
    int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && e.is_directory()) found.emplace_back(step, e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(path);
  return out;
}

bool is_checkpoint(const std::string& dir) { return stdfs::is_regular_file(join_path(dir, "trainer_state.json")); }

std::string resolve_checkpoint(const std::string& path) {
  if (is_checkpoint(path)) return path;
  std::string run_dir = stdfs::path(path).filename() == "latest" ? stdfs::path(path).parent_path().string() : path;
  TK_CHECK(stdfs::is_directory(run_dir), "{} is neither a checkpoint nor a run directory", path);
  std::vector<std::string> all = list_checkpoints(run_dir);
  TK_CHECK(!all.empty(), "{} holds no checkpoint (no step_* directory with a trainer_state.json)", run_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (is_checkpoint(*it)) return *it;
  fail("{} holds no complete checkpoint: no step_* directory has a trainer_state.json", run_dir);
}

std::string save_checkpoint(const std::string& run_dir, const Model& model, const AdamW& optimizer,
                            const TrainerState& state, int keep_last) {
  remove_stale_temporaries(run_dir);
  const std::string name = checkpoint_dir_name(state.step);
  const std::string tmp = join_path(run_dir, kTempPrefix + name.substr(std::strlen(kPrefix)));
  const std::string final_dir = join_path(run_dir, name);
  std::error_code ec;
  stdfs::create_directories(tmp, ec);
  if (ec) fail("cannot create the checkpoint directory {}: {}", tmp, ec.message());

  fs::write_file_atomic(join_path(tmp, "config.json"), model.config().to_hf_json().dump(2) + "\n");
  write_model_weights(join_path(tmp, "model.safetensors"), model.layout(), optimizer);
  write_optimizer_state(join_path(tmp, "optimizer.safetensors"), model.layout(), optimizer);
  // Written last: a directory without it is not a checkpoint (is_checkpoint).
  fs::write_file_atomic(join_path(tmp, "trainer_state.json"), state.to_json().dump(2) + "\n");
  sync_dir(tmp);

  // Re-saving a step (e.g. after resuming from it) replaces the old directory only once the new one is whole.
  if (stdfs::exists(final_dir)) {
    const std::string old = final_dir + ".old";
    remove_all_or_fail(old);
    rename_or_fail(final_dir, old);
    rename_or_fail(tmp, final_dir);
    remove_all_or_fail(old);
  } else {
    rename_or_fail(tmp, final_dir);
  }
  sync_dir(run_dir);
  prune(run_dir, keep_last);
  return final_dir;
}

TrainerState read_trainer_state(const std::string& checkpoint_dir) {
  const std::string path = join_path(checkpoint_dir, "trainer_state.json");
  try {
    return TrainerState::from_json(json::parse(fs::read_file(path)), path);
  } catch (const json::parse_error& e) {
    fail("{} is not valid JSON: {}", path, e.what());
  }
}

void check_same_model(const ModelConfig& built, const ModelConfig& saved, const std::string& source) {
  auto same = [&](const char* field, auto a, auto b) {
    TK_CHECK(a == b, "{} was saved from a model with {} = {}, but the model being built has {} = {}", source, field,
             b, field, a);
  };
  same("architecture", std::string(arch_name(built.arch)), std::string(arch_name(saved.arch)));
  same("vocab_size", built.vocab_size, saved.vocab_size);
  same("hidden_size", built.d_model, saved.d_model);
  same("num_hidden_layers", built.n_layers, saved.n_layers);
  same("num_attention_heads", built.n_heads, saved.n_heads);
  same("num_key_value_heads", built.n_kv_heads, saved.n_kv_heads);
  same("head_dim", built.head_dim, saved.head_dim);
  same("intermediate_size", built.ffn_dim, saved.ffn_dim);
  same("tie_word_embeddings", built.tied_embeddings, saved.tied_embeddings);
  same("q/k/v bias", built.qkv_bias, saved.qkv_bias);
  same("o_proj bias", built.o_bias, saved.o_bias);
  same("q/k norm", built.qk_norm, saved.qk_norm);
  same("rope_theta", built.rope_theta, saved.rope_theta);
  same("rope_scaling", built.rope_scaling.describe(), saved.rope_scaling.describe());
  same("rms_norm_eps", built.norm_eps, saved.norm_eps);
}

TrainerState load_checkpoint(const std::string& checkpoint_dir, Model& model, AdamW& optimizer) {
  TrainerState state = read_trainer_state(checkpoint_dir);
  check_same_model(model.config(), load_hf_config(checkpoint_dir), checkpoint_dir);
  const ParamLayout& layout = model.layout();
  const std::string opt_path = join_path(checkpoint_dir, "optimizer.safetensors");
  std::unique_ptr<SafeTensorsFile> f = SafeTensorsFile::open(opt_path);
  if (optimizer.moments_settable_by_range()) {
    // A tensor at a time: the whole state never sits in memory twice (a 7B model's is 91 GB as f32).
    std::unique_ptr<SafeTensorsFile> wf = SafeTensorsFile::open(join_path(checkpoint_dir, "model.safetensors"));
    std::vector<float> w, m, v;
    for (const ParamInfo& p : layout.params) {
      ParamInfo at0 = p;
      at0.offset = 0;
      for (std::vector<float>* b : {&w, &m, &v}) b->resize(size_t(p.numel));
      read_state_tensor(*wf, p.name, at0, w.data(), "the checkpoint's weights");
      read_state_tensor(*f, kExpAvg + p.name, at0, m.data());
      read_state_tensor(*f, kExpAvgSq + p.name, at0, v.data());
      optimizer.set_weights_f32(p.offset, p.numel, w.data());
      optimizer.set_moments_f32(p.offset, p.numel, m.data(), v.data());
    }
    optimizer.set_steps_taken(state.step);
    return state;
  }
  // load_params names any missing tensor, or one whose shape differs, with both shapes.
  std::vector<float> weights = load_params(model.config(), layout, join_path(checkpoint_dir, "model.safetensors"));
  std::vector<float> m(size_t(layout.total)), v(size_t(layout.total));
  for (const ParamInfo& p : layout.params) {
    read_state_tensor(*f, kExpAvg + p.name, p, m.data());
    read_state_tensor(*f, kExpAvgSq + p.name, p, v.data());
  }
  optimizer.set_weights_f32(weights);
  optimizer.set_state_f32(m, v, state.step);
  return state;
}

}  // namespace tk
