// Fuzzes config.json: any text as a Hugging Face model config. A config that parses lays out its
// parameters without overflow, and its own config.json parses back to the same shape.
#include "fuzz_support.h"
#include "model/config.h"
#include "model/params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tk;
  const std::string path = fuzz::write_file("config.json", fuzz::as_text(data, size));
  fuzz::expect_clear_errors([&] {
    const ModelConfig c = ModelConfig::resolve(path);
    const ParamLayout layout = ParamLayout::build(c);
    fuzz::require(layout.total >= c.total_params());
    fuzz::require(c.flops_per_token(c.max_seq) > 0);
    const ModelConfig back = ModelConfig::from_hf_json(c.to_hf_json(), "round trip");
    fuzz::require(back.total_params() == c.total_params() && back.arch == c.arch && back.head_dim == c.head_dim &&
                  back.max_seq == c.max_seq && back.bos_id == c.bos_id && back.eos_id == c.eos_id);
  });
  return 0;
}
