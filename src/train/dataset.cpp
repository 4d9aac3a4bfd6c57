// meta.json fields, the dataset/model compatibility check, and token counting for the unigram entropy.
#include "train/dataset.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace tk {
namespace {

// The listing's shard paths of one split, in order; a prepared dataset has both splits (val may be empty).
std::vector<std::string> shard_paths(const DatasetListing& listing, const std::string& split) {
  const auto it = listing.splits.find(split);
  TK_CHECK(it != listing.splits.end(), "{} has no split \"{}\": prepare the data again", listing.meta_path, split);
  std::vector<std::string> out;
  for (const ShardEntry& e : it->second) out.push_back(e.path);
  return out;
}

}  // namespace

DatasetMeta read_dataset_meta(const std::string& data_dir) {
  const DatasetListing listing = read_dataset_listing(data_dir);
  DatasetMeta m;
  m.tokenizer_path = listing.tokenizer_path;
  m.tokenizer_kind = listing.tokenizer_kind;
  m.vocab_size = listing.vocab_size;
  m.eot_id = listing.eot_id;
  m.tokenizer_fingerprint = listing.fingerprint;
  m.train_shards = shard_paths(listing, "train");
  m.val_shards = shard_paths(listing, "val");
  return m;
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
