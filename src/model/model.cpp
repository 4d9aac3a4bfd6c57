// Model: the planned buffers of one model on one backend, and the layer schedule (forward and backward)
// written once against the op vocabulary of ops.h. Everything is allocated in the constructor; a step
// only takes views of those buffers shaped for the batch at hand.
#include "model/model.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <thread>

#include "core/hash.h"
#include "model/buffer_carver.h"
#include "model/weights.h"

namespace tk {
namespace {

// Every target counts: the loader's windows hold real tokens only. The op still gets an index that
// no token id can equal.
constexpr int kNoIgnoredTarget = -1;

// What one layer keeps from its forward for its backward. N = B*T tokens.
struct LayerActivations {
  Tensor h;          // [N, d] residual stream entering the layer: the attention norm's input
  Tensor x_attn;     // [N, d] attention norm output: the qkv projection's input
  Tensor rstd_attn;  // [N]
  Tensor qkv_pre;    // [N, qkv] projection before the q/k norms (Qwen3 only: their backward needs it)
  Tensor qkv;        // [N, qkv] after q/k norm and RoPE: attention's input
  Tensor qk_rstd;    // [N, Hq + Hkv] (Qwen3 only)
  Tensor att;        // [N, q] attention output
  Tensor lse;        // [B, Hq, T]
  Tensor h_mid;      // [N, d] residual stream after the attention block: the MLP norm's input
  Tensor x_mlp;      // [N, d] MLP norm output
  Tensor rstd_mlp;   // [N]
  Tensor gate_up;    // [N, 2f]
  Tensor act;        // [N, f] SwiGLU output: the down projection's input
};

struct Buffers {
  std::vector<LayerActivations> layers;
  Tensor h_out;       // [N, d] residual stream after the last layer: the final norm's input
  Tensor x_final;     // [N, d] final norm output: the LM head's input
  Tensor rstd_final;  // [N]
  Tensor branch;      // [N, d] output of o_proj, then of down_proj, before its residual add
  Tensor losses;      // [N]
  // Gradient scratch, reused by every layer.
  Tensor dh;          // [N, d] gradient of the residual stream
  Tensor dx;          // [N, d] gradient of a norm's output
  Tensor dact, dgate_up, datt, dqkv;
  // The batch's ids.
  Tensor tokens, targets, positions, segments;  // i32 [N]
};

// Which of a layer's activations the backward recomputes (the rest are kept per layer).
struct Recomputed {
  bool x_attn, rstd_attn, qkv, att, h_mid, x_mlp, rstd_mlp, gate_up, act;
};
Recomputed recomputed(const Recompute& r) {
  const bool b = r.block;
  return {b || r.norm, b, b || r.qkv, b || r.attention, b, b || r.norm, b, b, b || r.swiglu};
}

}  // namespace

bool kept_fp8_input(const ModelConfig& cfg, const ModelOptions& opt, const std::string& which) {
  if (!opt.fp8_kept_inputs) return false;  // the backend's answer for these shapes (ModelOptions)
  const Recomputed rc = recomputed(opt.recompute);
  // Only where the forward runs the fused op and nothing reads the activation in bf16 again (layer_forward).
  if (which == "x_attn") return !rc.x_attn && !rc.qkv;
  if (which == "x_mlp") return !rc.x_mlp && !rc.gate_up;
  if (which == "act") return !rc.act;
  return false;
}

namespace {

// Calls fn(field, recomputed, dtype, elements) for each activation a layer may keep (all but h); the kept FP8
// inputs (kept_fp8_input) are U8.
template <class F>
void for_each_activation(const ModelConfig& cfg, const ModelOptions& opt, int64_t N, DType act, DType stat,
                         const Recomputed& rc, F&& fn) {
  const int64_t d = cfg.d_model, f = cfg.ffn_dim;
  using A = LayerActivations;
  auto input = [&](const char* which) { return kept_fp8_input(cfg, opt, which) ? DType::U8 : act; };
  fn(&A::x_attn, rc.x_attn, input("x_attn"), N * d);
  fn(&A::rstd_attn, rc.rstd_attn, stat, N);
  if (cfg.qk_norm) {
    fn(&A::qkv_pre, rc.qkv, act, N * cfg.qkv_dim());
    fn(&A::qk_rstd, rc.qkv, stat, N * (cfg.n_heads + cfg.n_kv_heads));
  }
  fn(&A::qkv, rc.qkv, act, N * cfg.qkv_dim());
  fn(&A::att, rc.att, act, N * cfg.q_dim());
  fn(&A::lse, rc.att, stat, N * cfg.n_heads);
  fn(&A::h_mid, rc.h_mid, act, N * d);
  fn(&A::x_mlp, rc.x_mlp, input("x_mlp"), N * d);
  fn(&A::rstd_mlp, rc.rstd_mlp, stat, N);
  fn(&A::gate_up, rc.gate_up, act, N * 2 * f);
  fn(&A::act, rc.act, input("act"), N * f);
}

// `c` carves what the forward keeps for the backward; `s` the gradient scratch, the branch, the ids and
// the one layer's worth of recomputed activations that all layers share.
Buffers plan_buffers(BufferCarver& c, BufferCarver& s, const ModelConfig& cfg, const ModelOptions& opt, DType act,
                     DType stat) {
  const int64_t N = int64_t(opt.B) * opt.T, d = cfg.d_model, f = cfg.ffn_dim;
  const Recomputed rc = recomputed(opt.recompute);
  Buffers b;
  LayerActivations shared;
  for_each_activation(cfg, opt, N, act, stat, rc, [&](Tensor LayerActivations::*field, bool re, DType dt, int64_t n) {
    if (re) shared.*field = s.take(dt, n);
  });
  for (int l = 0; l < cfg.n_layers; l++) {
    LayerActivations a;
    a.h = c.take(act, N * d);  // the block input: always kept
    for_each_activation(cfg, opt, N, act, stat, rc, [&](Tensor LayerActivations::*field, bool re, DType dt, int64_t n) {
      a.*field = re ? shared.*field : c.take(dt, n);
    });
    b.layers.push_back(a);
  }
  b.h_out = c.take(act, N * d);
  b.x_final = c.take(act, N * d);
  b.rstd_final = c.take(stat, N);
  b.branch = s.take(act, N * d);
  b.losses = s.take(stat, N);
  b.dh = s.take(act, N * d);
  b.dx = s.take(act, N * d);
  b.dact = s.take(act, N * f);
  b.dgate_up = s.take(act, N * 2 * f);
  b.datt = s.take(act, N * cfg.q_dim());
  b.dqkv = s.take(act, N * cfg.qkv_dim());
  b.tokens = s.take(DType::I32, N);
  b.targets = s.take(DType::I32, N);
  b.positions = s.take(DType::I32, N);
  b.segments = s.take(DType::I32, N);
  return b;
}

// The geometry of one step: the batch may be smaller than the planned B x T.
struct Step {
  int B = 0, T = 0;
  int64_t N = 0;
  AttnShape attn;
};

// normal(0, std) from a 64-bit Mersenne twister via Box-Muller, both written out here so that the
// same seed gives the same weights with any standard library.
void fill_normal(std::vector<float>& out, uint64_t seed, double std_dev) {
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return double(rng() >> 11) * 0x1.0p-53; };  // [0, 1)
  for (size_t i = 0; i < out.size(); i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(1.0 - uniform())), angle = 2.0 * std::numbers::pi * uniform();
    out[i] = float(std_dev * radius * std::cos(angle));
    if (i + 1 < out.size()) out[i + 1] = float(std_dev * radius * std::sin(angle));
  }
}

// Gradient offload's groups: [bounds[k], bounds[k+1]) for the embedding (k = 0), layer l (k = l + 1) and
// the tail (the final norm and an untied LM head), alignment padding included.
std::vector<int64_t> gradient_groups(const ParamLayout& layout) {
  std::vector<int64_t> bounds{0};
  for (const LayerOffsets& l : layout.layers) bounds.push_back(l.attn_norm);
  bounds.push_back(layout.final_norm);
  bounds.push_back(layout.total);
  return bounds;
}

// Elements of the staging buffers: the embedding / tail one, and each of the two layer ones.
std::pair<int64_t, int64_t> gradient_stage_sizes(const std::vector<int64_t>& bounds, bool tied) {
  // The tail takes buffer 0 (untied) or a layer buffer (tied: then it is the final norm alone, smaller than
  // any layer).
  const size_t tail = bounds.size() - 2;
  const int64_t tail_n = bounds[tail + 1] - bounds[tail];
  int64_t layer = tied ? tail_n : 0;
  for (size_t k = 1; k < tail; k++) layer = std::max(layer, bounds[k + 1] - bounds[k]);
  return {tied ? bounds[1] - bounds[0] : std::max(bounds[1] - bounds[0], tail_n), layer};
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

struct Model::Impl {
  ModelConfig cfg;
  ModelOptions opt;
  Ops& ops;
  ParamLayout layout;
  DType act, stat;  // stat: the "f32" tensors of ops.h (rstd, lse, losses): f64 only on the f64 CPU backend
  void *param_mem = nullptr, *grad_mem = nullptr, *kept_mem = nullptr, *scratch_mem = nullptr;
  size_t buffer_bytes = 0;
  Tensor params, grads;
  ModelWeights w, g;  // views of params and of grads (with offload_grads: of the staging buffers in use)
  // Gradient offload (ModelOptions::offload_grads): the groups' bounds in the layout, the staging buffers
  // ([0] the embedding and tail groups, [1] and [2] the layers in turn), the download that last read each
  // (-1: none since the micro-step began), and whether the host gradients are all zero (the first
  // micro-step after zero_grads: the staging is cleared instead of brought up).
  std::vector<int64_t> group_bounds;  // group k is [bounds[k], bounds[k+1]): embedding, layers, tail
  Tensor grad_stage[3];
  int stage_free[3] = {-1, -1, -1};
  bool host_grads_zero = true;
  Buffers buf;
  std::vector<int32_t> host_tokens, host_targets, host_positions, host_segments;

  Impl(const ModelConfig& c, Ops& o, const ModelOptions& options)
      : cfg(c), opt(options), ops(o), layout(ParamLayout::build(c)), act(o.act_dtype()),
        stat(o.act_dtype() == DType::F64 ? DType::F64 : DType::F32) {
    TK_CHECK(opt.B > 0 && opt.T > 0, "model {}: the micro-batch must have positive B and T, got B={} T={}", cfg.name,
             opt.B, opt.T);
    TK_CHECK(opt.T <= cfg.max_seq, "model {}: sequence length {} exceeds max_position_embeddings {}", cfg.name, opt.T,
             cfg.max_seq);
    param_mem = ops.allocate(size_t(layout.total) * dtype_size(act), "parameters");
    const size_t grad_bytes = size_t(layout.total) * dtype_size(ops.grad_dtype());
    grad_mem = opt.offload_grads ? ops.allocate_host(grad_bytes, "parameter gradients (host)")
                                 : ops.allocate(grad_bytes, "parameter gradients");
    params = Tensor(param_mem, act, {layout.total});
    grads = Tensor(grad_mem, ops.grad_dtype(), {layout.total});
    ops.zero(params);
    if (opt.offload_grads) {
      std::memset(grad_mem, 0, grad_bytes);
      group_bounds = gradient_groups(layout);
      const auto [outer, layer] = gradient_stage_sizes(group_bounds, cfg.tied_embeddings);
      const char* labels[3] = {"gradient staging: embedding / LM head group", "gradient staging: layers",
                               "gradient staging: layers"};
      for (int i = 0; i < 3; i++) {
        const int64_t n = i == 0 ? outer : layer;
        grad_stage[i] = Tensor(ops.allocate(size_t(n) * dtype_size(ops.grad_dtype()), labels[i]), ops.grad_dtype(), {n});
      }
    } else {
      ops.zero(grads);
    }
    w = weight_views(cfg, layout, param_mem, act);
    g = weight_views(cfg, layout, grad_mem, ops.grad_dtype());

    BufferCarver measure_kept, measure_scratch;
    plan_buffers(measure_kept, measure_scratch, cfg, opt, act, stat);
    buffer_bytes = measure_kept.used() + measure_scratch.used();
    kept_mem = ops.allocate(measure_kept.used(), "activations kept for the backward");
    scratch_mem = ops.allocate(measure_scratch.used(), "activation gradients and step scratch");
    BufferCarver kept(static_cast<char*>(kept_mem)), scratch(static_cast<char*>(scratch_mem));
    buf = plan_buffers(kept, scratch, cfg, opt, act, stat);
  }

  ~Impl() {
    ops.synchronize();  // no copy may still use what is freed
    ops.release(scratch_mem);
    ops.release(kept_mem);
    if (opt.offload_grads) {
      ops.release_host(grad_mem);
      for (Tensor& t : grad_stage) ops.release(t.data);
    } else {
      ops.release(grad_mem);
    }
    ops.release(param_mem);
  }

  // Gradient offload: which staging buffer a group uses. Tied embeddings: the embedding group receives the
  // LM head's gradient first and the embedding's last, so it holds buffer 0 for the whole backward and the
  // tail (the final norm) takes a layer buffer. Untied: the tail (final norm, LM head) uses buffer 0 first
  // and the embedding after it.
  int stage_of(size_t group) const {
    const size_t tail = group_bounds.size() - 2;
    if (group == 0) return 0;
    if (group == tail) return cfg.tied_embeddings ? 1 : 0;
    return 1 + int((tail - group + (cfg.tied_embeddings ? 0 : 1)) % 2);
  }
  void grads_begin_microstep();
  void grad_group_begin(size_t group);
  void grad_group_end(size_t group);

  Step stage_batch(const Batch& batch);
  void forward_pass(const Step& s);
  void layer_forward(const Step& s, int l);
  void recompute_layer(const Step& s, int l);
  void lm_head(const Step& s, bool with_grads, float grad_scale);
  LossSum read_loss(const Step& s);
  void backward_pass(const Step& s);
  void layer_backward(const Step& s, int l);
};

// Copies the batch's inputs, targets, positions and document ids to the device, checking them first.
Step Model::Impl::stage_batch(const Batch& batch) {
  TK_CHECK(batch.tokens != nullptr, "model {}: the batch holds no tokens", cfg.name);
  TK_CHECK(batch.B > 0 && batch.T > 0 && batch.B <= opt.B && batch.T <= opt.T,
           "model {}: a batch of B={} T={} does not fit the planned micro-batch B={} T={}", cfg.name, batch.B, batch.T,
           opt.B, opt.T);
  TK_CHECK(!opt.doc_mask || int(batch.doc_starts.size()) == batch.B,
           "model {}: document masking needs the document starts of all {} rows, the batch has {}", cfg.name, batch.B,
           batch.doc_starts.size());
  Step s;
  s.B = batch.B;
  s.T = batch.T;
  s.N = int64_t(s.B) * s.T;
  s.attn = {s.B, s.T, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim};
  host_tokens.resize(s.N);
  host_targets.resize(s.N);
  host_positions.resize(s.N);
  host_segments.resize(s.N);
  for (int b = 0; b < s.B; b++) {
    const int32_t* row = batch.tokens + int64_t(b) * (s.T + 1);
    for (int t = 0; t <= s.T; t++)
      TK_CHECK(row[t] >= 0 && row[t] < cfg.vocab_size,
               "token id {} (row {}, position {}) is outside the vocabulary of {} tokens of model {}: was the data "
               "prepared with another tokenizer?",
               row[t], b, t, cfg.vocab_size, cfg.name);
    // Positions restart at each document start (with doc_mask), and the segment id counts documents.
    const std::vector<int32_t>* starts = opt.doc_mask ? &batch.doc_starts[b] : nullptr;
    size_t next = 0;
    int32_t doc_start = 0, segment = 0;
    for (int t = 0; t < s.T; t++) {
      while (starts && next < starts->size() && (*starts)[next] <= t) {
        TK_CHECK(next == 0 || (*starts)[next] > (*starts)[next - 1], "row {}: document starts must increase", b);
        if ((*starts)[next] > 0) {
          doc_start = (*starts)[next];
          segment++;
        }
        next++;
      }
      const int64_t n = int64_t(b) * s.T + t;
      host_tokens[n] = row[t];
      host_targets[n] = row[t + 1];
      host_positions[n] = t - doc_start;
      host_segments[n] = segment;
    }
  }
  const size_t bytes = size_t(s.N) * sizeof(int32_t);
  ops.upload(buf.tokens.data, host_tokens.data(), bytes);
  ops.upload(buf.targets.data, host_targets.data(), bytes);
  ops.upload(buf.positions.data, host_positions.data(), bytes);
  if (opt.doc_mask) ops.upload(buf.segments.data, host_segments.data(), bytes);
  return s;
}

// h0 = embedding; each layer; the last residual add fused with the final norm.
void Model::Impl::forward_pass(const Step& s) {
  const int64_t N = s.N, d = cfg.d_model;
  ops.embedding_forward(shaped(buf.layers[0].h, {N, d}), shaped(buf.tokens, {N}), w.embed);
  for (int l = 0; l < cfg.n_layers; l++) layer_forward(s, l);
  ops.residual_rmsnorm_forward(shaped(buf.h_out, {N, d}), shaped(buf.x_final, {N, d}), shaped(buf.rstd_final, {N}),
                               shaped(buf.layers.back().h_mid, {N, d}), shaped(buf.branch, {N, d}), w.final_norm,
                               float(cfg.norm_eps));
}

// x = norm(h) (fused with the previous MLP's residual add); qkv = x Wqkv + b; q/k norm + RoPE; attention;
// h_mid = h + att Wo; x = norm(h_mid); branch = swiglu(x Wgate_up) Wdown (added by the next norm).
void Model::Impl::layer_forward(const Step& s, int l) {
  const int64_t N = s.N, d = cfg.d_model, f = cfg.ffn_dim, H3 = cfg.n_heads + 2 * cfg.n_kv_heads;
  const float eps = float(cfg.norm_eps);
  const LayerActivations& a = buf.layers[l];
  const LayerWeights& lw = w.layers[l];
  const Tensor h = shaped(a.h, {N, d}), x_attn = shaped(a.x_attn, {N, d}), branch = shaped(buf.branch, {N, d});
  const Tensor qkv = shaped(a.qkv, {N, cfg.qkv_dim()});
  const Tensor qkv_pre = cfg.qk_norm ? shaped(a.qkv_pre, {N, cfg.qkv_dim()}) : qkv;  // RoPE in place without norms
  // The norms and the linears they feed as one op each: a backend may then keep, in place of x_attn and x_mlp, what
  // only those linears' backwards read, unless the backward recomputes a linear from a kept norm output.
  const Recomputed rc = recomputed(opt.recompute);
  auto keeps = [](bool linear_recomputed_from_it) {
    return linear_recomputed_from_it ? Ops::NormOutput::values : Ops::NormOutput::linear_backward_only;
  };
  const Tensor rstd_attn = shaped(a.rstd_attn, {N});
  const Tensor h_prev = l == 0 ? Tensor() : shaped(buf.layers[l - 1].h_mid, {N, d});
  const Tensor h_out = l == 0 ? Tensor() : h, norm_in = l == 0 ? h : branch;
  ops.rmsnorm_linear_forward(qkv_pre, x_attn, rstd_attn, h_out, h_prev, norm_in, lw.attn_norm, lw.qkv_w, lw.qkv_b,
                             eps, keeps(rc.qkv && !rc.x_attn));
  ops.qk_norm_rope_forward(qkv, shaped(a.qk_rstd, {N, cfg.n_heads + cfg.n_kv_heads}), qkv_pre, lw.q_norm, lw.k_norm,
                           shaped(buf.positions, {N}), s.attn, cfg.rope(), eps);
  const Tensor segments = opt.doc_mask ? shaped(buf.segments, {s.B, s.T}) : Tensor();
  ops.attention_forward(shaped(a.att, {s.B, s.T, cfg.n_heads, cfg.head_dim}), shaped(a.lse, {s.B, cfg.n_heads, s.T}),
                        shaped(a.qkv, {s.B, s.T, H3, cfg.head_dim}), segments, s.attn);
  ops.linear_forward(branch, shaped(a.att, {N, cfg.q_dim()}), lw.o_w, lw.o_b);
  const Tensor x_mlp = shaped(a.x_mlp, {N, d}), gate_up = shaped(a.gate_up, {N, 2 * f}), act = shaped(a.act, {N, f});
  ops.rmsnorm_linear_forward(gate_up, x_mlp, shaped(a.rstd_mlp, {N}), shaped(a.h_mid, {N, d}), h, branch,
                             lw.mlp_norm, lw.gate_up_w, Tensor(), eps, keeps(rc.gate_up && !rc.x_mlp));
  ops.swiglu_linear_forward(branch, act, gate_up, lw.down_w);
}

// Per-token losses over targets tokens[:, 1:]; with grads, dL/dx_final lands in buf.dx and the LM
// head's weight gradient accumulates (into the embedding's when tied).
void Model::Impl::lm_head(const Step& s, bool with_grads, float grad_scale) {
  const int64_t N = s.N, d = cfg.d_model;
  ops.lm_head_cross_entropy(shaped(buf.losses, {N}), with_grads ? shaped(buf.dx, {N, d}) : Tensor(),
                            with_grads ? g.lm_head : Tensor(), shaped(buf.x_final, {N, d}), w.lm_head,
                            shaped(buf.targets, {N}), grad_scale, kNoIgnoredTarget);
}

// Sums the losses on the host, in token order, at the precision the backend computed them in. Called
// after the backward is queued: the download is the step's one synchronisation.
LossSum Model::Impl::read_loss(const Step& s) {
  const Tensor losses = shaped(buf.losses, {s.N});
  LossSum sum;
  sum.count = s.N;
  if (stat == DType::F64) {
    std::vector<double> host(s.N);
    ops.download(host.data(), losses.data, losses.nbytes());
    for (double v : host) sum.sum += v;
  } else {
    std::vector<float> host(s.N);
    ops.download(host.data(), losses.data, losses.nbytes());
    for (float v : host) sum.sum += v;
  }
  return sum;
}

// The forward in reverse. dh carries dL/d(residual stream) down through the layers; each norm's
// backward adds the gradient reaching its input through the norm to the one flowing past it.
void Model::Impl::backward_pass(const Step& s) {
  const int64_t N = s.N, d = cfg.d_model;
  const Tensor dh = shaped(buf.dh, {N, d});
  const size_t tail = group_bounds.size() - 2;
  if (opt.offload_grads && cfg.tied_embeddings) grad_group_begin(tail);
  ops.rmsnorm_backward(dh, g.final_norm, shaped(buf.dx, {N, d}), Tensor(), shaped(buf.h_out, {N, d}),
                       shaped(buf.rstd_final, {N}), w.final_norm);
  if (opt.offload_grads) grad_group_end(tail);
  for (int l = cfg.n_layers - 1; l >= 0; l--) {
    if (opt.offload_grads) grad_group_begin(size_t(l) + 1);
    layer_backward(s, l);
    if (opt.offload_grads) grad_group_end(size_t(l) + 1);
  }
  if (opt.offload_grads && !cfg.tied_embeddings) grad_group_begin(0);
  ops.embedding_backward(g.embed, shaped(buf.tokens, {N}), dh);
  if (opt.offload_grads) {
    grad_group_end(0);
    // Whatever the compute queue runs next (the next micro-step, the optimizer) comes after every download.
    ops.wait_event(Ops::Queue::compute, ops.record_event(Ops::Queue::download));
    host_grads_zero = false;
  }
}

// Gradient offload. A micro-step starts with the uploads ordered after every download of the last one
// (the event ring is reused, so an older event cannot be waited on safely).
void Model::Impl::grads_begin_microstep() {
  ops.wait_event(Ops::Queue::upload, ops.record_event(Ops::Queue::download));
  for (int& e : stage_free) e = -1;
}

// Brings group k's gradients so far into its staging buffer (or clears it when they are all zero) and
// points the gradient views of the group's parameters at it.
void Model::Impl::grad_group_begin(size_t k) {
  using Q = Ops::Queue;
  const int st = stage_of(k);
  const int64_t b = group_bounds[k], n = group_bounds[k + 1] - b;
  const Tensor stage = grad_stage[st].rows(0, n);
  if (host_grads_zero) {
    if (stage_free[st] >= 0) ops.wait_event(Q::compute, stage_free[st]);
    ops.zero(stage);
  } else {
    if (stage_free[st] >= 0) ops.wait_event(Q::upload, stage_free[st]);
    ops.copy_async(stage.data, static_cast<char*>(grad_mem) + size_t(b) * dtype_size(grads.dtype), stage.nbytes(),
                   Q::upload);
    ops.wait_event(Q::compute, ops.record_event(Q::upload));
  }
  // Views of a flat buffer that starts b elements before the staging buffer: the group's own views land
  // inside it, the others are not used until their group begins.
  const uintptr_t base = reinterpret_cast<uintptr_t>(stage.data) - uintptr_t(b) * dtype_size(grads.dtype);
  ModelWeights v = weight_views(cfg, layout, reinterpret_cast<void*>(base), grads.dtype);
  const size_t tail = group_bounds.size() - 2;
  if (k == 0) {
    g.embed = v.embed;
    if (cfg.tied_embeddings) g.lm_head = v.lm_head;
  } else if (k == tail) {
    g.final_norm = v.final_norm;
    if (!cfg.tied_embeddings) g.lm_head = v.lm_head;
  } else {
    g.layers[k - 1] = v.layers[k - 1];
  }
}

// Takes group k's gradients down to host memory once the compute queue has made them.
void Model::Impl::grad_group_end(size_t k) {
  using Q = Ops::Queue;
  const int st = stage_of(k);
  const int64_t b = group_bounds[k], n = group_bounds[k + 1] - b;
  ops.wait_event(Q::download, ops.record_event(Q::compute));
  ops.copy_async(static_cast<char*>(grad_mem) + size_t(b) * dtype_size(grads.dtype), grad_stage[st].data,
                 size_t(n) * dtype_size(grads.dtype), Q::download);
  stage_free[st] = ops.record_event(Q::download);
}

// Before a layer's backward: the activations its policy did not keep, by the forward's own ops in the
// forward's order, so they come out bitwise as the forward made them.
void Model::Impl::recompute_layer(const Step& s, int l) {
  const Recomputed rc = recomputed(opt.recompute);
  const int64_t N = s.N, d = cfg.d_model, f = cfg.ffn_dim, H3 = cfg.n_heads + 2 * cfg.n_kv_heads;
  const float eps = float(cfg.norm_eps);
  const LayerActivations& a = buf.layers[l];
  const LayerWeights& lw = w.layers[l];
  const Tensor h = shaped(a.h, {N, d}), x_attn = shaped(a.x_attn, {N, d});
  if (rc.x_attn) ops.rmsnorm_forward(x_attn, shaped(a.rstd_attn, {N}), h, lw.attn_norm, eps);
  if (rc.qkv) {
    const Tensor qkv = shaped(a.qkv, {N, cfg.qkv_dim()});
    const Tensor qkv_pre = cfg.qk_norm ? shaped(a.qkv_pre, {N, cfg.qkv_dim()}) : qkv;
    ops.linear_forward(qkv_pre, x_attn, lw.qkv_w, lw.qkv_b);
    ops.qk_norm_rope_forward(qkv, shaped(a.qk_rstd, {N, cfg.n_heads + cfg.n_kv_heads}), qkv_pre, lw.q_norm,
                             lw.k_norm, shaped(buf.positions, {N}), s.attn, cfg.rope(), eps);
  }
  if (rc.att) {
    const Tensor segments = opt.doc_mask ? shaped(buf.segments, {s.B, s.T}) : Tensor();
    ops.attention_forward(shaped(a.att, {s.B, s.T, cfg.n_heads, cfg.head_dim}), shaped(a.lse, {s.B, cfg.n_heads, s.T}),
                          shaped(a.qkv, {s.B, s.T, H3, cfg.head_dim}), segments, s.attn);
  }
  const Tensor x_mlp = shaped(a.x_mlp, {N, d});
  if (rc.h_mid) {
    const Tensor branch = shaped(buf.branch, {N, d});
    ops.linear_forward(branch, shaped(a.att, {N, cfg.q_dim()}), lw.o_w, lw.o_b);
    ops.residual_rmsnorm_forward(shaped(a.h_mid, {N, d}), x_mlp, shaped(a.rstd_mlp, {N}), h, branch, lw.mlp_norm, eps);
  } else if (rc.x_mlp) {
    ops.rmsnorm_forward(x_mlp, shaped(a.rstd_mlp, {N}), shaped(a.h_mid, {N, d}), lw.mlp_norm, eps);
  }
  if (rc.gate_up) ops.linear_forward(shaped(a.gate_up, {N, 2 * f}), x_mlp, lw.gate_up_w, Tensor());
  if (rc.act) ops.swiglu_forward(shaped(a.act, {N, f}), shaped(a.gate_up, {N, 2 * f}));
}

void Model::Impl::layer_backward(const Step& s, int l) {
  if (opt.recompute.any()) {
    ops.range_push("recompute");
    recompute_layer(s, l);
    ops.range_pop();
  }
  const int64_t N = s.N, d = cfg.d_model, f = cfg.ffn_dim, H3 = cfg.n_heads + 2 * cfg.n_kv_heads;
  const float eps = float(cfg.norm_eps);
  const LayerActivations& a = buf.layers[l];
  const LayerWeights &lw = w.layers[l], &lg = g.layers[l];
  const Tensor dh = shaped(buf.dh, {N, d}), dx = shaped(buf.dx, {N, d});
  const Tensor dgate_up = shaped(buf.dgate_up, {N, 2 * f}), dqkv = shaped(buf.dqkv, {N, cfg.qkv_dim()});

  // MLP: dh is dL/d(branch) as well as the gradient flowing on to h_mid.
  ops.linear_backward(shaped(buf.dact, {N, f}), lg.down_w, Tensor(), dh, shaped(a.act, {N, f}), lw.down_w);
  ops.swiglu_linear_backward(dx, lg.gate_up_w, dgate_up, shaped(buf.dact, {N, f}), shaped(a.gate_up, {N, 2 * f}),
                             shaped(a.x_mlp, {N, d}), lw.gate_up_w);
  ops.rmsnorm_backward(dh, lg.mlp_norm, dx, dh, shaped(a.h_mid, {N, d}), shaped(a.rstd_mlp, {N}), lw.mlp_norm);

  // Attention: dh is now dL/d(h_mid), the gradient of o_proj's output.
  const Tensor att = shaped(a.att, {s.B, s.T, cfg.n_heads, cfg.head_dim});
  const Tensor datt = shaped(buf.datt, {s.B, s.T, cfg.n_heads, cfg.head_dim});
  ops.linear_backward(shaped(buf.datt, {N, cfg.q_dim()}), lg.o_w, lg.o_b, dh, shaped(a.att, {N, cfg.q_dim()}), lw.o_w);
  const Tensor segments = opt.doc_mask ? shaped(buf.segments, {s.B, s.T}) : Tensor();
  ops.attention_backward(shaped(buf.dqkv, {s.B, s.T, H3, cfg.head_dim}), datt, shaped(a.qkv, {s.B, s.T, H3, cfg.head_dim}),
                         att, shaped(a.lse, {s.B, cfg.n_heads, s.T}), segments, s.attn);
  ops.qk_norm_rope_backward(dqkv, lg.q_norm, lg.k_norm, dqkv, shaped(a.qkv_pre, {N, cfg.qkv_dim()}),
                            shaped(a.qk_rstd, {N, cfg.n_heads + cfg.n_kv_heads}), lw.q_norm, lw.k_norm,
                            shaped(buf.positions, {N}), s.attn, cfg.rope(), eps);
  ops.linear_backward(dx, lg.qkv_w, lg.qkv_b, dqkv, shaped(a.x_attn, {N, d}), lw.qkv_w);
  ops.rmsnorm_backward(dh, lg.attn_norm, dx, dh, shaped(a.h, {N, d}), shaped(a.rstd_attn, {N}), lw.attn_norm);
}

// ---- recompute policies and the memory they leave ------------------------------------------------

std::string Recompute::describe() const {
  std::string out;
  for (auto [on, name] : {std::pair{norm, "norm"}, {swiglu, "swiglu"}, {attention, "attention"}, {qkv, "qkv"},
                          {block, "block"}})
    if (on) out += (out.empty() ? "" : ",") + std::string(name);
  return out.empty() ? "none" : out;
}

Recompute Recompute::parse(const std::string& spec) {
  Recompute r;
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string name = spec.substr(at, comma - at);
    if (name == "norm") r.norm = true;
    else if (name == "swiglu") r.swiglu = true;
    else if (name == "attention") r.attention = true;
    else if (name == "qkv") r.qkv = true;
    else if (name == "block") r.block = true;
    else if (name != "none" && !name.empty())
      fail("unknown recompute policy '{}' in '{}': use none, or any of norm, swiglu, attention, qkv, block joined by commas",
           name, spec);
    at = comma + 1;
  }
  return r;
}

double Recompute::flops_per_token(const ModelConfig& c, int T) const {
  const double d = c.d_model, q = c.q_dim(), k = c.kv_dim(), f = c.ffn_dim, L = c.n_layers;
  const double qkv_gemm = 2 * d * (q + 2 * k), attn_fwd = 2.0 * T * q;  // causal: half of 4 T q
  if (block) return L * (qkv_gemm + attn_fwd + 2 * q * d + 2 * d * 2 * f);
  return L * ((qkv ? qkv_gemm : 0) + (attention ? attn_fwd : 0));
}

std::vector<std::pair<std::string, size_t>> model_memory(const ModelConfig& cfg, const ModelOptions& opt, DType act,
                                                         DType grad) {
  const ParamLayout layout = ParamLayout::build(cfg);
  const DType stat = act == DType::F64 ? DType::F64 : DType::F32;
  BufferCarver kept, scratch;
  plan_buffers(kept, scratch, cfg, opt, act, stat);
  std::vector<std::pair<std::string, size_t>> rows{{"parameters", size_t(layout.total) * dtype_size(act)}};
  if (opt.offload_grads) {
    const auto [outer, layer] = gradient_stage_sizes(gradient_groups(layout), cfg.tied_embeddings);
    rows.push_back({"gradient staging: embedding / LM head group", size_t(outer) * dtype_size(grad)});
    rows.push_back({"gradient staging: layers", 2 * size_t(layer) * dtype_size(grad)});
  } else {
    rows.push_back({"parameter gradients", size_t(layout.total) * dtype_size(grad)});
  }
  rows.push_back({"activations kept for the backward", kept.used()});
  rows.push_back({"activation gradients and step scratch", scratch.used()});
  return rows;
}

// ---- public interface -------------------------------------------------------------------------------

Model::Model(const ModelConfig& cfg, Ops& ops, const ModelOptions& opt) : impl_(std::make_unique<Impl>(cfg, ops, opt)) {}
Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->cfg; }
const ModelOptions& Model::options() const { return impl_->opt; }
const ParamLayout& Model::layout() const { return impl_->layout; }
Ops& Model::ops() const { return impl_->ops; }
Tensor Model::params() const { return impl_->params; }
Tensor Model::grads() const { return impl_->grads; }
size_t Model::activation_bytes() const { return impl_->buffer_bytes; }

// Each tensor draws from its own stream, seeded by the run's seed and the tensor's name, so a tensor's
// initial values do not depend on which other tensors the model has, nor on how many threads draw them:
// the tensors of a batch (at most ~1 GiB of floats) are drawn by several threads at once, then uploaded
// in layout order (a 7B model's 7.6 billion draws take minutes on one thread).
void Model::init_params(uint64_t seed) {
  Impl& m = *impl_;
  m.ops.zero(m.params);  // alignment padding included
  const std::vector<ParamInfo>& params = m.layout.params;
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  constexpr int64_t kBatchFloats = int64_t(1) << 28;
  std::vector<std::vector<float>> host;
  for (size_t first = 0; first < params.size();) {
    size_t last = first;  // the batch is [first, last)
    for (int64_t floats = 0; last < params.size() && (last == first || floats + params[last].numel <= kBatchFloats);)
      floats += params[last++].numel;
    host.assign(last - first, {});
    std::atomic<size_t> next{first};
    auto draw = [&] {
      for (size_t i; (i = next++) < last;) {
        const ParamInfo& p = params[i];
        std::vector<float>& h = host[i - first];
        h.assign(size_t(p.numel), 0.0f);
        if (p.shape.size() == 2) {
          fill_normal(h, splitmix64(seed ^ fnv1a64(p.name.data(), p.name.size())), m.cfg.init_std);
        } else if (!ends_with(p.name, ".bias")) {
          h.assign(size_t(p.numel), 1.0f);  // norm weights
        }
      }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < std::min<size_t>(threads, last - first); t++) pool.emplace_back(draw);
    draw();
    for (std::thread& t : pool) t.join();
    for (size_t i = first; i < last; i++)
      m.ops.upload_f32(m.params.rows(params[i].offset, params[i].offset + params[i].numel), host[i - first].data());
    first = last;
  }
}

void Model::set_params_f32(const std::vector<float>& host) {
  TK_CHECK(int64_t(host.size()) == impl_->layout.total, "model {}: {} parameter values given for a layout of {}",
           impl_->cfg.name, host.size(), impl_->layout.total);
  impl_->ops.upload_f32(impl_->params, host.data());
}

std::vector<float> Model::params_f32() const {
  std::vector<float> host(size_t(impl_->layout.total));
  impl_->ops.download_f32(host.data(), impl_->params);
  return host;
}

std::vector<float> Model::grads_f32() const {
  std::vector<float> host(size_t(impl_->layout.total));
  if (impl_->opt.offload_grads) {
    impl_->ops.synchronize();
    const Tensor& g = impl_->grads;
    if (g.dtype == DType::F32) {
      std::memcpy(host.data(), g.data, g.nbytes());
    } else {
      for (int64_t i = 0; i < g.numel(); i++) host[size_t(i)] = float(g.as<double>()[i]);
    }
    return host;
  }
  impl_->ops.download_f32(host.data(), impl_->grads);
  return host;
}

void Model::zero_grads() {
  Impl& m = *impl_;
  if (m.opt.offload_grads) {
    m.ops.synchronize();
    std::memset(m.grad_mem, 0, m.grads.nbytes());
    m.host_grads_zero = true;
  } else {
    m.ops.zero(m.grads);
  }
}

bool Model::grads_on_host() const { return impl_->opt.offload_grads; }

LossSum Model::forward_backward(const Batch& batch, float grad_scale) {
  Impl& m = *impl_;
  Step s = m.stage_batch(batch);
  m.forward_pass(s);
  if (m.opt.offload_grads) {
    m.grads_begin_microstep();
    m.grad_group_begin(m.cfg.tied_embeddings ? 0 : m.group_bounds.size() - 2);  // where the LM head's gradient goes
  }
  m.lm_head(s, true, grad_scale);
  m.backward_pass(s);
  return m.read_loss(s);
}

LossSum Model::forward(const Batch& batch) {
  Step s = impl_->stage_batch(batch);
  impl_->forward_pass(s);
  impl_->lm_head(s, false, 0.0f);
  return impl_->read_loss(s);
}

}  // namespace tk
