// Page decompression (parquet_codecs.h). Snappy and LZ4 blocks decompress in one call into a buffer of the
// expected size, allowed only where the codec could produce that much from the input; zlib, zstd and brotli
// stream into a buffer that grows with what they produce, one byte past the expected size so that a stream
// longer than the header says is caught.
#include "data/parquet_codecs.h"

#include <brotli/decode.h>
#include <lz4.h>
#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <climits>
#include <memory>

#include "core/error.h"
#include "data/parquet_metadata.h"

namespace tk::parquet {
namespace {

// A buffer the streaming decoders write into: it holds at most `limit` = expected + 1 bytes, starting small
// when the expected size is far beyond what the input is likely to give.
class Output {
 public:
  Output(size_t compressed, size_t expected) : expected_(expected), limit_(expected + 1) {
    const size_t likely = std::max<size_t>(compressed * 64, 1 << 20);
    buf_.resize(std::min(limit_, likely));
  }
  char* next() { return buf_.data() + used_; }
  size_t room() const { return buf_.size() - used_; }
  void produced(size_t n) { used_ += n; }
  // Makes room for more, false when the buffer already holds expected + 1 bytes.
  bool grow() {
    if (buf_.size() >= limit_) return false;
    buf_.resize(std::min(limit_, buf_.size() * 2));
    return true;
  }
  std::string finish(const char* codec) {
    TK_CHECK(used_ <= expected_, "the {} stream holds more than the page header's {} bytes", codec, expected_);
    TK_CHECK(used_ == expected_, "the {} stream holds {} bytes, not the page header's {}", codec, used_, expected_);
    buf_.resize(used_);
    return std::move(buf_);
  }

 private:
  size_t expected_, limit_, used_ = 0;
  std::string buf_;
};

std::string gunzip(std::string_view in, size_t expected) {
  z_stream z{};
  TK_CHECK(inflateInit2(&z, 15 + 32) == Z_OK, "cannot start a zlib stream");  // 32: gzip or zlib header
  std::unique_ptr<z_stream, int (*)(z_stream*)> end(&z, inflateEnd);
  Output out(in.size(), expected);
  TK_CHECK(in.size() <= UINT_MAX, "a GZIP page of {} bytes is larger than zlib reads at once", in.size());
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = uInt(in.size());
  for (;;) {
    if (out.room() == 0 && !out.grow()) break;
    z.next_out = reinterpret_cast<Bytef*>(out.next());
    z.avail_out = uInt(std::min<size_t>(out.room(), UINT_MAX));
    const uInt out_before = z.avail_out, in_before = z.avail_in;
    const int ret = inflate(&z, Z_NO_FLUSH);
    out.produced(out_before - z.avail_out);
    if (ret == Z_STREAM_END) {
      if (z.avail_in == 0) break;
      TK_CHECK(inflateReset(&z) == Z_OK, "cannot restart the zlib stream");  // another gzip member follows
      continue;
    }
    TK_CHECK(ret == Z_OK || ret == Z_BUF_ERROR, "the GZIP stream is corrupt ({})", z.msg ? z.msg : "no detail");
    TK_CHECK(z.avail_in > 0 || z.avail_out == 0, "the GZIP stream is truncated");
    TK_CHECK(z.avail_in != in_before || z.avail_out != out_before, "the GZIP stream is corrupt (it makes no progress)");
  }
  return out.finish("GZIP");
}

std::string unzstd(std::string_view in, size_t expected) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  TK_CHECK(ctx, "out of memory creating a zstd context");
  Output out(in.size(), expected);
  ZSTD_inBuffer src{in.data(), in.size(), 0};
  for (;;) {
    if (out.room() == 0 && !out.grow()) break;  // past expected + 1 bytes: finish() says so
    ZSTD_outBuffer dst{out.next(), out.room(), 0};
    const size_t ret = ZSTD_decompressStream(ctx.get(), &dst, &src);
    TK_CHECK(!ZSTD_isError(ret), "the ZSTD stream is corrupt ({})", ZSTD_getErrorName(ret));
    out.produced(dst.pos);
    if (src.pos == src.size && dst.pos < dst.size) {  // all input taken and nothing more to flush
      TK_CHECK(ret == 0, "the ZSTD stream is truncated: it ends inside a frame");
      break;
    }
  }
  return out.finish("ZSTD");
}

std::string unbrotli(std::string_view in, size_t expected) {
  std::unique_ptr<BrotliDecoderState, void (*)(BrotliDecoderState*)> state(
      BrotliDecoderCreateInstance(nullptr, nullptr, nullptr), BrotliDecoderDestroyInstance);
  TK_CHECK(state, "out of memory creating a brotli decoder");
  Output out(in.size(), expected);
  size_t avail_in = in.size();
  const uint8_t* next_in = reinterpret_cast<const uint8_t*>(in.data());
  for (;;) {
    size_t avail_out = out.room();
    uint8_t* next_out = reinterpret_cast<uint8_t*>(out.next());
    const BrotliDecoderResult r =
        BrotliDecoderDecompressStream(state.get(), &avail_in, &next_in, &avail_out, &next_out, nullptr);
    out.produced(out.room() - avail_out);
    if (r == BROTLI_DECODER_RESULT_SUCCESS) break;
    TK_CHECK(r != BROTLI_DECODER_RESULT_ERROR, "the BROTLI stream is corrupt ({})",
             BrotliDecoderErrorString(BrotliDecoderGetErrorCode(state.get())));
    TK_CHECK(r != BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT, "the BROTLI stream is truncated");
    if (!out.grow()) break;  // NEEDS_MORE_OUTPUT past expected + 1 bytes
  }
  return out.finish("BROTLI");
}

std::string unsnappy(std::string_view in, size_t expected) {
  size_t length = 0;
  TK_CHECK(snappy_uncompressed_length(in.data(), in.size(), &length) == SNAPPY_OK,
           "the SNAPPY stream is corrupt (its length cannot be read)");
  TK_CHECK(length == expected, "the SNAPPY stream holds {} bytes, not the page header's {}", length, expected);
  // A snappy element of 3 bytes gives at most 64: a longer claim cannot be true.
  TK_CHECK(length / 22 <= in.size(), "the SNAPPY stream claims {} bytes from {}: it is corrupt", length, in.size());
  std::string out(length, '\0');
  TK_CHECK(snappy_uncompress(in.data(), in.size(), out.data(), &length) == SNAPPY_OK && length == expected,
           "the SNAPPY stream is corrupt");
  return out;
}

std::string unlz4(std::string_view in, size_t expected) {
  // An LZ4 block gives at most about 255 bytes a byte of input.
  TK_CHECK(expected / 256 <= in.size(), "an LZ4_RAW block of {} bytes cannot hold the page header's {}", in.size(),
           expected);
  TK_CHECK(in.size() <= INT_MAX && expected <= INT_MAX, "an LZ4_RAW page of {} bytes is larger than LZ4 reads",
           expected);
  std::string out(expected, '\0');
  const int n = LZ4_decompress_safe(in.data(), out.data(), int(in.size()), int(expected));
  TK_CHECK(n >= 0, "the LZ4_RAW block is corrupt or holds more than the page header's {} bytes", expected);
  TK_CHECK(size_t(n) == expected, "the LZ4_RAW block holds {} bytes, not the page header's {}", n, expected);
  return out;
}

}  // namespace

void check_codec(int32_t codec) {
  switch (Codec(codec)) {
    case Codec::Uncompressed:
    case Codec::Snappy:
    case Codec::Gzip:
    case Codec::Zstd:
    case Codec::Brotli:
    case Codec::Lz4Raw: return;
    case Codec::Lzo:
    case Codec::Lz4Hadoop: break;
  }
  fail(
      "the compression codec {} is not one tokamak reads (it reads UNCOMPRESSED, SNAPPY, GZIP, ZSTD, BROTLI and "
      "LZ4_RAW)",
      codec_name(codec));
}

std::string decompress(int32_t codec, std::string_view compressed, size_t uncompressed_size) {
  check_codec(codec);
  if (compressed.empty() && uncompressed_size == 0) return {};  // an empty page's values, stored as nothing
  switch (Codec(codec)) {
    case Codec::Uncompressed:
      TK_CHECK(compressed.size() == uncompressed_size, "an uncompressed page holds {} bytes, not its header's {}",
               compressed.size(), uncompressed_size);
      return std::string(compressed);
    case Codec::Snappy: return unsnappy(compressed, uncompressed_size);
    case Codec::Gzip: return gunzip(compressed, uncompressed_size);
    case Codec::Zstd: return unzstd(compressed, uncompressed_size);
    case Codec::Brotli: return unbrotli(compressed, uncompressed_size);
    case Codec::Lz4Raw: return unlz4(compressed, uncompressed_size);
    case Codec::Lzo:
    case Codec::Lz4Hadoop: break;
  }
  fail("unreachable codec {}", codec);
}

}  // namespace tk::parquet
