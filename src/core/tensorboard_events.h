// TensorBoard's event files, written without TensorFlow or a protobuf library: each record in TFRecord framing (its
// length, the length's masked CRC32C, the bytes, their masked CRC32C; all little-endian) holding one Event message
// encoded by hand (event.proto: wall_time = 1 double, step = 2 int64, file_version = 3 string, summary = 5,
// session_log = 7; Summary's value = 1 repeated, each Value's tag = 1 string and simple_value = 2 float). What
// TensorBoard's own reader (event_accumulator) reads as scalars, under the names given.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tk {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`, continuing from `crc` (0 to start).
uint32_t crc32c(std::string_view data, uint32_t crc = 0);
// TFRecord's masked form: the CRC rotated right by 15 bits plus 0xa282ead8, so that a CRC of bytes that hold CRCs
// stays well distributed.
uint32_t masked_crc32c(std::string_view data);

// One record in TFRecord framing.
std::string tfrecord(std::string_view data);

// Event messages: the first of a file (file_version "brain.Event:2"); a session start at `step`, after which
// TensorBoard drops what an earlier file of the directory holds from that step on (a resumed run's steps replace
// those of the run it resumed); and one step's scalars (simple_value is a float: TensorBoard keeps scalars in 32
// bits).
std::string file_version_event(double wall_time);
std::string session_start_event(double wall_time, int64_t step);
using Scalars = std::vector<std::pair<std::string, double>>;
std::string scalars_event(double wall_time, int64_t step, const Scalars& values);

// A new event file in `dir` (created where needed), named as TensorBoard's writers name theirs so that its reader
// finds it, with the microseconds after the seconds: events.out.tfevents.<unix seconds>.<microseconds>.<host>.<pid>.
// TensorBoard reads a directory's files in the order of their names, so a later file (a resumed run's, started
// within the same second) sorts after the earlier. It starts with the file_version event; the first scalars
// written are preceded by a session start at their step. Each record is one write(2), so a reader
// following the file sees whole records; a failed one is a tk::Error naming the file and the cause.
class EventFileWriter {
 public:
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  void scalars(double wall_time, int64_t step, const Scalars& values);
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);

  std::string path_;
  int fd_ = -1;
  bool started_ = false;
};

}  // namespace tk
