// ProgressBar: rates and ETA from the bytes and items reported so far, drawn in place on a terminal
// or as occasional plain lines elsewhere.
#include "core/progress.h"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "core/format.h"

namespace tk {
namespace {

constexpr double kTtyInterval = 0.1;    // seconds between redraws on a terminal
constexpr double kPlainInterval = 10.0;  // seconds between lines in a log
constexpr int kBarWidth = 24;

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

std::string ProgressBar::line(const std::string& label, uint64_t done_bytes, uint64_t total_bytes, uint64_t items,
                              const std::string& item_name, double seconds, ProgressUnit unit) {
  const bool bytes = unit == ProgressUnit::Bytes;
  auto amount = [&](uint64_t n) { return bytes ? format_bytes_decimal(double(n)) : format_count(double(n)); };
  std::string s = label;
  if (total_bytes > 0) {
    double frac = std::min(1.0, double(done_bytes) / double(total_bytes));
    int filled = int(frac * kBarWidth);
    s += fmt::format(" [{}{}] {:5.1f}%  {} / {}", std::string(filled, '#'), std::string(kBarWidth - filled, '.'),
                     100.0 * frac, amount(done_bytes), amount(total_bytes));
  } else {
    s += fmt::format("  {}", amount(done_bytes));
  }
  if (!bytes) s += " " + item_name;
  if (seconds > 0 && bytes) {
    s += fmt::format("  {}/s  {} {}/s", format_bytes_decimal(done_bytes / seconds), format_count(items / seconds), item_name);
  } else if (seconds > 0) {
    s += fmt::format("  {} {}/s", format_count(done_bytes / seconds), item_name);
  }
  if (total_bytes > 0 && done_bytes >= total_bytes) {
    s += fmt::format("  done in {}", format_clock(seconds));
  } else if (total_bytes > 0 && done_bytes > 0) {
    // Assumes the remaining amount goes at the average rate so far: steady for tokenizing, which this serves.
    s += fmt::format("  ETA {}", format_clock(seconds * double(total_bytes - done_bytes) / double(done_bytes)));
  }
  return s;
}

ProgressBar::ProgressBar(std::string label, uint64_t total_bytes, std::string item_name, std::FILE* out,
                         ProgressUnit unit)
    : label_(std::move(label)),
      item_name_(std::move(item_name)),
      total_bytes_(total_bytes),
      out_(out),
      unit_(unit),
      tty_(::isatty(::fileno(out)) == 1),
      start_(Clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  if (!finished_ && drawn_ && tty_) std::fputs("\n", out_);
}

void ProgressBar::add(uint64_t bytes, uint64_t items) {
  std::lock_guard<std::mutex> lock(mu_);
  done_bytes_ += bytes;
  items_ += items;
  if (finished_) return;
  double since = seconds_between(last_draw_, Clock::now());
  if (since >= (tty_ ? kTtyInterval : kPlainInterval)) draw(false);
}

void ProgressBar::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  draw(true);
  finished_ = true;
}

void ProgressBar::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (drawn_ && tty_) {
    std::fputs("\r\x1b[K", out_);
    std::fflush(out_);
  }
}

void ProgressBar::draw(bool final) {
  drawn_ = true;
  last_draw_ = Clock::now();
  std::string text =
      line(label_, done_bytes_, total_bytes_, items_, item_name_, seconds_between(start_, last_draw_), unit_);
  // On a terminal: return to the line start, draw, erase what a longer previous line left behind.
  if (tty_) {
    std::fprintf(out_, "\r%s\x1b[K%s", text.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
}

}  // namespace tk
