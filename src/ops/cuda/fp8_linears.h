// Fp8Linears: the FP8 linears of the CUDA backend (CudaOps::set_fp8). Each operand (x, w and dy of the linear with
// a given weight) has a scale slot on the device; with delayed scaling each also has an amax history, committed at
// every step's end, and a guard that casts again a cast that saturated. The fused forwards keep, in place of an
// activation, the x^T its linear's weight gradient takes. CudaOps checks each op's tensors and hands the FP8 work
// here; the state across steps is saved and restored by weight name (Ops::name_weights, fp8_scaling_state).
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/cuda/device_alloc.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/matmul_cublaslt.h"
#include "ops/ops.h"

namespace tk::cuda {

// Where the casts take their amax from:
//  - current: the tensor's own, from a pass of its own before each cast;
//  - delayed: the largest amax the same operand had over the last kFp8HistoryLen committed steps (end_step),
//    recorded by the casts themselves; an operand with no committed step yet takes its own, as current scaling
//    does. A cast whose tensor exceeds the scale is done again with the tensor's own amax (the guard), which then
//    scales the step's later casts of that operand: nothing saturates, and a recomputed forward casts to the
//    same bytes.
enum class Fp8Scaling { Current, Delayed };
constexpr int kFp8HistoryLen = 16;

// The FP8 path's conditions on a linear of N tokens, in -> out: the GEMM's shapes (fp8_shapes.h) and 16-byte
// aligned operands (empty ones aside).
bool fp8_shape(int64_t N, int64_t in, int64_t out, std::initializer_list<const Tensor*> operands);

class Fp8Linears {
 public:
  // The operands are carved from `transient`, the buffer the LM head's logits chunk also lives in
  // (workspace_sizes.h), allocated under `transient_label`; the scales through `alloc` on first enable().
  Fp8Linears(int device, cudaStream_t stream, const DeviceAlloc& alloc, Matmul& matmul, GrowingBuffer& transient,
             const char* transient_label);
  Fp8Linears(const Fp8Linears&) = delete;
  Fp8Linears& operator=(const Fp8Linears&) = delete;

  // ---- settings (CudaOps::set_fp8, set_fp8_fusion, set_fp8_lm_head) ----
  // margin: delayed scaling scales by the history's amax times 2^margin. Throws when on and the GPU has no FP8
  // tensor cores.
  void enable(bool on, Fp8Scaling scaling, int margin);
  bool on() const { return on_; }
  void set_fusion(bool on) { fusion_ = on; }
  void set_lm_head(bool on) { lm_head_ = on; }
  bool lm_head() const { return on_ && lm_head_; }
  // Delayed scaling with fusion on: the casts fused into SwiGLU and the norm (swiglu_linear_*, rmsnorm_linear_forward).
  bool fuses() const { return on_ && fusion_ && scaling_ == Fp8Scaling::Delayed; }
  // Whether operand `role` (0: x, 1: w, 2: dy) of the linear with weight w has a committed amax.
  bool primed(const void* w, int role) const;
  int64_t recasts() const;  // the guards' recasts over the committed steps; waits for the device
  int64_t fused_casts() const { return fused_casts_; }

  // ---- the state across steps ----
  void name_weights(const std::vector<Ops::NamedWeight>& weights);
  // Ops::alias_weights: the weights in [data, data + bytes) are, from now on, the ones at [as, as + bytes).
  void alias(const void* data, size_t bytes, const void* as);
  void end_step();
  Ops::Fp8ScalingState state() const;
  void restore(const Ops::Fp8ScalingState& state);
  // Slot [1] of every slot in use (Ops::fp8_amax_seen), and back.
  std::vector<float> amax_seen() const;
  void set_amax_seen(const std::vector<float>& amax);

  // ---- activations that hold a kept x^T instead of their values ----
  bool keeps(const void* activation) const { return kept_xt_.count(activation) != 0; }
  void drop(const void* activation) { kept_xt_.erase(activation); }  // written with values again
  void drop_within(const void* begin, size_t bytes);                  // memory released

  // ---- the FP8 paths of the ops (ops.h), their tensors checked by CudaOps ----
  void linear_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, int64_t N, int64_t in,
                      int64_t out);
  void linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                       int64_t N, int64_t in, int64_t out);
  // fused: the cast in SwiGLU's kernel (a primed operand); else SwiGLU's output in scratch, then its amax and cast.
  void swiglu_linear_forward(const Tensor& y, const Tensor& act, const Tensor& gate_up, const Tensor& w, int64_t N,
                             int64_t f, bool fused);
  // fused: the cast from the norm's input and rstd (a primed operand); else the norm's output in scratch first.
  void rmsnorm_linear_forward(const Tensor& y, const Tensor& x_norm, const Tensor& rstd, const Tensor& h_out,
                              const Tensor& h_in, const Tensor& x, const Tensor& norm_w, const Tensor& w,
                              const Tensor& bias, float eps, int64_t N, int64_t d, bool fused);
  void swiglu_linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dout, const Tensor& gate_up,
                              const Tensor& x, const Tensor& w, int64_t N, int64_t f);
  // Chunks of `rows` tokens (lm_head_chunk_rows).
  void lm_head_cross_entropy(const Tensor& losses, const Tensor& dx, const Tensor& dw, const Tensor& x,
                             const Tensor& w, const Tensor& targets, float grad_scale, int ignore_index, int64_t N,
                             int64_t d, int64_t V, int64_t rows);

 private:
  // The weight a linear's w points at, by which its slots and name are kept: w itself, or where an alias says.
  const void* identity(const void* w) const;
  float* slot(const void* w, int role, const bf16* x, int64_t n);
  float* slot_as_kept(const void* w, int role);
  void cast(uint8_t* x8, uint8_t* xt8, float* slot, const bf16* x, int64_t rows, int64_t cols, Fp8Format f);
  void flush_guards();
  template <size_t K>
  std::array<uint8_t*, K> space(const std::array<int64_t, K>& sizes);
  void backward_gemms(const Tensor& dx, const Tensor& dw, uint8_t* dy8, uint8_t* dyt8, float* sdy, uint8_t* wt8,
                      uint8_t* xt8, const Tensor& x, const Tensor& w, int64_t N, int64_t in, int64_t out);

  // Each slot is kFp8SlotFloats floats: [0] the amax its casts scale by, [1] the amax they saw this step (delayed
  // scaling), [4] the dequant scale (cuBLASLt takes only 16-byte aligned scale pointers: a 4-byte aligned one
  // makes the GEMM "not supported"); each has a history of kFp8HistoryLen amax values.
  static constexpr int kMaxSlots = 3 * 4096;  // 4,096 linear layers

  int device_;
  cudaStream_t stream_;
  DeviceAlloc alloc_;
  Matmul& matmul_;
  GrowingBuffer& transient_;
  const char* transient_label_;

  bool on_ = false, fusion_ = true, lm_head_ = false;
  Fp8Scaling scaling_ = Fp8Scaling::Current;
  float margin_ = 1.f;  // 2^margin
  float* slots_ = nullptr;
  float* history_ = nullptr;
  float* dlogits_slot_ = nullptr;         // the LM head's dlogits: [4] their dequant scale (16-byte aligned)
  unsigned long long* recasts_ = nullptr;  // on the device, after the slots: the recasts of committed steps
  int64_t fused_casts_ = 0;
  std::unordered_map<const void*, int> first_slot_;  // weight -> its x slot (w and dy follow)
  std::vector<uint8_t> primed_, used_;               // per slot: a committed step has an amax / used now
  int64_t steps_ = 0;                                // steps committed
  std::vector<Fp8GuardOperand> guards_;              // casts whose guard has not been launched yet
  // Activations whose memory holds, instead of their bf16 values, the e4m3 transpose that their linear's weight
  // gradient takes (x -> the linear's weight): the fused SwiGLU and norm forwards write the down, gate/up and qkv
  // projections' x^T there, since the backward needs x only for that GEMM. Consumed by the linear_backward of that
  // weight; any other write of the activation (swiglu_forward, the norms: recomputes) drops it.
  std::unordered_map<const void*, const void*> kept_xt_;
  struct Alias {
    const char* data;
    size_t bytes;
    const char* as;
  };
  std::vector<Alias> aliases_;  // Ops::alias_weights: a few shared gathering buffers
  std::unordered_map<const void*, std::string> name_of_;  // Ops::name_weights
  std::map<std::string, const void*> weight_named_;
};

}  // namespace tk::cuda
