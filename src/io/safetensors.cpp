// safetensors reading and writing. The reader maps the file and checks every header field against
// it before any tensor is touched, so a truncated or hand-edited file is an error naming the file
// and tensor, never a crash or silently wrong weights. The writer pads the header to 8 bytes (as
// the reference implementation does, keeping the data aligned) and writes through fs::AtomicFile.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/fs.h"

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

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Elements of a shape, or -1 when a dimension is negative or the product overflows.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

// Round to nearest, ties to even: add 0x7fff plus the lowest kept bit, then truncate. NaNs keep
// their sign and stay NaN (the quiet bit is set so that truncation cannot make an infinity).
uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
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
  explicit MappedSafeTensors(std::string path) : path_(std::move(path)) {
    map_file();
    parse_header();
  }
  ~MappedSafeTensors() override {
    if (map_ && map_ != MAP_FAILED) ::munmap(map_, size_);
  }

  const std::vector<SafeTensorInfo>& tensors() const override { return tensors_; }
  const SafeTensorInfo* find(const std::string& name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  const void* data(const SafeTensorInfo& t) const override { return data_ + t.begin; }
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }
  const std::string& path() const override { return path_; }

 private:
  void map_file();
  void parse_header();
  void parse_metadata(const json& m);
  SafeTensorInfo parse_entry(const std::string& name, const json& v) const;
  void check_no_overlap() const;

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
  data_ = base + 8 + header_len;
  data_size_ = size_ - 8 - header_len;

  json header;
  try {
    header = json::parse(base + 8, base + 8 + header_len);
  } catch (const json::parse_error& e) {
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
  check_no_overlap();
  for (size_t i = 0; i < tensors_.size(); i++) index_[tensors_[i].name] = i;
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

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) bad("no \"shape\" array");
  for (const auto& d : *sh) {
    if (!d.is_number_integer()) bad(fmt::format("shape {} holds a non-integer", sh->dump()));
    t.shape.push_back(d.get<int64_t>());
  }
  int64_t numel = checked_numel(t.shape);
  if (numel < 0) bad(fmt::format("invalid shape {}", shape_str(t.shape)));

  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    bad("\"data_offsets\" is not a pair of non-negative integers");
  t.begin = (*off)[0].get<size_t>();
  t.end = (*off)[1].get<size_t>();
  if (t.begin > t.end) bad(fmt::format("data_offsets [{}, {}] end before they begin", t.begin, t.end));
  if (t.end > data_size_)
    bad(fmt::format("data_offsets [{}, {}] reach past the end of the data ({} bytes): the file is truncated", t.begin,
                    t.end, data_size_));
  size_t need = size_t(numel) * esize;
  if (numel > int64_t(data_size_) || t.end - t.begin != need)
    bad(fmt::format("holds {} bytes but {}{} needs {}", t.end - t.begin, t.dtype, shape_str(t.shape), need));
  return t;
}

// tensors_ is sorted by offset: each tensor must end where or before the next begins.
void MappedSafeTensors::check_no_overlap() const {
  for (size_t i = 1; i < tensors_.size(); i++) {
    const auto &a = tensors_[i - 1], &b = tensors_[i];
    TK_CHECK(a.end <= b.begin, "{}: tensors \"{}\" [{}, {}] and \"{}\" [{}, {}] overlap: the header is corrupt", path_,
             a.name, a.begin, a.end, b.name, b.begin, b.end);
  }
}

}  // namespace

int64_t SafeTensorInfo::numel() const { return checked_numel(shape); }

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
    convert_to_f32<uint16_t>(dst, src, n, bf16_to_f32);
  } else if (t.dtype == "F16") {
    convert_to_f32<uint16_t>(dst, src, n, f16_to_f32);
  } else if (t.dtype == "F64") {
    convert_to_f32<double>(dst, src, n, [](double v) { return float(v); });
  } else {
    fail("{}: tensor \"{}\" has dtype {}, which cannot be read as floating point weights", path(), t.name, t.dtype);
  }
}

SafeTensorsWriter::Entry& SafeTensorsWriter::add_entry(const std::string& name, const std::string& dtype,
                                                       std::vector<int64_t> shape, size_t nbytes) {
  TK_CHECK(name != "__metadata__" && !name.empty(), "safetensors: \"{}\" cannot be a tensor name", name);
  size_t esize = dtype_bytes(dtype);
  TK_CHECK(esize, "safetensors: tensor \"{}\" has unknown dtype \"{}\"", name, dtype);
  int64_t numel = checked_numel(shape);
  TK_CHECK(numel >= 0 && size_t(numel) * esize == nbytes, "safetensors: tensor \"{}\" has {} bytes but {}{} needs {}",
           name, nbytes, dtype, shape_str(shape), numel < 0 ? 0 : size_t(numel) * esize);
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
  int64_t n = checked_numel(shape);
  TK_CHECK(n >= 0, "safetensors: tensor \"{}\" has invalid shape {}", name, shape_str(shape));
  add(name, "F32", std::move(shape), data, size_t(n) * 4);
}

void SafeTensorsWriter::add_f32_as_bf16(const std::string& name, std::vector<int64_t> shape, const float* data) {
  int64_t n = checked_numel(shape);
  TK_CHECK(n >= 0, "safetensors: tensor \"{}\" has invalid shape {}", name, shape_str(shape));
  Entry& e = add_entry(name, "BF16", std::move(shape), size_t(n) * 2);
  e.owned.resize(e.nbytes);
  for (int64_t i = 0; i < n; i++) {
    uint16_t h = f32_to_bf16(data[i]);
    std::memcpy(e.owned.data() + 2 * i, &h, 2);
  }
}

void SafeTensorsWriter::set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

void SafeTensorsWriter::add_generated(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                                      size_t nbytes, std::function<void(void* dst)> generate) {
  add_entry(name, dtype, std::move(shape), nbytes).generate = std::move(generate);
}

void SafeTensorsWriter::write(const std::string& path) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  size_t offset = 0;
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.nbytes}}};
    offset += e.nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t header_len = text.size();

  fs::AtomicFile file(path);
  file.write(&header_len, 8);
  file.write(text);
  std::vector<uint8_t> made;
  for (const Entry& e : entries_) {
    if (e.generate) {
      made.resize(e.nbytes);
      e.generate(made.data());
      file.write(made.data(), e.nbytes);
    } else {
      file.write(e.bytes(), e.nbytes);
    }
  }
  file.commit();
}

}  // namespace tk
