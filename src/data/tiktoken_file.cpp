// tiktoken rank files: one "base64(token bytes) rank" per line, the rank being the token's id.
// The file holds neither the regex nor the special tokens: they come from the table of OpenAI's
// published encodings (by file name, e.g. cl100k_base.tiktoken) or from a sidecar PATH.json.
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/fs.h"
#include "core/json_integer.h"
#include "core/text_lines.h"
#include "data/tokenizer_spec.h"

namespace tk {
namespace {

struct KnownEncoding {
  const char* name;
  const char* pattern;
  std::vector<std::pair<const char*, int32_t>> special;
};

// tiktoken_ext/openai_public.py: its regexes (the GPT-2 one in tiktoken's faster, equivalent
// form) and special tokens. The first special token is the one placed between documents.
const char* const kR50kPattern = R"('(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s)";
const char* const kCl100kPattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s)";
const char* const kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const std::vector<KnownEncoding>& known_encodings() {
  static const std::vector<KnownEncoding> table = {
      {"gpt2", kR50kPattern, {{"<|endoftext|>", 50256}}},
      {"r50k_base", kR50kPattern, {{"<|endoftext|>", 50256}}},
      {"p50k_base", kR50kPattern, {{"<|endoftext|>", 50256}}},
      {"cl100k_base",
       kCl100kPattern,
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}}},
      {"o200k_base", kO200kPattern, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
  };
  return table;
}

// Standard base64 (RFC 4648, padded); nullopt for anything else.
std::optional<std::string> decode_base64(std::string_view s) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  if (s.empty() || s.size() % 4 != 0) return std::nullopt;
  size_t pad = s.ends_with("==") ? 2 : s.ends_with('=') ? 1 : 0;
  std::string out;
  uint32_t acc = 0;
  for (size_t i = 0; i < s.size() - pad; i++) {
    int v = value(s[i]);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | uint32_t(v);
    if (i % 4 == 3) out += {char(acc >> 16), char(acc >> 8), char(acc)}, acc = 0;
  }
  if (pad == 1) out += {char(acc >> 10), char(acc >> 2)};
  if (pad == 2) out += char(acc >> 4);
  return out;
}

void read_ranks(const std::string& path, TokenizerSpec& spec) {
  const std::string text = fs::read_file(path);
  for_each_line(text, [&](size_t line_no, std::string_view line) {
    size_t space = line.find(' ');
    std::optional<std::string> bytes;
    int64_t rank = -1;
    if (space != std::string_view::npos) {
      bytes = decode_base64(line.substr(0, space));
      auto digits = line.substr(space + 1);
      if (!digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string_view::npos)
        rank = std::stoll(std::string(digits));
    }
    TK_CHECK(bytes && !bytes->empty() && rank >= 0 && rank < kMaxTokenId,
             "{} line {} is not a tiktoken rank line \"<base64 token> <rank>\": {:?}", path, line_no,
             line.substr(0, 80));
    if (size_t(rank) >= spec.token_bytes.size()) spec.token_bytes.resize(rank + 1);
    TK_CHECK(spec.token_bytes[rank].empty(), "{} line {}: rank {} is given twice", path, line_no, rank);
    spec.token_bytes[rank] = std::move(*bytes);
  });
  TK_CHECK(!spec.token_bytes.empty(), "{} holds no tokens", path);
}

// PATH.json: {"pat_str": "...", "special_tokens": {"<|endoftext|>": 50256, ...}, "eot": "<|endoftext|>"};
// "eot" may be left out when "<|endoftext|>" is one of the special tokens.
void read_sidecar(const std::string& path, TokenizerSpec& spec) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(fs::read_file(path));
    spec.patterns = {j.at("pat_str").get<std::string>()};
    for (auto& [text, id] : j.at("special_tokens").items())
      spec.added.push_back({text, json_integer<int32_t>(id, path, "the id of special token " + text, 0, kMaxTokenId - 1)});
    spec.eot_text = j.value("eot", std::string("<|endoftext|>"));
  } catch (const nlohmann::json::exception& e) {
    fail("{} should hold {{\"pat_str\": ..., \"special_tokens\": {{...}}}} for its .tiktoken file: {}", path, e.what());
  }
}

}  // namespace

TokenizerSpec read_tiktoken_file(const std::string& path) {
  TokenizerSpec spec;
  spec.kind = "tiktoken";
  spec.merges_from_ranks = true;
  std::string sidecar = path + ".json";
  std::string stem = std::filesystem::path(path).stem().string();
  auto known = std::find_if(known_encodings().begin(), known_encodings().end(), [&](auto& e) { return stem == e.name; });
  std::error_code ec;
  if (std::filesystem::exists(sidecar, ec)) {
    read_sidecar(sidecar, spec);
  } else if (known != known_encodings().end()) {
    spec.patterns = {known->pattern};
    for (auto& [text, id] : known->special) spec.added.push_back({text, id});
    spec.eot_text = known->special.front().first;
  } else {
    fail("{}: a tiktoken file carries no regex or special tokens, and {:?} is not one of OpenAI's encodings (gpt2, "
         "r50k_base, p50k_base, cl100k_base, o200k_base); put them in {}",
         path, stem, sidecar);
  }
  read_ranks(path, spec);
  return spec;
}

}  // namespace tk
