#include "core/cache.h"

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"

namespace stdfs = std::filesystem;

namespace tk::cache {

std::string path_of(const std::string& name) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const stdfs::path base = xdg && *xdg ? stdfs::path(xdg) : stdfs::path(home && *home ? home : ".") / ".cache";
  return (base / "tokamak" / name).string();
}

nlohmann::json read(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!stdfs::exists(path, ec)) return nlohmann::json::object();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(fs::read_file(path), nullptr, false);
  } catch (const Error& e) {
    log::warn("{}: measuring the {} again", e.what(), what);
    return nlohmann::json::object();
  }
  if (!j.is_object()) {
    log::warn("{} is not a JSON object: measuring the {} again and rewriting it", path, what);
    return nlohmann::json::object();
  }
  return j;
}

bool write(const std::string& path, const nlohmann::json& j) {
  try {
    std::error_code ec;
    stdfs::create_directories(stdfs::path(path).parent_path(), ec);
    fs::write_file_atomic(path, j.dump(2) + "\n");
    return true;
  } catch (const Error& e) {
    log::warn("{} could not be written ({}); what it would hold is measured again next time", path, e.what());
    return false;
  }
}

}  // namespace tk::cache
