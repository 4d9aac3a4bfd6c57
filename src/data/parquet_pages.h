// A Parquet column chunk's pages: splitting the chunk's stored bytes into its dictionary page and data pages
// (checking each header against the bytes and the chunk's value count), and decoding pages (data pages v1 and
// v2, dictionary pages) into levels and string values, checking each page's CRC when it has one, its
// decompressed size and every level and value count. Errors give the reason; the callers add the file and
// column.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/parquet_encodings.h"
#include "data/parquet_metadata.h"

namespace tk::parquet {

// The most values (levels) one page may hold, and the most bytes of strings one page may decode to beyond twice
// its own size (dictionary indices and shared prefixes can repeat a string without end).
constexpr size_t kMaxPageValues = size_t(1) << 24;
constexpr uint64_t kMaxPageStringBytes = uint64_t(64) << 20;

// What decoding a column's pages needs of the column.
struct LeafColumn {
  int max_definition = 0, max_repetition = 0;  // each at most 255
  int32_t codec = 0;
};

struct Page {
  PageHeader header;
  size_t offset = 0;  // of the page's stored data (after its header) in the chunk's bytes
  size_t stored_bytes() const { return header.header_bytes + size_t(header.compressed_page_size); }
};

// One column chunk as stored, split into pages.
struct ColumnChunkPages {
  std::string bytes;
  std::optional<Page> dictionary;
  std::vector<Page> data_pages;

  std::string_view data(const Page& p) const {
    return std::string_view(bytes).substr(p.offset, size_t(p.header.compressed_page_size));
  }
};

// Splits a chunk's stored bytes (the dictionary page, if any, first) into pages until they hold `num_values`
// levels; index pages are skipped.
ColumnChunkPages split_pages(std::string bytes, int64_t num_values);

// Levels and non-null values of consecutive data pages: definition[i] and repetition[i] are level i's (empty
// for a column whose maximum is 0: every level is 0 there), values the non-null ones in order.
struct DecodedLevels {
  size_t levels = 0;
  std::vector<uint8_t> definition, repetition;
  ByteArrays values;
};

// The dictionary page's values (call once per chunk: the chunk's data pages share them).
ByteArrays decode_dictionary_page(const LeafColumn& column, const Page& page, std::string_view data);
// Appends the data page's levels and values to `out`; `dictionary` is the chunk's, or null when it has none.
void decode_data_page(const LeafColumn& column, const Page& page, std::string_view data, const ByteArrays* dictionary,
                      DecodedLevels& out);
// Data pages [first, last) of `chunk`, decoded in order.
DecodedLevels decode_data_pages(const LeafColumn& column, const ColumnChunkPages& chunk, const ByteArrays* dictionary,
                                size_t first, size_t last);

}  // namespace tk::parquet
