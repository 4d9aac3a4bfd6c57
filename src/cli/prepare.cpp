// `tokamak prepare`: tokenizes text, JSON Lines (text, chat, prompt/completion or alpaca records) and Parquet (a
// text column) into token shards with their loss masks plus meta.json, the input of `tokamak train`. The work is in
// data/prepare.h; this file declares the options and prints the summary.
#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

namespace {

// The command line as it was typed, quoted for a shell: meta.json records how the data was made.
std::string invoked_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  size_t begin = 0;
  for (size_t end; (end = raw.find('\0', begin)) != std::string::npos; begin = end + 1) {
    std::string arg = raw.substr(begin, end - begin);
    const bool plain = !arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789-_./=,:+@%") == std::string::npos;
    if (!plain) {
      std::string quoted = "'";
      for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      arg = quoted + "'";
    }
    out += (out.empty() ? "" : " ") + arg;
  }
  return out;
}

tk::cli::Command prepare_cmd(
    "prepare", "Tokenize .txt/.jsonl/.jsonl.gz/.jsonl.zst/.parquet files into packed token shards for training",
    [](CLI::App& app) -> tk::cli::Runner {
      auto opts = std::make_shared<tk::PrepareOptions>();
      app.add_option("--tokenizer", opts->tokenizer_path,
                     "Tokenizer: a directory with tokenizer.json or encoder.json + vocab.bpe, a tokenizer.json, or a "
                     "*.tiktoken file")
          ->required();
      app.add_option("--input", opts->inputs,
                     "Input files and directories (searched recursively, in sorted order) of .txt (one document per "
                     "file), .jsonl, .jsonl.gz, .jsonl.zst, .parquet")
          ->required();
      app.add_option("--out", opts->out_dir, "Output directory for the shards and meta.json")->required();
      app.add_option("--text-field", opts->text_field,
                     "The JSON Lines field or Parquet column that holds a document's text")
          ->capture_default_str();
      app.add_option_function<std::string>(
             "--format", [opts](const std::string& f) { opts->format = tk::parse_record_format(f); },
             "The records' kind: auto (told by the first record's fields), text, chat, prompt-completion, alpaca")
          ->default_str("auto");
      app.add_option("--messages-field", opts->fields.messages, "Chat records' list of {role, content} messages")
          ->capture_default_str();
      app.add_option("--tools-field", opts->fields.tools, "Chat records' optional list of tools")->capture_default_str();
      app.add_option("--prompt-field", opts->fields.prompt, "Prompt/completion records' prompt")->capture_default_str();
      app.add_option("--completion-field", opts->fields.completion, "Prompt/completion records' completion")
          ->capture_default_str();
      app.add_option("--instruction-field", opts->fields.instruction, "Alpaca records' instruction")
          ->capture_default_str();
      app.add_option("--input-field", opts->fields.input, "Alpaca records' optional input")->capture_default_str();
      app.add_option("--output-field", opts->fields.output, "Alpaca records' output")->capture_default_str();
      app.add_option_function<std::string>(
             "--train-on", [opts](const std::string& t) { opts->train_on = tk::parse_train_on(t); },
             "Tokens trained on: assistant (every assistant turn or completion), completion (the last assistant turn), "
             "all")
          ->default_str("assistant");
      app.add_option("--chat-template", opts->chat_template,
                     "Chat template: a .jinja file or a tokenizer_config.json (default: the tokenizer's own); none: "
                     "prompt/completion and alpaca records in the plain format");
      app.add_option_function<std::vector<std::string>>(
          "--chat-var",
          [opts](const std::vector<std::string>& vars) {
            for (const std::string& v : vars) {
              const size_t eq = v.find('=');
              TK_CHECK(eq != std::string::npos && eq > 0, "--chat-var takes NAME=JSON, not \"{}\"", v);
              const auto value = nlohmann::ordered_json::parse(v.substr(eq + 1), nullptr, false);
              TK_CHECK(!value.is_discarded(), "--chat-var {}: the value is not JSON (a string needs quotes)", v);
              opts->chat_variables[v.substr(0, eq)] = value;
            }
          },
          "A variable for the chat template, NAME=JSON (e.g. enable_thinking=false); repeatable");
      app.add_option("--seq", opts->seq,
                     "Chat, prompt/completion and alpaca examples are packed into sequences of this many tokens, the "
                     "--seq of train (0: not packed)")
          ->capture_default_str();
      app.add_option_function<double>(
          "--val-fraction", [opts](double fraction) { opts->val_fraction = fraction; },
          "Share of documents in the validation split, in [0, 1) (default: about 0.5% of the tokens, at least "
          "20,000 tokens and 10 documents; docs/data.md)");
      app.add_option("--shard-tokens", opts->shard_tokens, "Tokens per shard (shards end at a document boundary)")
          ->capture_default_str();
      app.add_option("--threads", opts->threads, "Tokenizing threads (0: one per core)")->capture_default_str();
      app.add_option("--seed", opts->seed, "Seed of the train/validation split")->capture_default_str();
      return [opts] {
        opts->command = invoked_command();
        const std::unique_ptr<tk::Tokenizer> tokenizer = tk::Tokenizer::load(opts->tokenizer_path);
        const tk::PrepareSummary summary = tk::prepare(*tokenizer, *opts);
        fmt::print("{}", tk::format_summary(summary));
        return 0;
      };
    });

}  // namespace
