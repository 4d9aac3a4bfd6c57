// safetensors: the Hugging Face tensor file format (8-byte little-endian header length, a JSON
// header of name -> {dtype, shape, data_offsets}, then the raw bytes). Reader maps the file;
// writer builds one in memory order and writes it atomically. Files tokamak writes carry an XXH3-64
// checksum of every tensor's bytes in __metadata__ ("xxh3_64:<name>": 16 hex digits) and the mark
// "tokamak_format": "1"; the reader verifies them, requires every tensor's in a file that has the mark or
// any checksum, and reads files with neither (Hugging Face's) as they are.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tk {

struct SafeTensorInfo {
  std::string name;
  std::string dtype;              // "F32", "BF16", "F16", "I32", ...
  std::vector<int64_t> shape;
  size_t begin = 0, end = 0;      // byte offsets into the data section
  std::optional<uint64_t> checksum;  // XXH3-64 of the bytes, when the file records one
  int64_t numel() const;
};

// The __metadata__ key under which a tensor's checksum is recorded.
std::string safetensors_checksum_key(const std::string& tensor_name);

class SafeTensorsFile {
 public:
  // Opens and validates the header: its length, its JSON, every tensor's dtype, shape and byte length
  // in agreement, the tensors' data covering the data section exactly (no overlap, no gap, nothing
  // after the last), and the checksums well formed. Throws tk::Error naming the file and the problem.
  static std::unique_ptr<SafeTensorsFile> open(const std::string& path);
  virtual ~SafeTensorsFile() = default;
  virtual const std::vector<SafeTensorInfo>& tensors() const = 0;
  virtual const SafeTensorInfo* find(const std::string& name) const = 0;
  // The tensor's bytes, after checking them against its checksum (when the file has one): a mismatch is a
  // tk::Error naming the file and the tensor.
  virtual const void* data(const SafeTensorInfo& t) const = 0;
  virtual const std::map<std::string, std::string>& metadata() const = 0;
  // The tensor converted to float32 (from F32, BF16, F16 or F64). Weights and optimizer moments must be
  // finite: a NaN or an infinity is a tk::Error naming the file, the tensor and the element.
  std::vector<float> read_f32(const std::string& name) const;
  // The same, into dst[t.numel()]: no intermediate copy of a large tensor.
  void read_f32(const SafeTensorInfo& t, float* dst) const;
  virtual const std::string& path() const = 0;
};

class SafeTensorsWriter {
 public:
  // Copies the bytes; dtype as in the format ("F32", "BF16", ...).
  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, const void* data, size_t nbytes);
  // Like add(), without the copy: `data` must stay valid until write() returns (e.g. fp32 weights
  // of a large model, which a copy would double in memory).
  void add_borrowed(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, const void* data,
                    size_t nbytes);
  // Bytes made only when write() reaches the tensor, into a buffer of nbytes that is freed after it: the
  // file's tensors never need to be in memory all at once (a 7B model's optimizer state is 61 GB).
  void add_generated(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, size_t nbytes,
                     std::function<void(void* dst)> generate);
  void add_f32(const std::string& name, std::vector<int64_t> shape, const float* data);
  // float32 data stored as BF16 (round to nearest even).
  void add_f32_as_bf16(const std::string& name, std::vector<int64_t> shape, const float* data);
  // A key of __metadata__ (not one of the checksum keys, which write() fills in).
  void set_metadata(const std::string& key, const std::string& value);
  // Writes to a temporary name and renames: an interrupted write leaves no file at `path`. Each
  // tensor's checksum is computed as its bytes are written and patched into the header at the end.
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> owned;        // the bytes, copied by add()
    const void* borrowed = nullptr;    // or the caller's bytes (add_borrowed)
    std::function<void(void*)> generate;  // or made at write time (add_generated)
    size_t nbytes = 0;
    const void* bytes() const { return borrowed ? borrowed : owned.data(); }
  };
  Entry& add_entry(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, size_t nbytes);
  std::string header_text(std::vector<size_t>& checksum_at) const;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tk
