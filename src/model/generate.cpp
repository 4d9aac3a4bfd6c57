// Generation: the block's forward (model/block.h) over work buffers that every layer reuses, keeping each layer's
// keys and values in a cache so that a new token costs one token's work, plus host sampling.
#include "model/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "model/block.h"
#include "model/buffer_carver.h"
#include "model/weights.h"

namespace tk {

// ---- sampling -------------------------------------------------------------------------------------

namespace {

int32_t argmax(const std::vector<float>& logits, size_t n) {
  return int32_t(std::max_element(logits.begin(), logits.begin() + n) - logits.begin());
}

// The candidate token ids, those below n: all of them, in id order, when nothing truncates the distribution; else
// the most likely first (ties: lower id first), cut to the top k when asked.
std::vector<int32_t> candidates(const std::vector<float>& logits, size_t n, const SamplingOptions& o) {
  std::vector<int32_t> ids(n);
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
  TK_CHECK(o.vocab_limit >= 0, "the sampled vocabulary must be >= 0 ids (0: all), got {}", o.vocab_limit);
  const size_t n = o.vocab_limit > 0 ? std::min(logits.size(), size_t(o.vocab_limit)) : logits.size();
  if (o.temperature == 0) return argmax(logits, n);

  const std::vector<int32_t> ids = candidates(logits, n, o);
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
  const ParamLayout& layout;
  Tensor params;
  ModelWeights w;
  int max_len;
  int length = 0;
  void* memory = nullptr;
  std::vector<Tensor> k_cache, v_cache;  // per layer [max_len, Hkv, hd]
  // Work buffers for a chunk of up to max_len tokens; each layer overwrites the previous one's. The residual stream
  // is added to in place (h_mid is h), both norms share one output, and q/k norms and RoPE run in place in qkv.
  BlockActivations work;
  Tensor branch, logits, tokens, positions;
  std::vector<int32_t> host_positions;

  Impl(const ModelConfig& c, const ParamLayout& layout, const Tensor& params, Ops& o, int max_tokens)
      : cfg(c),
        ops(o),
        layout(layout),
        params(params),
        w(weight_views(c, layout, params.data, params.dtype)),
        max_len(max_tokens) {
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
    BlockActivations& b = work;
    b.h = b.h_mid = c.take(a, M * d);
    b.x_attn = b.x_mlp = c.take(a, M * d);
    b.rstd_attn = b.rstd_mlp = c.take(stat, M);
    b.qkv = c.take(a, M * cfg.qkv_dim());
    b.qk_rstd = cfg.qk_norm ? c.take(stat, M * (cfg.n_heads + cfg.n_kv_heads)) : Tensor();
    b.att = c.take(a, M * cfg.q_dim());
    b.lse = c.take(stat, M * cfg.n_heads);
    branch = c.take(a, M * d);
    b.gate_up = c.take(a, M * 2 * f);
    b.act = c.take(a, M * f);
    logits = c.take(a, cfg.vocab_size);
    tokens = c.take(DType::I32, M);
    positions = c.take(DType::I32, M);
  }

  // Runs `ids` at positions [pos, pos + n) and returns the logits after the last one. Cached: keys
  // and values join the cache and attention reads it; uncached: causal attention over `ids` alone. Logits that are
  // not finite are a tk::Error naming where the forward first left finite numbers.
  std::vector<float> run(const std::vector<int32_t>& ids, int pos, bool cached);
  // The forward of run(); with `check` set, the first part (the embedding, a layer, the final norm) whose output
  // holds a NaN or an infinity is returned in words (and the logits are not computed), "" when there is none.
  std::string forward(const std::vector<int32_t>& ids, int pos, bool cached, bool check, std::vector<float>* logits);
  // What the forward over `ids` first left finite numbers in, for logits that are not finite: the first part whose
  // output is not finite, else the LM head.
  std::string describe_non_finite(const std::vector<int32_t>& ids, int pos, bool cached);
  std::string lm_head_overflow();
  // Where in `t` ([n, d], the first n rows) a value is not finite, in words ("NaN at position 3"), or "".
  std::string non_finite_in(const Tensor& t, int n);
  // The largest |w| among the parameters whose names start with `prefix`, and its tensor's name, in words.
  std::string largest_weight(const std::string& prefix);
};

std::string Generator::Impl::non_finite_in(const Tensor& t, int n) {
  std::vector<float> host(size_t(t.numel()));
  ops.download_f32(host.data(), t);
  const int64_t width = t.numel() / n;
  for (size_t i = 0; i < host.size(); i++)
    if (!std::isfinite(host[i]))
      return fmt::format("{} at position {}", std::isnan(host[i]) ? "NaN" : "an infinity", int64_t(i) / width);
  return "";
}

std::string Generator::Impl::largest_weight(const std::string& prefix) {
  float largest = 0;
  std::string name;
  std::vector<float> host;
  for (const ParamInfo& p : layout.params) {
    if (p.name.rfind(prefix, 0) != 0) continue;
    host.resize(size_t(p.numel));
    const Tensor t(static_cast<char*>(params.data) + size_t(p.offset) * dtype_size(params.dtype), params.dtype,
                   {p.numel});
    ops.download_f32(host.data(), t);
    for (float v : host)
      if (std::fabs(v) > largest) {
        largest = std::fabs(v);
        name = p.name;
      }
  }
  return name.empty() ? "" : fmt::format("; its largest weight is {:.3g}, in {}", largest, name);
}

std::vector<float> Generator::Impl::run(const std::vector<int32_t>& ids, int pos, bool cached) {
  std::vector<float> out;
  forward(ids, pos, cached, false, &out);
  const auto bad = std::find_if(out.begin(), out.end(), [](float v) { return !std::isfinite(v); });
  if (bad == out.end()) return out;
  // Again, checking each part: the same ops over the same inputs (the cache rewritten with the same values).
  const std::string where = describe_non_finite(ids, pos, cached);
  fail("model {}: the logits after {} tokens are not finite ({} at token id {}): {}. Its weights are finite but too "
       "large for the numbers computed from them; tokamak does not sample from logits it could not compute",
       cfg.name, pos + int(ids.size()), std::isnan(*bad) ? "NaN" : "an infinity", bad - out.begin(), where);
}

std::string Generator::Impl::describe_non_finite(const std::vector<int32_t>& ids, int pos, bool cached) {
  const std::string where = forward(ids, pos, cached, true, nullptr);
  return !where.empty() ? where : lm_head_overflow();
}

std::string Generator::Impl::lm_head_overflow() {
  return "the LM head's logits (every number before them is finite)" +
         largest_weight(cfg.tied_embeddings ? "model.embed_tokens" : "lm_head");
}

std::string Generator::Impl::forward(const std::vector<int32_t>& ids, int pos, bool cached, bool check,
                                     std::vector<float>* logits_out) {
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

  const int64_t d = cfg.d_model;
  BlockStep s;
  s.B = 1;
  s.T = n;
  s.N = n;
  s.attn = {1, n, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim};
  s.positions = positions;
  s.branch = branch;
  s.cache_pos = pos;
  const Tensor h = shaped(work.h, {n, d}), x = shaped(work.x_mlp, {n, d}), bn = shaped(branch, {n, d});
  ops.embedding_forward(h, shaped(tokens, {n}), w.embed);
  if (check)
    if (std::string bad = non_finite_in(h, n); !bad.empty())
      return "the embedding's output holds " + bad + largest_weight("model.embed_tokens");
  const BlockPass pass = BlockPass::generation();
  for (int l = 0; l < cfg.n_layers; l++) {
    if (cached) {
      s.k_cache = k_cache[l];
      s.v_cache = v_cache[l];
    }
    block_forward(ops, cfg, w.layers[l], work, l == 0 ? Tensor() : work.h_mid, s, pass);
    if (!check) continue;
    std::string bad = non_finite_in(h, n);  // the residual stream, and the layer's MLP output still to be added
    if (bad.empty()) bad = non_finite_in(bn, n);
    if (!bad.empty())
      return fmt::format("layer {}'s output holds {}{}", l, bad, largest_weight(fmt::format("model.layers.{}.", l)));
  }
  ops.residual_rmsnorm_forward(h, x, shaped(work.rstd_mlp, {n}), h, bn, w.final_norm, float(cfg.norm_eps));
  if (check) {
    const std::string bad = non_finite_in(x, n);
    return bad.empty() ? "" : "the final norm's output holds " + bad + largest_weight("model.norm");
  }
  const Tensor last_logits = shaped(logits, {1, cfg.vocab_size});
  ops.linear_forward(last_logits, x.rows(n - 1, n), w.lm_head, Tensor());
  logits_out->resize(size_t(cfg.vocab_size));
  ops.download_f32(logits_out->data(), last_logits);
  return "";
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

std::string Generator::first_non_finite(const std::vector<int32_t>& tokens) {
  return impl_->forward(tokens, 0, false, true, nullptr);
}

std::string Generator::lm_head_overflow() { return impl_->lm_head_overflow(); }

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
