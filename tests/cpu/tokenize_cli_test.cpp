// `tokamak tokenize` end to end: the built binary, run through the shell with text on stdin, checked
// against the library's own encode/decode and for the messages and exit codes of bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/fs.h"
#include "data/tokenizer.h"

#include <nlohmann/json.hpp>

namespace {

const std::string kTokamak = std::string(TK_BINARY_DIR) + "/tokamak";
const std::string kGpt2Dir = std::string(TK_SOURCE_DIR) + "/.cache/gpt2";
const std::string kWork = std::string(TK_BINARY_DIR) + "/tokenize_cli_test_files";

struct Result {
  int status;
  std::string out, err;
};

Result tokenize(const std::string& args, const std::string& input) {
  std::filesystem::create_directories(kWork);
  std::ofstream(kWork + "/in", std::ios::binary) << input;
  std::string cmd = kTokamak + " tokenize " + args + " < " + kWork + "/in > " + kWork + "/out 2> " + kWork + "/err";
  int status = std::system(cmd.c_str());
  return {WEXITSTATUS(status), tk::fs::read_file(kWork + "/out"), tk::fs::read_file(kWork + "/err")};
}

class TokenizeCli : public testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTokamak)) GTEST_SKIP() << kTokamak << " is not built";
    ASSERT_TRUE(std::filesystem::exists(kGpt2Dir + "/encoder.json")) << "run scripts/setup.sh";
  }
};

TEST_F(TokenizeCli, EncodesStdinToSpaceSeparatedIds) {
  auto tok = tk::Tokenizer::load(kGpt2Dir);
  std::string text = "Hello world!\n  It's <|endoftext|> \xff";
  Result r = tokenize("--tokenizer " + kGpt2Dir, text);
  ASSERT_EQ(r.status, 0) << r.err;
  std::string expected;
  for (int32_t id : tok->encode(text, false)) expected += (expected.empty() ? "" : " ") + std::to_string(id);
  EXPECT_EQ(r.out, expected + "\n");
  r = tokenize("--special --tokenizer " + kGpt2Dir, "a<|endoftext|>b");
  EXPECT_EQ(r.out, "64 50256 65\n");
}

TEST_F(TokenizeCli, DecodesIdsBackToTheExactBytes) {
  Result r = tokenize("--decode --tokenizer " + kGpt2Dir, "15496 995 0\n 50256 220 \n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "Hello world!<|endoftext|> ");
}

TEST_F(TokenizeCli, BadInputIsOneLineAndAnExitCode) {
  Result r = tokenize("--decode --tokenizer " + kGpt2Dir, "15496 nope");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("error: --decode reads token ids, and \"nope\" is not one"), std::string::npos) << r.err;
  r = tokenize("--decode --tokenizer " + kGpt2Dir, "99999");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("99999 is not in the vocabulary"), std::string::npos) << r.err;
  r = tokenize("--tokenizer /nonexistent/tok.json", "x");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("error: tokenizer not found: /nonexistent/tok.json does not exist"), std::string::npos) << r.err;
}

TEST_F(TokenizeCli, ChatPrintsTheTemplatesTextIdsAndGenerationMask) {
  std::filesystem::create_directories(kWork + "/tok");
  for (const char* f : {"encoder.json", "vocab.bpe"})
    std::filesystem::copy_file(kGpt2Dir + "/" + f, kWork + "/tok/" + f, std::filesystem::copy_options::overwrite_existing);
  std::ofstream(kWork + "/tok/chat_template.jinja")
      << "{% for m in messages %}{% if m.role == 'user' %}Q: {{ m.content }}\n{% else %}A: {% generation %}"
         "{{ m.content }}{% endgeneration %}{{ '\\n' }}{% endif %}{% endfor %}{{ raise_exception('no') if messages | length > 2 }}";
  const Result r = tokenize("--tokenizer " + kWork + "/tok --chat",
                            R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " there"}]})"
                            "\n"
                            R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "user", "content": "c"}]})"
                            "\n");
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  const auto one = nlohmann::json::parse(first);
  EXPECT_EQ(one["text"], "Q: Hi\nA:  there\n");
  auto tok = tk::Tokenizer::load(kGpt2Dir);
  EXPECT_EQ(one["ids"].get<std::vector<int32_t>>(), tok->encode("Q: Hi\nA:  there\n", true));
  // GPT-2 makes "A:  there" into "A", ":", " ", " there": the generation block is the last but one token.
  std::vector<int> mask(one["ids"].size(), 0);
  mask[mask.size() - 2] = 1;
  EXPECT_EQ(one["generation_mask"].get<std::vector<int>>(), mask);
  EXPECT_NE(nlohmann::json::parse(second)["error"].get<std::string>().find("the template raised an exception: no"),
            std::string::npos);
}

}  // namespace
