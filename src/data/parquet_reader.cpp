// ParquetFile and ParquetRowReader (parquet_reader.h): the footer is the file's last 8 bytes (a little-endian
// length and "PAR1") and the Thrift FileMetaData before them; a column chunk is read with one pread of its stored
// range, split into pages and decoded, and its levels are assembled into rows: a flat column's level i is row i;
// a list's rows begin at repetition level 0, and its definition levels say whether the list, an entry and each
// field are there.
#include "data/parquet_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "data/parquet_codecs.h"

namespace tk::parquet {
namespace {

constexpr char kMagic[] = "PAR1";
constexpr char kEncryptedMagic[] = "PARE";

// Runs fn; a tk::Error it throws gets `where` in front of its reason.
template <class F>
auto in_context(const std::string& where, F&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
}

std::optional<std::string> flat_value(const DecodedLevels& d, int max_definition, size_t level, size_t& next_value) {
  if (max_definition > 0 && d.definition[level] < max_definition) return std::nullopt;
  return std::string(d.values[next_value++]);
}

}  // namespace

ParquetFile::ParquetFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("cannot read {}: {}", path_, std::strerror(errno));
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("cannot read {}: {}", path_, std::strerror(errno));
    size_ = uint64_t(st.st_size);
    TK_CHECK(size_ >= 12, "{} is not a Parquet file: it is {} bytes long, shorter than a Parquet file's frame", path_,
             size_);
    const std::string head = read_at(0, 4), tail = read_at(size_ - 8, 8);
    if (tail.compare(4, 4, kEncryptedMagic) == 0)
      fail("{} is an encrypted Parquet file (its footer is encrypted): tokamak does not read encrypted files", path_);
    TK_CHECK(head == kMagic && tail.compare(4, 4, kMagic) == 0,
             "{} is not a Parquet file: it does not begin and end with \"PAR1\" (truncated, or another format)", path_);
    uint32_t footer = 0;
    std::memcpy(&footer, tail.data(), 4);
    TK_CHECK(footer <= size_ - 12, "{} is truncated or corrupt: its footer of {} bytes is longer than the file holds",
             path_, footer);
    data_end_ = size_ - 8 - footer;
    meta_ =
        in_context(path_ + ": the footer is corrupt", [&] { return parse_file_metadata(read_at(data_end_, footer)); });
    if (meta_.encrypted)
      fail("{} is an encrypted Parquet file (its columns are encrypted): tokamak does not read encrypted files", path_);
    schema_ = in_context(path_ + ": the schema is corrupt", [&] { return Schema(meta_.schema); });
    int64_t rows = 0;
    for (size_t g = 0; g < meta_.row_groups.size(); g++) {
      const RowGroup& rg = meta_.row_groups[g];
      TK_CHECK(rg.columns.size() == schema_.leaves().size(),
               "{}: row group {} has {} column chunks, but the schema has {} columns: the footer is corrupt", path_, g,
               rg.columns.size(), schema_.leaves().size());
      TK_CHECK(rg.num_rows <= INT64_MAX - rows, "{}: the row groups' row counts overflow", path_);
      rows += rg.num_rows;
    }
    TK_CHECK(rows == meta_.num_rows, "{}: the row groups hold {} rows, but the footer says {}: the footer is corrupt",
             path_, rows, meta_.num_rows);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

ParquetFile::~ParquetFile() { ::close(fd_); }

std::string ParquetFile::read_at(uint64_t offset, uint64_t n) const {
  TK_CHECK(offset <= size_ && n <= size_ - offset, "{}: a read of {} bytes at {} is past the end of the file", path_, n,
           offset);
  std::string out(size_t(n), '\0');
  for (size_t done = 0; done < n;) {
    const ssize_t r = ::pread(fd_, out.data() + done, size_t(n) - done, off_t(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("cannot read {}: {}", path_, std::strerror(errno));
    TK_CHECK(r > 0, "{} is truncated: it ended while being read", path_);
    done += size_t(r);
  }
  return out;
}

uint64_t ParquetFile::stored_bytes(size_t row_group) const {
  uint64_t bytes = 0;
  for (const ColumnChunk& c : meta_.row_groups.at(row_group).columns)
    if (c.meta_data) bytes += std::min(uint64_t(c.meta_data->total_compressed_size), size_);
  return bytes;
}

std::string ParquetFile::where(const std::string& column, size_t row_group) const {
  return fmt::format("{}: column \"{}\", row group {}", path_, column, row_group);
}

StringColumn ParquetFile::string_column(const std::string& name) const {
  return in_context(path_, [&] { return find_string_column(schema_, name); });
}

MessagesColumn ParquetFile::messages_column(const std::string& name) const {
  return in_context(path_, [&] { return find_messages_column(schema_, name); });
}

ColumnChunkPages ParquetFile::read_chunk(size_t row_group, const StringColumn& column, LeafColumn& levels) const {
  return in_context(where(column.name, row_group), [&] {
    TK_CHECK(row_group < meta_.row_groups.size(), "there is no such row group");
    const RowGroup& rg = meta_.row_groups[row_group];
    const ColumnChunk& chunk = rg.columns.at(size_t(column.leaf));
    TK_CHECK(!chunk.encrypted, "the column is encrypted: tokamak does not read encrypted files");
    TK_CHECK(!chunk.file_path, "the column chunk is stored in another file ({}), which tokamak does not read",
             chunk.file_path.value_or(""));
    TK_CHECK(chunk.meta_data, "the column chunk has no metadata");
    const ColumnMetaData& m = *chunk.meta_data;
    std::string path;
    for (const std::string& p : m.path_in_schema) path += (path.empty() ? "" : ".") + p;
    const std::string& schema_path = schema_.node(schema_.leaves()[size_t(column.leaf)]).path;
    TK_CHECK(path == schema_path, "the column chunk is \"{}\", where the schema has \"{}\": the footer is corrupt",
             path, schema_path);
    TK_CHECK(m.type == int32_t(PhysicalType::ByteArray), "the column chunk holds {}, not BYTE_ARRAY as the schema says",
             physical_type_name(m.type));
    check_codec(m.codec);
    if (column.levels.max_repetition == 0)
      TK_CHECK(m.num_values == rg.num_rows, "the column chunk holds {} values for the row group's {} rows",
               m.num_values, rg.num_rows);
    // The dictionary page, when there is one, comes first; some writers leave its offset 0 when there is none.
    uint64_t begin = uint64_t(m.data_page_offset);
    if (m.dictionary_page_offset && *m.dictionary_page_offset >= 4 && *m.dictionary_page_offset < m.data_page_offset)
      begin = uint64_t(*m.dictionary_page_offset);
    const uint64_t bytes = uint64_t(m.total_compressed_size);
    TK_CHECK(begin >= 4 && begin <= data_end_ && bytes <= data_end_ - begin,
             "the column chunk's {} bytes at offset {} lie outside the file's data (bytes 4 to {})", bytes, begin,
             data_end_);
    levels = column.levels;
    levels.codec = m.codec;
    return split_pages(read_at(begin, bytes), m.num_values);
  });
}

DecodedLevels ParquetFile::decode_chunk(size_t row_group, const StringColumn& column) const {
  LeafColumn levels;
  const ColumnChunkPages chunk = read_chunk(row_group, column, levels);
  return in_context(where(column.name, row_group), [&] {
    std::optional<ByteArrays> dictionary;
    if (chunk.dictionary) dictionary = decode_dictionary_page(levels, *chunk.dictionary, chunk.data(*chunk.dictionary));
    DecodedLevels d = decode_data_pages(levels, chunk, dictionary ? &*dictionary : nullptr, 0, chunk.data_pages.size());
    TK_CHECK(levels.max_repetition > 0 || d.levels == size_t(rows(row_group)),
             "the pages hold {} values for the row group's {} rows", d.levels, rows(row_group));
    return d;
  });
}

StringValues ParquetFile::read_strings(size_t row_group, const StringColumn& column) const {
  const DecodedLevels d = decode_chunk(row_group, column);
  StringValues out;
  out.reserve(d.levels);
  size_t next_value = 0;
  for (size_t i = 0; i < d.levels; i++) out.push_back(flat_value(d, column.levels.max_definition, i, next_value));
  return out;
}

MessageLists ParquetFile::read_messages(size_t row_group, const MessagesColumn& column) const {
  const DecodedLevels role = decode_chunk(row_group, column.role);
  const DecodedLevels content = decode_chunk(row_group, column.content);
  return in_context(where(column.name, row_group), [&] {
    TK_CHECK(role.levels == content.levels, "its role and content columns hold {} and {} levels", role.levels,
             content.levels);
    MessageLists lists;
    size_t next_role = 0, next_content = 0;
    for (size_t i = 0; i < role.levels; i++) {
      const int rep = role.repetition[i], def = role.definition[i];
      // The two fields share every level above their own.
      TK_CHECK(rep == content.repetition[i] && std::min(def, column.element_defined) ==
                                                   std::min<int>(content.definition[i], column.element_defined),
               "its role and content columns disagree on the lists' shape at level {}", i);
      if (rep == 0) {
        TK_CHECK(lists.size() < size_t(rows(row_group)), "its levels hold more rows than the row group's {}",
                 rows(row_group));
        lists.emplace_back();
        if (def >= column.list_defined) lists.back().emplace();
      } else {
        TK_CHECK(!lists.empty(), "its first level continues a row (repetition level {})", rep);
        TK_CHECK(def >= column.entry_defined, "a repeated level (repetition {}) holds no entry", rep);
        TK_CHECK(lists.back() && !lists.back()->empty(), "a null or empty list continues at level {}", i);
      }
      if (def < column.entry_defined) continue;
      ChatMessage m;
      if (def >= column.element_defined) {
        m.role = flat_value(role, column.role.levels.max_definition, i, next_role);
        m.content = flat_value(content, column.content.levels.max_definition, i, next_content);
      }
      lists.back()->push_back(std::move(m));
    }
    TK_CHECK(lists.size() == size_t(rows(row_group)), "its levels hold {} rows, not the row group's {}", lists.size(),
             rows(row_group));
    TK_CHECK(next_role == role.values.size() && next_content == content.values.size(),
             "its levels leave values unused");
    return lists;
  });
}

ParquetRowReader::ParquetRowReader(std::string path, const std::vector<std::string>& string_columns,
                                   const std::string& messages_column)
    : file_(std::move(path)) {
  for (const std::string& name : string_columns) strings_.push_back(file_.string_column(name));
  if (!messages_column.empty()) messages_ = file_.messages_column(messages_column);
}

bool ParquetRowReader::next(ParquetRow& row) {
  while (group_ < file_.row_groups() && in_group_ == size_t(file_.rows(group_))) {
    group_++, in_group_ = 0;
    string_values_.clear();
    message_values_.clear();
  }
  if (group_ == file_.row_groups()) return false;
  if (in_group_ == 0) {  // a new row group: decode its columns
    string_values_.clear();
    for (const StringColumn& c : strings_) string_values_.push_back(file_.read_strings(group_, c));
    if (messages_) message_values_ = file_.read_messages(group_, *messages_);
  }
  row.strings.clear();
  for (StringValues& v : string_values_) row.strings.push_back(std::move(v[in_group_]));
  row.messages = messages_ ? std::move(message_values_[in_group_]) : std::nullopt;
  in_group_++;
  row_index_ = next_index_++;
  return true;
}

}  // namespace tk::parquet
