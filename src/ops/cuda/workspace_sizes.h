// The sizes of the CUDA backend's workspaces, written once: CudaOps and its building blocks allocate by these
// rules, and the memory planner (src/plan/memory_plan.cpp) counts by them without a GPU. Host-only (no CUDA
// header), so that a build without CUDA compiles the planner too.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

namespace tk::cuda {

// ---- the LM head's logits chunk (cross_entropy.h) --------------------------------------------------
// What the bf16 logits chunk may take by default. Larger chunks mean fewer passes of the f32 dW read-modify-write
// that each chunk's weight-gradient GEMM makes (bench/history/lm-head.md has the numbers).
constexpr size_t kLogitsChunkBudgetBytes = size_t(512) << 20;

// Tokens per chunk: a multiple of 128 rows (so that chunk offsets keep 256-byte alignment for any d), as many as
// fit in budget_bytes of bf16 logits, at least 128, at most N.
inline int64_t lm_head_chunk_rows(int64_t N, int64_t V, size_t budget_bytes = kLogitsChunkBudgetBytes) {
  const int64_t fit = int64_t(budget_bytes / (size_t(V) * 2));
  const int64_t rows = std::max<int64_t>(128, fit / 128 * 128);
  return std::min(rows, N);
}

// ---- cuDNN's attention backward (attention_cudnn.cpp) -----------------------------------------------
// The backward's batch is split into groups whose quadratic dP workspace (B*Hq*T^2 bf16, T padded to 64, what
// cuDNN's deterministic Hopper backward needs) stays under this; each group is one execution of the same plan.
constexpr size_t kAttentionBackwardWorkspaceBudget = size_t(1) << 30;

// The dP workspace of one batch row.
inline int64_t attention_backward_dp_bytes_per_row(int64_t heads, int64_t T) {
  const int64_t t_pad = (T + 63) / 64 * 64;
  return heads * t_pad * t_pad * 2;
}
// The largest divisor of B whose dP workspace fits the budget (at least 1).
inline int64_t attention_backward_batch_group(int64_t B, int64_t heads, int64_t T) {
  const int64_t per_row = attention_backward_dp_bytes_per_row(heads, T);
  int64_t group = 1;
  for (int64_t g = 1; g <= B; g++)
    if (B % g == 0 && g * per_row <= int64_t(kAttentionBackwardWorkspaceBudget)) group = g;
  return group;
}

// ---- staging and cuBLASLt -----------------------------------------------------------------------------
// Host <-> device f32 conversions (upload_f32 / download_f32 of bf16 tensors) go through a staging buffer of at
// most this many floats at a time.
constexpr int64_t kStagingFloats = int64_t(16) << 20;  // 64 MiB
// The staging buffer a conversion of n floats takes.
inline size_t staging_bytes(int64_t n) { return size_t(std::min(n, kStagingFloats)) * sizeof(float); }

// The one workspace every cuBLASLt GEMM shares (the stream orders them, so one is enough).
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

// ---- the transient buffer: the LM head's logits chunk or an op's FP8 operands -------------------------
// One buffer holds the bf16 logits chunk during lm_head_cross_entropy and the FP8 operands (one byte an element)
// during a linear op: never both at once, so it takes the larger size. Its parts are carved in order, each
// rounded up to 256 bytes; a part of 0 elements is not needed.
inline size_t transient_part_bytes(int64_t n) { return size_t(n + 255) / 256 * 256; }
template <size_t K>
size_t transient_bytes(const std::array<int64_t, K>& parts) {
  size_t total = 0;
  for (int64_t n : parts) total += transient_part_bytes(n);
  return total;
}

// The bf16 logits chunk of the LM head (its parts for --fp8-lm-head: fp8_lm_head_parts).
inline size_t logits_chunk_bytes(int64_t rows, int64_t V) { return size_t(rows * V) * 2; }

// A linear's forward: x and w.
inline std::array<int64_t, 2> fp8_forward_parts(int64_t N, int64_t in, int64_t out) { return {N * in, out * in}; }

// The fused forwards that keep x^T in place of their output (swiglu_linear_forward, rmsnorm_linear_forward): x and
// w, and on the first step (no amax history yet) the bf16 output in scratch before its cast.
inline std::array<int64_t, 3> fp8_kept_forward_parts(int64_t N, int64_t in, int64_t out, bool first) {
  return {N * in, out * in, first ? 2 * N * in : 0};
}

// A linear's backward: dy as is and transposed, w^T, x^T (those the GEMMs asked for need).
inline std::array<int64_t, 4> fp8_backward_parts(int64_t N, int64_t in, int64_t out, bool want_dx, bool want_dw) {
  return {want_dx ? N * out : 0, want_dw ? N * out : 0, want_dx ? out * in : 0, want_dw ? N * in : 0};
}

// The FP8 LM head (--fp8-lm-head), a chunk of `rows` tokens: the bf16 logits, the e5m2 dlogits as is and
// transposed, the weight as is and transposed, the chunk's x as is and transposed.
inline std::array<int64_t, 7> fp8_lm_head_parts(int64_t rows, int64_t V, int64_t d, bool want_dx, bool want_dw) {
  const bool grads = want_dx || want_dw;
  return {2 * rows * V, grads ? rows * V : 0, want_dw ? rows * V : 0, V * d, want_dx ? d * V : 0, rows * d,
          want_dw ? d * rows : 0};
}

}  // namespace tk::cuda
