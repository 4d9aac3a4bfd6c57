// Attention against a KV cache, for generation: the new tokens' keys and values are appended to the
// cache, then each new query attends to every cached row up to its own position. The same formula as
// attention_forward, with the keys and values read from the cache instead of the packed qkv rows.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/op_checks.h"
#include "ops/cpu/cpu_ops.h"

namespace tk {

template <class T>
void CpuOps<T>::attention_decode(const Tensor& out, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv,
                                 int pos, const AttnShape& s) {
  const char* op = "attention_decode";
  check_attn_shape(s, op);
  TK_CHECK(s.B == 1, "{}: the KV cache holds one sequence, but B is {}", op, s.B);
  const int Hq = s.n_heads, Hkv = s.n_kv_heads, hd = s.head_dim, n_new = s.T;
  TK_CHECK(k_cache.ndim == 3 && k_cache.shape[0] > 0, "{}: k_cache is {} but must be [max_len, {}, {}]", op,
           k_cache.describe(), Hkv, hd);
  const int64_t max_len = k_cache.shape[0];
  expect(k_cache, kDType, {max_len, Hkv, hd}, op, "k_cache");
  expect(v_cache, kDType, {max_len, Hkv, hd}, op, "v_cache");
  expect(qkv, kDType, {n_new, Hq + 2 * Hkv, hd}, op, "qkv");
  expect(out, kDType, {n_new, Hq, hd}, op, "out");
  TK_CHECK(pos >= 0 && pos + n_new <= max_len, "{}: tokens [{}, {}) do not fit a cache of {} positions", op, pos,
           pos + n_new, max_len);

  const int64_t row = int64_t(Hq + 2 * Hkv) * hd, kv_row = int64_t(Hkv) * hd;
  const T* x = qkv.as<T>();
  T *kc = k_cache.as<T>(), *vc = v_cache.as<T>(), *o = out.as<T>();
  for (int i = 0; i < n_new; i++) {
    std::copy_n(x + i * row + int64_t(Hq) * hd, kv_row, kc + (pos + i) * kv_row);
    std::copy_n(x + i * row + int64_t(Hq + Hkv) * hd, kv_row, vc + (pos + i) * kv_row);
  }

  const double scale = 1.0 / std::sqrt(double(hd));
  const int group = Hq / Hkv;
#pragma omp parallel
  {
    std::vector<double> score(size_t(pos + n_new)), acc(hd);
#pragma omp for collapse(2) schedule(static)
    for (int i = 0; i < n_new; i++)
      for (int h = 0; h < Hq; h++) {
        const T* q = x + i * row + int64_t(h) * hd;
        const int64_t kv_offset = int64_t(h / group) * hd;
        const int last = pos + i;
        double max_score = -std::numeric_limits<double>::infinity();
        for (int r = 0; r <= last; r++) {
          const T* k = kc + r * kv_row + kv_offset;
          double dot = 0;
          for (int c = 0; c < hd; c++) dot += double(q[c]) * double(k[c]);
          score[r] = dot * scale;
          max_score = std::max(max_score, score[r]);
        }
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int r = 0; r <= last; r++) {
          const double p = std::exp(score[r] - max_score);
          sum += p;
          const T* v = vc + r * kv_row + kv_offset;
          for (int c = 0; c < hd; c++) acc[c] += p * double(v[c]);
        }
        T* dst = o + (int64_t(i) * Hq + h) * hd;
        for (int c = 0; c < hd; c++) dst[c] = T(acc[c] / sum);
      }
  }
}

template void CpuOps<float>::attention_decode(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int,
                                              const AttnShape&);
template void CpuOps<double>::attention_decode(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int,
                                               const AttnShape&);

}  // namespace tk
