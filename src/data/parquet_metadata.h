// The parts of a Parquet file's metadata that reading string columns needs (the Thrift structs of
// parquet.thrift, by the same names): the footer's FileMetaData (schema, row groups, column chunks) and the page
// headers. Fields the reader does not use are skipped; a missing required field, a value of the wrong type or a
// count that cannot be is a tk::Error giving the reason (the callers add the file's name).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tk::parquet {

enum class PhysicalType : int32_t {
  Boolean = 0,
  Int32 = 1,
  Int64 = 2,
  Int96 = 3,
  Float = 4,
  Double = 5,
  ByteArray = 6,
  FixedLenByteArray = 7,
};

enum class Repetition : int32_t { Required = 0, Optional = 1, Repeated = 2 };

enum class Codec : int32_t {
  Uncompressed = 0,
  Snappy = 1,
  Gzip = 2,
  Lzo = 3,
  Brotli = 4,
  Lz4Hadoop = 5,  // "LZ4": the deprecated Hadoop framing
  Zstd = 6,
  Lz4Raw = 7,
};

enum class Encoding : int32_t {
  Plain = 0,
  PlainDictionary = 2,
  Rle = 3,
  BitPacked = 4,
  DeltaBinaryPacked = 5,
  DeltaLengthByteArray = 6,
  DeltaByteArray = 7,
  RleDictionary = 8,
  ByteStreamSplit = 9,
};

enum class PageType : int32_t { DataPage = 0, IndexPage = 1, DictionaryPage = 2, DataPageV2 = 3 };

// ConvertedType values and LogicalType union members (their field ids) that the reader tells apart.
constexpr int32_t kConvertedUtf8 = 0, kConvertedList = 3, kConvertedEnum = 4, kConvertedJson = 19;
constexpr int32_t kLogicalString = 1, kLogicalList = 3, kLogicalEnum = 4, kLogicalJson = 12;

struct SchemaElement {
  std::string name;
  std::optional<int32_t> type;  // PhysicalType; absent for a group
  std::optional<int32_t> repetition;
  int32_t num_children = 0;
  std::optional<int32_t> converted_type;
  std::optional<int32_t> logical_type;  // the LogicalType union's member (its field id)
};

struct ColumnMetaData {
  int32_t type = 0;  // PhysicalType
  std::vector<std::string> path_in_schema;
  int32_t codec = 0;  // Codec
  int64_t num_values = 0;
  int64_t total_uncompressed_size = 0;
  int64_t total_compressed_size = 0;
  int64_t data_page_offset = 0;
  std::optional<int64_t> dictionary_page_offset;
};

struct ColumnChunk {
  std::optional<std::string> file_path;  // the chunk lives in another file
  std::optional<ColumnMetaData> meta_data;
  bool encrypted = false;  // crypto_metadata or encrypted_column_metadata is set
};

struct RowGroup {
  std::vector<ColumnChunk> columns;
  int64_t num_rows = 0;
};

struct FileMetaData {
  int32_t version = 0;
  std::vector<SchemaElement> schema;
  int64_t num_rows = 0;
  std::vector<RowGroup> row_groups;
  std::string created_by;
  bool encrypted = false;  // encryption_algorithm is set: a plaintext footer over encrypted columns
};

struct DataPageHeader {
  int32_t num_values = 0;
  int32_t encoding = 0;
  int32_t definition_level_encoding = 0;
  int32_t repetition_level_encoding = 0;
};

struct DataPageHeaderV2 {
  int32_t num_values = 0;
  int32_t num_nulls = 0;
  int32_t num_rows = 0;
  int32_t encoding = 0;
  int32_t definition_levels_byte_length = 0;
  int32_t repetition_levels_byte_length = 0;
  bool is_compressed = true;
};

struct DictionaryPageHeader {
  int32_t num_values = 0;
  int32_t encoding = 0;
};

struct PageHeader {
  int32_t type = 0;  // PageType
  int32_t uncompressed_page_size = 0;
  int32_t compressed_page_size = 0;
  std::optional<uint32_t> crc;
  std::optional<DataPageHeader> data_page;
  std::optional<DataPageHeaderV2> data_page_v2;
  std::optional<DictionaryPageHeader> dictionary_page;
  size_t header_bytes = 0;  // the encoded header's length: the page's data follows it
};

FileMetaData parse_file_metadata(std::string_view bytes);
// The page header at the start of `bytes` (which may hold more after it).
PageHeader parse_page_header(std::string_view bytes);

// Names as parquet.thrift spells them ("SNAPPY", "RLE_DICTIONARY", "INT64"), or "unknown (N)".
std::string codec_name(int32_t codec);
std::string encoding_name(int32_t encoding);
std::string physical_type_name(int32_t type);

}  // namespace tk::parquet
