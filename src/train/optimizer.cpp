// AdamW: global-norm clipping folded into the update's gradient scale, one adamw_update over the
// layout's segments (weight decay on matrices only), and the state's host round trip.
#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

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
  if (opt.offload) {
    TK_CHECK(state_dtype(ops_) == DType::F32, "optimizer offload keeps fp32 state; the {} backend's is not", ops_.name());
    TK_CHECK(opt.offload_chunk >= 256, "the offload chunk must be at least 256 elements, got {}", opt.offload_chunk);
    m_host_ = allocate_host("AdamW first moments (host)");
    v_host_ = allocate_host("AdamW second moments (host)");
    const int64_t chunk = std::min(opt.offload_chunk, model_.layout().total);
    m_ = allocate(DType::F32, "offload staging: m chunk", chunk);
    v_ = allocate(DType::F32, "offload staging: v chunk", chunk);
    if (master) {
      master_host_ = allocate_host("fp32 master weights (host)");
      const std::vector<float> w = model_.params_f32();
      std::copy(w.begin(), w.end(), master_host_.as<float>());
      master_ = allocate(DType::F32, "offload staging: master weights chunk", chunk);
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
  for (Tensor* t : {&m_, &v_, &master_})
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

size_t AdamW::state_bytes() const { return m_.nbytes() + v_.nbytes() + master_.nbytes(); }
size_t AdamW::host_state_bytes() const { return m_host_.nbytes() + v_host_.nbytes() + master_host_.nbytes(); }

// The update over the layout in chunks: the chunk's state goes up to the staging buffers, the same
// adamw_update runs on the chunk (segments cut at the chunk's edges and rebased; the update is element by
// element, so cutting changes nothing), and the state comes back. The download of each chunk waits for it.
void AdamW::offloaded_update(const AdamWConfig& c) {
  const int64_t P = model_.layout().total, chunk = m_.numel();
  for (int64_t a = 0; a < P; a += chunk) {
    const int64_t n = std::min(chunk, P - a);
    std::vector<ParamSegment> segs;
    for (const ParamSegment& s : segments_) {
      const int64_t lo = std::max(s.offset, a), hi = std::min(s.offset + s.count, a + n);
      if (lo < hi) segs.push_back({lo - a, hi - lo, s.decay});
    }
    if (segs.empty()) continue;
    const size_t bytes = size_t(n) * sizeof(float);
    ops_.upload(m_.data, m_host_.as<float>() + a, bytes);
    ops_.upload(v_.data, v_host_.as<float>() + a, bytes);
    if (!master_.empty()) ops_.upload(master_.data, master_host_.as<float>() + a, bytes);
    const Tensor master = master_.empty() ? Tensor() : master_.rows(0, n);
    ops_.adamw_update(model_.params().rows(a, a + n), master, model_.grads().rows(a, a + n), m_.rows(0, n),
                      v_.rows(0, n), segs, c);
    ops_.download(m_host_.as<float>() + a, m_.data, bytes);
    ops_.download(v_host_.as<float>() + a, v_.data, bytes);
    if (!master_.empty()) ops_.download(master_host_.as<float>() + a, master_.data, bytes);
  }
}

OptimizerStep AdamW::step(double lr) {
  OptimizerStep s;
  s.grad_norm = ops_.grad_norm(model_.grads());
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
    ops_.adamw_update(model_.params(), master_, model_.grads(), m_, v_, segments_, c);
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
void set_host(const Tensor& t, const std::vector<float>& v, const char* what) {
  TK_CHECK(int64_t(v.size()) == t.numel(), "internal error: {} has {} values, the model has {} parameters", what,
           v.size(), t.numel());
  std::copy(v.begin(), v.end(), t.as<float>());
}
}  // namespace

std::vector<float> AdamW::weights_f32() const {
  if (!master_host_.empty()) return host_copy(master_host_);
  return !master_.empty() ? download(master_) : model_.params_f32();
}

void AdamW::set_weights_f32(const std::vector<float>& weights) {
  upload(model_.params(), weights, "weights");
  if (!master_host_.empty()) {
    set_host(master_host_, weights, "weights");
  } else if (!master_.empty()) {
    upload(master_, weights, "weights");
  }
}

std::vector<float> AdamW::exp_avg_f32() const { return opt_.offload ? host_copy(m_host_) : download(m_); }
std::vector<float> AdamW::exp_avg_sq_f32() const { return opt_.offload ? host_copy(v_host_) : download(v_); }

void AdamW::set_state_f32(const std::vector<float>& exp_avg, const std::vector<float>& exp_avg_sq, int64_t steps_taken) {
  if (opt_.offload) {
    set_host(m_host_, exp_avg, "exp_avg");
    set_host(v_host_, exp_avg_sq, "exp_avg_sq");
  } else {
    upload(m_, exp_avg, "exp_avg");
    upload(v_, exp_avg_sq, "exp_avg_sq");
  }
  steps_taken_ = steps_taken;
}

}  // namespace tk
