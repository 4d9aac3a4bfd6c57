// meta.json fields, the dataset/model compatibility check, and token counting for the unigram entropy.
#include "train/dataset.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace tk {
namespace {

std::vector<std::string> shard_paths(const std::string& data_dir, const nlohmann::json& split) {
  std::vector<std::string> out;
  for (const auto& s : split.at("shards"))
    out.push_back((std::filesystem::path(data_dir) / s.at("file").get<std::string>()).string());
  return out;
}

}  // namespace

DatasetMeta read_dataset_meta(const std::string& data_dir) {
  const std::string path = (std::filesystem::path(data_dir) / "meta.json").string();
  TK_CHECK(std::filesystem::exists(path), "{} has no meta.json: prepare the data first with `tokamak prepare`",
           data_dir);
  try {
    const nlohmann::json j = nlohmann::json::parse(fs::read_file(path));
    DatasetMeta m;
    m.tokenizer_path = j.at("tokenizer").at("path").get<std::string>();
    m.tokenizer_kind = j.at("tokenizer").at("kind").get<std::string>();
    m.vocab_size = j.at("tokenizer").at("vocab_size").get<int64_t>();
    m.eot_id = j.at("tokenizer").value("eot_id", int64_t(-1));
    m.tokenizer_fingerprint = std::stoull(j.at("tokenizer").at("fingerprint").get<std::string>(), nullptr, 16);
    m.train_shards = shard_paths(data_dir, j.at("splits").at("train"));
    m.val_shards = shard_paths(data_dir, j.at("splits").at("val"));
    return m;
  } catch (const std::exception& e) {
    fail("{} is not a valid dataset description ({}): prepare the data again", path, e.what());
  }
}

void check_dataset_fits_model(const std::string& data_dir, const DatasetMeta& meta, const ModelConfig& model,
                              const std::string& model_tokenizer_path) {
  const std::string data_tok = meta.tokenizer_path.empty() ? meta.tokenizer_kind : meta.tokenizer_path;
  TK_CHECK(meta.vocab_size <= model.vocab_size,
           "the dataset {} was tokenized with {} (vocab {}) but the model has vocab {}: prepare the data with the "
           "model's tokenizer",
           data_dir, data_tok, meta.vocab_size, model.vocab_size);
  if (model_tokenizer_path.empty()) return;
  std::unique_ptr<Tokenizer> tok = Tokenizer::load(model_tokenizer_path);
  TK_CHECK(tok->fingerprint() == meta.tokenizer_fingerprint,
           "the dataset {} was tokenized with {} (vocab {}) but the model's tokenizer is {} (vocab {}): prepare the "
           "data with the model's tokenizer",
           data_dir, data_tok, meta.vocab_size, model_tokenizer_path, tok->vocab_size());
}

UnigramEntropy unigram_entropy(const std::vector<std::string>& shards, int64_t vocab_size, uint64_t max_tokens) {
  std::vector<uint64_t> counts(size_t(vocab_size), 0);
  std::vector<int32_t> chunk(1 << 20);
  UnigramEntropy e;
  for (size_t s = 0; s < shards.size(); s++) {
    ShardReader shard(shards[s], ShardExpectation{vocab_size, 0});
    uint64_t at = 0;
    while (at < shard.tokens() && e.tokens < max_tokens) {
      const uint64_t n = std::min({uint64_t(chunk.size()), shard.tokens() - at, max_tokens - e.tokens});
      shard.read(at, n, chunk.data());
      for (uint64_t i = 0; i < n; i++) counts[size_t(chunk[i])]++;
      at += n;
      e.tokens += n;
    }
    if (e.tokens >= max_tokens) {
      e.whole_split = at >= shard.tokens() && s + 1 == shards.size();
      break;
    }
  }
  for (uint64_t c : counts)
    if (c > 0) {
      const double p = double(c) / double(e.tokens);
      e.nats -= p * std::log(p);
    }
  return e;
}

}  // namespace tk
