// Small JSON files of things measured once per machine and reused by later runs (the GPU's ceilings,
// the fastest cuBLASLt algorithm of each GEMM shape): $XDG_CACHE_HOME/tokamak/NAME, else
// ~/.cache/tokamak/NAME. Reading never fails a run: a missing file is empty, and a file that is not a
// JSON object is reported and treated as empty (it is rewritten whole at the next save). Saving is atomic
// (a reader sees the old file or the new one) and a failure to save is a warning: the values are measured
// again next time.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace tk::cache {

// The path of the cache file `name`.
std::string path_of(const std::string& name);

// The file's JSON object; empty when the file is missing or unreadable (with a warning naming `what`, the
// values that will be measured again).
nlohmann::json read(const std::string& path, const std::string& what);

// Writes `j` to `path` atomically, creating the folder; false (after a warning) when it cannot.
bool write(const std::string& path, const nlohmann::json& j);

}  // namespace tk::cache
