// Helpers for the data-pipeline tests: a byte-level tokenizer (id = byte, eot = 256), so the tests do
// not depend on a real vocabulary, and a temporary directory removed at the end of each test.
#pragma once
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenizer.h"

namespace tk::testing {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kEot = 256;
  explicit ByteTokenizer(uint64_t fingerprint = 0xb17e5b17e5ull) : fingerprint_(fingerprint) {}

  std::vector<int32_t> encode(std::string_view text, bool = false) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids) s += id == kEot ? std::string("<|endoftext|>") : std::string(1, char(id));
    return s;
  }
  int32_t vocab_size() const override { return 257; }
  int32_t eot_id() const override { return kEot; }
  std::string eot_text() const override { return "<|endoftext|>"; }
  uint64_t fingerprint() const override { return fingerprint_; }
  std::string kind() const override { return "bytes"; }

 private:
  uint64_t fingerprint_;
};

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tokamak-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path(const std::string& name = "") const { return name.empty() ? path_ : path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_text(const std::string& path, std::string_view contents) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary).write(contents.data(), std::streamsize(contents.size()));
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Runs `fn` and returns the tk::Error message it throws ("" and a test failure when it throws none).
template <class F> std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const tk::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a tk::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected a tk::Error, but nothing was thrown";
  return "";
}

// A full disk, simulated: while alive, writes past `bytes` in any file fail with EFBIG (SIGXFSZ,
// which would kill the process, is ignored), as they would with ENOSPC on a full disk.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit lim = saved_;
    lim.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_{};
  sighandler_t old_handler_;
};

// The names of the files in `dir`, sorted.
inline std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace tk::testing
