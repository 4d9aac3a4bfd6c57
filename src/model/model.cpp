// Model: the planned buffers of one model on one backend, and the schedule of a step: the batch's upload, the
// embedding, the blocks (model/block.h) forward and backward, the final norm and the LM head. Everything is allocated
// in the constructor; a step only takes views of those buffers shaped for the batch at hand.
#include "model/model.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numbers>
#include <thread>

#include <sys/mman.h>

#include "core/hash.h"
#include "model/activation_plan.h"
#include "model/block.h"
#include "model/buffer_carver.h"
#include "model/grad_staging.h"
#include "model/weights.h"

namespace tk {
namespace {

// Elements [begin, end) of a tensor of N(0, std_dev^2) values drawn from its seed: element pair k (elements 2k and
// 2k+1) by Box-Muller from the 2k-th and (2k+1)-th outputs of SplitMix64 seeded with `seed`. Each pair depends only
// on k, so any range can be drawn on its own (a large tensor by many threads, in batches) and gives the same values.
// Both are written out here, so that the same seed gives the same weights with any standard library.
void fill_normal(float* out, int64_t begin, int64_t end, uint64_t seed, double std_dev) {
  constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;  // SplitMix64's increment (splitmix64 adds it once more)
  auto uniform = [&](int64_t i) { return double(splitmix64(seed + uint64_t(i) * kGamma) >> 11) * 0x1.0p-53; };
  for (int64_t i = begin & ~int64_t(1); i < end; i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(1.0 - uniform(i))), angle = 2.0 * std::numbers::pi * uniform(i + 1);
    if (i >= begin) out[i - begin] = float(std_dev * radius * std::cos(angle));
    if (i + 1 < end) out[i + 1 - begin] = float(std_dev * radius * std::sin(angle));
  }
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
  ModelWeights w, g;  // views of params and of grads (with a staging: of the staging buffers in use)
  std::unique_ptr<GradientStaging> staging;  // with ModelOptions::offload_grads or reduced_grads
  GradientHook* hook = nullptr;
  ParameterSource* source = nullptr;  // with sharded parameters, or gathered after a sharded update
  // With sharded parameters: an address range the size of the whole layout, reserved and never mapped, that stands
  // for each weight where no buffer holds it for good (weight_identities); a gathered unit is aliased to its place.
  void* identities = nullptr;
  size_t identities_bytes = 0;
  StepBuffers buf;

  Impl(const ModelConfig& c, Ops& o, const ModelOptions& options)
      : cfg(c), opt(options), ops(o), layout(ParamLayout::build(c, options.unit_multiple)), act(o.act_dtype()),
        stat(o.act_dtype() == DType::F64 ? DType::F64 : DType::F32) {
    TK_CHECK(opt.B > 0 && opt.T > 0, "model {}: the micro-batch must have positive B and T, got B={} T={}", cfg.name,
             opt.B, opt.T);
    TK_CHECK(opt.T <= cfg.max_seq, "model {}: sequence length {} exceeds max_position_embeddings {}", cfg.name, opt.T,
             cfg.max_seq);
    TK_CHECK(opt.param_shards >= 1 && opt.param_shard >= 0 && opt.param_shard < opt.param_shards &&
                 opt.unit_multiple % (int64_t(opt.param_shards) * 64) == 0,
             "internal error: parameter shard {} of {} with units padded to {}", opt.param_shard, opt.param_shards,
             opt.unit_multiple);
    TK_CHECK(opt.grad_shards >= 1 && opt.grad_shard >= 0 &&
                 opt.grad_shard < opt.grad_shards && (opt.reduced_grads || opt.grad_shards == 1) &&
                 opt.unit_multiple % (int64_t(opt.grad_shards) * 64) == 0,
             "internal error: gradient shard {} of {} ({}) with units padded to {}", opt.grad_shard, opt.grad_shards,
             opt.reduced_grads ? "reduced" : "whole", opt.unit_multiple);
    const int64_t held = layout.total / opt.param_shards;
    param_mem = ops.allocate(size_t(held) * dtype_size(act),
                             opt.param_shards > 1 ? "parameters (this rank's slice of each unit)" : "parameters");
    const int64_t grads_held = layout.total / opt.grad_shards;
    const size_t grad_bytes = size_t(grads_held) * dtype_size(ops.grad_dtype());
    grad_mem = opt.offload_grads ? ops.allocate_host(grad_bytes, "parameter gradients (host)")
                                 : ops.allocate(grad_bytes, gradient_label(opt));
    params = Tensor(param_mem, act, {held});
    grads = Tensor(grad_mem, ops.grad_dtype(), {grads_held});
    ops.zero(params);
    if (opt.offload_grads) {
      std::memset(grad_mem, 0, grad_bytes);
      staging = std::make_unique<GradientStaging>(
          cfg, layout, ops, grads, opt.reduced_grads ? GradientStaging::Home::host_slices : GradientStaging::Home::host,
          opt.grad_shards, opt.grad_shard);
    } else {
      ops.zero(grads);
      if (opt.reduced_grads)
        staging = std::make_unique<GradientStaging>(cfg, layout, ops, grads, GradientStaging::Home::slices,
                                                    opt.grad_shards, opt.grad_shard);
    }
    // Sharded, the views point into each unit's gathered copy while it is in use (use_unit); staged, the gradients'
    // into each unit's staging buffer while its backward runs (grad_group_begin).
    if (opt.param_shards == 1) w = weight_views(cfg, layout, param_mem, act);
    if (opt.param_shards > 1) {
      identities_bytes = size_t(layout.total) * dtype_size(act);
      identities = mmap(nullptr, identities_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      TK_CHECK(identities != MAP_FAILED, "model {}: cannot reserve {} bytes of address space to name the weights: {}",
               cfg.name, identities_bytes, std::strerror(errno));
    }
    if (!staging) g = weight_views(cfg, layout, grad_mem, ops.grad_dtype());
    else g.layers.resize(size_t(cfg.n_layers));

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
    staging.reset();
    if (opt.offload_grads) {
      ops.release_host(grad_mem);
    } else {
      ops.release(grad_mem);
    }
    ops.release(param_mem);
    if (identities) munmap(identities, identities_bytes);
  }

  // The gradient groups of the backward, each a point where per-group work hangs (gradient staging brings a group's
  // gradients into a staging buffer before its backward; offload takes them down after, the hook reduces them): k = 0
  // the embedding (with a tied LM head), l + 1 layer l, and the tail (the final norm, with an untied LM head).
  size_t tail_group() const { return size_t(cfg.n_layers) + 1; }
  size_t lm_head_group() const { return cfg.tied_embeddings ? 0 : tail_group(); }
  void grad_group_begin(size_t k) {
    if (staging) staging->begin_group(k, g);
  }
  void grad_group_end(size_t k) {
    const Tensor staged = staging ? staging->end_group(k) : Tensor();
    if (hook) hook->unit_done(k, opt.reduced_grads ? staged : Tensor());
  }
  // Before unit k's weights are read: the source (if any) makes them current; with sharded parameters, the unit is
  // gathered whole and its views pointed there.
  void use_unit(size_t k) {
    TK_CHECK(source || opt.param_shards == 1,
             "internal error: model {} has sharded parameters but no source to gather them", cfg.name);
    if (!source) return;
    const Tensor unit = source->gather_unit(k);
    if (opt.param_shards == 1) return;
    point_unit_views(w, cfg, layout, k, unit.data, act);
    const size_t e = dtype_size(act);
    ops.alias_weights(unit.data, size_t(layout.unit_size(k)) * e,
                      static_cast<char*>(identities) + size_t(layout.unit_begin[k]) * e);
  }
  // The pieces of [offset, offset + n) of the layout that this rank holds: {flat index, index in params}.
  std::vector<std::array<int64_t, 3>> held_pieces(int64_t offset, int64_t n) const;

  BlockStep stage_batch(const Batch& batch);
  void check_tokens(const Batch& batch) const;
  void forward_pass(const BlockStep& s);
  void lm_head(const BlockStep& s, bool with_grads, float grad_scale);
  LossSum read_loss(const BlockStep& s, const Batch& batch);
  void backward_pass(const BlockStep& s);
};

// Every id the step reads within the vocabulary, before anything is uploaded: row b's window of T+1 tokens is its
// inputs and, after them, its last target.
void Model::Impl::check_tokens(const Batch& batch) const {
  auto check = [&](int32_t id, int b, int t) {
    TK_CHECK(id >= 0 && id < cfg.vocab_size,
             "token id {} (row {}, position {}) is outside the vocabulary of {} tokens of model {}: was the data "
             "prepared with another tokenizer?",
             id, b, t, cfg.vocab_size, cfg.name);
  };
  for (int b = 0; b < batch.B; b++) {
    const int64_t row = int64_t(b) * batch.T;
    for (int t = 0; t < batch.T; t++) check(batch.inputs[row + t], b, t);
    for (int t = 0; t < batch.T; t++)
      if (batch.targets[row + t] != kUntrainedTarget) check(batch.targets[row + t], b, t + 1);
  }
}

std::vector<std::array<int64_t, 3>> Model::Impl::held_pieces(int64_t offset, int64_t n) const {
  if (opt.param_shards == 1) return {{offset, offset, n}};
  std::vector<std::array<int64_t, 3>> out;
  int64_t at = 0;  // where unit k's slice starts in params
  for (size_t k = 0; k < layout.units(); k++) {
    const int64_t chunk = layout.unit_size(k) / opt.param_shards;
    const int64_t first = layout.unit_begin[k] + opt.param_shard * chunk;
    const int64_t lo = std::max(offset, first), hi = std::min(offset + n, first + chunk);
    if (lo < hi) out.push_back({lo, at + lo - first, hi - lo});
    at += chunk;
  }
  return out;
}

// Uploads the batch's inputs, targets, positions and document ids from the memory the batch lives in, checking them
// first. The step's loss read-back waits for the copies, so the batch may change once forward_backward returns.
BlockStep Model::Impl::stage_batch(const Batch& batch) {
  TK_CHECK(batch.inputs != nullptr && batch.targets != nullptr && batch.positions != nullptr &&
               batch.segments != nullptr,
           "model {}: the batch holds no tokens", cfg.name);
  TK_CHECK(batch.B > 0 && batch.T > 0 && batch.B <= opt.B && batch.T <= opt.T,
           "model {}: a batch of B={} T={} does not fit the planned micro-batch B={} T={}", cfg.name, batch.B, batch.T,
           opt.B, opt.T);
  TK_CHECK(batch.doc_mask == opt.doc_mask,
           "model {}: the batch's positions are those {} document masking, but the model trains {} it", cfg.name,
           batch.doc_mask ? "of" : "without", opt.doc_mask ? "with" : "without");
  check_tokens(batch);
  BlockStep s;
  s.B = batch.B;
  s.T = batch.T;
  s.N = batch.tokens();
  s.attn = {s.B, s.T, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim};
  s.positions = shaped(buf.positions, {s.N});
  s.segments = opt.doc_mask ? shaped(buf.segments, {s.B, s.T}) : Tensor();
  s.branch = buf.branch;
  const size_t bytes = size_t(s.N) * sizeof(int32_t);
  ops.upload(buf.tokens.data, batch.inputs, bytes);
  ops.upload(buf.targets.data, batch.targets, bytes);
  ops.upload(buf.positions.data, batch.positions, bytes);
  if (opt.doc_mask) ops.upload(buf.segments.data, batch.segments, bytes);
  return s;
}

// h0 = embedding; each block; the last residual add fused with the final norm.
void Model::Impl::forward_pass(const BlockStep& s) {
  const int64_t N = s.N, d = cfg.d_model;
  use_unit(0);
  ops.embedding_forward(shaped(buf.layers[0].h, {N, d}), shaped(buf.tokens, {N}), w.embed);
  const BlockPass pass = BlockPass::training(recomputed(opt.recompute));
  for (int l = 0; l < cfg.n_layers; l++) {
    use_unit(size_t(l) + 1);
    block_forward(ops, cfg, w.layers[l], buf.layers[l], l == 0 ? Tensor() : buf.layers[l - 1].h_mid, s, pass);
  }
  use_unit(tail_group());
  ops.residual_rmsnorm_forward(shaped(buf.h_out, {N, d}), shaped(buf.x_final, {N, d}), shaped(buf.rstd_final, {N}),
                               shaped(buf.layers.back().h_mid, {N, d}), shaped(buf.branch, {N, d}), w.final_norm,
                               float(cfg.norm_eps));
}

// Per-token losses over the targets; with grads, dL/dx_final lands in buf.grad.dx and the LM head's weight gradient
// accumulates (into the embedding's when tied).
void Model::Impl::lm_head(const BlockStep& s, bool with_grads, float grad_scale) {
  const int64_t N = s.N, d = cfg.d_model;
  use_unit(lm_head_group());
  ops.lm_head_cross_entropy(shaped(buf.losses, {N}), with_grads ? shaped(buf.grad.dx, {N, d}) : Tensor(),
                            with_grads ? g.lm_head : Tensor(), shaped(buf.x_final, {N, d}), w.lm_head,
                            shaped(buf.targets, {N}), grad_scale, kUntrainedTarget);
}

// Sums the losses on the host, in token order, at the precision the backend computed them in. Called
// after the backward is queued: the download is the step's one synchronisation.
LossSum Model::Impl::read_loss(const BlockStep& s, const Batch& batch) {
  const Tensor losses = shaped(buf.losses, {s.N});
  LossSum sum;
  sum.count = count_trained(batch);  // an untrained target's loss is 0: the mean is over the trained ones
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

// The forward in reverse, after the LM head (whose gradient group is open). dh carries dL/d(residual stream) down
// through the layers; before each block's backward, what its policy did not keep is recomputed.
void Model::Impl::backward_pass(const BlockStep& s) {
  const int64_t N = s.N, d = cfg.d_model;
  const Tensor dh = shaped(buf.dh, {N, d});
  if (lm_head_group() != tail_group()) grad_group_begin(tail_group());
  use_unit(tail_group());
  ops.rmsnorm_backward(dh, g.final_norm, shaped(buf.grad.dx, {N, d}), Tensor(), shaped(buf.h_out, {N, d}),
                       shaped(buf.rstd_final, {N}), w.final_norm);
  grad_group_end(tail_group());
  const BlockPass recompute = BlockPass::recompute(recomputed(opt.recompute));
  for (int l = cfg.n_layers - 1; l >= 0; l--) {
    grad_group_begin(size_t(l) + 1);
    use_unit(size_t(l) + 1);
    if (opt.recompute.any()) {
      ops.range_push("recompute");
      block_forward(ops, cfg, w.layers[l], buf.layers[l], Tensor(), s, recompute);
      ops.range_pop();
    }
    block_backward(ops, cfg, w.layers[l], g.layers[l], buf.layers[l], s, buf.dh, buf.grad);
    grad_group_end(size_t(l) + 1);
  }
  if (lm_head_group() != 0) grad_group_begin(0);
  ops.embedding_backward(g.embed, shaped(buf.tokens, {N}), dh);
  grad_group_end(0);
  if (hook) hook->backward_done();
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
void Model::set_gradient_hook(GradientHook* hook) { impl_->hook = hook; }
void Model::set_parameter_source(ParameterSource* source) { impl_->source = source; }

// Each tensor draws from its own stream, seeded by the run's seed and the tensor's name, so a tensor's initial values
// do not depend on which other tensors the model has, nor on how many threads draw them, nor on the batches. The
// parameters go in layout order, in batches (a large tensor split across them): several threads draw a batch into one
// page-locked host buffer, which is then uploaded (a 7B model's 7.6 billion draws take minutes on one thread, and a
// pageable upload of its 30 GB of floats seconds more).
void Model::init_params(uint64_t seed, int64_t batch_values) {
  TK_CHECK(batch_values > 0, "init_params: a batch of {} values", batch_values);
  Impl& m = *impl_;
  m.ops.zero(m.params);  // alignment padding included
  const std::vector<ParamInfo>& params = m.layout.params;
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  constexpr int64_t kPiece = int64_t(1) << 20;  // values a thread draws at a time
  // A batch's part of one tensor: its elements [begin, end), at `at` in the buffer.
  struct Part {
    size_t param;
    int64_t begin, end, at;
  };
  int64_t largest = 0;
  for (const ParamInfo& p : params) largest = std::max(largest, p.numel);
  const int64_t capacity = std::min(batch_values, largest);
  struct HostBuffer {
    Ops& ops;
    float* values;
    ~HostBuffer() { ops.release_host(values); }
  } buffer{m.ops, static_cast<float*>(m.ops.allocate_host(size_t(capacity) * sizeof(float), "initial parameters"))};
  std::vector<Part> batch;
  auto draw_and_upload = [&] {
    // The matrices' parts cut into pieces for the threads; the vectors' filled here (norm weights 1, biases 0).
    std::vector<Part> pieces;
    for (const Part& part : batch) {
      const ParamInfo& p = params[part.param];
      if (p.shape.size() == 2) {
        for (int64_t b = part.begin; b < part.end; b += kPiece)
          pieces.push_back({part.param, b, std::min(part.end, b + kPiece), part.at + (b - part.begin)});
      } else {
        std::fill_n(buffer.values + part.at, part.end - part.begin, ends_with(p.name, ".bias") ? 0.0f : 1.0f);
      }
    }
    std::atomic<size_t> next{0};
    auto draw = [&] {
      for (size_t k; (k = next++) < pieces.size();) {
        const Part& piece = pieces[k];
        const ParamInfo& p = params[piece.param];
        fill_normal(buffer.values + piece.at, piece.begin, piece.end,
                    splitmix64(seed ^ fnv1a64(p.name.data(), p.name.size())), m.cfg.init_std);
      }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < std::min<size_t>(threads, pieces.size()); t++) pool.emplace_back(draw);
    draw();
    for (std::thread& t : pool) t.join();
    for (const Part& part : batch)
      set_params_f32(params[part.param].offset + part.begin, part.end - part.begin, buffer.values + part.at);
    batch.clear();
  };
  int64_t filled = 0;
  for (size_t i = 0; i < params.size(); i++) {
    for (int64_t begin = 0; begin < params[i].numel;) {
      if (filled == capacity) draw_and_upload(), filled = 0;
      const int64_t end = std::min(params[i].numel, begin + (capacity - filled));
      batch.push_back({i, begin, end, filled});
      filled += end - begin;
      begin = end;
    }
  }
  if (!batch.empty()) draw_and_upload();
}

void Model::set_params_f32(const std::vector<float>& host) {
  TK_CHECK(int64_t(host.size()) == impl_->layout.total, "model {}: {} parameter values given for a layout of {}",
           impl_->cfg.name, host.size(), impl_->layout.total);
  set_params_f32(0, impl_->layout.total, host.data());
}

void Model::set_params_f32(int64_t offset, int64_t n, const float* host) {
  for (const auto& [flat, at, count] : impl_->held_pieces(offset, n))
    impl_->ops.upload_f32(impl_->params.rows(at, at + count), host + (flat - offset));
}

bool Model::params_sharded() const { return impl_->opt.param_shards > 1; }
const void* Model::weight_identities() const {
  return impl_->identities ? impl_->identities : impl_->params.data;
}

std::vector<float> Model::params_f32() const {
  TK_CHECK(!params_sharded(), "internal error: model {}'s parameters are sharded across the ranks", impl_->cfg.name);
  std::vector<float> host(size_t(impl_->layout.total));
  impl_->ops.download_f32(host.data(), impl_->params);
  return host;
}

std::vector<float> Model::grads_f32() const {
  TK_CHECK(!grads_sharded(), "internal error: model {}'s gradients are sharded across the ranks", impl_->cfg.name);
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
  } else {
    m.ops.zero(m.grads);  // the staging buffers are cleared as each unit's backward begins
  }
  if (m.staging) m.staging->accumulated_zeroed();
}

Tensor Model::reduced_gradients_destination(size_t unit) const {
  TK_CHECK(impl_->opt.reduced_grads, "internal error: model {} does not reduce its gradients", impl_->cfg.name);
  return impl_->staging->reduced_destination(unit);
}

void Model::store_reduced_gradients(size_t unit) {
  TK_CHECK(impl_->opt.reduced_grads, "internal error: model {} does not reduce its gradients", impl_->cfg.name);
  impl_->staging->store_reduced(unit);
}

bool Model::grads_on_host() const { return impl_->opt.offload_grads; }
bool Model::grads_reduced() const { return impl_->opt.reduced_grads; }
bool Model::grads_sharded() const { return impl_->opt.grad_shards > 1; }

size_t Model::gradient_bytes() const {
  const ModelOptions& o = impl_->opt;
  size_t bytes = o.offload_grads ? 0 : impl_->grads.nbytes();
  if (o.offload_grads || o.reduced_grads) {
    const auto [outer, layer] = gradient_stage_elements(impl_->cfg, impl_->layout);
    bytes += size_t(outer + 2 * layer) * dtype_size(impl_->grads.dtype);
  }
  return bytes;
}

LossSum Model::forward_backward(const Batch& batch, float grad_scale) {
  Impl& m = *impl_;
  const BlockStep s = m.stage_batch(batch);
  TK_CHECK(!m.opt.reduced_grads || m.hook, "internal error: model {} reduces its gradients but has no hook to do it",
           m.cfg.name);
  m.forward_pass(s);
  if (m.staging) m.staging->begin_microstep();
  m.grad_group_begin(m.lm_head_group());
  m.lm_head(s, true, grad_scale);
  m.backward_pass(s);
  if (m.staging) m.staging->end_microstep();
  return m.read_loss(s, batch);
}

LossSum Model::forward(const Batch& batch) {
  const BlockStep s = impl_->stage_batch(batch);
  impl_->forward_pass(s);
  impl_->lm_head(s, false, 0.0f);
  return impl_->read_loss(s, batch);
}

}  // namespace tk
