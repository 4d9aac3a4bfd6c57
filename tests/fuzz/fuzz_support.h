// What every fuzz target shares: a scratch directory of its own (the parsers read files, so each input
// is written to one first), and the rule that bad input may only ever end in a tk::Error. Any other
// exception escapes to libFuzzer, which reports it as a crash: a parser that lets a std::out_of_range or
// a json::type_error through gives the user "internal error" instead of a sentence naming the file.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"

namespace tk::fuzz {

// /tmp/tokamak-fuzz-<pid>/, removed when the process exits normally.
class ScratchDir {
 public:
  ScratchDir()
      : path_((std::filesystem::temp_directory_path() / ("tokamak-fuzz-" + std::to_string(::getpid()))).string()) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path();
}

// Writes `bytes` to scratch_dir()/name (parent directories made) and returns the path.
inline std::string write_file(const std::string& name, std::string_view bytes) {
  const std::filesystem::path p = std::filesystem::path(scratch_dir()) / name;
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
  return p.string();
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The input cut at its first NUL byte: two files in one input (encoder.json and vocab.bpe, ...).
inline std::pair<std::string_view, std::string_view> split_at_nul(std::string_view s) {
  const size_t at = s.find('\0');
  if (at == std::string_view::npos) return {s, {}};
  return {s.substr(0, at), s.substr(at + 1)};
}

// Runs `parse`; a tk::Error is the expected answer to bad input, anything else propagates.
template <class F>
void expect_clear_errors(F&& parse) {
  try {
    parse();
  } catch (const tk::Error&) {
  }
}

// A property the parser promises; breaking it is a crash libFuzzer records.
inline void require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace tk::fuzz
