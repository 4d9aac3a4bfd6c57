// The Llama-family block written once against ops.h: RMSNorm, the fused q/k/v projection, q/k norms and RoPE,
// causal GQA attention, the output projection and residual add, RMSNorm, SwiGLU and the down projection. Its forward
// runs whole in training, in part before the backward (what the recompute policy did not keep) and with a KV cache in
// generation; its backward is written once too. What differs between architectures is data: a bias or q/k norm weight
// that the model does not have is an empty tensor, and the op skips its term.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "model/config.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace tk {

// One block's activations, each a buffer of at least the step's tokens N = B*T times its width (viewed with the
// step's shape). In training each layer keeps its own (or, where the policy recomputes it, one shared by all layers);
// in generation one set of work buffers serves every layer.
struct BlockActivations {
  Tensor h;          // [N, d] residual stream entering the block: the attention norm's input
  Tensor x_attn;     // [N, d] attention norm output: the qkv projection's input
  Tensor rstd_attn;  // [N]
  Tensor qkv_pre;    // [N, qkv] projection before q/k norms and RoPE, kept for their backward (empty: in place in qkv)
  Tensor qkv;        // [N, qkv] after q/k norm and RoPE: attention's input
  Tensor qk_rstd;    // [N, Hq + Hkv] (with q/k norms)
  Tensor att;        // [N, q] attention output
  Tensor lse;        // [B, Hq, T]
  Tensor h_mid;      // [N, d] residual stream after the attention block: the MLP norm's input (may be h itself)
  Tensor x_mlp;      // [N, d] MLP norm output
  Tensor rstd_mlp;   // [N]
  Tensor gate_up;    // [N, 2f]
  Tensor act;        // [N, f] SwiGLU output: the down projection's input
};

// Which of a layer's activations the backward recomputes instead of keeping (from ModelOptions::recompute).
struct Recomputed {
  bool x_attn, rstd_attn, qkv, att, h_mid, x_mlp, rstd_mlp, gate_up, act;
};

// What one run of the block shares with the other layers: the step's shape, the tokens' positions and document
// segments, the branch buffer and, in generation, the layer's KV cache.
struct BlockStep {
  int B = 0, T = 0;
  int64_t N = 0;
  AttnShape attn;
  Tensor positions;  // i32 [N]
  Tensor segments;   // i32 [B, T], or empty: attention over whole rows
  // [N, d]: on entry the previous block's output (when its residual add is pending), then o_proj's output, and on
  // exit down_proj's: the block's output, which the next norm adds to the residual stream.
  Tensor branch;
  // Generation: the layer's caches [max_len, Hkv, hd], which the block's tokens join at rows [cache_pos, cache_pos + T)
  // and attention reads (attention_decode, B = 1). Empty: attention over the step's own tokens (attention_forward).
  Tensor k_cache, v_cache;
  int cache_pos = 0;
};

// The parts of the block's forward that a run computes, in the forward's order; each reads what the earlier ones
// wrote or what the layer kept.
struct BlockPass {
  bool attn_norm = true;  // x_attn, rstd_attn (and h = h_prev + branch first, when h_prev is given)
  bool qkv = true;        // qkv_pre = x_attn W_qkv + b, then q/k norms and RoPE into qkv
  bool attention = true;  // att, lse
  bool o_proj = true;     // branch = att W_o + b, then h_mid = h + branch with the MLP norm (mlp_norm goes with it)
  bool mlp_norm = true;   // x_mlp, rstd_mlp (from the kept h_mid when o_proj does not run)
  bool gate_up = true;    // gate_up = x_mlp W_gate_up
  bool swiglu = true;     // act
  bool down = true;       // branch = act W_down
  // What the norms' outputs hold for later readers (Ops::rmsnorm_linear_forward).
  Ops::NormOutput x_attn_keeps = Ops::NormOutput::values, x_mlp_keeps = Ops::NormOutput::values;

  // The whole forward of training: a norm's output keeps only what its linear's backward reads, unless the backward
  // recomputes that linear from it.
  static BlockPass training(const Recomputed& rc);
  // Before a layer's backward: what its policy did not keep, by the forward's own ops in the forward's order, so it
  // comes out bitwise as the forward made it.
  static BlockPass recompute(const Recomputed& rc);
  // The whole forward of generation, every output kept as values.
  static BlockPass generation();
};

// Runs `pass` of layer weights `w` over activations `a`. h_prev: the previous block's h_mid when this block adds the
// previous output (step.branch) to it to make h; empty when h is given (the embedding's output, or kept).
void block_forward(Ops& ops, const ModelConfig& cfg, const LayerWeights& w, const BlockActivations& a,
                   const Tensor& h_prev, const BlockStep& step, const BlockPass& pass);

// The backward's gradient scratch, shared by every layer: buffers of at least N times their width.
struct BlockGradScratch {
  Tensor dx;                          // [N, d] gradient of a norm's output
  Tensor dact, dgate_up, datt, dqkv;  // [N, f], [N, 2f], [N, q], [N, qkv]
};

// The backward of one block over the activations its forward made (all present: recompute first). On entry dh is
// dL/d(the block's output residual stream), on exit dL/dh; parameter gradients accumulate (+=) into `g`.
void block_backward(Ops& ops, const ModelConfig& cfg, const LayerWeights& w, const LayerWeights& g,
                    const BlockActivations& a, const BlockStep& step, const Tensor& dh, const BlockGradScratch& s);

}  // namespace tk
