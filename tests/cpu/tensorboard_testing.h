// A decoder of TensorBoard's event files written here from the formats, for the tests of the writer and of the runs
// that write them: the TFRecord framing with both CRCs checked (gtest expectations), then the Event and Summary
// fields tokamak writes (core/tensorboard_events.h).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/tensorboard_events.h"

namespace tk::testing {

inline uint64_t le(const std::string& s, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) v |= uint64_t(uint8_t(s[at + i])) << (8 * i);
  return v;
}

// The records of a TFRecord file, each CRC checked.
inline std::vector<std::string> records(const std::string& file) {
  std::vector<std::string> out;
  for (size_t at = 0; at < file.size();) {
    EXPECT_LE(at + 12, file.size());
    const uint64_t n = le(file, at, 8);
    EXPECT_EQ(le(file, at + 8, 4), masked_crc32c(file.substr(at, 8))) << "length CRC of the record at " << at;
    const std::string data = file.substr(at + 12, n);
    EXPECT_EQ(le(file, at + 12 + n, 4), masked_crc32c(data)) << "data CRC of the record at " << at;
    out.push_back(data);
    at += 16 + n;
  }
  return out;
}

struct Field {
  int number = 0, wire_type = 0;
  uint64_t integer = 0;  // varint, fixed64 or fixed32 bits
  std::string bytes;     // length-delimited
};

inline std::vector<Field> fields(const std::string& m) {
  std::vector<Field> out;
  size_t at = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const uint8_t b = uint8_t(m.at(at++));
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (at < m.size()) {
    const uint64_t k = varint();
    Field f{int(k >> 3), int(k & 7)};
    if (f.wire_type == 0) f.integer = varint();
    if (f.wire_type == 1) f.integer = le(m, at, 8), at += 8;
    if (f.wire_type == 5) f.integer = le(m, at, 4), at += 4;
    if (f.wire_type == 2) {
      const uint64_t n = varint();
      f.bytes = m.substr(at, n);
      at += n;
    }
    EXPECT_TRUE(f.wire_type == 0 || f.wire_type == 1 || f.wire_type == 2 || f.wire_type == 5) << f.wire_type;
    out.push_back(f);
  }
  return out;
}

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  int64_t session_status = -1;
  std::vector<std::pair<std::string, float>> values;
};

inline Event event(const std::string& m) {
  Event e;
  for (const Field& f : fields(m)) {
    if (f.number == 1) std::memcpy(&e.wall_time, &f.integer, 8);
    if (f.number == 2) e.step = int64_t(f.integer);
    if (f.number == 3) e.file_version = f.bytes;
    if (f.number == 7)
      for (const Field& s : fields(f.bytes))
        if (s.number == 1) e.session_status = int64_t(s.integer);
    if (f.number == 5)
      for (const Field& v : fields(f.bytes)) {
        EXPECT_EQ(v.number, 1);
        std::string tag;
        float value = 0;
        for (const Field& x : fields(v.bytes)) {
          if (x.number == 1) tag = x.bytes;
          if (x.number == 2) {
            const uint32_t bits = uint32_t(x.integer);
            std::memcpy(&value, &bits, 4);
          }
        }
        e.values.emplace_back(tag, value);
      }
  }
  return e;
}

}  // namespace tk::testing
