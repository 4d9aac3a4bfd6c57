// The known keys of a Hugging Face config.json and the warning for the others (config_keys.h).
#include "model/config_keys.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/edit_distance.h"
#include "core/log.h"

namespace tk {
namespace {

// What from_hf_json reads (model/config.cpp, model/rope_scaling.cpp): a key that changes the model.
const char* const kReadKeys[] = {
    "architectures",     "model_type",         "vocab_size",         "hidden_size",
    "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
    "head_dim",          "max_position_embeddings", "rope_theta",   "rope_scaling",
    "rope_parameters",   "rms_norm_eps",       "tie_word_embeddings", "attention_bias",
    "bos_token_id",      "eos_token_id",       "initializer_range",  "hidden_act",
    "mlp_bias",          "attention_dropout",  "use_mrope",          "use_sliding_window",
    "layer_types"};

// Keys transformers writes that do not change the model tokamak builds: how the file was written, the dtype of the
// stored weights, options of inference (the cache, tensor parallelism), the sliding window's size where it is off
// (use_sliding_window, which is read), and the attributes every transformers config has (generation defaults,
// labels of classification heads, flags of its forward's outputs).
const char* const kPassedOverKeys[] = {
    "transformers_version", "_name_or_path", "torch_dtype", "dtype", "use_cache", "pretraining_tp",
    "sliding_window", "max_window_layers", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "tokenizer_class", "return_dict", "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16",
    "tf_legacy_loss", "pruned_heads", "tie_encoder_decoder", "is_encoder_decoder", "is_decoder",
    "cross_attention_hidden_size", "add_cross_attention", "chunk_size_feed_forward", "finetuning_task", "id2label",
    "label2id", "problem_type", "prefix", "task_specific_params", "max_length", "min_length", "do_sample",
    "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p",
    "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
    "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "epsilon_cutoff", "eta_cutoff"};

// ", which may be `rms_norm_eps` misspelt (absent, so at its default)" for a key near one that is read.
std::string closest_read_key(const std::string& key, const nlohmann::json& j) {
  const char* best = nullptr;
  size_t best_distance = 3;  // at most two edits
  for (const char* known : kReadKeys)
    if (const size_t d = edit_distance(key, known); d < best_distance) {
      best = known;
      best_distance = d;
    }
  if (!best) return "";
  return fmt::format(" (`{}` may be `{}` misspelt{})", key, best,
                     j.contains(best) ? "" : ", which is absent and so takes its default");
}

}  // namespace

void warn_unknown_config_keys(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) return;
  std::vector<std::string> unknown;
  std::string hints;
  for (const auto& item : j.items()) {
    const std::string key = item.key();  // not a structured binding: the lambda captures it
    const auto known = [&](const char* k) { return key == k; };
    if (std::any_of(std::begin(kReadKeys), std::end(kReadKeys), known) ||
        std::any_of(std::begin(kPassedOverKeys), std::end(kPassedOverKeys), known))
      continue;
    unknown.push_back("`" + key + "`");
    hints += closest_read_key(key, j);
  }
  if (unknown.empty()) return;
  static std::mutex mutex;
  static std::set<std::string> warned;
  {
    std::lock_guard<std::mutex> hold(mutex);
    if (!warned.insert(source).second) return;
  }
  log::warn("{}: tokamak does not read {} {}{}; a field misspelt there takes its default", source,
            unknown.size() == 1 ? "the key" : "the keys", fmt::join(unknown, ", "), hints);
}

}  // namespace tk
