// What the ranks of a run must agree on, checked before any work: a fingerprint of what each rank was given
// (command line, configuration, model, data, tokenizer) compared across ranks at start; and the collective stop
// decision that a training loop takes once per step, so that a signal seen by one rank stops every rank at the
// same step.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dist/communicator.h"

namespace tk::dist {

// Named parts, each kept as a hash of its bytes.
class Fingerprint {
 public:
  Fingerprint& add(std::string name, std::string_view bytes);
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<uint64_t>& hashes() const { return hashes_; }

 private:
  std::vector<std::string> names_;
  std::vector<uint64_t> hashes_;
};

// Compares every rank's fingerprint with rank 0's. When one differs, throws the same tk::Error on every rank,
// naming the first rank that differs and the first part it differs in. Every rank calls it at the same point.
void require_agreement(Communicator& comm, const Fingerprint& mine);

// True on every rank when `flag` is true on any (the maximum over ranks). Every rank calls it at the same point.
bool any_rank(Communicator& comm, bool flag);

}  // namespace tk::dist
