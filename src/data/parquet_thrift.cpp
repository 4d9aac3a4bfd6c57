// Thrift's compact protocol (parquet_thrift.h): a field header is one byte, the field id's difference from the
// previous field's in its high nibble (or 0 and the id as a zigzag varint after it) and the type in its low
// nibble; integers are zigzag varints; a binary is a varint length and its bytes; a list is a byte of size
// (15: a varint follows) and element type.
#include "data/parquet_thrift.h"

#include "core/error.h"

namespace tk::parquet {

uint8_t ThriftReader::byte() {
  TK_CHECK(pos_ < bytes_.size(), "the Thrift data ends early (at byte {})", pos_);
  return uint8_t(bytes_[pos_++]);
}

uint64_t ThriftReader::varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const uint8_t b = byte();
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  fail("a Thrift varint at byte {} is longer than 10 bytes", pos_);
}

int32_t ThriftReader::zigzag32(const char* what) {
  const int64_t v = zigzag();
  TK_CHECK(v >= INT32_MIN && v <= INT32_MAX, "{} is {}, beyond a 32-bit integer", what, v);
  return int32_t(v);
}

void ThriftReader::check_type(ThriftType got, ThriftType want, const char* what) {
  TK_CHECK(got == want, "{} has Thrift type {}, not {}", what, int(got), int(want));
}

void ThriftReader::begin_struct() {
  TK_CHECK(depth_ < kMaxDepth, "the Thrift data nests structs deeper than {}", kMaxDepth);
  last_id_[++depth_] = 0;
}

bool ThriftReader::next_field(ThriftField& field) {
  const uint8_t b = byte();
  if (b == 0) {
    depth_--;
    return false;
  }
  field.type = ThriftType(b & 0x0f);
  const int delta = b >> 4;
  if (delta != 0) {
    field.id = int16_t(last_id_[depth_] + delta);
  } else {
    const int64_t id = zigzag();
    TK_CHECK(id >= INT16_MIN && id <= INT16_MAX, "a Thrift field id is {}, beyond 16 bits", id);
    field.id = int16_t(id);
  }
  last_id_[depth_] = field.id;
  return true;
}

bool ThriftReader::read_bool(const ThriftField& field, const char* what) {
  TK_CHECK(field.type == ThriftType::True || field.type == ThriftType::False, "{} has Thrift type {}, not a boolean",
           what, int(field.type));
  return field.type == ThriftType::True;
}

int32_t ThriftReader::read_i32(const ThriftField& field, const char* what) {
  check_type(field.type, ThriftType::I32, what);
  return zigzag32(what);
}

int64_t ThriftReader::read_i64(const ThriftField& field, const char* what) {
  // An i32 where an i64 is declared reads the same; a few writers narrow small values.
  TK_CHECK(field.type == ThriftType::I64 || field.type == ThriftType::I32, "{} has Thrift type {}, not an integer",
           what, int(field.type));
  return zigzag();
}

std::string_view ThriftReader::read_binary(const ThriftField& field, const char* what) {
  check_type(field.type, ThriftType::Binary, what);
  return read_binary_element(ThriftType::Binary, what);
}

ThriftList ThriftReader::read_list(const ThriftField& field, const char* what) {
  TK_CHECK(field.type == ThriftType::List || field.type == ThriftType::Set, "{} has Thrift type {}, not a list", what,
           int(field.type));
  const uint8_t b = byte();
  ThriftList list;
  list.element = ThriftType(b & 0x0f);
  uint64_t size = b >> 4;
  if (size == 15) size = varint();
  // Every element takes at least one byte.
  TK_CHECK(size <= bytes_.size() - pos_, "{} has {} elements in the {} bytes left", what, size, bytes_.size() - pos_);
  list.size = uint32_t(size);
  return list;
}

void ThriftReader::expect_struct(const ThriftField& field, const char* what) {
  check_type(field.type, ThriftType::Struct, what);
  begin_struct();
}

int32_t ThriftReader::read_i32_element(ThriftType element, const char* what) {
  check_type(element, ThriftType::I32, what);
  return zigzag32(what);
}

std::string_view ThriftReader::read_binary_element(ThriftType element, const char* what) {
  check_type(element, ThriftType::Binary, what);
  const uint64_t n = varint();
  TK_CHECK(n <= bytes_.size() - pos_, "{} is {} bytes long, past the end of the Thrift data ({} bytes left)", what, n,
           bytes_.size() - pos_);
  std::string_view s = bytes_.substr(pos_, n);
  pos_ += n;
  return s;
}

void ThriftReader::expect_struct_element(ThriftType element, const char* what) {
  check_type(element, ThriftType::Struct, what);
  begin_struct();
}

void ThriftReader::skip(ThriftType type) { skip_value(type, false, 0); }

// A value of `type`, a field's or a list or map element's; depth counts the lists and maps around it. A boolean
// field's value lives in its type (no bytes), a boolean element's is one byte.
void ThriftReader::skip_value(ThriftType type, bool element, int depth) {
  TK_CHECK(depth + depth_ < kMaxDepth, "the Thrift data nests deeper than {}", kMaxDepth);
  auto advance = [&](uint64_t n) {
    TK_CHECK(n <= bytes_.size() - pos_, "the Thrift data ends early (at byte {})", pos_);
    pos_ += n;
  };
  switch (type) {
    case ThriftType::True:
    case ThriftType::False:
      if (element) byte();
      return;
    case ThriftType::Byte: byte(); return;
    case ThriftType::I16:
    case ThriftType::I32:
    case ThriftType::I64: varint(); return;
    case ThriftType::Double: advance(8); return;
    case ThriftType::Uuid: advance(16); return;
    case ThriftType::Binary: advance(varint()); return;
    case ThriftType::List:
    case ThriftType::Set: {
      const ThriftList list = read_list({0, ThriftType::List}, "a skipped list");
      for (uint32_t i = 0; i < list.size; i++) skip_value(list.element, true, depth + 1);
      return;
    }
    case ThriftType::Map: {
      const uint64_t size = varint();
      if (size == 0) return;
      const uint8_t kv = byte();
      TK_CHECK(size <= bytes_.size() - pos_, "a map has {} entries in the {} bytes left", size, bytes_.size() - pos_);
      for (uint64_t i = 0; i < size; i++) {
        skip_value(ThriftType(kv >> 4), true, depth + 1);
        skip_value(ThriftType(kv & 0x0f), true, depth + 1);
      }
      return;
    }
    case ThriftType::Struct: {
      begin_struct();
      for (ThriftField f; next_field(f);) skip_value(f.type, false, depth);
      return;
    }
    case ThriftType::Stop: break;
  }
  fail("unknown Thrift type {} at byte {}", int(type), pos_);
}

}  // namespace tk::parquet
