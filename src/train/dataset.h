// What train and eval need to know of a prepared dataset beyond the loader's business: the tokenizer
// it was made with (from meta.json), whether it fits a model, and the unigram entropy of a split: the
// loss of the best model that ignores context, the bar a trained model must get far below.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace tk {

struct DatasetMeta {
  std::string tokenizer_path;  // as recorded by prepare ("" when it was not)
  std::string tokenizer_kind;
  uint64_t tokenizer_fingerprint = 0;
  int64_t vocab_size = 0;
  int64_t eot_id = -1;  // the document separator the data was prepared with (-1: none recorded)
  std::vector<std::string> train_shards, val_shards;  // full paths, in split order
};

DatasetMeta read_dataset_meta(const std::string& data_dir);

// A tk::Error unless the dataset's tokens fit the model: a vocabulary no larger than the model's and,
// when the model's tokenizer is known (model_tokenizer_path not empty), that same tokenizer.
void check_dataset_fits_model(const std::string& data_dir, const DatasetMeta& meta, const ModelConfig& model,
                              const std::string& model_tokenizer_path);

struct UnigramEntropy {
  double nats = 0;          // -sum_v p(v) log p(v) of the token frequencies
  uint64_t tokens = 0;      // tokens counted
  bool whole_split = true;  // false when counting stopped at max_tokens
};

// Counts the tokens of the shards in order, up to max_tokens.
UnigramEntropy unigram_entropy(const std::vector<std::string>& shards, int64_t vocab_size, uint64_t max_tokens);

}  // namespace tk
