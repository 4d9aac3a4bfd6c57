// The compression codecs of Parquet pages: UNCOMPRESSED, SNAPPY (raw snappy), GZIP (gzip or zlib streams),
// ZSTD, BROTLI and LZ4_RAW (an LZ4 block), through Debian's libraries.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace tk::parquet {

// A tk::Error naming the codec (a Codec value) unless it is one of those above.
void check_codec(int32_t codec);

// `compressed` decompressed with `codec` (a Codec value), which must give exactly `uncompressed_size` bytes.
// A codec outside the list above, a corrupt stream, or a stream that gives more or fewer bytes is a tk::Error
// giving the reason. Memory grows with the bytes actually produced, never with a size the header claims.
std::string decompress(int32_t codec, std::string_view compressed, size_t uncompressed_size);

}  // namespace tk::parquet
