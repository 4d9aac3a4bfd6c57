// run_agreement.h: the parts of a training run's fingerprint, read from the files each rank sees.
#include "train/run_agreement.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;

// A safetensors file's identity: its size and its header (an 8-byte little-endian length, then that much JSON).
std::string safetensors_identity(const stdfs::path& file) {
  std::ifstream in(file, std::ios::binary);
  TK_CHECK(in.good(), "{}: cannot be read", file.string());
  unsigned char len_bytes[8] = {};
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t len = 0;
  for (int i = 7; i >= 0; i--) len = (len << 8) | len_bytes[i];
  const uint64_t size = stdfs::file_size(file);
  // A header longer than the file is the loader's error to report; here it only bounds the read.
  std::string header(size_t(std::min<uint64_t>(len, size > 8 ? size - 8 : 0)), '\0');
  in.read(header.data(), std::streamsize(header.size()));
  return file.filename().string() + '\0' + std::to_string(size) + '\0' + header;
}

std::string model_identity(const ModelSource& model) {
  std::string out = model.config.to_hf_json().dump();
  const std::string dir = !model.checkpoint_dir.empty() ? model.checkpoint_dir : model.weights_path;
  if (dir.empty()) return out;  // a fresh model: its config is all of it
  std::vector<stdfs::path> files;
  for (const stdfs::directory_entry& e : stdfs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors" &&
        e.path().filename().string().rfind("optimizer", 0) != 0)
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const stdfs::path& f : files) out += '\0' + safetensors_identity(f);
  return out;
}

std::string data_identity(const std::string& data_dir) {
  nlohmann::json meta = nlohmann::json::parse(fs::read_file((stdfs::path(data_dir) / "meta.json").string()));
  if (meta.contains("tokenizer") && meta["tokenizer"].is_object()) meta["tokenizer"].erase("path");
  return meta.dump();
}

}  // namespace

dist::Fingerprint run_inputs_fingerprint(const TrainConfig& cfg, const ModelSource& model, uint64_t tokenizer_fingerprint,
                                         const std::string& resume_checkpoint) {
  nlohmann::json settings = cfg.to_json();
  for (const char* path : {"model", "data", "tokenizer"}) settings.erase(path);
  if (is_preset_name(cfg.model)) settings["model"] = cfg.model;
  dist::Fingerprint f;
  f.add("configuration", settings.dump())
      .add("model", model_identity(model))
      .add("data", data_identity(cfg.data))
      .add("tokenizer", std::to_string(tokenizer_fingerprint));
  // Every rank adds the same parts: a run that does not resume agrees on an empty one.
  std::string resumed;
  if (!resume_checkpoint.empty()) {
    const stdfs::path complete = stdfs::path(resume_checkpoint) / "complete.json";
    resumed = fs::read_file((stdfs::exists(complete) ? complete : stdfs::path(resume_checkpoint) / "trainer_state.json")
                                .string());
  }
  f.add("checkpoint resumed", resumed);
  return f;
}

}  // namespace tk
