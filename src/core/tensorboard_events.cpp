// TensorBoard event files (tensorboard_events.h): CRC-32C by a table, TFRecord framing, the few protobuf fields of
// Event and Summary an event file of scalars needs, and the file they are appended to.
#include "core/tensorboard_events.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/fs.h"

namespace tk {
namespace {

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

template <class T>
void append_le(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); i++) out += char(uint8_t(uint64_t(v) >> (8 * i)));
}

// Protobuf's wire format: a field's key is (number << 3 | wire type); 0 varint, 1 fixed64, 2 length-delimited,
// 5 fixed32.
void varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += char(uint8_t(v | 0x80));
  out += char(uint8_t(v));
}
void key(std::string& out, int field, int wire_type) { varint(out, uint64_t(field) << 3 | uint64_t(wire_type)); }
void bytes_field(std::string& out, int field, std::string_view bytes) {
  key(out, field, 2);
  varint(out, bytes.size());
  out += bytes;
}
void double_field(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  key(out, field, 1);
  append_le(out, bits);
}
void float_field(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  key(out, field, 5);
  append_le(out, bits);
}
void int64_field(std::string& out, int field, int64_t v) {
  key(out, field, 0);
  varint(out, uint64_t(v));  // a negative int64 takes ten bytes, as protobuf writes it
}

// An Event's wall_time and step, the fields every event here starts with.
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  double_field(e, 1, wall_time);
  if (step != 0) int64_field(e, 2, step);
  return e;
}

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 && name[0] ? std::string(name) : std::string("localhost");
}

}  // namespace

uint32_t crc32c(std::string_view data, uint32_t crc) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  crc = ~crc;
  for (char ch : data) crc = table[(crc ^ uint8_t(ch)) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string length;
  append_le(length, uint64_t(data.size()));
  std::string out = length;
  append_le(out, masked_crc32c(length));
  out += data;
  append_le(out, masked_crc32c(data));
  return out;
}

std::string file_version_event(double wall_time) {
  std::string e = event_head(wall_time, 0);
  bytes_field(e, 3, "brain.Event:2");
  return e;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string session;
  int64_field(session, 1, 1);  // SessionLog.status = START
  std::string e = event_head(wall_time, step);
  bytes_field(e, 7, session);
  return e;
}

std::string scalars_event(double wall_time, int64_t step, const Scalars& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    bytes_field(value, 1, tag);
    float_field(value, 2, float(v));
    bytes_field(summary, 1, value);
  }
  std::string e = event_head(wall_time, step);
  bytes_field(e, 5, summary);
  return e;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("cannot create the TensorBoard directory {}: {}", dir, ec.message());
  const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  const double now = double(us) * 1e-6;
  path_ = (std::filesystem::path(dir) / fmt::format("events.out.tfevents.{:010}.{:06}.{}.{}", us / 1000000,
                                                    us % 1000000, host_name(), int64_t(::getpid())))
              .string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot open {} for writing: {}", path_, fs::error_cause(errno));
  write(file_version_event(now));
}

EventFileWriter::~EventFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void EventFileWriter::scalars(double wall_time, int64_t step, const Scalars& values) {
  if (!started_) write(session_start_event(wall_time, step));
  started_ = true;
  write(scalars_event(wall_time, step, values));
}

void EventFileWriter::write(const std::string& event) {
  const std::string record = tfrecord(event);
  for (size_t done = 0; done < record.size();) {
    const ssize_t w = ::write(fd_, record.data() + done, record.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("cannot write to {}: {}", path_, fs::error_cause(w < 0 ? errno : ENOSPC));
    done += size_t(w);
  }
}

}  // namespace tk
