// Checkpoint directories: writing them whole (temporary directory, complete.json last, then rename),
// telling complete ones from what an interrupted save or deletion left, finding the latest, pruning old
// ones (renamed out of sight before they are deleted), and loading one back after checking that it fits.
#include "train/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/json_integer.h"
#include "core/log.h"
#include "io/hf.h"
#include "io/safetensors.h"
#include "train/checkpoint_checksums.h"
#include "train/data_parallel.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kPrefix = "step_";
constexpr const char* kTempPrefix = ".tmp-step_";
constexpr const char* kDeletePrefix = ".del-";  // a checkpoint being deleted: renamed out of sight first
constexpr const char* kCompleteMarker = "complete.json";
// trainer_state.json's "checkpoint_format": 2 since checkpoints end with complete.json, 3 since complete.json records
// the JSON files' checksums (checkpoint_checksums.h); absent (1) before.
constexpr int kMarkedFormat = kChecksummedCheckpointFormat;
// The files of a checkpoint written before complete.json existed.
constexpr const char* kUnmarkedFiles[] = {"config.json", "model.safetensors", "optimizer.safetensors",
                                          "trainer_state.json"};
constexpr const char* kExpAvg = "exp_avg.";
constexpr const char* kExpAvgSq = "exp_avg_sq.";
constexpr const char* kSliceKey = "slice:";  // a shard file's metadata: which elements of a parameter it holds

// Rank r's shard of a sharded optimizer state (ZeRO 1-3).
std::string shard_file_name(int rank, int world) {
  return fmt::format("optimizer-{:05}-of-{:05}.safetensors", rank + 1, world);
}

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

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A sharded optimizer's state as this rank holds it: for each parameter, the elements [lo, hi) it owns (a parameter
// lies in one unit, and a rank owns one run of each), as tensors of [hi - lo] with the range in the metadata.
void write_optimizer_shard(const std::string& path, const ParamLayout& layout, const AdamW& optimizer) {
  SafeTensorsWriter w;
  w.set_metadata("format", "pt");
  for (const ParamInfo& p : layout.params)
    for (const ParamRange& r : optimizer.owned()) {
      const int64_t lo = std::max(p.offset, r.offset), hi = std::min(p.offset + p.numel, r.offset + r.count);
      if (lo >= hi) continue;
      const size_t bytes = size_t(hi - lo) * sizeof(float);
      w.set_metadata(kSliceKey + p.name, fmt::format("{},{}", lo - p.offset, hi - p.offset));
      w.add_generated(kExpAvg + p.name, "F32", {hi - lo}, bytes, [&optimizer, lo, hi](void* dst) {
        optimizer.exp_avg_f32(lo, hi - lo, static_cast<float*>(dst));
      });
      w.add_generated(kExpAvgSq + p.name, "F32", {hi - lo}, bytes, [&optimizer, lo, hi](void* dst) {
        optimizer.exp_avg_sq_f32(lo, hi - lo, static_cast<float*>(dst));
      });
    }
  w.write(path);
}

// Sharded master weights (ZeRO 1, 2 on a bf16 backend; ZeRO 3): every rank takes part in gathering each unit in turn;
// rank 0 keeps them, in layout order, for model.safetensors.
std::vector<float> gather_master_weights(DataParallel& dp, const ParamLayout& layout, const AdamW& optimizer) {
  std::vector<float> all, unit;
  if (dp.rank() == 0) all.resize(size_t(layout.total));
  for (size_t k = 0; k < layout.units(); k++) {
    dp.gather_master_weights(optimizer, k, unit);
    if (dp.rank() == 0) std::copy(unit.begin(), unit.end(), all.begin() + layout.unit_begin[k]);
  }
  return all;
}

void write_weights_from(const std::string& path, const ParamLayout& layout, const std::vector<float>& weights) {
  SafeTensorsWriter w;
  w.set_metadata("format", "pt");
  for (const ParamInfo& p : layout.params)
    w.add_borrowed(p.name, "F32", p.shape, weights.data() + p.offset, size_t(p.numel) * sizeof(float));
  w.write(path);
}

// A checkpoint's optimizer moments by parameter, from optimizer.safetensors (one process, or ZeRO 0) or from the
// shards of a sharded run (each parameter put together from the ranks' slices): the state loads at any world size.
class SavedMoments {
 public:
  explicit SavedMoments(const std::string& dir) {
    const std::string whole = join_path(dir, "optimizer.safetensors");
    if (stdfs::exists(whole)) {
      files_.push_back(SafeTensorsFile::open(whole));
      return;
    }
    for (const auto& e : stdfs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (starts_with(name, "optimizer-") && name.ends_with(".safetensors")) shard_names_.push_back(name);
    }
    std::sort(shard_names_.begin(), shard_names_.end());
    TK_CHECK(!shard_names_.empty(), "{} has neither optimizer.safetensors nor the shards of a sharded optimizer", dir);
    const int world = int(shard_names_.size());
    for (int r = 0; r < world; r++) {
      TK_CHECK(shard_names_[size_t(r)] == shard_file_name(r, world),
               "{}: the optimizer's shards are not {} files named {} ... {} ({} is there)", dir, world,
               shard_file_name(0, world), shard_file_name(world - 1, world), shard_names_[size_t(r)]);
      files_.push_back(SafeTensorsFile::open(join_path(dir, shard_names_[size_t(r)])));
    }
  }

  // m and v of parameter p, p.numel() values each.
  void read(const ParamInfo& p, float* m, float* v) const {
    if (shard_names_.empty()) {
      ParamInfo at0 = p;
      at0.offset = 0;
      read_state_tensor(*files_[0], kExpAvg + p.name, at0, m);
      read_state_tensor(*files_[0], kExpAvgSq + p.name, at0, v);
      return;
    }
    int64_t covered = 0;
    for (const auto& f : files_) {
      const auto it = f->metadata().find(kSliceKey + p.name);
      if (it == f->metadata().end()) continue;
      int64_t lo = -1, hi = -1;
      TK_CHECK(std::sscanf(it->second.c_str(), "%ld,%ld", &lo, &hi) == 2 && lo >= 0 && lo < hi && hi <= p.numel,
               "{}: the slice {} of {} is not a range of its {} elements", f->path(), it->second, p.name, p.numel);
      for (auto [prefix, out] : {std::pair{kExpAvg, m}, {kExpAvgSq, v}}) {
        const SafeTensorInfo* t = f->find(prefix + p.name);
        TK_CHECK(t && t->shape == std::vector<int64_t>{hi - lo}, "{}: {}{} is missing or not of {} elements",
                 f->path(), prefix, p.name, hi - lo);
        f->read_f32(*t, out + lo);
      }
      covered += hi - lo;
    }
    TK_CHECK(covered == p.numel, "the optimizer shards of {} hold {} of the {} elements of {}", files_[0]->path(),
             covered, p.numel, p.name);
  }

 private:
  std::vector<std::string> shard_names_;
  std::vector<std::unique_ptr<SafeTensorsFile>> files_;
};


// The step directories of a run directory, complete or not, oldest first.
std::vector<std::pair<int64_t, std::string>> step_dirs(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(run_dir, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && e.is_directory()) found.emplace_back(step, e.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// An incomplete step directory is named once per process: listings run many times in a run.
void warn_incomplete(const std::string& dir, const std::string& reason) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> hold(mutex);
  if (warned.insert(dir).second)
    log::warn("ignoring {}: not a complete checkpoint ({}); it is what an interrupted save or deletion left", dir,
              reason);
}

// complete.json: every other file of the checkpoint with its size, and the JSON files' checksums, taken once they are
// all durable.
void write_complete_marker(const std::string& dir, int64_t step) {
  json files = json::object();
  for (const auto& e : stdfs::directory_iterator(dir))
    if (e.is_regular_file()) files[e.path().filename().string()] = e.file_size();
  fs::write_file_atomic(join_path(dir, kCompleteMarker),
                        json{{"step", step}, {"files", files}, {"fnv1a64", json_file_checksums(dir)}}.dump(2) + "\n");
}

std::string check_marker(const std::string& dir) {
  const std::string path = join_path(dir, kCompleteMarker);
  const json marker = json::parse(fs::read_file(path), nullptr, false);
  if (marker.is_discarded() || !marker.contains("files") || !marker["files"].is_object() || marker["files"].empty())
    return fmt::format("{} is not a valid record of its files", kCompleteMarker);
  for (const auto& [name, size] : marker["files"].items()) {
    std::error_code ec;
    const uintmax_t actual = stdfs::file_size(join_path(dir, name), ec);
    if (ec) return fmt::format("{} is missing", name);
    if (!size.is_number_unsigned() || actual != size.get<uintmax_t>())
      return fmt::format("{} has {} bytes where {} records {}", name, actual, kCompleteMarker, size.dump());
  }
  return "";
}

// A checkpoint from before complete.json: counted when it has every file, each whole (the safetensors files'
// headers agree with their sizes), and its trainer state does not come from a version that writes the marker.
std::string check_unmarked(const std::string& dir) {
  for (const char* name : kUnmarkedFiles)
    if (!stdfs::is_regular_file(join_path(dir, name)))
      return fmt::format("{} is missing, and so is {}", name, kCompleteMarker);
  const json state = json::parse(fs::read_file(join_path(dir, "trainer_state.json")), nullptr, false);
  if (state.is_discarded() || !state.is_object()) return "trainer_state.json is not valid JSON";
  if (state.contains("checkpoint_format"))
    return fmt::format("{} is missing: the save was interrupted before it finished", kCompleteMarker);
  for (const char* name : {"model.safetensors", "optimizer.safetensors"}) {
    try {
      SafeTensorsFile::open(join_path(dir, name));
    } catch (const Error& e) {
      return e.what();
    }
  }
  return "";
}

// Deletes a directory of the run by renaming it to .del-NAME first, so that a kill during the deletion leaves a
// hidden name that start-up cleans (remove_interrupted_checkpoints), never half a step_N.
void remove_by_renaming(const std::string& dir) {
  const stdfs::path p(dir);
  const std::string hidden = (p.parent_path() / (kDeletePrefix + p.filename().string())).string();
  remove_all_or_fail(hidden);
  rename_or_fail(dir, hidden);
  fs::sync_directory(p.parent_path().string());
  remove_all_or_fail(hidden);
}

// Every step directory older than the newest keep_last complete checkpoints: complete ones, and incomplete
// ones (named as they go) that a kill left where the run saved or pruned.
void prune(const std::string& run_dir, int keep_last) {
  if (keep_last <= 0) return;
  const std::vector<std::string> complete = list_checkpoints(run_dir);
  if (complete.size() <= size_t(keep_last)) return;
  const int64_t oldest_kept = step_of(stdfs::path(complete[complete.size() - size_t(keep_last)]).filename().string());
  for (const auto& [step, dir] : step_dirs(run_dir)) {
    if (step >= oldest_kept) break;
    if (const std::string why = checkpoint_incomplete_reason(dir); !why.empty())
      log::warn("deleting {}, older than the checkpoints kept and incomplete ({})", dir, why);
    remove_by_renaming(dir);
  }
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
    s.step = json_integer<int64_t>(j.at("step"), source, "step", 0);
    s.tokens_seen = json_integer<int64_t>(j.at("tokens_seen"), source, "tokens_seen", 0);
    s.rng = j.at("rng");
    s.loader = j.at("loader");
    s.train_config = j.at("train_config");
    s.tokenizer_path = j.at("tokenizer").at("path").get<std::string>();
    const std::string fingerprint = j.at("tokenizer").at("fingerprint").get<std::string>();
    TK_CHECK(fingerprint.size() == 16 && fingerprint.find_first_not_of("0123456789abcdef") == std::string::npos,
             "{}: tokenizer.fingerprint \"{}\" is not 16 hexadecimal digits", source, fingerprint);
    s.tokenizer_fingerprint = std::stoull(fingerprint, nullptr, 16);
    if (j.contains("fp8_scaling")) s.fp8_scaling = j.at("fp8_scaling");
    return s;
  } catch (const json::exception& e) {
    fail("{} is not a valid trainer state: {}", source, e.what());
  }
}

json fp8_scaling_json(const Ops::Fp8ScalingState& st) {
  if (st.amax.empty()) return nullptr;
  json amax = json::object();
  for (const auto& [name, values] : st.amax) amax[name] = values;
  return {{"history_len", st.history_len}, {"steps", st.steps}, {"amax", amax}};
}

Ops::Fp8ScalingState fp8_scaling_from_json(const json& j, const ParamLayout& layout, const std::string& source) {
  Ops::Fp8ScalingState st;
  if (j.is_null()) return st;
  try {
    st.history_len = j.at("history_len").get<int>();
    st.steps = j.at("steps").get<int64_t>();
    for (const auto& [name, values] : j.at("amax").items()) {
      TK_CHECK(layout.find(name), "{}: the FP8 scales name {}, which the model does not have", source, name);
      st.amax[name] = values.get<std::vector<float>>();
    }
  } catch (const json::exception& e) {
    fail("{}: the FP8 scaling state is not valid: {}", source, e.what());
  }
  return st;
}

std::string checkpoint_dir_name(int64_t step) { return fmt::format("{}{:06}", kPrefix, step); }

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::string> out;
  for (const auto& [step, dir] : step_dirs(run_dir)) {
    if (const std::string why = checkpoint_incomplete_reason(dir); why.empty())
      out.push_back(dir);
    else
      warn_incomplete(dir, why);
  }
  return out;
}

bool holds_checkpoint_dirs(const std::string& run_dir) { return !step_dirs(run_dir).empty(); }

std::string checkpoint_incomplete_reason(const std::string& dir) {
  if (!stdfs::is_directory(dir)) return "not a directory";
  return stdfs::exists(join_path(dir, kCompleteMarker)) ? check_marker(dir) : check_unmarked(dir);
}

bool is_checkpoint(const std::string& dir) { return checkpoint_incomplete_reason(dir).empty(); }

bool looks_like_checkpoint(const std::string& dir) {
  const stdfs::path p(dir);
  if (!stdfs::is_directory(p)) return false;
  return step_of(p.lexically_normal().filename().string()) >= 0 || stdfs::exists(p / "trainer_state.json") ||
         stdfs::exists(p / kCompleteMarker) || stdfs::exists(p / "optimizer.safetensors");
}

std::string resolve_checkpoint(const std::string& path) {
  const bool latest = stdfs::path(path).filename() == "latest";
  if (!latest && looks_like_checkpoint(path) && !holds_checkpoint_dirs(path)) {
    const std::string why = checkpoint_incomplete_reason(path);
    TK_CHECK(why.empty(), "{} is not a complete checkpoint ({}): it is what an interrupted save or deletion left; "
             "use an earlier checkpoint of its run", path, why);
    check_json_files(path);
    return path;
  }
  std::string run_dir = latest ? stdfs::path(path).parent_path().string() : path;
  TK_CHECK(stdfs::is_directory(run_dir), "{} is neither a checkpoint nor a run directory", path);
  std::vector<std::string> all = list_checkpoints(run_dir);
  if (!all.empty()) {
    check_json_files(all.back());
    return all.back();
  }
  const std::vector<std::pair<int64_t, std::string>> dirs = step_dirs(run_dir);
  TK_CHECK(!dirs.empty(), "{} holds no checkpoint (no step_* directory)", run_dir);
  const std::string& newest = dirs.back().second;
  fail("{} holds no complete checkpoint: its step_* directories are what interrupted saves or deletions left (the "
       "newest, {}: {})",
       run_dir, stdfs::path(newest).filename().string(), checkpoint_incomplete_reason(newest));
}

void remove_checkpoint(const std::string& dir) { remove_by_renaming(dir); }

void remove_interrupted_checkpoints(const std::string& run_dir) {
  std::vector<std::string> left;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    // .old: the copy of a re-saved step that versions before .del- names kept while replacing it.
    if (starts_with(name, kTempPrefix) || starts_with(name, kDeletePrefix) ||
        (starts_with(name, kPrefix) && name.ends_with(".old")))
      left.push_back(e.path().string());
  }
  if (ec) fail("cannot list the run directory {}: {}", run_dir, ec.message());
  for (const std::string& path : left) {
    log::info("removing {}: left by an interrupted save or deletion", path);
    remove_all_or_fail(path);
  }
}

namespace {

// The checkpoint's files in `tmp`: rank 0's (config.json, the weights, the trainer state, the optimizer state when it
// is whole) and, sharded, each rank's own shard of the optimizer state.
void write_checkpoint_files(const std::string& tmp, const Model& model, const AdamW& optimizer,
                            const TrainerState& state, DataParallel* dp) {
  const bool leader = dp == nullptr || dp->rank() == 0;
  // Whole parameters (ZeRO 1, 2) are read below where there are no master weights: the last update's all-gathers
  // finished first (every rank: they are collectives).
  if (dp) dp->finish_parameter_gathers();
  // Sharded master weights (or ZeRO 3's sharded parameters) are gathered by every rank (a collective) before rank 0
  // writes them.
  std::vector<float> gathered;
  if (optimizer.sharded() && (optimizer.has_master_weights() || model.params_sharded()))
    gathered = gather_master_weights(*dp, model.layout(), optimizer);
  // Each file is fsynced and renamed into place, its directory synced (fs::AtomicFile), before the next.
  if (leader) {
    fs::write_file_atomic(join_path(tmp, "config.json"), model.config().to_hf_json().dump(2) + "\n");
    if (gathered.empty()) write_model_weights(join_path(tmp, "model.safetensors"), model.layout(), optimizer);
    else write_weights_from(join_path(tmp, "model.safetensors"), model.layout(), gathered);
    if (!optimizer.sharded())
      write_optimizer_state(join_path(tmp, "optimizer.safetensors"), model.layout(), optimizer);
  }
  if (optimizer.sharded())
    write_optimizer_shard(join_path(tmp, shard_file_name(dp->rank(), dp->world())), model.layout(), optimizer);
  if (leader) {
    TrainerState saved = state;
    saved.fp8_scaling = fp8_scaling_json(model.ops().fp8_scaling_state());
    json trainer_state = saved.to_json();
    trainer_state["checkpoint_format"] = kMarkedFormat;
    fs::write_file_atomic(join_path(tmp, "trainer_state.json"), trainer_state.dump(2) + "\n");
  }
}

// Whether every rank's part succeeded (each says whether its own did): the ranks' point of agreement, and a barrier.
bool all_ranks(DataParallel* dp, bool mine) { return dp == nullptr ? mine : dp->sum(mine ? 0.0 : 1.0) == 0; }

}  // namespace

std::string save_checkpoint(const std::string& run_dir, const Model& model, const AdamW& optimizer,
                            const TrainerState& state, int keep_last, DataParallel* dp) {
  const bool leader = dp == nullptr || dp->rank() == 0;
  const std::string name = checkpoint_dir_name(state.step);
  const std::string tmp = join_path(run_dir, kTempPrefix + name.substr(std::strlen(kPrefix)));
  const std::string final_dir = join_path(run_dir, name);
  std::string failure;
  if (leader) {
    remove_all_or_fail(tmp);  // a save of this step that failed earlier in the run
    std::error_code ec;
    stdfs::create_directories(tmp, ec);
    if (ec) failure = fmt::format("cannot create the checkpoint directory {}: {}", tmp, ec.message());
  }
  if (!all_ranks(dp, failure.empty()))
    fail("{}", failure.empty() ? "rank 0 could not create the checkpoint's directory" : failure);
  try {
    write_checkpoint_files(tmp, model, optimizer, state, dp);
  } catch (const Error& e) {
    failure = e.what();
  }
  const bool written = all_ranks(dp, failure.empty());
  if (!written || !failure.empty()) {
    std::error_code ec;
    if (leader) stdfs::remove_all(tmp, ec);  // what was written (a full disk: space needed by whatever runs next)
    fail("{}", failure.empty() ? fmt::format("another rank could not write its part of checkpoint {}", name) : failure);
  }
  if (leader) {
    // Last, once every other file is durable (every rank's): without it the directory is not a checkpoint.
    try {
      write_complete_marker(tmp, state.step);
      // Re-saving a step replaces the old directory only once the new one is complete.
      if (stdfs::exists(final_dir)) remove_by_renaming(final_dir);
      rename_or_fail(tmp, final_dir);
      fs::sync_directory(run_dir);
      prune(run_dir, keep_last);
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  if (!all_ranks(dp, failure.empty()))
    fail("{}", failure.empty() ? fmt::format("rank 0 could not complete checkpoint {}", name) : failure);
  return final_dir;
}

TrainerState read_trainer_state(const std::string& checkpoint_dir) {
  const std::string path = join_path(checkpoint_dir, "trainer_state.json");
  try {
    const std::string text = fs::read_file(path);
    check_json_file(checkpoint_dir, "trainer_state.json", text);
    return TrainerState::from_json(json::parse(text), path);
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}", path, e.what());
  }
}

std::string checkpoint_tokenizer(const std::string& checkpoint_dir) {
  const std::string recorded = read_trainer_state(checkpoint_dir).tokenizer_path;
  if (recorded.empty() || std::filesystem::path(recorded).is_absolute()) return recorded;
  return (std::filesystem::path(checkpoint_dir) / recorded).lexically_normal().string();
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
  // Before the backend's first FP8 cast, so that the resumed run scales as the uninterrupted one.
  if (!state.fp8_scaling.is_null())
    model.ops().set_fp8_scaling_state(fp8_scaling_from_json(state.fp8_scaling, layout, checkpoint_dir));
  const SavedMoments moments(checkpoint_dir);
  if (optimizer.moments_settable_by_range()) {
    // A tensor at a time: the whole state never sits in memory twice (a 7B model's is 91 GB as f32).
    std::unique_ptr<SafeTensorsFile> wf = SafeTensorsFile::open(join_path(checkpoint_dir, "model.safetensors"));
    std::vector<float> w, m, v;
    for (const ParamInfo& p : layout.params) {
      ParamInfo at0 = p;
      at0.offset = 0;
      for (std::vector<float>* b : {&w, &m, &v}) b->resize(size_t(p.numel));
      read_state_tensor(*wf, p.name, at0, w.data(), "the checkpoint's weights");
      moments.read(p, m.data(), v.data());
      optimizer.set_weights_f32(p.offset, p.numel, w.data());
      optimizer.set_moments_f32(p.offset, p.numel, m.data(), v.data());
    }
    optimizer.set_steps_taken(state.step);
    return state;
  }
  // load_params names any missing tensor, or one whose shape differs, with both shapes.
  std::vector<float> weights = load_params(model.config(), layout, join_path(checkpoint_dir, "model.safetensors"));
  std::vector<float> m(size_t(layout.total)), v(size_t(layout.total));
  for (const ParamInfo& p : layout.params) moments.read(p, m.data() + p.offset, v.data() + p.offset);
  optimizer.set_weights_f32(weights);
  optimizer.set_state_f32(m, v, state.step);
  return state;
}

}  // namespace tk
