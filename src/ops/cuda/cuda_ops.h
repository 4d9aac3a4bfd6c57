// CudaOps: the CUDA backend of ops.h. bf16 activations and weights, f32 parameter gradients; every op runs
// on one compute stream: the fused kernels of kernels.h, cuBLASLt GEMMs, cuDNN flash attention and the fused
// LM head + cross-entropy. Memory and copy queues live in DeviceMemory, the FP8 linears' state in Fp8Linears.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ops/cuda/fp8_linears.h"
#include "ops/cuda/matmul_cublaslt.h"
#include "ops/ops.h"

namespace tk {

class CudaOps final : public Ops {
 public:
  // Selects `device` and creates the stream, the cuBLASLt handle (and its workspace) and cuDNN.
  explicit CudaOps(int device = 0);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  const char* name() const override { return "cuda"; }
  DType act_dtype() const override { return DType::BF16; }
  DType grad_dtype() const override { return DType::F32; }

  // ---- memory (device_memory.h) ----
  // cudaMalloc (256-byte aligned), recorded under `label` in the memory plan.
  void* allocate(size_t bytes, const char* label = "unlabelled") override;
  void release(void* p) override;
  std::vector<MemoryRow> memory_rows() const override;
  void seal_memory() override;
  // Page-locked (cudaMallocHost), so that upload/download of it run at the full PCIe/NVLink-C2C rate.
  void* allocate_host(size_t bytes, const char* label) override;
  void release_host(void* p) override;
  void zero(const Tensor& t) override;
  void upload_f32(const Tensor& dst, const float* src) override;
  void convert(const Tensor& dst, const Tensor& src) override;
  void download_f32(float* dst, const Tensor& src) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  void copy_async(void* dst, const void* src, size_t bytes, Queue q) override;
  int record_event(Queue q) override;
  void wait_event(Queue waiter, int event) override;

  cudaStream_t stream() const;
  // The stream of a queue (the compute stream, or a copy queue's, created on its first use).
  cudaStream_t stream(Queue q);
  int device() const;
  // The budget of lm_head_cross_entropy's bf16 logits chunk (default kLogitsChunkBudgetBytes, 512 MiB:
  // workspace_sizes.h); takes effect at the next call.
  void set_logits_chunk_budget(size_t bytes);
  // GEMM algorithms chosen by timing, kept in `cache_path` (cuda::Matmul::enable_tuning); before the first
  // GEMM. A line on what it did so far ("" when off).
  void enable_gemm_tuning(const std::string& cache_path);
  std::string gemm_tuning_summary() const;
  cuda::Matmul::TuningStats gemm_tuning_stats() const;

  // ---- FP8 (fp8_linears.h) ----
  // FP8 GEMMs for linear_forward / linear_backward (sm_89 and newer): each operand cast to e4m3 (x, w) or e5m2
  // (dy) with a per-tensor scale q = fmax / amax, accumulated in f32 by cuBLASLt. A GEMM with a dimension that is
  // not a multiple of 16 stays bf16 (fp8_shapes.h). The LM head (unless set_fp8_lm_head) and attention stay bf16.
  // Throws when the GPU has no FP8 tensor cores. Scaling: current (this class's default; the command line's is
  // delayed) or delayed (cuda::Fp8Scaling); with delayed scaling SwiGLU's gradient is cast as it is computed
  // (swiglu_linear_backward), never written in bf16.
  using Fp8Scaling = cuda::Fp8Scaling;
  static constexpr int kFp8HistoryLen = cuda::kFp8HistoryLen;
  // margin: delayed scaling scales by the history's amax times 2^margin, so that an amax growing by less than that
  // past its history does not saturate a cast (and make its guard cast it again).
  void set_fp8(bool on, Fp8Scaling scaling = Fp8Scaling::Current, int margin = 0);
  // The casts delayed scaling's guards have done again (they saturated) over the steps committed so far; waits for
  // the device.
  int64_t fp8_recasts() const;
  // With delayed scaling, swiglu_linear_forward / swiglu_linear_backward cast SwiGLU's output / gradient to FP8
  // as they compute it, and rmsnorm_linear_forward the norm's output; the forwards keep the transposed bytes the
  // linear's weight gradient takes in their output's memory (on by default; off runs the ops apart, to the same
  // bytes: the tests compare the two).
  void set_fp8_fusion(bool on);
  // With FP8 on, the LM head's three GEMMs in FP8 as well (lm_head_cross_entropy; off by default): x and the head's
  // weight in e4m3 with their slots' scales, the dlogits in e5m2 scaled by their bound grad_scale (every |dlogit| is
  // at most that), the logits still bf16 and the softmax f32. Shapes whose N, d or V is not a multiple of 16 stay
  // bf16.
  void set_fp8_lm_head(bool on);
  int64_t fp8_fused_casts() const;  // swiglu_linear_* and rmsnorm_linear_forward calls that took the fused cast
  void name_weights(const std::vector<NamedWeight>& weights) override;
  void alias_weights(const void* data, size_t bytes, const void* as) override;
  void end_step() override;
  Fp8ScalingState fp8_scaling_state() const override;
  void set_fp8_scaling_state(const Fp8ScalingState& state) override;
  std::vector<float> fp8_amax_seen() override;
  void set_fp8_amax_seen(const std::vector<float>& amax) override;

  // ---- ops ----
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
  void swiglu_linear_forward(const Tensor& y, const Tensor& act, const Tensor& gate_up, const Tensor& w) override;
  void rmsnorm_linear_forward(const Tensor& y, const Tensor& x_norm, const Tensor& rstd, const Tensor& h_out,
                              const Tensor& h_in, const Tensor& x, const Tensor& norm_w, const Tensor& w,
                              const Tensor& bias, float eps, NormOutput keeps) override;
  bool fuses_rmsnorm_linear() const override;
  bool fuses_swiglu_linear() const override;
  void swiglu_linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dgate_up, const Tensor& dout,
                              const Tensor& gate_up, const Tensor& x, const Tensor& w) override;
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
  void lm_head_cross_entropy(const Tensor& losses, const Tensor& dx, const Tensor& dw, const Tensor& x,
                             const Tensor& w, const Tensor& targets, float grad_scale, int ignore_index) override;
  double grad_norm(const Tensor& grads) override;
  void adamw_update(const Tensor& params, const Tensor& master, const Tensor& grads, const Tensor& m,
                    const Tensor& v, const Tensor& m_scale, const Tensor& v_scale,
                    const std::vector<ParamSegment>& segments, const AdamWConfig& c) override;

  // ---- timing (cuda_timing.cpp): events on the compute stream, NVTX ranges ----
  int64_t timing_mark() override;
  double timing_elapsed_ms(int64_t a, int64_t b) override;
  void timing_reset() override;
  void range_push(const char* name) override;
  void range_pop() override;

 private:
  // x of a linear's backward: bf16, or the one-byte x^T a fused forward kept for it (ModelOptions::fp8_kept_inputs).
  void expect_linear_input(const Tensor& x, int64_t N, int64_t in, const char* op) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
  struct TimingEvents;                    // the event pool, made by the first mark
  std::shared_ptr<TimingEvents> timing_;  // shared_ptr: destroyed where its type is complete
};

std::unique_ptr<Ops> make_cuda_ops(int device = 0);

}  // namespace tk
