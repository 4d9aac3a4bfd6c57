// The one Tokenizer implementation (byte-level BPE built from a TokenizerSpec) and Tokenizer::load,
// which tells the file formats apart. encode(): added tokens, then pre-tokenisation, then BPE per
// piece through a per-thread word cache, since natural text repeats most of its pieces.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "core/error.h"
#include "core/hash.h"
#include "data/bpe.h"
#include "data/normalize.h"
#include "data/pretokenize.h"
#include "data/tokenizer_spec.h"
#include "data/word_cache.h"

namespace tk {
namespace {

// Each tokenizer object has a serial number; a thread's caches are keyed by it, so a tokenizer
// destroyed and another created at the same address never share one. Caches of tokenizers that are
// gone are dropped once a thread has seen more than a few.
WordCache& thread_cache(uint64_t serial) {
  thread_local std::unordered_map<uint64_t, WordCache> caches;
  if (caches.size() >= 8 && !caches.count(serial)) caches.clear();
  return caches[serial];
}

std::atomic<uint64_t> g_next_serial{1};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(TokenizerSpec spec)
      : kind_(spec.kind),
        bpe_(spec.merges_from_ranks ? Bpe::from_ranks(std::move(spec.token_bytes))
                                    : Bpe::from_merges(std::move(spec.token_bytes), spec.merges, spec.ignore_merges)),
        pretokenizer_(spec.patterns),
        added_(spec.added),
        normalization_(spec.normalization),
        eot_text_(spec.eot_text),
        serial_(g_next_serial++) {
    build_decode_table(spec);
    auto eot = std::find_if(spec.added.begin(), spec.added.end(), [&](auto& t) { return t.text == spec.eot_text; });
    TK_CHECK(eot != spec.added.end(), "the tokenizer has no token {} to put between documents", spec.eot_text);
    eot_id_ = eot->id;
    fingerprint_ = compute_fingerprint(spec);
  }

  std::vector<int32_t> encode(std::string_view text, bool allow_special) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 4 + 16);
    WordCache& cache = thread_cache(serial_);
    for (size_t pos = 0; pos < text.size();) {
      auto added = added_.find(text, pos, allow_special);
      size_t stop = added ? added->begin : text.size();
      encode_ordinary(text.substr(pos, stop - pos), cache, ids);
      if (!added) break;
      ids.push_back(added->id);
      pos = added->end;
    }
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    text.reserve(ids.size() * 4);
    for (int32_t id : ids) {
      TK_CHECK(id >= 0 && id < vocab_size() && !decode_table_[id].empty(),
               "token id {} is not in the vocabulary (ids 0..{}) of this {} tokenizer", id, vocab_size() - 1, kind_);
      text += decode_table_[id];
    }
    return text;
  }

  int32_t vocab_size() const override { return int32_t(decode_table_.size()); }
  int32_t eot_id() const override { return eot_id_; }
  std::string eot_text() const override { return eot_text_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  std::string kind() const override { return kind_; }

 private:
  void encode_ordinary(std::string_view text, WordCache& cache, std::vector<int32_t>& ids) const {
    if (text.empty()) return;
    std::string normalized;
    if (normalization_ == Normalization::Nfc && !is_nfc(text)) text = normalized = to_nfc(text);
    thread_local std::vector<std::string_view> pieces;
    pieces.clear();
    pretokenizer_.split(text, pieces);
    for (std::string_view piece : pieces) {
      // A one-byte piece is its byte's token: quicker to look up than to cache.
      if (piece.size() > 1 && cache.append(piece, ids)) continue;
      size_t first = ids.size();
      bpe_.encode(piece, ids);
      if (piece.size() > 1) cache.insert(piece, ids.data() + first, ids.size() - first);
    }
  }

  void build_decode_table(const TokenizerSpec& spec) {
    int32_t size = bpe_.size();
    for (auto& t : spec.added) {
      TK_CHECK(t.id >= 0 && t.id < kMaxTokenId, "added token {:?} has the id {}, which is not a token id", t.text, t.id);
      size = std::max(size, t.id + 1);
    }
    for (auto& [id, text] : spec.decode_only) size = std::max(size, id + 1);
    decode_table_.resize(size);
    for (int32_t id = 0; id < bpe_.size(); id++) decode_table_[id] = bpe_.token(id);
    for (auto& [id, text] : spec.decode_only) decode_table_[id] = text;
    for (auto& t : spec.added) decode_table_[t.id] = t.text;
  }

  // FNV-1a over a canonical description of everything that decides the ids: the vocabulary, the
  // merge table, the regexes, normalisation, the added tokens and the end-of-text id.
  uint64_t compute_fingerprint(const TokenizerSpec& spec) const {
    std::string s = "tokamak-bpe/1";
    auto put = [&](std::string_view field) {
      s += std::to_string(field.size()) + ':';
      s += field;
    };
    for (const std::string& t : decode_table_) put(t);
    for (auto [pair, rank] : bpe_.merge_table()) put(std::to_string(pair) + "/" + std::to_string(rank));
    put(bpe_.ignore_merges() ? "ignore_merges" : "merge_all");
    for (const std::string& p : spec.patterns) put(p);
    put(spec.normalization == Normalization::Nfc ? "nfc" : "none");
    for (const AddedToken& t : spec.added)
      put(fmt::format("{}:{}:{}{}{}", t.id, t.text, int(t.special), int(t.lstrip), int(t.rstrip)));
    put(std::to_string(eot_id_));
    return fnv1a64(s.data(), s.size());
  }

  std::string kind_;
  Bpe bpe_;
  Pretokenizer pretokenizer_;
  AddedTokenMatcher added_;
  Normalization normalization_;
  std::vector<std::string> decode_table_;  // bytes of each id; "" for ids that are no token
  std::string eot_text_;
  int32_t eot_id_ = -1;
  uint64_t fingerprint_ = 0;
  uint64_t serial_;
};

// A file of unknown name: tokenizer.json starts with '{'; anything else is read as tiktoken ranks,
// whose reader says what it expected if that is wrong too.
bool looks_like_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  while (in.get(c) && std::isspace(uint8_t(c))) {
  }
  return c == '{';
}

// Where Tokenizer::load reads a path from: its format and main file (tokenizer.json, encoder.json with vocab.bpe
// beside it, or the .tiktoken file).
enum class Format { HfJson, Gpt2, Tiktoken };
struct Located {
  Format format;
  std::filesystem::path file;
};

Located locate(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;  // the error_code overloads: a permission problem reads as "not there", never a throw
  auto exists = [&](const fs::path& f) { return fs::exists(f, ec); };
  if (!exists(p)) fail("tokenizer not found: {} does not exist", path);
  if (fs::is_directory(p, ec)) {
    if (exists(p / "tokenizer.json")) return {Format::HfJson, p / "tokenizer.json"};
    if (exists(p / "encoder.json") && exists(p / "vocab.bpe")) return {Format::Gpt2, p / "encoder.json"};
    std::vector<fs::path> ranks;
    for (auto it = fs::directory_iterator(p, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      if (it->path().extension() == ".tiktoken") ranks.push_back(it->path());
    if (ranks.size() == 1) return {Format::Tiktoken, ranks[0]};
    fail("{} holds no tokenizer tokamak can read: expected tokenizer.json, encoder.json + vocab.bpe, or one "
         "*.tiktoken file",
         path);
  }
  std::string name = p.filename().string();
  if (name == "encoder.json" || name == "vocab.bpe") return {Format::Gpt2, p.parent_path() / "encoder.json"};
  if (name.ends_with(".tiktoken")) return {Format::Tiktoken, p};
  if (name.ends_with(".json") || looks_like_json(path)) return {Format::HfJson, p};
  return {Format::Tiktoken, p};
}

TokenizerSpec read_any(const std::string& path) {
  const Located l = locate(path);
  switch (l.format) {
    case Format::HfJson:
      return read_hf_tokenizer_json(l.file.string());
    case Format::Gpt2:
      return read_gpt2_files(l.file.string(), (l.file.parent_path() / "vocab.bpe").string());
    case Format::Tiktoken:
      break;
  }
  return read_tiktoken_file(l.file.string());
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(TokenizerSpec spec) { return std::make_unique<BpeTokenizer>(std::move(spec)); }

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) { return make_tokenizer(read_any(path)); }

std::vector<std::string> Tokenizer::files(const std::string& path) {
  const Located l = locate(path);
  const std::filesystem::path dir = l.file.parent_path();
  std::vector<std::filesystem::path> all = {l.file};
  if (l.format == Format::Gpt2) all.push_back(dir / "vocab.bpe");
  if (l.format == Format::HfJson)
    for (const char* beside : {"tokenizer_config.json", "special_tokens_map.json"}) all.push_back(dir / beside);
  if (l.format == Format::Tiktoken) all.push_back(l.file.string() + ".json");  // the sidecar, when there is one
  std::vector<std::string> out = {l.file.string()};
  std::error_code ec;
  for (size_t i = 1; i < all.size(); i++)
    if (std::filesystem::is_regular_file(all[i], ec)) out.push_back(all[i].string());
  return out;
}

}  // namespace tk
