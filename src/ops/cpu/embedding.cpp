// Token embedding: a row gather forward, and a scatter-add backward made deterministic by giving each
// thread its own columns of the table and walking the tokens in order.
#include <algorithm>
#include <cstring>

#include "ops/op_checks.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/parallel.h"

namespace tk {

namespace {

// Every id in [0, V), or an error naming the first bad one (an out-of-range id would read past the table).
void check_token_ids(const int32_t* tokens, int64_t N, int64_t V, const char* op) {
  for (int64_t n = 0; n < N; n++)
    TK_CHECK(tokens[n] >= 0 && tokens[n] < V, "{}: token id {} at position {} is outside the vocabulary [0, {})", op,
             tokens[n], n, V);
}

}  // namespace

template <class T>
void CpuOps<T>::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& table) {
  const char* op = "embedding_forward";
  TK_CHECK(table.ndim == 2, "{}: table is {} but must be [V, d]", op, table.describe());
  const int64_t V = table.dim(0), d = table.dim(1), N = tokens.numel();
  expect(table, kDType, {V, d}, op, "table");
  expect(tokens, DType::I32, {N}, op, "tokens");
  expect(out, kDType, {N, d}, op, "out");
  const int32_t* ids = tokens.as<int32_t>();
  check_token_ids(ids, N, V, op);
  const T* tab = table.as<T>();
  T* o = out.as<T>();
#pragma omp parallel for schedule(static) if (N * d >= cpu::kParallelMinWork)
  for (int64_t n = 0; n < N; n++) std::memcpy(o + n * d, tab + int64_t(ids[n]) * d, size_t(d) * sizeof(T));
}

template <class T>
void CpuOps<T>::embedding_backward(const Tensor& dtable, const Tensor& tokens, const Tensor& dout) {
  const char* op = "embedding_backward";
  TK_CHECK(dtable.ndim == 2, "{}: dtable is {} but must be [V, d]", op, dtable.describe());
  const int64_t V = dtable.dim(0), d = dtable.dim(1), N = tokens.numel();
  expect(dtable, kDType, {V, d}, op, "dtable");
  expect(tokens, DType::I32, {N}, op, "tokens");
  expect(dout, kDType, {N, d}, op, "dout");
  const int32_t* ids = tokens.as<int32_t>();
  check_token_ids(ids, N, V, op);
  const T* g = dout.as<T>();
  T* dt = dtable.as<T>();
  // Threads own disjoint column blocks; within a block tokens are added in order n = 0, 1, ...
  const int64_t block = 64, n_blocks = (d + block - 1) / block;
#pragma omp parallel for schedule(static) if (N * d >= cpu::kParallelMinWork)
  for (int64_t b = 0; b < n_blocks; b++) {
    const int64_t c0 = b * block, c1 = std::min(d, c0 + block);
    for (int64_t n = 0; n < N; n++) {
      T* row = dt + int64_t(ids[n]) * d;
      const T* grow = g + n * d;
      for (int64_t c = c0; c < c1; c++) row[c] += grow[c];
    }
  }
}

#define TK_INSTANTIATE_EMBEDDING(T)                                                                  \
  template void CpuOps<T>::embedding_forward(const Tensor&, const Tensor&, const Tensor&); \
  template void CpuOps<T>::embedding_backward(const Tensor&, const Tensor&, const Tensor&);
TK_INSTANTIATE_EMBEDDING(float)
TK_INSTANTIATE_EMBEDDING(double)

}  // namespace tk
