// tokenizer.json and tokenizer_config.json for a trained BPE (see hf_tokenizer_writer.h), laid out as
// Hugging Face tokenizers saves a ByteLevel BPE, with the special tokens after the BPE tokens, as
// GPT-2's <|endoftext|> is.
#include "data/hf_tokenizer_writer.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "core/fs.h"
#include "data/byte_level.h"
#include "data/tokenizer_spec.h"

namespace tk {
namespace {

using nlohmann::ordered_json;

ordered_json byte_level_step(const char* type, bool trim_offsets) {
  return {{"type", type}, {"add_prefix_space", false}, {"trim_offsets", trim_offsets}, {"use_regex", true}};
}

// The vocabulary by id, each spelling once (a later id of the same spelling replaces the earlier, as assigning by key
// does). Appended to the ordered object's list directly: looking each key up first, as operator[] does, is linear
// in the entries so far, minutes for GPT-2's 50,257.
ordered_json vocabulary(const TrainedBpe& bpe) {
  ordered_json vocab = ordered_json::object();
  auto& entries = vocab.get_ref<ordered_json::object_t&>();
  std::unordered_map<std::string, size_t> at;
  auto add = [&](std::string spelling, size_t id) {
    if (auto it = at.find(spelling); it != at.end()) {
      (entries.begin() + std::ptrdiff_t(it->second))->second = id;
      return;
    }
    at.emplace(spelling, entries.size());
    entries.emplace_back(std::move(spelling), id);
  };
  for (size_t id = 0; id < bpe.tokens.size(); id++) add(byte_level::spell(bpe.tokens[id]), id);
  for (size_t i = 0; i < bpe.special_tokens.size(); i++) add(bpe.special_tokens[i], bpe.tokens.size() + i);
  return vocab;
}

ordered_json model(const TrainedBpe& bpe) {
  ordered_json vocab = vocabulary(bpe);
  ordered_json merges = ordered_json::array();
  for (auto [left, right] : bpe.merges)
    merges.push_back(byte_level::spell(bpe.tokens[left]) + " " + byte_level::spell(bpe.tokens[right]));
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", false},
          {"vocab", std::move(vocab)},
          {"merges", std::move(merges)}};
}

}  // namespace

std::string hf_tokenizer_json(const TrainedBpe& bpe) {
  ordered_json added = ordered_json::array();
  for (size_t i = 0; i < bpe.special_tokens.size(); i++)
    added.push_back({{"id", bpe.tokens.size() + i},
                     {"content", bpe.special_tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  ordered_json j = {{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", std::move(added)},
                    {"normalizer", nullptr},
                    {"pre_tokenizer", byte_level_step("ByteLevel", true)},
                    {"post_processor", byte_level_step("ByteLevel", false)},
                    {"decoder", byte_level_step("ByteLevel", true)},
                    {"model", model(bpe)}};
  return j.dump(2) + "\n";
}

std::string hf_tokenizer_config_json(const TrainedBpe& bpe, int64_t model_max_length) {
  TK_CHECK(!bpe.special_tokens.empty(), "the tokenizer needs a special token to end documents");
  const std::string& eot = bpe.special_tokens[0];
  ordered_json j = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                    {"model_max_length", model_max_length},
                    {"bos_token", eot},
                    {"eos_token", eot},
                    {"add_prefix_space", false},
                    {"clean_up_tokenization_spaces", false}};
  return j.dump(2) + "\n";
}

TrainedBpe read_gpt2_bpe(const std::string& encoder_json, const std::string& vocab_bpe) {
  TokenizerSpec spec = read_gpt2_files(encoder_json, vocab_bpe);
  TrainedBpe bpe;
  for (size_t id = 0; id < spec.token_bytes.size(); id++)
    TK_CHECK(!spec.token_bytes[id].empty(), "{}: no token has id {}, below the special token's {}", encoder_json, id,
             spec.added.front().id);
  bpe.tokens = std::move(spec.token_bytes);
  bpe.merges = std::move(spec.merges);
  std::sort(spec.added.begin(), spec.added.end(), [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  for (const AddedToken& t : spec.added) {
    TK_CHECK(t.id == bpe.vocab_size(), "{}: {} has id {}; tokenizer.json is written with it at {}, after the {} tokens",
             encoder_json, t.text, t.id, bpe.vocab_size(), bpe.tokens.size());
    bpe.special_tokens.push_back(t.text);
  }
  return bpe;
}

void write_hf_tokenizer(const TrainedBpe& bpe, const std::string& dir, int64_t model_max_length) {
  namespace stdfs = std::filesystem;
  std::error_code ec;
  TK_CHECK(!stdfs::exists(dir, ec) || stdfs::is_directory(dir, ec), "{} exists and is not a directory", dir);
  stdfs::create_directories(dir, ec);
  if (ec) fail("cannot create the output directory {}: {}", dir, ec.message());
  const std::string config = hf_tokenizer_config_json(bpe, model_max_length), json = hf_tokenizer_json(bpe);
  fs::write_file_atomic((stdfs::path(dir) / "tokenizer_config.json").string(), config);
  fs::write_file_atomic((stdfs::path(dir) / "tokenizer.json").string(), json);
}

}  // namespace tk
