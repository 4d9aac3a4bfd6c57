// MemoryLedger: what a backend holds, by label, so the memory plan can be printed as a table and written
// to memory.json; and the seal that marks the end of planning, after which any new allocation is reported
// (a training step must not allocate: a run that survives its first step does not run out of memory later).
#pragma once
#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "core/log.h"

namespace tk {

struct MemoryRow {
  std::string label;
  size_t bytes = 0;
  int count = 0;  // allocations under this label
};

class MemoryLedger {
 public:
  void add(void* p, size_t bytes, const char* label) {
    if (sealed_) {
      late_bytes_ += bytes;
      log::warn("memory: {} bytes for '{}' allocated after the plan was sealed (the plan missed it)", bytes, label);
    }
    entries_[p] = {bytes, label};
    total_ += bytes;
    peak_ = std::max(peak_, total_);
  }
  // False when p was not recorded.
  bool remove(void* p) {
    auto it = entries_.find(p);
    if (it == entries_.end()) return false;
    total_ -= it->second.bytes;
    entries_.erase(it);
    return true;
  }
  std::vector<void*> pointers() const {
    std::vector<void*> out;
    for (const auto& [p, e] : entries_) out.push_back(p);
    return out;
  }
  bool contains(void* p) const { return entries_.count(p) != 0; }
  // The bytes recorded for p (0 when p was not recorded).
  size_t bytes_of(void* p) const {
    auto it = entries_.find(p);
    return it == entries_.end() ? 0 : it->second.bytes;
  }
  size_t total() const { return total_; }
  size_t peak() const { return peak_; }
  size_t late_bytes() const { return late_bytes_; }
  void seal() { sealed_ = true; }

  std::vector<MemoryRow> rows() const {
    std::map<std::string, MemoryRow> by_label;
    for (const auto& [p, e] : entries_) {
      MemoryRow& r = by_label[e.label];
      r.label = e.label;
      r.bytes += e.bytes;
      r.count++;
    }
    std::vector<MemoryRow> out;
    for (auto& [label, r] : by_label) out.push_back(r);
    std::stable_sort(out.begin(), out.end(), [](const MemoryRow& a, const MemoryRow& b) { return a.bytes > b.bytes; });
    return out;
  }

 private:
  struct Entry {
    size_t bytes;
    std::string label;
  };
  std::map<void*, Entry> entries_;
  size_t total_ = 0, peak_ = 0, late_bytes_ = 0;
  bool sealed_ = false;
};

}  // namespace tk
