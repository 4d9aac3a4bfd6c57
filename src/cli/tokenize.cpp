// `tokamak tokenize`: text on stdin to token ids on stdout (space-separated), or with --decode ids
// back to text, or with --chat conversations to their chat template's text, ids and assistant mask: the tool for
// checking what a tokenizer (and its template) makes of an input, byte for byte.
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "data/chat_template/chat_template.h"
#include "data/example_tokens.h"
#include "data/tokenizer.h"

namespace {

std::string read_stdin() {
  std::ios::sync_with_stdio(false);
  std::string text{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  TK_CHECK(!std::cin.bad(), "cannot read standard input");
  return text;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
    }
    TK_CHECK(used == word.size() && id >= 0 && id <= INT32_MAX, "--decode reads token ids, and {:?} is not one",
             word);
    ids.push_back(int32_t(id));
  }
  return ids;
}

struct Options {
  std::string tokenizer, chat_template;
  bool decode = false;
  bool special = false;
  bool chat = false;
};

// Each line of stdin a conversation {"messages", "tools", "add_generation_prompt", "variables"}; each line of stdout
// {"text", "ids", "generation_mask"} as apply_chat_template(tokenize=True, return_assistant_tokens_mask=True) gives
// them, or {"error"} where rendering fails.
int run_chat(const Options& o, const tk::Tokenizer& tok) {
  const std::optional<tk::ChatTemplate> t = o.chat_template.empty()
                                                ? tk::ChatTemplate::find_for_tokenizer(o.tokenizer)
                                                : std::optional<tk::ChatTemplate>(tk::ChatTemplate::load_file(o.chat_template));
  TK_CHECK(t, "the tokenizer {} has no chat template: give one with --chat-template FILE", o.tokenizer);
  std::ios::sync_with_stdio(false);
  std::string line;
  for (uint64_t n = 1; std::getline(std::cin, line); n++) {
    if (line.empty()) continue;
    using ojson = nlohmann::ordered_json;
    const ojson in = ojson::parse(line, nullptr, false);
    TK_CHECK(in.is_object(), "stdin:{}: not a JSON object", n);
    ojson out;
    try {
      tk::ChatInputs c;
      c.messages = in.value("messages", ojson::array());
      c.tools = in.value("tools", ojson());
      c.add_generation_prompt = in.value("add_generation_prompt", false);
      c.variables = in.value("variables", ojson::object());
      const tk::RenderedChat r = t->render(c);
      tk::ExampleTokens e = tk::tokens_marking_spans(tok, r.text, r.generation, true, fmt::format("stdin:{}", n));
      e.trained.pop_back();
      out = {{"text", r.text}, {"ids", e.tokens}, {"generation_mask", e.trained}};
    } catch (const tk::Error& e) {
      out = {{"error", e.what()}};
    }
    fmt::print("{}\n", out.dump());
  }
  return 0;
}

int run(const Options& o) {
  auto tok = tk::Tokenizer::load(o.tokenizer);
  if (o.chat) return run_chat(o, *tok);
  std::string input = read_stdin();
  if (o.decode) {
    std::string text = tok->decode(parse_ids(input));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  std::vector<int32_t> ids = tok->encode(input, o.special);
  fmt::print("{}\n", fmt::join(ids, " "));
  return 0;
}

tk::cli::Command tokenize_cmd("tokenize", "Print the token ids of the text on stdin (or, with --decode, the reverse)",
                              [](CLI::App& app) -> tk::cli::Runner {
                                auto o = std::make_shared<Options>();
                                app.add_option("--tokenizer", o->tokenizer,
                                               "tokenizer.json, a directory with it or with encoder.json + "
                                               "vocab.bpe, or a .tiktoken rank file")
                                    ->required();
                                app.add_flag("--decode", o->decode, "Read ids on stdin and print the text they spell");
                                app.add_flag("--chat", o->chat,
                                             "Read conversations as JSON lines ({\"messages\", \"tools\", "
                                             "\"add_generation_prompt\", \"variables\"}) and print each one's chat "
                                             "template text, ids and assistant mask as a JSON line");
                                app.add_option("--chat-template", o->chat_template,
                                               "With --chat: a .jinja file or tokenizer_config.json (default: the "
                                               "tokenizer's own)");
                                app.add_flag("--special", o->special,
                                             "Read special tokens spelled in the text (e.g. <|endoftext|>) as "
                                             "their ids rather than as ordinary text");
                                return [o] { return run(*o); };
                              });

}  // namespace
