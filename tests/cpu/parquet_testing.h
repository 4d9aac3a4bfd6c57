// Parquet files made byte by byte for the reader's tests: a Thrift compact-protocol writer, the level and value
// encodings in their simplest forms (RLE runs, PLAIN strings), pages (v1, v2, dictionary; with or without a CRC)
// and a file around them. With these a test states exactly which corruption or shape it gives the reader.
#pragma once
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/parquet_metadata.h"

namespace tk::testing::pq {

using tk::parquet::SchemaElement;

class Thrift {
 public:
  Thrift() { last_.push_back(0); }

  Thrift& i32(int16_t id, int64_t v) { return header(id, 5).zigzag(v); }
  Thrift& i64(int16_t id, int64_t v) { return header(id, 6).zigzag(v); }
  Thrift& boolean(int16_t id, bool v) { return header(id, v ? 1 : 2); }
  Thrift& binary(int16_t id, std::string_view s) { return header(id, 8).binary_element(s); }
  Thrift& begin(int16_t id) {  // a struct field
    header(id, 12);
    last_.push_back(0);
    return *this;
  }
  Thrift& end() {  // a struct's stop byte
    out_.push_back('\0');
    last_.pop_back();
    return *this;
  }
  Thrift& list(int16_t id, int element_type, size_t n) {
    header(id, 9);
    if (n < 15) {
      out_.push_back(char((n << 4) | size_t(element_type)));
    } else {
      out_.push_back(char(0xf0 | element_type));
      varint(n);
    }
    return *this;
  }
  Thrift& begin_element() {  // a struct element of a list
    last_.push_back(0);
    return *this;
  }
  Thrift& binary_element(std::string_view s) {
    varint(s.size());
    out_.append(s);
    return *this;
  }
  Thrift& i32_element(int64_t v) { return zigzag(v); }
  std::string bytes() const { return out_; }

 private:
  Thrift& header(int16_t id, int type) {
    const int delta = id - last_.back();
    if (delta > 0 && delta <= 15) {
      out_.push_back(char((delta << 4) | type));
    } else {
      out_.push_back(char(type));
      zigzag(id);
    }
    last_.back() = id;
    return *this;
  }
  Thrift& zigzag(int64_t v) {
    varint((uint64_t(v) << 1) ^ uint64_t(v >> 63));
    return *this;
  }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(char(v | 0x80));
      v >>= 7;
    }
    out_.push_back(char(v));
  }

  std::string out_;
  std::vector<int16_t> last_;
};

inline std::string le32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

// Levels as RLE runs of `width` bits: one run per stretch of equal values.
inline std::string rle(const std::vector<int>& values, int width) {
  std::string out;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j < values.size() && values[j] == values[i]) j++;
    for (uint64_t h = uint64_t(j - i) << 1;; h >>= 7) {
      if (h < 0x80) {
        out.push_back(char(h));
        break;
      }
      out.push_back(char(h | 0x80));
    }
    const uint32_t v = uint32_t(values[i]);
    out.append(reinterpret_cast<const char*>(&v), size_t((width + 7) / 8));
    i = j;
  }
  return out;
}

inline std::string plain(const std::vector<std::string>& values) {
  std::string out;
  for (const std::string& v : values) out += le32(uint32_t(v.size())) + v;
  return out;
}

inline uint32_t crc_of(std::string_view data) {
  return uint32_t(crc32(0, reinterpret_cast<const Bytef*>(data.data()), uInt(data.size())));
}

struct PageOptions {
  int32_t encoding = 0;                      // PLAIN
  bool crc = false;                          // write the data's CRC
  std::optional<uint32_t> crc_value;         // write this CRC instead
  std::optional<int32_t> uncompressed_size;  // instead of the data's size
};

// A v1 data page, uncompressed: `body` is its levels sections and values.
inline std::string data_page_v1(int32_t num_values, const std::string& body, const PageOptions& o = {}) {
  Thrift t;
  t.i32(1, 0).i32(2, o.uncompressed_size.value_or(int32_t(body.size()))).i32(3, int32_t(body.size()));
  if (o.crc || o.crc_value) t.i32(4, int32_t(o.crc_value.value_or(crc_of(body))));
  t.begin(5).i32(1, num_values).i32(2, o.encoding).i32(3, 3).i32(4, 3).end();
  return t.end().bytes() + body;
}

// A v2 data page, uncompressed, its level sections in front of the values.
inline std::string data_page_v2(int32_t num_values, int32_t num_rows, const std::string& repetition,
                                const std::string& definition, const std::string& values, const PageOptions& o = {}) {
  const std::string data = repetition + definition + values;
  Thrift t;
  t.i32(1, 3).i32(2, o.uncompressed_size.value_or(int32_t(data.size()))).i32(3, int32_t(data.size()));
  if (o.crc || o.crc_value) t.i32(4, int32_t(o.crc_value.value_or(crc_of(data))));
  t.begin(8).i32(1, num_values).i32(2, 0).i32(3, num_rows).i32(4, o.encoding);
  t.i32(5, int32_t(definition.size())).i32(6, int32_t(repetition.size())).boolean(7, false).end();
  return t.end().bytes() + data;
}

inline std::string dictionary_page(const std::vector<std::string>& values, const PageOptions& o = {}) {
  const std::string data = plain(values);
  Thrift t;
  t.i32(1, 2).i32(2, int32_t(data.size())).i32(3, int32_t(data.size()));
  if (o.crc || o.crc_value) t.i32(4, int32_t(o.crc_value.value_or(crc_of(data))));
  t.begin(7).i32(1, int32_t(values.size())).i32(2, 0).end();
  return t.end().bytes() + data;
}

struct Chunk {
  std::vector<std::string> path;  // path_in_schema
  int64_t num_values = 0;
  std::string pages;  // the chunk's pages, end to end
  int32_t codec = 0;
  bool has_dictionary = false;
};

struct RowGroupSpec {
  int64_t num_rows = 0;
  std::vector<Chunk> chunks;
};

inline void schema_element(Thrift& t, const SchemaElement& e) {
  t.begin_element();
  if (e.type) t.i32(1, *e.type);
  if (e.repetition) t.i32(3, *e.repetition);
  t.binary(4, e.name);
  if (e.num_children) t.i32(5, e.num_children);
  if (e.converted_type) t.i32(6, *e.converted_type);
  if (e.logical_type) t.begin(10).begin(int16_t(*e.logical_type)).end().end();
  t.end();
}

// A whole file: "PAR1", the chunks' pages, the footer (`extra` writes more FileMetaData fields after the others, e.g.
// an encryption_algorithm), its length and "PAR1".
inline std::string parquet_file(const std::vector<SchemaElement>& schema, const std::vector<RowGroupSpec>& groups,
                                const std::function<void(Thrift&)>& extra = nullptr,
                                std::optional<int64_t> num_rows = {}) {
  std::string file = "PAR1";
  Thrift t;
  t.i32(1, 1).list(2, 12, schema.size());
  for (const SchemaElement& e : schema) schema_element(t, e);
  int64_t rows = 0;
  for (const RowGroupSpec& g : groups) rows += g.num_rows;
  t.i64(3, num_rows.value_or(rows)).list(4, 12, groups.size());
  for (const RowGroupSpec& g : groups) {
    t.begin_element().list(1, 12, g.chunks.size());
    int64_t bytes = 0;
    for (const Chunk& c : g.chunks) {
      const int64_t offset = int64_t(file.size());
      file += c.pages;
      bytes += int64_t(c.pages.size());
      t.begin_element().i64(2, offset).begin(3).i32(1, 6).list(2, 5, 1).i32_element(0).list(3, 8, c.path.size());
      for (const std::string& p : c.path) t.binary_element(p);
      t.i32(4, c.codec).i64(5, c.num_values).i64(6, int64_t(c.pages.size())).i64(7, int64_t(c.pages.size()));
      t.i64(9, offset);
      if (c.has_dictionary) t.i64(11, offset);
      t.end().end();
    }
    t.i64(2, bytes).i64(3, g.num_rows).end();
  }
  if (extra) extra(t);
  const std::string footer = t.end().bytes();
  return file + footer + le32(uint32_t(footer.size())) + "PAR1";
}

inline SchemaElement group(const std::string& name, int children, std::optional<int32_t> repetition = 0,
                           std::optional<int32_t> converted = {}) {
  SchemaElement e;
  e.name = name;
  e.num_children = children;
  e.repetition = repetition;
  e.converted_type = converted;
  return e;
}

inline SchemaElement string_field(const std::string& name, int32_t repetition = 1) {
  SchemaElement e;
  e.name = name;
  e.type = 6;
  e.repetition = repetition;
  e.converted_type = 0;
  return e;
}

// The schema of one optional string column `text`.
inline std::vector<SchemaElement> text_schema() {
  SchemaElement root = group("schema", 1, std::nullopt);
  return {root, string_field("text")};
}

// Definition levels and PLAIN values of optional strings (nullopt: null), as a v1 page body.
inline std::string optional_strings_v1(const std::vector<std::optional<std::string>>& values) {
  std::vector<int> defs;
  std::vector<std::string> present;
  for (const auto& v : values) {
    defs.push_back(v ? 1 : 0);
    if (v) present.push_back(*v);
  }
  const std::string levels = rle(defs, 1);
  return le32(uint32_t(levels.size())) + levels + plain(present);
}

}  // namespace tk::testing::pq
