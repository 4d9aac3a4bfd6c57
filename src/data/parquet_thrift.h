// A reader of Thrift's compact protocol, the encoding of a Parquet file's footer and page headers: structs
// of numbered fields, varint integers, length-prefixed binaries and lists. Every read is checked against the
// end of the buffer and every count against the bytes left, so a corrupt header is a tk::Error (a reason, with
// no file name: the callers add it), never a read past the end or a huge allocation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tk::parquet {

// The compact protocol's type codes (Thrift's TCompactProtocol).
enum class ThriftType : uint8_t {
  Stop = 0,
  True = 1,  // a boolean field holds its value in its type
  False = 2,
  Byte = 3,
  I16 = 4,
  I32 = 5,
  I64 = 6,
  Double = 7,
  Binary = 8,
  List = 9,
  Set = 10,
  Map = 11,
  Struct = 12,
  Uuid = 13,
};

struct ThriftField {
  int16_t id = 0;
  ThriftType type = ThriftType::Stop;
};

struct ThriftList {
  ThriftType element = ThriftType::Stop;
  uint32_t size = 0;
};

class ThriftReader {
 public:
  explicit ThriftReader(std::string_view bytes) : bytes_(bytes) {}

  // Structs: begin_struct(), then next_field() until it returns false (the struct's stop byte), reading or
  // skipping each field's value in between. Nesting deeper than kMaxDepth is an error.
  void begin_struct();
  bool next_field(ThriftField& field);

  // A field's value; `what` names the field for the error when the value's type is not the one expected.
  bool read_bool(const ThriftField& field, const char* what);
  int32_t read_i32(const ThriftField& field, const char* what);
  int64_t read_i64(const ThriftField& field, const char* what);
  std::string_view read_binary(const ThriftField& field, const char* what);
  // A list field's header; its elements follow (each read with the element-level functions below).
  ThriftList read_list(const ThriftField& field, const char* what);
  void expect_struct(const ThriftField& field, const char* what);

  // List elements.
  int32_t read_i32_element(ThriftType element, const char* what);
  std::string_view read_binary_element(ThriftType element, const char* what);
  void expect_struct_element(ThriftType element, const char* what);

  // Skips a value of any type (a field this reader does not use).
  void skip(ThriftType type);

  size_t position() const { return pos_; }

  static constexpr int kMaxDepth = 32;

 private:
  uint8_t byte();
  uint64_t varint();
  int64_t zigzag() {
    const uint64_t v = varint();
    return int64_t(v >> 1) ^ -int64_t(v & 1);
  }
  int32_t zigzag32(const char* what);
  void check_type(ThriftType got, ThriftType want, const char* what);
  void skip_value(ThriftType type, bool element, int depth);

  std::string_view bytes_;
  size_t pos_ = 0;
  int depth_ = 0;
  int16_t last_id_[kMaxDepth + 1] = {};  // the last field id read at each struct depth
};

}  // namespace tk::parquet
