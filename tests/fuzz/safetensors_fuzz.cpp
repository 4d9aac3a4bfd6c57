// Fuzzes the safetensors reader: any bytes as a file. A file that opens has tensors that tile its data
// section; each is read (checksum verified) and, when it holds floats, converted.
#include <vector>

#include "fuzz_support.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tk;
  const std::string path = fuzz::write_file("model.safetensors", fuzz::as_text(data, size));
  fuzz::expect_clear_errors([&] {
    auto f = SafeTensorsFile::open(path);
    size_t covered = 0;
    for (const SafeTensorInfo& t : f->tensors()) {
      fuzz::require(t.begin == covered);
      covered = t.end;
      fuzz::require(f->find(t.name) == &t);
      fuzz::expect_clear_errors([&] {
        f->data(t);
        std::vector<float> values(size_t(t.numel()));
        f->read_f32(t, values.data());
      });
    }
  });
  return 0;
}
