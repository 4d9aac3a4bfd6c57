// Per-head RMSNorm of q and k (Qwen3) followed by rotary position embedding in Hugging Face's
// "rotate half" convention, and the backward of both. RoPE is a rotation, so its backward is the
// rotation by the opposite angle; angles are computed in double from the integer position and the
// frequencies (plain or scaled, ops.h RopeSpec).
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/op_checks.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/parallel.h"

namespace tk {

namespace {

void check_rope_shape(const AttnShape& s, const RopeSpec& rope, const char* op) {
  check_attn_shape(s, op);
  TK_CHECK(s.head_dim % 2 == 0, "{}: RoPE needs an even head_dim, not {}", op, s.head_dim);
  TK_CHECK(rope.inv_freq.size() == size_t(s.head_dim / 2), "{}: {} RoPE frequencies for head_dim {} (needs {})", op,
           rope.inv_freq.size(), s.head_dim, s.head_dim / 2);
}

// The rotation of token n: cos and sin of p * inv_freq[i] for i < hd/2.
void rope_angles(std::vector<double>& cos_f, std::vector<double>& sin_f, int32_t position, const RopeSpec& rope) {
  const size_t half = rope.inv_freq.size();
  for (size_t i = 0; i < half; i++) {
    const double f = double(position) * rope.inv_freq[i];
    cos_f[i] = std::cos(f);
    sin_f[i] = std::sin(f);
  }
}

// u <- R u: out[i] = u[i] cos - u[i+h] sin, out[i+h] = u[i+h] cos + u[i] sin (h = hd/2).
void rotate(double* u, int hd, const double* c, const double* s) {
  const int half = hd / 2;
  for (int i = 0; i < half; i++) {
    const double a = u[i], b = u[i + half];
    u[i] = a * c[i] - b * s[i];
    u[i + half] = b * c[i] + a * s[i];
  }
}

// u <- R^T u: the gradient through the rotation.
void unrotate(double* u, int hd, const double* c, const double* s) {
  const int half = hd / 2;
  for (int i = 0; i < half; i++) {
    const double a = u[i], b = u[i + half];
    u[i] = a * c[i] + b * s[i];
    u[i + half] = b * c[i] - a * s[i];
  }
}

// Shared checks of the forward and backward; returns N.
template <class T>
int64_t check_qk_inputs(const Tensor& qk_rstd, const Tensor& q_norm_w, const Tensor& k_norm_w,
                        const Tensor& positions, const AttnShape& s, const RopeSpec& rope, const char* op) {
  constexpr DType dt = CpuOps<T>::kDType;
  check_rope_shape(s, rope, op);
  const int64_t N = int64_t(s.B) * s.T;
  TK_CHECK(q_norm_w.empty() == k_norm_w.empty(), "{}: q_norm_w and k_norm_w must be given together", op);
  expect(positions, DType::I32, {N}, op, "positions");
  if (!q_norm_w.empty()) {
    expect(q_norm_w, dt, {s.head_dim}, op, "q_norm_w");
    expect(k_norm_w, dt, {s.head_dim}, op, "k_norm_w");
    expect(qk_rstd, dt, {N, s.n_heads + s.n_kv_heads}, op, "qk_rstd");
  }
  return N;
}

}  // namespace

template <class T>
void CpuOps<T>::qk_norm_rope_forward(const Tensor& qkv_out, const Tensor& qk_rstd, const Tensor& qkv_in,
                                     const Tensor& q_norm_w, const Tensor& k_norm_w, const Tensor& positions,
                                     const AttnShape& s, const RopeSpec& rope, float eps) {
  const char* op = "qk_norm_rope_forward";
  const int64_t N = check_qk_inputs<T>(qk_rstd, q_norm_w, k_norm_w, positions, s, rope, op);
  const int64_t W = s.qkv_width();
  expect(qkv_in, kDType, {N, W}, op, "qkv_in");
  expect(qkv_out, kDType, {N, W}, op, "qkv_out");
  const int hd = s.head_dim, n_rot_heads = s.n_heads + s.n_kv_heads;
  const bool norm = !q_norm_w.empty();
  const T *in = qkv_in.as<T>(), *qw = q_norm_w.as<T>(), *kw = k_norm_w.as<T>();
  const int32_t* pos = positions.as<int32_t>();
  T *out = qkv_out.as<T>(), *rs = qk_rstd.as<T>();

#pragma omp parallel if (N * W >= cpu::kParallelMinWork)
  {
    std::vector<double> u(hd), cos_f(hd / 2), sin_f(hd / 2);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
      rope_angles(cos_f, sin_f, pos[n], rope);
      for (int j = 0; j < n_rot_heads; j++) {  // q heads, then k heads
        const T* src = in + n * W + int64_t(j) * hd;
        for (int i = 0; i < hd; i++) u[i] = src[i];
        if (norm) {
          const T* w = j < s.n_heads ? qw : kw;
          double sum_sq = 0;
          for (int i = 0; i < hd; i++) sum_sq += u[i] * u[i];
          const double r = 1.0 / std::sqrt(sum_sq / hd + double(eps));
          for (int i = 0; i < hd; i++) u[i] *= r * double(w[i]);
          rs[n * n_rot_heads + j] = T(r);
        }
        rotate(u.data(), hd, cos_f.data(), sin_f.data());
        T* dst = out + n * W + int64_t(j) * hd;
        for (int i = 0; i < hd; i++) dst[i] = T(u[i]);
      }
      const int64_t v0 = n * W + int64_t(n_rot_heads) * hd, v_len = int64_t(s.n_kv_heads) * hd;
      if (out != in) std::memcpy(out + v0, in + v0, size_t(v_len) * sizeof(T));
    }
  }
}

template <class T>
void CpuOps<T>::qk_norm_rope_backward(const Tensor& dqkv_in, const Tensor& dq_norm_w, const Tensor& dk_norm_w,
                                      const Tensor& dqkv_out, const Tensor& qkv_in, const Tensor& qk_rstd,
                                      const Tensor& q_norm_w, const Tensor& k_norm_w, const Tensor& positions,
                                      const AttnShape& s, const RopeSpec& rope, float eps) {
  const char* op = "qk_norm_rope_backward";
  const int64_t N = check_qk_inputs<T>(qk_rstd, q_norm_w, k_norm_w, positions, s, rope, op);
  const int64_t W = s.qkv_width();
  expect(dqkv_out, kDType, {N, W}, op, "dqkv_out");
  expect(dqkv_in, kDType, {N, W}, op, "dqkv_in");
  const int hd = s.head_dim, n_rot_heads = s.n_heads + s.n_kv_heads;
  const bool norm = !q_norm_w.empty();
  if (norm) {
    expect(qkv_in, kDType, {N, W}, op, "qkv_in");
    expect(dq_norm_w, kDType, {hd}, op, "dq_norm_w");
    expect(dk_norm_w, kDType, {hd}, op, "dk_norm_w");
  }
  const T *dout = dqkv_out.as<T>(), *x = qkv_in.as<T>(), *rs = qk_rstd.as<T>();
  const T *qw = q_norm_w.as<T>(), *kw = k_norm_w.as<T>();
  const int32_t* pos = positions.as<int32_t>();
  T* din = dqkv_in.as<T>();

  // Norm weight gradients first, while dqkv_out is intact (dqkv_in may alias it):
  // dw[i] += sum over tokens and heads of du[i] * x[i] * r, with du the unrotated gradient.
  // Each thread owns one element i of both weights and walks tokens and heads in order.
  if (norm) {
    T *dqw = dq_norm_w.as<T>(), *dkw = dk_norm_w.as<T>();
    const int half = hd / 2;
#pragma omp parallel for schedule(static) if (N * W >= cpu::kParallelMinWork)
    for (int i = 0; i < hd; i++) {
      const int k = i % half;  // frequency index of element i
      double acc_q = 0, acc_k = 0;
      for (int64_t n = 0; n < N; n++) {
        const double f = double(pos[n]) * rope.inv_freq[size_t(k)];
        const double c = std::cos(f), sn = std::sin(f);
        for (int j = 0; j < n_rot_heads; j++) {
          const T* g = dout + n * W + int64_t(j) * hd;
          const double du = i < half ? double(g[i]) * c + double(g[i + half]) * sn
                                     : double(g[i]) * c - double(g[i - half]) * sn;
          const double contrib = du * double(x[n * W + int64_t(j) * hd + i]) * double(rs[n * n_rot_heads + j]);
          (j < s.n_heads ? acc_q : acc_k) += contrib;
        }
      }
      dqw[i] += T(acc_q);
      dkw[i] += T(acc_k);
    }
  }

#pragma omp parallel if (N * W >= cpu::kParallelMinWork)
  {
    std::vector<double> du(hd), cos_f(hd / 2), sin_f(hd / 2);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
      rope_angles(cos_f, sin_f, pos[n], rope);
      for (int j = 0; j < n_rot_heads; j++) {
        const int64_t at = n * W + int64_t(j) * hd;
        for (int i = 0; i < hd; i++) du[i] = dout[at + i];
        unrotate(du.data(), hd, cos_f.data(), sin_f.data());
        if (norm) {  // through u*r*w: dx = r*g - x * r^3 * mean(g*x), g = du*w
          const T* w = j < s.n_heads ? qw : kw;
          const double r = rs[n * n_rot_heads + j];
          double gx = 0;
          for (int i = 0; i < hd; i++) gx += du[i] * double(w[i]) * double(x[at + i]);
          const double c = r * r * r * gx / hd;
          for (int i = 0; i < hd; i++) du[i] = r * du[i] * double(w[i]) - c * double(x[at + i]);
        }
        for (int i = 0; i < hd; i++) din[at + i] = T(du[i]);
      }
      const int64_t v0 = n * W + int64_t(n_rot_heads) * hd, v_len = int64_t(s.n_kv_heads) * hd;
      if (din != dout) std::memcpy(din + v0, dout + v0, size_t(v_len) * sizeof(T));
    }
  }
}

#define TK_INSTANTIATE_ROPE(T)                                                                                   \
  template void CpuOps<T>::qk_norm_rope_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,      \
                                                const Tensor&, const Tensor&, const AttnShape&, const RopeSpec&, \
                                                float);                                                          \
  template void CpuOps<T>::qk_norm_rope_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,     \
                                                 const Tensor&, const Tensor&, const Tensor&, const Tensor&,     \
                                                 const Tensor&, const AttnShape&, const RopeSpec&, float);
TK_INSTANTIATE_ROPE(float)
TK_INSTANTIATE_ROPE(double)

}  // namespace tk
