// The block's forward (whole, in part for the recompute, or with a KV cache) and its backward, over buffers that the
// model or the generator planned once; every tensor here is a view of one of them shaped for the step.
#include "model/block.h"

#include "model/buffer_carver.h"

namespace tk {
namespace {

// x_norm = rmsnorm(x) (with h_in: h_out = h_in + x first, and the norm of h_out), then y = x_norm W + b; as one op when
// both run, so that a backend may fuse them where `keeps` allows.
void norm_then_linear(Ops& ops, bool norm, bool linear, Ops::NormOutput keeps, const Tensor& y, const Tensor& x_norm,
                      const Tensor& rstd, const Tensor& h_out, const Tensor& h_in, const Tensor& x,
                      const Tensor& norm_w, const Tensor& w, const Tensor& bias, float eps) {
  if (norm && linear) {
    ops.rmsnorm_linear_forward(y, x_norm, rstd, h_out, h_in, x, norm_w, w, bias, eps, keeps);
  } else if (norm && h_in.empty()) {
    ops.rmsnorm_forward(x_norm, rstd, x, norm_w, eps);
  } else if (norm) {
    ops.residual_rmsnorm_forward(h_out, x_norm, rstd, h_in, x, norm_w, eps);
  } else if (linear) {
    ops.linear_forward(y, x_norm, w, bias);
  }
}

}  // namespace

BlockPass BlockPass::training(const Recomputed& rc) {
  BlockPass p;
  p.x_attn_keeps = rc.qkv && !rc.x_attn ? Ops::NormOutput::values : Ops::NormOutput::linear_backward_only;
  p.x_mlp_keeps = rc.gate_up && !rc.x_mlp ? Ops::NormOutput::values : Ops::NormOutput::linear_backward_only;
  return p;
}

BlockPass BlockPass::recompute(const Recomputed& rc) {
  BlockPass p;
  p.attn_norm = rc.x_attn;
  p.qkv = rc.qkv;
  p.attention = rc.att;
  p.o_proj = rc.h_mid;
  p.mlp_norm = rc.x_mlp;
  p.gate_up = rc.gate_up;
  p.swiglu = rc.act;
  p.down = false;  // the block's output is not an activation its backward reads
  return p;
}

BlockPass BlockPass::generation() { return BlockPass(); }

// x = norm(h) (fused with the previous block's residual add); qkv = x W_qkv + b; q/k norm + RoPE; attention;
// h_mid = h + att W_o + b; x = norm(h_mid); branch = swiglu(x W_gate_up) W_down (added by the next norm).
void block_forward(Ops& ops, const ModelConfig& cfg, const LayerWeights& w, const BlockActivations& a,
                   const Tensor& h_prev, const BlockStep& s, const BlockPass& p) {
  const int64_t N = s.N, d = cfg.d_model, f = cfg.ffn_dim, H3 = cfg.n_heads + 2 * cfg.n_kv_heads, hd = cfg.head_dim;
  const float eps = float(cfg.norm_eps);
  const Tensor h = shaped(a.h, {N, d}), branch = shaped(s.branch, {N, d}), x_attn = shaped(a.x_attn, {N, d});
  const Tensor qkv = shaped(a.qkv, {N, cfg.qkv_dim()});
  const Tensor qkv_pre = a.qkv_pre.empty() ? qkv : shaped(a.qkv_pre, {N, cfg.qkv_dim()});

  const bool residual_in = !h_prev.empty();
  norm_then_linear(ops, p.attn_norm, p.qkv, p.x_attn_keeps, qkv_pre, x_attn, shaped(a.rstd_attn, {N}),
                   residual_in ? h : Tensor(), shaped(h_prev, {N, d}), residual_in ? branch : h, w.attn_norm, w.qkv_w,
                   w.qkv_b, eps);
  if (p.qkv)
    ops.qk_norm_rope_forward(qkv, shaped(a.qk_rstd, {N, cfg.n_heads + cfg.n_kv_heads}), qkv_pre, w.q_norm, w.k_norm,
                             shaped(s.positions, {N}), s.attn, cfg.rope(), eps);
  if (p.attention && s.k_cache.empty()) {
    ops.attention_forward(shaped(a.att, {s.B, s.T, cfg.n_heads, hd}), shaped(a.lse, {s.B, cfg.n_heads, s.T}),
                          shaped(a.qkv, {s.B, s.T, H3, hd}), s.segments, s.attn);
  } else if (p.attention) {
    ops.attention_decode(shaped(a.att, {s.T, cfg.n_heads, hd}), s.k_cache, s.v_cache, shaped(a.qkv, {s.T, H3, hd}),
                         s.cache_pos, s.attn);
  }

  if (p.o_proj) ops.linear_forward(branch, shaped(a.att, {N, cfg.q_dim()}), w.o_w, w.o_b);
  const Tensor x_mlp = shaped(a.x_mlp, {N, d}), gate_up = shaped(a.gate_up, {N, 2 * f}), act = shaped(a.act, {N, f});
  norm_then_linear(ops, p.mlp_norm, p.gate_up, p.x_mlp_keeps, gate_up, x_mlp, shaped(a.rstd_mlp, {N}),
                   p.o_proj ? shaped(a.h_mid, {N, d}) : Tensor(), p.o_proj ? h : Tensor(),
                   p.o_proj ? branch : shaped(a.h_mid, {N, d}), w.mlp_norm, w.gate_up_w, Tensor(), eps);
  if (p.swiglu && p.down) {
    ops.swiglu_linear_forward(branch, act, gate_up, w.down_w);
  } else if (p.swiglu) {
    ops.swiglu_forward(act, gate_up);
  }
}

// The forward in reverse. Each norm's backward adds the gradient reaching its input through the norm to the one
// flowing past it on the residual stream.
void block_backward(Ops& ops, const ModelConfig& cfg, const LayerWeights& w, const LayerWeights& g,
                    const BlockActivations& a, const BlockStep& s, const Tensor& dh_buffer, const BlockGradScratch& sc) {
  const int64_t N = s.N, d = cfg.d_model, f = cfg.ffn_dim, H3 = cfg.n_heads + 2 * cfg.n_kv_heads, hd = cfg.head_dim;
  const float eps = float(cfg.norm_eps);
  const Tensor dh = shaped(dh_buffer, {N, d}), dx = shaped(sc.dx, {N, d});
  const Tensor dact = shaped(sc.dact, {N, f}), dgate_up = shaped(sc.dgate_up, {N, 2 * f});
  const Tensor dqkv = shaped(sc.dqkv, {N, cfg.qkv_dim()});

  // MLP: dh is dL/d(branch) as well as the gradient flowing on to h_mid.
  ops.linear_backward(dact, g.down_w, Tensor(), dh, shaped(a.act, {N, f}), w.down_w);
  ops.swiglu_linear_backward(dx, g.gate_up_w, dgate_up, dact, shaped(a.gate_up, {N, 2 * f}), shaped(a.x_mlp, {N, d}),
                             w.gate_up_w);
  ops.rmsnorm_backward(dh, g.mlp_norm, dx, dh, shaped(a.h_mid, {N, d}), shaped(a.rstd_mlp, {N}), w.mlp_norm);

  // Attention: dh is now dL/d(h_mid), the gradient of o_proj's output.
  ops.linear_backward(shaped(sc.datt, {N, cfg.q_dim()}), g.o_w, g.o_b, dh, shaped(a.att, {N, cfg.q_dim()}), w.o_w);
  ops.attention_backward(shaped(sc.dqkv, {s.B, s.T, H3, hd}), shaped(sc.datt, {s.B, s.T, cfg.n_heads, hd}),
                         shaped(a.qkv, {s.B, s.T, H3, hd}), shaped(a.att, {s.B, s.T, cfg.n_heads, hd}),
                         shaped(a.lse, {s.B, cfg.n_heads, s.T}), s.segments, s.attn);
  ops.qk_norm_rope_backward(dqkv, g.q_norm, g.k_norm, dqkv, shaped(a.qkv_pre, {N, cfg.qkv_dim()}),
                            shaped(a.qk_rstd, {N, cfg.n_heads + cfg.n_kv_heads}), w.q_norm, w.k_norm,
                            shaped(s.positions, {N}), s.attn, cfg.rope(), eps);
  ops.linear_backward(dx, g.qkv_w, g.qkv_b, dqkv, shaped(a.x_attn, {N, d}), w.qkv_w);
  ops.rmsnorm_backward(dh, g.attn_norm, dx, dh, shaped(a.h, {N, d}), shaped(a.rstd_attn, {N}), w.attn_norm);
}

}  // namespace tk
