// The checksums of a checkpoint's JSON files (config.json, trainer_state.json), which complete.json records beside
// every file's size: an edit that keeps a file's size (renaming "lr" to "lx", next_batch 2 to 7) is refused when the
// checkpoint is read, never resumed from. The tensor files carry their own checksums (io/safetensors.h).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace tk {

// trainer_state.json's "checkpoint_format" from this version on: complete.json records the JSON files' checksums.
constexpr int kChecksummedCheckpointFormat = 3;

// The checksum of every JSON file of the checkpoint directory `dir` but complete.json: {name: 16 hex digits}, for
// complete.json's "fnv1a64".
nlohmann::json json_file_checksums(const std::string& dir);

// A tk::Error naming the file when `text`, the bytes of the checkpoint's JSON file `name`, differ from the checksum
// its complete.json records. A checkpoint without complete.json (of a version before it) has none to check; one of
// format 3 or later (its trainer state says, or complete.json records any checksum) must record it.
void check_json_file(const std::string& dir, const std::string& name, const std::string& text);

// check_json_file for each JSON file the checkpoint's complete.json lists.
void check_json_files(const std::string& dir);

}  // namespace tk
