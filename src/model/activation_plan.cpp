// The activations a step keeps or recomputes, and their memory (activation_plan.h).
#include "model/activation_plan.h"

#include "model/grad_staging.h"
#include "model/params.h"

namespace tk {

namespace {

// Calls fn(field, recomputed, dtype, elements) for each activation a layer may keep (all but h); the kept FP8
// inputs (kept_fp8_input) are U8.
template <class F>
void for_each_activation(const ModelConfig& cfg, const ModelOptions& opt, int64_t N, DType act, DType stat,
                         const Recomputed& rc, F&& fn) {
  const int64_t d = cfg.d_model, f = cfg.ffn_dim;
  using A = BlockActivations;
  auto input = [&](const char* which) { return kept_fp8_input(cfg, opt, which) ? DType::U8 : act; };
  fn(&A::x_attn, rc.x_attn, input("x_attn"), N * d);
  fn(&A::rstd_attn, rc.rstd_attn, stat, N);
  if (cfg.qk_norm) {
    fn(&A::qkv_pre, rc.qkv, act, N * cfg.qkv_dim());
    fn(&A::qk_rstd, rc.qkv, stat, N * (cfg.n_heads + cfg.n_kv_heads));
  }
  fn(&A::qkv, rc.qkv, act, N * cfg.qkv_dim());
  fn(&A::att, rc.att, act, N * cfg.q_dim());
  fn(&A::lse, rc.att, stat, N * cfg.n_heads);
  fn(&A::h_mid, rc.h_mid, act, N * d);
  fn(&A::x_mlp, rc.x_mlp, input("x_mlp"), N * d);
  fn(&A::rstd_mlp, rc.rstd_mlp, stat, N);
  fn(&A::gate_up, rc.gate_up, act, N * 2 * f);
  fn(&A::act, rc.act, input("act"), N * f);
}

}  // namespace

Recomputed recomputed(const Recompute& r) {
  const bool b = r.block;
  return {b || r.norm, b, b || r.qkv, b || r.attention, b, b || r.norm, b, b, b || r.swiglu};
}

bool kept_fp8_input(const ModelConfig& cfg, const ModelOptions& opt, const std::string& which) {
  if (!opt.fp8_kept_inputs) return false;  // the backend's answer for these shapes (ModelOptions)
  const Recomputed rc = recomputed(opt.recompute);
  // Only where the forward runs the fused op and nothing reads the activation in bf16 again (BlockPass::training).
  if (which == "x_attn") return !rc.x_attn && !rc.qkv;
  if (which == "x_mlp") return !rc.x_mlp && !rc.gate_up;
  if (which == "act") return !rc.act;
  return false;
}

StepBuffers plan_buffers(BufferCarver& c, BufferCarver& s, const ModelConfig& cfg, const ModelOptions& opt, DType act,
                     DType stat) {
  const int64_t N = int64_t(opt.B) * opt.T, d = cfg.d_model, f = cfg.ffn_dim;
  const Recomputed rc = recomputed(opt.recompute);
  StepBuffers b;
  BlockActivations shared;
  for_each_activation(cfg, opt, N, act, stat, rc, [&](Tensor BlockActivations::*field, bool re, DType dt, int64_t n) {
    if (re) shared.*field = s.take(dt, n);
  });
  for (int l = 0; l < cfg.n_layers; l++) {
    BlockActivations a;
    a.h = c.take(act, N * d);  // the block input: always kept
    for_each_activation(cfg, opt, N, act, stat, rc, [&](Tensor BlockActivations::*field, bool re, DType dt, int64_t n) {
      a.*field = re ? shared.*field : c.take(dt, n);
    });
    b.layers.push_back(a);
  }
  b.h_out = c.take(act, N * d);
  b.x_final = c.take(act, N * d);
  b.rstd_final = c.take(stat, N);
  b.branch = s.take(act, N * d);
  b.losses = s.take(stat, N);
  b.dh = s.take(act, N * d);
  b.grad.dx = s.take(act, N * d);
  b.grad.dact = s.take(act, N * f);
  b.grad.dgate_up = s.take(act, N * 2 * f);
  b.grad.datt = s.take(act, N * cfg.q_dim());
  b.grad.dqkv = s.take(act, N * cfg.qkv_dim());
  b.tokens = s.take(DType::I32, N);
  b.targets = s.take(DType::I32, N);
  b.positions = s.take(DType::I32, N);
  b.segments = s.take(DType::I32, N);
  return b;
}

const char* gradient_label(const ModelOptions& opt) {
  return opt.grad_shards > 1 ? "parameter gradients (this rank's slice of each unit)" : "parameter gradients";
}

// ---- recompute policies and the memory they leave ------------------------------------------------

std::string Recompute::describe() const {
  std::string out;
  for (auto [on, name] : {std::pair{norm, "norm"}, {swiglu, "swiglu"}, {attention, "attention"}, {qkv, "qkv"},
                          {block, "block"}})
    if (on) out += (out.empty() ? "" : ",") + std::string(name);
  return out.empty() ? "none" : out;
}

double Recompute::flops_per_token(const ModelConfig& c, int T) const {
  const double d = c.d_model, q = c.q_dim(), k = c.kv_dim(), f = c.ffn_dim, L = c.n_layers;
  const double qkv_gemm = 2 * d * (q + 2 * k), attn_fwd = 2.0 * T * q;  // causal: half of 4 T q
  if (block) return L * (qkv_gemm + attn_fwd + 2 * q * d + 2 * d * 2 * f);
  return L * ((qkv ? qkv_gemm : 0) + (attention ? attn_fwd : 0));
}

std::vector<std::pair<std::string, size_t>> model_memory(const ModelConfig& cfg, const ModelOptions& opt, DType act,
                                                         DType grad) {
  const ParamLayout layout = ParamLayout::build(cfg, opt.unit_multiple);
  const DType stat = act == DType::F64 ? DType::F64 : DType::F32;
  BufferCarver kept, scratch;
  plan_buffers(kept, scratch, cfg, opt, act, stat);
  std::vector<std::pair<std::string, size_t>> rows{
      {"parameters", size_t(layout.total / opt.param_shards) * dtype_size(act)}};
  if (!opt.offload_grads)
    rows.push_back({gradient_label(opt), size_t(layout.total / opt.grad_shards) * dtype_size(grad)});
  if (opt.offload_grads || opt.reduced_grads) {
    const auto [outer, layer] = gradient_stage_elements(cfg, layout);
    rows.push_back({"gradient staging: embedding / LM head group", size_t(outer) * dtype_size(grad)});
    rows.push_back({"gradient staging: layers", 2 * size_t(layer) * dtype_size(grad)});
  }
  rows.push_back({"activations kept for the backward", kept.used()});
  rows.push_back({"activation gradients and step scratch", scratch.used()});
  return rows;
}

}  // namespace tk
