// How much speed cuBLASLt's first heuristic choice leaves on the table for tokamak's GEMMs. For each GEMM of
// a training step (the linear layers' forward, input-gradient and weight-gradient products, and the LM
// head's per chunk) at the bench shapes, the same problem as src/ops/cuda/matmul_cublaslt.cpp plans it
// (row-major semantics through column-major transposes, bf16 operands, fp32 accumulation, bf16 outputs or
// f32 += for weight gradients, 32 MiB workspace) is timed with each of the heuristic's first kCandidates
// algorithms. Prints, per GEMM, the first choice's and the fastest candidate's TFLOP/s, the fastest's
// split-K and reduction scheme, and per model the step time the best choices would save.
// Usage: gemm_bench [model ...] (qwen2.5-0.5b, llama3.2-1b, qwen2.5-1.5b; default the first two).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/workspace_sizes.h"

namespace {

constexpr int kCandidates = 16;
constexpr int kReps = 8;
constexpr size_t kWorkspace = tk::cuda::kCublasWorkspaceBytes;  // the backend's (workspace_sizes.h)

struct Shape {
  std::string name;
  int64_t d, q, kv, f, V, layers;
  bool qkv_bias;
};

const Shape kShapes[] = {
    {"qwen2.5-0.5b", 896, 896, 128, 4864, 151936, 24, true},
    {"llama3.2-1b", 2048, 2048, 512, 8192, 128256, 16, false},
    {"qwen2.5-1.5b", 1536, 1536, 256, 8960, 151936, 28, true},
};

enum class Kind { forward, input_grad, weight_grad };

struct Problem {
  std::string label;
  Kind kind;
  int64_t N, in, out;
  double per_step;  // how many times a step runs it
};

#define LT_CHECK(x)                                                                                        \
  do {                                                                                                     \
    cublasStatus_t st_ = (x);                                                                              \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cublasLtGetStatusString(st_));      \
      std::exit(1);                                                                                        \
    }                                                                                                      \
  } while (0)

__global__ void fill_kernel(__nv_bfloat16* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t x = uint64_t(i) * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
    p[i] = __float2bfloat16_rn(float(x >> 40) / float(1 << 23) - 1.f);
  }
}

struct Result {
  double first_us = 0, best_us = 0;
  int best_index = 0, found = 0;
  int32_t best_splitk = 1, best_reduction = 0;
};

// The problem as matmul_cublaslt.cpp plans it: forward y^T[out,N] = w^T' x^T (TN); input gradient
// dx^T[in,N] = w^T dy^T (NN); weight gradient dw^T[in,out] += x^T dy (NT, f32, beta 1).
Result run(cublasLtHandle_t lt, const Problem& p, void* ws, cudaStream_t s) {
  const int64_t N = p.N, in = p.in, out = p.out;
  bool ta, tb, f32_out = p.kind == Kind::weight_grad;
  int64_t m, n, a_rows, a_cols, lda, b_rows, b_cols, ldb, ldd;
  switch (p.kind) {
    case Kind::forward:
      ta = true, tb = false, m = out, n = N;
      a_rows = in, a_cols = out, lda = in, b_rows = in, b_cols = N, ldb = in, ldd = out;
      break;
    case Kind::input_grad:
      ta = false, tb = false, m = in, n = N;
      a_rows = in, a_cols = out, lda = in, b_rows = out, b_cols = N, ldb = out, ldd = in;
      break;
    default:
      ta = false, tb = true, m = in, n = out;
      a_rows = in, a_cols = N, lda = in, b_rows = out, b_cols = N, ldb = out, ldd = in;
      break;
  }
  __nv_bfloat16 *a = nullptr, *b = nullptr;
  void* d = nullptr;
  TK_CUDA_CHECK(cudaMalloc(&a, size_t(a_rows * a_cols) * 2));
  TK_CUDA_CHECK(cudaMalloc(&b, size_t(b_rows * b_cols) * 2));
  TK_CUDA_CHECK(cudaMalloc(&d, size_t(m * n) * (f32_out ? 4 : 2)));
  fill_kernel<<<1024, 256, 0, s>>>(a, a_rows * a_cols, 1);
  fill_kernel<<<1024, 256, 0, s>>>(b, b_rows * b_cols, 2);
  TK_CUDA_CHECK(cudaMemsetAsync(d, 0, size_t(m * n) * (f32_out ? 4 : 2), s));

  cublasLtMatmulDesc_t desc;
  LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  cublasLtMatrixLayout_t la, lb, ld;
  LT_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, a_rows, a_cols, lda));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, b_rows, b_cols, ldb));
  LT_CHECK(cublasLtMatrixLayoutCreate(&ld, f32_out ? CUDA_R_32F : CUDA_R_16BF, m, n, ldd));
  cublasLtMatmulPreference_t pref;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t wsb = kWorkspace;
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
  cublasLtMatmulHeuristicResult_t results[kCandidates];
  Result r;
  LT_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, kCandidates, results, &r.found));
  const float alpha = 1.f, beta = f32_out ? 1.f : 0.f;
  cudaEvent_t e0, e1;
  TK_CUDA_CHECK(cudaEventCreate(&e0));
  TK_CUDA_CHECK(cudaEventCreate(&e1));
  r.best_us = 1e30;
  for (int i = 0; i < r.found; i++) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    auto once = [&] {
      return cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &results[i].algo, ws, kWorkspace, s);
    };
    if (once() != CUBLAS_STATUS_SUCCESS) continue;
    once();
    TK_CUDA_CHECK(cudaEventRecord(e0, s));
    for (int rep = 0; rep < kReps; rep++) once();
    TK_CUDA_CHECK(cudaEventRecord(e1, s));
    TK_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    TK_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    const double us = 1e3 * ms / kReps;
    if (i == 0) r.first_us = us;
    if (us < r.best_us) {
      r.best_us = us, r.best_index = i;
      size_t got = 0;
      cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &r.best_splitk,
                                           sizeof(r.best_splitk), &got);
      cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                           &r.best_reduction, sizeof(r.best_reduction), &got);
    }
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  cudaFree(a), cudaFree(b), cudaFree(d);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models;
  for (int i = 1; i < argc; i++) models.push_back(argv[i]);
  if (models.empty()) models = {"qwen2.5-0.5b", "llama3.2-1b"};
  cublasLtHandle_t lt;
  LT_CHECK(cublasLtCreate(&lt));
  void* ws = nullptr;
  TK_CUDA_CHECK(cudaMalloc(&ws, kWorkspace));
  cudaStream_t s;
  TK_CUDA_CHECK(cudaStreamCreate(&s));
  const int64_t N = 16384;  // tokens of a micro-step (8 x 2048)
  for (const std::string& name : models) {
    const Shape* sh = nullptr;
    for (const Shape& c : kShapes)
      if (c.name == name) sh = &c;
    if (!sh) {
      std::fprintf(stderr, "unknown model %s\n", name.c_str());
      return 2;
    }
    // The LM head's chunk: rows of 512 MiB of bf16 logits (CudaOps' default), as the backend cuts it.
    const int64_t rows = tk::cuda::lm_head_chunk_rows(N, sh->V);
    const double chunks = double((N + rows - 1) / rows);
    std::vector<Problem> ps;
    const double L = double(sh->layers);
    for (Kind kd : {Kind::forward, Kind::input_grad, Kind::weight_grad}) {
      const char* kn = kd == Kind::forward ? "fwd" : kd == Kind::input_grad ? "dx" : "dw";
      ps.push_back({std::string("qkv ") + kn, kd, N, sh->d, sh->q + 2 * sh->kv, L});
      ps.push_back({std::string("o ") + kn, kd, N, sh->q, sh->d, L});
      ps.push_back({std::string("gate_up ") + kn, kd, N, sh->d, 2 * sh->f, L});
      ps.push_back({std::string("down ") + kn, kd, N, sh->f, sh->d, L});
      ps.push_back({std::string("lm_head ") + kn, kd, rows, sh->d, sh->V, chunks});
    }
    std::printf("\n%s, N = %lld tokens, LM head chunk %lld rows (x%.0f)\n", name.c_str(), (long long)N,
                (long long)rows, chunks);
    std::printf("%-14s %7s %7s %7s %9s %9s %9s %6s %5s %6s %5s\n", "gemm", "m", "n", "k", "first us", "best us",
                "first TF", "best TF", "pick", "splitK", "red");
    double first_total = 0, best_total = 0;
    for (const Problem& p : ps) {
      const Result r = run(lt, p, ws, s);
      const double flop = 2.0 * double(p.N) * double(p.in) * double(p.out);
      std::printf("%-14s %7lld %7lld %7lld %9.1f %9.1f %9.1f %6.1f %5d %6d %5d\n", p.label.c_str(),
                  (long long)p.N, (long long)p.in, (long long)p.out, r.first_us, r.best_us, flop / r.first_us / 1e6,
                  flop / r.best_us / 1e6, r.best_index, r.best_splitk, r.best_reduction);
      first_total += r.first_us * p.per_step;
      best_total += r.best_us * p.per_step;
    }
    std::printf("%s: GEMM time a micro-step %.2f ms with the first choices, %.2f ms with the fastest (%.1f%% less)\n",
                name.c_str(), first_total / 1e3, best_total / 1e3, 100.0 * (1 - best_total / first_total));
  }
  cudaFree(ws);
  cublasLtDestroy(lt);
  return 0;
}
