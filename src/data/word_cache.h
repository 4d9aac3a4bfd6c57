// WordCache: a memo of piece -> ids that spares BPE the pieces natural text keeps repeating (one
// per tokenizer per thread, so it needs no lock). An open-addressing table of 8-byte slots over one
// arena that holds each piece's bytes and ids together, so a hit touches about two cache lines (a
// node-based std::unordered_map costs three dependent misses). Emptied when full: bounded memory.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <string_view>
#include <vector>

namespace tk {

class WordCache {
 public:
  static constexpr uint32_t kSlots = 1u << 18;  // kept at most half full
  static constexpr size_t kMaxPieceBytes = 64;  // longer pieces rarely repeat

  // Appends the ids cached for `piece` to `out`; false when it is not cached.
  bool append(std::string_view piece, std::vector<int32_t>& out) const {
    if (slots_.empty()) return false;
    uint64_t h = std::hash<std::string_view>{}(piece);
    for (uint32_t i = uint32_t(h) & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      const Slot& s = slots_[i];
      if (s.tag == 0) return false;
      if (s.tag != tag_of(h)) continue;
      const uint32_t* entry = arena_.data() + s.offset;
      uint32_t length = entry[0] & 0xFFFF, n_ids = entry[0] >> 16;
      if (length != piece.size() || std::memcmp(entry + 1, piece.data(), length) != 0) continue;
      const auto* ids = reinterpret_cast<const int32_t*>(entry + 1 + words_for(length));
      out.insert(out.end(), ids, ids + n_ids);
      return true;
    }
  }

  // Remembers the ids of a piece not yet cached.
  void insert(std::string_view piece, const int32_t* ids, size_t n_ids) {
    if (piece.size() > kMaxPieceBytes || n_ids > 0xFFFF) return;
    if (slots_.empty() || used_ * 2 >= kSlots) clear();
    uint64_t h = std::hash<std::string_view>{}(piece);
    uint32_t i = uint32_t(h) & (kSlots - 1);
    while (slots_[i].tag != 0) i = (i + 1) & (kSlots - 1);
    slots_[i] = {tag_of(h), uint32_t(arena_.size())};
    used_++;
    // Entry: one word (length | n_ids << 16), the bytes padded to whole words, then the ids.
    size_t at = arena_.size();
    arena_.resize(at + 1 + words_for(piece.size()) + n_ids);
    arena_[at] = uint32_t(piece.size()) | uint32_t(n_ids) << 16;
    std::memcpy(arena_.data() + at + 1, piece.data(), piece.size());
    std::memcpy(arena_.data() + at + 1 + words_for(piece.size()), ids, n_ids * sizeof(int32_t));
  }

 private:
  struct Slot {
    uint32_t tag = 0;  // high hash bits, never 0 in a used slot
    uint32_t offset = 0;
  };
  static uint32_t tag_of(uint64_t h) { return uint32_t(h >> 32) | 1; }
  static size_t words_for(size_t bytes) { return (bytes + 3) / 4; }

  void clear() {
    slots_.assign(kSlots, Slot{});
    arena_.clear();
    used_ = 0;
  }

  std::vector<Slot> slots_;  // allocated on first insert
  std::vector<uint32_t> arena_;
  uint32_t used_ = 0;
};

}  // namespace tk
