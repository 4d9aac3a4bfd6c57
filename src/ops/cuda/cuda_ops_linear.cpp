// CudaOps' ops that run GEMMs (the linears, the fused norm/SwiGLU + linear ops, the LM head): each checks its
// tensors, then runs cuBLASLt's bf16 GEMMs or, with --fp8 and shapes that allow it (fp8_shapes.h), hands the op to
// the FP8 linears (fp8_linears.h).
#include <cstdint>

#include "core/error.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/cuda_ops_impl.h"
#include "ops/cuda/fp8_shapes.h"
#include "ops/op_checks.h"

namespace tk {

using cuda::bf16;
using cuda_ops::ptr;
using cuda_ops::rows_of;

// ---- linear ---------------------------------------------------------------------------------------

// x of a linear's backward: bf16, or one byte an element (ModelOptions::fp8_kept_inputs) holding the x^T that a
// fused forward kept for it.
void CudaOps::expect_linear_input(const Tensor& x, int64_t N, int64_t in, const char* op) const {
  if (x.dtype != DType::U8) return expect(x, DType::BF16, {N, in}, op, "x");
  expect(x, DType::U8, {N, in}, op, "x");
  TK_CHECK(impl_->fp8->keeps(x.data),
           "{}: x is one byte an element, the FP8 x^T a fused forward keeps (--fp8 with delayed scaling), but no "
           "forward kept one there since its last backward",
           op);
}

void CudaOps::linear_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const char* op = "linear_forward";
  TK_CHECK(w.ndim == 2, "{}: w is {} but must be [out, in]", op, w.describe());
  int64_t out = w.dim(0), in = w.dim(1), N = rows_of(x, in, op);
  expect(w, DType::BF16, {out, in}, op, "w");
  expect(x, DType::BF16, {N, in}, op, "x");
  expect(y, DType::BF16, {N, out}, op, "y");
  expect_optional(bias, DType::BF16, {out}, op, "bias");
  cuda::Fp8Linears& fp8 = *impl_->fp8;
  TK_CHECK(!fp8.keeps(x.data),
           "{}: x holds the FP8 transpose a fused forward kept for a linear's backward, not its values", op);
  if (fp8.on() && cuda::fp8_shape(N, in, out, {&x, &w})) return fp8.linear_forward(y, x, w, bias, N, in, out);
  impl_->matmul->linear_forward(ptr<bf16>(y), ptr<bf16>(x), ptr<bf16>(w), ptr<bf16>(bias), N, in, out);
}

void CudaOps::linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dbias, const Tensor& dy,
                              const Tensor& x, const Tensor& w) {
  const char* op = "linear_backward";
  TK_CHECK(w.ndim == 2, "{}: w is {} but must be [out, in]", op, w.describe());
  int64_t out = w.dim(0), in = w.dim(1), N = rows_of(x, in, op);
  expect(w, DType::BF16, {out, in}, op, "w");
  expect_linear_input(x, N, in, op);
  expect(dy, DType::BF16, {N, out}, op, "dy");
  expect_optional(dx, DType::BF16, {N, in}, op, "dx");
  expect_optional(dw, DType::F32, {out, in}, op, "dw");
  expect_optional(dbias, DType::F32, {out}, op, "dbias");
  cuda::Matmul& mm = *impl_->matmul;
  cuda::Fp8Linears& fp8 = *impl_->fp8;
  if (fp8.on() && cuda::fp8_shape(N, in, out, {&x, &w, &dy}) && (!dx.empty() || !dw.empty())) {
    fp8.linear_backward(dx, dw, dy, x, w, N, in, out);
    if (!dbias.empty()) mm.bias_backward(ptr<float>(dbias), ptr<bf16>(dy), N, out);
    return;
  }
  TK_CHECK(dw.empty() || !fp8.keeps(x.data),
           "{}: x holds the FP8 transpose a fused forward kept, but this backward is not on the FP8 path", op);
  if (!dx.empty()) mm.linear_backward_input(ptr<bf16>(dx), ptr<bf16>(dy), ptr<bf16>(w), N, in, out);
  if (!dw.empty()) mm.linear_backward_weight(ptr<float>(dw), ptr<bf16>(dy), ptr<bf16>(x), N, in, out);
  if (!dbias.empty()) mm.bias_backward(ptr<float>(dbias), ptr<bf16>(dy), N, out);
}

void CudaOps::swiglu_linear_forward(const Tensor& y, const Tensor& act, const Tensor& gate_up, const Tensor& w) {
  cuda::Fp8Linears& fp8 = *impl_->fp8;
  const int64_t f = act.dim(-1), N = rows_of(act, f, "swiglu_linear_forward");
  // SwiGLU's output cast to FP8 as it is written: with delayed scaling once the operand has a committed amax,
  // when linear_forward would take the FP8 path for it.
  const bool fused = fp8.fuses() && w.ndim == 2 && w.dim(1) == f && cuda::fp8_shapes::swiglu_cast(f) &&
                     cuda::fp8_shape(N, f, w.dim(0), {&act, &w, &gate_up}) && fp8.primed(w.data, 0);
  const char* op = "swiglu_linear_forward";
  const bool kept_u8 = act.dtype == DType::U8;  // ModelOptions::fp8_kept_inputs: act holds only the x^T
  if (!fused && !kept_u8) {
    Ops::swiglu_linear_forward(y, act, gate_up, w);  // swiglu_forward drops act from the kept x^T
    return;
  }
  TK_CHECK(fused || (fp8.fuses() && w.ndim == 2 && w.dim(1) == f &&
                     cuda::fp8_shape(N, f, w.dim(0), {&act, &w, &gate_up})),
           "{}: act is one byte an element (the kept FP8 x^T of --fp8 with delayed scaling) but this linear is not on "
           "that path",
           op);
  const int64_t out = w.dim(0), in = f;
  expect(act, kept_u8 ? DType::U8 : DType::BF16, {N, f}, op, "act");
  expect(gate_up, DType::BF16, {N, 2 * f}, op, "gate_up");
  expect(w, DType::BF16, {out, in}, op, "w");
  expect(y, DType::BF16, {N, out}, op, "y");
  fp8.swiglu_linear_forward(y, act, gate_up, w, N, f, fused);
}

void CudaOps::rmsnorm_linear_forward(const Tensor& y, const Tensor& x_norm, const Tensor& rstd, const Tensor& h_out,
                                     const Tensor& h_in, const Tensor& x, const Tensor& norm_w, const Tensor& w,
                                     const Tensor& bias, float eps, NormOutput keeps) {
  if (keeps == NormOutput::values) {  // x_norm is read again as values: the two ops apart
    Ops::rmsnorm_linear_forward(y, x_norm, rstd, h_out, h_in, x, norm_w, w, bias, eps, keeps);
    return;
  }
  cuda::Fp8Linears& fp8 = *impl_->fp8;
  const char* op = "rmsnorm_linear_forward";
  const int64_t d = norm_w.numel(), N = rows_of(x, d, op);
  // The norm's output cast to FP8 from its input and rstd: with delayed scaling once the operand has a committed
  // amax, when linear_forward would take the FP8 path, and for the norm kernels' warp-per-row widths.
  const bool fused = fp8.fuses() && w.ndim == 2 && w.dim(1) == d && cuda::fp8_shapes::norm_cast(d) &&
                     cuda::fp8_shape(N, d, w.dim(0), {&x, &x_norm, &w, &norm_w, &h_in, &h_out}) &&
                     fp8.primed(w.data, 0);
  const bool kept_u8 = x_norm.dtype == DType::U8;  // ModelOptions::fp8_kept_inputs: x_norm holds only the x^T
  if (!fused && !kept_u8) {
    Ops::rmsnorm_linear_forward(y, x_norm, rstd, h_out, h_in, x, norm_w, w, bias, eps, keeps);
    return;
  }
  TK_CHECK(fused || (fp8.fuses() && w.ndim == 2 && w.dim(1) == d && cuda::fp8_shapes::norm_cast(d) &&
                     cuda::fp8_shape(N, d, w.dim(0), {&x, &x_norm, &w, &norm_w, &h_in, &h_out})),
           "{}: x_norm is one byte an element (the kept FP8 x^T of --fp8 with delayed scaling) but this linear is "
           "not on that path",
           op);
  const int64_t out = w.dim(0), in = d;
  expect(norm_w, DType::BF16, {d}, op, "norm_w");
  expect(x, DType::BF16, {N, d}, op, "x");
  expect(x_norm, kept_u8 ? DType::U8 : DType::BF16, {N, d}, op, "x_norm");
  expect(rstd, DType::F32, {N}, op, "rstd");
  expect(w, DType::BF16, {out, in}, op, "w");
  expect(y, DType::BF16, {N, out}, op, "y");
  expect_optional(bias, DType::BF16, {out}, op, "bias");
  if (!h_in.empty()) {
    expect(h_in, DType::BF16, {N, d}, op, "h_in");
    expect(h_out, DType::BF16, {N, d}, op, "h_out");
  }
  fp8.rmsnorm_linear_forward(y, x_norm, rstd, h_out, h_in, x, norm_w, w, bias, eps, N, d, fused);
}

void CudaOps::swiglu_linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dgate_up, const Tensor& dout,
                                     const Tensor& gate_up, const Tensor& x, const Tensor& w) {
  cuda::Fp8Linears& fp8 = *impl_->fp8;
  const int64_t f = dout.dim(-1), N = rows_of(dout, f, "swiglu_linear_backward");
  // SwiGLU's gradient cast to FP8 as it is computed: with delayed scaling once the operand has a committed amax
  // (its scale is known before the values are), when linear_backward would take the FP8 path for it.
  const bool fused = fp8.fuses() && w.ndim == 2 && w.dim(0) == 2 * f && cuda::fp8_shapes::swiglu_cast(f) &&
                     (!dx.empty() || !dw.empty()) &&
                     cuda::fp8_shape(N, w.dim(1), 2 * f, {&x, &w, &dgate_up, &dout, &gate_up}) &&
                     fp8.primed(w.data, 2);
  if (!fused) {
    Ops::swiglu_linear_backward(dx, dw, dgate_up, dout, gate_up, x, w);
    return;
  }
  const char* op = "swiglu_linear_backward";
  const int64_t out = 2 * f, in = w.dim(1);
  expect(dout, DType::BF16, {N, f}, op, "dout");
  expect(gate_up, DType::BF16, {N, out}, op, "gate_up");
  expect(dgate_up, DType::BF16, {N, out}, op, "dgate_up");
  expect(w, DType::BF16, {out, in}, op, "w");
  expect_linear_input(x, N, in, op);
  expect_optional(dx, DType::BF16, {N, in}, op, "dx");
  expect_optional(dw, DType::F32, {out, in}, op, "dw");
  fp8.swiglu_linear_backward(dx, dw, dout, gate_up, x, w, N, f);
}

// ---- LM head + cross-entropy ------------------------------------------------------------------------

void CudaOps::lm_head_cross_entropy(const Tensor& losses, const Tensor& dx, const Tensor& dw, const Tensor& x,
                                    const Tensor& w, const Tensor& targets, float grad_scale, int ignore_index) {
  const char* op = "lm_head_cross_entropy";
  TK_CHECK(w.ndim == 2, "{}: w is {} but must be [V, d]", op, w.describe());
  int64_t V = w.dim(0), d = w.dim(1), N = rows_of(x, d, op);
  expect(w, DType::BF16, {V, d}, op, "w");
  expect(x, DType::BF16, {N, d}, op, "x");
  expect(targets, DType::I32, {N}, op, "targets");
  expect(losses, DType::F32, {N}, op, "losses");
  expect_optional(dx, DType::BF16, {N, d}, op, "dx");
  expect_optional(dw, DType::F32, {V, d}, op, "dw");
  int64_t rows = cuda::lm_head_chunk_rows(N, V, impl_->logits_budget);
  cuda::Fp8Linears& fp8 = *impl_->fp8;
  if (fp8.lm_head() && cuda::fp8_shape(N, d, V, {&x, &w}))
    return fp8.lm_head_cross_entropy(losses, dx, dw, x, w, targets, grad_scale, ignore_index, N, d, V, rows);
  auto* logits = static_cast<bf16*>(
      impl_->transient.ensure(impl_->alloc, cuda::logits_chunk_bytes(rows, V), Impl::kTransientLabel));
  cuda::lm_head_cross_entropy(*impl_->matmul, logits, rows, ptr<float>(losses), ptr<bf16>(dx), ptr<float>(dw),
                              ptr<bf16>(x), ptr<bf16>(w), ptr<int32_t>(targets), N, d, V, grad_scale, ignore_index,
                              impl_->stream);
}

}  // namespace tk
