// ProfilingOps: every op forwarded to the wrapped backend between two timing marks, with its cost.
//
// How the cost of an op is counted (docs/profile.md says the same for users):
//  - Bytes: every input tensor read once and every output tensor written once, at its dtype's size. An
//    output the op accumulates into (+=, the parameter gradients) is read and written: twice its size. A
//    gather or scatter (the embedding) touches only the N rows of its tokens. What a kernel reads again
//    (a tiled GEMM's panels, flash attention's K/V per query block) is not counted: this is the least
//    traffic the op needs, so the GB/s derived from it is a lower bound of what memory delivered.
//  - FLOPs: a matmul 2*M*N*K (bias adds not counted); attention as docs/design.md counts it, causal:
//    forward 2*B*T^2*Hq*hd (QK^T and PV, each half of a full T x T product), backward twice that; the
//    LM head its GEMMs, 2*N*d*V each (logits, and dx and dw when asked), its softmax not counted. With
//    these rules the matmul, attention and LM head FLOPs of a step add up to the model FLOPs that MFU
//    uses. Element-wise ops count a fixed number per element, given at each op below.
#include "profile/profiling_ops.h"

#include <type_traits>

namespace tk {
namespace {

// A tensor's dtype and dims without its data: what a record may keep after the op.
Tensor shape_of(const Tensor& t) {
  Tensor s = t;
  s.data = nullptr;
  return s;
}

double bytes_of(const Tensor& t) { return t.empty() ? 0.0 : double(t.nbytes()); }
double elem(const Tensor& t) { return double(dtype_size(t.dtype)); }

// Tokens of a [N, width] tensor (any rank, contiguous).
double rows(const Tensor& t, int64_t width) { return width > 0 ? double(t.numel() / width) : 0.0; }

// The q and k head vectors that RoPE (and the Qwen3 q/k norms) transform: N * (Hq + Hkv) * hd values.
double qk_values(const Tensor& qkv, const AttnShape& s) {
  return rows(qkv, s.qkv_width()) * double(s.n_heads + s.n_kv_heads) * s.head_dim;
}

// Causal attention's forward FLOPs: QK^T and PV over the lower triangle, 2 * B * T^2 * Hq * hd.
double causal_attention_flops(const AttnShape& s) {
  return 2.0 * s.B * double(s.T) * double(s.T) * s.n_heads * s.head_dim;
}

}  // namespace

const char* category_name(OpCategory c) {
  switch (c) {
    case OpCategory::Matmul: return "matmul";
    case OpCategory::Attention: return "attention";
    case OpCategory::Norm: return "norm";
    case OpCategory::Rope: return "rope";
    case OpCategory::Activation: return "activation";
    case OpCategory::Embedding: return "embedding";
    case OpCategory::Loss: return "loss";
    case OpCategory::Optimizer: return "optimizer";
    case OpCategory::Memory: return "memory";
    case OpCategory::Other: return "other";
  }
  return "other";
}

ProfilingOps::ProfilingOps(std::unique_ptr<Ops> inner) : inner_(std::move(inner)) {
  TK_CHECK(inner_ != nullptr, "ProfilingOps needs a backend to wrap");
}

void ProfilingOps::clear_records() {
  records_.clear();
  inner_->timing_reset();
}

template <class F>
auto ProfilingOps::timed(const char* name, OpCategory category, const OpCost& cost, const Tensor& in,
                         const Tensor& out, F&& op) {
  OpRecord r;
  r.recompute = in_recompute();
  inner_->range_push(name);
  r.name = name;
  r.category = category;
  r.cost = cost;
  r.in = shape_of(in);
  r.out = shape_of(out);
  r.begin = inner_->timing_mark();
  if constexpr (std::is_void_v<decltype(op())>) {
    op();
    r.end = inner_->timing_mark();
    inner_->range_pop();
    records_.push_back(r);
  } else {
    auto result = op();
    r.end = inner_->timing_mark();
    inner_->range_pop();
    records_.push_back(r);
    return result;
  }
}

// ---- memory: bytes moved, read once and written once -----------------------------------------------

void ProfilingOps::zero(const Tensor& t) {
  timed("zero", OpCategory::Memory, {0, bytes_of(t)}, Tensor(), t, [&] { inner_->zero(t); });
}

void ProfilingOps::upload_f32(const Tensor& dst, const float* src) {
  const OpCost c{0, 4.0 * double(dst.numel()) + bytes_of(dst)};
  timed("upload_f32", OpCategory::Memory, c, Tensor(), dst, [&] { inner_->upload_f32(dst, src); });
}

void ProfilingOps::convert(const Tensor& dst, const Tensor& src) {
  timed("convert", OpCategory::Memory, {0, bytes_of(src) + bytes_of(dst)}, src, dst, [&] { inner_->convert(dst, src); });
}

void ProfilingOps::download_f32(float* dst, const Tensor& src) {
  const OpCost c{0, bytes_of(src) + 4.0 * double(src.numel())};
  timed("download_f32", OpCategory::Memory, c, src, Tensor(), [&] { inner_->download_f32(dst, src); });
}

void ProfilingOps::upload(void* dst, const void* src, size_t bytes) {
  timed("upload", OpCategory::Memory, {0, 2.0 * double(bytes)}, Tensor(), Tensor(), [&] { inner_->upload(dst, src, bytes); });
}

void ProfilingOps::download(void* dst, const void* src, size_t bytes) {
  timed("download", OpCategory::Memory, {0, 2.0 * double(bytes)}, Tensor(), Tensor(),
        [&] { inner_->download(dst, src, bytes); });
}

// ---- embedding: a gather and a scatter-add of N rows; the backward's add is 1 FLOP per element ---------

void ProfilingOps::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& table) {
  const double rows_read = double(tokens.numel()) * double(table.dim(-1)) * elem(table);
  const OpCost c{0, bytes_of(tokens) + rows_read + bytes_of(out)};
  timed("embedding_forward", OpCategory::Embedding, c, table, out,
        [&] { inner_->embedding_forward(out, tokens, table); });
}

void ProfilingOps::embedding_backward(const Tensor& dtable, const Tensor& tokens, const Tensor& dout) {
  const double rows_updated = double(tokens.numel()) * double(dtable.dim(-1)) * elem(dtable);
  const OpCost c{double(dout.numel()), bytes_of(tokens) + bytes_of(dout) + 2.0 * rows_updated};
  timed("embedding_backward", OpCategory::Embedding, c, dout, dtable,
        [&] { inner_->embedding_backward(dtable, tokens, dout); });
}

// ---- RMSNorm: forward 4 FLOPs per element (square, sum, scale by rstd, by w), 5 with the residual add;
// backward 10 (+1 with the residual gradient) ------------------------------------------------------------

void ProfilingOps::rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, float eps) {
  const OpCost c{4.0 * double(x.numel()), bytes_of(x) + bytes_of(w) + bytes_of(y) + bytes_of(rstd)};
  timed("rmsnorm_forward", OpCategory::Norm, c, x, y, [&] { inner_->rmsnorm_forward(y, rstd, x, w, eps); });
}

void ProfilingOps::residual_rmsnorm_forward(const Tensor& h_out, const Tensor& y, const Tensor& rstd,
                                            const Tensor& h_in, const Tensor& x, const Tensor& w, float eps) {
  const OpCost c{5.0 * double(x.numel()),
                 bytes_of(h_in) + bytes_of(x) + bytes_of(w) + bytes_of(h_out) + bytes_of(y) + bytes_of(rstd)};
  timed("residual_rmsnorm_forward", OpCategory::Norm, c, x, y,
        [&] { inner_->residual_rmsnorm_forward(h_out, y, rstd, h_in, x, w, eps); });
}

void ProfilingOps::rmsnorm_backward(const Tensor& dh, const Tensor& dw, const Tensor& dy, const Tensor& dresidual,
                                    const Tensor& h, const Tensor& rstd, const Tensor& w) {
  const double n = double(h.numel());
  const OpCost c{(dresidual.empty() ? 10.0 : 11.0) * n, bytes_of(dy) + bytes_of(dresidual) + bytes_of(h) +
                                                             bytes_of(rstd) + bytes_of(w) + bytes_of(dh) +
                                                             2.0 * bytes_of(dw)};
  timed("rmsnorm_backward", OpCategory::Norm, c, dy, dh,
        [&] { inner_->rmsnorm_backward(dh, dw, dy, dresidual, h, rstd, w); });
}

// ---- linear: 2*N*in*out per GEMM; the backward runs one for dx and one for dw ------------------------------

void ProfilingOps::linear_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const double in = double(w.dim(-1)), out = double(w.dim(0)), N = rows(x, w.dim(-1));
  const OpCost c{2.0 * N * in * out, bytes_of(x) + bytes_of(w) + bytes_of(bias) + bytes_of(y)};
  timed("linear_forward", OpCategory::Matmul, c, x, y, [&] { inner_->linear_forward(y, x, w, bias); });
}

namespace {
// A linear's backward GEMMs over N rows: one for dx (reads w, writes dx), one for dw (reads x, reads and writes dw).
OpCost linear_backward_gemms(const Tensor& dx, const Tensor& dw, const Tensor& x, const Tensor& w, double N) {
  const double gemm = 2.0 * N * double(w.dim(-1)) * double(w.dim(0));
  OpCost c{0, 0};
  if (!dx.empty()) {
    c.flops += gemm;
    c.bytes += bytes_of(w) + bytes_of(dx);
  }
  if (!dw.empty()) {
    c.flops += gemm;
    c.bytes += bytes_of(x) + 2.0 * bytes_of(dw);
  }
  return c;
}
}  // namespace

void ProfilingOps::linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dbias, const Tensor& dy,
                                   const Tensor& x, const Tensor& w) {
  OpCost c = linear_backward_gemms(dx, dw, x, w, rows(dy, w.dim(0)));
  c.bytes += bytes_of(dy) + 2.0 * bytes_of(dbias);
  timed("linear_backward", OpCategory::Matmul, c, dy, dx.empty() ? dw : dx,
        [&] { inner_->linear_backward(dx, dw, dbias, dy, x, w); });
}

// ---- q/k norm + RoPE: 3 FLOPs per rotated value (two products, a sum); the q/k norms add 4 forward and
// 10 backward per value -----------------------------------------------------------------------------------

void ProfilingOps::qk_norm_rope_forward(const Tensor& qkv_out, const Tensor& qk_rstd, const Tensor& qkv_in,
                                        const Tensor& q_norm_w, const Tensor& k_norm_w, const Tensor& positions,
                                        const AttnShape& s, const RopeSpec& rope, float eps) {
  const bool norms = !q_norm_w.empty();
  const double values = qk_values(qkv_in, s);
  OpCost c{(norms ? 7.0 : 3.0) * values, bytes_of(qkv_in) + bytes_of(qkv_out) + bytes_of(positions)};
  if (norms) c.bytes += bytes_of(q_norm_w) + bytes_of(k_norm_w) + bytes_of(qk_rstd);
  timed("qk_norm_rope_forward", OpCategory::Rope, c, qkv_in, qkv_out, [&] {
    inner_->qk_norm_rope_forward(qkv_out, qk_rstd, qkv_in, q_norm_w, k_norm_w, positions, s, rope, eps);
  });
}

void ProfilingOps::qk_norm_rope_backward(const Tensor& dqkv_in, const Tensor& dq_norm_w, const Tensor& dk_norm_w,
                                         const Tensor& dqkv_out, const Tensor& qkv_in, const Tensor& qk_rstd,
                                         const Tensor& q_norm_w, const Tensor& k_norm_w, const Tensor& positions,
                                         const AttnShape& s, const RopeSpec& rope, float eps) {
  const bool norms = !q_norm_w.empty();
  const double values = qk_values(dqkv_out, s);
  OpCost c{(norms ? 13.0 : 3.0) * values, bytes_of(dqkv_out) + bytes_of(dqkv_in) + bytes_of(positions)};
  if (norms)
    c.bytes += bytes_of(qkv_in) + bytes_of(qk_rstd) + bytes_of(q_norm_w) + bytes_of(k_norm_w) +
               2.0 * (bytes_of(dq_norm_w) + bytes_of(dk_norm_w));
  timed("qk_norm_rope_backward", OpCategory::Rope, c, dqkv_out, dqkv_in, [&] {
    inner_->qk_norm_rope_backward(dqkv_in, dq_norm_w, dk_norm_w, dqkv_out, qkv_in, qk_rstd, q_norm_w, k_norm_w,
                                  positions, s, rope, eps);
  });
}

// ---- attention ----------------------------------------------------------------------------------------

void ProfilingOps::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                                     const Tensor& segment_ids, const AttnShape& s) {
  const OpCost c{causal_attention_flops(s), bytes_of(qkv) + bytes_of(segment_ids) + bytes_of(out) + bytes_of(lse)};
  timed("attention_forward", OpCategory::Attention, c, qkv, out,
        [&] { inner_->attention_forward(out, lse, qkv, segment_ids, s); });
}

void ProfilingOps::attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                      const Tensor& lse, const Tensor& segment_ids, const AttnShape& s) {
  const OpCost c{2.0 * causal_attention_flops(s), bytes_of(dout) + bytes_of(qkv) + bytes_of(out) + bytes_of(lse) +
                                                      bytes_of(segment_ids) + bytes_of(dqkv)};
  timed("attention_backward", OpCategory::Attention, c, dout, dqkv,
        [&] { inner_->attention_backward(dqkv, dout, qkv, out, lse, segment_ids, s); });
}

// New token i (of s.T, at position pos + i) attends to pos + i + 1 cached rows: 4*hd FLOPs per row and
// query head (q.k and the weighted sum of v). Reads every cached row it attends to, writes the new ones.
void ProfilingOps::attention_decode(const Tensor& out, const Tensor& k_cache, const Tensor& v_cache,
                                    const Tensor& qkv, int pos, const AttnShape& s) {
  const double T = s.T, rows_attended = T * pos + T * (T + 1) / 2;
  const double kv_row = double(s.n_kv_heads) * s.head_dim * elem(k_cache);  // one row of k_cache (and of v_cache)
  const double kv_written = 2.0 * kv_row * T, kv_read = 2.0 * kv_row * (double(pos) + T);
  const OpCost c{4.0 * s.n_heads * s.head_dim * rows_attended, bytes_of(qkv) + bytes_of(out) + kv_written + kv_read};
  timed("attention_decode", OpCategory::Attention, c, qkv, out,
        [&] { inner_->attention_decode(out, k_cache, v_cache, qkv, pos, s); });
}

// ---- SwiGLU: 5 FLOPs per output forward (sigmoid as 3, two products), 11 backward ------------------------

void ProfilingOps::swiglu_forward(const Tensor& out, const Tensor& gate_up) {
  const OpCost c{5.0 * double(out.numel()), bytes_of(gate_up) + bytes_of(out)};
  timed("swiglu_forward", OpCategory::Activation, c, gate_up, out, [&] { inner_->swiglu_forward(out, gate_up); });
}

void ProfilingOps::swiglu_backward(const Tensor& dgate_up, const Tensor& dout, const Tensor& gate_up) {
  const OpCost c{11.0 * double(dout.numel()), bytes_of(dout) + bytes_of(gate_up) + bytes_of(dgate_up)};
  timed("swiglu_backward", OpCategory::Activation, c, dout, dgate_up,
        [&] { inner_->swiglu_backward(dgate_up, dout, gate_up); });
}

// SwiGLU and the linear it feeds, fused by the backend (CUDA with --fp8 and delayed scaling: the cast of SwiGLU's
// output or gradient happens in its kernel): one op, whose FLOPs are the linear's GEMMs' (so that the matmul
// FLOPs of a step stay the model's) and whose bytes are both ops'.
void ProfilingOps::swiglu_linear_forward(const Tensor& y, const Tensor& act, const Tensor& gate_up, const Tensor& w) {
  if (!inner_->fuses_swiglu_linear()) {
    Ops::swiglu_linear_forward(y, act, gate_up, w);  // as swiglu_forward and linear_forward, each timed
    return;
  }
  const double in = double(w.dim(-1)), out = double(w.dim(0)), N = rows(act, w.dim(-1));
  const OpCost c{2.0 * N * in * out, bytes_of(gate_up) + bytes_of(act) + bytes_of(w) + bytes_of(y)};
  timed("swiglu_linear_forward", OpCategory::Matmul, c, gate_up, y,
        [&] { inner_->swiglu_linear_forward(y, act, gate_up, w); });
}

void ProfilingOps::swiglu_linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dgate_up,
                                          const Tensor& dout, const Tensor& gate_up, const Tensor& x,
                                          const Tensor& w) {
  if (!inner_->fuses_swiglu_linear()) {
    Ops::swiglu_linear_backward(dx, dw, dgate_up, dout, gate_up, x, w);
    return;
  }
  OpCost c = linear_backward_gemms(dx, dw, x, w, rows(dout, dout.dim(-1)));
  c.bytes += bytes_of(dout) + bytes_of(gate_up);
  timed("swiglu_linear_backward", OpCategory::Matmul, c, dout, dx.empty() ? dw : dx,
        [&] { inner_->swiglu_linear_backward(dx, dw, dgate_up, dout, gate_up, x, w); });
}

// The norm and the linear it feeds, fused by the backend (CUDA with --fp8 and delayed scaling): one op, as the
// SwiGLU-linear ones above (the linear's GEMM FLOPs; the norm's and the linear's bytes).
void ProfilingOps::rmsnorm_linear_forward(const Tensor& y, const Tensor& x_norm, const Tensor& rstd,
                                          const Tensor& h_out, const Tensor& h_in, const Tensor& x,
                                          const Tensor& norm_w, const Tensor& w, const Tensor& bias, float eps,
                                          NormOutput keeps) {
  if (!inner_->fuses_rmsnorm_linear() || keeps == NormOutput::values) {
    Ops::rmsnorm_linear_forward(y, x_norm, rstd, h_out, h_in, x, norm_w, w, bias, eps, keeps);  // each op timed
    return;
  }
  const double in = double(w.dim(-1)), out = double(w.dim(0)), N = rows(x, w.dim(-1));
  const OpCost c{2.0 * N * in * out, bytes_of(x) + bytes_of(h_in) + bytes_of(h_out) + bytes_of(rstd) +
                                         bytes_of(norm_w) + bytes_of(w) + bytes_of(bias) + bytes_of(y)};
  timed("rmsnorm_linear_forward", OpCategory::Matmul, c, x, y,
        [&] { inner_->rmsnorm_linear_forward(y, x_norm, rstd, h_out, h_in, x, norm_w, w, bias, eps, keeps); });
}

// ---- LM head + cross-entropy: the logits GEMM, and the dx and dw GEMMs when asked ---------------------------

void ProfilingOps::lm_head_cross_entropy(const Tensor& losses, const Tensor& dx, const Tensor& dw, const Tensor& x,
                                         const Tensor& w, const Tensor& targets, float grad_scale, int ignore_index) {
  const double d = double(w.dim(-1)), V = double(w.dim(0)), N = rows(x, w.dim(-1));
  const double gemms = 1.0 + (dx.empty() ? 0.0 : 1.0) + (dw.empty() ? 0.0 : 1.0);
  const OpCost c{gemms * 2.0 * N * d * V, bytes_of(x) + bytes_of(w) + bytes_of(targets) + bytes_of(losses) +
                                              bytes_of(dx) + 2.0 * bytes_of(dw)};
  timed("lm_head_cross_entropy", OpCategory::Loss, c, x, losses,
        [&] { inner_->lm_head_cross_entropy(losses, dx, dw, x, w, targets, grad_scale, ignore_index); });
}

// ---- optimizer: the norm is 2 FLOPs per gradient; AdamW 17 per parameter (scale 1, m 3, v 4, bias
// corrections 2, sqrt/add/divide 3, decay 2, update 2) --------------------------------------------------------

double ProfilingOps::grad_norm(const Tensor& grads) {
  return timed("grad_norm", OpCategory::Optimizer, {2.0 * double(grads.numel()), bytes_of(grads)}, grads, Tensor(),
               [&] { return inner_->grad_norm(grads); });
}

// Per parameter: its gradient read; m and v read and written (and int8 moments' block scales, 2 x 4 bytes
// per 256 parameters); the master weight read and written and the parameter written when master weights
// are held, else the parameter read and written.
void ProfilingOps::adamw_update(const Tensor& params, const Tensor& master, const Tensor& grads, const Tensor& m,
                                const Tensor& v, const Tensor& m_scale, const Tensor& v_scale,
                                const std::vector<ParamSegment>& segments, const AdamWConfig& c) {
  double n = 0;
  for (const ParamSegment& s : segments) n += double(s.count);
  const double scales = m_scale.empty() ? 0.0 : 2.0 * 2.0 * 4.0 / 256.0;
  const double per_param = elem(grads) + 2.0 * elem(m) + 2.0 * elem(v) + scales +
                           (master.empty() ? 2.0 * elem(params) : 2.0 * elem(master) + elem(params));
  timed("adamw_update", OpCategory::Optimizer, {17.0 * n, per_param * n}, grads, params,
        [&] { inner_->adamw_update(params, master, grads, m, v, m_scale, v_scale, segments, c); });
}

}  // namespace tk
