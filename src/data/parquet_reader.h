// Reading the string columns of a Parquet file, column by column and row group by row group: memory holds one
// column chunk of one row group at a time (as stored, then decoded), never the file. What it reads: flat string
// columns (BYTE_ARRAY, STRING or unannotated; required or nullable) and `messages` columns, lists of {role,
// content} structs as chat sets store them; data pages v1 and v2 and dictionary pages; the encodings PLAIN,
// PLAIN_DICTIONARY / RLE_DICTIONARY, DELTA_LENGTH_BYTE_ARRAY and DELTA_BYTE_ARRAY (with RLE / bit-packed levels
// and DELTA_BINARY_PACKED lengths); the codecs UNCOMPRESSED, SNAPPY, GZIP, ZSTD, BROTLI and LZ4_RAW
// (docs/data.md). Anything else, and any corruption, is a tk::Error naming the file, the column and the reason.
//
// For the commands that make training records from rows:
//
//   ParquetRowReader rows("chat.parquet", {"id"}, "messages");
//   for (ParquetRow row; rows.next(row);)
//     for (const ChatMessage& m : *row.messages) ...   // row.strings[0] is the "id" column's value
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/parquet_metadata.h"
#include "data/parquet_pages.h"
#include "data/parquet_schema.h"

namespace tk::parquet {

// One message of a messages column; a field that is null in the file is nullopt (an assistant turn that only
// calls tools has a null content). A null struct reads as both fields null.
struct ChatMessage {
  std::optional<std::string> role, content;
  bool operator==(const ChatMessage&) const = default;
};

// One row group's values of a string column: one per row, nullopt for a null.
using StringValues = std::vector<std::optional<std::string>>;
// One row group's values of a messages column: one list per row, nullopt for a null list.
using MessageLists = std::vector<std::optional<std::vector<ChatMessage>>>;

class ParquetFile {
 public:
  // Opens `path` and reads its footer and schema: a file that is not Parquet, is truncated, is encrypted or has a
  // corrupt footer is a tk::Error naming it.
  explicit ParquetFile(std::string path);
  ~ParquetFile();
  ParquetFile(const ParquetFile&) = delete;
  ParquetFile& operator=(const ParquetFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_bytes() const { return size_; }
  int64_t rows() const { return meta_.num_rows; }
  size_t row_groups() const { return meta_.row_groups.size(); }
  int64_t rows(size_t row_group) const { return meta_.row_groups.at(row_group).num_rows; }
  uint64_t stored_bytes(size_t row_group) const;  // of its column chunks, as the footer says
  const Schema& schema() const { return schema_; }
  const FileMetaData& metadata() const { return meta_; }
  bool has_column(const std::string& name) const { return bool(schema_.top_level(name)); }
  std::vector<std::string> column_names() const { return schema_.top_level_names(); }

  // The top-level column `name` as a string column or a messages column; errors name the file and column.
  StringColumn string_column(const std::string& name) const;
  MessagesColumn messages_column(const std::string& name) const;

  // One row group's values of a column. These read the file with pread and change nothing: threads may read
  // row groups of one ParquetFile at once (a pipeline's workers, a row group each).
  StringValues read_strings(size_t row_group, const StringColumn& column) const;
  MessageLists read_messages(size_t row_group, const MessagesColumn& column) const;

  // One column chunk of a string leaf as stored, split into its pages; `levels` gets the chunk's codec. For
  // readers that decode a chunk's pages on several threads (parquet_text.h).
  ColumnChunkPages read_chunk(size_t row_group, const StringColumn& column, LeafColumn& levels) const;
  // "FILE: column "NAME", row group N": what errors about a chunk begin with.
  std::string where(const std::string& column, size_t row_group) const;

 private:
  std::string read_at(uint64_t offset, uint64_t n) const;
  // The chunk's levels and non-null values, decoded whole.
  DecodedLevels decode_chunk(size_t row_group, const StringColumn& column) const;

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0, data_end_ = 0;  // data_end_: where the footer begins
  FileMetaData meta_;
  Schema schema_;
};

// A row of ParquetRowReader: the string columns asked for, in that order, and the messages column if one was.
struct ParquetRow {
  std::vector<std::optional<std::string>> strings;
  std::optional<std::vector<ChatMessage>> messages;
};

// A file's rows in order, decoded a row group at a time. The columns are checked when the reader is made.
class ParquetRowReader {
 public:
  ParquetRowReader(std::string path, const std::vector<std::string>& string_columns,
                   const std::string& messages_column = "");

  bool next(ParquetRow& row);                        // false after the last row
  uint64_t row_index() const { return row_index_; }  // 0-based in the file: of the row next() gave last
  const ParquetFile& file() const { return file_; }

 private:
  ParquetFile file_;
  std::vector<StringColumn> strings_;
  std::optional<MessagesColumn> messages_;
  size_t group_ = 0, in_group_ = 0;  // the next row: its row group, its place there
  uint64_t row_index_ = 0, next_index_ = 0;
  std::vector<StringValues> string_values_;
  MessageLists message_values_;
};

}  // namespace tk::parquet
