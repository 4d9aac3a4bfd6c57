// Small fixed hash functions whose values end up in files and in the data order (shard header
// checksums, the train/validation split, shuffles): changing one changes existing datasets and runs,
// so they are written out here rather than taken from std::hash, which may differ between libraries.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tk {

// SplitMix64's finaliser: a bijective 64-bit mix in which every input bit affects every output bit.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// FNV-1a over bytes: simple, and enough to catch a corrupted or hand-edited header.
inline uint64_t fnv1a64(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// A uniform double in [0, 1) from a hash value (its top 53 bits).
constexpr double unit_interval(uint64_t h) { return double(h >> 11) * 0x1.0p-53; }

}  // namespace tk
