// Checksums of a checkpoint's JSON files in its complete.json: FNV-1a 64 of each file's bytes (core/hash.h: the
// files are a few kilobytes, and the hash only has to catch an edit or a flipped bit, as the shard header's does).
#include "train/checkpoint_checksums.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/hash.h"

namespace tk {
namespace {

namespace stdfs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kCompleteMarker = "complete.json";
constexpr const char* kChecksumsKey = "fnv1a64";

std::string checksum_of(const std::string& text) { return fmt::format("{:016x}", fnv1a64(text.data(), text.size())); }

std::string path_in(const std::string& dir, const std::string& name) { return (stdfs::path(dir) / name).string(); }

// The checkpoint's complete.json, or null when it has none or it is not an object (the completeness check says so).
json read_marker(const std::string& dir) {
  std::error_code ec;
  if (!stdfs::is_regular_file(path_in(dir, kCompleteMarker), ec)) return nullptr;
  json marker = json::parse(fs::read_file(path_in(dir, kCompleteMarker)), nullptr, false);
  return marker.is_object() ? marker : json(nullptr);
}

// The format trainer_state.json (as `text`) says the checkpoint has: 1 when it names none.
int64_t checkpoint_format(const std::string& text) {
  const json state = json::parse(text, nullptr, false);
  if (!state.is_object() || !state.contains("checkpoint_format")) return 1;
  const json& f = state["checkpoint_format"];
  return f.is_number_integer() ? f.get<int64_t>() : kChecksummedCheckpointFormat;  // malformed: checked as the latest
}

}  // namespace

json json_file_checksums(const std::string& dir) {
  json sums = json::object();
  for (const auto& e : stdfs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.ends_with(".json") && name != kCompleteMarker)
      sums[name] = checksum_of(fs::read_file(e.path().string()));
  }
  return sums;
}

void check_json_file(const std::string& dir, const std::string& name, const std::string& text) {
  const json marker = read_marker(dir);
  if (marker.is_null()) return;
  const json* sums = marker.contains(kChecksumsKey) && marker[kChecksumsKey].is_object() ? &marker[kChecksumsKey]
                                                                                          : nullptr;
  if (!sums) {
    const std::string state_path = path_in(dir, "trainer_state.json");
    std::error_code ec;
    const std::string state = name == "trainer_state.json"       ? text
                              : stdfs::is_regular_file(state_path, ec) ? fs::read_file(state_path)
                                                                      : std::string();
    if (checkpoint_format(state) < kChecksummedCheckpointFormat) return;  // saved by a version before checksums
    fail("{}: {} records no checksums of the checkpoint's JSON files, which a checkpoint of format {} does: it was "
         "altered or is corrupt",
         dir, kCompleteMarker, kChecksummedCheckpointFormat);
  }
  const auto it = sums->find(name);
  TK_CHECK(it != sums->end() && it->is_string(),
           "{}: {} records no checksum of {}, though it records them for the checkpoint's JSON files: it was altered "
           "or is corrupt",
           dir, kCompleteMarker, name);
  const std::string actual = checksum_of(text);
  TK_CHECK(actual == it->get<std::string>(),
           "{} was changed after its checkpoint was saved: its bytes hash to {} where {} recorded {}. tokamak does not "
           "resume from or load an edited checkpoint: restore the file, or use another checkpoint",
           path_in(dir, name), actual, kCompleteMarker, it->get<std::string>());
}

void check_json_files(const std::string& dir) {
  const json marker = read_marker(dir);
  if (marker.is_null() || !marker.contains("files") || !marker["files"].is_object()) return;
  for (const auto& [name, size] : marker["files"].items()) {
    std::error_code ec;
    if (name.ends_with(".json") && stdfs::is_regular_file(path_in(dir, name), ec))
      check_json_file(dir, name, fs::read_file(path_in(dir, name)));
  }
}

}  // namespace tk
