// cuBLASLt GEMMs with row-major semantics. cuBLASLt is column-major: a row-major matrix X[r,c] is the
// column-major matrix X^T[c,r] with leading dimension c, so each row-major product below is planned as
// the column-major product of the transposes. A plan (descriptors + the heuristic's first algorithm) is
// made once per distinct configuration and reused, so a training step makes no heuristic query.
#include "ops/cuda/matmul_cublaslt.h"

#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <compare>
#include <limits>
#include <map>
#include <vector>

#include "core/cache.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"

namespace tk::cuda {

namespace {

// Largest power of two (up to 256) that divides the address: the alignment the heuristic may assume.
int64_t alignment_of(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  int64_t align = 256;
  while (align > 2 && a % uintptr_t(align) != 0) align /= 2;
  return align;
}

// Everything the heuristic's choice depends on. Pointers are not part of it, their alignments are.
struct GemmKey {
  bool trans_a, trans_b;
  int64_t m, n, k;
  int64_t ld_a, ld_b, ld_d;
  bool d_is_f32, has_bias;
  int64_t align_a, align_b, align_d;
  cudaDataType_t type_a = CUDA_R_16BF, type_b = CUDA_R_16BF;  // e4m3 / e5m2 for the FP8 GEMMs
  bool fast_accum = false;                                     // FP8 only
  bool fp8() const { return type_a != CUDA_R_16BF; }
  auto operator<=>(const GemmKey&) const = default;
};

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};

  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan() {
    // Destruction cannot fail usefully; statuses are ignored here on purpose.
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

const char* type_name(cudaDataType_t t) {
  return t == CUDA_R_8F_E4M3 ? "e4m3" : t == CUDA_R_8F_E5M2 ? "e5m2" : "bf16";
}

std::string describe(const GemmKey& k) {
  return fmt::format("m={} n={} k={} op(A)={} op(B)={} lda={} ldb={} ldd={} out={}{}{}", k.m, k.n, k.k,
                     k.trans_a ? "T" : "N", k.trans_b ? "T" : "N", k.ld_a, k.ld_b, k.ld_d,
                     k.d_is_f32 ? "f32 (+=)" : "bf16", k.has_bias ? " +bias" : "",
                     k.fp8() ? fmt::format(" A={} B={}{}", type_name(k.type_a), type_name(k.type_b),
                                           k.fast_accum ? " fast-accum" : "")
                             : "");
}

// The key as the tuning file names it: every field, alignments included.
std::string key_id(const GemmKey& k) {
  return fmt::format("{}{} m{} n{} k{} ld{},{},{} {}{} align{},{},{}", k.trans_a ? "T" : "N", k.trans_b ? "T" : "N",
                     k.m, k.n, k.k, k.ld_a, k.ld_b, k.ld_d, k.d_is_f32 ? "f32+=" : "bf16", k.has_bias ? " bias" : "",
                     k.align_a, k.align_b, k.align_d) +
         (k.fp8() ? fmt::format(" {}x{}{}", type_name(k.type_a), type_name(k.type_b), k.fast_accum ? " fast" : "")
                  : "");
}

// A device buffer for the timing's scratch operands, freed when it goes.
struct Scratch {
  void* p = nullptr;
  explicit Scratch(size_t bytes) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess) {
      p = nullptr;
      cudaGetLastError();  // clear the failure: the caller falls back to the heuristic's first
    }
  }
  ~Scratch() {
    if (p) cudaFree(p);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

}  // namespace

struct Matmul::Impl {
  cudaStream_t stream = nullptr;
  DeviceAlloc alloc;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  GrowingBuffer ones;  // 1.0 repeated, for bias_backward
  std::map<GemmKey, std::unique_ptr<GemmPlan>> plans;

  struct Operand {
    const void* ptr;
    bool transpose;          // op(X) = X^T
    int64_t rows, cols, ld;  // the matrix as stored, column-major
    cudaDataType_t type = CUDA_R_16BF;
    const float* scale = nullptr;  // FP8: the dequant scale (device)
  };
  float* unit_scales = nullptr;  // device floats of 1.0 at 0 and 4 (16-byte aligned): the FP8 timing's scales

  // Tuning (Matmul::enable_tuning): the file and the part of it for this GPU and cuBLASLt version.
  bool tuning = false;
  std::string tuning_path, tuning_scope;
  TuningStats stats;

  const GemmPlan& plan_for(const GemmKey& key);
  // The index of the candidate to use: the file's choice, else the fastest measured now (and recorded),
  // else 0.
  int choose(const GemmKey& key, const GemmPlan& plan, const cublasLtMatmulHeuristicResult_t* candidates,
             int found);
  // D[m,n] (column-major, leading dimension ld_d) = op(A) op(B) + beta D (+ bias[m] along each column).
  void gemm(const Operand& a, const Operand& b, void* d, bool d_is_f32, int64_t m, int64_t n, int64_t ld_d,
            float beta, const bf16* bias, bool fast_accum = false);
  const bf16* ones_of(int64_t n);
};

const GemmPlan& Matmul::Impl::plan_for(const GemmKey& key) {
  auto it = plans.find(key);
  if (it != plans.end()) return *it->second;

  auto plan = std::make_unique<GemmPlan>();
  TK_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  TK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  TK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (key.has_bias) {
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    TK_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (key.fp8()) {
      cudaDataType_t bias_type = CUDA_R_16BF;
      TK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                     sizeof(bias_type)));
    }
  }
  if (key.fp8()) {
    const int8_t fast = key.fast_accum ? 1 : 0;
    TK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    // Valid scales for the heuristic and the timing; each call sets its own.
    const float* sa = unit_scales;
    const float* sb = unit_scales + 4;
    TK_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof(sa)));
    TK_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof(sb)));
  }
  // Stored shapes: op(A) is m x k, op(B) is k x n.
  int64_t a_rows = key.trans_a ? key.k : key.m, a_cols = key.trans_a ? key.m : key.k;
  int64_t b_rows = key.trans_b ? key.n : key.k, b_cols = key.trans_b ? key.k : key.n;
  TK_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, key.type_a, a_rows, a_cols, key.ld_a));
  TK_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, key.type_b, b_rows, b_cols, key.ld_b));
  TK_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan->d, key.d_is_f32 ? CUDA_R_32F : CUDA_R_16BF, key.m, key.n, key.ld_d));

  cublasLtMatmulPreference_t pref = nullptr;
  TK_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = kWorkspaceBytes;
  uint32_t align_a = uint32_t(key.align_a), align_b = uint32_t(key.align_b), align_d = uint32_t(key.align_d);
  TK_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  TK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                       sizeof(align_a)));
  TK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                       sizeof(align_b)));
  TK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                       sizeof(align_d)));
  TK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                       sizeof(align_d)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(tuning ? kTuneCandidates : 1);
  int found = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->d, plan->d,
                                                          pref, int(results.size()), results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  TK_CHECK(status == CUBLAS_STATUS_SUCCESS && found > 0,
           "cuBLASLt has no algorithm for the GEMM {} ({}); the shape or alignment is not supported", describe(key),
           cublasLtGetStatusString(status));
  plan->algo = results[tuning && found > 1 ? choose(key, *plan, results.data(), found) : 0].algo;
  return *plans.emplace(key, std::move(plan)).first->second;
}

int Matmul::Impl::choose(const GemmKey& key, const GemmPlan& plan, const cublasLtMatmulHeuristicResult_t* candidates,
                         int found) {
  const std::string id = key_id(key);
  {
    const nlohmann::json table = cache::read(tuning_path, "GEMM algorithm choices");
    const auto scope = table.find(tuning_scope);
    if (scope != table.end() && scope->is_object()) {
      const auto entry = scope->find(id);
      if (entry != scope->end() && entry->is_object()) {
        const int i = entry->value("index", -1);
        if (i >= 0 && i < found && candidates[i].state == CUBLAS_STATUS_SUCCESS) {
          stats.cached++;
          return i;
        }
      }
    }
  }
  // Scratch operands of the stored shapes (op(A) is m x k, op(B) k x n), and the output.
  const int64_t a_cols = key.trans_a ? key.m : key.k, b_cols = key.trans_b ? key.k : key.n;
  const size_t a_bytes = size_t(key.ld_a * a_cols) * 2, b_bytes = size_t(key.ld_b * b_cols) * 2;
  const size_t d_bytes = size_t(key.ld_d * key.n) * (key.d_is_f32 ? 4 : 2), bias_bytes = size_t(key.m) * 2;
  size_t free_bytes = 0, total_bytes = 0;
  TK_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t margin = size_t(256) << 20;  // for the driver and library allocations of the timing
  if (free_bytes < a_bytes + b_bytes + d_bytes + bias_bytes + margin) {
    if (stats.skipped++ == 0)
      log::info("GEMM tuning: no room for the scratch operands of {} ({:.0f} MiB); it and any others like it take "
                "cuBLASLt's first choice, and are tuned in a run with more free memory",
                describe(key), double(a_bytes + b_bytes + d_bytes) / (1 << 20));
    return 0;
  }
  Scratch a(a_bytes), b(b_bytes), d(d_bytes), bias(bias_bytes);
  if (!a.p || !b.p || !d.p || !bias.p) {
    stats.skipped++;
    return 0;
  }
  fill_uniform_bf16(static_cast<bf16*>(a.p), int64_t(a_bytes / 2), 1, stream);
  fill_uniform_bf16(static_cast<bf16*>(b.p), int64_t(b_bytes / 2), 2, stream);
  fill_uniform_bf16(static_cast<bf16*>(bias.p), int64_t(bias_bytes / 2), 3, stream);
  TK_CUDA_CHECK(cudaMemsetAsync(d.p, 0, d_bytes, stream));
  if (key.has_bias) {
    const void* bias_ptr = bias.p;
    TK_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  TK_CUDA_CHECK(cudaEventCreate(&start));
  TK_CUDA_CHECK(cudaEventCreate(&stop));
  const float alpha = 1.0f, beta = key.d_is_f32 ? 1.0f : 0.0f;
  constexpr int kWarm = 2, kTimed = 5;
  int best = 0;
  double best_us = std::numeric_limits<double>::infinity(), first_us = 0;
  for (int i = 0; i < found; i++) {
    if (candidates[i].state != CUBLAS_STATUS_SUCCESS) continue;
    auto launch = [&] {
      return cublasLtMatmul(handle, plan.desc, &alpha, a.p, plan.a, b.p, plan.b, &beta, d.p, plan.d, d.p, plan.d,
                            &candidates[i].algo, workspace, kWorkspaceBytes, stream);
    };
    bool ok = true;
    for (int w = 0; w < kWarm && ok; w++) ok = launch() == CUBLAS_STATUS_SUCCESS;
    if (!ok) continue;
    TK_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int t = 0; t < kTimed; t++) launch();
    TK_CUDA_CHECK(cudaEventRecord(stop, stream));
    TK_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    TK_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    const double us = 1e3 * double(ms) / kTimed;
    if (i == 0) first_us = us;
    if (us < best_us) best = i, best_us = us;  // ties keep the earlier candidate
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  TK_CUDA_CHECK(cudaStreamSynchronize(stream));  // the scratch is freed after the timing's launches
  if (!std::isfinite(best_us) || first_us == 0) {  // the first candidate (or every one) would not launch
    stats.skipped++;
    return 0;
  }
  stats.measured++;
  stats.first_us += first_us;
  stats.chosen_us += best_us;
  // Read again and add to it, so that choices another run recorded meanwhile are kept.
  nlohmann::json table = cache::read(tuning_path, "GEMM algorithm choices");
  if (!table[tuning_scope].is_object()) table[tuning_scope] = nlohmann::json::object();
  table[tuning_scope][id] = {{"index", best},
                             {"us", std::round(best_us * 10) / 10},
                             {"first_us", std::round(first_us * 10) / 10},
                             {"candidates", found}};
  cache::write(tuning_path, table);
  return best;
}

void Matmul::enable_tuning(const std::string& cache_path) {
  int device = 0;
  TK_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  TK_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  impl_->tuning = true;
  impl_->tuning_path = cache_path;
  impl_->tuning_scope = fmt::format("{} (sm_{}{}), cuBLASLt {}", prop.name, prop.major, prop.minor,
                                    cublasLtGetVersion());
}

Matmul::TuningStats Matmul::tuning_stats() const { return impl_->stats; }

void Matmul::Impl::gemm(const Operand& a, const Operand& b, void* d, bool d_is_f32, int64_t m, int64_t n,
                        int64_t ld_d, float beta, const bf16* bias, bool fast_accum) {
  int64_t k = a.transpose ? a.rows : a.cols;
  GemmKey key{a.transpose, b.transpose, m,        n,         k,          a.ld,          b.ld,
              ld_d,        d_is_f32,    bias != nullptr, alignment_of(a.ptr), alignment_of(b.ptr), alignment_of(d),
              a.type,      b.type,      fast_accum};
  const GemmPlan& plan = plan_for(key);
  if (bias) {
    TK_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  if (key.fp8()) {
    TK_CHECK(alignment_of(a.scale) >= 16 && alignment_of(b.scale) >= 16,
             "FP8 GEMM {}: cuBLASLt needs 16-byte aligned scale pointers", describe(key));
    TK_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a.scale, sizeof(a.scale)));
    TK_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b.scale, sizeof(b.scale)));
  }
  const float alpha = 1.0f;
  TK_CUBLAS_CHECK(cublasLtMatmul(handle, plan.desc, &alpha, a.ptr, plan.a, b.ptr, plan.b, &beta, d, plan.d, d,
                                 plan.d, &plan.algo, workspace, kWorkspaceBytes, stream));
}

const bf16* Matmul::Impl::ones_of(int64_t n) {
  size_t bytes = size_t(n) * sizeof(bf16);
  if (bytes > ones.bytes()) {
    // First use at this length (GrowingBuffer's rule): filled once, synchronously, outside any steady step.
    void* p = ones.ensure(alloc, bytes, "bias-gradient ones vector");
    std::vector<bf16> host(size_t(n), __float2bfloat16(1.0f));
    TK_CUDA_CHECK(cudaMemcpyAsync(p, host.data(), bytes, cudaMemcpyHostToDevice, stream));
    TK_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return static_cast<const bf16*>(ones.data());
}

Matmul::Matmul(cudaStream_t stream, const DeviceAlloc& alloc) : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  impl_->alloc = alloc;
  TK_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  impl_->workspace = alloc.allocate(kWorkspaceBytes, "cuBLASLt workspace");
  impl_->unit_scales = static_cast<float*>(alloc.allocate(8 * sizeof(float), "FP8 unit scales"));
  const float ones[8] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
  TK_CUDA_CHECK(cudaMemcpy(impl_->unit_scales, ones, sizeof(ones), cudaMemcpyHostToDevice));
}

Matmul::~Matmul() {
  impl_->plans.clear();
  if (impl_->handle) cublasLtDestroy(impl_->handle);
}

size_t Matmul::cached_plans() const { return impl_->plans.size(); }

// y^T[out,N] = (w^T stored as [in,out])^T x^T[in,N]: the "TN" GEMM, m=out, n=N, k=in.
void Matmul::linear_forward(bf16* y, const bf16* x, const bf16* w, const bf16* bias, int64_t N, int64_t in,
                            int64_t out) {
  impl_->gemm({w, true, in, out, in}, {x, false, in, N, in}, y, false, out, N, out, 0.0f, bias);
}

// dx^T[in,N] = w^T[in,out] dy^T[out,N]: m=in, n=N, k=out.
void Matmul::linear_backward_input(bf16* dx, const bf16* dy, const bf16* w, int64_t N, int64_t in, int64_t out) {
  impl_->gemm({w, false, in, out, in}, {dy, false, out, N, out}, dx, false, in, N, in, 0.0f, nullptr);
}

// dw^T[in,out] += x^T[in,N] (dy^T[out,N])^T: m=in, n=out, k=N, accumulated into f32 with beta = 1.
void Matmul::linear_backward_weight(float* dw, const bf16* dy, const bf16* x, int64_t N, int64_t in, int64_t out) {
  impl_->gemm({x, false, in, N, in}, {dy, true, out, N, out}, dw, true, in, out, in, 1.0f, nullptr);
}

// FP8, all "TN" (op(A) = A^T, op(B) = B, both stored with k contiguous), as cuBLASLt requires on Hopper.
// y^T[out,N] = (w8 stored [in,out])^T x8[in,N]: m=out, n=N, k=in.
void Matmul::linear_forward_fp8(bf16* y, const uint8_t* x8, const float* x_scale, const uint8_t* w8,
                                const float* w_scale, const bf16* bias, int64_t N, int64_t in, int64_t out) {
  impl_->gemm({w8, true, in, out, in, CUDA_R_8F_E4M3, w_scale}, {x8, false, in, N, in, CUDA_R_8F_E4M3, x_scale}, y,
              false, out, N, out, 0.0f, bias, /*fast_accum=*/true);
}

// dx^T[in,N] = (wt8 stored [out,in])^T dy8[out,N]: m=in, n=N, k=out.
void Matmul::linear_backward_input_fp8(bf16* dx, const uint8_t* dy8, const float* dy_scale, const uint8_t* wt8,
                                       const float* w_scale, int64_t N, int64_t in, int64_t out) {
  impl_->gemm({wt8, true, out, in, out, CUDA_R_8F_E4M3, w_scale}, {dy8, false, out, N, out, CUDA_R_8F_E5M2, dy_scale},
              dx, false, in, N, in, 0.0f, nullptr);
}

// dw^T[in,out] += (xt8 stored [N,in])^T dyt8[N,out]: m=in, n=out, k=N, into f32 with beta = 1.
void Matmul::linear_backward_weight_fp8(float* dw, const uint8_t* dyt8, const float* dy_scale, const uint8_t* xt8,
                                        const float* x_scale, int64_t N, int64_t in, int64_t out) {
  impl_->gemm({xt8, true, N, in, N, CUDA_R_8F_E4M3, x_scale}, {dyt8, false, N, out, N, CUDA_R_8F_E5M2, dy_scale}, dw,
              true, in, out, in, 1.0f, nullptr);
}

// db[out,1] += dy^T[out,N] ones[N,1].
void Matmul::bias_backward(float* db, const bf16* dy, int64_t N, int64_t out) {
  const bf16* ones = impl_->ones_of(N);
  impl_->gemm({dy, false, out, N, out}, {ones, false, N, 1, N}, db, true, out, 1, out, 1.0f, nullptr);
}

}  // namespace tk::cuda
