// ShardWriter streams tokens to a temporary file, then the offsets and the loss mask, and patches the header in at
// the end; ShardReader maps a shard (version 1 or 2) and refuses, with the file's name and the reason, anything its
// header does not describe, data whose checksum does not match, and any token stream that breaks the format's
// promises; read_dataset_listing reads meta.json.
#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "core/confined_path.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/json_integer.h"

namespace tk {

static_assert(std::endian::native == std::endian::little, "shards are little-endian and mapped as they are");

namespace {

constexpr char kMagic[8] = {'T', 'K', 'S', 'H', 'A', 'R', 'D', '\0'};
constexpr size_t kReservedOffset = 48;  // version 1: 8 bytes, zero; version 2: the data checksum
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
  put(b, kReservedOffset, h.data_checksum);
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

// The loss mask's bytes: one bit a token.
constexpr uint64_t mask_bytes(uint64_t tokens) { return (tokens + 7) / 8; }

// The file's size as the header describes it (the counts bounded by the file's size first, so this cannot overflow).
constexpr uint64_t shard_size(uint64_t tokens, uint64_t documents, uint32_t token_bytes, uint32_t version) {
  return offsets_position(tokens, token_bytes) + documents * 8 + (version >= 2 ? mask_bytes(tokens) : 0);
}

// What one pass over a shard's tokens finds: how many are end-of-text, and the largest id.
struct TokenCensus {
  uint64_t eots = 0;
  uint32_t max_id = 0;
};

// Blocks of a fixed length with narrow counters: GCC's -O2 vectorises a loop of known trip count, so
// that the pass runs at memory speed (docs/shard-format.md gives the cost).
template <class T>
TokenCensus census(const uint8_t* bytes, uint64_t n, uint32_t eot_id) {
  constexpr uint64_t kBlock = 4096;
  const T* p = reinterpret_cast<const T*>(bytes);  // aligned: 64 bytes into a page-aligned mapping
  const T eot = T(eot_id);
  TokenCensus c;
  T max_id = 0;
  uint64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    uint32_t eots = 0;
    T block_max = 0;
    for (uint64_t j = 0; j < kBlock; j++) {
      eots += p[i + j] == eot;
      block_max = std::max(block_max, p[i + j]);
    }
    c.eots += eots;
    max_id = std::max(max_id, block_max);
  }
  for (; i < n; i++) {
    c.eots += p[i] == eot;
    max_id = std::max(max_id, p[i]);
  }
  c.max_id = max_id;
  return c;
}

}  // namespace

ShardWriter::ShardWriter(std::string path, uint32_t vocab_size, uint32_t eot_id, uint64_t fingerprint)
    : file_(std::move(path)), checksum_(XXH3_createState(), [](void* p) { XXH3_freeState(static_cast<XXH3_state_t*>(p)); }) {
  TK_CHECK(vocab_size > 0 && eot_id < vocab_size, "internal error: shard vocab {} with eot {}", vocab_size, eot_id);
  TK_CHECK(checksum_ && XXH3_64bits_reset(static_cast<XXH3_state_t*>(checksum_.get())) == XXH_OK,
           "out of memory starting the checksum of {}", file_.path());
  header_.token_bytes = token_bytes_for_vocab(vocab_size);
  header_.vocab_size = vocab_size;
  header_.eot_id = eot_id;
  header_.fingerprint = fingerprint;
  HeaderBytes placeholder{};  // the real header is written by finish(), once the counts are known
  file_.write(placeholder.data(), placeholder.size());
}

void ShardWriter::write(const void* data, size_t n) {
  file_.write(data, n);
  XXH3_64bits_update(static_cast<XXH3_state_t*>(checksum_.get()), data, n);
}

void ShardWriter::add_document(std::span<const int32_t> tokens, std::span<const uint8_t> trained) {
  TK_CHECK(trained.empty() || trained.size() == tokens.size() + 1,
           "internal error: {} mask values for a document of {} tokens and its end-of-text in {}", trained.size(),
           tokens.size(), file_.path());
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
  write(encoded_.data(), encoded_.size());
  mask_.resize(mask_bytes(header_.tokens + tokens.size() + 1));
  for (size_t i = 0; i <= tokens.size(); i++) {
    const uint64_t at = header_.tokens + i;
    if (trained.empty() || trained[i]) mask_[at / 8] |= uint8_t(1u << (at % 8));
  }
  doc_offsets_.push_back(header_.tokens);
  header_.tokens += tokens.size() + 1;
  header_.documents++;
}

void ShardWriter::finish() {
  TK_CHECK(header_.documents > 0, "internal error: {} would hold no documents", file_.path());
  const uint64_t pad = offsets_position(header_.tokens, header_.token_bytes) - file_.size();
  const uint64_t zeros = 0;
  write(&zeros, pad);
  write(doc_offsets_.data(), doc_offsets_.size() * sizeof(uint64_t));
  write(mask_.data(), mask_.size());
  header_.data_checksum = XXH3_64bits_digest(static_cast<XXH3_state_t*>(checksum_.get()));
  HeaderBytes h = encode_header(header_);
  file_.write_at(0, h.data(), h.size());
  file_.commit();
}

ShardReader::ShardReader(std::string path, const ShardExpectation& expect) : path_(std::move(path)) {
  map_file();
  try {
    parse_header();
    check_sizes();
    check_data_checksum();
    const uint64_t offsets_at = offsets_position(header_.tokens, header_.token_bytes);
    doc_offsets_ = {reinterpret_cast<const uint64_t*>(map_ + offsets_at), header_.documents};
    if (has_loss_mask()) mask_ = map_ + offsets_at + header_.documents * 8;
    check_doc_offsets();
    check_tokens();
    check_loss_mask();
    check_expectation(expect);
  } catch (...) {
    unmap();
    throw;
  }
}

ShardReader::~ShardReader() { unmap(); }

ShardReader::ShardReader(ShardReader&& o) noexcept
    : path_(std::move(o.path_)),
      map_(o.map_),
      map_bytes_(o.map_bytes_),
      header_(o.header_),
      doc_offsets_(o.doc_offsets_),
      mask_(o.mask_) {
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
    mask_ = o.mask_;
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
  if (header_.version < kOldestShardVersion || header_.version > kShardVersion)
    fail("shard {} has format version {}; this tokamak reads versions {} to {}: prepare the data again with this "
         "tokamak",
         path_, header_.version, kOldestShardVersion, kShardVersion);
  if (get<uint64_t>(map_, kChecksumOffset) != fnv1a64(map_, kChecksumOffset))
    fail("shard {} has a corrupt header: its checksum does not match its contents", path_);
  if (header_.version >= 2) {
    header_.data_checksum = get<uint64_t>(map_, kReservedOffset);
  } else if (const uint64_t reserved = get<uint64_t>(map_, kReservedOffset); reserved != 0) {
    fail("shard {} has a corrupt header: its reserved field (bytes 48 to 55) is {:#x}, not zero", path_, reserved);
  }
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
  // Version 1: each document holds a token and its end-of-text; version 2 allows a lone end-of-text (packing's filler).
  const uint64_t most = h.version >= 2 ? h.tokens : h.tokens / 2;
  if (h.documents == 0 || h.documents > most)
    fail("shard {} has a corrupt header: {} tokens cannot hold {} documents (each needs {}an end-of-text)", path_,
         h.tokens, h.documents, h.version >= 2 ? "" : "a token and ");
}

void ShardReader::check_sizes() const {
  const ShardHeader& h = header_;
  // Bound the counts by the file size first, so that the expected size below cannot overflow.
  const bool fits = h.tokens <= map_bytes_ && h.documents <= map_bytes_;
  const uint64_t expected = fits ? shard_size(h.tokens, h.documents, h.token_bytes, h.version) : 0;
  if (!fits || map_bytes_ < expected)
    fail("shard {} is truncated: its header describes {} tokens and {} documents ({} bytes) but the file has {} bytes",
         path_, h.tokens, h.documents, fits ? fmt::to_string(expected) : "more", map_bytes_);
  if (map_bytes_ > expected)
    fail("shard {} has {} bytes after the end its header describes: the file is corrupt or was appended to", path_,
         map_bytes_ - expected);
}

// XXH3-64 over every byte after the header, at memory speed (docs/shard-format.md gives the cost).
void ShardReader::check_data_checksum() const {
  if (!has_loss_mask()) return;
  if (XXH3_64bits(map_ + kShardHeaderBytes, map_bytes_ - kShardHeaderBytes) != header_.data_checksum)
    fail("shard {} is corrupt: the checksum of its tokens, document index and loss mask does not match its header "
         "(the file was changed or damaged after it was written)",
         path_);
}

// Each document holds its tokens (version 1: at least one) and then the end-of-text token: offsets start at 0, grow
// by at least 2 (version 2: 1), and the token before each (and the shard's last) is eot_id.
void ShardReader::check_doc_offsets() const {
  const uint64_t tokens = header_.tokens, gap = has_loss_mask() ? 1 : 2;
  for (uint64_t i = 0; i < header_.documents; i++) {
    const uint64_t o = doc_offsets_[i], prev = i > 0 ? doc_offsets_[i - 1] : 0;
    if ((i == 0 && o != 0) || (i > 0 && (o <= prev || o - prev < gap)) || o > tokens - gap)
      fail("shard {} has a corrupt document index: document {} starts at {} (previous start {}, {} tokens in the shard; "
           "a document holds {}its end-of-text)",
           path_, i, o, prev, tokens, gap == 2 ? "at least one token and " : "");
  }
  for (uint64_t i = 0; i < header_.documents; i++) {
    const uint64_t end = i + 1 < header_.documents ? doc_offsets_[i + 1] - 1 : tokens - 1;
    if (token_at(end) != header_.eot_id)
      fail("shard {} is corrupt: document {} ends at token {} with id {}, not the end-of-text token {} (the document "
           "index or the tokens were changed)",
           path_, i, end, token_at(end), header_.eot_id);
  }
}

// One pass over the tokens: every id inside the vocabulary, and no end-of-text token but the one that
// ends each document (check_doc_offsets found those, so there must be exactly `documents` of them).
void ShardReader::check_tokens() const {
  const uint8_t* tokens = map_ + kShardHeaderBytes;
  const TokenCensus c = header_.token_bytes == 2 ? census<uint16_t>(tokens, header_.tokens, header_.eot_id)
                                                 : census<uint32_t>(tokens, header_.tokens, header_.eot_id);
  if (c.max_id >= header_.vocab_size) {
    uint64_t i = 0;
    while (token_at(i) < header_.vocab_size) i++;
    fail("shard {} is corrupt: token {} is {}, outside its vocabulary of {}", path_, i, token_at(i), header_.vocab_size);
  }
  if (c.eots != header_.documents) fail_at_inner_eot();
}

void ShardReader::fail_at_inner_eot() const {
  for (uint64_t d = 0; d < header_.documents; d++) {
    const uint64_t begin = doc_offsets_[d];
    const uint64_t end = d + 1 < header_.documents ? doc_offsets_[d + 1] - 1 : header_.tokens - 1;
    for (uint64_t i = begin; i < end; i++)
      if (token_at(i) == header_.eot_id)
        fail("shard {} is corrupt: document {} (tokens {} to {}) holds the end-of-text token {} at {}, inside it; "
             "documents are separated by exactly one end-of-text token",
             path_, d, begin, end, header_.eot_id, i);
  }
  fail("internal error: shard {} counts {} end-of-text tokens, but none lies inside a document", path_,
       header_.documents);
}

// The mask's bits past the last token are zero.
void ShardReader::check_loss_mask() const {
  if (!has_loss_mask() || header_.tokens % 8 == 0) return;
  const uint8_t last = mask_[mask_bytes(header_.tokens) - 1];
  if (last >> (header_.tokens % 8) != 0)
    fail("shard {} is corrupt: its loss mask has bits set past its {} tokens", path_, header_.tokens);
}

void ShardReader::read_trained(uint64_t begin, uint64_t n, uint8_t* out) const {
  TK_CHECK(begin + n <= header_.tokens, "internal error: reading the mask of tokens [{}, {}) of {}, which has {}", begin,
           begin + n, path_, header_.tokens);
  if (!has_loss_mask()) {
    std::fill(out, out + n, uint8_t(1));
    return;
  }
  for (uint64_t i = 0; i < n; i++) out[i] = (mask_[(begin + i) / 8] >> ((begin + i) % 8)) & 1;
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

namespace {

using json = nlohmann::json;

// 1 to 16 hex digits: a JSON number cannot hold every uint64 exactly, so prepare writes a string.
uint64_t parse_fingerprint(const json& v, const std::string& meta_path) {
  const std::string hex = v.is_string() ? v.get<std::string>() : v.dump();
  if (!v.is_string() || hex.empty() || hex.size() > 16 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    fail("{} is corrupt: tokenizer fingerprint {} is not a string of 1 to 16 hexadecimal digits", meta_path, hex);
  return std::stoull(hex, nullptr, 16);
}

std::vector<ShardEntry> read_split(const json& split, const std::string& name, const std::string& dir,
                                   const std::string& meta_path) {
  const json& shards = split.at("shards");
  TK_CHECK(shards.is_array(), "{}: splits.{}.shards is not a list", meta_path, name);
  std::vector<ShardEntry> out;
  for (size_t i = 0; i < shards.size(); i++) {
    const json& e = shards[i];
    const std::string field = fmt::format("splits.{}.shards[{}]", name, i);
    TK_CHECK(e.is_object() && e.contains("file") && e["file"].is_string(), "{}: {} has no \"file\" name", meta_path,
             field);
    ShardEntry s;
    s.path = path_inside(dir, e["file"].get<std::string>(), meta_path);
    s.tokens = json_integer<uint64_t>(e.at("tokens"), meta_path, field + ".tokens");
    s.documents = json_integer<uint64_t>(e.at("documents"), meta_path, field + ".documents");
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

DatasetListing read_dataset_listing(const std::string& dir) {
  namespace stdfs = std::filesystem;
  DatasetListing d;
  d.meta_path = (stdfs::path(dir) / "meta.json").string();
  std::error_code ec;
  if (!stdfs::is_directory(dir, ec)) fail("data directory {} does not exist", dir);
  if (!stdfs::exists(d.meta_path, ec))
    fail("{} has no meta.json: it is not a prepared dataset, or `tokamak prepare` did not finish (meta.json is written "
         "last); run tokamak prepare again",
         dir);
  const std::string& meta_path = d.meta_path;
  json meta;
  try {
    meta = json::parse(fs::read_file(meta_path));
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}", meta_path, e.what());
  }
  try {
    TK_CHECK(meta.is_object() && meta.value("format", "") == "tokamak-shards", "{} does not describe a tokamak dataset",
             meta_path);
    const uint32_t version = json_integer<uint32_t>(meta.at("version"), meta_path, "version");
    TK_CHECK(version >= kOldestShardVersion && version <= kShardVersion,
             "{} has dataset version {}; this tokamak reads versions {} to {}", meta_path, version, kOldestShardVersion,
             kShardVersion);
    if (meta.contains("packing") && meta["packing"].is_object() && meta["packing"].contains("sequence"))
      d.packed_sequence = json_integer<int64_t>(meta["packing"]["sequence"], meta_path, "packing.sequence", 1, INT32_MAX);
    const json& tok = meta.at("tokenizer");
    d.tokenizer_kind = tok.at("kind").get<std::string>();
    d.tokenizer_path = tok.value("path", std::string());
    // Shards store the vocabulary size and ids as uint32.
    d.vocab_size = json_integer<int64_t>(tok.at("vocab_size"), meta_path, "tokenizer.vocab_size", 1, UINT32_MAX);
    if (tok.contains("eot_id"))
      d.eot_id = json_integer<int64_t>(tok["eot_id"], meta_path, "tokenizer.eot_id", 0, d.vocab_size - 1);
    d.fingerprint = parse_fingerprint(tok.at("fingerprint"), meta_path);
    const json& splits = meta.at("splits");
    TK_CHECK(splits.is_object(), "{}: splits is not an object of splits", meta_path);
    for (const auto& [name, split] : splits.items()) d.splits[name] = read_split(split, name, dir, meta_path);
  } catch (const json::exception& e) {
    fail("{} is missing a field or has one of the wrong type: {}", meta_path, e.what());
  }
  return d;
}

}  // namespace tk
