// Parquet's encodings for levels and BYTE_ARRAY values (parquet_encodings.h), as the format's Encodings.md
// defines them. Bit-packed values are little-endian, least significant bit first, in both the RLE hybrid and
// DELTA_BINARY_PACKED's miniblocks: value i of a run of width w starts at bit i * w.
#include "data/parquet_encodings.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tk::parquet {
namespace {

// Reads varints and fixed-width fields from a span, each read checked against its end.
class Cursor {
 public:
  explicit Cursor(std::string_view bytes) : bytes_(bytes) {}

  uint64_t varint(const char* what) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      TK_CHECK(pos_ < bytes_.size(), "the {} ends early (at byte {} of {})", what, pos_, bytes_.size());
      const uint8_t b = uint8_t(bytes_[pos_++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("a varint of the {} is longer than 10 bytes", what);
  }
  int64_t zigzag(const char* what) {
    const uint64_t v = varint(what);
    return int64_t(v >> 1) ^ -int64_t(v & 1);
  }
  uint32_t le32(const char* what) {
    TK_CHECK(left() >= 4, "the {} ends early (at byte {} of {})", what, pos_, bytes_.size());
    uint32_t v;
    std::memcpy(&v, bytes_.data() + pos_, 4);
    pos_ += 4;
    return v;
  }
  std::string_view take(size_t n, const char* what) {
    TK_CHECK(n <= left(), "the {} needs {} bytes at byte {}, past its end ({} bytes)", what, n, pos_, bytes_.size());
    std::string_view s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  size_t left() const { return bytes_.size() - pos_; }
  size_t pos() const { return pos_; }
  const uint8_t* here() const { return reinterpret_cast<const uint8_t*>(bytes_.data()) + pos_; }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

// Value i of width w (at most 32) packed from p, which holds n bytes: all of the value's bits (the caller checks).
inline uint32_t unpack(const uint8_t* p, size_t n, uint64_t i, int w) {
  const uint64_t bit = i * uint64_t(w);
  const size_t at = size_t(bit >> 3);
  uint64_t word = 0;
  std::memcpy(&word, p + at, std::min<size_t>(8, n - at));
  return uint32_t((word >> (bit & 7)) & ((uint64_t(1) << w) - 1));
}

constexpr const char* kTooManyBytes =
    "the page's strings add up to more than a page may decode to (64 MiB, or twice the page's size)";

size_t bits_to_bytes(uint64_t bits) { return size_t((bits + 7) / 8); }

template <class T>
void rle_hybrid(std::string_view bytes, int width, size_t count, uint32_t max_value, T* out) {
  TK_CHECK(width >= 0 && width <= 32, "an RLE bit width of {} (at most 32)", width);
  Cursor c(bytes);
  size_t done = 0;
  while (done < count) {
    TK_CHECK(c.left() > 0, "the RLE data ends after {} of its {} values", done, count);
    const uint64_t header = c.varint("RLE data");
    if (header & 1) {  // bit-packed: (header >> 1) groups of 8 values
      const uint64_t groups = header >> 1;
      TK_CHECK(groups <= (uint64_t(1) << 32), "an RLE run of {} groups", groups);
      const size_t n = size_t(std::min<uint64_t>(groups * 8, count - done));
      const size_t need = bits_to_bytes(uint64_t(n) * uint64_t(width));
      // The run's last bytes may be missing from a page's end when its values are not needed.
      const size_t stored = size_t(std::min<uint64_t>(groups * uint64_t(width), c.left()));
      TK_CHECK(need <= stored, "a bit-packed run needs {} bytes, past the end of the RLE data", need);
      const uint8_t* p = c.here();
      for (size_t i = 0; i < n; i++) {
        const uint32_t v = width == 0 ? 0 : unpack(p, stored, i, width);
        TK_CHECK(v <= max_value, "a value of {} in RLE data, beyond its maximum {}", v, max_value);
        out[done + i] = T(v);
      }
      c.take(stored, "RLE data");
      done += n;
    } else {  // a run of one value, repeated (header >> 1) times
      const uint64_t run = header >> 1;
      const std::string_view raw = c.take(size_t((width + 7) / 8), "RLE data");
      uint32_t v = 0;
      std::memcpy(&v, raw.data(), raw.size());
      TK_CHECK(v <= max_value, "a value of {} in RLE data, beyond its maximum {}", v, max_value);
      const size_t n = size_t(std::min<uint64_t>(run, count - done));
      std::fill(out + done, out + done + n, T(v));
      done += n;
    }
  }
}

}  // namespace

void ByteArrays::push(std::string_view s) {
  TK_CHECK(s.size() <= limit - bytes.size(), "{}", kTooManyBytes);
  bytes.append(s);
  ends.push_back(bytes.size());
}

int bit_width(uint64_t max_value) {
  int w = 0;
  while (max_value >> w) w++;
  return w;
}

void decode_rle_hybrid(std::string_view bytes, int width, size_t count, uint32_t max_value, uint8_t* out) {
  rle_hybrid(bytes, width, count, max_value, out);
}

void decode_rle_hybrid(std::string_view bytes, int width, size_t count, uint32_t max_value, uint32_t* out) {
  rle_hybrid(bytes, width, count, max_value, out);
}

size_t decode_delta_binary_packed(std::string_view bytes, size_t count, std::vector<int32_t>& out) {
  const char* what = "DELTA_BINARY_PACKED data";
  Cursor c(bytes);
  const uint64_t block = c.varint(what), miniblocks = c.varint(what), total = c.varint(what);
  int64_t last = c.zigzag(what);
  TK_CHECK(block > 0 && block % 128 == 0 && block <= (1u << 20),
           "a DELTA_BINARY_PACKED block of {} values (a positive multiple of 128)", block);
  TK_CHECK(miniblocks > 0 && block % miniblocks == 0 && (block / miniblocks) % 32 == 0,
           "DELTA_BINARY_PACKED blocks of {} values in {} miniblocks (each must hold a multiple of 32)", block,
           miniblocks);
  TK_CHECK(total == count, "DELTA_BINARY_PACKED data of {} values where {} are expected", total, count);
  if (count == 0) return c.pos();
  TK_CHECK(last >= INT32_MIN && last <= INT32_MAX, "a DELTA_BINARY_PACKED first value of {}, beyond 32 bits", last);
  const uint64_t per_miniblock = block / miniblocks;
  out.reserve(out.size() + count);
  out.push_back(int32_t(uint32_t(last)));
  size_t remaining = count - 1;
  while (remaining > 0) {
    const int64_t min_delta = c.zigzag(what);
    const std::string_view widths = c.take(size_t(miniblocks), what);
    for (size_t m = 0; m < miniblocks && remaining > 0; m++) {
      const int w = uint8_t(widths[m]);
      TK_CHECK(w <= 32, "a DELTA_BINARY_PACKED miniblock of {}-bit values (at most 32 for 32-bit integers)", w);
      const size_t n = size_t(std::min<uint64_t>(per_miniblock, remaining));
      // A miniblock is padded to its full size; the stream's last one may lack the padding.
      const size_t stored = std::min<size_t>(size_t(per_miniblock * uint64_t(w) / 8), c.left());
      TK_CHECK(bits_to_bytes(uint64_t(n) * uint64_t(w)) <= stored, "the {} ends inside a miniblock", what);
      const uint8_t* p = c.here();
      for (size_t i = 0; i < n; i++) {
        const uint64_t delta = uint64_t(min_delta) + (w == 0 ? 0 : unpack(p, stored, i, w));
        last = int64_t(uint32_t(uint64_t(last) + delta));  // 32-bit integers wrap as the writer's did
        out.push_back(int32_t(uint32_t(last)));
      }
      c.take(stored, what);
      remaining -= n;
    }
  }
  return c.pos();
}

void decode_plain_byte_arrays(std::string_view bytes, size_t count, ByteArrays& out) {
  Cursor c(bytes);
  out.ends.reserve(out.ends.size() + std::min(count, bytes.size() / 4));  // each value takes 4 bytes at least
  for (size_t i = 0; i < count; i++) {
    const uint32_t n = c.le32("PLAIN data");
    out.push(c.take(n, "PLAIN data"));
  }
}

void decode_delta_length_byte_arrays(std::string_view bytes, size_t count, ByteArrays& out) {
  std::vector<int32_t> lengths;
  Cursor c(bytes.substr(decode_delta_binary_packed(bytes, count, lengths)));
  out.ends.reserve(out.ends.size() + count);
  for (int32_t n : lengths) {
    TK_CHECK(n >= 0, "a DELTA_LENGTH_BYTE_ARRAY length of {}", n);
    out.push(c.take(size_t(n), "DELTA_LENGTH_BYTE_ARRAY data"));
  }
}

void decode_delta_byte_arrays(std::string_view bytes, size_t count, ByteArrays& out) {
  std::vector<int32_t> prefixes;
  const size_t at = decode_delta_binary_packed(bytes, count, prefixes);
  ByteArrays suffixes;
  suffixes.limit = out.limit;
  decode_delta_length_byte_arrays(bytes.substr(at), count, suffixes);
  out.ends.reserve(out.ends.size() + count);
  std::string value;
  for (size_t i = 0; i < count; i++) {
    TK_CHECK(prefixes[i] >= 0 && size_t(prefixes[i]) <= value.size(),
             "a DELTA_BYTE_ARRAY prefix of {} bytes from a value of {}", prefixes[i], value.size());
    value.resize(size_t(prefixes[i]));
    const std::string_view suffix = suffixes[i];
    TK_CHECK(suffix.size() <= out.limit - value.size(), "{}", kTooManyBytes);
    value.append(suffix);
    out.push(value);
  }
}

void decode_dictionary_values(std::string_view bytes, size_t count, const ByteArrays& dictionary, ByteArrays& out) {
  if (count == 0) return;
  TK_CHECK(!bytes.empty(), "dictionary-encoded data holds no bytes for its {} values", count);
  TK_CHECK(dictionary.size() > 0, "dictionary-encoded values refer to an empty dictionary");
  const int width = uint8_t(bytes[0]);
  std::vector<uint32_t> indices(count);
  decode_rle_hybrid(bytes.substr(1), width, count, uint32_t(std::min<size_t>(dictionary.size() - 1, UINT32_MAX)),
                    indices.data());
  out.ends.reserve(out.ends.size() + count);
  for (uint32_t i : indices) out.push(dictionary[i]);
}

}  // namespace tk::parquet
