// Row-major GEMM for the CPU ops, one name for float and double over OpenBLAS's cblas_sgemm/dgemm.
// BLAS is called only outside OpenMP regions: it runs its own threads, and nesting would oversubscribe.
#pragma once
#include <cblas.h>

namespace tk::cpu {

// C[M,N] = alpha * op(A) @ op(B) + beta * C, where op(A) is [M,K] (A^T when trans_a) and op(B) is [K,N].
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
              alpha, A, lda, B, ldb, beta, C, ldc);
}

inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
                 const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
              alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace tk::cpu
