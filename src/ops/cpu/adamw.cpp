// The optimizer's ops: the global gradient norm (for clipping) and AdamW over the flat parameter
// buffer, segment by segment so that weight decay applies to matrices only.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/op_checks.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/parallel.h"

namespace tk {

template <class T>
double CpuOps<T>::grad_norm(const Tensor& grads) {
  const char* op = "grad_norm";
  const int64_t P = grads.numel();
  expect(grads, kDType, {P}, op, "grads");
  // Fixed-size blocks summed in parallel, then the block sums added in order: the same bits whatever
  // the thread count.
  constexpr int64_t kBlock = 1 << 16;
  const int64_t n_blocks = (P + kBlock - 1) / kBlock;
  std::vector<double> block_sums(size_t(n_blocks), 0.0);
  const T* g = grads.as<T>();
#pragma omp parallel for schedule(static) if (P >= cpu::kParallelMinWork)
  for (int64_t b = 0; b < n_blocks; b++) {
    double acc = 0;
    for (int64_t i = b * kBlock; i < std::min(P, (b + 1) * kBlock); i++) acc += double(g[i]) * double(g[i]);
    block_sums[b] = acc;
  }
  double total = 0;
  for (double s : block_sums) total += s;
  return std::sqrt(total);
}

template <class T>
void CpuOps<T>::adamw_update(const Tensor& params, const Tensor& master, const Tensor& grads, const Tensor& m,
                             const Tensor& v, const std::vector<ParamSegment>& segments, const AdamWConfig& c) {
  const char* op = "adamw_update";
  const int64_t P = params.numel();
  expect(params, kDType, {P}, op, "params");
  expect_optional(master, kDType, {P}, op, "master");
  expect(grads, kDType, {P}, op, "grads");
  expect(m, kDType, {P}, op, "m");
  expect(v, kDType, {P}, op, "v");
  TK_CHECK(c.step >= 1, "{}: the step is {} but counts from 1 (bias correction divides by 1 - beta^step)", op,
           c.step);
  for (const ParamSegment& seg : segments)
    TK_CHECK(seg.offset >= 0 && seg.count >= 0 && seg.offset + seg.count <= P,
             "{}: the segment [{}, {}) lies outside the {} parameters", op, seg.offset, seg.offset + seg.count, P);

  const double b1 = c.beta1, b2 = c.beta2, lr = c.lr, eps = c.eps, wd = c.weight_decay, scale = c.grad_scale;
  const double bias1 = 1.0 - std::pow(b1, double(c.step)), bias2 = 1.0 - std::pow(b2, double(c.step));
  T *p_act = params.as<T>(), *p_master = master.as<T>(), *ms = m.as<T>(), *vs = v.as<T>();
  const T* gs = grads.as<T>();
  // The master copy is the one updated when present; params then receive it (the same precision here).
  T* p = p_master ? p_master : p_act;

  for (const ParamSegment& seg : segments) {
    const double decay = seg.decay ? wd : 0.0;
#pragma omp parallel for schedule(static) if (seg.count >= cpu::kParallelMinWork)
    for (int64_t i = seg.offset; i < seg.offset + seg.count; i++) {
      const double g = double(gs[i]) * scale;
      const double mi = b1 * double(ms[i]) + (1 - b1) * g;
      const double vi = b2 * double(vs[i]) + (1 - b2) * g * g;
      const double mh = mi / bias1, vh = vi / bias2;
      const double pi = double(p[i]);
      p[i] = T(pi - lr * (mh / (std::sqrt(vh) + eps) + decay * pi));
      ms[i] = T(mi);
      vs[i] = T(vi);
      if (p_master) p_act[i] = p[i];
    }
  }
}

template double CpuOps<float>::grad_norm(const Tensor&);
template double CpuOps<double>::grad_norm(const Tensor&);
template void CpuOps<float>::adamw_update(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                          const std::vector<ParamSegment>&, const AdamWConfig&);
template void CpuOps<double>::adamw_update(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                           const std::vector<ParamSegment>&, const AdamWConfig&);

}  // namespace tk
