// `tokamak generate` on the built binary, with a small random model and GPT-2's tokenizer: --num-samples N prints
// N continuations of the prompt, sample i the one --seed SEED+i prints alone; --stop ends a sample where its text
// contains the string, which is not printed; the ids a padded vocabulary adds are never drawn; --chat continues the
// chat template's text with the generation prompt and stops at the end of the assistant's turn.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/fs.h"
#include "data_testing.h"
#include "io/hf.h"
#include "model/model.h"
#include "ops/cpu/cpu_ops.h"

namespace tk {
namespace {

const std::string kTokamak = std::string(TK_BINARY_DIR) + "/tokamak";
const std::string kGpt2 = std::string(TK_SOURCE_DIR) + "/.cache/gpt2";

class GenerateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTokamak)) GTEST_SKIP() << kTokamak << " is not built";
    if (!std::filesystem::exists(kGpt2 + "/vocab.bpe")) GTEST_SKIP() << "no GPT-2 tokenizer in .cache";
    export_model(50257, "model");
  }

  static ModelConfig config(int vocab_size) {
    ModelConfig c;
    c.name = "generate-cli-test";
    c.vocab_size = vocab_size;
    c.d_model = 32;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 8;
    c.ffn_dim = 64;
    c.max_seq = 64;
    c.bos_id = c.eos_id = 50256;
    return c;
  }

  // A random model with GPT-2's tokenizer in dir_/name; `edit` may change its parameters first.
  void export_model(int vocab_size, const std::string& name, bool tied = true,
                    const std::function<void(const ModelConfig&, const ParamLayout&, std::vector<float>&)>& edit = {}) {
    ModelConfig c = config(vocab_size);
    c.tied_embeddings = tied;
    auto ops = make_cpu_ops(DType::F32);
    Model model(c, *ops, ModelOptions{1, 16, false});
    model.init_params(7);
    std::vector<float> params = model.params_f32();
    if (edit) edit(c, model.layout(), params);
    export_hf(c, model.layout(), params, dir_.path(name), "f32", kGpt2);
  }

  // stdout of `tokamak generate` on the model; the exit status must be 0.
  std::string generate(const std::string& args, const std::string& name = "model") const {
    const std::string cmd = fmt::format("{} generate --model {} --device cpu --prompt 'The jury' --max-new-tokens 12 "
                                        "{} > {} 2> {}",
                                        kTokamak, dir_.path(name), args, dir_.path("out"), dir_.path("err"));
    const int status = std::system(cmd.c_str());
    EXPECT_EQ(WEXITSTATUS(status), 0) << fs::read_file(dir_.path("err"));
    return fs::read_file(dir_.path("out"));
  }

  testing::TempDir dir_;
};

TEST_F(GenerateCli, SamplesAreThoseOfConsecutiveSeeds) {
  const std::string all = generate("--seed 5 --num-samples 3");
  for (int i = 0; i < 3; i++) {
    const std::string header = fmt::format("--- sample {} of 3 (seed {}) ---\n", i + 1, 5 + i);
    const size_t at = all.find(header);
    ASSERT_NE(at, std::string::npos) << all;
    const size_t from = at + header.size();
    const size_t next = all.find("\n--- sample ", from);
    const std::string sample = all.substr(from, next == std::string::npos ? std::string::npos : next - from);
    EXPECT_EQ(sample, generate(fmt::format("--seed {}", 5 + i))) << "sample " << i + 1;
  }
  EXPECT_EQ(generate("--seed 5 --num-samples 1"), generate("--seed 5"));
  EXPECT_EQ(generate("--seed 5").find("--- sample"), std::string::npos);
}

TEST_F(GenerateCli, StopStringEndsTheSampleUnprinted) {
  const std::string prompt = "The jury";
  const std::string whole = generate("--seed 5");
  ASSERT_GT(whole.size(), prompt.size() + 1);
  const std::string text = whole.substr(prompt.size(), whole.size() - prompt.size() - 1);
  // Two letters of the continuation after its first few bytes: a stop string the shell passes as it is.
  size_t at = 3;
  while (at + 1 < text.size() && !(std::isalpha(static_cast<unsigned char>(text[at])) &&
                                   std::isalpha(static_cast<unsigned char>(text[at + 1]))))
    at++;
  if (at + 1 >= text.size()) GTEST_SKIP() << "no two letters in a row in the sample: " << text;
  const std::string stop = text.substr(at, 2);
  const std::string expected = prompt + text.substr(0, text.find(stop)) + "\n";
  EXPECT_EQ(generate("--seed 5 --stop '" + stop + "'"), expected) << "stop " << stop;
  EXPECT_EQ(generate("--seed 5 --stop '" + stop + "' --stop 'not in it'"), expected);
  EXPECT_EQ(generate("--seed 5 --stop 'not in it'"), whole);
}

// GPT-2's 50257 tokens padded to 50304: the LM head's rows of the real tokens are zero and the padding's large, so
// that every padding id outscores every token; greedy decoding and sampling must still print only tokens.
TEST_F(GenerateCli, PaddingIdsAreNeverSampled) {
  export_model(50304, "padded", false, [](const ModelConfig& c, const ParamLayout& layout, std::vector<float>& p) {
    const int64_t d = c.d_model, real = 50257;
    for (int64_t i = 0; i < real * d; i++) p[size_t(layout.lm_head + i)] = 0.0f;
    for (int64_t i = real * d; i < c.vocab_size * d; i++) p[size_t(layout.lm_head + i)] *= 1e4f;
  });
  // At temperature 0 every real token scores 0: the first, "!", each time.
  EXPECT_EQ(generate("--temperature 0", "padded"), "The jury!!!!!!!!!!!!\n");
  EXPECT_EQ(generate("--seed 3", "padded").rfind("The jury", 0), 0u);
}

TEST_F(GenerateCli, ChatAppliesTheTemplateAndStopsAtTheEndOfTheTurn) {
  // A template whose turns end with a newline: the reply is the plain continuation of the rendered prompt, up to its
  // first newline token.
  fs::write_file_atomic(dir_.path("model/chat_template.jinja"),
                        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                        "{% if add_generation_prompt %}assistant:{% endif %}");
  auto run = [&](const std::string& args) {
    const std::string cmd = fmt::format("{} generate --model {} --device cpu --max-new-tokens 40 --temperature 0 {} > {} 2> {}",
                                        kTokamak, dir_.path("model"), args, dir_.path("out"), dir_.path("err"));
    const int status = std::system(cmd.c_str());
    EXPECT_EQ(WEXITSTATUS(status), 0) << fs::read_file(dir_.path("err"));
    return fs::read_file(dir_.path("out"));
  };
  const std::string prompt = "system: Be brief.\nuser: The jury\nassistant:";
  const std::string plain = run("--prompt '" + prompt + "'");
  ASSERT_EQ(plain.substr(0, prompt.size()), prompt);
  const std::string continuation = plain.substr(prompt.size());
  const std::string reply = run("--chat --system 'Be brief.' --prompt 'The jury'");
  const size_t newline = continuation.find('\n');
  EXPECT_EQ(reply, (newline == std::string::npos ? continuation : continuation.substr(0, newline) + "\n"));
  std::filesystem::remove(dir_.path("model/chat_template.jinja"));
  const std::string cmd = fmt::format("{} generate --model {} --device cpu --chat --prompt hi > {} 2> {}", kTokamak,
                                      dir_.path("model"), dir_.path("out"), dir_.path("err"));
  EXPECT_NE(WEXITSTATUS(std::system(cmd.c_str())), 0);
  EXPECT_NE(fs::read_file(dir_.path("err")).find("--chat needs a chat template"), std::string::npos);
}

}  // namespace
}  // namespace tk
