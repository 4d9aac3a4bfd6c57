// Hugging Face tokenizer.json of model type BPE with byte-level pre-tokenizers, as Llama 3 and
// Qwen2.5 ship it: model.vocab/merges/ignore_merges, a pre_tokenizer of ByteLevel and Split(regex)
// (alone or in a Sequence), an optional NFC normalizer, and added_tokens. Anything else is refused
// with a message naming what was found, never approximated.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "core/fs.h"
#include "core/json_integer.h"
#include "data/byte_level.h"
#include "data/normalize.h"
#include "data/regex.h"
#include "data/tokenizer_spec.h"

namespace tk {
namespace {

using nlohmann::json;

struct Reader {
  const std::string& path;
  TokenizerSpec& spec;
  bool byte_level = false;

  void model(const json& m);
  void vocab(const json& v, std::unordered_map<std::string, int32_t>& ids);
  void merges(const json& list, const std::unordered_map<std::string, int32_t>& ids);
  void pre_tokenizer(const json& p);
  void normalizer(const json& n);
  void added_tokens(const json& list);
  void choose_eot();
};

bool absent(const json& j, const char* key) { return !j.contains(key) || j[key].is_null(); }

// A boolean field; files written by older tokenizers leave some out or write null.
bool flag(const json& j, const char* key, bool otherwise = false) {
  return absent(j, key) ? otherwise : j[key].get<bool>();
}

void Reader::model(const json& m) {
  // Files written before tokenizers named the type in "model" are BPE when they have merges.
  std::string type = m.contains("type") ? m["type"].get<std::string>() : m.contains("merges") ? "BPE" : "unknown";
  if (type != "BPE") fail("{} has model type {}; tokamak supports byte-level BPE only", path, type);
  TK_CHECK(absent(m, "dropout"), "{}: BPE dropout is a training-time randomisation; tokamak encodes deterministically "
                                 "and does not support it", path);
  TK_CHECK(!flag(m, "byte_fallback"),
           "{}: this BPE falls back to <0x..> byte tokens (SentencePiece style); tokamak supports byte-level BPE only",
           path);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    TK_CHECK(absent(m, key) || m[key] == "", "{}: model.{} is set; tokamak supports byte-level BPE only", path, key);
  std::unordered_map<std::string, int32_t> ids;
  vocab(m.at("vocab"), ids);
  merges(m.at("merges"), ids);
  spec.ignore_merges = flag(m, "ignore_merges");
}

void Reader::vocab(const json& v, std::unordered_map<std::string, int32_t>& ids) {
  TK_CHECK(v.is_object() && !v.empty(), "{}: model.vocab should map token spellings to ids", path);
  ids.reserve(v.size());
  spec.token_bytes.reserve(v.size());
  for (auto& [spelled, value] : v.items()) {
    const auto id = json_integer<int32_t>(value, path, fmt::format("the id of model.vocab entry {:?}", spelled), 0,
                                          kMaxTokenId - 1);
    ids.emplace(spelled, id);
    if (size_t(id) >= spec.token_bytes.size()) spec.token_bytes.resize(id + 1);
    if (auto bytes = byte_level::unspell(spelled))
      spec.token_bytes[id] = std::move(*bytes);
    else
      spec.decode_only.emplace_back(id, spelled);  // outside the byte alphabet: BPE can never make it
  }
}

// Merges are "left right" strings (byte-level spellings hold no space) or, since tokenizers 0.20,
// [left, right] pairs.
void Reader::merges(const json& list, const std::unordered_map<std::string, int32_t>& ids) {
  TK_CHECK(list.is_array(), "{}: model.merges should be a list", path);
  spec.merges.reserve(list.size());
  std::string left, right;
  for (size_t i = 0; i < list.size(); i++) {
    const json& m = list[i];
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      size_t space = s.find(' ');
      TK_CHECK(space != std::string::npos, "{}: merge {} is not \"left right\": {:?}", path, i, s);
      left = s.substr(0, space), right = s.substr(space + 1);
    } else {
      TK_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
               "{}: merge {} is neither \"left right\" nor [left, right]: {}", path, i, m.dump());
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    }
    auto l = ids.find(left), r = ids.find(right);
    TK_CHECK(l != ids.end() && r != ids.end(), "{}: merge {} ({:?} + {:?}) uses a token that is not in model.vocab",
             path, i, left, right);
    spec.merges.emplace_back(l->second, r->second);
  }
}

void Reader::pre_tokenizer(const json& p) {
  std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const json& each : p.at("pretokenizers")) pre_tokenizer(each);
  } else if (type == "ByteLevel") {
    byte_level = true;
    TK_CHECK(!flag(p, "add_prefix_space"),
             "{}: ByteLevel with add_prefix_space is not supported (Llama 3 and Qwen2.5 leave it off)", path);
    if (flag(p, "use_regex", true)) spec.patterns.push_back(kGpt2Pattern);
  } else if (type == "Split") {
    const json& pattern = p.at("pattern");
    std::string behavior = p.value("behavior", "");
    TK_CHECK(behavior == "Isolated" && !flag(p, "invert"),
             "{}: Split with behavior {} (invert {}) is not supported; tokamak supports Isolated splits", path,
             behavior, flag(p, "invert"));
    if (pattern.contains("Regex"))
      spec.patterns.push_back(pattern["Regex"].get<std::string>());
    else
      spec.patterns.push_back(regex_escape(pattern.at("String").get<std::string>()));
  } else {
    fail("{}: pre_tokenizer {} is not supported; tokamak supports ByteLevel and Split(regex) pre-tokenizers", path,
         type.empty() ? p.dump() : type);
  }
}

void Reader::normalizer(const json& n) {
  if (n.is_null()) return;
  std::string type = n.value("type", "");
  if (type == "Sequence" && n.at("normalizers").empty()) return;
  if (type == "NFC") {
    TK_CHECK(nfc_available(),
             "{} asks for NFC normalisation, and this build of tokamak has no Unicode normaliser (ICU): rebuild with "
             "libicu-dev installed",
             path);
    spec.normalization = Normalization::Nfc;
    return;
  }
  fail("{}: normalizer {} is not supported; tokamak supports none or NFC", path, type.empty() ? n.dump() : type);
}

void Reader::added_tokens(const json& list) {
  for (const json& t : list) {
    AddedToken a{t.at("content").get<std::string>(),
                 json_integer<int32_t>(t.at("id"), path, "the id of an added token", 0, kMaxTokenId - 1),
                 flag(t, "special"), flag(t, "lstrip"), flag(t, "rstrip")};
    TK_CHECK(!flag(t, "single_word"), "{}: added token {:?} is single_word, which tokamak does not support",
             path, a.text);
    TK_CHECK(!a.text.empty(), "{}: added token {} has no text", path, t.dump());
    spec.added.push_back(std::move(a));
  }
}

// tokenizer.json does not say which token separates documents. The base models' end-of-text tokens
// come first (Instruct configs name a turn-end token as eos), then tokenizer_config.json's eos_token.
void Reader::choose_eot() {
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"})
    for (const AddedToken& t : spec.added)
      if (t.text == name) {
        spec.eot_text = name;
        return;
      }
  auto config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config, ec)) {
    json c = json::parse(fs::read_file(config.string()), nullptr, /*allow_exceptions=*/false);
    const json& eos = c.is_object() && c.contains("eos_token") ? c["eos_token"] : json();
    if (eos.is_string()) spec.eot_text = eos.get<std::string>();
    if (eos.is_object() && eos.contains("content")) spec.eot_text = eos["content"].get<std::string>();
  }
  TK_CHECK(!spec.eot_text.empty(),
           "{}: cannot tell which token ends a document: none of <|endoftext|>, <|end_of_text|>, </s>, <eos> is an "
           "added token, and no tokenizer_config.json beside it names an eos_token",
           path);
}

}  // namespace

TokenizerSpec read_hf_tokenizer_json(const std::string& path) {
  TokenizerSpec spec;
  spec.kind = "hf-bpe";
  Reader r{path, spec};
  try {
    json j = json::parse(fs::read_file(path));
    TK_CHECK(j.is_object() && j.contains("model"), "{} is not a tokenizer.json: it has no \"model\"", path);
    r.model(j["model"]);
    r.normalizer(j.value("normalizer", json()));
    if (!absent(j, "pre_tokenizer")) r.pre_tokenizer(j["pre_tokenizer"]);
    TK_CHECK(r.byte_level, "{}: the pre_tokenizer has no ByteLevel step, so this is not a byte-level BPE", path);
    if (j.contains("added_tokens")) r.added_tokens(j["added_tokens"]);
  } catch (const json::exception& e) {
    fail("{} is not a valid tokenizer.json: {}", path, e.what());
  }
  r.choose_eot();
  return spec;
}

}  // namespace tk
