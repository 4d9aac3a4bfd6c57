// AdamW: global-norm clipping folded into the update's gradient scale, one adamw_update over the
// layout's segments (weight decay on matrices only), and the state's host round trip.
#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"

namespace tk {
namespace {

// The dtype ops.h calls "f32": float32 on every backend but the float64 CPU reference.
DType state_dtype(const Ops& ops) { return ops.act_dtype() == DType::F64 ? DType::F64 : DType::F32; }

}  // namespace

AdamW::AdamW(Model& model, const AdamWOptions& opt)
    : model_(model), ops_(model.ops()), opt_(opt), segments_(model.layout().segments()) {
  TK_CHECK(opt.beta1 >= 0 && opt.beta1 < 1, "--beta1 must be in [0, 1), got {}", opt.beta1);
  TK_CHECK(opt.beta2 >= 0 && opt.beta2 < 1, "--beta2 must be in [0, 1), got {}", opt.beta2);
  TK_CHECK(opt.eps > 0, "--adam-eps must be positive, got {}", opt.eps);
  TK_CHECK(opt.weight_decay >= 0, "--weight-decay must not be negative, got {}", opt.weight_decay);
  // bf16 weights cannot absorb updates smaller than their rounding step: keep an fp32 copy to update.
  const bool master = dtype_size(ops_.act_dtype()) < 4;
  TK_CHECK(!model.grads_on_host() || opt.offload,
           "gradients in host memory need the optimizer state there too (--offload optimizer,gradients)");
  if (opt.offload) {
    TK_CHECK(state_dtype(ops_) == DType::F32, "optimizer offload keeps fp32 state; the {} backend's is not", ops_.name());
    TK_CHECK(opt.offload_chunk >= 256, "the offload chunk must be at least 256 elements, got {}", opt.offload_chunk);
    m_host_ = allocate_host("AdamW first moments (host)");
    v_host_ = allocate_host("AdamW second moments (host)");
    const int64_t chunk = std::min(opt.offload_chunk, model_.layout().total);
    for (Stage& s : stage_) {
      s.m = allocate(DType::F32, "offload staging: m chunks", chunk);
      s.v = allocate(DType::F32, "offload staging: v chunks", chunk);
      if (master) s.master = allocate(DType::F32, "offload staging: master weight chunks", chunk);
      if (model.grads_on_host()) s.grads = allocate(DType::F32, "offload staging: gradient chunks", chunk);
    }
    if (model.grads_on_host()) host_ops_ = make_cpu_ops(DType::F32);
    if (master) {
      master_host_ = allocate_host("fp32 master weights (host)");
      const std::vector<float> w = model_.params_f32();
      std::copy(w.begin(), w.end(), master_host_.as<float>());
    }
    return;
  }
  m_ = allocate(state_dtype(ops_), "AdamW first moments");
  v_ = allocate(state_dtype(ops_), "AdamW second moments");
  ops_.zero(m_);
  ops_.zero(v_);
  if (master) {
    master_ = allocate(DType::F32, "fp32 master weights");
    upload(master_, model_.params_f32(), "weights");
  }
}

AdamW::~AdamW() {
  ops_.synchronize();  // no copy may still read or write what is freed
  for (Tensor* t : {&m_, &v_, &master_, &stage_[0].m, &stage_[0].v, &stage_[0].master, &stage_[0].grads,
                    &stage_[1].m, &stage_[1].v, &stage_[1].master, &stage_[1].grads})
    if (!t->empty()) ops_.release(t->data);
  for (Tensor* t : {&m_host_, &v_host_, &master_host_})
    if (!t->empty()) ops_.release_host(t->data);
}

Tensor AdamW::allocate(DType dtype, const char* label, int64_t n) {
  if (n < 0) n = model_.layout().total;
  return Tensor(ops_.allocate(size_t(n) * dtype_size(dtype), label), dtype, {n});
}

// f32 [P] in host memory, zeroed.
Tensor AdamW::allocate_host(const char* label) {
  const int64_t n = model_.layout().total;
  Tensor t(ops_.allocate_host(size_t(n) * sizeof(float), label), DType::F32, {n});
  std::fill(t.as<float>(), t.as<float>() + n, 0.0f);
  return t;
}

size_t AdamW::state_bytes() const {
  size_t bytes = m_.nbytes() + v_.nbytes() + master_.nbytes();
  for (const Stage& s : stage_) bytes += s.m.nbytes() + s.v.nbytes() + s.master.nbytes() + s.grads.nbytes();
  return bytes;
}
size_t AdamW::host_state_bytes() const { return m_host_.nbytes() + v_host_.nbytes() + master_host_.nbytes(); }

// The update over the layout in chunks: the chunk's state goes up to a staging set, the same adamw_update
// runs on the chunk (segments cut at the chunk's edges and rebased; the update is element by element, so
// cutting changes nothing), and the state comes back. Two staging sets and a queue per direction make a
// pipeline: while chunk i is updated, chunk i+1 goes up and chunk i-1 comes down. The order:
//   upload queue:   [wait: chunk i-2's download freed the set]  upload i            record `uploaded`
//   compute queue:  [wait: uploaded]                            adamw_update i      record `updated`
//   download queue: [wait: updated]                             download i          record the set's free event
// and at the end the compute queue waits for the last download, so whatever follows (the next step, a
// checkpoint reading the host state after synchronize()) sees the whole update.
void AdamW::offloaded_update(const AdamWConfig& c) {
  using Q = Ops::Queue;
  const int64_t P = model_.layout().total, chunk = stage_[0].m.numel();
  const bool master = !stage_[0].master.empty();
  // The uploads may start once every earlier use of the staging sets on the compute queue has run.
  ops_.wait_event(Q::upload, ops_.record_event(Q::compute));
  for (Stage& st : stage_) st.free_event = -1;  // the wait above covers the last update's downloads
  int last_download = -1, i = 0;
  for (int64_t a = 0; a < P; a += chunk) {
    const int64_t n = std::min(chunk, P - a);
    std::vector<ParamSegment> segs;
    for (const ParamSegment& s : segments_) {
      const int64_t lo = std::max(s.offset, a), hi = std::min(s.offset + s.count, a + n);
      if (lo < hi) segs.push_back({lo - a, hi - lo, s.decay});
    }
    if (segs.empty()) continue;
    Stage& st = stage_[i++ % 2];
    const size_t bytes = size_t(n) * sizeof(float);
    if (st.free_event >= 0) ops_.wait_event(Q::upload, st.free_event);
    ops_.copy_async(st.m.data, m_host_.as<float>() + a, bytes, Q::upload);
    ops_.copy_async(st.v.data, v_host_.as<float>() + a, bytes, Q::upload);
    if (master) ops_.copy_async(st.master.data, master_host_.as<float>() + a, bytes, Q::upload);
    const bool host_grads = !st.grads.empty();
    if (host_grads) ops_.copy_async(st.grads.data, model_.grads().as<float>() + a, bytes, Q::upload);
    ops_.wait_event(Q::compute, ops_.record_event(Q::upload));
    ops_.adamw_update(model_.params().rows(a, a + n), master ? st.master.rows(0, n) : Tensor(),
                      host_grads ? st.grads.rows(0, n) : model_.grads().rows(a, a + n), st.m.rows(0, n),
                      st.v.rows(0, n), Tensor(), Tensor(), segs, c);
    ops_.wait_event(Q::download, ops_.record_event(Q::compute));
    ops_.copy_async(m_host_.as<float>() + a, st.m.data, bytes, Q::download);
    ops_.copy_async(v_host_.as<float>() + a, st.v.data, bytes, Q::download);
    if (master) ops_.copy_async(master_host_.as<float>() + a, st.master.data, bytes, Q::download);
    st.free_event = last_download = ops_.record_event(Q::download);
  }
  if (last_download >= 0) ops_.wait_event(Q::compute, last_download);
}

OptimizerStep AdamW::step(double lr) {
  OptimizerStep s;
  if (host_ops_) {
    // Gradients in host memory: once the backward's downloads are done, the CPU reference's norm (the same
    // fixed-order float64 sum as the CPU backend's).
    ops_.synchronize();
    s.grad_norm = host_ops_->grad_norm(model_.grads());
  } else {
    s.grad_norm = ops_.grad_norm(model_.grads());
  }
  TK_CHECK(std::isfinite(s.grad_norm),
           "the gradient norm is {} at step {}: the update was not applied (the weights or the learning rate "
           "have diverged; try a lower --lr or a longer --warmup)",
           s.grad_norm, steps_taken_ + 1);
  if (opt_.max_grad_norm > 0 && s.grad_norm > opt_.max_grad_norm) s.clip_scale = opt_.max_grad_norm / s.grad_norm;

  AdamWConfig c;
  c.lr = float(lr);
  c.beta1 = float(opt_.beta1);
  c.beta2 = float(opt_.beta2);
  c.eps = float(opt_.eps);
  c.weight_decay = float(opt_.weight_decay);
  c.step = steps_taken_ + 1;
  c.grad_scale = float(s.clip_scale);
  if (opt_.offload) {
    offloaded_update(c);
  } else {
    ops_.adamw_update(model_.params(), master_, model_.grads(), m_, v_, Tensor(), Tensor(), segments_, c);
  }
  steps_taken_++;
  return s;
}

std::vector<float> AdamW::download(const Tensor& t) const {
  std::vector<float> host(size_t(t.numel()));
  ops_.download_f32(host.data(), t);
  return host;
}

void AdamW::upload(const Tensor& t, const std::vector<float>& host, const char* what) {
  TK_CHECK(int64_t(host.size()) == t.numel(), "internal error: {} has {} values, the model has {} parameters", what,
           host.size(), t.numel());
  ops_.upload_f32(t, host.data());
}

namespace {
std::vector<float> host_copy(const Tensor& t) { return std::vector<float>(t.as<float>(), t.as<float>() + t.numel()); }
}  // namespace

// The host state may still be in flight (the offloaded update's downloads, queued asynchronously):
// every access to it waits for the device first.
std::vector<float> AdamW::host_state(const Tensor& t) const {
  ops_.synchronize();
  return host_copy(t);
}

namespace {
void set_host(const Tensor& t, const std::vector<float>& v, const char* what) {
  TK_CHECK(int64_t(v.size()) == t.numel(), "internal error: {} has {} values, the model has {} parameters", what,
           v.size(), t.numel());
  std::copy(v.begin(), v.end(), t.as<float>());
}
}  // namespace

std::vector<float> AdamW::weights_f32() const {
  if (!master_host_.empty()) return host_state(master_host_);
  return !master_.empty() ? download(master_) : model_.params_f32();
}

void AdamW::set_weights_f32(const std::vector<float>& weights) {
  upload(model_.params(), weights, "weights");
  if (!master_host_.empty()) {
    ops_.synchronize();
    set_host(master_host_, weights, "weights");
  } else if (!master_.empty()) {
    upload(master_, weights, "weights");
  }
}

std::vector<float> AdamW::exp_avg_f32() const { return opt_.offload ? host_state(m_host_) : download(m_); }
std::vector<float> AdamW::exp_avg_sq_f32() const { return opt_.offload ? host_state(v_host_) : download(v_); }

void AdamW::set_state_f32(const std::vector<float>& exp_avg, const std::vector<float>& exp_avg_sq, int64_t steps_taken) {
  if (opt_.offload) {
    ops_.synchronize();
    set_host(m_host_, exp_avg, "exp_avg");
    set_host(v_host_, exp_avg_sq, "exp_avg_sq");
  } else {
    upload(m_, exp_avg, "exp_avg");
    upload(v_, exp_avg_sq, "exp_avg_sq");
  }
  steps_taken_ = steps_taken;
}

}  // namespace tk
