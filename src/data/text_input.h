// Prepare's input: the files under the paths a user names (.txt, .jsonl, .jsonl.gz, .jsonl.zst, .parquet), read
// as records (a whole .txt file, or one JSON line), decompressing while streaming so that a corpus never
// has to fit in memory or be unpacked first. Parquet files are read by column instead (parquet_text.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tk {

enum class InputFormat { Text, Jsonl, JsonlGzip, JsonlZstd, Parquet };

struct InputFile {
  std::string path;
  InputFormat format;
  uint64_t bytes = 0;  // size on disk (compressed for .gz/.zst)
};

// Files named directly are taken in the order given (an unsupported extension is an error);
// directories are walked recursively, their supported files taken in sorted path order, so that the
// document order never depends on the filesystem. A missing path, a file of 0 bytes, no input at all,
// or a file named twice is a tk::Error.
std::vector<InputFile> find_inputs(const std::vector<std::string>& paths);

// One unit of input: the whole text of a .txt file, or one raw JSON line (parsed later, on a worker).
struct Record {
  std::string data;
  uint64_t line = 0;  // 1-based line number of a JSON line; 0 for a .txt file
};

// Reads one input file, not a Parquet one, as records. Blank JSON lines are skipped; a file holding no record, a truncated
// or corrupt compressed stream, and read errors are tk::Errors naming the file.
class RecordReader {
 public:
  explicit RecordReader(const InputFile& file);
  ~RecordReader();

  bool next(Record& out);  // false at the end of the file
  // Bytes of the file on disk consumed so far (compressed bytes for .gz/.zst): drives the progress bar.
  uint64_t bytes_consumed() const;

  class Source;  // a stream of decompressed bytes

 private:
  bool next_line(std::string& line);

  InputFile file_;
  std::unique_ptr<Source> source_;
  std::string buffer_;  // decompressed bytes not yet returned as lines
  size_t buffer_pos_ = 0;
  uint64_t line_no_ = 0, records_ = 0;
  bool eof_ = false;
};

// One JSON line as a record: a JSON object with its fields in their order. Anything else is a tk::Error
// "FILE:LINE: ...".
nlohmann::ordered_json parse_json_record(std::string_view line, const std::string& file, uint64_t line_no);

// The document text of one JSON line: the string field `field`. Anything else is a tk::Error
// "FILE:LINE: ..." that says what the line holds instead.
std::string json_document_text(std::string_view line, const std::string& field, const std::string& file,
                               uint64_t line_no);

}  // namespace tk
