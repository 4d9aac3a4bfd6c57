// The LM head fused with cross-entropy. Logits are made one [token block x vocabulary chunk] tile at a
// time by a GEMM, so the [N, V] matrix never exists: a first sweep over the chunks keeps a streaming
// log-sum-exp per token, a second recomputes each tile, turns it into dlogits and feeds two GEMMs.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/blas.h"
#include "ops/op_checks.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vec_exp.h"

namespace tk {

namespace {

// A tile is 2048 x 2048 logits (16 MiB in float). Large token blocks keep dw's GEMM (whose inner
// dimension is the block) efficient and dw's [V, d] read-modify-write to a few passes per step.
constexpr int64_t kTokenBlock = 2048;  // rows of x per tile
constexpr int64_t kVocabChunk = 2048;  // rows of w per tile

// Online log-sum-exp of one token: after every chunk, m is the largest logit seen and
// sum = sum exp(logit - m) over all logits seen, rescaled whenever m grows.
struct StreamingLse {
  double m = -std::numeric_limits<double>::infinity();
  double sum = 0;

  // Takes one chunk of logits, overwriting them with exp(logit - m) (sweep 2 recomputes the tile).
  // exp in T, vectorised; the chunk's sum in double.
  template <class T>
  void add(T* logits, int64_t n) {
    T chunk_max = logits[0];
    for (int64_t i = 1; i < n; i++) chunk_max = std::max(chunk_max, logits[i]);
    const double new_m = std::max(m, double(chunk_max));
    const T shift = T(new_m);  // a logit, so exact in T
#pragma omp simd
    for (int64_t i = 0; i < n; i++) logits[i] = cpu::vec_exp(logits[i] - shift);
    double chunk_sum = 0;
#pragma omp simd reduction(+ : chunk_sum)
    for (int64_t i = 0; i < n; i++) chunk_sum += double(logits[i]);
    sum = sum * std::exp(m - new_m) + chunk_sum;
    m = new_m;
  }
  double value() const { return m + std::log(sum); }
};

}  // namespace

template <class T>
void CpuOps<T>::lm_head_cross_entropy(const Tensor& losses, const Tensor& dx, const Tensor& dw, const Tensor& x,
                                      const Tensor& w, const Tensor& targets, float grad_scale, int ignore_index) {
  const char* op = "lm_head_cross_entropy";
  TK_CHECK(w.ndim == 2, "{}: w is {} but must be [V, d]", op, w.describe());
  const int64_t V = w.dim(0), d = w.dim(1), N = targets.numel();
  TK_CHECK(V > 0 && d > 0, "{}: w is {}, an empty LM head", op, w.describe());
  expect(w, kDType, {V, d}, op, "w");
  expect(x, kDType, {N, d}, op, "x");
  expect(targets, DType::I32, {N}, op, "targets");
  expect(losses, kDType, {N}, op, "losses");
  expect_optional(dx, kDType, {N, d}, op, "dx");
  expect_optional(dw, kDType, {V, d}, op, "dw");
  const int32_t* tgt = targets.as<int32_t>();
  for (int64_t n = 0; n < N; n++)
    TK_CHECK(tgt[n] == ignore_index || (tgt[n] >= 0 && tgt[n] < V),
             "{}: target {} at position {} is outside the vocabulary [0, {}) and is not the ignore index {}", op,
             tgt[n], n, V, ignore_index);

  const T *xs = x.as<T>(), *ws = w.as<T>();
  T *loss = losses.as<T>(), *dxs = dx.as<T>(), *dws = dw.as<T>();
  const bool want_grad = dxs || dws;
  std::vector<T> tile(size_t(std::min(N, kTokenBlock) * std::min(V, kVocabChunk)));
  std::vector<double> lse(size_t(std::min(N, kTokenBlock)));

  for (int64_t n0 = 0; n0 < N; n0 += kTokenBlock) {
    const int64_t nb = std::min(kTokenBlock, N - n0);
    const T* xb = xs + n0 * d;
    // tile[nb, vc] = x[n0 : n0+nb] @ w[v0 : v0+vc]^T
    auto make_tile = [&](int64_t v0, int64_t vc) {
      cpu::gemm(false, true, int(nb), int(vc), int(d), T(1), xb, int(d), ws + v0 * d, int(d), T(0), tile.data(),
                int(vc));
    };

    // Sweep 1: log-sum-exp and the target's logit of every token of the block.
    std::vector<StreamingLse> acc(nb);
    std::vector<double> target_logit(nb, 0.0);
    for (int64_t v0 = 0; v0 < V; v0 += kVocabChunk) {
      const int64_t vc = std::min(kVocabChunk, V - v0);
      make_tile(v0, vc);
#pragma omp parallel for schedule(static) if (nb * vc >= cpu::kParallelMinWork)
      for (int64_t r = 0; r < nb; r++) {
        T* row = tile.data() + r * vc;
        const int64_t t = tgt[n0 + r];
        if (t >= v0 && t < v0 + vc) target_logit[r] = row[t - v0];
        acc[r].add(row, vc);
      }
    }
    for (int64_t r = 0; r < nb; r++) {
      lse[r] = acc[r].value();
      loss[n0 + r] = tgt[n0 + r] == ignore_index ? T(0) : T(lse[r] - target_logit[r]);
    }
    if (!want_grad) continue;

    // Sweep 2: dlogits = grad_scale * (softmax - onehot), zero on ignored rows; then
    // dx[block] (=, over the chunks) += dlogits @ w[chunk] and dw[chunk] += dlogits^T @ x[block].
    for (int64_t v0 = 0; v0 < V; v0 += kVocabChunk) {
      const int64_t vc = std::min(kVocabChunk, V - v0);
      make_tile(v0, vc);
#pragma omp parallel for schedule(static) if (nb * vc >= cpu::kParallelMinWork)
      for (int64_t r = 0; r < nb; r++) {
        T* row = tile.data() + r * vc;
        const int64_t t = tgt[n0 + r];
        if (t == ignore_index) {
          std::fill(row, row + vc, T(0));
          continue;
        }
        // softmax = exp(logit - lse); in float, lse rounded to T moves p by at most |lse| * 6e-8 relative.
        const T shift = T(lse[r]), scale = T(grad_scale);
#pragma omp simd
        for (int64_t i = 0; i < vc; i++) row[i] = scale * cpu::vec_exp(row[i] - shift);
        if (t >= v0 && t < v0 + vc) row[t - v0] -= scale;
      }
      if (dxs)
        cpu::gemm(false, false, int(nb), int(d), int(vc), T(1), tile.data(), int(vc), ws + v0 * d, int(d),
                  T(v0 == 0 ? 0 : 1), dxs + n0 * d, int(d));
      if (dws)
        cpu::gemm(true, false, int(vc), int(d), int(nb), T(1), tile.data(), int(vc), xb, int(d), T(1), dws + v0 * d,
                  int(d));
    }
  }
}

template void CpuOps<float>::lm_head_cross_entropy(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                   const Tensor&, const Tensor&, float, int);
template void CpuOps<double>::lm_head_cross_entropy(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                    const Tensor&, const Tensor&, float, int);

}  // namespace tk
