// `tokamak train-tokenizer`: learns a byte-level BPE from text and JSON Lines (read as `prepare` reads
// them) and writes it as a Hugging Face tokenizer directory that `prepare`, `tokenize` and transformers load.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include "cli/command.h"
#include "core/error.h"
#include "core/format.h"
#include "core/progress.h"
#include "data/bpe_trainer.h"
#include "data/hf_tokenizer_writer.h"
#include "data/text_input.h"

namespace {

struct TrainTokenizerArgs {
  std::vector<std::string> inputs;
  std::string out, text_field = "text";
  tk::BpeTrainerOptions bpe;
  int threads = 0;
  int64_t model_max_length = 2048;
};

int run_train_tokenizer(const TrainTokenizerArgs& a) {
  const auto start = std::chrono::steady_clock::now();
  tk::check_bpe_trainer_options(a.bpe);
  TK_CHECK(a.model_max_length > 0, "--model-max-length must be positive, not {}", a.model_max_length);
  std::error_code ec;
  TK_CHECK(!std::filesystem::exists(a.out, ec) || std::filesystem::is_directory(a.out, ec),
           "--out {} exists and is not a directory", a.out);
  const std::vector<tk::InputFile> inputs = tk::find_inputs(a.inputs);
  uint64_t input_bytes = 0;
  for (const tk::InputFile& f : inputs) input_bytes += f.bytes;

  tk::PieceCounts pieces;
  {
    tk::ProgressBar bar("count", input_bytes, "pieces");
    pieces = tk::count_input_pieces(inputs, a.text_field, a.threads, &bar);
    bar.finish();
  }
  tk::TrainedBpe bpe;
  {
    const uint64_t merges = uint64_t(a.bpe.vocab_size) - 256 - a.bpe.special_tokens.size();
    tk::ProgressBar bar("merge", merges, "merges", stderr, tk::ProgressUnit::Items);
    bpe = tk::train_bpe(pieces, a.bpe, &bar);
    bar.finish();
  }

  tk::write_hf_tokenizer(bpe, a.out, a.model_max_length);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("trained {}/tokenizer.json in {:.1f}s: vocab {} = 256 bytes + {} merges + {} special; {} of text "
             "-> {} tokens, {:.3f} bytes/token\n",
             a.out, seconds, bpe.vocab_size(), bpe.merges.size(), bpe.special_tokens.size(),
             tk::format_bytes_decimal(double(bpe.text_bytes)), bpe.text_tokens, bpe.bytes_per_token());
  if (bpe.vocab_size() < a.bpe.vocab_size)
    fmt::print("  the vocabulary is smaller than --vocab-size {}: {}\n", a.bpe.vocab_size, bpe.stopped_because);
  return 0;
}

tk::cli::Runner setup_train_tokenizer(CLI::App& app) {
  auto a = std::make_shared<TrainTokenizerArgs>();
  app.add_option("--input", a->inputs,
                 "Input files and directories (searched recursively, in sorted order) of .txt (one document per "
                 "file), .jsonl, .jsonl.gz, .jsonl.zst, .parquet")
      ->required();
  app.add_option("--vocab-size", a->bpe.vocab_size, "Tokens in all: 256 bytes + merges + special tokens")
      ->required();
  app.add_option("--out", a->out, "Directory for tokenizer.json and tokenizer_config.json")->required();
  app.add_option("--min-frequency", a->bpe.min_frequency, "Stop merging at the first pair seen fewer times")
      ->capture_default_str();
  app.add_option("--special-tokens", a->bpe.special_tokens,
                 "Special tokens, placed after the BPE tokens; the first one separates documents")
      ->capture_default_str();
  app.add_option("--text-field", a->text_field, "The JSON Lines field or Parquet column that holds a document's text")
      ->capture_default_str();
  app.add_option("--threads", a->threads, "Threads counting the text's pieces (0: one per core)")
      ->capture_default_str();
  app.add_option("--model-max-length", a->model_max_length, "model_max_length in tokenizer_config.json")
      ->capture_default_str();
  return [a] { return run_train_tokenizer(*a); };
}

tk::cli::Command train_tokenizer_cmd("train-tokenizer",
                                     "Learn a byte-level BPE tokenizer (Hugging Face tokenizer.json) from text",
                                     setup_train_tokenizer);

}  // namespace
