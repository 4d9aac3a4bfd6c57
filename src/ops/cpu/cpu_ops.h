// CpuOps: the CPU reference backend, every op of ops.h in plain loops (OpenMP across rows, OpenBLAS
// for the matmuls). It is the specification the CUDA kernels are tested against, so each op is written
// to be read next to its comment in ops.h. T = float (the CPU trainer) or double (gradient checks).
#pragma once
#include <memory>

#include "core/deferred_queues.h"
#include "ops/cpu/deferred_copies.h"
#include "ops/ops.h"

namespace tk {

template <class T>
class CpuOps final : public Ops {
 public:
  // Every floating tensor an op sees (activations, weights, gradients and the "f32" ones of ops.h) is T.
  static constexpr DType kDType = sizeof(T) == 8 ? DType::F64 : DType::F32;

  const char* name() const override { return kDType == DType::F64 ? "cpu-f64" : "cpu"; }
  DType act_dtype() const override { return kDType; }
  DType grad_dtype() const override { return kDType; }

  // memory.cpp
  void* allocate(size_t bytes, const char* label = "unlabelled") override;
  void release(void* p) override;
  std::vector<MemoryRow> memory_rows() const override { return ledger_.rows(); }
  void seal_memory() override { ledger_.seal(); }
  void zero(const Tensor& t) override;
  void upload_f32(const Tensor& dst, const float* src) override;
  void download_f32(float* dst, const Tensor& src) override;
  void convert(const Tensor& dst, const Tensor& src) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void synchronize() override {
    if (deferred_) deferred_->run_all();
  }
  // The copy queues: at once, or as late as their events allow (deferred_copies.h, TOKAMAK_CPU_DEFERRED_QUEUES).
  void copy_async(void* dst, const void* src, size_t bytes, Queue q) override;
  int record_event(Queue q) override { return deferred_ ? deferred_->record(q) : 0; }
  void wait_event(Queue waiter, int event) override {
    if (deferred_) deferred_->wait(waiter, event);
  }
  void release_host(void* p) override;

  // embedding.cpp
  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& table) override;
  void embedding_backward(const Tensor& dtable, const Tensor& tokens, const Tensor& dout) override;

  // rmsnorm.cpp
  void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, float eps) override;
  void residual_rmsnorm_forward(const Tensor& h_out, const Tensor& y, const Tensor& rstd, const Tensor& h_in,
                                const Tensor& x, const Tensor& w, float eps) override;
  void rmsnorm_backward(const Tensor& dh, const Tensor& dw, const Tensor& dy, const Tensor& dresidual,
                        const Tensor& h, const Tensor& rstd, const Tensor& w) override;

  // linear.cpp
  void linear_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) override;
  void linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dbias, const Tensor& dy, const Tensor& x,
                       const Tensor& w) override;

  // rope.cpp
  void qk_norm_rope_forward(const Tensor& qkv_out, const Tensor& qk_rstd, const Tensor& qkv_in,
                            const Tensor& q_norm_w, const Tensor& k_norm_w, const Tensor& positions,
                            const AttnShape& s, const RopeSpec& rope, float eps) override;
  void qk_norm_rope_backward(const Tensor& dqkv_in, const Tensor& dq_norm_w, const Tensor& dk_norm_w,
                             const Tensor& dqkv_out, const Tensor& qkv_in, const Tensor& qk_rstd,
                             const Tensor& q_norm_w, const Tensor& k_norm_w, const Tensor& positions,
                             const AttnShape& s, const RopeSpec& rope, float eps) override;

  // attention.cpp
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, const Tensor& segment_ids,
                         const AttnShape& s) override;
  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, const Tensor& segment_ids, const AttnShape& s) override;

  // attention_decode.cpp
  void attention_decode(const Tensor& out, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int pos,
                        const AttnShape& s) override;

  // swiglu.cpp
  void swiglu_forward(const Tensor& out, const Tensor& gate_up) override;
  void swiglu_backward(const Tensor& dgate_up, const Tensor& dout, const Tensor& gate_up) override;

  // cross_entropy.cpp
  void lm_head_cross_entropy(const Tensor& losses, const Tensor& dx, const Tensor& dw, const Tensor& x,
                             const Tensor& w, const Tensor& targets, float grad_scale, int ignore_index) override;

  // adamw.cpp
  double grad_norm(const Tensor& grads) override;
  void adamw_update(const Tensor& params, const Tensor& master, const Tensor& grads, const Tensor& m,
                    const Tensor& v, const Tensor& m_scale, const Tensor& v_scale,
                    const std::vector<ParamSegment>& segments, const AdamWConfig& c) override;

 private:
  MemoryLedger ledger_;
  std::unique_ptr<DeferredCopies> deferred_ = deferred_queues_requested() ? std::make_unique<DeferredCopies>() : nullptr;
};

extern template class CpuOps<float>;
extern template class CpuOps<double>;

// CpuOps<float> for DType::F32, CpuOps<double> for DType::F64; any other dtype is an error.
std::unique_ptr<Ops> make_cpu_ops(DType dtype);

}  // namespace tk
