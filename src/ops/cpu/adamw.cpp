// The optimizer's ops: the global gradient norm (for clipping) and AdamW over the flat parameter
// buffer, segment by segment so that weight decay applies to matrices only, with f32/f64, bf16 or
// int8 moments (moment_codec.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/op_checks.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/parallel.h"
#include "ops/moment_codec.h"

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

namespace {

// The update of one element (ops.h adamw_update) in double; m and v are updated in place.
struct AdamWMath {
  double b1, b2, lr, eps, wd, scale, bias1, bias2;
  explicit AdamWMath(const AdamWConfig& c)
      : b1(c.beta1), b2(c.beta2), lr(c.lr), eps(c.eps), wd(c.weight_decay), scale(c.grad_scale),
        bias1(1.0 - std::pow(b1, double(c.step))), bias2(1.0 - std::pow(b2, double(c.step))) {}
  double operator()(double p, double grad, double& m, double& v, bool decay) const {
    const double g = grad * scale;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double mh = m / bias1, vh = v / bias2;
    return p - lr * (mh / (std::sqrt(vh) + eps) + (decay ? wd : 0.0) * p);
  }
};

// The segments sorted by offset; int8 blocks look up the ones they overlap.
std::vector<ParamSegment> sorted_segments(const std::vector<ParamSegment>& segments, const char* op) {
  std::vector<ParamSegment> s = segments;
  std::sort(s.begin(), s.end(), [](const ParamSegment& a, const ParamSegment& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < s.size(); i++)
    TK_CHECK(s[i].offset >= s[i - 1].offset + s[i - 1].count, "{}: the segments [{}, {}) and [{}, {}) overlap", op,
             s[i - 1].offset, s[i - 1].offset + s[i - 1].count, s[i].offset, s[i].offset + s[i].count);
  return s;
}

}  // namespace

template <class T>
void CpuOps<T>::adamw_update(const Tensor& params, const Tensor& master, const Tensor& grads, const Tensor& m,
                             const Tensor& v, const Tensor& m_scale, const Tensor& v_scale,
                             const std::vector<ParamSegment>& segments, const AdamWConfig& c) {
  const char* op = "adamw_update";
  const int64_t P = params.numel();
  expect(params, kDType, {P}, op, "params");
  expect_optional(master, kDType, {P}, op, "master");
  expect(grads, kDType, {P}, op, "grads");
  TK_CHECK(c.step >= 1, "{}: the step is {} but counts from 1 (bias correction divides by 1 - beta^step)", op,
           c.step);
  for (const ParamSegment& seg : segments)
    TK_CHECK(seg.offset >= 0 && seg.count >= 0 && seg.offset + seg.count <= P,
             "{}: the segment [{}, {}) lies outside the {} parameters", op, seg.offset, seg.offset + seg.count, P);
  TK_CHECK(!m.empty() && (m.dtype == kDType || m.dtype == DType::BF16 || m.dtype == DType::I8),
           "{}: m is {}: moments are {}, bf16, or int8 (m i8 and v u8, with block scales)", op,
           m.empty() ? "missing" : m.describe(), dtype_name(kDType));
  TK_CHECK(m.dtype == kDType || kDType == DType::F32,
           "{}: m is {}: the float64 reference keeps f64 moments only (bf16 and int8 moments are for the float32 "
           "backends)", op, m.describe());
  if (m.dtype == DType::I8) {
    expect(v, DType::U8, {P}, op, "v");
    expect(m_scale, DType::F32, {moment_blocks(P)}, op, "m_scale");
    expect(v_scale, DType::F32, {moment_blocks(P)}, op, "v_scale");
  } else {
    expect(m, m.dtype, {P}, op, "m");
    expect(v, m.dtype, {P}, op, "v");
    TK_CHECK(m_scale.empty() && v_scale.empty(), "{}: block scales are given but the moments are {}, not int8", op,
             dtype_name(m.dtype));
  }

  const AdamWMath math(c);
  T *p_act = params.as<T>(), *p_master = master.as<T>();
  const T* gs = grads.as<T>();
  // The master copy is the one updated when present; params then receive it (the same precision here).
  T* p = p_master ? p_master : p_act;
  auto noise = [&](int64_t i, uint32_t which) { return moment_noise(c.step, c.first_index + i, which); };
  auto bf16_noise = [&](int64_t i, uint32_t which) { return bf16_moment_noise(c.step, c.first_index + i, which); };

  if (m.dtype == kDType) {
    T *ms = m.as<T>(), *vs = v.as<T>();
    for (const ParamSegment& seg : segments) {
#pragma omp parallel for schedule(static) if (seg.count >= cpu::kParallelMinWork)
      for (int64_t i = seg.offset; i < seg.offset + seg.count; i++) {
        double mi = double(ms[i]), vi = double(vs[i]);
        p[i] = T(math(double(p[i]), double(gs[i]), mi, vi, seg.decay));
        ms[i] = T(mi);
        vs[i] = T(vi);
        if (p_master) p_act[i] = p[i];
      }
    }
    return;
  }

  if (m.dtype == DType::BF16) {
    uint16_t *ms = m.as<uint16_t>(), *vs = v.as<uint16_t>();
    for (const ParamSegment& seg : segments) {
#pragma omp parallel for schedule(static) if (seg.count >= cpu::kParallelMinWork)
      for (int64_t i = seg.offset; i < seg.offset + seg.count; i++) {
        double mi = moment_from_bf16(ms[i]), vi = moment_from_bf16(vs[i]);
        p[i] = T(math(double(p[i]), double(gs[i]), mi, vi, seg.decay));
        ms[i] = moment_to_bf16_stochastic(float(mi), bf16_noise(i, 0));
        vs[i] = moment_to_bf16_stochastic(float(vi), bf16_noise(i, 1));
        if (p_master) p_act[i] = p[i];
      }
    }
    return;
  }

  // int8: block by block, each decoded, updated where segments cover it, and encoded again.
  const std::vector<ParamSegment> segs = sorted_segments(segments, op);
  const MomentCodeBook& book = moment_code_book();
  int8_t* mq = m.as<int8_t>();
  uint8_t* vq = v.as<uint8_t>();
  float *m_scales = m_scale.as<float>(), *v_scales = v_scale.as<float>();
  const int64_t n_blocks = moment_blocks(P);
#pragma omp parallel for schedule(static) if (P >= cpu::kParallelMinWork)
  for (int64_t blk = 0; blk < n_blocks; blk++) {
    const int64_t lo = blk * kMomentBlock, hi = std::min(P, lo + kMomentBlock);
    // The first segment ending after lo; none, or one starting at or after hi: no element here is updated.
    auto s = std::upper_bound(segs.begin(), segs.end(), lo,
                              [](int64_t x, const ParamSegment& seg) { return x < seg.offset + seg.count; });
    if (s == segs.end() || s->offset >= hi) continue;
    float md[kMomentBlock], vd[kMomentBlock];
    for (int64_t i = lo; i < hi; i++) {
      md[i - lo] = decode_m(book, mq[i], m_scales[blk]);
      vd[i - lo] = decode_v(book, vq[i], v_scales[blk]);
    }
    for (; s != segs.end() && s->offset < hi; ++s) {
      for (int64_t i = std::max(lo, s->offset); i < std::min(hi, s->offset + s->count); i++) {
        double mi = md[i - lo], vi = vd[i - lo];
        p[i] = T(math(double(p[i]), double(gs[i]), mi, vi, s->decay));
        md[i - lo] = float(mi);
        vd[i - lo] = float(vi);
        if (p_master) p_act[i] = p[i];
      }
    }
    float m_max = 0.f, v_max = 0.f;
    for (int64_t k = 0; k < hi - lo; k++) m_max = std::max(m_max, std::abs(md[k])), v_max = std::max(v_max, vd[k]);
    if (m_max < kSmallestNormal) m_max = 0.f;
    if (v_max < kSmallestNormal) v_max = 0.f;
    m_scales[blk] = m_max;
    v_scales[blk] = v_max;
    for (int64_t i = lo; i < hi; i++) {
      mq[i] = encode_m(book, md[i - lo], m_max, noise(i, 0));
      vq[i] = encode_v(book, vd[i - lo], v_max, noise(i, 1));
    }
  }
}

template double CpuOps<float>::grad_norm(const Tensor&);
template double CpuOps<double>::grad_norm(const Tensor&);
template void CpuOps<float>::adamw_update(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                          const Tensor&, const Tensor&, const std::vector<ParamSegment>&,
                                          const AdamWConfig&);
template void CpuOps<double>::adamw_update(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                           const Tensor&, const Tensor&, const std::vector<ParamSegment>&,
                                           const AdamWConfig&);

}  // namespace tk
