// Launch functions of the fused memory-bound CUDA kernels (bf16 activations and weights, fp32 accumulation).
// CudaOps (cuda_ops.cpp) calls these for the ops of ops.h; the semantics are exactly those of ops.h.
// Raw device pointers, sizes and a stream; every launch is checked; nothing here allocates or synchronises
// except grad_norm_host. Kernels that reduce across rows take a scratch buffer whose size a
// *_scratch_bytes function gives, so that CudaOps allocates it once, at start.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/moment_codec.h"

namespace tk::cuda {

using bf16 = __nv_bfloat16;

// ---- conversions --------------------------------------------------------------------------------
// dst[i] = src[i] rounded to nearest even (NaN stays NaN); and the exact widening back.
void f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t s);
void bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t s);
// p[i] = a hash of (i, seed) as a bf16 in [-1, 1): operands for timing, not for training.
void fill_uniform_bf16(bf16* p, int64_t n, uint64_t seed, cudaStream_t s);

// ---- FP8 operands (fp8.cu) ------------------------------------------------------------------------
// Per-tensor current scaling for the FP8 GEMMs: x8 = saturate(x * q), q = fmax / amax (fmax = 448 for
// e4m3, 57344 for e5m2; q = 1 when amax is 0 or not finite), and the GEMM multiplies back by dequant = 1/q.
enum class Fp8Format { E4M3, E5M2 };
// *amax = max |x[i]| over n elements (exact: a max does not depend on the order of the atomics).
void amax_bf16(float* amax, const bf16* x, int64_t n, cudaStream_t s);
// x[rows, cols] (cols a multiple of 8, x 16-byte aligned) cast with the scale from *amax: x8[rows, cols]
// and/or its transpose xt8[cols, rows] (either may be null); *dequant = 1/q (may be null). With amax_seen,
// *amax_seen = max(*amax_seen, max |x[i]|) as well (what delayed scaling records for the next step's scale:
// the cast reads x anyway, so this costs no pass of its own).
void quantize_fp8(uint8_t* x8, uint8_t* xt8, float* dequant, const bf16* x, int64_t rows, int64_t cols,
                  const float* amax, Fp8Format format, cudaStream_t s, float* amax_seen = nullptr);
// Delayed scaling's guard, after quantize_fp8 of the same x with scale amax and amax_seen = seen: nothing
// unless *seen > *amax (the cast saturated); then x is cast again with *seen into x8 / xt8 (and *dequant), and
// *amax = *seen, so that later casts of the operand in the step scale alike. counter: a zeroed unsigned the
// kernel leaves zeroed, followed by an unsigned it adds 1 to for each recast (a slot's [2] and [3]).
void fp8_guard(uint8_t* x8, uint8_t* xt8, float* dequant, const bf16* x, int64_t rows, int64_t cols, float* amax,
               const float* seen, unsigned int* counter, Fp8Format format, cudaStream_t s);
// The guards of up to kFp8MaxGuarded casts (each as fp8_guard) in one launch.
struct Fp8GuardOperand {
  uint8_t *x8, *xt8;
  float* dequant;
  const bf16* x;
  int64_t rows, cols;
  float* amax;
  const float* seen;
  unsigned int* counter;
  Fp8Format format;
  // When given, the values are SwiGLU's forward of gate_up [rows, 2 cols] (x unused): swiglu_forward_fp8's guard.
  const bf16* gate_up = nullptr;
  // When given, the values are RMSNorm's output x * rstd * norm_w (x the norm's input): rmsnorm_cast_fp8's guard.
  const float* rstd = nullptr;
  const bf16* norm_w = nullptr;
};
constexpr int kFp8MaxGuarded = 4;
void fp8_guard_all(const Fp8GuardOperand* ops, int n, cudaStream_t s);
// SwiGLU's forward cast to FP8 as it is computed, with the scale from *amax, recording *amax_seen: x8[N, f] as is
// and/or xt8[f, N] transposed, the bytes quantize_fp8 gives for swiglu_forward's output; that output is written
// in bf16 into out[N, f] only when out is given. No guard: fp8_guard_all with the operand's gate_up after it.
// f a multiple of 8.
void swiglu_forward_fp8(bf16* out, uint8_t* x8, uint8_t* xt8, float* dequant, const bf16* gate_up, int64_t N, int f,
                        const float* amax, float* amax_seen, Fp8Format format, cudaStream_t s);
// RMSNorm's output y = h * rstd * w (as rmsnorm_forward / residual_rmsnorm_forward compute it from their rounded
// input h [N, d] and write rstd) cast to FP8 without being written in bf16: x8[N, d] as is and/or xt8[d, N]
// transposed, with the scale from *amax, recording *amax_seen. No guard: fp8_guard_all with the operand's rstd and
// norm_w after it. d a multiple of 8.
void rmsnorm_cast_fp8(uint8_t* x8, uint8_t* xt8, float* dequant, const bf16* h, const float* rstd, const bf16* w,
                      int64_t N, int d, const float* amax, float* amax_seen, Fp8Format format, cudaStream_t s);
// SwiGLU's backward (swiglu_backward's dgate_up[N, 2f], each value rounded to bf16 as it stores them) cast
// straight to FP8 with delayed scaling, never written in bf16: dy8[N, 2f] and/or dyt8[2f, N], with the scale from
// *amax, recording *amax_seen, then the guard (as fp8_guard: a cast that saturated is done again with the seen
// amax). The bytes are those of swiglu_backward followed by quantize_fp8 and fp8_guard. f a multiple of 8.
void swiglu_backward_fp8(uint8_t* dy8, uint8_t* dyt8, float* dequant, const bf16* dout, const bf16* gate_up,
                         int64_t N, int f, float* amax, float* amax_seen, unsigned int* counter, Fp8Format format,
                         cudaStream_t s);
// Delayed scaling's step end, over n slots of kFp8SlotFloats floats (slot[0]: the amax the casts scale by,
// slot[1]: the largest |x| the casts saw this step) and their histories (history_len floats each): the seen
// amax goes into history entry `position`, slot[0] becomes the history's max, slot[1] goes back to 0.
// slot[0] is the history's max times `margin` (a power of two, 1 for none), so that an amax that grows by less
// than the margin past its history does not saturate the next step's casts. The guards' recasts of the step,
// counted in each slot's slot[3] (an unsigned), are added into *recasts and set back to 0.
constexpr int kFp8SlotFloats = 8;  // 32 bytes: slot[2] the guard's counter, slot[3] its recasts; slot[4] is the dequant scale, 16-byte aligned as cuBLASLt wants
void fp8_commit_amax(float* slots, float* history, int n, int history_len, int position, float margin,
                     unsigned long long* recasts, cudaStream_t s);

// ---- attention backward of our own (attention_bwd_sm90.cu) ----------------------------------------
// Causal GQA attention backward for head_dim 64 on Hopper (warpgroup MMA), deterministic, without cuDNN's dP
// workspace: dqkv bf16[B,T,Hq+2Hkv,64] (=) from dout bf16[B,T,Hq,64] and the forward's qkv, out and lse f32[B,Hq,T]
// (natural log of the scaled scores). supported: built with sm_90a code, a 9.0 device, not turned off
// (TOKAMAK_ATTENTION_BACKWARD=cudnn), head_dim 64, T % 128 == 0, and ceil(T / 256) <= the SM count (the CTAs of a
// (batch row, kv head) must be resident together). _sms: the device's SM count where it can run at all, else 0.
int attention_backward_fused_sms();
bool attention_backward_fused_supported(int T, int head_dim);
size_t attention_backward_fused_scratch_bytes(int B, int T, int Hq);
void attention_backward_fused(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                              int B, int T, int Hq, int Hkv, int head_dim, void* scratch, size_t scratch_bytes,
                              cudaStream_t s);

// ---- embedding (embedding.cu) ---------------------------------------------------------------------
// out[N,d] = table[tokens[n], :]; tokens i32[N] with 0 <= id < V (the caller validates ids).
void embedding_forward(bf16* out, const int32_t* tokens, const bf16* table, int64_t N, int d, cudaStream_t s);
// dtable[V,d] (f32) += sum over n with tokens[n] == v of dout[n,:], summed in token order: the ids are
// stably sorted (sort_token_ids), each run of equal ids is summed in tiles and the tiles' pieces are joined in
// tile order. Deterministic, no floating-point atomics; ids outside [0, V) are skipped.
// scratch: embedding_backward_scratch_bytes(N, V, d) bytes.
size_t embedding_backward_scratch_bytes(int64_t N, int64_t V, int d);
void embedding_backward(float* dtable, const int32_t* tokens, const bf16* dout, int64_t N, int64_t V, int d,
                        void* scratch, size_t scratch_bytes, cudaStream_t s);
// The stable sort of the backward, one launch: keys[i] the i-th smallest id in [0, V), rows[i] its token
// index, equal ids in token order; the positions past the valid ids hold keys kNoKey (~0u) and rows 0.
void sort_token_ids(uint32_t* keys, int32_t* rows, const int32_t* tokens, int64_t N, int64_t V, cudaStream_t s);

// ---- RMSNorm (rmsnorm.cu) -------------------------------------------------------------------------
// y[N,d] = x * rstd * w, rstd f32[N] = 1/sqrt(mean(x^2) + eps). y may be null (rstd, and h_out below, only) when
// d % 8 == 0, d <= 4096 and the tensors are 16-byte aligned: rmsnorm_cast_fp8 then makes the output.
void rmsnorm_forward(bf16* y, float* rstd, const bf16* x, const bf16* w, int64_t N, int d, float eps,
                     cudaStream_t s);
// h_out = h_in + x (rounded to bf16), then y = rmsnorm(h_out) * w computed from the ROUNDED h_out, so that
// the backward (which reads h_out) sees the h the forward normalised. h_out may alias h_in.
void residual_rmsnorm_forward(bf16* h_out, bf16* y, float* rstd, const bf16* h_in, const bf16* x, const bf16* w,
                              int64_t N, int d, float eps, cudaStream_t s);
// dh[N,d] = (dy/dh)^T dy + dresidual (=; dresidual may be null, may alias dh);
// dw[d] (f32) += sum_n dy*h*rstd (dw may be null: no weight gradient). Deterministic: per-block partial
// sums into scratch [blocks, d] f32, then a fixed-order reduction. scratch: rmsnorm_backward_scratch_bytes.
size_t rmsnorm_backward_scratch_bytes(int64_t N, int d);
void rmsnorm_backward(bf16* dh, float* dw, const bf16* dy, const bf16* dresidual, const bf16* h, const float* rstd,
                      const bf16* w, int64_t N, int d, void* scratch, size_t scratch_bytes, cudaStream_t s);

// ---- q/k RMSNorm + RoPE (qk_norm_rope.cu) ---------------------------------------------------------
// Layout qkv[N, (Hq + 2*Hkv) * hd]: per token Hq query heads, Hkv key heads, Hkv value heads.
// hd even, <= 256. positions i32[N].
struct QkvShape {
  int n_heads = 0;     // Hq
  int n_kv_heads = 0;  // Hkv
  int head_dim = 0;    // hd
};
// The RoPE table, one device buffer: the hd/2 frequencies (ops.h RopeSpec::inv_freq, double), then the angles
// cos/sin(p * inv_freq[i]) for p < max_pos, i < hd/2, computed in double and rounded to f32, stored as float2
// {cos, sin} [max_pos, hd/2]. Fill once at start; the kernels read the angles for positions below max_pos and
// compute the same values themselves, from the frequencies, for any position past it (max_pos 0: always compute,
// slower).
struct RopeTable {
  const double* inv_freq = nullptr;  // [hd/2]
  const float2* angles = nullptr;    // [max_pos, hd/2]
  int max_pos = 0;
};
size_t rope_table_bytes(int max_pos, int head_dim);
// Copies inv_freq (host memory, hd/2 values) into `buffer` (rope_table_bytes, 256-byte aligned) and computes the
// angles, on stream s; returns the table's views of the buffer.
RopeTable rope_table_fill(void* buffer, int max_pos, int head_dim, const double* inv_freq, cudaStream_t s);
// Forward of ops.h qk_norm_rope_forward. q_norm_w/k_norm_w bf16[hd] both given (Qwen3) or both null;
// with norms qk_rstd f32[N, Hq+Hkv] is written (q heads then k heads), else it may be null.
// qkv_out may alias qkv_in (value heads are then left in place rather than copied).
void qk_norm_rope_forward(bf16* qkv_out, float* qk_rstd, const bf16* qkv_in, const bf16* q_norm_w,
                          const bf16* k_norm_w, const int32_t* positions, const RopeTable& rope, int64_t N,
                          QkvShape shape, float eps, cudaStream_t s);
// Backward: dqkv_in (=) from dqkv_out (may alias). With norms: qkv_in and qk_rstd from the forward are read
// and dq_norm_w/dk_norm_w f32[hd] (+=, either may be null) get sum over tokens and heads, deterministic
// through scratch [blocks, 2, hd] f32 (qk_norm_rope_backward_scratch_bytes; 0 without norms).
size_t qk_norm_rope_backward_scratch_bytes(int64_t N, QkvShape shape);
void qk_norm_rope_backward(bf16* dqkv_in, float* dq_norm_w, float* dk_norm_w, const bf16* dqkv_out,
                           const bf16* qkv_in, const float* qk_rstd, const bf16* q_norm_w, const bf16* k_norm_w,
                           const int32_t* positions, const RopeTable& rope, int64_t N, QkvShape shape,
                           void* scratch, size_t scratch_bytes, cudaStream_t s);

// ---- SwiGLU (swiglu.cu) ---------------------------------------------------------------------------
// gate_up[N, 2f]: gate columns [0,f), up columns [f,2f). out[N,f] = silu(g) * u.
void swiglu_forward(bf16* out, const bf16* gate_up, int64_t N, int f, cudaStream_t s);
// dgate_up[N,2f] (=) from dout[N,f] and the forward's gate_up (dgate_up may alias gate_up).
void swiglu_backward(bf16* dgate_up, const bf16* dout, const bf16* gate_up, int64_t N, int f, cudaStream_t s);

// ---- gradient norm and AdamW (adamw.cu) ---------------------------------------------------------------
// norm[0] = sqrt(sum g^2) over g f32[n]: fixed-size per-block partials, then one block sums them in
// double in a fixed order. Asynchronous; the result stays on the device. The scratch size includes a
// slot for grad_norm_host's result.
size_t grad_norm_scratch_bytes(int64_t n);
void grad_norm(float* norm, const float* g, int64_t n, void* scratch, size_t scratch_bytes, cudaStream_t s);
// The same, then synchronises the stream and returns the norm to the host (the device result goes to
// the scratch's last slot).
double grad_norm_host(const float* g, int64_t n, void* scratch, size_t scratch_bytes, cudaStream_t s);

// One contiguous run of the flat parameter buffer; first_block is filled by adamw_plan.
struct AdamWSegment {
  int64_t offset = 0;   // elements
  int64_t count = 0;
  int32_t decay = 1;    // weight decay applies
  int32_t first_block = 0;
};
// Host side, once per segment list: fills first_block of each segment and returns the number of blocks
// adamw_update launches. Upload the table (n_segments entries) to device memory afterwards.
int adamw_plan(AdamWSegment* segments, int n_segments);
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay;
  float grad_scale;          // multiplies every gradient first
  float bias_correction1;    // 1 - beta1^step, computed on the host (in double)
  float bias_correction2;    // 1 - beta2^step
  int64_t step = 1;          // the step and the flat index of element 0: the rounding noise of narrow moments
  int64_t first_index = 0;
};
// AdamW's moments in one of ops.h's three forms (moment_codec.h): f32; bf16; or int8 (m i8 and v u8 codes,
// with f32 block scales [ceil(P / kMomentBlock)] and the code book in device memory).
enum class MomentForm { F32, BF16, Int8 };
struct AdamWMoments {
  MomentForm form = MomentForm::F32;
  void* m = nullptr;
  void* v = nullptr;
  float* m_scale = nullptr;  // int8 only
  float* v_scale = nullptr;
  const MomentCodeBook* book = nullptr;
};
// ops.h adamw_update in one launch over all segments of a buffer of P elements. With master (f32[P]) the
// update runs on master and params (bf16[P]) receive it rounded; with master null it runs on params (read
// as f32, written rounded). grads f32[P] are only read. segments: the device copy of the table adamw_plan
// filled; n_blocks its result (f32 and bf16 moments; int8 moments launch one warp per block of kMomentBlock).
void adamw_update(bf16* params, float* master, const float* grads, const AdamWMoments& moments, int64_t P,
                  const AdamWSegment* segments, int n_segments, int n_blocks, const AdamWStep& step,
                  cudaStream_t s);

}  // namespace tk::cuda
