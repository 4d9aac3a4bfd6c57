// Real models' chat templates (Llama 3.1 and 3.2, Qwen2.5, Qwen3, QwQ, Qwen3-Coder, SmolLM2's ChatML, from the npm
// package scripts/fetch_chat_templates.sh fetches) and tokamak's fixtures with generation blocks rendered for generated conversations (system prompts, several
// turns, empty and unicode content, tool calls and tools, reasoning, add_generation_prompt and enable_thinking on
// and off) byte for byte as jinja2 renders them; and every other template that package carries either rendered so
// too or refused by tokamak when it is loaded, never rendered differently.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "chat_template_testing.h"

namespace tk::testing {
namespace {

const std::string kTemplates = std::string(TK_SOURCE_DIR) + "/.cache/chat_templates";

// NAME of .cache/chat_templates, or a path.
std::string read_template(const std::string& name) {
  const std::string path = name.find('/') != std::string::npos ? name : kTemplates + "/" + name + ".jinja";
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " is missing: run scripts/setup.sh (scripts/fetch_chat_templates.sh)";
    return "";
  }
  return fs::read_file(path);
}

class Conversations {
 public:
  explicit Conversations(uint64_t seed) : rng_(seed) {}

  ojson variables(bool tools_and_reasoning) {
    ojson v = {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|im_end|>"}};
    ojson messages = ojson::array();
    if (chance(0.5)) messages.push_back({{"role", "system"}, {"content", text()}});
    const int turns = pick(1, 4);
    for (int t = 0; t < turns; t++) {
      messages.push_back({{"role", "user"}, {"content", text()}});
      if (t == turns - 1 && chance(0.4)) break;  // ends on the user's turn
      ojson assistant = {{"role", "assistant"}, {"content", text()}};
      if (tools_and_reasoning && chance(0.2))
        assistant["content"] = "<think>\n" + text() + "\n</think>\n\n" + text();
      if (tools_and_reasoning && chance(0.1)) assistant["reasoning_content"] = text();
      if (tools_and_reasoning && chance(0.25)) {
        ojson args = {{"city", text()}, {"days", pick(1, 9)}, {"exact", chance(0.5)}};
        ojson call = {{"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", args}}}};
        if (chance(0.2)) call["function"]["arguments"] = args.dump();
        assistant["tool_calls"] = ojson::array({call});
        if (chance(0.3)) assistant["content"] = "";
        messages.push_back(assistant);
        messages.push_back({{"role", "tool"}, {"content", text()}});
        if (chance(0.3)) messages.push_back({{"role", "tool"}, {"content", "{\"temperature\": 21.5}"}});
        continue;
      }
      messages.push_back(assistant);
    }
    v["messages"] = messages;
    if (tools_and_reasoning && chance(0.3)) {
      ojson tools = ojson::array();
      for (int i = 0, n = pick(1, 2); i < n; i++)
        tools.push_back({{"type", "function"},
                         {"function",
                          {{"name", i ? "lookup" : "get_weather"},
                           {"description", text()},
                           {"parameters",
                            {{"type", "object"},
                             {"properties", {{"city", {{"type", "string"}, {"description", "Stadt, 都市"}}},
                                             {"days", {{"type", "integer"}}}}},
                             {"required", ojson::array({"city"})}}}}}});
      v["tools"] = tools;
    }
    v["add_generation_prompt"] = chance(0.5);
    if (chance(0.5)) v["enable_thinking"] = chance(0.5);
    return v;
  }

 private:
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::string text() {
    static const char* const kPieces[] = {
        "hello", "Héllo", "世界", "🎉", "  leading", "trailing  ", "line\nbreak", "\n\nnewlines\n", "<b>tag</b>",
        "{\"json\": 1}", "tab\there", "'quote'", "\"double\"", "back\\slash", "ünïcödé", "Ça va?", "</tool_response>",
        "<tool_response>", "a", "The quick brown fox.", "1.5", "  ", "\u00a0nbsp"};
    if (chance(0.08)) return "";
    std::string out;
    for (int i = 0, n = pick(1, 6); i < n; i++) out += (i ? " " : "") + std::string(kPieces[pick(0, 22)]);
    return out;
  }

  std::mt19937_64 rng_;
};

void check_model(const std::string& name, uint64_t seed, int conversations) {
  const std::string source = read_template(name);
  ASSERT_FALSE(source.empty());
  Conversations gen(seed);
  std::vector<TemplateCase> cases;
  for (int i = 0; i < conversations; i++) cases.push_back({source, gen.variables(true)});
  const int rendered = expect_same_as_jinja2(cases);
  // Most conversations render (some are refused by the template itself, e.g. Llama's single tool call rule).
  EXPECT_GE(rendered, conversations * 6 / 10) << name;
}

TEST(ChatTemplateModels, Llama31) { check_model("llama3.1", 31, 80); }
TEST(ChatTemplateModels, Llama32) { check_model("llama3.2", 32, 80); }
TEST(ChatTemplateModels, Qwen25) { check_model("qwen2.5", 25, 80); }
TEST(ChatTemplateModels, Qwen3) { check_model("qwen3", 3, 100); }
TEST(ChatTemplateModels, QwQ) { check_model("qwq", 4, 60); }
TEST(ChatTemplateModels, Qwen3CoderWithMacros) { check_model("qwen3-coder", 5, 60); }
TEST(ChatTemplateModels, ChatML) { check_model("chatml", 6, 40); }
// tokamak's own templates with {% generation %} blocks (tests/fixtures/chat_templates): the spans too.
TEST(ChatTemplateModels, FixturesWithGenerationBlocks) {
  check_model(std::string(TK_SOURCE_DIR) + "/tests/fixtures/chat_templates/chatml_generation.jinja", 7, 40);
  check_model(std::string(TK_SOURCE_DIR) + "/tests/fixtures/chat_templates/tools_generation.jinja", 8, 60);
}

// Every template of the package: rendered as jinja2 renders it, or refused at load naming what is not supported.
TEST(ChatTemplateModels, EveryTemplateRendersIdenticallyOrIsRefused) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(kTemplates + "/all")) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 50u) << "run scripts/setup.sh (scripts/fetch_chat_templates.sh)";
  Conversations gen(97);
  std::vector<TemplateCase> cases;
  std::vector<std::string> refused;
  for (const std::string& f : files) {
    const std::string source = fs::read_file(f);
    try {
      ChatTemplate t(source, f);
    } catch (const Error& e) {
      refused.push_back(e.what());
      continue;
    }
    for (int i = 0; i < 3; i++) cases.push_back({source, gen.variables(i == 2)});
  }
  const int rendered = expect_same_as_jinja2(cases);
  for (const std::string& r : refused) std::printf("refused: %s\n", r.c_str());
  std::printf("%zu templates: %zu refused at load; %d of %zu conversations rendered identically\n", files.size(),
              refused.size(), rendered, cases.size());
  EXPECT_LE(refused.size(), files.size() / 10);
}

}  // namespace
}  // namespace tk::testing
