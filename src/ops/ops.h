// The op vocabulary: every computation a training step makes, with its exact semantics. The layer
// schedule (src/model) is written once against this interface; the CPU backend (src/ops/cpu) is the
// readable reference and the CUDA backend (src/ops/cuda) the fast one, tested against it.
//
// Conventions (all ops):
//  - N = B*T tokens; tensors are row-major and contiguous; shapes are given in the comments.
//  - "act" means the backend's activation dtype (act_dtype(): f32/f64 on the CPU, bf16 on CUDA);
//    weights seen by ops are act too; "f32" tensors are f32 on every backend (f64 for CpuOps<double>).
//  - Backward ops WRITE (=) activation gradients and ACCUMULATE (+=) parameter gradients. Parameter
//    gradients have the backend's grad_dtype() (f32 on CUDA, the compute type on the CPU).
//  - An empty Tensor (data == nullptr) in an optional slot means "not present / not wanted".
//  - Every op is deterministic: the same inputs give bitwise the same outputs, run after run.
//  - Ops are asynchronous on devices with queues (CUDA); ops that return a host value synchronise.
#pragma once
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/memory_ledger.h"

namespace tk {

struct AttnShape {
  int B = 0, T = 0;        // batch rows and sequence length
  int n_heads = 0;         // query heads Hq
  int n_kv_heads = 0;      // key/value heads Hkv; Hq % Hkv == 0, query head h reads kv head h / (Hq/Hkv)
  int head_dim = 0;        // hd
  int qkv_width() const { return (n_heads + 2 * n_kv_heads) * head_dim; }
};

// RoPE's frequencies: pair i of a head vector (elements i and i + hd/2, i < hd/2) turns by the angle
// p * inv_freq[i] at position p. Plain RoPE has inv_freq[i] = theta^(-2i/hd); scaled RoPE (config.json's
// rope_scaling "linear" or "llama3") changes them. The model computes them once, in double, from its config
// (ModelConfig::rope()); the backends take them as they are.
struct RopeSpec {
  std::vector<double> inv_freq;  // hd/2 values
  static RopeSpec plain(double theta, int head_dim) {
    RopeSpec r;
    for (int i = 0; i < head_dim / 2; i++) r.inv_freq.push_back(std::pow(theta, -2.0 * i / head_dim));
    return r;
  }
};

// One contiguous run of parameters in the flat parameter buffer, updated alike by AdamW.
struct ParamSegment {
  int64_t offset = 0;  // in elements
  int64_t count = 0;
  bool decay = true;   // weight decay applies (matrices yes; norms, biases no)
};

struct AdamWConfig {
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  int64_t step = 1;         // 1-based step, for bias correction
  float grad_scale = 1.0f;  // multiplies every gradient first (clipping: min(1, max_norm / norm))
  int64_t first_index = 0;  // the flat index of element 0 of the buffers given (chunks), for the rounding noise
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual const char* name() const = 0;  // "cpu", "cpu-f64", "cuda"
  virtual DType act_dtype() const = 0;
  virtual DType grad_dtype() const = 0;
  // The backend whose queues run this object's work: itself, or for a decorator that forwards the ops to another
  // (ProfilingOps) that backend. Code that orders its own work against the compute queue through the backend's
  // native handles (the NCCL communicator's events on the CUDA stream) reaches the backend by it.
  virtual Ops& underlying() { return *this; }

  // ---- memory ---------------------------------------------------------------------------------
  // Device memory for planned buffers (allocated once at start, never inside a step). 256-byte aligned.
  // `label` names the buffer in the memory plan's table.
  virtual void* allocate(size_t bytes, const char* label = "unlabelled") = 0;
  virtual void release(void* p) = 0;
  // What this backend holds now, by label, largest first: the memory plan.
  virtual std::vector<MemoryRow> memory_rows() const = 0;
  // Ends planning: an allocation after this is reported as one the plan missed.
  virtual void seal_memory() = 0;
  // Host memory that upload/download move fastest (page-locked on CUDA), for state offloaded from the
  // device. The default is ordinary aligned host memory (the CPU backend's device memory is the host's).
  virtual void* allocate_host(size_t bytes, const char* label) {
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    if (!p) throw std::bad_alloc();
    return p;
  }
  virtual void release_host(void* p) { std::free(p); }
  virtual void zero(const Tensor& t) = 0;
  // Host float32 <-> tensor of any float dtype (converting; rounds to nearest even for bf16).
  virtual void upload_f32(const Tensor& dst, const float* src) = 0;
  virtual void download_f32(float* dst, const Tensor& src) = 0;
  // dst = src on the device, converted between float dtypes (the same element count; rounding to nearest even where
  // dst is narrower): the optimizer's fp32 master weights from the bf16 parameters, with no trip through the host.
  virtual void convert(const Tensor& dst, const Tensor& src) = 0;
  // Raw bytes host <-> device (same dtype both sides), e.g. token ids. An upload from memory of allocate_host may
  // still be reading it when the call returns: keep it unchanged until the compute queue has passed the upload (a
  // download or synchronize() waits for that).
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;

  // ---- copy queues (offload pipelines) --------------------------------------------------------
  // Every op above runs on the compute queue. Copies between host memory from allocate_host and device
  // memory may run on queues of their own, one per direction, so that they overlap the compute queue and
  // each other; an event recorded on one queue and waited for on another orders them (a wait covers all
  // that was queued on the recording queue before the record). Host memory written by a download may be
  // read once the compute queue has waited for the download's event and synchronize() has returned.
  // copy_async on the compute queue also copies between two device buffers, in order with the ops (gradient
  // staging). The defaults suit a backend whose ops run synchronously (the CPU): the copy happens at once.
  enum class Queue : int { compute = 0, upload = 1, download = 2 };
  virtual void copy_async(void* dst, const void* src, size_t bytes, Queue q) { std::memcpy(dst, src, bytes); }
  virtual int record_event(Queue q) { return 0; }
  virtual void wait_event(Queue waiter, int event) {}

  // ---- embedding ------------------------------------------------------------------------------
  // out[N,d] = table[tokens[n], :]. tokens i32[N] with 0 <= id < V.
  virtual void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& table) = 0;
  // dtable[V,d] += sum over n with tokens[n] == v of dout[n,:] (in a fixed order: deterministic).
  virtual void embedding_backward(const Tensor& dtable, const Tensor& tokens, const Tensor& dout) = 0;

  // ---- RMSNorm --------------------------------------------------------------------------------
  // y[N,d] = x * rstd * w, rstd f32[N] = 1/sqrt(mean(x^2) + eps). Writes y and rstd.
  virtual void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, float eps) = 0;
  // The residual add fused with the norm that follows it:
  // h_out[N,d] = h_in + x;  y = rmsnorm(h_out) * w;  writes h_out, y, rstd. h_out may alias h_in.
  virtual void residual_rmsnorm_forward(const Tensor& h_out, const Tensor& y, const Tensor& rstd, const Tensor& h_in,
                                        const Tensor& x, const Tensor& w, float eps) = 0;
  // Backward of y = rmsnorm(h)*w, plus the gradient that reaches h through the residual stream:
  // dh[N,d] = (d y/d h)^T dy + dresidual  (=; dresidual optional, may alias dh);  dw[d] += sum_n dy*h*rstd.
  // h is the norm's input (h_out of the forward), rstd the saved f32[N].
  virtual void rmsnorm_backward(const Tensor& dh, const Tensor& dw, const Tensor& dy, const Tensor& dresidual,
                                const Tensor& h, const Tensor& rstd, const Tensor& w) = 0;

  // What x_norm, the norm's output, must hold after rmsnorm_linear_forward:
  //  - values: the norm's values, for any later reader. The op is then exactly the two ops it composes.
  //  - linear_backward_only: only that linear's backward will read it (linear_backward or swiglu_linear_backward
  //    with x = x_norm and this w), so a backend may keep there, instead of the values, what that backward needs
  //    of them (CUDA with --fp8 and delayed scaling: the FP8 x^T of the weight gradient).
  enum class NormOutput { values, linear_backward_only };
  // The norm, then the linear that takes its output: rmsnorm_forward(x_norm, rstd, x, norm_w, eps), or with h_in
  // residual_rmsnorm_forward(h_out, x_norm, rstd, h_in, x, norm_w, eps); then linear_forward(y, x_norm, w, bias).
  // One op, so that a backend may cast the norm's output for the linear's GEMMs as it makes it (CUDA with --fp8
  // and delayed scaling) where `keeps` allows it. h_out and h_in are empty without the residual add.
  virtual void rmsnorm_linear_forward(const Tensor& y, const Tensor& x_norm, const Tensor& rstd, const Tensor& h_out,
                                      const Tensor& h_in, const Tensor& x, const Tensor& norm_w, const Tensor& w,
                                      const Tensor& bias, float eps, NormOutput keeps) {
    if (h_in.empty()) {
      rmsnorm_forward(x_norm, rstd, x, norm_w, eps);
    } else {
      residual_rmsnorm_forward(h_out, x_norm, rstd, h_in, x, norm_w, eps);
    }
    linear_forward(y, x_norm, w, bias);
  }
  // Whether rmsnorm_linear_forward with NormOutput::linear_backward_only runs as one fused piece of work on this
  // backend (then a profiler times it as one op; otherwise as the two ops it composes).
  virtual bool fuses_rmsnorm_linear() const { return false; }

  // ---- linear ---------------------------------------------------------------------------------
  // y[N,out] = x[N,in] @ w[out,in]^T + bias[out] (bias optional).
  virtual void linear_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) = 0;
  // dx[N,in] = dy @ w (=, optional); dw[out,in] += dy^T @ x (optional); dbias[out] += sum_n dy (optional).
  virtual void linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dbias, const Tensor& dy,
                               const Tensor& x, const Tensor& w) = 0;

  // ---- q/k norm and RoPE ----------------------------------------------------------------------
  // qkv[N, (Hq + 2*Hkv) * hd] holds per token the Hq query heads, then Hkv key heads, then Hkv value heads.
  // Forward: for each q and k head vector u (hd values): if q_norm_w/k_norm_w are given (Qwen3),
  //   r = 1/sqrt(mean(u^2) + eps), u = u * r * w (qk_rstd f32[N, Hq+Hkv] records r: q heads then k heads);
  //   then RoPE with position p = positions[n] (i32[N]) in the "rotate half" convention of Hugging Face:
  //   for i < hd/2, f = p * rope.inv_freq[i]: out[i] = u[i]*cos f - u[i+hd/2]*sin f,
  //   out[i+hd/2] = u[i+hd/2]*cos f + u[i]*sin f. Value heads are copied unchanged.
  // qkv_out may alias qkv_in. Without norm weights qk_rstd may be empty.
  virtual void qk_norm_rope_forward(const Tensor& qkv_out, const Tensor& qk_rstd, const Tensor& qkv_in,
                                    const Tensor& q_norm_w, const Tensor& k_norm_w, const Tensor& positions,
                                    const AttnShape& s, const RopeSpec& rope, float eps) = 0;
  // dqkv_in (=) from dqkv_out; dq_norm_w/dk_norm_w[hd] (+=) when norms are present. qkv_in is the forward's
  // input (needed only with norms). dqkv_in may alias dqkv_out.
  virtual void qk_norm_rope_backward(const Tensor& dqkv_in, const Tensor& dq_norm_w, const Tensor& dk_norm_w,
                                     const Tensor& dqkv_out, const Tensor& qkv_in, const Tensor& qk_rstd,
                                     const Tensor& q_norm_w, const Tensor& k_norm_w, const Tensor& positions,
                                     const AttnShape& s, const RopeSpec& rope, float eps) = 0;

  // ---- attention ------------------------------------------------------------------------------
  // Causal softmax attention with GQA over qkv[B,T,Hq+2Hkv,hd] (the layout above):
  //   out[b,t,h,:] = sum_{s<=t, seg(b,s)==seg(b,t)} softmax_s(q.k_s / sqrt(hd)) v_s
  // where segment_ids i32[B,T] is optional (absent: one segment per row; present: document masking).
  // Writes out[B,T,Hq,hd] and lse f32[B,Hq,T] = log sum_s exp(q.k_s / sqrt(hd)) (natural log).
  virtual void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, const Tensor& segment_ids,
                                 const AttnShape& s) = 0;
  // dqkv[B,T,Hq+2Hkv,hd] (=) given dout[B,T,Hq,hd] and the forward's qkv, out and lse.
  virtual void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                  const Tensor& lse, const Tensor& segment_ids, const AttnShape& s) = 0;
  // Generation with a KV cache, one sequence (s.B == 1) of s.T new tokens at positions [pos, pos + s.T):
  // their keys and values, from qkv[s.T, (Hq+2Hkv)*hd] (the layout above, after RoPE), are written (=) to
  // rows [pos, pos + s.T) of k_cache and v_cache [max_len, Hkv, hd]; then out[s.T, Hq, hd] (=), where new
  // token i attends causally to every cached row up to its own:
  //   out[i,h,:] = sum_{r <= pos+i} softmax_r(q_i,h . k_r,g / sqrt(hd)) v_r,g,   g = h / (Hq/Hkv).
  // Rows [0, pos) of the caches must hold the keys and values of the earlier tokens.
  virtual void attention_decode(const Tensor& out, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv,
                                int pos, const AttnShape& s) = 0;

  // ---- SwiGLU ---------------------------------------------------------------------------------
  // gate_up[N, 2f]: columns [0,f) are the gate g, [f,2f) the up projection u. out[N,f] = silu(g) * u.
  virtual void swiglu_forward(const Tensor& out, const Tensor& gate_up) = 0;
  // dgate_up[N,2f] (=) given dout[N,f] and the forward's gate_up.
  virtual void swiglu_backward(const Tensor& dgate_up, const Tensor& dout, const Tensor& gate_up) = 0;
  // swiglu_forward(act, gate_up), then linear_forward(y, act, w, {}) (no bias): one op, so that a backend may
  // cast act for that linear's GEMM as it writes it (CUDA with --fp8 and delayed scaling). act is kept for that
  // linear's backward and may be read only by it (linear_backward with x = act and this w): a backend may keep
  // there, instead of the values, what that backward needs of them (CUDA: the FP8 transpose of its weight gradient).
  virtual void swiglu_linear_forward(const Tensor& y, const Tensor& act, const Tensor& gate_up, const Tensor& w) {
    swiglu_forward(act, gate_up);
    linear_forward(y, act, w, Tensor());
  }
  // swiglu_backward, then linear_backward(dx, dw, {}, dgate_up, x, w) of the linear (no bias) that made gate_up
  // from x: one op, so that a backend may hand the gradient to that linear's GEMMs without writing it in bf16
  // (CUDA with --fp8 and delayed scaling casts it to FP8 as it computes it). dgate_up[N, 2f] is scratch: what it
  // holds afterwards is unspecified.
  virtual void swiglu_linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dgate_up, const Tensor& dout,
                                      const Tensor& gate_up, const Tensor& x, const Tensor& w) {
    swiglu_backward(dgate_up, dout, gate_up);
    linear_backward(dx, dw, Tensor(), dgate_up, x, w);
  }
  // Whether swiglu_linear_forward / swiglu_linear_backward run as one fused piece of work on this backend (then
  // a profiler times them as one op; otherwise as the two ops they compose).
  virtual bool fuses_swiglu_linear() const { return false; }

  // ---- LM head + cross-entropy, fused ---------------------------------------------------------
  // For each token n: logits = x[n,:] @ w[V,d]^T (never stored whole), and
  //   losses f32[N]: losses[n] = logsumexp(logits) - logits[targets[n]], or 0 where targets[n] == ignore_index.
  // When dx/dw are given, the gradient of  L = grad_scale * sum_n losses[n]  is computed:
  //   dx[N,d] (=), dw[V,d] (+=). grad_scale is typically 1 / (valid targets in the global batch).
  virtual void lm_head_cross_entropy(const Tensor& losses, const Tensor& dx, const Tensor& dw, const Tensor& x,
                                     const Tensor& w, const Tensor& targets, float grad_scale, int ignore_index) = 0;

  // ---- optimizer ------------------------------------------------------------------------------
  // sqrt(sum of squares) of a gradient buffer of grad_dtype(), accumulated in f32/f64 in a fixed order.
  // Synchronises and returns to the host.
  virtual double grad_norm(const Tensor& grads) = 0;
  // AdamW over the segments of the flat buffers (one launch on CUDA). For each element i of a segment:
  //   g = grads[i] * c.grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  //   mh = m / (1 - b1^step); vh = v / (1 - b2^step);
  //   p = p - lr * (mh / (sqrt(vh) + eps) + (decay ? weight_decay * p : 0))
  // where p is master[i] (f32) when master is given (params then receive p rounded to act), else params[i].
  // grads are left as they are (the trainer zeroes them). m and v [P] are stored in one of three forms:
  //  - f32 (f64 on CpuOps<double>): the values; m_scale and v_scale are empty.
  //  - bf16: decoded exactly, updated as above, stored rounded to bf16; m_scale and v_scale are empty.
  //  - int8 (m i8, v u8; not on CpuOps<double>): blocks of kMomentBlock (256) consecutive elements from
  //    element 0 (the last block may be shorter), with m_scale and v_scale f32[ceil(P / 256)] holding
  //    the block's largest |m| and largest v; a code's value is its entry in moment_codec.h's logarithmic
  //    code book times the scale. Every block holding an element of a segment is decoded, its elements
  //    in segments updated as above (the others keep their decoded values), its scales set to the new
  //    largest |m| and v (0 when below the smallest normal float), and every element encoded again
  //    (moment_codec.h encode_m / encode_v: a positive v never becomes 0; a value whose decoded form would
  //    be subnormal does).
  // The weights use the updated m and v before they are rounded.
  // Rounding to bf16 or a code is stochastic (moment_codec.h: unbiased, so moments that change by less
  // than a rounding step per update still follow their average), with noise from a hash of (c.step,
  // c.first_index + i, which moment): deterministic, and the same for any chunking of the buffers.
  virtual void adamw_update(const Tensor& params, const Tensor& master, const Tensor& grads, const Tensor& m,
                            const Tensor& v, const Tensor& m_scale, const Tensor& v_scale,
                            const std::vector<ParamSegment>& segments, const AdamWConfig& c) = 0;

  // ---- state across steps ------------------------------------------------------------------------
  // A backend may keep state per weight from step to step (CUDA: FP8 delayed scaling's amax histories). The
  // weights are named once, after they are allocated, by their parameter names (which outlive the run), so that
  // such state is saved and restored by name. Nothing by default.
  struct NamedWeight {
    std::string name;  // e.g. "model.layers.3.mlp.down_proj.weight"
    Tensor weight;     // where the ops will find it
  };
  virtual void name_weights(const std::vector<NamedWeight>& weights) {}
  // Sharded parameters (ZeRO 3) are gathered unit by unit into buffers the units share, so a weight has no buffer
  // of its own: the weights now in [data, data + bytes) are the ones name_weights was given at [as, as + bytes)
  // (an address range that stands for them and is never read), so that the state kept per weight follows the
  // weight, not the buffer it is in. Holds until [data, ...) is aliased again. Nothing by default.
  virtual void alias_weights(const void* data, size_t bytes, const void* as) {}
  // Called once a step's update is queued (AdamW::step): state that lives from step to step moves on
  // (FP8 delayed scaling commits the amax each cast saw). Nothing by default.
  virtual void end_step() {}
  // FP8 delayed scaling's state, for checkpoints (empty when the backend keeps none): per linear weight, by its
  // name, the amax histories of its x, w and dy, each `history_len` values in ring order, then the amax each has
  // seen since the last commit (an evaluation between two steps), and the number of steps committed (the ring's
  // position). Restoring it before the first cast makes a resumed run scale as the uninterrupted one would; every
  // name must have been given to name_weights.
  struct Fp8ScalingState {
    int history_len = 0;
    int64_t steps = 0;
    std::map<std::string, std::vector<float>> amax;  // 3 x history_len (x, w, dy), then 3 seen since the commit
  };
  virtual Fp8ScalingState fp8_scaling_state() const { return {}; }
  virtual void set_fp8_scaling_state(const Fp8ScalingState& state) {}
  // The amax each FP8 cast of this step has seen so far, by scale slot (delayed scaling; empty otherwise), and their
  // replacement, the same number of values: data-parallel ranks set the maximum over the ranks before end_step()
  // commits them, so that every rank's history, and so its next casts, are alike. Both wait for the device.
  virtual std::vector<float> fp8_amax_seen() { return {}; }
  virtual void set_fp8_amax_seen(const std::vector<float>& amax) {}

  // ---- timing (the profiler) ------------------------------------------------------------------
  // A mark takes the time at its place in the op queue: after every op queued before it has run, and
  // before any op queued after it starts. The default reads the host's steady clock (in ns), which is
  // that place for a backend whose ops run synchronously (the CPU); CUDA records an event on its stream.
  virtual int64_t timing_mark() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Milliseconds from mark a to mark b (may wait until the queue reaches b).
  virtual double timing_elapsed_ms(int64_t a, int64_t b) { return double(b - a) * 1e-6; }
  // Forgets every mark taken so far (a backend may then reuse what they held).
  virtual void timing_reset() {}
  // Names the ops queued between a push and its pop for external profilers (NVTX ranges on CUDA,
  // which Nsight Systems shows); nothing by default.
  virtual void range_push(const char* name) {}
  virtual void range_pop() {}
};

}  // namespace tk
