// `tokamak tokenize`: text on stdin to token ids on stdout (space-separated), or with --decode ids
// back to text: the tool for checking what a tokenizer makes of an input, byte for byte.
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli/command.h"
#include "core/error.h"
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
  std::string tokenizer;
  bool decode = false;
  bool special = false;
};

int run(const Options& o) {
  auto tok = tk::Tokenizer::load(o.tokenizer);
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
                                app.add_flag("--special", o->special,
                                             "Read special tokens spelled in the text (e.g. <|endoftext|>) as "
                                             "their ids rather than as ordinary text");
                                return [o] { return run(*o); };
                              });

}  // namespace
