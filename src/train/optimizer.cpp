// AdamW: global-norm clipping folded into the update's gradient scale, one adamw_update over the
// layout's segments (weight decay on matrices only), and the state's host round trip.
#include "train/optimizer.h"

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
  m_ = allocate(state_dtype(ops_), "AdamW first moments");
  v_ = allocate(state_dtype(ops_), "AdamW second moments");
  ops_.zero(m_);
  ops_.zero(v_);
  // bf16 weights cannot absorb updates smaller than their rounding step: keep an fp32 copy to update.
  if (dtype_size(ops_.act_dtype()) < 4) {
    master_ = allocate(DType::F32, "fp32 master weights");
    upload(master_, model_.params_f32(), "weights");
  }
}

AdamW::~AdamW() {
  for (Tensor* t : {&m_, &v_, &master_})
    if (!t->empty()) ops_.release(t->data);
}

Tensor AdamW::allocate(DType dtype, const char* label) {
  const int64_t n = model_.layout().total;
  return Tensor(ops_.allocate(size_t(n) * dtype_size(dtype), label), dtype, {n});
}

size_t AdamW::state_bytes() const { return m_.nbytes() + v_.nbytes() + master_.nbytes(); }

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
  ops_.adamw_update(model_.params(), master_, model_.grads(), m_, v_, segments_, c);
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

std::vector<float> AdamW::weights_f32() const { return has_master_weights() ? download(master_) : model_.params_f32(); }

void AdamW::set_weights_f32(const std::vector<float>& weights) {
  upload(model_.params(), weights, "weights");
  if (has_master_weights()) upload(master_, weights, "weights");
}

std::vector<float> AdamW::exp_avg_f32() const { return download(m_); }
std::vector<float> AdamW::exp_avg_sq_f32() const { return download(v_); }

void AdamW::set_state_f32(const std::vector<float>& exp_avg, const std::vector<float>& exp_avg_sq, int64_t steps_taken) {
  upload(m_, exp_avg, "exp_avg");
  upload(v_, exp_avg_sq, "exp_avg_sq");
  steps_taken_ = steps_taken;
}

}  // namespace tk
