// ShardWriter streams tokens to a temporary file and patches the header in at the end; ShardReader
// maps a shard and refuses, with the file's name and the reason, anything its header does not describe.
#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/hash.h"

namespace tk {

static_assert(std::endian::native == std::endian::little, "shards are little-endian and mapped as they are");

namespace {

constexpr char kMagic[8] = {'T', 'K', 'S', 'H', 'A', 'R', 'D', '\0'};
constexpr size_t kChecksumOffset = 56;  // FNV-1a 64 of bytes [0, 56)

using HeaderBytes = std::array<uint8_t, kShardHeaderBytes>;

template <class T> void put(HeaderBytes& b, size_t at, T v) { std::memcpy(b.data() + at, &v, sizeof v); }
template <class T> T get(const uint8_t* b, size_t at) {
  T v;
  std::memcpy(&v, b + at, sizeof v);
  return v;
}

HeaderBytes encode_header(const ShardHeader& h) {
  HeaderBytes b{};
  std::memcpy(b.data(), kMagic, sizeof kMagic);
  put(b, 8, h.version);
  put(b, 12, h.token_bytes);
  put(b, 16, h.vocab_size);
  put(b, 20, h.eot_id);
  put(b, 24, h.tokens);
  put(b, 32, h.documents);
  put(b, 40, h.fingerprint);
  put(b, kChecksumOffset, fnv1a64(b.data(), kChecksumOffset));
  return b;
}

void store_token(uint8_t* p, uint32_t id, uint32_t width) {
  if (width == 2) {
    const auto v = uint16_t(id);
    std::memcpy(p, &v, 2);
  } else {
    std::memcpy(p, &id, 4);
  }
}

constexpr uint64_t align8(uint64_t n) { return (n + 7) & ~uint64_t(7); }

// Where the document offsets start: after the tokens, padded so that the uint64 array is aligned.
constexpr uint64_t offsets_position(uint64_t tokens, uint32_t token_bytes) {
  return kShardHeaderBytes + align8(tokens * token_bytes);
}

}  // namespace

ShardWriter::ShardWriter(std::string path, uint32_t vocab_size, uint32_t eot_id, uint64_t fingerprint)
    : file_(std::move(path)) {
  TK_CHECK(vocab_size > 0 && eot_id < vocab_size, "internal error: shard vocab {} with eot {}", vocab_size, eot_id);
  header_.token_bytes = token_bytes_for_vocab(vocab_size);
  header_.vocab_size = vocab_size;
  header_.eot_id = eot_id;
  header_.fingerprint = fingerprint;
  HeaderBytes placeholder{};  // the real header is written by finish(), once the counts are known
  file_.write(placeholder.data(), placeholder.size());
}

void ShardWriter::add_document(std::span<const int32_t> tokens) {
  TK_CHECK(!tokens.empty(), "internal error: an empty document for {}", file_.path());
  const uint32_t width = header_.token_bytes;
  encoded_.resize((tokens.size() + 1) * width);
  for (size_t i = 0; i < tokens.size(); i++) {
    const int32_t t = tokens[i];
    // An eot inside a document would end it for the loader; an id past the vocabulary would corrupt training.
    TK_CHECK(t >= 0 && uint32_t(t) < header_.vocab_size && uint32_t(t) != header_.eot_id,
             "token id {} for {} is outside the vocabulary of {} or is the end-of-text id {}", t, file_.path(),
             header_.vocab_size, header_.eot_id);
    store_token(&encoded_[i * width], uint32_t(t), width);
  }
  store_token(&encoded_[tokens.size() * width], header_.eot_id, width);
  file_.write(encoded_.data(), encoded_.size());
  doc_offsets_.push_back(header_.tokens);
  header_.tokens += tokens.size() + 1;
  header_.documents++;
}

void ShardWriter::finish() {
  TK_CHECK(header_.documents > 0, "internal error: {} would hold no documents", file_.path());
  const uint64_t pad = offsets_position(header_.tokens, header_.token_bytes) - file_.size();
  const uint64_t zeros = 0;
  file_.write(&zeros, pad);
  file_.write(doc_offsets_.data(), doc_offsets_.size() * sizeof(uint64_t));
  HeaderBytes h = encode_header(header_);
  file_.write_at(0, h.data(), h.size());
  file_.commit();
}

ShardReader::ShardReader(std::string path, const ShardExpectation& expect) : path_(std::move(path)) {
  map_file();
  try {
    parse_header();
    check_sizes();
    doc_offsets_ = {reinterpret_cast<const uint64_t*>(map_ + offsets_position(header_.tokens, header_.token_bytes)),
                    header_.documents};
    check_doc_offsets();
    check_expectation(expect);
  } catch (...) {
    unmap();
    throw;
  }
}

ShardReader::~ShardReader() { unmap(); }

ShardReader::ShardReader(ShardReader&& o) noexcept
    : path_(std::move(o.path_)), map_(o.map_), map_bytes_(o.map_bytes_), header_(o.header_), doc_offsets_(o.doc_offsets_) {
  o.map_ = nullptr;
  o.map_bytes_ = 0;
}

ShardReader& ShardReader::operator=(ShardReader&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    map_ = o.map_;
    map_bytes_ = o.map_bytes_;
    header_ = o.header_;
    doc_offsets_ = o.doc_offsets_;
    o.map_ = nullptr;
    o.map_bytes_ = 0;
  }
  return *this;
}

void ShardReader::unmap() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
  map_ = nullptr;
}

void ShardReader::map_file() {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open shard {}: {}", path_, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail("cannot open shard {}: {}", path_, std::strerror(err));
  }
  map_bytes_ = size_t(st.st_size);
  if (map_bytes_ < kShardHeaderBytes) {
    ::close(fd);
    fail("shard {} is truncated: {} bytes, less than its {}-byte header", path_, map_bytes_, kShardHeaderBytes);
  }
  void* p = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);  // the mapping keeps the file open
  if (p == MAP_FAILED) fail("cannot map shard {}: {}", path_, std::strerror(err));
  map_ = static_cast<const uint8_t*>(p);
}

void ShardReader::parse_header() {
  if (std::memcmp(map_, kMagic, sizeof kMagic) != 0)
    fail("{} is not a tokamak token shard: bad magic (its first 8 bytes are not \"TKSHARD\\0\")", path_);
  header_.version = get<uint32_t>(map_, 8);
  if (header_.version != kShardVersion)
    fail("shard {} has format version {}; this tokamak reads version {}: prepare the data again with this tokamak",
         path_, header_.version, kShardVersion);
  if (get<uint64_t>(map_, kChecksumOffset) != fnv1a64(map_, kChecksumOffset))
    fail("shard {} has a corrupt header: its checksum does not match its contents", path_);
  header_.token_bytes = get<uint32_t>(map_, 12);
  header_.vocab_size = get<uint32_t>(map_, 16);
  header_.eot_id = get<uint32_t>(map_, 20);
  header_.tokens = get<uint64_t>(map_, 24);
  header_.documents = get<uint64_t>(map_, 32);
  header_.fingerprint = get<uint64_t>(map_, 40);
  const ShardHeader& h = header_;
  if (h.vocab_size == 0 || h.eot_id >= h.vocab_size)
    fail("shard {} has a corrupt header: end-of-text id {} is outside its vocabulary of {}", path_, h.eot_id,
         h.vocab_size);
  if (h.token_bytes != token_bytes_for_vocab(h.vocab_size))
    fail("shard {} has a corrupt header: {}-byte tokens for a vocabulary of {} (expected {})", path_, h.token_bytes,
         h.vocab_size, token_bytes_for_vocab(h.vocab_size));
  if (h.documents == 0 || h.documents > h.tokens / 2)
    fail("shard {} has a corrupt header: {} tokens cannot hold {} documents (each needs a token and an end-of-text)",
         path_, h.tokens, h.documents);
}

void ShardReader::check_sizes() const {
  const ShardHeader& h = header_;
  // Bound the counts by the file size first, so that the expected size below cannot overflow.
  const bool fits = h.tokens <= map_bytes_ && h.documents <= map_bytes_;
  const uint64_t expected = fits ? offsets_position(h.tokens, h.token_bytes) + h.documents * 8 : 0;
  if (!fits || map_bytes_ < expected)
    fail("shard {} is truncated: its header describes {} tokens and {} documents ({} bytes) but the file has {} bytes",
         path_, h.tokens, h.documents, fits ? fmt::to_string(expected) : "more", map_bytes_);
  if (map_bytes_ > expected)
    fail("shard {} has {} bytes after the end its header describes: the file is corrupt or was appended to", path_,
         map_bytes_ - expected);
}

void ShardReader::check_doc_offsets() const {
  // Reads only the offsets array and the last token: checking every document's eot would read the
  // whole shard on open, which on a slow mount costs minutes.
  uint64_t prev = 0;
  for (uint64_t i = 0; i < header_.documents; i++) {
    const uint64_t o = doc_offsets_[i];
    if ((i == 0 && o != 0) || (i > 0 && o <= prev) || o >= header_.tokens)
      fail("shard {} has a corrupt document index: document {} starts at {} (previous start {}, {} tokens in the shard)",
           path_, i, o, prev, header_.tokens);
    prev = o;
  }
  if (token_at(header_.tokens - 1) != header_.eot_id)
    fail("shard {} is corrupt: its last token is {}, not the end-of-text token {}", path_,
         token_at(header_.tokens - 1), header_.eot_id);
}

void ShardReader::check_expectation(const ShardExpectation& expect) const {
  if (expect.vocab_size >= 0 && int64_t(header_.vocab_size) != expect.vocab_size)
    fail("shard {} was prepared for a vocabulary of {} tokens, but {} are expected: prepare the data with the model's "
         "tokenizer",
         path_, header_.vocab_size, expect.vocab_size);
  if (expect.fingerprint != 0 && header_.fingerprint != expect.fingerprint)
    fail("shard {} was prepared with another tokenizer (fingerprint {:016x}, expected {:016x}): prepare the data with "
         "the model's tokenizer",
         path_, header_.fingerprint, expect.fingerprint);
}

uint32_t ShardReader::token_at(uint64_t i) const {
  const uint8_t* p = map_ + kShardHeaderBytes + i * header_.token_bytes;
  return header_.token_bytes == 2 ? get<uint16_t>(p, 0) : get<uint32_t>(p, 0);
}

void ShardReader::read(uint64_t begin, uint64_t n, int32_t* out) const {
  TK_CHECK(begin + n <= header_.tokens, "internal error: reading tokens [{}, {}) of {}, which has {}", begin, begin + n,
           path_, header_.tokens);
  const uint8_t* base = map_ + kShardHeaderBytes;
  uint32_t max_id = 0;
  if (header_.token_bytes == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(base) + begin;
    for (uint64_t i = 0; i < n; i++) {
      out[i] = p[i];
      max_id = std::max<uint32_t>(max_id, p[i]);
    }
  } else {
    const auto* p = reinterpret_cast<const uint32_t*>(base) + begin;
    for (uint64_t i = 0; i < n; i++) {
      out[i] = int32_t(p[i]);
      max_id = std::max(max_id, p[i]);
    }
  }
  if (max_id < header_.vocab_size) return;
  for (uint64_t i = 0; i < n; i++)
    if (uint32_t(out[i]) >= header_.vocab_size)
      fail("shard {} is corrupt: token {} is {}, outside its vocabulary of {}", path_, begin + i, uint32_t(out[i]),
           header_.vocab_size);
}

}  // namespace tk
