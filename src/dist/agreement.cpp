// The fingerprint exchange: one small all-gather of (parts, hash of all parts) per rank, and only when the hashes
// differ a second of every part's hash, to name the part. Both are decided from the same gathered values on every
// rank, so every rank refuses alike and none is left waiting.
#include "dist/agreement.h"

#include <array>
#include <cstring>

#include "core/error.h"
#include "core/hash.h"

namespace tk::dist {

Fingerprint& Fingerprint::add(std::string name, std::string_view bytes) {
  hashes_.push_back(fnv1a64(bytes.data(), bytes.size()));
  names_.push_back(std::move(name));
  return *this;
}

void require_agreement(Communicator& comm, const Fingerprint& mine) {
  const int W = comm.world_size();
  const std::vector<uint64_t>& parts = mine.hashes();
  uint64_t whole = parts.size();
  for (size_t p = 0; p < parts.size(); p++)
    whole = splitmix64(whole ^ parts[p] ^ fnv1a64(mine.names()[p].data(), mine.names()[p].size()));
  const std::array<uint64_t, 2> summary = {parts.size(), whole};
  std::vector<std::array<uint64_t, 2>> all(static_cast<size_t>(W));
  comm.host_all_gather(summary.data(), all.data(), sizeof summary);

  int first = -1;
  for (int r = 1; r < W && first < 0; r++)
    if (all[size_t(r)] != all[0]) first = r;
  if (first < 0) return;
  for (int r = 0; r < W; r++)
    TK_CHECK(all[size_t(r)][0] == all[0][0],
             "the ranks disagree: rank {} was given {} parts to agree on and rank 0 {}: they run different builds of "
             "tokamak",
             r, all[size_t(r)][0], all[0][0]);

  std::vector<uint64_t> every(parts.size() * size_t(W));
  comm.host_all_gather(parts.data(), every.data(), parts.size() * sizeof(uint64_t));
  for (size_t p = 0; p < parts.size(); p++)
    if (every[size_t(first) * parts.size() + p] != every[p])
      fail("the ranks disagree on the {}: rank {} of {} differs from rank 0; every rank must be started with the "
           "same command and see the same files",
           mine.names()[p], first, W);
  fail("the ranks disagree: rank {} of {} differs from rank 0", first, W);
}

bool any_rank(Communicator& comm, bool flag) {
  const int32_t mine = flag ? 1 : 0;
  std::vector<int32_t> all(size_t(comm.world_size()));
  comm.host_all_gather(&mine, all.data(), sizeof mine);
  for (int32_t f : all)
    if (f != 0) return true;
  return false;
}

}  // namespace tk::dist
