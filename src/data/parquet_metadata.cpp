// Decoding parquet.thrift's FileMetaData and PageHeader (parquet_metadata.h) with the compact-protocol reader:
// one function per struct, reading the fields it knows by id and skipping the rest, then checking that the
// required ones came and that counts and sizes are not negative.
#include "data/parquet_metadata.h"

#include <fmt/format.h>

#include "core/error.h"
#include "data/parquet_thrift.h"

namespace tk::parquet {
namespace {

void require(bool seen, const char* what) { TK_CHECK(seen, "the metadata lacks the required field {}", what); }

int64_t non_negative(int64_t v, const char* what) {
  TK_CHECK(v >= 0, "{} is {}: it cannot be negative", what, v);
  return v;
}

// The LogicalType union: its one member's field id (its value, an empty or small struct, is skipped).
int32_t parse_logical_type(ThriftReader& r) {
  int32_t member = 0;
  for (ThriftField f; r.next_field(f);) {
    member = f.id;
    r.skip(f.type);
  }
  return member;
}

SchemaElement parse_schema_element(ThriftReader& r) {
  SchemaElement e;
  bool has_name = false;
  for (ThriftField f; r.next_field(f);) {
    switch (f.id) {
      case 1: e.type = r.read_i32(f, "SchemaElement.type"); break;
      case 3: e.repetition = r.read_i32(f, "SchemaElement.repetition_type"); break;
      case 4:
        e.name = std::string(r.read_binary(f, "SchemaElement.name"));
        has_name = true;
        break;
      case 5:
        e.num_children = int32_t(non_negative(r.read_i32(f, "SchemaElement.num_children"), "num_children"));
        break;
      case 6: e.converted_type = r.read_i32(f, "SchemaElement.converted_type"); break;
      case 10:
        r.expect_struct(f, "SchemaElement.logicalType");
        e.logical_type = parse_logical_type(r);
        break;
      default: r.skip(f.type);
    }
  }
  require(has_name, "SchemaElement.name");
  return e;
}

ColumnMetaData parse_column_meta_data(ThriftReader& r) {
  ColumnMetaData m;
  bool seen[10] = {};
  for (ThriftField f; r.next_field(f);) {
    if (f.id >= 1 && f.id <= 9) seen[f.id] = true;
    switch (f.id) {
      case 1: m.type = r.read_i32(f, "ColumnMetaData.type"); break;
      case 3: {
        const ThriftList list = r.read_list(f, "ColumnMetaData.path_in_schema");
        for (uint32_t i = 0; i < list.size; i++)
          m.path_in_schema.emplace_back(r.read_binary_element(list.element, "ColumnMetaData.path_in_schema"));
        break;
      }
      case 4: m.codec = r.read_i32(f, "ColumnMetaData.codec"); break;
      case 5:
        m.num_values = non_negative(r.read_i64(f, "ColumnMetaData.num_values"), "a column chunk's num_values");
        break;
      case 6:
        m.total_uncompressed_size = non_negative(r.read_i64(f, "ColumnMetaData.total_uncompressed_size"),
                                                 "a column chunk's total_uncompressed_size");
        break;
      case 7:
        m.total_compressed_size = non_negative(r.read_i64(f, "ColumnMetaData.total_compressed_size"),
                                               "a column chunk's total_compressed_size");
        break;
      case 9:
        m.data_page_offset = non_negative(r.read_i64(f, "ColumnMetaData.data_page_offset"), "a data_page_offset");
        break;
      case 11: m.dictionary_page_offset = r.read_i64(f, "ColumnMetaData.dictionary_page_offset"); break;
      default: r.skip(f.type);
    }
  }
  require(seen[1], "ColumnMetaData.type");
  require(seen[3], "ColumnMetaData.path_in_schema");
  require(seen[4], "ColumnMetaData.codec");
  require(seen[5], "ColumnMetaData.num_values");
  require(seen[7], "ColumnMetaData.total_compressed_size");
  require(seen[9], "ColumnMetaData.data_page_offset");
  return m;
}

ColumnChunk parse_column_chunk(ThriftReader& r) {
  ColumnChunk c;
  for (ThriftField f; r.next_field(f);) {
    switch (f.id) {
      case 1: c.file_path = std::string(r.read_binary(f, "ColumnChunk.file_path")); break;
      case 3:
        r.expect_struct(f, "ColumnChunk.meta_data");
        c.meta_data = parse_column_meta_data(r);
        break;
      case 8:
      case 9:
        c.encrypted = true;
        r.skip(f.type);
        break;
      default: r.skip(f.type);
    }
  }
  return c;
}

RowGroup parse_row_group(ThriftReader& r) {
  RowGroup g;
  bool has_columns = false, has_rows = false;
  for (ThriftField f; r.next_field(f);) {
    switch (f.id) {
      case 1: {
        const ThriftList list = r.read_list(f, "RowGroup.columns");
        for (uint32_t i = 0; i < list.size; i++) {
          r.expect_struct_element(list.element, "RowGroup.columns");
          g.columns.push_back(parse_column_chunk(r));
        }
        has_columns = true;
        break;
      }
      case 3:
        g.num_rows = non_negative(r.read_i64(f, "RowGroup.num_rows"), "a row group's num_rows");
        has_rows = true;
        break;
      default: r.skip(f.type);
    }
  }
  require(has_columns, "RowGroup.columns");
  require(has_rows, "RowGroup.num_rows");
  return g;
}

DataPageHeader parse_data_page_header(ThriftReader& r) {
  DataPageHeader h;
  bool seen[5] = {};
  for (ThriftField f; r.next_field(f);) {
    if (f.id >= 1 && f.id <= 4) seen[f.id] = true;
    switch (f.id) {
      case 1:
        h.num_values = int32_t(non_negative(r.read_i32(f, "DataPageHeader.num_values"), "a page's num_values"));
        break;
      case 2: h.encoding = r.read_i32(f, "DataPageHeader.encoding"); break;
      case 3: h.definition_level_encoding = r.read_i32(f, "DataPageHeader.definition_level_encoding"); break;
      case 4: h.repetition_level_encoding = r.read_i32(f, "DataPageHeader.repetition_level_encoding"); break;
      default: r.skip(f.type);
    }
  }
  for (int i = 1; i <= 4; i++) require(seen[i], "a field of DataPageHeader");
  return h;
}

DataPageHeaderV2 parse_data_page_header_v2(ThriftReader& r) {
  DataPageHeaderV2 h;
  bool seen[7] = {};
  auto count = [&](const ThriftField& f, const char* what) { return int32_t(non_negative(r.read_i32(f, what), what)); };
  for (ThriftField f; r.next_field(f);) {
    if (f.id >= 1 && f.id <= 6) seen[f.id] = true;
    switch (f.id) {
      case 1: h.num_values = count(f, "DataPageHeaderV2.num_values"); break;
      case 2: h.num_nulls = count(f, "DataPageHeaderV2.num_nulls"); break;
      case 3: h.num_rows = count(f, "DataPageHeaderV2.num_rows"); break;
      case 4: h.encoding = r.read_i32(f, "DataPageHeaderV2.encoding"); break;
      case 5: h.definition_levels_byte_length = count(f, "DataPageHeaderV2.definition_levels_byte_length"); break;
      case 6: h.repetition_levels_byte_length = count(f, "DataPageHeaderV2.repetition_levels_byte_length"); break;
      case 7: h.is_compressed = r.read_bool(f, "DataPageHeaderV2.is_compressed"); break;
      default: r.skip(f.type);
    }
  }
  for (int i = 1; i <= 6; i++) require(seen[i], "a field of DataPageHeaderV2");
  return h;
}

DictionaryPageHeader parse_dictionary_page_header(ThriftReader& r) {
  DictionaryPageHeader h;
  bool has_values = false, has_encoding = false;
  for (ThriftField f; r.next_field(f);) {
    switch (f.id) {
      case 1:
        h.num_values = int32_t(non_negative(r.read_i32(f, "DictionaryPageHeader.num_values"), "a dictionary's size"));
        has_values = true;
        break;
      case 2:
        h.encoding = r.read_i32(f, "DictionaryPageHeader.encoding");
        has_encoding = true;
        break;
      default: r.skip(f.type);
    }
  }
  require(has_values, "DictionaryPageHeader.num_values");
  require(has_encoding, "DictionaryPageHeader.encoding");
  return h;
}

}  // namespace

FileMetaData parse_file_metadata(std::string_view bytes) {
  ThriftReader r(bytes);
  FileMetaData m;
  bool has_schema = false, has_rows = false, has_row_groups = false;
  r.begin_struct();
  for (ThriftField f; r.next_field(f);) {
    switch (f.id) {
      case 1: m.version = r.read_i32(f, "FileMetaData.version"); break;
      case 2: {
        const ThriftList list = r.read_list(f, "FileMetaData.schema");
        for (uint32_t i = 0; i < list.size; i++) {
          r.expect_struct_element(list.element, "FileMetaData.schema");
          m.schema.push_back(parse_schema_element(r));
        }
        has_schema = true;
        break;
      }
      case 3:
        m.num_rows = non_negative(r.read_i64(f, "FileMetaData.num_rows"), "the file's num_rows");
        has_rows = true;
        break;
      case 4: {
        const ThriftList list = r.read_list(f, "FileMetaData.row_groups");
        for (uint32_t i = 0; i < list.size; i++) {
          r.expect_struct_element(list.element, "FileMetaData.row_groups");
          m.row_groups.push_back(parse_row_group(r));
        }
        has_row_groups = true;
        break;
      }
      case 6: m.created_by = std::string(r.read_binary(f, "FileMetaData.created_by")); break;
      case 8:
        m.encrypted = true;
        r.skip(f.type);
        break;
      default: r.skip(f.type);
    }
  }
  require(has_schema, "FileMetaData.schema");
  require(has_rows, "FileMetaData.num_rows");
  require(has_row_groups, "FileMetaData.row_groups");
  return m;
}

PageHeader parse_page_header(std::string_view bytes) {
  ThriftReader r(bytes);
  PageHeader h;
  bool seen[4] = {};
  r.begin_struct();
  for (ThriftField f; r.next_field(f);) {
    if (f.id >= 1 && f.id <= 3) seen[f.id] = true;
    switch (f.id) {
      case 1: h.type = r.read_i32(f, "PageHeader.type"); break;
      case 2:
        h.uncompressed_page_size =
            int32_t(non_negative(r.read_i32(f, "PageHeader.uncompressed_page_size"), "a page's uncompressed size"));
        break;
      case 3:
        h.compressed_page_size =
            int32_t(non_negative(r.read_i32(f, "PageHeader.compressed_page_size"), "a page's compressed size"));
        break;
      case 4: h.crc = uint32_t(r.read_i32(f, "PageHeader.crc")); break;
      case 5:
        r.expect_struct(f, "PageHeader.data_page_header");
        h.data_page = parse_data_page_header(r);
        break;
      case 7:
        r.expect_struct(f, "PageHeader.dictionary_page_header");
        h.dictionary_page = parse_dictionary_page_header(r);
        break;
      case 8:
        r.expect_struct(f, "PageHeader.data_page_header_v2");
        h.data_page_v2 = parse_data_page_header_v2(r);
        break;
      default: r.skip(f.type);
    }
  }
  for (int i = 1; i <= 3; i++) require(seen[i], "a field of PageHeader");
  h.header_bytes = r.position();
  return h;
}

std::string codec_name(int32_t codec) {
  static const char* const kNames[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  if (codec >= 0 && codec < 8) return kNames[codec];
  return fmt::format("unknown ({})", codec);
}

std::string encoding_name(int32_t encoding) {
  static const char* const kNames[] = {
      "PLAIN",          "GROUP_VAR_INT",       "PLAIN_DICTIONARY",        "RLE",
      "BIT_PACKED",     "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
      "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  if (encoding >= 0 && encoding < 10) return kNames[encoding];
  return fmt::format("unknown ({})", encoding);
}

std::string physical_type_name(int32_t type) {
  static const char* const kNames[] = {"BOOLEAN", "INT32",  "INT64",      "INT96",
                                       "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  if (type >= 0 && type < 8) return kNames[type];
  return fmt::format("unknown ({})", type);
}

}  // namespace tk::parquet
