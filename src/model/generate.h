// Generator: text generation with a KV cache. The prompt runs as one chunk, then each new token runs
// alone, attending to the keys and values cached for every earlier position (ops.attention_decode).
// Sampling (temperature, top-k, top-p) happens on the host from the last position's logits, which must be finite:
// finite weights too large for float32 are an error naming the part of the forward (the embedding, a layer, the LM
// head) whose numbers first overflowed, and its largest weight.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "model/params.h"
#include "ops/ops.h"

namespace tk {

struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy (always the most likely token)
  int top_k = 0;             // keep only the k most likely tokens; 0 keeps all
  float top_p = 1.0f;        // keep the fewest most likely tokens whose probabilities sum to >= top_p
  uint64_t seed = 0;
  int max_new_tokens = 64;
  int stop_token = -1;       // generation ends after this token (e.g. end of text); -1: never
  // Ids at or past this are never drawn (nor picked greedily): the rows a padded vocabulary adds past its
  // tokenizer's, which no text ever trained and no tokenizer can decode. 0: every id of the logits.
  int32_t vocab_limit = 0;
};

// The next token from logits[V], among ids below o.vocab_limit (all V when 0): the first maximum when temperature is
// 0, else a draw from softmax(logits / temperature) restricted by top_k and top_p. rng is advanced by one draw.
int32_t sample_token(const std::vector<float>& logits, const SamplingOptions& o, std::mt19937_64& rng);

class Generator {
 public:
  // Reads the weights in `params` (act dtype, laid out by `layout`), which must outlive the generator.
  // Caches and work buffers for up to max_len tokens are allocated here, once.
  Generator(const ModelConfig& cfg, const ParamLayout& layout, const Tensor& params, Ops& ops, int max_len);
  Generator(const Model& model, int max_len);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Clears the cache, runs the prompt, and returns the logits of the token that follows it.
  std::vector<float> prefill(const std::vector<int32_t>& prompt);
  // Appends one token at position length() and returns the logits of the token after it.
  std::vector<float> step(int32_t token);
  int length() const;   // tokens in the cache
  int max_len() const;

  // The logits after `tokens` from the full causal forward over the whole sequence (attention_forward,
  // as in training), leaving the cache untouched: what the cached path must reproduce.
  std::vector<float> logits_uncached(const std::vector<int32_t>& tokens);
  // Where that forward first holds a NaN or an infinity before the logits, in words ("layer 3's output holds NaN at
  // position 5; its largest weight is 1e+30, in model.layers.3.mlp.down_proj.weight"), or "" when every number before
  // them is finite; then lm_head_overflow() says the rest. What names the cause of a loss or logits that are not
  // finite (prefill, step and logits_uncached refuse logits that are not finite, with this in their message).
  std::string first_non_finite(const std::vector<int32_t>& tokens);
  std::string lm_head_overflow();

  // Runs the prompt and samples up to o.max_new_tokens tokens, stopping after o.stop_token or when
  // on_token (called with each new token) returns false. Returns the new tokens.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const SamplingOptions& o,
                                const std::function<bool(int32_t)>& on_token = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tk
