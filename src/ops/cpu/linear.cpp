// Linear layers y = x @ w^T + bias and their backward, as OpenBLAS GEMMs (deterministic for a fixed
// thread count). The bias gradient is a column sum in a fixed row order.
#include <algorithm>

#include "ops/cpu/blas.h"
#include "ops/op_checks.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/parallel.h"

namespace tk {

namespace {

// The weight gives the shape: w[out, in]; x holds N rows of `in`. Callers copy the fields into plain
// variables: OpenMP regions capture those, where clang before 16 cannot capture structured bindings.
struct LinearDims {
  int64_t N, in, out;
};

LinearDims linear_dims(const Tensor& x, const Tensor& w, const char* op) {
  TK_CHECK(w.ndim == 2, "{}: w is {} but must be [out, in]", op, w.describe());
  const int64_t out = w.dim(0), in = w.dim(1);
  TK_CHECK(in > 0 && x.numel() % in == 0, "{}: x is {}, which is not rows of w's {} inputs ({})", op, x.describe(),
           in, w.describe());
  return {x.numel() / in, in, out};
}

}  // namespace

template <class T>
void CpuOps<T>::linear_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const char* op = "linear_forward";
  const LinearDims dims = linear_dims(x, w, op);
  const int64_t N = dims.N, in = dims.in, out = dims.out;
  expect(x, kDType, {N, in}, op, "x");
  expect(w, kDType, {out, in}, op, "w");
  expect(y, kDType, {N, out}, op, "y");
  expect_optional(bias, kDType, {out}, op, "bias");
  T* ys = y.as<T>();
  T beta = 0;
  if (!bias.empty()) {  // y starts as the bias on every row, and the GEMM adds to it.
    const T* b = bias.as<T>();
#pragma omp parallel for schedule(static) if (N * out >= cpu::kParallelMinWork)
    for (int64_t n = 0; n < N; n++) std::copy(b, b + out, ys + n * out);
    beta = 1;
  }
  cpu::gemm(false, true, int(N), int(out), int(in), T(1), x.as<T>(), int(in), w.as<T>(), int(in), beta, ys, int(out));
}

template <class T>
void CpuOps<T>::linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dbias, const Tensor& dy,
                                const Tensor& x, const Tensor& w) {
  const char* op = "linear_backward";
  const LinearDims dims = linear_dims(x, w, op);
  const int64_t N = dims.N, in = dims.in, out = dims.out;
  expect(x, kDType, {N, in}, op, "x");
  expect(w, kDType, {out, in}, op, "w");
  expect(dy, kDType, {N, out}, op, "dy");
  expect_optional(dx, kDType, {N, in}, op, "dx");
  expect_optional(dw, kDType, {out, in}, op, "dw");
  expect_optional(dbias, kDType, {out}, op, "dbias");
  const T* g = dy.as<T>();
  if (!dx.empty())  // dx[N,in] = dy[N,out] @ w[out,in]
    cpu::gemm(false, false, int(N), int(in), int(out), T(1), g, int(out), w.as<T>(), int(in), T(0), dx.as<T>(),
              int(in));
  if (!dw.empty())  // dw[out,in] += dy^T[out,N] @ x[N,in]
    cpu::gemm(true, false, int(out), int(in), int(N), T(1), g, int(out), x.as<T>(), int(in), T(1), dw.as<T>(),
              int(in));
  if (!dbias.empty()) {
    // Threads own blocks of columns; rows are summed in order, whatever the thread count.
    constexpr int64_t kBlock = 64;
    const int64_t n_blocks = (out + kBlock - 1) / kBlock;
    T* db = dbias.as<T>();
#pragma omp parallel for schedule(static) if (N * out >= cpu::kParallelMinWork)
    for (int64_t b = 0; b < n_blocks; b++) {
      const int64_t c0 = b * kBlock, width = std::min(kBlock, out - c0);
      double acc[kBlock] = {};
      for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < width; c++) acc[c] += double(g[n * out + c0 + c]);
      for (int64_t c = 0; c < width; c++) db[c0 + c] += T(acc[c]);
    }
  }
}

#define TK_INSTANTIATE_LINEAR(T)                                                                            \
  template void CpuOps<T>::linear_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&);      \
  template void CpuOps<T>::linear_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,      \
                                           const Tensor&, const Tensor&);
TK_INSTANTIATE_LINEAR(float)
TK_INSTANTIATE_LINEAR(double)

}  // namespace tk
