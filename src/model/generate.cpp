// Generation: the forward of the layer schedule without what only the backward needs, keeping each
// layer's keys and values in a cache so that a new token costs one token's work, plus host sampling.
#include "model/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/buffer_carver.h"
#include "model/weights.h"

namespace tk {

// ---- sampling -------------------------------------------------------------------------------------

namespace {

int32_t argmax(const std::vector<float>& logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// The candidate token ids: all of them, in id order, when nothing truncates the distribution; else
// the most likely first (ties: lower id first), cut to the top k when asked.
std::vector<int32_t> candidates(const std::vector<float>& logits, const SamplingOptions& o) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  if (o.top_k == 0 && o.top_p >= 1) return ids;
  auto more_likely = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  const size_t keep = o.top_k > 0 ? std::min(ids.size(), size_t(o.top_k)) : ids.size();
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), more_likely);
  ids.resize(keep);
  return ids;
}

}  // namespace

int32_t sample_token(const std::vector<float>& logits, const SamplingOptions& o, std::mt19937_64& rng) {
  TK_CHECK(!logits.empty(), "sampling needs at least one logit");
  TK_CHECK(o.temperature >= 0, "the sampling temperature must be >= 0, got {}", o.temperature);
  TK_CHECK(o.top_k >= 0, "top_k must be >= 0 (0 keeps every token), got {}", o.top_k);
  TK_CHECK(o.top_p > 0 && o.top_p <= 1, "top_p must lie in (0, 1], got {}", o.top_p);
  if (o.temperature == 0) return argmax(logits);

  const std::vector<int32_t> ids = candidates(logits, o);
  double max_logit = logits[ids[0]];
  for (int32_t id : ids) max_logit = std::max(max_logit, double(logits[id]));
  std::vector<double> probs(ids.size());
  double total = 0;
  for (size_t i = 0; i < ids.size(); i++) total += probs[i] = std::exp((logits[ids[i]] - max_logit) / o.temperature);
  // top-p: the shortest prefix of the ranking whose probability reaches top_p.
  size_t keep = ids.size();
  if (o.top_p < 1) {
    double reached = 0;
    for (keep = 0; keep < ids.size() && reached < o.top_p;) reached += probs[keep++] / total;
  }
  const double kept_total = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
  const double u = double(rng() >> 11) * 0x1.0p-53 * kept_total;
  double cumulative = 0;
  for (size_t i = 0; i < keep; i++) {
    cumulative += probs[i];
    if (u < cumulative) return ids[i];
  }
  return ids[keep - 1];  // u rounded up to the total
}

// ---- generator ------------------------------------------------------------------------------------

struct Generator::Impl {
  ModelConfig cfg;
  Ops& ops;
  ModelWeights w;
  int max_len;
  int length = 0;
  void* memory = nullptr;
  std::vector<Tensor> k_cache, v_cache;  // per layer [max_len, Hkv, hd]
  // Work buffers for a chunk of up to max_len tokens; each layer overwrites the previous one's.
  Tensor h, x, rstd, qkv, qk_rstd, att, lse, branch, gate_up, act, logits, tokens, positions;
  std::vector<int32_t> host_positions;

  Impl(const ModelConfig& c, const ParamLayout& layout, const Tensor& params, Ops& o, int max_tokens)
      : cfg(c), ops(o), w(weight_views(c, layout, params.data, params.dtype)), max_len(max_tokens) {
    TK_CHECK(max_len > 0 && max_len <= cfg.max_seq,
             "model {}: a generator holds 1 to max_position_embeddings ({}) tokens, not {}", cfg.name, cfg.max_seq,
             max_len);
    TK_CHECK(params.dtype == ops.act_dtype() && params.numel() == layout.total,
             "model {}: the generator needs the {} parameters in {}, got {}", cfg.name, layout.total,
             dtype_name(ops.act_dtype()), params.describe());
    BufferCarver measure;
    plan(measure);
    memory = ops.allocate(measure.used(), "KV cache and decoding buffers");
    BufferCarver carve(static_cast<char*>(memory));
    plan(carve);
  }
  ~Impl() { ops.release(memory); }

  void plan(BufferCarver& c) {
    const DType a = ops.act_dtype(), stat = a == DType::F64 ? DType::F64 : DType::F32;
    const int64_t M = max_len, d = cfg.d_model, f = cfg.ffn_dim;
    k_cache.clear();
    v_cache.clear();
    for (int l = 0; l < cfg.n_layers; l++) {
      k_cache.push_back(c.take(a, M * cfg.kv_dim()).view({M, cfg.n_kv_heads, cfg.head_dim}));
      v_cache.push_back(c.take(a, M * cfg.kv_dim()).view({M, cfg.n_kv_heads, cfg.head_dim}));
    }
    h = c.take(a, M * d);
    x = c.take(a, M * d);
    rstd = c.take(stat, M);
    qkv = c.take(a, M * cfg.qkv_dim());
    qk_rstd = cfg.qk_norm ? c.take(stat, M * (cfg.n_heads + cfg.n_kv_heads)) : Tensor();
    att = c.take(a, M * cfg.q_dim());
    lse = c.take(stat, M * cfg.n_heads);
    branch = c.take(a, M * d);
    gate_up = c.take(a, M * 2 * f);
    act = c.take(a, M * f);
    logits = c.take(a, cfg.vocab_size);
    tokens = c.take(DType::I32, M);
    positions = c.take(DType::I32, M);
  }

  // Runs `ids` at positions [pos, pos + n) and returns the logits after the last one. Cached: keys
  // and values join the cache and attention reads it; uncached: causal attention over `ids` alone.
  std::vector<float> run(const std::vector<int32_t>& ids, int pos, bool cached);
  void attention(int l, int n, int pos, bool cached);
};

void Generator::Impl::attention(int l, int n, int pos, bool cached) {
  const int H3 = cfg.n_heads + 2 * cfg.n_kv_heads, hd = cfg.head_dim;
  const AttnShape s{1, n, cfg.n_heads, cfg.n_kv_heads, hd};
  if (cached) {
    ops.attention_decode(shaped(att, {n, cfg.n_heads, hd}), k_cache[l], v_cache[l], shaped(qkv, {n, H3, hd}), pos, s);
  } else {
    ops.attention_forward(shaped(att, {1, n, cfg.n_heads, hd}), shaped(lse, {1, cfg.n_heads, n}),
                          shaped(qkv, {1, n, H3, hd}), Tensor(), s);
  }
}

std::vector<float> Generator::Impl::run(const std::vector<int32_t>& ids, int pos, bool cached) {
  const int n = int(ids.size());
  TK_CHECK(n > 0, "generation needs at least one token");
  TK_CHECK(pos + n <= max_len, "model {}: {} tokens exceed the generator's {} positions", cfg.name, pos + n, max_len);
  for (int32_t id : ids)
    TK_CHECK(id >= 0 && id < cfg.vocab_size, "token id {} is outside the vocabulary of {} tokens of model {}", id,
             cfg.vocab_size, cfg.name);
  host_positions.resize(n);
  std::iota(host_positions.begin(), host_positions.end(), pos);
  ops.upload(tokens.data, ids.data(), size_t(n) * sizeof(int32_t));
  ops.upload(positions.data, host_positions.data(), size_t(n) * sizeof(int32_t));

  const int64_t d = cfg.d_model, f = cfg.ffn_dim;
  const float eps = float(cfg.norm_eps);
  const Tensor hn = shaped(h, {n, d}), xn = shaped(x, {n, d}), rn = shaped(rstd, {n}), bn = shaped(branch, {n, d});
  const Tensor qkvn = shaped(qkv, {n, cfg.qkv_dim()}), gate_upn = shaped(gate_up, {n, 2 * f}), actn = shaped(act, {n, f});
  const AttnShape s{1, n, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim};
  ops.embedding_forward(hn, shaped(tokens, {n}), w.embed);
  for (int l = 0; l < cfg.n_layers; l++) {
    const LayerWeights& lw = w.layers[l];
    if (l == 0) {
      ops.rmsnorm_forward(xn, rn, hn, lw.attn_norm, eps);
    } else {
      ops.residual_rmsnorm_forward(hn, xn, rn, hn, bn, lw.attn_norm, eps);
    }
    ops.linear_forward(qkvn, xn, lw.qkv_w, lw.qkv_b);
    ops.qk_norm_rope_forward(qkvn, shaped(qk_rstd, {n, cfg.n_heads + cfg.n_kv_heads}), qkvn, lw.q_norm, lw.k_norm,
                             shaped(positions, {n}), s, cfg.rope(), eps);
    attention(l, n, pos, cached);
    ops.linear_forward(bn, shaped(att, {n, cfg.q_dim()}), lw.o_w, lw.o_b);
    ops.residual_rmsnorm_forward(hn, xn, rn, hn, bn, lw.mlp_norm, eps);
    ops.linear_forward(gate_upn, xn, lw.gate_up_w, Tensor());
    ops.swiglu_forward(actn, gate_upn);
    ops.linear_forward(bn, actn, lw.down_w, Tensor());
  }
  ops.residual_rmsnorm_forward(hn, xn, rn, hn, bn, w.final_norm, eps);
  const Tensor last_logits = shaped(logits, {1, cfg.vocab_size});
  ops.linear_forward(last_logits, xn.rows(n - 1, n), w.lm_head, Tensor());
  std::vector<float> out(size_t(cfg.vocab_size));
  ops.download_f32(out.data(), last_logits);
  return out;
}

Generator::Generator(const ModelConfig& cfg, const ParamLayout& layout, const Tensor& params, Ops& ops, int max_len)
    : impl_(std::make_unique<Impl>(cfg, layout, params, ops, max_len)) {}
Generator::Generator(const Model& model, int max_len)
    : Generator(model.config(), model.layout(), model.params(), model.ops(), max_len) {}
Generator::~Generator() = default;

int Generator::length() const { return impl_->length; }
int Generator::max_len() const { return impl_->max_len; }

std::vector<float> Generator::prefill(const std::vector<int32_t>& prompt) {
  impl_->length = 0;
  std::vector<float> logits = impl_->run(prompt, 0, true);
  impl_->length = int(prompt.size());
  return logits;
}

std::vector<float> Generator::step(int32_t token) {
  TK_CHECK(impl_->length > 0, "a generation step needs a prefilled prompt first");
  std::vector<float> logits = impl_->run({token}, impl_->length, true);
  impl_->length++;
  return logits;
}

std::vector<float> Generator::logits_uncached(const std::vector<int32_t>& tokens) { return impl_->run(tokens, 0, false); }

std::vector<int32_t> Generator::generate(const std::vector<int32_t>& prompt, const SamplingOptions& o,
                                         const std::function<bool(int32_t)>& on_token) {
  TK_CHECK(o.max_new_tokens >= 0, "max_new_tokens must be >= 0, got {}", o.max_new_tokens);
  TK_CHECK(int64_t(prompt.size()) + o.max_new_tokens <= impl_->max_len,
           "a prompt of {} tokens plus {} new ones exceeds the generator's {} positions", prompt.size(),
           o.max_new_tokens, impl_->max_len);
  std::vector<int32_t> out;
  if (o.max_new_tokens == 0) return out;
  std::mt19937_64 rng(o.seed);
  std::vector<float> logits = prefill(prompt);
  while (true) {
    const int32_t token = sample_token(logits, o, rng);
    out.push_back(token);
    const bool go_on = !on_token || on_token(token);
    if (!go_on || token == o.stop_token || int(out.size()) == o.max_new_tokens) break;
    logits = step(token);
  }
  return out;
}

}  // namespace tk
