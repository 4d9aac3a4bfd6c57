// `tokamak eval` and `tokamak generate` on a model whose weights hold a NaN, or whose file has a flipped
// byte: the built binary must refuse it with exit status 1 and a message naming the file and the tensor,
// where it used to print `val loss -nan` or garbage text and exit 0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "core/fs.h"
#include "data_testing.h"
#include "io/safetensors.h"
#include "model/params.h"
#include "model_testing.h"

namespace tk {
namespace {

const std::string kTokamak = std::string(TK_BINARY_DIR) + "/tokamak";
const std::string kGpt2Dir = std::string(TK_SOURCE_DIR) + "/.cache/gpt2";

struct Result {
  int status;
  std::string err;
};

Result run(const testing::TempDir& dir, const std::string& args) {
  const std::string cmd = kTokamak + " " + args + " > " + dir.path("out") + " 2> " + dir.path("err");
  const int status = std::system(cmd.c_str());
  return {WEXITSTATUS(status), testing::read_text(dir.path("err"))};
}

class CorruptWeightsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTokamak)) GTEST_SKIP() << kTokamak << " is not built";
    ASSERT_TRUE(std::filesystem::exists(kGpt2Dir + "/encoder.json")) << "run scripts/setup.sh";
    // A Hugging Face directory of a tiny Llama with GPT-2's vocabulary and random weights.
    const ModelConfig cfg = testing::tiny_llama_config(50257);
    layout_ = ParamLayout::build(cfg);
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.f, 0.02f);
    params_.assign(size_t(layout_.total), 0.f);
    for (float& p : params_) p = dist(rng);
    std::filesystem::create_directories(dir_.path("model"));
    fs::write_file_atomic(dir_.path("model/config.json"), cfg.to_hf_json().dump(2));
  }

  void write_weights() const {
    SafeTensorsWriter w;
    for (const ParamInfo& p : layout_.params) w.add_f32(p.name, p.shape, params_.data() + p.offset);
    w.write(dir_.path("model/model.safetensors"));
  }

  std::string generate() const {
    const Result r = run(dir_, "generate --device cpu --model " + dir_.path("model") + " --tokenizer " + kGpt2Dir +
                                   " --prompt 'The jury' --max-new-tokens 4");
    EXPECT_EQ(r.status, 1) << r.err;
    return r.err;
  }

  testing::TempDir dir_;
  ParamLayout layout_;
  std::vector<float> params_;
};

TEST_F(CorruptWeightsCli, NanWeightsAreRefusedByGenerateAndEval) {
  params_[size_t(layout_.find("model.layers.0.mlp.down_proj.weight")->offset) + 5] =
      std::numeric_limits<float>::quiet_NaN();
  write_weights();
  const std::string want = "tensor \"model.layers.0.mlp.down_proj.weight\" holds NaN at element 5";
  EXPECT_NE(generate().find(want), std::string::npos);

  testing::write_text(dir_.path("text/a.txt"), "The jury said it did find that many of the city's voters were glad.");
  ASSERT_EQ(run(dir_, "prepare --tokenizer " + kGpt2Dir + " --input " + dir_.path("text") + " --out " +
                          dir_.path("data") + " --val-fraction 0")
                .status,
            0);
  const Result eval = run(dir_, "eval --device cpu --model " + dir_.path("model") + " --data " + dir_.path("data") +
                                    " --split train --seq 8");
  EXPECT_EQ(eval.status, 1) << eval.err;
  EXPECT_NE(eval.err.find(want), std::string::npos) << eval.err;
}

// Weights that are finite but huge pass the load's checks and overflow in the forward: eval printed `val loss -nan`
// (`"loss": null` with --json) and exited 0, generate printed garbage. Both now exit 1 naming the layer whose
// output first holds a number that is not finite, and its largest weight.
TEST_F(CorruptWeightsCli, HugeFiniteWeightsAreAnErrorNamingWhereInEvalAndGenerate) {
  // Values and outputs of attention scaled to 10^30: layer 0's output passes float32's 3.4e38.
  for (const auto& [name, size] : {std::pair{"model.layers.0.self_attn.v_proj.weight", 3e30f},
                                   {"model.layers.0.self_attn.o_proj.weight", 2e30f}}) {
    const ParamInfo& p = *layout_.find(name);
    for (int64_t i = 0; i < p.numel; i++) {
      float& w = params_[size_t(p.offset + i)];
      w = std::copysign(size, w);
    }
  }
  write_weights();
  const std::string weight = "at position 0; its largest weight is 3e+30, in model.layers.0.self_attn.v_proj.weight";
  const std::string err = generate();
  EXPECT_NE(err.find("the logits after 2 tokens are not finite (NaN at token id 0): layer 0's output holds an "
                     "infinity " + weight),
            std::string::npos)
      << err;

  testing::write_text(dir_.path("text/a.txt"), "The jury said it did find that many of the city's voters were glad.");
  ASSERT_EQ(run(dir_, "prepare --tokenizer " + kGpt2Dir + " --input " + dir_.path("text") + " --out " +
                          dir_.path("data") + " --val-fraction 0")
                .status,
            0);
  for (const char* json : {"", " --json"}) {
    const Result eval = run(dir_, "eval --device cpu --model " + dir_.path("model") + " --data " + dir_.path("data") +
                                      " --split train --seq 8" + json);
    EXPECT_EQ(eval.status, 1) << eval.err;
    EXPECT_NE(eval.err.find("the loss of windows 0 to 1 is -nan: in window 0, layer 0's output holds NaN " + weight),
              std::string::npos)
        << eval.err;
    EXPECT_EQ(testing::read_text(dir_.path("out")), "");  // no loss printed
  }

  // Every number before the logits finite, the logits not: the LM head (here the tied embedding) is named.
  SetUp();
  const ParamInfo& embed = *layout_.find("model.embed_tokens.weight");
  for (int64_t i = 0; i < embed.numel; i++) {
    float& w = params_[size_t(embed.offset + i)];
    w = std::copysign(3e38f, w);
  }
  const ParamInfo& norm = *layout_.find("model.norm.weight");
  std::fill_n(params_.begin() + norm.offset, norm.numel, 1.f);
  write_weights();
  const std::string head = "the LM head's logits (every number before them is finite); its largest weight is 3e+38, "
                           "in model.embed_tokens.weight";
  EXPECT_NE(generate().find(head), std::string::npos);
  const Result eval = run(dir_, "eval --device cpu --model " + dir_.path("model") + " --data " + dir_.path("data") +
                                    " --split train --seq 8");
  EXPECT_EQ(eval.status, 1) << eval.err;
  EXPECT_NE(eval.err.find("is -nan: in " + head), std::string::npos) << eval.err;
}

TEST_F(CorruptWeightsCli, AFlippedByteIsRefusedByGenerate) {
  write_weights();
  const std::string file = dir_.path("model/model.safetensors");
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(-40, std::ios::end);  // inside model.norm.weight, the last tensor
  const char byte = char(io.get() ^ 0x40);
  io.seekp(-40, std::ios::end);
  io.put(byte);
  io.close();
  EXPECT_NE(generate().find(file + ": tensor \"model.norm.weight\" is corrupt"), std::string::npos);
}

}  // namespace
}  // namespace tk
