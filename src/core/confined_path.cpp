// path_inside: a lexical check (relative, no "..") that needs no file to exist, then the same check
// on the path with its symbolic links resolved, so that a link inside the directory cannot lead out.
#include "core/confined_path.h"

#include <filesystem>

#include "core/error.h"

namespace tk {
namespace stdfs = std::filesystem;

namespace {

bool lexically_inside(const stdfs::path& name) {
  if (name.empty() || name.is_absolute() || name.has_root_name()) return false;
  for (const stdfs::path& part : name)
    if (part == "..") return false;
  return true;
}

// Whether `p` is `base` or below it; both absolute and normal.
bool starts_with(const stdfs::path& p, const stdfs::path& base) {
  auto b = base.begin(), q = p.begin();
  for (; b != base.end(); ++b, ++q) {
    if (b->empty()) continue;  // the trailing "" of a path ending in a separator
    if (q == p.end() || *q != *b) return false;
  }
  return true;
}

}  // namespace

std::string path_inside(const std::string& dir, const std::string& name, std::string_view source) {
  const stdfs::path rel(name);
  TK_CHECK(name.find('\0') == std::string::npos && lexically_inside(rel),
           "{} names the file \"{}\": a file it lists must be a relative path inside {}, without \"..\"", source, name,
           dir);
  const stdfs::path joined = stdfs::path(dir) / rel;
  std::error_code ec;
  const stdfs::path real_dir = stdfs::weakly_canonical(dir, ec);
  const stdfs::path real = ec ? stdfs::path() : stdfs::weakly_canonical(joined, ec);
  TK_CHECK(!ec, "cannot resolve {} (named in {}): {}", joined.string(), source, ec.message());
  TK_CHECK(starts_with(real, real_dir), "{} names the file \"{}\", which is a link to {}, outside {}", source, name,
           real.string(), dir);
  return joined.string();
}

}  // namespace tk
