// Fuzzes meta.json: any text as a prepared directory's listing, beside one valid shard. A listing that
// reads may name only files inside the directory; each shard it lists is then opened as the loader would.
#include <filesystem>
#include <vector>

#include "data/shard.h"
#include "fuzz_support.h"

namespace {

// data/train_000000.bin: three documents of a 257-token vocabulary, as the seed meta.json files list it.
const std::string& data_dir() {
  static const std::string dir = [] {
    const std::string d = tk::fuzz::scratch_dir() + "/data";
    std::filesystem::create_directories(d);
    tk::ShardWriter w(d + "/train_000000.bin", 257, 256, 0x0123456789abcdefull);
    for (const std::vector<int32_t>& doc : {std::vector<int32_t>{72, 105, 33}, {1}, {255, 0, 7, 9, 200}})
      w.add_document(doc);
    w.finish();
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tk;
  const std::string& dir = data_dir();
  fuzz::write_file("data/meta.json", fuzz::as_text(data, size));
  fuzz::expect_clear_errors([&] {
    const DatasetListing listing = read_dataset_listing(dir);
    const std::string inside = std::filesystem::weakly_canonical(dir).string() + "/";
    for (const auto& [name, shards] : listing.splits)
      for (const ShardEntry& e : shards) {
        fuzz::require(std::filesystem::weakly_canonical(e.path).string().starts_with(inside));
        fuzz::expect_clear_errors([&] { ShardReader r(e.path, {listing.vocab_size, listing.fingerprint}); });
      }
  });
  return 0;
}
