// The value and level encodings of Parquet pages that string columns use: the RLE / bit-packed hybrid (levels
// and dictionary indices), DELTA_BINARY_PACKED (the lengths inside the delta string encodings), and the
// BYTE_ARRAY encodings PLAIN, DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY and dictionary indices. Each decoder
// takes the exact number of values it must give; running out of bytes, a value beyond its maximum or a length
// past the end is a tk::Error giving the reason (the callers add the file and column).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tk::parquet {

// Byte strings stored end to end: string i is bytes[ends[i-1], ends[i]) (from 0 for i = 0). `limit` caps the
// bytes a decoder may add, so that a dictionary index or a shared prefix repeated millions of times is an error
// naming the limit instead of memory without end.
struct ByteArrays {
  std::string bytes;
  std::vector<uint64_t> ends;
  uint64_t limit = UINT64_MAX;

  size_t size() const { return ends.size(); }
  std::string_view operator[](size_t i) const {
    const uint64_t begin = i == 0 ? 0 : ends[i - 1];
    return std::string_view(bytes).substr(begin, ends[i] - begin);
  }
  void push(std::string_view s);
};

// The bits needed for values up to max_value (0 for 0).
int bit_width(uint64_t max_value);

// `count` values of the RLE / bit-packed hybrid of `width` bits (0..32) from `bytes`, each at most `max_value`,
// written to out[0, count). Bytes after the last value needed are not read.
void decode_rle_hybrid(std::string_view bytes, int width, size_t count, uint32_t max_value, uint8_t* out);
void decode_rle_hybrid(std::string_view bytes, int width, size_t count, uint32_t max_value, uint32_t* out);

// `count` 32-bit integers of DELTA_BINARY_PACKED (whose header must say `count`), appended to `out`; returns
// the bytes they took, after which the next part of a delta string encoding begins.
size_t decode_delta_binary_packed(std::string_view bytes, size_t count, std::vector<int32_t>& out);

// `count` BYTE_ARRAY values appended to `out`, in each encoding.
void decode_plain_byte_arrays(std::string_view bytes, size_t count, ByteArrays& out);
void decode_delta_length_byte_arrays(std::string_view bytes, size_t count, ByteArrays& out);
void decode_delta_byte_arrays(std::string_view bytes, size_t count, ByteArrays& out);
// Dictionary indices (a byte of bit width, then the RLE / bit-packed hybrid), each value looked up in `dictionary`.
void decode_dictionary_values(std::string_view bytes, size_t count, const ByteArrays& dictionary, ByteArrays& out);

}  // namespace tk::parquet
