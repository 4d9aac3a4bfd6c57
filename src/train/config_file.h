// A training configuration as a TOML file: `tokamak train --config FILE` reads one, and every run directory
// holds one (config.toml, its resolved configuration), so that a run can be repeated from its directory alone.
// One key a flag of `tokamak train`, as it is typed without its dashes (batch-tokens = 65536); values are
// strings, integers, floats and booleans, nothing nested. docs/config.md describes the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tk {

struct ConfigEntry {
  std::string key;       // as written: a flag name without its dashes
  nlohmann::json value;  // a boolean, an integer, a float or a string
  int64_t line = 0;      // where the key is in the file, for messages
};

struct ConfigFile {
  std::string path;
  std::vector<ConfigEntry> entries;  // in the order of the file
};

// The flag of a TrainConfig JSON key and back: '_' and '-' swapped, except that the key logits_chunk_mib is the
// flag --logits-chunk (in MiB, as its help says).
std::string flag_of_config_key(const std::string& key);
std::string config_key_of_flag(const std::string& flag);

// A tk::Error naming the file and line for what is not TOML, or a value that is a table, an array or a date.
ConfigFile read_config_file(const std::string& path);

// The TOML text of `config` (a TrainConfig's JSON, each key written as its flag's name), after `header`'s lines as
// comments. Floats are written in their shortest form that reads back as the same double.
std::string config_file_text(const nlohmann::json& config, const std::string& header);

}  // namespace tk
