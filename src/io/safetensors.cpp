// safetensors reading and writing. The reader maps the file and checks every header field against
// it before any tensor is touched, and each tensor's bytes against its checksum when they are read,
// so that a truncated, hand-edited or bit-flipped file is an error naming the file and tensor, never
// a crash or silently wrong weights. The writer pads the header to 8 bytes (as the reference
// implementation does, keeping the data aligned) and writes through fs::AtomicFile.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/bf16.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/json_integer.h"

namespace tk {

static_assert(std::endian::native == std::endian::little, "safetensors stores little-endian numbers");

namespace {

using json = nlohmann::json;

// Bytes per element of every dtype the format defines, except the sub-byte ones (F4, F6).
size_t dtype_bytes(const std::string& dtype) {
  static const std::unordered_map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1},
      {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},     {"I32", 4},
      {"F32", 4},  {"U64", 8}, {"I64", 8}, {"F64", 8},     {"C64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// The reference implementation's limit: a header beyond it is corruption, not a model.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kChecksumPrefix = "xxh3_64:";
constexpr size_t kChecksumDigits = 16;
// The mark of a file tokamak wrote: every tensor's checksum is there (a file without one of them was altered).
constexpr const char* kFormatKey = "tokamak_format";
constexpr const char* kFormatValue = "1";

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Elements of a shape; a negative dimension or an overflow is a tk::Error naming `what`.
int64_t shape_numel(const std::vector<int64_t>& shape, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    TK_CHECK(d >= 0, "{} has a negative dimension in its shape {}", what, shape_str(shape));
    n = checked_mul(n, d, what);
  }
  return n;
}

// Bytes of a tensor: elements x element size, checked.
size_t tensor_bytes(const std::vector<int64_t>& shape, size_t esize, const std::string& what) {
  return checked_mul(checked_cast<size_t>(shape_numel(shape, what), what), esize, what);
}

std::string hex_checksum(uint64_t h) { return fmt::format("{:016x}", h); }

std::optional<uint64_t> parse_checksum(const std::string& s) {
  if (s.size() != kChecksumDigits || s.find_first_not_of("0123456789abcdef") != std::string::npos) return std::nullopt;
  return std::stoull(s, nullptr, 16);
}

// The first element that is NaN or infinite, or n when all are finite. The exponent test vectorises;
// std::isfinite may not under every compiler's flags.
int64_t first_non_finite(const float* v, int64_t n) {
  uint32_t any = 0;
  for (int64_t i = 0; i < n; i++) any |= uint32_t((std::bit_cast<uint32_t>(v[i]) & 0x7f800000u) == 0x7f800000u);
  if (!any) return n;
  for (int64_t i = 0; i < n; i++)
    if (!std::isfinite(v[i])) return i;
  return n;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, nan
  if (exp == 0) {                                                                   // zero, subnormal
    float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

template <class Src, class Convert>
void convert_to_f32(float* dst, const void* src, int64_t n, Convert convert) {
  const auto* bytes = static_cast<const unsigned char*>(src);
  for (int64_t i = 0; i < n; i++) {
    Src v;
    std::memcpy(&v, bytes + size_t(i) * sizeof(Src), sizeof(Src));  // the data may be unaligned
    dst[i] = convert(v);
  }
}

class MappedSafeTensors final : public SafeTensorsFile {
 public:
  // A header that fails its checks throws from here, where no destructor will run: the mapping is
  // released before the error leaves.
  explicit MappedSafeTensors(std::string path) : path_(std::move(path)) {
    map_file();
    try {
      parse_header();
    } catch (...) {
      unmap();
      throw;
    }
  }
  ~MappedSafeTensors() override { unmap(); }

  const std::vector<SafeTensorInfo>& tensors() const override { return tensors_; }
  const SafeTensorInfo* find(const std::string& name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  const void* data(const SafeTensorInfo& t) const override {
    const unsigned char* p = data_ + t.begin;
    if (t.checksum) {
      const uint64_t h = XXH3_64bits(p, t.end - t.begin);
      TK_CHECK(h == *t.checksum,
               "{}: tensor \"{}\" is corrupt: its bytes hash to {} but the file recorded {} when it was written",
               path_, t.name, hex_checksum(h), hex_checksum(*t.checksum));
    }
    return p;
  }
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }
  const std::string& path() const override { return path_; }

 private:
  void map_file();
  void unmap() {
    if (map_ && map_ != MAP_FAILED) ::munmap(map_, size_);
    map_ = nullptr;
  }
  void parse_header();
  void parse_metadata(const json& m);
  SafeTensorInfo parse_entry(const std::string& name, const json& v) const;
  void check_data_layout() const;
  void attach_checksums();

  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  const unsigned char* data_ = nullptr;  // start of the data section
  size_t data_size_ = 0;
  std::vector<SafeTensorInfo> tensors_;  // in file order
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

void MappedSafeTensors::map_file() {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", path_, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("cannot read {}: not a regular file", path_);
  }
  size_ = size_t(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    fail("{} is {} bytes long, too short to be a safetensors file (8-byte header length, header, data)", path_, size_);
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) fail("cannot map {} into memory: {}", path_, std::strerror(err));
}

void MappedSafeTensors::parse_header() {
  const auto* base = static_cast<const unsigned char*>(map_);
  uint64_t header_len;
  std::memcpy(&header_len, base, 8);
  TK_CHECK(header_len <= size_ - 8,
           "{}: the header claims {} bytes but the file has only {} after the length field: it is truncated or "
           "not a safetensors file", path_, header_len, size_ - 8);
  TK_CHECK(header_len <= kMaxHeaderBytes, "{}: the header claims {} bytes, more than the format's limit of {}: it is "
           "corrupt or not a safetensors file", path_, header_len, kMaxHeaderBytes);
  data_ = base + 8 + header_len;
  data_size_ = size_ - 8 - header_len;

  json header;
  try {
    header = json::parse(base + 8, base + 8 + header_len);
  } catch (const json::exception& e) {
    fail("{}: the header is not valid JSON ({}): the file is corrupt or not a safetensors file", path_, e.what());
  }
  TK_CHECK(header.is_object(), "{}: the header is JSON but not an object of tensors", path_);
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      parse_metadata(v);
      continue;
    }
    tensors_.push_back(parse_entry(name, v));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafeTensorInfo& a, const SafeTensorInfo& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  check_data_layout();
  for (size_t i = 0; i < tensors_.size(); i++) index_[tensors_[i].name] = i;
  attach_checksums();
}

void MappedSafeTensors::parse_metadata(const json& m) {
  TK_CHECK(m.is_object(), "{}: __metadata__ must be an object of strings", path_);
  for (const auto& [k, v] : m.items()) {
    TK_CHECK(v.is_string(), "{}: __metadata__ value of \"{}\" is not a string", path_, k);
    metadata_[k] = v.get<std::string>();
  }
}

SafeTensorInfo MappedSafeTensors::parse_entry(const std::string& name, const json& v) const {
  auto bad = [&](const std::string& why) { fail("{}: tensor \"{}\": {}", path_, name, why); };
  if (!v.is_object()) bad("its header entry is not an object");
  SafeTensorInfo t;
  t.name = name;

  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) bad("no \"dtype\" string");
  t.dtype = dt->get<std::string>();
  size_t esize = dtype_bytes(t.dtype);
  if (esize == 0) bad(fmt::format("unknown dtype \"{}\"", t.dtype));

  const std::string field = fmt::format("tensor \"{}\"", name);
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) bad("no \"shape\" array");
  for (const auto& d : *sh) t.shape.push_back(json_integer<int64_t>(d, path_, field + " shape", 0));
  const size_t need = tensor_bytes(t.shape, esize, fmt::format("{}: the size of {}{}", path_, field, shape_str(t.shape)));

  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2) bad("\"data_offsets\" is not a pair of integers");
  t.begin = json_integer<size_t>((*off)[0], path_, field + " data_offsets");
  t.end = json_integer<size_t>((*off)[1], path_, field + " data_offsets");
  if (t.begin > t.end) bad(fmt::format("data_offsets [{}, {}] end before they begin", t.begin, t.end));
  if (t.end > data_size_)
    bad(fmt::format("data_offsets [{}, {}] reach past the end of the data ({} bytes): the file is truncated", t.begin,
                    t.end, data_size_));
  if (t.end - t.begin != need)
    bad(fmt::format("holds {} bytes but {}{} needs {}", t.end - t.begin, t.dtype, shape_str(t.shape), need));
  return t;
}

// tensors_ is sorted by offset. As the format requires, their bytes tile the data section: each
// tensor begins where the previous one ends, the first at 0, and the last ends at the end of the file.
void MappedSafeTensors::check_data_layout() const {
  size_t expected = 0;
  const SafeTensorInfo* prev = nullptr;
  for (const SafeTensorInfo& t : tensors_) {
    if (prev)
      TK_CHECK(t.begin >= expected, "{}: tensors \"{}\" [{}, {}] and \"{}\" [{}, {}] overlap: the header is corrupt",
               path_, prev->name, prev->begin, prev->end, t.name, t.begin, t.end);
    TK_CHECK(t.begin == expected, "{}: bytes [{}, {}) of the data, {} \"{}\", belong to no tensor: the header is "
             "corrupt", path_, expected, t.begin, prev ? "after \"" + prev->name + "\" and before" : "before", t.name);
    expected = t.end;
    prev = &t;
  }
  TK_CHECK(expected == data_size_, "{}: {} bytes follow the end of the last tensor{}: the file is corrupt or was "
           "appended to", path_, data_size_ - expected, prev ? " (\"" + prev->name + "\")" : "");
}

// "xxh3_64:<name>" metadata entries: each must name a tensor of the file and hold 16 hex digits. Checksums cannot
// be switched off by the file: one that says tokamak wrote it (tokamak_format), or that holds any checksum, must
// hold every tensor's, so that a checksum key renamed by one flipped byte is an error, not a tensor unchecked.
void MappedSafeTensors::attach_checksums() {
  for (const auto& [key, value] : metadata_) {
    if (!key.starts_with(kChecksumPrefix)) continue;
    const std::string name = key.substr(std::strlen(kChecksumPrefix));
    auto it = index_.find(name);
    TK_CHECK(it != index_.end(), "{}: __metadata__ holds a checksum for tensor \"{}\", which the file does not have",
             path_, name);
    std::optional<uint64_t> h = parse_checksum(value);
    TK_CHECK(h, "{}: the checksum of tensor \"{}\" is \"{}\", not {} hex digits: the header is corrupt", path_, name,
             value, kChecksumDigits);
    tensors_[it->second].checksum = h;
  }
  const auto format = metadata_.find(kFormatKey);
  TK_CHECK(format == metadata_.end() || format->second == kFormatValue,
           "{}: __metadata__ {} is \"{}\"; this version of tokamak reads and writes \"{}\": the file is corrupt or "
           "from a newer tokamak",
           path_, kFormatKey, format->second, kFormatValue);
  const bool any = std::any_of(tensors_.begin(), tensors_.end(), [](const SafeTensorInfo& t) { return t.checksum; });
  if (format == metadata_.end() && !any) return;  // a file of another writer (Hugging Face's): none to check
  for (const SafeTensorInfo& t : tensors_)
    TK_CHECK(t.checksum, "{}: tensor \"{}\" has no checksum (no __metadata__ \"{}\"), though the file {}: every "
             "tensor of a file tokamak writes has one, so the header was altered or is corrupt",
             path_, t.name, safetensors_checksum_key(t.name),
             format != metadata_.end() ? fmt::format("says tokamak wrote it ({} {})", kFormatKey, kFormatValue)
                                       : "records checksums for other tensors");
}

}  // namespace

int64_t SafeTensorInfo::numel() const { return shape_numel(shape, "tensor \"" + name + "\""); }

std::string safetensors_checksum_key(const std::string& tensor_name) { return kChecksumPrefix + tensor_name; }

std::unique_ptr<SafeTensorsFile> SafeTensorsFile::open(const std::string& path) {
  return std::make_unique<MappedSafeTensors>(path);
}

std::vector<float> SafeTensorsFile::read_f32(const std::string& name) const {
  const SafeTensorInfo* t = find(name);
  TK_CHECK(t, "{} has no tensor named \"{}\"", path(), name);
  std::vector<float> out(size_t(t->numel()));
  read_f32(*t, out.data());
  return out;
}

void SafeTensorsFile::read_f32(const SafeTensorInfo& t, float* dst) const {
  const void* src = data(t);
  int64_t n = t.numel();
  if (t.dtype == "F32") {
    std::memcpy(dst, src, size_t(n) * 4);
  } else if (t.dtype == "BF16") {
    convert_to_f32<uint16_t>(dst, src, n, bf16_to_float);
  } else if (t.dtype == "F16") {
    convert_to_f32<uint16_t>(dst, src, n, f16_to_f32);
  } else if (t.dtype == "F64") {
    convert_to_f32<double>(dst, src, n, [](double v) { return float(v); });
  } else {
    fail("{}: tensor \"{}\" has dtype {}, which cannot be read as floating point weights", path(), t.name, t.dtype);
  }
  const int64_t bad = first_non_finite(dst, n);
  TK_CHECK(bad == n, "{}: tensor \"{}\" holds {} at element {} of {}: the file is corrupt, or training had diverged "
           "when it was saved; tokamak does not load non-finite weights or optimizer state", path(), t.name,
           std::isnan(dst[bad]) ? "NaN" : "an infinity", bad, n);
}

SafeTensorsWriter::Entry& SafeTensorsWriter::add_entry(const std::string& name, const std::string& dtype,
                                                       std::vector<int64_t> shape, size_t nbytes) {
  TK_CHECK(name != "__metadata__" && !name.empty(), "safetensors: \"{}\" cannot be a tensor name", name);
  size_t esize = dtype_bytes(dtype);
  TK_CHECK(esize, "safetensors: tensor \"{}\" has unknown dtype \"{}\"", name, dtype);
  const size_t need = tensor_bytes(shape, esize, fmt::format("safetensors: tensor \"{}\"", name));
  TK_CHECK(need == nbytes, "safetensors: tensor \"{}\" has {} bytes but {}{} needs {}", name, nbytes, dtype,
           shape_str(shape), need);
  for (const Entry& e : entries_) TK_CHECK(e.name != name, "safetensors: tensor \"{}\" added twice", name);
  Entry& e = entries_.emplace_back();
  e.name = name;
  e.dtype = dtype;
  e.shape = std::move(shape);
  e.nbytes = nbytes;
  return e;
}

void SafeTensorsWriter::add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                            const void* data, size_t nbytes) {
  Entry& e = add_entry(name, dtype, std::move(shape), nbytes);
  const auto* p = static_cast<const uint8_t*>(data);
  e.owned.assign(p, p + nbytes);
}

void SafeTensorsWriter::add_borrowed(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                                     const void* data, size_t nbytes) {
  add_entry(name, dtype, std::move(shape), nbytes).borrowed = data;
}

void SafeTensorsWriter::add_f32(const std::string& name, std::vector<int64_t> shape, const float* data) {
  const size_t bytes = tensor_bytes(shape, 4, fmt::format("safetensors: tensor \"{}\"", name));
  add(name, "F32", std::move(shape), data, bytes);
}

void SafeTensorsWriter::add_f32_as_bf16(const std::string& name, std::vector<int64_t> shape, const float* data) {
  const int64_t n = shape_numel(shape, fmt::format("safetensors: tensor \"{}\"", name));
  Entry& e = add_entry(name, "BF16", std::move(shape), size_t(n) * 2);
  e.owned.resize(e.nbytes);
  for (int64_t i = 0; i < n; i++) {
    uint16_t h = float_to_bf16(data[i]);
    std::memcpy(e.owned.data() + 2 * i, &h, 2);
  }
}

void SafeTensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  TK_CHECK(!key.starts_with(kChecksumPrefix) && key != kFormatKey,
           "safetensors: metadata key \"{}\" is reserved for checksums", key);
  metadata_[key] = value;
}

void SafeTensorsWriter::add_generated(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                                      size_t nbytes, std::function<void(void* dst)> generate) {
  add_entry(name, dtype, std::move(shape), nbytes).generate = std::move(generate);
}

// The header, written by hand so that the position of each checksum's placeholder digits is known:
// checksum_at[i] is where entry i's digits start in the returned text.
std::string SafeTensorsWriter::header_text(std::vector<size_t>& checksum_at) const {
  using json = nlohmann::json;
  std::string text = "{\"__metadata__\":{" + json(kFormatKey).dump() + ":" + json(kFormatValue).dump() + ",";
  for (const auto& [key, value] : metadata_) text += json(key).dump() + ":" + json(value).dump() + ",";
  for (const Entry& e : entries_) {
    text += json(kChecksumPrefix + e.name).dump() + ":\"";
    checksum_at.push_back(text.size());
    text += std::string(kChecksumDigits, '0') + "\",";
  }
  if (text.back() == ',') text.pop_back();
  text += "}";
  size_t offset = 0;
  for (const Entry& e : entries_) {
    const json entry = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.nbytes}}};
    text += "," + json(e.name).dump() + ":" + entry.dump();
    offset += e.nbytes;
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void SafeTensorsWriter::write(const std::string& path) const {
  std::vector<size_t> checksum_at;
  std::string text = header_text(checksum_at);
  const uint64_t header_len = text.size();

  fs::AtomicFile file(path);
  file.write(&header_len, 8);
  file.write(text);
  std::vector<uint8_t> made;
  for (size_t i = 0; i < entries_.size(); i++) {
    const Entry& e = entries_[i];
    const void* bytes = e.bytes();
    if (e.generate) {
      made.resize(e.nbytes);
      e.generate(made.data());
      bytes = made.data();
    }
    file.write(bytes, e.nbytes);
    const std::string digits = hex_checksum(XXH3_64bits(bytes, e.nbytes));
    text.replace(checksum_at[i], kChecksumDigits, digits);
  }
  file.write_at(8, text.data(), text.size());
  file.commit();
}

}  // namespace tk
