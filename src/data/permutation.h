// RandomPermutation: a keyed pseudo-random bijection of [0, n), evaluated one index at a time in O(1)
// memory. It is an epoch's shuffle of the training windows without materialising an array of
// billions of entries, and with random access, so that a resumed run jumps straight to its position.
#pragma once
#include <algorithm>
#include <bit>
#include <cstdint>

#include "core/hash.h"

namespace tk {

class RandomPermutation {
 public:
  RandomPermutation(uint64_t n, uint64_t key) : n_(n) {
    // The Feistel network permutes [0, 4^h), the smallest power of 4 >= n (at least 4), so that
    // cycle walking below needs fewer than 4 steps on average.
    const int bits = std::max(2, int(std::bit_width(n > 0 ? n - 1 : 0)));
    half_bits_ = (bits + 1) / 2;
    half_mask_ = (uint64_t(1) << half_bits_) - 1;
    for (int r = 0; r < kRounds; r++) round_keys_[r] = splitmix64(key ^ splitmix64(uint64_t(r)));
  }

  uint64_t size() const { return n_; }

  // The image of i in [0, n). Cycle walking: re-encrypting until the value falls inside [0, n) keeps
  // the map a bijection of [0, n), since the network is a bijection of the larger domain.
  uint64_t operator()(uint64_t i) const {
    uint64_t x = encrypt(i);
    while (x >= n_) x = encrypt(x);
    return x;
  }

 private:
  static constexpr int kRounds = 6;  // Luby-Rackoff needs 4 for a strong pseudo-random permutation

  uint64_t encrypt(uint64_t x) const {
    uint64_t left = x >> half_bits_, right = x & half_mask_;
    for (int r = 0; r < kRounds; r++) {
      const uint64_t f = splitmix64(right ^ round_keys_[r]) & half_mask_;
      const uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    return (left << half_bits_) | right;
  }

  uint64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t round_keys_[kRounds];
};

}  // namespace tk
