// Causal softmax attention with grouped-query heads and an optional document mask, written as the
// textbook matrices per (batch row, head): S = q k^T / sqrt(hd), P = softmax(S) under the mask,
// out = P v. The products are OpenBLAS GEMMs (the masked half of S is computed and discarded); the
// backward recomputes P from the saved log-sum-exp, as the fused GPU kernels do.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/blas.h"
#include "ops/op_checks.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/vec_exp.h"

namespace tk {

namespace {

// Index arithmetic of the packed layouts, in one place:
//   qkv[b, t, j, :] with j < Hq the query heads, then Hkv key heads, then Hkv value heads;
//   out[b, t, h, :];  lse[b, h, t].
// One head's rows over t are a strided matrix: leading dimension ld_qkv() or ld_out().
struct AttnIndex {
  AttnShape s;
  int ld_qkv() const { return (s.n_heads + 2 * s.n_kv_heads) * s.head_dim; }
  int ld_out() const { return s.n_heads * s.head_dim; }
  int64_t q(int b, int h) const { return int64_t(b) * s.T * ld_qkv() + int64_t(h) * s.head_dim; }
  int64_t k(int b, int g) const { return q(b, s.n_heads + g); }
  int64_t v(int b, int g) const { return q(b, s.n_heads + s.n_kv_heads + g); }
  int64_t out(int b, int h) const { return int64_t(b) * s.T * ld_out() + int64_t(h) * s.head_dim; }
  int64_t lse(int b, int h) const { return (int64_t(b) * s.n_heads + h) * s.T; }
  int kv_head(int h) const { return h / (s.n_heads / s.n_kv_heads); }
};

// Key j is visible from query t: causal, and in the same document when segment ids are given.
bool visible(const int32_t* seg_row, int j, int t) {
  return j <= t && (seg_row == nullptr || seg_row[j] == seg_row[t]);
}

// Row t of the scores becomes softmax probabilities over the visible keys (0 elsewhere); returns the
// row's log-sum-exp. The diagonal is always visible, so the sum is at least 1.
template <class T>
double softmax_row(T* row, int t, int T_len, const int32_t* seg_row) {
  double max_score = -std::numeric_limits<double>::infinity();
  for (int j = 0; j <= t; j++)
    if (visible(seg_row, j, t)) max_score = std::max(max_score, double(row[j]));
  double sum = 0;
  for (int j = 0; j < T_len; j++) {
    row[j] = visible(seg_row, j, t) ? cpu::vec_exp(T(double(row[j]) - max_score)) : T(0);
    sum += double(row[j]);
  }
  for (int j = 0; j <= t; j++) row[j] = T(double(row[j]) / sum);
  return max_score + std::log(sum);
}

// Row t of the scores becomes the probabilities exp(S - lse) the forward had (0 where masked).
template <class T>
void probabilities_row(T* row, int t, int T_len, const int32_t* seg_row, double lse) {
  for (int j = 0; j < T_len; j++) row[j] = visible(seg_row, j, t) ? cpu::vec_exp(T(double(row[j]) - lse)) : T(0);
}

template <class T>
void check_attention_inputs(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& segment_ids,
                            const AttnShape& s, const char* op) {
  constexpr DType dt = CpuOps<T>::kDType;
  check_attn_shape(s, op);
  expect(qkv, dt, {s.B, s.T, s.n_heads + 2 * s.n_kv_heads, s.head_dim}, op, "qkv");
  expect(out, dt, {s.B, s.T, s.n_heads, s.head_dim}, op, "out");
  expect(lse, dt, {s.B, s.n_heads, s.T}, op, "lse");
  expect_optional(segment_ids, DType::I32, {s.B, s.T}, op, "segment_ids");
}

}  // namespace

template <class T>
void CpuOps<T>::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, const Tensor& segment_ids,
                                  const AttnShape& s) {
  check_attention_inputs<T>(qkv, out, lse, segment_ids, s, "attention_forward");
  const AttnIndex ix{s};
  const int Tn = s.T, hd = s.head_dim;
  const T scale = T(1.0 / std::sqrt(double(hd)));
  const T* x = qkv.as<T>();
  const int32_t* seg = segment_ids.as<int32_t>();
  T *o = out.as<T>(), *l = lse.as<T>();
  std::vector<T> scores(size_t(Tn) * Tn);

  // One (b, h) at a time, the GEMMs on BLAS's threads. The softmax rows stay on this thread: an OpenMP
  // region between every two GEMMs makes its threads and BLAS's fight over the cores (measured: 6x slower).
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.n_heads; h++) {
      const int g = ix.kv_head(h);
      const int32_t* seg_row = seg ? seg + int64_t(b) * Tn : nullptr;
      cpu::gemm(false, true, Tn, Tn, hd, scale, x + ix.q(b, h), ix.ld_qkv(), x + ix.k(b, g), ix.ld_qkv(), T(0),
                scores.data(), Tn);
      for (int t = 0; t < Tn; t++)
        l[ix.lse(b, h) + t] = T(softmax_row(scores.data() + int64_t(t) * Tn, t, Tn, seg_row));
      cpu::gemm(false, false, Tn, hd, Tn, T(1), scores.data(), Tn, x + ix.v(b, g), ix.ld_qkv(), T(0), o + ix.out(b, h),
                ix.ld_out());
    }
}

// With P the probabilities and dP = dout v^T:  dS = P * (dP - rowsum(dout * out)) (elementwise),
// dq = dS k / sqrt(hd),  dk = dS^T q / sqrt(hd),  dv = P^T dout. The query heads sharing a kv head add
// their dk and dv in order (the first writes, the others accumulate).
template <class T>
void CpuOps<T>::attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                   const Tensor& lse, const Tensor& segment_ids, const AttnShape& s) {
  const char* op = "attention_backward";
  check_attention_inputs<T>(qkv, out, lse, segment_ids, s, op);
  expect(dout, kDType, {s.B, s.T, s.n_heads, s.head_dim}, op, "dout");
  expect(dqkv, kDType, {s.B, s.T, s.n_heads + 2 * s.n_kv_heads, s.head_dim}, op, "dqkv");
  const AttnIndex ix{s};
  const int Tn = s.T, hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const T scale = T(1.0 / std::sqrt(double(hd)));
  const T *x = qkv.as<T>(), *o = out.as<T>(), *go = dout.as<T>(), *l = lse.as<T>();
  const int32_t* seg = segment_ids.as<int32_t>();
  T* dx = dqkv.as<T>();
  std::vector<T> probs(size_t(Tn) * Tn), dscores(size_t(Tn) * Tn);
  // As in the forward, one (b, h) at a time with the rows on this thread, between BLAS calls.

  for (int b = 0; b < s.B; b++)
    for (int g = 0; g < s.n_kv_heads; g++)
      for (int h = g * group; h < (g + 1) * group; h++) {
        const int32_t* seg_row = seg ? seg + int64_t(b) * Tn : nullptr;
        const T *q = x + ix.q(b, h), *k = x + ix.k(b, g), *v = x + ix.v(b, g), *dout_h = go + ix.out(b, h);
        const T kv_beta = h == g * group ? T(0) : T(1);
        cpu::gemm(false, true, Tn, Tn, hd, scale, q, ix.ld_qkv(), k, ix.ld_qkv(), T(0), probs.data(), Tn);
        for (int t = 0; t < Tn; t++)
          probabilities_row(probs.data() + int64_t(t) * Tn, t, Tn, seg_row, double(l[ix.lse(b, h) + t]));
        // dv (+)= P^T dout;  dP = dout v^T
        cpu::gemm(true, false, Tn, hd, Tn, T(1), probs.data(), Tn, dout_h, ix.ld_out(), kv_beta, dx + ix.v(b, g),
                  ix.ld_qkv());
        cpu::gemm(false, true, Tn, Tn, hd, T(1), dout_h, ix.ld_out(), v, ix.ld_qkv(), T(0), dscores.data(), Tn);
        for (int t = 0; t < Tn; t++) {
          const T *dout_t = dout_h + int64_t(t) * ix.ld_out(), *out_t = o + ix.out(b, h) + int64_t(t) * ix.ld_out();
          double dout_dot_out = 0;
          for (int i = 0; i < hd; i++) dout_dot_out += double(dout_t[i]) * double(out_t[i]);
          T* ds = dscores.data() + int64_t(t) * Tn;
          const T* p = probs.data() + int64_t(t) * Tn;
          for (int j = 0; j < Tn; j++) ds[j] = T(double(p[j]) * (double(ds[j]) - dout_dot_out));
        }
        // dq = dS k * scale;  dk (+)= dS^T q * scale
        cpu::gemm(false, false, Tn, hd, Tn, scale, dscores.data(), Tn, k, ix.ld_qkv(), T(0), dx + ix.q(b, h),
                  ix.ld_qkv());
        cpu::gemm(true, false, Tn, hd, Tn, scale, dscores.data(), Tn, q, ix.ld_qkv(), kv_beta, dx + ix.k(b, g),
                  ix.ld_qkv());
      }
}

#define TK_INSTANTIATE_ATTENTION(T)                                                                          \
  template void CpuOps<T>::attention_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,     \
                                             const AttnShape&);                                              \
  template void CpuOps<T>::attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,    \
                                              const Tensor&, const Tensor&, const AttnShape&);
TK_INSTANTIATE_ATTENTION(float)
TK_INSTANTIATE_ATTENTION(double)

}  // namespace tk
