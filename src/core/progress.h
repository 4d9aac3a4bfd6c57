// ProgressBar: one line of progress for long work (tokenizing a corpus, writing a checkpoint): bytes
// done of the total, the rates (MB/s, and items/s such as tokens/s) and the time left; or, for work
// that is not measured in bytes (a tokenizer's merges), items done of their total. On a terminal
// it redraws in place at most 10 times a second; into a log file or pipe it writes a plain line every
// 10 seconds, so that logs stay readable.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace tk {

// What a bar's done and total amounts count: bytes (with a second count, of items, beside them) or
// the items themselves.
enum class ProgressUnit { Bytes, Items };

class ProgressBar {
 public:
  // total_bytes = 0 when the total is unknown (no bar, no ETA). item_name labels the second rate.
  // With ProgressUnit::Items, total_bytes and add()'s bytes count items, shown as "1.2K / 3.8K merges".
  ProgressBar(std::string label, uint64_t total_bytes, std::string item_name, std::FILE* out = stderr,
              ProgressUnit unit = ProgressUnit::Bytes);
  // Without finish() (the work failed), ends a half-drawn terminal line and prints nothing more.
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Thread-safe. Redraws when enough time has passed since the last line.
  void add(uint64_t bytes, uint64_t items);
  // Prints the final line (once); later calls do nothing.
  void finish();
  // Ends the bar without a final line, for work whose caller prints its own result: on a terminal the bar is
  // erased; elsewhere the lines already written stay (a log keeps them). Later calls do nothing.
  void clear();

  // The text of one progress line (no \r or newline), exposed for tests.
  static std::string line(const std::string& label, uint64_t done_bytes, uint64_t total_bytes, uint64_t items,
                          const std::string& item_name, double seconds, ProgressUnit unit = ProgressUnit::Bytes);

 private:
  void draw(bool final);

  using Clock = std::chrono::steady_clock;
  std::mutex mu_;
  std::string label_, item_name_;
  uint64_t total_bytes_, done_bytes_ = 0, items_ = 0;
  std::FILE* out_;
  ProgressUnit unit_;
  bool tty_, finished_ = false, drawn_ = false;
  Clock::time_point start_, last_draw_;
};

}  // namespace tk
