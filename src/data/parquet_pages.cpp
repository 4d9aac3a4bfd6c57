// Splitting a column chunk into pages and decoding them (parquet_pages.h). A v1 data page is compressed whole and
// holds, in order, its repetition levels and definition levels (each a 4-byte length and RLE data) and its values;
// a v2 page stores both level sections uncompressed in front (their lengths in the header) and compresses only
// the values.
#include "data/parquet_pages.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "data/parquet_codecs.h"

namespace tk::parquet {
namespace {

void check_crc(const Page& page, std::string_view data) {
  if (!page.header.crc) return;
  uint32_t crc = uint32_t(crc32(0, nullptr, 0));
  for (size_t at = 0; at < data.size();) {  // zlib takes at most 4 GiB a call
    const size_t n = std::min<size_t>(data.size() - at, 1u << 30);
    crc = uint32_t(crc32(crc, reinterpret_cast<const Bytef*>(data.data() + at), uInt(n)));
    at += n;
  }
  TK_CHECK(crc == *page.header.crc, "a page's CRC is {:08x}, not the {:08x} its header gives: the page is corrupt", crc,
           *page.header.crc);
}

// The levels of one section: `count` values of the RLE hybrid up to max_level, appended to `levels`.
void decode_levels(std::string_view bytes, size_t count, int max_level, std::vector<uint8_t>& levels) {
  const size_t at = levels.size();
  levels.resize(at + count);
  decode_rle_hybrid(bytes, bit_width(uint64_t(max_level)), count, uint32_t(max_level), levels.data() + at);
}

// A v1 page's level section: a 4-byte little-endian length, then that many bytes of RLE data.
std::string_view v1_level_section(std::string_view& rest, int32_t encoding, const char* which) {
  TK_CHECK(encoding == int32_t(Encoding::Rle), "the page's {} levels are encoded as {}, not RLE", which,
           encoding_name(encoding));
  TK_CHECK(rest.size() >= 4, "the page ends before its {} levels", which);
  uint32_t n;
  std::memcpy(&n, rest.data(), 4);
  TK_CHECK(n <= rest.size() - 4, "the page's {} levels are {} bytes long, past its end ({} bytes left)", which, n,
           rest.size() - 4);
  std::string_view section = rest.substr(4, n);
  rest.remove_prefix(4 + size_t(n));
  return section;
}

void decode_values(int32_t encoding, std::string_view bytes, size_t count, const ByteArrays* dictionary,
                   ByteArrays& out) {
  switch (Encoding(encoding)) {
    case Encoding::Plain: decode_plain_byte_arrays(bytes, count, out); return;
    case Encoding::PlainDictionary:
    case Encoding::RleDictionary:
      TK_CHECK(dictionary, "a page's values are {} but the column chunk has no dictionary page",
               encoding_name(encoding));
      decode_dictionary_values(bytes, count, *dictionary, out);
      return;
    case Encoding::DeltaLengthByteArray: decode_delta_length_byte_arrays(bytes, count, out); return;
    case Encoding::DeltaByteArray: decode_delta_byte_arrays(bytes, count, out); return;
    default: break;
  }
  fail(
      "the value encoding {} is not one tokamak reads for strings (it reads PLAIN, PLAIN_DICTIONARY, "
      "RLE_DICTIONARY, DELTA_LENGTH_BYTE_ARRAY and DELTA_BYTE_ARRAY)",
      encoding_name(encoding));
}

uint64_t page_string_limit(const Page& page) {
  return std::max<uint64_t>(kMaxPageStringBytes, 2 * uint64_t(page.header.uncompressed_page_size));
}

}  // namespace

ColumnChunkPages split_pages(std::string bytes, int64_t num_values) {
  ColumnChunkPages chunk;
  chunk.bytes = std::move(bytes);
  const std::string_view all(chunk.bytes);
  size_t pos = 0;
  int64_t seen = 0;
  while (seen < num_values) {
    TK_CHECK(pos < all.size(), "the column chunk's pages end after {} of its {} values", seen, num_values);
    Page page;
    page.header = parse_page_header(all.substr(pos));
    page.offset = pos + page.header.header_bytes;
    TK_CHECK(size_t(page.header.compressed_page_size) <= all.size() - page.offset,
             "a page of {} bytes at byte {} of the column chunk runs past its end ({} bytes)",
             page.header.compressed_page_size, pos, all.size());
    pos = page.offset + size_t(page.header.compressed_page_size);
    switch (PageType(page.header.type)) {
      case PageType::DictionaryPage:
        TK_CHECK(page.header.dictionary_page, "a dictionary page has no dictionary page header");
        TK_CHECK(!chunk.dictionary && chunk.data_pages.empty(),
                 "a dictionary page comes after other pages (it must be the chunk's first and only one)");
        chunk.dictionary = page;
        break;
      case PageType::DataPage:
      case PageType::DataPageV2: {
        const bool v2 = PageType(page.header.type) == PageType::DataPageV2;
        TK_CHECK(v2 ? bool(page.header.data_page_v2) : bool(page.header.data_page), "a data page has no {} header",
                 v2 ? "DataPageHeaderV2" : "DataPageHeader");
        const int64_t n = v2 ? page.header.data_page_v2->num_values : page.header.data_page->num_values;
        TK_CHECK(n <= num_values - seen, "the column chunk's pages hold more than its {} values", num_values);
        seen += n;
        chunk.data_pages.push_back(page);
        break;
      }
      case PageType::IndexPage: break;
      default: fail("a page of unknown type {}", page.header.type);
    }
  }
  return chunk;
}

ByteArrays decode_dictionary_page(const LeafColumn& column, const Page& page, std::string_view data) {
  check_crc(page, data);
  const DictionaryPageHeader& h = *page.header.dictionary_page;
  TK_CHECK(h.encoding == int32_t(Encoding::Plain) || h.encoding == int32_t(Encoding::PlainDictionary),
           "the dictionary page is encoded as {}, not PLAIN", encoding_name(h.encoding));
  TK_CHECK(size_t(h.num_values) <= kMaxPageValues, "a dictionary of {} values (tokamak reads at most {} a page)",
           h.num_values, kMaxPageValues);
  const std::string plain = decompress(column.codec, data, size_t(page.header.uncompressed_page_size));
  ByteArrays dictionary;
  dictionary.limit = page_string_limit(page);
  decode_plain_byte_arrays(plain, size_t(h.num_values), dictionary);
  return dictionary;
}

void decode_data_page(const LeafColumn& column, const Page& page, std::string_view data, const ByteArrays* dictionary,
                      DecodedLevels& out) {
  check_crc(page, data);
  const PageHeader& h = page.header;
  int32_t encoding = 0;
  std::string_view repetition, definition, values;
  std::string buffer;  // the decompressed page (v1) or values (v2)
  const bool v2 = PageType(h.type) == PageType::DataPageV2;
  const size_t n = size_t(v2 ? h.data_page_v2->num_values : h.data_page->num_values);
  TK_CHECK(n <= kMaxPageValues, "a page of {} values (tokamak reads at most {} a page)", n, kMaxPageValues);
  if (!v2) {
    const DataPageHeader& d = *h.data_page;
    encoding = d.encoding;
    buffer = decompress(column.codec, data, size_t(h.uncompressed_page_size));
    std::string_view rest(buffer);
    if (column.max_repetition > 0) repetition = v1_level_section(rest, d.repetition_level_encoding, "repetition");
    if (column.max_definition > 0) definition = v1_level_section(rest, d.definition_level_encoding, "definition");
    values = rest;
  } else {
    const DataPageHeaderV2& d = *h.data_page_v2;
    encoding = d.encoding;
    const size_t rep = size_t(d.repetition_levels_byte_length), def = size_t(d.definition_levels_byte_length);
    TK_CHECK(rep + def <= data.size() && rep + def <= size_t(h.uncompressed_page_size),
             "the page's levels ({} + {} bytes) are longer than the page ({} bytes stored, {} uncompressed)", rep, def,
             data.size(), h.uncompressed_page_size);
    repetition = data.substr(0, rep);
    definition = data.substr(rep, def);
    const std::string_view stored = data.substr(rep + def);
    const size_t size = size_t(h.uncompressed_page_size) - rep - def;
    if (d.is_compressed) {
      buffer = decompress(column.codec, stored, size);
      values = buffer;
    } else {
      TK_CHECK(stored.size() == size, "the page's uncompressed values are {} bytes, not the header's {}", stored.size(),
               size);
      values = stored;
    }
  }
  size_t present = n;
  if (column.max_repetition > 0) decode_levels(repetition, n, column.max_repetition, out.repetition);
  if (column.max_definition > 0) {
    decode_levels(definition, n, column.max_definition, out.definition);
    present = size_t(std::count(out.definition.end() - ptrdiff_t(n), out.definition.end(), column.max_definition));
  }
  out.levels += n;
  if (present == 0) return;  // no values: their section may be empty whatever its encoding
  out.values.limit = out.values.bytes.size() + page_string_limit(page);
  decode_values(encoding, values, present, dictionary, out.values);
}

DecodedLevels decode_data_pages(const LeafColumn& column, const ColumnChunkPages& chunk, const ByteArrays* dictionary,
                                size_t first, size_t last) {
  DecodedLevels out;
  for (size_t i = first; i < last; i++) {
    const Page& page = chunk.data_pages[i];
    decode_data_page(column, page, chunk.data(page), dictionary, out);
  }
  return out;
}

}  // namespace tk::parquet
