// SwiGLU, the gated activation of the Llama MLP: out = silu(gate) * up over the fused gate-up
// projection's output, and its backward. Element-wise: parallel over tokens, vectorised along a row.
#include <cmath>
#include <utility>

#include "ops/op_checks.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vec_exp.h"

namespace tk {

namespace {

template <class T>
T sigmoid(T x) {
  return T(1) / (T(1) + cpu::vec_exp(-x));
}

// gate_up is [N, 2f]; out is [N, f]. Returns {N, f} from out's last dimension. Callers copy them into plain
// variables: OpenMP regions capture those, where clang before 16 cannot capture structured bindings.
std::pair<int64_t, int64_t> swiglu_dims(const Tensor& half_width, const char* op, const char* what) {
  TK_CHECK(half_width.ndim >= 1 && half_width.dim(-1) > 0, "{}: {} is {} but must be [N, f]", op, what,
           half_width.describe());
  const int64_t f = half_width.dim(-1);
  return {half_width.numel() / f, f};
}

}  // namespace

template <class T>
void CpuOps<T>::swiglu_forward(const Tensor& out, const Tensor& gate_up) {
  const char* op = "swiglu_forward";
  const auto dims = swiglu_dims(out, op, "out");
  const int64_t N = dims.first, f = dims.second;
  expect(out, kDType, {N, f}, op, "out");
  expect(gate_up, kDType, {N, 2 * f}, op, "gate_up");
  const T* gu = gate_up.as<T>();
  T* o = out.as<T>();
#pragma omp parallel for schedule(static) if (N * f >= cpu::kParallelMinWork)
  for (int64_t n = 0; n < N; n++) {
    const T *g = gu + n * 2 * f, *u = g + f;
#pragma omp simd
    for (int64_t i = 0; i < f; i++) o[n * f + i] = g[i] * sigmoid(g[i]) * u[i];
  }
}

// d/dg [g sigmoid(g)] = sigmoid(g) (1 + g (1 - sigmoid(g))).
template <class T>
void CpuOps<T>::swiglu_backward(const Tensor& dgate_up, const Tensor& dout, const Tensor& gate_up) {
  const char* op = "swiglu_backward";
  const auto dims = swiglu_dims(dout, op, "dout");
  const int64_t N = dims.first, f = dims.second;
  expect(dout, kDType, {N, f}, op, "dout");
  expect(gate_up, kDType, {N, 2 * f}, op, "gate_up");
  expect(dgate_up, kDType, {N, 2 * f}, op, "dgate_up");
  const T *gu = gate_up.as<T>(), *go = dout.as<T>();
  T* dgu = dgate_up.as<T>();
#pragma omp parallel for schedule(static) if (N * f >= cpu::kParallelMinWork)
  for (int64_t n = 0; n < N; n++) {
    const T *g = gu + n * 2 * f, *u = g + f, *d = go + n * f;
    T *dg = dgu + n * 2 * f, *du = dg + f;
#pragma omp simd
    for (int64_t i = 0; i < f; i++) {
      const T sg = sigmoid(g[i]);
      dg[i] = d[i] * u[i] * sg * (T(1) + g[i] * (T(1) - sg));
      du[i] = d[i] * g[i] * sg;
    }
  }
}

#define TK_INSTANTIATE_SWIGLU(T)                                             \
  template void CpuOps<T>::swiglu_forward(const Tensor&, const Tensor&); \
  template void CpuOps<T>::swiglu_backward(const Tensor&, const Tensor&, const Tensor&);
TK_INSTANTIATE_SWIGLU(float)
TK_INSTANTIATE_SWIGLU(double)

}  // namespace tk
