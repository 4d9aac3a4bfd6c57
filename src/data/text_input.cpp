// Finding prepare's input files and reading them as records: plain reads for .txt/.jsonl, zlib's
// gzread for .jsonl.gz (which also handles multi-member files), zstd's streaming API for .jsonl.zst.
#include "data/text_input.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"

namespace tk {
namespace stdfs = std::filesystem;

namespace {

constexpr size_t kReadBytes = 1 << 20;

std::optional<InputFormat> format_of(const std::string& path) {
  auto ends = [&](std::string_view suffix) {
    return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends(".txt")) return InputFormat::Text;
  if (ends(".jsonl")) return InputFormat::Jsonl;
  if (ends(".jsonl.gz")) return InputFormat::JsonlGzip;
  if (ends(".jsonl.zst")) return InputFormat::JsonlZstd;
  if (ends(".parquet")) return InputFormat::Parquet;
  return std::nullopt;
}

// Why a file of data that prepare cannot read is skipped, or nullptr for a file that is not data (a README, a
// LICENSE, a checksum list, ...), which is skipped without a word.
const char* why_unread(const std::string& path) {
  auto ends = [&](std::string_view suffix) {
    return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends(".arrow") || ends(".feather"))
    return "Arrow IPC files are not supported: convert them to .parquet or .jsonl";
  for (const char* json : {".json", ".json.gz", ".json.zst"})
    if (ends(json))
      return "a .json file is one JSON document, not JSON Lines: name it .jsonl if it holds one object a line";
  if (ends(".ndjson")) return "newline-delimited JSON is read under the name .jsonl";
  if (ends(".csv") || ends(".tsv")) return "CSV and TSV are not supported: convert them to .jsonl";
  for (const char* compressed : {".gz", ".zst", ".bz2", ".xz", ".lz4", ".zip"})
    if (ends(compressed)) return "compressed input is read as .jsonl.gz and .jsonl.zst only";
  return nullptr;
}

// Why an entry of an input directory that is not a regular file is not read, or nullptr for a directory (which the
// listing enters). Named, so that a FIFO or a link is never passed over without a word.
const char* why_not_a_file(const stdfs::directory_entry& e) {
  std::error_code ec;
  if (e.is_directory(ec))
    return e.is_symlink(ec) ? "a symbolic link to a directory is not followed: give the directory itself to --input"
                            : nullptr;
  if (e.is_symlink(ec) && !stdfs::exists(e.path(), ec)) return "a symbolic link to nothing";
  return "not a regular file but a FIFO, a socket or a device: documents are read from files";
}

// One warning per reason, naming the files (the first few of many).
void warn_unread(const std::string& dir, const std::map<std::string, std::vector<std::string>>& unread) {
  for (const auto& [why, files] : unread) {
    std::string names;
    for (size_t i = 0; i < files.size() && i < 5; i++) names += (i ? ", " : "") + files[i];
    if (files.size() > 5) names += fmt::format(" and {} more", files.size() - 5);
    log::warn("input directory {}: skipping {} file{} that tokamak cannot read: {} ({})", dir, files.size(),
              files.size() == 1 ? "" : "s", names, why);
  }
}

std::vector<std::string> files_in_directory(const std::string& dir) {
  std::vector<std::string> found;
  std::map<std::string, std::vector<std::string>> unread;  // by reason
  try {
    for (const auto& e : stdfs::recursive_directory_iterator(dir)) {
      const std::string path = e.path().string();
      if (!e.is_regular_file()) {
        if (const char* why = why_not_a_file(e)) unread[why].push_back(path);
        continue;
      }
      if (format_of(path)) {
        found.push_back(path);
      } else if (const char* why = why_unread(path)) {
        unread[why].push_back(path);
      }
    }
  } catch (const stdfs::filesystem_error& e) {
    fail("cannot read input directory {}: {}", dir, e.code().message());
  }
  std::sort(found.begin(), found.end());
  for (auto& [why, files] : unread) std::sort(files.begin(), files.end());
  warn_unread(dir, unread);
  return found;
}

}  // namespace

std::vector<InputFile> find_inputs(const std::vector<std::string>& paths) {
  TK_CHECK(!paths.empty(),
           "no input given: name .txt/.jsonl/.jsonl.gz/.jsonl.zst/.parquet files or directories with --input");
  std::vector<InputFile> files;
  std::set<std::string> seen;
  auto add = [&](const std::string& path) {
    std::error_code ec;
    const uint64_t bytes = stdfs::file_size(path, ec);
    if (ec) fail("cannot read input {}: {}", path, ec.message());
    if (bytes == 0) fail("input {} is empty", path);
    if (!seen.insert(stdfs::weakly_canonical(path, ec).string()).second)
      fail("input {} is named twice (directly or inside a directory given to --input)", path);
    files.push_back({path, *format_of(path), bytes});
  };
  for (const std::string& p : paths) {
    std::error_code ec;
    const auto st = stdfs::status(p, ec);
    if (!stdfs::exists(st)) fail("input {} does not exist", p);
    if (stdfs::is_directory(st)) {
      std::vector<std::string> found = files_in_directory(p);
      if (found.empty()) fail("input directory {} holds no .txt, .jsonl, .jsonl.gz, .jsonl.zst or .parquet files", p);
      for (const std::string& f : found) add(f);
    } else {
      if (!format_of(p)) fail("input {} is not a .txt, .jsonl, .jsonl.gz, .jsonl.zst or .parquet file", p);
      add(p);
    }
  }
  return files;
}

// A stream of decompressed bytes from one file.
class RecordReader::Source {
 public:
  virtual ~Source() = default;
  virtual size_t read(char* dst, size_t n) = 0;  // 0 only at the end of the stream
  virtual uint64_t consumed() const = 0;         // bytes of the file read so far
};

namespace {

class PlainSource final : public RecordReader::Source {
 public:
  explicit PlainSource(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot read {}: {}", path_, std::strerror(errno));
  }
  ~PlainSource() override { ::close(fd_); }

  size_t read(char* dst, size_t n) override {
    for (;;) {
      ssize_t r = ::read(fd_, dst, n);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail("cannot read {}: {}", path_, std::strerror(errno));
      consumed_ += uint64_t(r);
      return size_t(r);
    }
  }
  uint64_t consumed() const override { return consumed_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t consumed_ = 0;
};

class GzipSource final : public RecordReader::Source {
 public:
  explicit GzipSource(std::string path) : path_(std::move(path)) {
    gz_ = gzopen(path_.c_str(), "rb");
    if (!gz_) fail("cannot read {}: {}", path_, std::strerror(errno));
    gzbuffer(gz_, kReadBytes);
  }
  ~GzipSource() override { gzclose(gz_); }

  size_t read(char* dst, size_t n) override {
    int r = gzread(gz_, dst, unsigned(std::min<size_t>(n, INT_MAX)));
    int err = Z_OK;
    const char* msg = gzerror(gz_, &err);
    if (r < 0) fail("cannot read {}: {}", path_, err == Z_ERRNO ? std::strerror(errno) : msg);
    // zlib returns what it has at a premature end and flags it as Z_BUF_ERROR.
    if (r == 0 && err == Z_BUF_ERROR) fail("{} is truncated: its gzip stream ends early ({})", path_, msg);
    return size_t(r);
  }
  uint64_t consumed() const override { return uint64_t(gzoffset(gz_)); }

 private:
  std::string path_;
  gzFile gz_ = nullptr;
};

class ZstdSource final : public RecordReader::Source {
 public:
  explicit ZstdSource(std::string path) : file_(path), path_(std::move(path)), in_buf_(ZSTD_DStreamInSize()) {
    stream_ = ZSTD_createDStream();
    TK_CHECK(stream_, "out of memory creating a zstd stream for {}", path_);
  }
  ~ZstdSource() override { ZSTD_freeDStream(stream_); }

  size_t read(char* dst, size_t n) override {
    ZSTD_outBuffer out{dst, n, 0};
    while (out.pos < out.size) {
      if (in_.pos == in_.size && !eof_) refill();
      const size_t in_before = in_.pos, out_before = out.pos;
      const size_t ret = ZSTD_decompressStream(stream_, &out, &in_);
      if (ZSTD_isError(ret)) fail("{} is not a valid zstd stream: {}", path_, ZSTD_getErrorName(ret));
      const bool progressed = in_.pos != in_before || out.pos != out_before;
      // ret == 0: a frame ended and is fully flushed. Judged only on progress, because an idle
      // decoder given no input returns a size hint, not 0.
      if (progressed) frame_open_ = ret != 0;
      if (!progressed && eof_) break;
    }
    if (out.pos == 0 && frame_open_) fail("{} is truncated: its zstd stream ends inside a frame", path_);
    return out.pos;
  }
  uint64_t consumed() const override { return file_.consumed(); }

 private:
  void refill() {
    const size_t got = file_.read(in_buf_.data(), in_buf_.size());
    eof_ = got == 0;
    in_ = {in_buf_.data(), got, 0};
  }

  PlainSource file_;
  std::string path_;
  std::vector<char> in_buf_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  ZSTD_DStream* stream_ = nullptr;
  bool eof_ = false, frame_open_ = false;
};

std::unique_ptr<RecordReader::Source> open_source(const InputFile& f) {
  switch (f.format) {
    case InputFormat::JsonlGzip: return std::make_unique<GzipSource>(f.path);
    case InputFormat::JsonlZstd: return std::make_unique<ZstdSource>(f.path);
    case InputFormat::Text:
    case InputFormat::Jsonl: break;
    case InputFormat::Parquet: fail("{} is a Parquet file: it is read by column, not as records", f.path);
  }
  return std::make_unique<PlainSource>(f.path);
}

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

}  // namespace

RecordReader::RecordReader(const InputFile& file) : file_(file), source_(open_source(file)) {}

RecordReader::~RecordReader() = default;

uint64_t RecordReader::bytes_consumed() const { return source_->consumed(); }

bool RecordReader::next(Record& out) {
  if (file_.format == InputFormat::Text) {
    if (eof_) return false;
    out.data.clear();
    out.line = 0;
    std::vector<char> chunk(kReadBytes);
    while (size_t n = source_->read(chunk.data(), chunk.size())) out.data.append(chunk.data(), n);
    eof_ = true;
    return true;
  }
  std::string line;
  while (next_line(line)) {
    if (is_blank(line)) continue;
    out.data = std::move(line);
    out.line = line_no_;
    records_++;
    return true;
  }
  TK_CHECK(records_ > 0, "input {} holds no JSON lines", file_.path);
  return false;
}

bool RecordReader::next_line(std::string& line) {
  for (;;) {
    const size_t nl = buffer_.find('\n', buffer_pos_);
    if (nl != std::string::npos || (eof_ && buffer_pos_ < buffer_.size())) {
      const size_t end = nl == std::string::npos ? buffer_.size() : nl;
      line.assign(buffer_, buffer_pos_, end - buffer_pos_);
      buffer_pos_ = end + 1;
      line_no_++;
      return true;
    }
    if (eof_) return false;
    buffer_.erase(0, buffer_pos_);
    buffer_pos_ = 0;
    const size_t have = buffer_.size();
    buffer_.resize(have + kReadBytes);
    const size_t n = source_->read(buffer_.data() + have, kReadBytes);
    buffer_.resize(have + n);
    eof_ = n == 0;
  }
}

namespace {

template <class Json>
Json parse_json_line(std::string_view line, const std::string& file, uint64_t line_no) {
  try {
    return Json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    // what() reads "[json.exception.parse_error.101] parse error at line 1, column 7: ...": keep what
    // follows the tag, without the parser's "line 1", which would contradict the file's line number.
    std::string why = e.what();
    if (size_t close = why.find("] "); close != std::string::npos) why.erase(0, close + 2);
    if (size_t at = why.find("at line 1, column"); at != std::string::npos) why.replace(at, 17, "at column");
    fail("{}:{}: not valid JSON: {}", file, line_no, why);
  }
}

}  // namespace

nlohmann::ordered_json parse_json_record(std::string_view line, const std::string& file, uint64_t line_no) {
  nlohmann::ordered_json j = parse_json_line<nlohmann::ordered_json>(line, file, line_no);
  if (!j.is_object()) fail("{}:{}: expected a JSON object, found {}", file, line_no, j.type_name());
  return j;
}

std::string json_document_text(std::string_view line, const std::string& field, const std::string& file,
                               uint64_t line_no) {
  const nlohmann::json j = parse_json_line<nlohmann::json>(line, file, line_no);
  if (!j.is_object()) fail("{}:{}: expected a JSON object with a \"{}\" field, found {}", file, line_no, field, j.type_name());
  auto it = j.find(field);
  if (it == j.end()) {
    std::string keys;
    for (const auto& [k, v] : j.items()) keys += (keys.empty() ? "" : ", ") + k;
    fail("{}:{}: no \"{}\" field (the object has: {}); name the text field with --text-field", file, line_no, field,
         keys.empty() ? "no fields" : keys);
  }
  if (!it->is_string()) fail("{}:{}: field \"{}\" is a {}, not a string", file, line_no, field, it->type_name());
  return it->get<std::string>();
}

}  // namespace tk
