// RMSNorm, alone and fused with the residual add before it, and its backward with the residual
// gradient folded in. Sums run in double so the reference is exact to well below float rounding.
#include <algorithm>
#include <cmath>

#include "ops/op_checks.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/parallel.h"

namespace tk {

namespace {

// One row: rstd = 1/sqrt(mean(h^2) + eps), y = h * rstd * w.
template <class T>
void rmsnorm_row(T* y, T* rstd, const T* h, const T* w, int64_t d, float eps) {
  double sum_sq = 0;
#pragma omp simd reduction(+ : sum_sq)
  for (int64_t i = 0; i < d; i++) sum_sq += double(h[i]) * double(h[i]);
  const double r = 1.0 / std::sqrt(sum_sq / double(d) + double(eps));
#pragma omp simd
  for (int64_t i = 0; i < d; i++) y[i] = T(double(h[i]) * r * double(w[i]));
  *rstd = T(r);
}

}  // namespace

template <class T>
void CpuOps<T>::rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, float eps) {
  const char* op = "rmsnorm_forward";
  TK_CHECK(x.ndim >= 1, "{}: x is {} but must be [N, d]", op, x.describe());
  const int64_t d = x.dim(-1), N = x.numel() / std::max<int64_t>(d, 1);
  expect(x, kDType, {N, d}, op, "x");
  expect(w, kDType, {d}, op, "w");
  expect(y, kDType, {N, d}, op, "y");
  expect(rstd, kDType, {N}, op, "rstd");
  const T *xs = x.as<T>(), *ws = w.as<T>();
  T *ys = y.as<T>(), *rs = rstd.as<T>();
#pragma omp parallel for schedule(static) if (N * d >= cpu::kParallelMinWork)
  for (int64_t n = 0; n < N; n++) rmsnorm_row(ys + n * d, rs + n, xs + n * d, ws, d, eps);
}

template <class T>
void CpuOps<T>::residual_rmsnorm_forward(const Tensor& h_out, const Tensor& y, const Tensor& rstd,
                                         const Tensor& h_in, const Tensor& x, const Tensor& w, float eps) {
  const char* op = "residual_rmsnorm_forward";
  TK_CHECK(h_in.ndim >= 1, "{}: h_in is {} but must be [N, d]", op, h_in.describe());
  const int64_t d = h_in.dim(-1), N = h_in.numel() / std::max<int64_t>(d, 1);
  expect(h_in, kDType, {N, d}, op, "h_in");
  expect(x, kDType, {N, d}, op, "x");
  expect(h_out, kDType, {N, d}, op, "h_out");
  expect(w, kDType, {d}, op, "w");
  expect(y, kDType, {N, d}, op, "y");
  expect(rstd, kDType, {N}, op, "rstd");
  const T *hi = h_in.as<T>(), *xs = x.as<T>(), *ws = w.as<T>();
  T *ho = h_out.as<T>(), *ys = y.as<T>(), *rs = rstd.as<T>();
#pragma omp parallel for schedule(static) if (N * d >= cpu::kParallelMinWork)
  for (int64_t n = 0; n < N; n++) {
    // Element by element, so h_out may alias h_in.
#pragma omp simd
    for (int64_t i = 0; i < d; i++) ho[n * d + i] = hi[n * d + i] + xs[n * d + i];
    rmsnorm_row(ys + n * d, rs + n, ho + n * d, ws, d, eps);
  }
}

// With g = dy * w and r = rstd:  dh = r * g - h * r^3 * mean(g * h)  (+ dresidual);  dw += dy * h * r.
template <class T>
void CpuOps<T>::rmsnorm_backward(const Tensor& dh, const Tensor& dw, const Tensor& dy, const Tensor& dresidual,
                                 const Tensor& h, const Tensor& rstd, const Tensor& w) {
  const char* op = "rmsnorm_backward";
  TK_CHECK(h.ndim >= 1, "{}: h is {} but must be [N, d]", op, h.describe());
  const int64_t d = h.dim(-1), N = h.numel() / std::max<int64_t>(d, 1);
  expect(h, kDType, {N, d}, op, "h");
  expect(dy, kDType, {N, d}, op, "dy");
  expect(dh, kDType, {N, d}, op, "dh");
  expect_optional(dresidual, kDType, {N, d}, op, "dresidual");
  expect(rstd, kDType, {N}, op, "rstd");
  expect(w, kDType, {d}, op, "w");
  expect(dw, kDType, {d}, op, "dw");
  const T *dys = dy.as<T>(), *hs = h.as<T>(), *rs = rstd.as<T>(), *ws = w.as<T>(), *dres = dresidual.as<T>();
  T *dhs = dh.as<T>(), *dws = dw.as<T>();

  // dw first, while dy is intact (dh may alias dresidual). Threads own blocks of columns; rows are
  // summed in order n = 0, 1, ..., so the result does not depend on the thread count.
  constexpr int64_t kBlock = 64;
  const int64_t n_blocks = (d + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * d >= cpu::kParallelMinWork)
  for (int64_t b = 0; b < n_blocks; b++) {
    const int64_t c0 = b * kBlock, width = std::min(kBlock, d - c0);
    double acc[kBlock] = {};
    for (int64_t n = 0; n < N; n++) {
      const T *dyr = dys + n * d + c0, *hr = hs + n * d + c0;
      const double r = rs[n];
#pragma omp simd
      for (int64_t c = 0; c < width; c++) acc[c] += double(dyr[c]) * double(hr[c]) * r;
    }
    for (int64_t c = 0; c < width; c++) dws[c0 + c] += T(acc[c]);
  }

#pragma omp parallel for schedule(static) if (N * d >= cpu::kParallelMinWork)
  for (int64_t n = 0; n < N; n++) {
    const T *dyr = dys + n * d, *hr = hs + n * d;
    const double r = rs[n];
    double gh = 0;
#pragma omp simd reduction(+ : gh)
    for (int64_t i = 0; i < d; i++) gh += double(dyr[i]) * double(ws[i]) * double(hr[i]);
    const double c = r * r * r * gh / double(d);
    // The residual's gradient is read before dh is written, element by element: they may alias.
    const T* dres_row = dres ? dres + n * d : nullptr;
    T* dh_row = dhs + n * d;
    if (dres_row) {
#pragma omp simd
      for (int64_t i = 0; i < d; i++)
        dh_row[i] = T(r * double(dyr[i]) * double(ws[i]) - c * double(hr[i]) + double(dres_row[i]));
    } else {
#pragma omp simd
      for (int64_t i = 0; i < d; i++) dh_row[i] = T(r * double(dyr[i]) * double(ws[i]) - c * double(hr[i]));
    }
  }
}

#define TK_INSTANTIATE_RMSNORM(T)                                                                          \
  template void CpuOps<T>::rmsnorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float); \
  template void CpuOps<T>::residual_rmsnorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,  \
                                                    const Tensor&, const Tensor&, float);                       \
  template void CpuOps<T>::rmsnorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,          \
                                            const Tensor&, const Tensor&, const Tensor&);
TK_INSTANTIATE_RMSNORM(float)
TK_INSTANTIATE_RMSNORM(double)

}  // namespace tk
