// Fuzzes ShardReader: any bytes as a token shard. A shard that opens must read back whole (its tokens and its loss
// mask), its documents' offsets increasing and inside the token stream.
#include <algorithm>
#include <vector>

#include "data/shard.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tk;
  const std::string path = fuzz::write_file("shard.bin", fuzz::as_text(data, size));
  fuzz::expect_clear_errors([&] {
    ShardReader r(path);
    std::vector<int32_t> tokens(r.tokens());
    r.read(0, r.tokens(), tokens.data());
    std::vector<uint8_t> trained(r.tokens());
    r.read_trained(0, r.tokens(), trained.data());
    fuzz::require(std::all_of(trained.begin(), trained.end(), [](uint8_t b) { return b <= 1; }));
    uint64_t prev = 0;
    for (uint64_t i = 0; i < r.documents(); i++) {
      const uint64_t o = r.doc_offsets()[i];
      fuzz::require(i == 0 ? o == 0 : o > prev);
      fuzz::require(o < r.tokens());
      prev = o;
    }
    fuzz::require(tokens.back() == int32_t(r.header().eot_id));
    fuzz::require(uint64_t(std::count(tokens.begin(), tokens.end(), int32_t(r.header().eot_id))) == r.documents());
  });
  return 0;
}
