// `tokamak prepare`: tokenizes text, JSON Lines and Parquet into packed token shards plus meta.json, the
// input of `tokamak train`. The work is in data/prepare.h; this file declares the options and prints the summary.
#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "cli/command.h"
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
