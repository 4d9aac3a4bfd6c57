// GPT-2's own tokenizer files: encoder.json (byte-level spelling -> id) and vocab.bpe (one merge
// "left right" per line after a "#version" line), with GPT-2's regex and <|endoftext|> as the one
// special token, exactly as OpenAI's encoder.py and the gpt-3-encoder package read them.
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "core/fs.h"
#include "core/json_integer.h"
#include "core/text_lines.h"
#include "data/byte_level.h"
#include "data/tokenizer_spec.h"

namespace tk {
namespace {

constexpr const char* kEndOfText = "<|endoftext|>";

std::unordered_map<std::string, int32_t> read_encoder(const std::string& path, TokenizerSpec& spec) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(fs::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not valid JSON: {}", path, e.what());
  }
  TK_CHECK(j.is_object() && !j.empty(), "{} should map token spellings to ids, but it is not a JSON object", path);
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(j.size());
  for (auto& [spelled, value] : j.items()) {
    const auto id = json_integer<int32_t>(value, path, fmt::format("the id of {:?}", spelled), 0, kMaxTokenId - 1);
    ids.emplace(spelled, id);
    if (spelled == kEndOfText) {
      spec.added.push_back({spelled, id});
      continue;
    }
    auto bytes = byte_level::unspell(spelled);
    TK_CHECK(bytes.has_value(), "{}: {:?} is not spelled in GPT-2's byte alphabet", path, spelled);
    if (size_t(id) >= spec.token_bytes.size()) spec.token_bytes.resize(id + 1);
    TK_CHECK(spec.token_bytes[id].empty(), "{}: id {} is given to two tokens", path, id);
    spec.token_bytes[id] = std::move(*bytes);
  }
  TK_CHECK(!spec.added.empty(), "{} has no {} token", path, kEndOfText);
  return ids;
}

void read_merges(const std::string& path, const std::unordered_map<std::string, int32_t>& ids, TokenizerSpec& spec) {
  const std::string text = fs::read_file(path);
  for_each_line(text, [&](size_t line_no, std::string_view line) {
    if (line_no == 1 && line.starts_with("#version")) return;
    size_t space = line.find(' ');
    TK_CHECK(space != std::string_view::npos && space > 0 && line.find(' ', space + 1) == std::string_view::npos &&
                 space + 1 < line.size(),
             "{} line {}: expected a merge \"left right\", got {:?}", path, line_no, line);
    auto left = ids.find(std::string(line.substr(0, space))), right = ids.find(std::string(line.substr(space + 1)));
    TK_CHECK(left != ids.end() && right != ids.end(), "{} line {}: merge {:?} uses a token that is not in encoder.json",
             path, line_no, line);
    spec.merges.emplace_back(left->second, right->second);
  });
  TK_CHECK(!spec.merges.empty(), "{} holds no merges", path);
}

}  // namespace

TokenizerSpec read_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe) {
  TokenizerSpec spec;
  spec.kind = "gpt2";
  auto ids = read_encoder(encoder_json, spec);
  read_merges(vocab_bpe, ids, spec);
  spec.patterns = {kGpt2Pattern};
  spec.eot_text = kEndOfText;
  return spec;
}

}  // namespace tk
