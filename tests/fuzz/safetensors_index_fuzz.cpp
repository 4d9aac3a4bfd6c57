// Fuzzes model.safetensors.index.json: any text as the index of a sharded model whose two shard files
// are valid, loaded as `tokamak train --model DIR` loads weights.
#include <filesystem>
#include <random>
#include <vector>

#include "fuzz_support.h"
#include "io/hf.h"
#include "io/safetensors.h"

namespace {

tk::ModelConfig tiny_config() {
  tk::ModelConfig c;
  c.name = "fuzz";
  c.vocab_size = 11;
  c.d_model = 8;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  c.ffn_dim = 12;
  c.max_seq = 16;
  return c;
}

// model/: the embedding in model-00001-of-00002.safetensors, everything else in model-00002-of-00002.safetensors.
const std::string& model_dir(const tk::ParamLayout& layout) {
  static const std::string dir = [&] {
    const std::string d = tk::fuzz::scratch_dir() + "/model";
    std::filesystem::create_directories(d);
    std::mt19937 rng(1);
    std::normal_distribution<float> dist;
    tk::SafeTensorsWriter first, second;
    for (const tk::ParamInfo& p : layout.params) {
      std::vector<float> v(size_t(p.numel));
      for (float& x : v) x = dist(rng);
      (p.name == "model.embed_tokens.weight" ? first : second).add_f32(p.name, p.shape, v.data());
    }
    first.write(d + "/model-00001-of-00002.safetensors");
    second.write(d + "/model-00002-of-00002.safetensors");
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tk;
  static const ModelConfig cfg = tiny_config();
  static const ParamLayout layout = ParamLayout::build(cfg);
  const std::string& dir = model_dir(layout);
  fuzz::write_file("model/model.safetensors.index.json", fuzz::as_text(data, size));
  fuzz::expect_clear_errors([&] {
    std::vector<float> params = load_params(cfg, layout, dir);
    fuzz::require(int64_t(params.size()) == layout.total);
  });
  return 0;
}
