// The FP8 linears (fp8_linears.h): the scale slots and their histories, the casts and their guards, the kept x^T,
// and each op's FP8 path: cast the operands (x and w e4m3, dy e5m2) with their slots' scales, then cuBLASLt's FP8
// GEMMs, accumulated in f32.
#include "ops/cuda/fp8_linears.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/fp8_shapes.h"
#include "ops/cuda/workspace_sizes.h"

namespace tk::cuda {
bool fp8_shape(int64_t N, int64_t in, int64_t out, std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands)
    if (!t->empty() && (reinterpret_cast<uintptr_t>(t->data) & 15) != 0) return false;
  return fp8_shapes::gemm(N, in, out);
}

Fp8Linears::Fp8Linears(int device, cudaStream_t stream, const DeviceAlloc& alloc, Matmul& matmul,
                       GrowingBuffer& transient, const char* transient_label)
    : device_(device),
      stream_(stream),
      alloc_(alloc),
      matmul_(matmul),
      transient_(transient),
      transient_label_(transient_label) {}

// ---- settings and the state across steps ------------------------------------------------------------

void Fp8Linears::enable(bool on, Fp8Scaling scaling, int margin) {
  TK_CHECK(margin >= 0 && margin <= 8, "--fp8-margin is {}: it must be 0 to 8 (the scale's headroom, 2^margin)",
           margin);
  if (on) {
    cudaDeviceProp prop{};
    TK_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    TK_CHECK(prop.major * 10 + prop.minor >= 89,
             "--fp8 needs FP8 tensor cores (compute capability 8.9 or newer); {} is {}.{}", prop.name, prop.major,
             prop.minor);
    if (!slots_) {
      // + the recasts' count (16 bytes), then the LM head dlogits' slot (16-byte aligned)
      const size_t slots = size_t(kMaxSlots + 1) * kFp8SlotFloats * sizeof(float) + 16;
      const size_t history = size_t(kMaxSlots) * kFp8HistoryLen * sizeof(float);
      slots_ = static_cast<float*>(alloc_.allocate(slots, "FP8 scales"));
      history_ = static_cast<float*>(alloc_.allocate(history, "FP8 amax history"));
      recasts_ = reinterpret_cast<unsigned long long*>(slots_ + size_t(kMaxSlots) * kFp8SlotFloats);
      dlogits_slot_ = slots_ + size_t(kMaxSlots) * kFp8SlotFloats + 4;
      TK_CUDA_CHECK(cudaMemsetAsync(slots_, 0, slots, stream_));
      TK_CUDA_CHECK(cudaMemsetAsync(history_, 0, history, stream_));
      primed_.assign(kMaxSlots, 0);
      used_.assign(kMaxSlots, 0);
    }
  }
  on_ = on;
  scaling_ = scaling;
  margin_ = std::ldexp(1.f, margin);
}

bool Fp8Linears::primed(const void* w, int role) const {
  const auto it = first_slot_.find(identity(w));
  return it != first_slot_.end() && primed_[size_t(it->second + role)];
}

int64_t Fp8Linears::recasts() const {
  if (!recasts_) return 0;
  unsigned long long n = 0;
  TK_CUDA_CHECK(cudaMemcpyAsync(&n, recasts_, sizeof n, cudaMemcpyDeviceToHost, stream_));
  TK_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return int64_t(n);
}

void Fp8Linears::name_weights(const std::vector<Ops::NamedWeight>& weights) {
  for (const Ops::NamedWeight& nw : weights) {
    name_of_[nw.weight.data] = nw.name;
    weight_named_[nw.name] = nw.weight.data;
  }
}

void Fp8Linears::alias(const void* data, size_t bytes, const void* as) {
  const char* d = static_cast<const char*>(data);
  for (Alias& a : aliases_)
    if (a.data == d) {
      a = {d, bytes, static_cast<const char*>(as)};
      return;
    }
  aliases_.push_back({d, bytes, static_cast<const char*>(as)});
}

const void* Fp8Linears::identity(const void* w) const {
  const char* p = static_cast<const char*>(w);
  for (const Alias& a : aliases_)
    if (p >= a.data && p < a.data + a.bytes) return a.as + (p - a.data);
  return w;
}

void Fp8Linears::end_step() {
  if (!on_ || scaling_ != Fp8Scaling::Delayed || first_slot_.empty()) return;
  const int n = int(first_slot_.size()) * 3;
  fp8_commit_amax(slots_, history_, n, kFp8HistoryLen, int(steps_ % kFp8HistoryLen), margin_, recasts_, stream_);
  for (int i = 0; i < n; i++) {
    primed_[size_t(i)] |= used_[size_t(i)];
    used_[size_t(i)] = 0;
  }
  steps_++;
}

std::vector<float> Fp8Linears::amax_seen() const {
  if (!on_ || scaling_ != Fp8Scaling::Delayed || first_slot_.empty()) return {};
  std::vector<float> amax(first_slot_.size() * 3);
  TK_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Slot i's [1], kFp8SlotFloats floats apart on the device, packed.
  TK_CUDA_CHECK(cudaMemcpy2D(amax.data(), sizeof(float), slots_ + 1, kFp8SlotFloats * sizeof(float), sizeof(float),
                             amax.size(), cudaMemcpyDeviceToHost));
  return amax;
}

void Fp8Linears::set_amax_seen(const std::vector<float>& amax) {
  if (amax.empty()) return;
  TK_CHECK(amax.size() == first_slot_.size() * 3, "internal error: {} FP8 amax values for {} scale slots", amax.size(),
           first_slot_.size() * 3);
  TK_CUDA_CHECK(cudaMemcpy2DAsync(slots_ + 1, kFp8SlotFloats * sizeof(float), amax.data(), sizeof(float),
                                  sizeof(float), amax.size(), cudaMemcpyHostToDevice, stream_));
  TK_CUDA_CHECK(cudaStreamSynchronize(stream_));  // amax is the caller's
}

Ops::Fp8ScalingState Fp8Linears::state() const {
  Ops::Fp8ScalingState st;
  if (!on_ || scaling_ != Fp8Scaling::Delayed) return st;
  st.history_len = kFp8HistoryLen;
  st.steps = steps_;
  const size_t per = size_t(3) * kFp8HistoryLen, n = first_slot_.size() * 3;
  std::vector<float> all(n * kFp8HistoryLen), slots(n * kFp8SlotFloats);
  if (n > 0) {
    TK_CUDA_CHECK(cudaStreamSynchronize(stream_));
    TK_CUDA_CHECK(cudaMemcpy(all.data(), history_, all.size() * sizeof(float), cudaMemcpyDeviceToHost));
    TK_CUDA_CHECK(cudaMemcpy(slots.data(), slots_, slots.size() * sizeof(float), cudaMemcpyDeviceToHost));
  }
  for (const auto& [w, first] : first_slot_) {
    const auto name = name_of_.find(w);
    TK_CHECK(name != name_of_.end(), "internal error: an FP8 scale belongs to a weight that was never named "
                                     "(Ops::name_weights)");
    const float* h = all.data() + size_t(first) * kFp8HistoryLen;
    std::vector<float> v(h, h + per);
    for (int r = 0; r < 3; r++) v.push_back(slots[(size_t(first) + size_t(r)) * kFp8SlotFloats + 1]);
    st.amax[name->second] = std::move(v);
  }
  return st;
}

void Fp8Linears::restore(const Ops::Fp8ScalingState& st) {
  if (!on_ || scaling_ != Fp8Scaling::Delayed || st.amax.empty()) return;
  TK_CHECK(st.history_len == kFp8HistoryLen, "the FP8 amax history saved has {} steps a value, this build keeps {}",
           st.history_len, kFp8HistoryLen);
  TK_CHECK(first_slot_.empty(), "internal error: FP8 scaling state restored after the first FP8 cast");
  const size_t per = size_t(3) * kFp8HistoryLen;
  std::vector<float> history(st.amax.size() * per), slots(st.amax.size() * 3 * kFp8SlotFloats, 0.f);
  size_t e = 0;
  for (const auto& [name, amax] : st.amax) {
    const auto w = weight_named_.find(name);
    TK_CHECK(w != weight_named_.end(), "the FP8 scales name {}, a weight the backend was not given (Ops::name_weights)",
             name);
    TK_CHECK(amax.size() == per + 3, "an FP8 amax history holds {} values where {} were expected", amax.size(),
             per + 3);
    TK_CHECK(3 * (e + 1) <= size_t(kMaxSlots), "--fp8 keeps scales for at most {} linear layers", kMaxSlots / 3);
    first_slot_[w->second] = int(e) * 3;
    std::copy(amax.begin(), amax.begin() + ptrdiff_t(per), history.begin() + ptrdiff_t(e * per));
    for (int r = 0; r < 3; r++) {
      const float* v = amax.data() + r * kFp8HistoryLen;
      const float mx = *std::max_element(v, v + kFp8HistoryLen);
      const float seen = amax[per + size_t(r)];
      slots[(e * 3 + size_t(r)) * kFp8SlotFloats] = mx * margin_;  // as fp8_commit_amax leaves it
      slots[(e * 3 + size_t(r)) * kFp8SlotFloats + 1] = seen;
      primed_[e * 3 + size_t(r)] = mx > 0.f;
      used_[e * 3 + size_t(r)] = seen > 0.f;
    }
    e++;
  }
  TK_CUDA_CHECK(cudaMemcpyAsync(history_, history.data(), history.size() * sizeof(float), cudaMemcpyHostToDevice,
                                stream_));
  TK_CUDA_CHECK(cudaMemcpyAsync(slots_, slots.data(), slots.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  TK_CUDA_CHECK(cudaStreamSynchronize(stream_));
  steps_ = st.steps;
}

void Fp8Linears::drop_within(const void* begin, size_t bytes) {
  // A later allocation at the same address holds other data.
  const uintptr_t b = reinterpret_cast<uintptr_t>(begin), end = b + bytes;
  for (auto it = kept_xt_.begin(); it != kept_xt_.end();) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(it->first);
    it = a >= b && a < end ? kept_xt_.erase(it) : std::next(it);
  }
}

// ---- slots, casts and guards -------------------------------------------------------------------------

// The slot of operand `role` (0: x, 1: w, 2: dy) of the linear with weight w, its scale set for a cast of x[n]: an
// amax pass over x unless delayed scaling has a committed amax for it.
float* Fp8Linears::slot(const void* w, int role, const bf16* x, int64_t n) {
  const auto it = first_slot_.try_emplace(identity(w), int(first_slot_.size()) * 3).first;
  TK_CHECK(it->second + 3 <= kMaxSlots, "--fp8 keeps scales for at most {} linear layers", kMaxSlots / 3);
  const int i = it->second + role;
  float* s = slots_ + int64_t(i) * kFp8SlotFloats;
  used_[size_t(i)] = 1;
  if (scaling_ == Fp8Scaling::Current || !primed_[size_t(i)]) amax_bf16(s, x, n, stream_);
  return s;
}

// The slot as the op that kept an x^T left it: no amax pass, whether or not a committed step primed it (the first
// step's forward took the pass itself).
float* Fp8Linears::slot_as_kept(const void* w, int role) {
  const int i = first_slot_.at(identity(w)) + role;
  used_[size_t(i)] = 1;
  return slots_ + int64_t(i) * kFp8SlotFloats;
}

// The cast of x[rows, cols] into x8 and/or xt8 with the slot's scale (recording what it saw when delayed).
void Fp8Linears::cast(uint8_t* x8, uint8_t* xt8, float* s, const bf16* x, int64_t rows, int64_t cols, Fp8Format f) {
  if (scaling_ != Fp8Scaling::Delayed) {
    quantize_fp8(x8, xt8, s + 4, x, rows, cols, s, f, stream_);
    return;
  }
  // Delayed: the cast records what it saw; a cast that saturated is done again with that (the guard, launched
  // with the op's other casts' guards before its GEMMs: flush_guards).
  quantize_fp8(x8, xt8, s + 4, x, rows, cols, s, f, stream_, s + 1);
  if (guards_.size() == size_t(kFp8MaxGuarded)) flush_guards();
  guards_.push_back({x8, xt8, s + 4, x, rows, cols, s, s + 1, reinterpret_cast<unsigned int*>(s + 2), f});
}

void Fp8Linears::flush_guards() {
  fp8_guard_all(guards_.data(), int(guards_.size()), stream_);
  guards_.clear();
}

// Space in the transient buffer for the given operands (element counts, 0: not needed), carved as
// workspace_sizes.h's transient_bytes counts them.
template <size_t K>
std::array<uint8_t*, K> Fp8Linears::space(const std::array<int64_t, K>& sizes) {
  auto* base = static_cast<uint8_t*>(transient_.ensure(alloc_, transient_bytes(sizes), transient_label_));
  std::array<uint8_t*, K> out{};
  for (size_t i = 0; i < K; i++) {
    out[i] = sizes[i] > 0 ? base : nullptr;
    base += transient_part_bytes(sizes[i]);
  }
  return out;
}

// linear_backward's FP8 GEMMs once dy is cast (dy8 / dyt8 with the scale in slot sdy): w^T and x^T cast, then
// dx = dy w and dw += dy^T x.
void Fp8Linears::backward_gemms(const Tensor& dx, const Tensor& dw, uint8_t* dy8, uint8_t* dyt8, float* sdy,
                                uint8_t* wt8, uint8_t* xt8, const Tensor& x, const Tensor& w, int64_t N, int64_t in,
                                int64_t out) {
  float *sw = nullptr, *sx = nullptr;
  if (!dx.empty()) {
    sw = slot(w.data, 1, w.as<bf16>(), out * in);
    cast(nullptr, wt8, sw, w.as<bf16>(), out, in, Fp8Format::E4M3);
  }
  if (!dw.empty()) {
    const auto kept = kept_xt_.find(x.data);
    if (kept != kept_xt_.end()) {
      TK_CHECK(kept->second == identity(w.data),
               "linear_backward: x holds the FP8 transpose a fused forward wrote for another linear");
      kept_xt_.erase(kept);
      sx = slot_as_kept(w.data, 0);  // the forward's scale; its guard saw to saturation
      xt8 = static_cast<uint8_t*>(x.data);
    } else {
      sx = slot(w.data, 0, x.as<bf16>(), N * in);
      cast(nullptr, xt8, sx, x.as<bf16>(), N, in, Fp8Format::E4M3);
    }
  }
  flush_guards();
  if (sw) matmul_.linear_backward_input_fp8(dx.as<bf16>(), dy8, sdy + 4, wt8, sw + 4, N, in, out);
  if (sx) matmul_.linear_backward_weight_fp8(dw.as<float>(), dyt8, sdy + 4, xt8, sx + 4, N, in, out);
}

// ---- the ops' FP8 paths --------------------------------------------------------------------------------

void Fp8Linears::linear_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, int64_t N,
                                int64_t in, int64_t out) {
  const auto [x8, w8] = space(fp8_forward_parts(N, in, out));
  float* sx = slot(w.data, 0, x.as<bf16>(), N * in);
  cast(x8, nullptr, sx, x.as<bf16>(), N, in, Fp8Format::E4M3);
  float* sw = slot(w.data, 1, w.as<bf16>(), out * in);
  cast(w8, nullptr, sw, w.as<bf16>(), out, in, Fp8Format::E4M3);
  flush_guards();
  matmul_.linear_forward_fp8(y.as<bf16>(), x8, sx + 4, w8, sw + 4, bias.as<bf16>(), N, in, out);
}

void Fp8Linears::linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x,
                                 const Tensor& w, int64_t N, int64_t in, int64_t out) {
  const auto [dy8, dyt8, wt8, xt8] = space(fp8_backward_parts(N, in, out, !dx.empty(), !dw.empty()));
  float* sdy = slot(w.data, 2, dy.as<bf16>(), N * out);
  cast(dy8, dyt8, sdy, dy.as<bf16>(), N, out, Fp8Format::E5M2);
  backward_gemms(dx, dw, dy8, dyt8, sdy, wt8, xt8, x, w, N, in, out);
}

// The backward needs act only for the weight gradient's x^T: that is what act's memory keeps, so the bf16 output is
// never kept and the backward casts nothing for it. Once the operand has a history the cast is fused into SwiGLU;
// before (the first step, act one byte an element) SwiGLU's output goes to bf16 scratch after the FP8 operands,
// then its amax and the cast both ways: the bytes the unfused ops give.
void Fp8Linears::swiglu_linear_forward(const Tensor& y, const Tensor& act, const Tensor& gate_up, const Tensor& w,
                                       int64_t N, int64_t f, bool fused) {
  const int64_t out = w.dim(0), in = f;
  const bool first = !fused;
  const auto [x8, w8, scratch] = space(fp8_kept_forward_parts(N, in, out, first));
  auto* xt8 = static_cast<uint8_t*>(act.data);
  float* sx = nullptr;
  if (first) {
    auto* x = reinterpret_cast<bf16*>(scratch);
    swiglu_forward(x, gate_up.as<bf16>(), N, int(f), stream_);
    sx = slot(w.data, 0, x, N * in);
    cast(x8, xt8, sx, x, N, in, Fp8Format::E4M3);
  } else {
    sx = slot(w.data, 0, nullptr, 0);  // primed: no amax pass
    fused_casts_++;
    swiglu_forward_fp8(nullptr, x8, xt8, sx + 4, gate_up.as<bf16>(), N, int(f), sx, sx + 1, Fp8Format::E4M3, stream_);
    guards_.push_back({x8, xt8, sx + 4, nullptr, N, in, sx, sx + 1, reinterpret_cast<unsigned int*>(sx + 2),
                       Fp8Format::E4M3, gate_up.as<bf16>()});
  }
  kept_xt_[act.data] = identity(w.data);
  float* sw = slot(w.data, 1, w.as<bf16>(), out * in);
  cast(w8, nullptr, sw, w.as<bf16>(), out, in, Fp8Format::E4M3);
  flush_guards();
  matmul_.linear_forward_fp8(y.as<bf16>(), x8, sx + 4, w8, sw + 4, nullptr, N, in, out);
}

// As for SwiGLU's output: x_norm's memory keeps the transpose the weight gradient takes, not the bf16 values. Once
// the operand has a history the norm writes no output and its cast is fused; before (the first step, x_norm one
// byte an element) the norm writes bf16 scratch after the FP8 operands, then its amax and the cast.
void Fp8Linears::rmsnorm_linear_forward(const Tensor& y, const Tensor& x_norm, const Tensor& rstd, const Tensor& h_out,
                                        const Tensor& h_in, const Tensor& x, const Tensor& norm_w, const Tensor& w,
                                        const Tensor& bias, float eps, int64_t N, int64_t d, bool fused) {
  const int64_t out = w.dim(0), in = d;
  const bool first = !fused;
  const auto [x8, w8, scratch] = space(fp8_kept_forward_parts(N, in, out, first));
  auto* y_first = reinterpret_cast<bf16*>(scratch);  // null when fused
  const bf16* h = x.as<bf16>();  // the norm's input
  if (h_in.empty()) {
    rmsnorm_forward(y_first, rstd.as<float>(), x.as<bf16>(), norm_w.as<bf16>(), N, int(d), eps, stream_);
  } else {
    residual_rmsnorm_forward(h_out.as<bf16>(), y_first, rstd.as<float>(), h_in.as<bf16>(), x.as<bf16>(),
                             norm_w.as<bf16>(), N, int(d), eps, stream_);
    h = h_out.as<bf16>();
  }
  auto* xt8 = static_cast<uint8_t*>(x_norm.data);
  float* sx = nullptr;
  if (first) {
    sx = slot(w.data, 0, y_first, N * in);
    cast(x8, xt8, sx, y_first, N, in, Fp8Format::E4M3);
  } else {
    sx = slot(w.data, 0, nullptr, 0);  // primed: no amax pass
    fused_casts_++;
    rmsnorm_cast_fp8(x8, xt8, sx + 4, h, rstd.as<float>(), norm_w.as<bf16>(), N, int(d), sx, sx + 1, Fp8Format::E4M3,
                     stream_);
    guards_.push_back({x8, xt8, sx + 4, h, N, in, sx, sx + 1, reinterpret_cast<unsigned int*>(sx + 2),
                       Fp8Format::E4M3, nullptr, rstd.as<float>(), norm_w.as<bf16>()});
  }
  kept_xt_[x_norm.data] = identity(w.data);
  float* sw = slot(w.data, 1, w.as<bf16>(), out * in);
  cast(w8, nullptr, sw, w.as<bf16>(), out, in, Fp8Format::E4M3);
  flush_guards();
  matmul_.linear_forward_fp8(y.as<bf16>(), x8, sx + 4, w8, sw + 4, bias.as<bf16>(), N, in, out);
}

// SwiGLU's gradient cast to FP8 as it is computed (its scale is known before the values are).
void Fp8Linears::swiglu_linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dout, const Tensor& gate_up,
                                        const Tensor& x, const Tensor& w, int64_t N, int64_t f) {
  const int64_t out = 2 * f, in = w.dim(1);
  const auto [dy8, dyt8, wt8, xt8] = space(fp8_backward_parts(N, in, out, !dx.empty(), !dw.empty()));
  float* sdy = slot(w.data, 2, nullptr, 0);  // primed: no amax pass
  fused_casts_++;
  swiglu_backward_fp8(dy8, dyt8, sdy + 4, dout.as<bf16>(), gate_up.as<bf16>(), N, int(f), sdy, sdy + 1,
                      reinterpret_cast<unsigned int*>(sdy + 2), Fp8Format::E5M2, stream_);
  backward_gemms(dx, dw, dy8, dyt8, sdy, wt8, xt8, x, w, N, in, out);
}

// Per chunk of token rows: x's rows cast (as is for the logits, transposed for dw), the logits' GEMM, the softmax
// rows writing the dlogits in e5m2 with the scale of their bound (for dx), their transpose (for dw), then the two
// gradient GEMMs. The weight is cast once a call (as is for the logits, transposed for dx). Every operand lives in
// the transient buffer, after the logits chunk.
void Fp8Linears::lm_head_cross_entropy(const Tensor& losses, const Tensor& dx, const Tensor& dw, const Tensor& x,
                                       const Tensor& w, const Tensor& targets, float grad_scale, int ignore_index,
                                       int64_t N, int64_t d, int64_t V, int64_t rows) {
  const bool want_dx = !dx.empty(), want_dw = !dw.empty(), grads = want_dx || want_dw;
  const auto [logit_bytes, dl8, dlt8, w8, wt8, x8, xt8] = space(fp8_lm_head_parts(rows, V, d, want_dx, want_dw));
  auto* logits = reinterpret_cast<bf16*>(logit_bytes);
  float* sw = slot(w.data, 1, w.as<bf16>(), V * d);
  cast(w8, wt8, sw, w.as<bf16>(), V, d, Fp8Format::E4M3);
  float* sx = slot(w.data, 0, x.as<bf16>(), N * d);
  float* sdl = dlogits_slot_;
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    cast(x8, xt8, sx, x.as<bf16>() + r0 * d, n, d, Fp8Format::E4M3);
    flush_guards();
    matmul_.linear_forward_fp8(logits, x8, sx + 4, w8, sw + 4, nullptr, n, d, V);
    if (!grads) {
      cross_entropy_chunk(logits, losses.as<float>() + r0, targets.as<int32_t>() + r0, n, V, grad_scale, ignore_index,
                          false, stream_);
      continue;
    }
    cross_entropy_chunk_fp8(logits, dl8, sdl + 4, losses.as<float>() + r0, targets.as<int32_t>() + r0, n, V,
                            grad_scale, ignore_index, stream_);
    if (want_dw) transpose_bytes(dlt8, dl8, n, V, stream_);
    if (want_dx) matmul_.linear_backward_input_fp8(dx.as<bf16>() + r0 * d, dl8, sdl + 4, wt8, sw + 4, n, d, V);
    if (want_dw) matmul_.linear_backward_weight_fp8(dw.as<float>(), dlt8, sdl + 4, xt8, sx + 4, n, d, V);
  }
}

}  // namespace tk::cuda
