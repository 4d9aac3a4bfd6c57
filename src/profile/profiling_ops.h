// ProfilingOps: wraps any backend's Ops and times every op between two of the backend's timing marks,
// counting the op's FLOPs and bytes from its tensor shapes, so `tokamak profile` sees where a training
// step's time goes while the model, its schedule and the trainer run unchanged on top of it.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "ops/ops.h"

namespace tk {

enum class OpCategory { Matmul, Attention, Norm, Rope, Activation, Embedding, Loss, Optimizer, Memory, Other };
const char* category_name(OpCategory c);  // "matmul", ... as profile.json spells them

// The work of one op call, counted from its shapes by the rules at the top of profiling_ops.cpp.
struct OpCost {
  double flops = 0;
  double bytes = 0;
};

struct OpRecord {
  const char* name = "";  // the Ops method: "linear_forward"
  OpCategory category = OpCategory::Other;
  OpCost cost;
  int64_t begin = 0, end = 0;  // the backend's timing marks around the op
  Tensor in, out;              // the shapes (not the data) of the op's main input and output, for the trace
  bool recompute = false;      // called inside the model's "recompute" range (Model's recompute policies)
};

class ProfilingOps final : public Ops {
 public:
  explicit ProfilingOps(std::unique_ptr<Ops> inner);

  Ops& inner() const { return *inner_; }
  // Every op call since the last clear_records(), in call order.
  const std::vector<OpRecord>& records() const { return records_; }
  // Drops the records and resets the backend's timing marks: resolve what is needed first.
  void clear_records();

  const char* name() const override { return inner_->name(); }
  DType act_dtype() const override { return inner_->act_dtype(); }
  DType grad_dtype() const override { return inner_->grad_dtype(); }
  Ops& underlying() override { return inner_->underlying(); }

  // Allocation and synchronisation run no op on the device's queue: forwarded untimed.
  void* allocate(size_t bytes, const char* label = "unlabelled") override { return inner_->allocate(bytes, label); }
  void release(void* p) override { inner_->release(p); }
  std::vector<MemoryRow> memory_rows() const override { return inner_->memory_rows(); }
  void* allocate_host(size_t bytes, const char* label) override { return inner_->allocate_host(bytes, label); }
  void release_host(void* p) override { inner_->release_host(p); }
  void seal_memory() override { inner_->seal_memory(); }
  void name_weights(const std::vector<NamedWeight>& weights) override { inner_->name_weights(weights); }
  void alias_weights(const void* data, size_t bytes, const void* as) override { inner_->alias_weights(data, bytes, as); }
  void end_step() override { inner_->end_step(); }
  Fp8ScalingState fp8_scaling_state() const override { return inner_->fp8_scaling_state(); }
  void set_fp8_scaling_state(const Fp8ScalingState& state) override { inner_->set_fp8_scaling_state(state); }
  std::vector<float> fp8_amax_seen() override { return inner_->fp8_amax_seen(); }
  void set_fp8_amax_seen(const std::vector<float>& amax) override { inner_->set_fp8_amax_seen(amax); }
  void synchronize() override { inner_->synchronize(); }
  // Copies on the copy queues are not timed as ops: the compute queue's wait for them shows in the time of
  // the op that waits (the offloaded update's adamw_update).
  void copy_async(void* dst, const void* src, size_t bytes, Queue q) override { inner_->copy_async(dst, src, bytes, q); }
  int record_event(Queue q) override { return inner_->record_event(q); }
  void wait_event(Queue waiter, int event) override { inner_->wait_event(waiter, event); }

  void zero(const Tensor& t) override;
  void upload_f32(const Tensor& dst, const float* src) override;
  void convert(const Tensor& dst, const Tensor& src) override;
  void download_f32(float* dst, const Tensor& src) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;

  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& table) override;
  void embedding_backward(const Tensor& dtable, const Tensor& tokens, const Tensor& dout) override;
  void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, float eps) override;
  void residual_rmsnorm_forward(const Tensor& h_out, const Tensor& y, const Tensor& rstd, const Tensor& h_in,
                                const Tensor& x, const Tensor& w, float eps) override;
  void rmsnorm_backward(const Tensor& dh, const Tensor& dw, const Tensor& dy, const Tensor& dresidual,
                        const Tensor& h, const Tensor& rstd, const Tensor& w) override;
  void linear_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) override;
  void linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dbias, const Tensor& dy, const Tensor& x,
                       const Tensor& w) override;
  void qk_norm_rope_forward(const Tensor& qkv_out, const Tensor& qk_rstd, const Tensor& qkv_in,
                            const Tensor& q_norm_w, const Tensor& k_norm_w, const Tensor& positions,
                            const AttnShape& s, const RopeSpec& rope, float eps) override;
  void qk_norm_rope_backward(const Tensor& dqkv_in, const Tensor& dq_norm_w, const Tensor& dk_norm_w,
                             const Tensor& dqkv_out, const Tensor& qkv_in, const Tensor& qk_rstd,
                             const Tensor& q_norm_w, const Tensor& k_norm_w, const Tensor& positions,
                             const AttnShape& s, const RopeSpec& rope, float eps) override;
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, const Tensor& segment_ids,
                         const AttnShape& s) override;
  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                          const Tensor& lse, const Tensor& segment_ids, const AttnShape& s) override;
  void attention_decode(const Tensor& out, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int pos,
                        const AttnShape& s) override;
  void swiglu_forward(const Tensor& out, const Tensor& gate_up) override;
  void swiglu_backward(const Tensor& dgate_up, const Tensor& dout, const Tensor& gate_up) override;
  // Timed as one op (category matmul) where the inner backend fuses them, else as swiglu_* and linear_*.
  void swiglu_linear_forward(const Tensor& y, const Tensor& act, const Tensor& gate_up, const Tensor& w) override;
  void swiglu_linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dgate_up, const Tensor& dout,
                              const Tensor& gate_up, const Tensor& x, const Tensor& w) override;
  bool fuses_swiglu_linear() const override { return inner_->fuses_swiglu_linear(); }
  // Timed as one op (category matmul) where the inner backend fuses it, else as the norm and linear_forward.
  void rmsnorm_linear_forward(const Tensor& y, const Tensor& x_norm, const Tensor& rstd, const Tensor& h_out,
                              const Tensor& h_in, const Tensor& x, const Tensor& norm_w, const Tensor& w,
                              const Tensor& bias, float eps, NormOutput keeps) override;
  bool fuses_rmsnorm_linear() const override { return inner_->fuses_rmsnorm_linear(); }
  void lm_head_cross_entropy(const Tensor& losses, const Tensor& dx, const Tensor& dw, const Tensor& x,
                             const Tensor& w, const Tensor& targets, float grad_scale, int ignore_index) override;
  double grad_norm(const Tensor& grads) override;
  void adamw_update(const Tensor& params, const Tensor& master, const Tensor& grads, const Tensor& m,
                    const Tensor& v, const Tensor& m_scale, const Tensor& v_scale,
                    const std::vector<ParamSegment>& segments, const AdamWConfig& c) override;

  int64_t timing_mark() override { return inner_->timing_mark(); }
  double timing_elapsed_ms(int64_t a, int64_t b) override { return inner_->timing_elapsed_ms(a, b); }
  void timing_reset() override { inner_->timing_reset(); }
  // The model marks its recomputation with a "recompute" range; ops inside it are flagged as recompute.
  void range_push(const char* name) override {
    range_is_recompute_.push_back(std::string_view(name) == "recompute");
    inner_->range_push(name);
  }
  void range_pop() override {
    if (!range_is_recompute_.empty()) range_is_recompute_.pop_back();
    inner_->range_pop();
  }
  bool in_recompute() const {
    for (bool r : range_is_recompute_)
      if (r) return true;
    return false;
  }

 private:
  // Runs `op` on the backend between two marks (inside an NVTX range named after it) and records it.
  template <class F>
  auto timed(const char* name, OpCategory category, const OpCost& cost, const Tensor& in, const Tensor& out, F&& op);

  std::unique_ptr<Ops> inner_;
  std::vector<bool> range_is_recompute_;
  std::vector<OpRecord> records_;
};

}  // namespace tk
