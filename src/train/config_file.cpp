// Reading and writing configuration files in TOML (toml++ parses; the writer is small enough to be ours, and
// writes floats in their shortest exact form, which toml++'s writer does not).
#include "train/config_file.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "core/error.h"
#include "core/fs.h"

namespace tk {
namespace {

nlohmann::json json_of(const toml::node& node, const std::string& where, const std::string& key) {
  if (const auto* b = node.as_boolean()) return b->get();
  if (const auto* i = node.as_integer()) return i->get();
  if (const auto* f = node.as_floating_point()) return f->get();
  if (const auto* s = node.as_string()) return s->get();
  const char* kind = node.is_table() ? "a table" : node.is_array() ? "an array" : "a date or time";
  fail("{}: `{}` is {}: a config value is a string, a number or true/false (each key a flag of `tokamak train`)",
       where, key, kind);
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (const unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\u{:04X}", unsigned(c));
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

// A TOML float: fmt's shortest round-trip form, with ".0" where it would read as an integer.
std::string toml_float(double v) {
  TK_CHECK(std::isfinite(v), "internal error: a config value is {}", v);
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string toml_value(const nlohmann::json& v, const std::string& key) {
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_unsigned()) {
    TK_CHECK(v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()),
             "{} = {} is larger than a TOML integer holds (2^63 - 1)", key, v.get<uint64_t>());
    return std::to_string(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_float()) return toml_float(v.get<double>());
  if (v.is_string()) return toml_string(v.get<std::string>());
  fail("internal error: the config value {} = {} has no TOML form", key, v.dump());
}

// The most dots a line may hold outside its strings and comments: a flat file needs one (a float), and toml++
// builds a table per part of a dotted key by recursion, so `a.a.a...` of 50,000 parts would overflow the stack.
constexpr int kMaxDotsPerLine = 64;

// Refuses a line whose keys nest deeper than kMaxDotsPerLine, before toml++ sees the text. Strings (basic,
// literal, multi-line) and comments are skipped, so that dots in paths and prose count for nothing. Arrays and
// inline tables need no bound here: toml++ limits their nesting itself (TOML_MAX_NESTED_VALUES).
void check_nesting(const std::string& text, const std::string& path) {
  int64_t line = 1;
  int dots = 0;
  for (size_t i = 0; i < text.size(); i++) {
    const char c = text[i];
    if (c == '\n') {
      line++;
      dots = 0;
    } else if (c == '#') {
      i = std::min(text.find('\n', i), text.size()) - 1;
    } else if (c == '"' || c == '\'') {
      const bool multi_line = text.compare(i, 3, std::string(3, c)) == 0;
      const std::string end = multi_line ? std::string(3, c) : std::string(1, c);
      size_t j = i + end.size();
      while (j < text.size() && text.compare(j, end.size(), end) != 0 && (multi_line || text[j] != '\n')) {
        if (c == '"' && text[j] == '\\') j++;  // an escaped character (basic strings only)
        if (j < text.size() && text[j] == '\n') line++;
        j++;
      }
      // An unclosed string ends at its line's end, which the next turn counts.
      i = j < text.size() && text[j] == '\n' && !multi_line ? j - 1 : std::min(j + end.size(), text.size()) - 1;
    } else if (c == '.' && ++dots > kMaxDotsPerLine) {
      fail("{}:{}: a key nested more than {} levels deep (a.b.c...): a config file is flat, each key a flag of "
           "`tokamak train` (batch-tokens = 65536)",
           path, line, kMaxDotsPerLine);
    }
  }
}

const char* const kLogitsChunkKey = "logits_chunk_mib";
const char* const kLogitsChunkFlag = "logits-chunk";

}  // namespace

std::string flag_of_config_key(const std::string& key) {
  if (key == kLogitsChunkKey) return kLogitsChunkFlag;
  std::string flag = key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::string config_key_of_flag(const std::string& flag) {
  if (flag == kLogitsChunkFlag) return kLogitsChunkKey;
  std::string key = flag;
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

ConfigFile read_config_file(const std::string& path) {
  ConfigFile file{path, {}};
  TK_CHECK(std::filesystem::is_regular_file(path), "cannot read the config file {}: {}", path,
           std::filesystem::exists(path) ? "it is not a file" : "there is no such file");
  const std::string text = fs::read_file(path);
  check_nesting(text, path);
  toml::table table;
  try {
    table = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    const toml::source_position at = e.source().begin;
    fail("{}:{}:{}: not valid TOML: {}", path, at.line, at.column, e.description());
  }
  for (auto&& [key, node] : table) {
    const int64_t line = int64_t(key.source().begin.line);
    const std::string name(key.str());
    file.entries.push_back({name, json_of(node, fmt::format("{}:{}", path, line), name), line});
  }
  // toml++ keeps a table's keys sorted: the file's order reads better in messages.
  std::stable_sort(file.entries.begin(), file.entries.end(),
                   [](const ConfigEntry& a, const ConfigEntry& b) { return a.line < b.line; });
  return file;
}

std::string config_file_text(const nlohmann::json& config, const std::string& header) {
  std::string out;
  for (size_t start = 0; start < header.size();) {
    const size_t end = std::min(header.find('\n', start), header.size());
    out += "# " + header.substr(start, end - start) + "\n";
    start = end + 1;
  }
  if (!out.empty()) out += "\n";
  for (auto it = config.begin(); it != config.end(); ++it) {
    const std::string key = flag_of_config_key(it.key());
    out += key + " = " + toml_value(*it, key) + "\n";
  }
  return out;
}

}  // namespace tk
