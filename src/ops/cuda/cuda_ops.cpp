// CudaOps: checks each op's tensors against ops.h (a schedule bug reads as a sentence, not a fault inside
// a kernel), then hands raw pointers to the kernels (kernels.h), cuBLASLt (matmul_cublaslt.h), cuDNN
// (attention_cudnn.h), the fused LM head (cross_entropy.h) and, for FP8 GEMMs, the FP8 linears (fp8_linears.h),
// all on one stream. This file: set-up, memory and transfers, and the ops without GEMMs; cuda_ops_linear.cpp: the
// ops that run GEMMs.
//
// Memory: every allocation goes through DeviceMemory, recorded under a label. Scratch that an op needs (reduction
// partials, the RoPE table, the logits chunk, cuDNN's workspace, ...) follows GrowingBuffer's rule: made on the
// op's first use and grown only when a larger shape first asks, so only a run's first step allocates. Its sizes
// follow workspace_sizes.h, which the memory planner counts by.
#include "ops/cuda/cuda_ops.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "ops/cuda/attention_decode.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_ops_impl.h"
#include "ops/op_checks.h"

namespace tk {

using cuda::bf16;

using cuda_ops::ptr;
using cuda_ops::rows_of;

const cuda::RopeTable& CudaOps::Impl::rope_table_for(int max_pos, const std::vector<double>& inv_freq) {
  if (max_pos != rope_table_view.max_pos || inv_freq != rope_table_freq) {
    const int hd = int(inv_freq.size()) * 2;
    void* p = rope_table.ensure(alloc, cuda::rope_table_bytes(max_pos, hd), "RoPE cos/sin table");
    rope_table_view = cuda::rope_table_fill(p, max_pos, hd, inv_freq.data(), stream);
    rope_table_freq = inv_freq;
  }
  return rope_table_view;
}

CudaOps::CudaOps(int device) : impl_(std::make_unique<Impl>()) {
  int devices = 0;
  const bool found = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  if (!found) cudaGetLastError();  // leave no sticky error behind
  TK_CHECK(found, "no CUDA device is available (no GPU, or no working NVIDIA driver)");
  Impl& m = *impl_;
  m.device = device;
  TK_CUDA_CHECK(cudaSetDevice(device));
  TK_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  m.memory = std::make_unique<cuda::DeviceMemory>(m.stream);
  m.alloc.allocate = [this](size_t bytes, const char* label) { return allocate(bytes, label); };
  m.alloc.release = [this](void* p) { release(p); };
  m.matmul = std::make_unique<cuda::Matmul>(m.stream, m.alloc);
  m.attention = std::make_unique<cuda::CudnnAttention>(m.stream, m.alloc);
  m.fp8 =
      std::make_unique<cuda::Fp8Linears>(device, m.stream, m.alloc, *m.matmul, m.transient, Impl::kTransientLabel);
}

CudaOps::~CudaOps() {
  // Nothing may still run on memory about to be freed; errors are beyond reporting in a destructor.
  cudaStreamSynchronize(impl_->stream);
  impl_->attention.reset();
  impl_->matmul.reset();
  impl_->fp8.reset();
  impl_->memory.reset();  // the copy queues, then every allocation
  cudaStreamDestroy(impl_->stream);
}

std::unique_ptr<Ops> make_cuda_ops(int device) { return std::make_unique<CudaOps>(device); }

// ---- memory ---------------------------------------------------------------------------------------

void* CudaOps::allocate(size_t bytes, const char* label) { return impl_->memory->allocate(bytes, label); }

void CudaOps::release(void* p) {
  if (!p) return;
  // Kept FP8 transposes inside the memory go with it.
  impl_->fp8->drop_within(p, impl_->memory->bytes_of(p));
  impl_->memory->release(p);
}

void CudaOps::zero(const Tensor& t) {
  if (!t.empty()) TK_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.nbytes(), impl_->stream));
}

void CudaOps::upload_f32(const Tensor& dst, const float* src) {
  TK_CHECK(!dst.empty() && (dst.dtype == DType::F32 || dst.dtype == DType::BF16),
           "upload_f32: {} is not an f32 or bf16 tensor", dst.describe());
  cudaStream_t s = impl_->stream;
  int64_t n = dst.numel();
  if (dst.dtype == DType::F32) {
    TK_CUDA_CHECK(cudaMemcpyAsync(dst.data, src, size_t(n) * sizeof(float), cudaMemcpyHostToDevice, s));
  } else {
    int64_t chunk = std::min(n, cuda::kStagingFloats);
    auto* staging = static_cast<float*>(impl_->staging.ensure(impl_->alloc, cuda::staging_bytes(n), "f32 staging"));
    for (int64_t i = 0; i < n; i += chunk) {
      int64_t len = std::min(chunk, n - i);
      TK_CUDA_CHECK(cudaMemcpyAsync(staging, src + i, size_t(len) * 4, cudaMemcpyHostToDevice, s));
      cuda::f32_to_bf16(ptr<bf16>(dst) + i, staging, len, s);
    }
  }
  synchronize();
}

void CudaOps::convert(const Tensor& dst, const Tensor& src) {
  auto f32_or_bf16 = [](const Tensor& t) { return t.dtype == DType::F32 || t.dtype == DType::BF16; };
  TK_CHECK(!dst.empty() && f32_or_bf16(dst) && f32_or_bf16(src) && dst.numel() == src.numel(),
           "convert: {} from {}: f32 or bf16 tensors of one size", dst.describe(), src.describe());
  cudaStream_t s = impl_->stream;
  if (dst.dtype == src.dtype) {
    TK_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, s));
  } else if (dst.dtype == DType::F32) {
    cuda::bf16_to_f32(ptr<float>(dst), ptr<bf16>(src), src.numel(), s);
  } else {
    cuda::f32_to_bf16(ptr<bf16>(dst), ptr<float>(src), src.numel(), s);
  }
}

void CudaOps::download_f32(float* dst, const Tensor& src) {
  TK_CHECK(!src.empty() && (src.dtype == DType::F32 || src.dtype == DType::BF16),
           "download_f32: {} is not an f32 or bf16 tensor", src.describe());
  cudaStream_t s = impl_->stream;
  int64_t n = src.numel();
  if (src.dtype == DType::F32) {
    TK_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, s));
  } else {
    int64_t chunk = std::min(n, cuda::kStagingFloats);
    auto* staging = static_cast<float*>(impl_->staging.ensure(impl_->alloc, cuda::staging_bytes(n), "f32 staging"));
    for (int64_t i = 0; i < n; i += chunk) {
      int64_t len = std::min(chunk, n - i);
      cuda::bf16_to_f32(staging, ptr<bf16>(src) + i, len, s);
      TK_CUDA_CHECK(cudaMemcpyAsync(dst + i, staging, size_t(len) * 4, cudaMemcpyDeviceToHost, s));
    }
  }
  synchronize();
}

void CudaOps::upload(void* dst, const void* src, size_t bytes) {
  // From pageable memory the call returns once `src` has been staged, so the caller may reuse it at once.
  TK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, impl_->stream));
}

void CudaOps::download(void* dst, const void* src, size_t bytes) {
  TK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, impl_->stream));
  synchronize();
}

void CudaOps::synchronize() { TK_CUDA_CHECK(cudaStreamSynchronize(impl_->stream)); }

void CudaOps::copy_async(void* dst, const void* src, size_t bytes, Queue q) {
  impl_->memory->copy_async(dst, src, bytes, q);
}
int CudaOps::record_event(Queue q) { return impl_->memory->record_event(q); }
void CudaOps::wait_event(Queue waiter, int event) { impl_->memory->wait_event(waiter, event); }

cudaStream_t CudaOps::stream() const { return impl_->stream; }
cudaStream_t CudaOps::stream(Queue q) { return impl_->memory->queue(q); }
int CudaOps::device() const { return impl_->device; }
std::vector<MemoryRow> CudaOps::memory_rows() const { return impl_->memory->rows(); }
void CudaOps::seal_memory() { impl_->memory->seal(); }
void* CudaOps::allocate_host(size_t bytes, const char* label) {
  return cuda::DeviceMemory::allocate_host(bytes, label);
}
void CudaOps::release_host(void* p) { cuda::DeviceMemory::release_host(p); }
void CudaOps::set_logits_chunk_budget(size_t bytes) { impl_->logits_budget = bytes; }

void CudaOps::enable_gemm_tuning(const std::string& cache_path) {
  impl_->matmul->enable_tuning(cache_path);
  impl_->gemm_tuning_path = cache_path;
}

cuda::Matmul::TuningStats CudaOps::gemm_tuning_stats() const { return impl_->matmul->tuning_stats(); }

std::string CudaOps::gemm_tuning_summary() const {
  if (impl_->gemm_tuning_path.empty()) return "";
  const cuda::Matmul::TuningStats s = impl_->matmul->tuning_stats();
  std::string line = fmt::format("GEMM tuning: {} configuration(s) read from {}, {} timed now", s.cached,
                                 impl_->gemm_tuning_path, s.measured);
  if (s.measured > 0)
    line += fmt::format(" (cuBLASLt's first choices {:.2f} ms, the fastest {:.2f} ms, once each)", s.first_us / 1e3,
                        s.chosen_us / 1e3);
  if (s.skipped > 0) line += fmt::format(", {} left at the first choice for lack of memory", s.skipped);
  return line;
}

// ---- FP8 settings and state (fp8_linears.h) -----------------------------------------------------------

void CudaOps::set_fp8(bool on, Fp8Scaling scaling, int margin) { impl_->fp8->enable(on, scaling, margin); }
int64_t CudaOps::fp8_recasts() const { return impl_->fp8->recasts(); }
void CudaOps::set_fp8_fusion(bool on) { impl_->fp8->set_fusion(on); }
void CudaOps::set_fp8_lm_head(bool on) { impl_->fp8->set_lm_head(on); }
int64_t CudaOps::fp8_fused_casts() const { return impl_->fp8->fused_casts(); }
bool CudaOps::fuses_swiglu_linear() const { return impl_->fp8->fuses(); }
bool CudaOps::fuses_rmsnorm_linear() const { return impl_->fp8->fuses(); }  // the same conditions
void CudaOps::name_weights(const std::vector<NamedWeight>& weights) { impl_->fp8->name_weights(weights); }
void CudaOps::alias_weights(const void* data, size_t bytes, const void* as) { impl_->fp8->alias(data, bytes, as); }
void CudaOps::end_step() { impl_->fp8->end_step(); }
Ops::Fp8ScalingState CudaOps::fp8_scaling_state() const { return impl_->fp8->state(); }
void CudaOps::set_fp8_scaling_state(const Fp8ScalingState& state) { impl_->fp8->restore(state); }
std::vector<float> CudaOps::fp8_amax_seen() { return impl_->fp8->amax_seen(); }
void CudaOps::set_fp8_amax_seen(const std::vector<float>& amax) { impl_->fp8->set_amax_seen(amax); }

// ---- embedding ------------------------------------------------------------------------------------

void CudaOps::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& table) {
  const char* op = "embedding_forward";
  TK_CHECK(table.ndim == 2, "{}: table is {} but must be [V, d]", op, table.describe());
  int64_t V = table.dim(0), d = table.dim(1), N = tokens.numel();
  expect(table, DType::BF16, {V, d}, op, "table");
  expect(tokens, DType::I32, {N}, op, "tokens");
  expect(out, DType::BF16, {N, d}, op, "out");
  // Token ids are checked against the vocabulary when the shards are opened (LoaderOptions::expect_vocab).
  cuda::embedding_forward(ptr<bf16>(out), ptr<int32_t>(tokens), ptr<bf16>(table), N, int(d), impl_->stream);
}

void CudaOps::embedding_backward(const Tensor& dtable, const Tensor& tokens, const Tensor& dout) {
  const char* op = "embedding_backward";
  TK_CHECK(dtable.ndim == 2, "{}: dtable is {} but must be [V, d]", op, dtable.describe());
  int64_t V = dtable.dim(0), d = dtable.dim(1), N = tokens.numel();
  expect(dtable, DType::F32, {V, d}, op, "dtable");
  expect(tokens, DType::I32, {N}, op, "tokens");
  expect(dout, DType::BF16, {N, d}, op, "dout");
  size_t bytes = cuda::embedding_backward_scratch_bytes(N, V, int(d));
  void* scratch = impl_->embedding_scratch.ensure(impl_->alloc, bytes, "embedding backward scratch");
  cuda::embedding_backward(ptr<float>(dtable), ptr<int32_t>(tokens), ptr<bf16>(dout), N, V, int(d), scratch, bytes,
                           impl_->stream);
}

// ---- RMSNorm --------------------------------------------------------------------------------------

void CudaOps::rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, float eps) {
  const char* op = "rmsnorm_forward";
  int64_t d = w.numel(), N = rows_of(x, d, op);
  expect(w, DType::BF16, {d}, op, "w");
  expect(x, DType::BF16, {N, d}, op, "x");
  expect(y, DType::BF16, {N, d}, op, "y");
  expect(rstd, DType::F32, {N}, op, "rstd");
  impl_->fp8->drop(y.data);  // y holds bf16 values again
  cuda::rmsnorm_forward(ptr<bf16>(y), ptr<float>(rstd), ptr<bf16>(x), ptr<bf16>(w), N, int(d), eps, impl_->stream);
}

void CudaOps::residual_rmsnorm_forward(const Tensor& h_out, const Tensor& y, const Tensor& rstd, const Tensor& h_in,
                                       const Tensor& x, const Tensor& w, float eps) {
  const char* op = "residual_rmsnorm_forward";
  int64_t d = w.numel(), N = rows_of(x, d, op);
  expect(w, DType::BF16, {d}, op, "w");
  expect(x, DType::BF16, {N, d}, op, "x");
  expect(h_in, DType::BF16, {N, d}, op, "h_in");
  expect(h_out, DType::BF16, {N, d}, op, "h_out");
  expect(y, DType::BF16, {N, d}, op, "y");
  expect(rstd, DType::F32, {N}, op, "rstd");
  impl_->fp8->drop(y.data);  // y holds bf16 values again
  cuda::residual_rmsnorm_forward(ptr<bf16>(h_out), ptr<bf16>(y), ptr<float>(rstd), ptr<bf16>(h_in), ptr<bf16>(x),
                                 ptr<bf16>(w), N, int(d), eps, impl_->stream);
}

void CudaOps::rmsnorm_backward(const Tensor& dh, const Tensor& dw, const Tensor& dy, const Tensor& dresidual,
                               const Tensor& h, const Tensor& rstd, const Tensor& w) {
  const char* op = "rmsnorm_backward";
  int64_t d = w.numel(), N = rows_of(h, d, op);
  expect(w, DType::BF16, {d}, op, "w");
  expect(h, DType::BF16, {N, d}, op, "h");
  expect(rstd, DType::F32, {N}, op, "rstd");
  expect(dy, DType::BF16, {N, d}, op, "dy");
  expect(dh, DType::BF16, {N, d}, op, "dh");
  expect_optional(dresidual, DType::BF16, {N, d}, op, "dresidual");
  expect_optional(dw, DType::F32, {d}, op, "dw");
  size_t bytes = cuda::rmsnorm_backward_scratch_bytes(N, int(d));
  void* scratch = impl_->rmsnorm_scratch.ensure(impl_->alloc, bytes, "rmsnorm backward partials");
  cuda::rmsnorm_backward(ptr<bf16>(dh), ptr<float>(dw), ptr<bf16>(dy), ptr<bf16>(dresidual), ptr<bf16>(h),
                         ptr<float>(rstd), ptr<bf16>(w), N, int(d), scratch, bytes, impl_->stream);
}

// ---- q/k norm and RoPE ----------------------------------------------------------------------------

namespace {
void check_rope_frequencies(const RopeSpec& rope, const AttnShape& s, const char* op) {
  TK_CHECK(rope.inv_freq.size() == size_t(s.head_dim / 2), "{}: {} RoPE frequencies for head_dim {} (needs {})", op,
           rope.inv_freq.size(), s.head_dim, s.head_dim / 2);
}
}  // namespace

void CudaOps::qk_norm_rope_forward(const Tensor& qkv_out, const Tensor& qk_rstd, const Tensor& qkv_in,
                                   const Tensor& q_norm_w, const Tensor& k_norm_w, const Tensor& positions,
                                   const AttnShape& s, const RopeSpec& rope, float eps) {
  const char* op = "qk_norm_rope_forward";
  check_attn_shape(s, op);
  int64_t N = int64_t(s.B) * s.T, W = s.qkv_width(), hd = s.head_dim;
  bool norms = !q_norm_w.empty();
  TK_CHECK(norms == !k_norm_w.empty(), "{}: q_norm_w and k_norm_w must be given together", op);
  expect(qkv_in, DType::BF16, {N, W}, op, "qkv_in");
  expect(qkv_out, DType::BF16, {N, W}, op, "qkv_out");
  expect(positions, DType::I32, {N}, op, "positions");
  expect_optional(q_norm_w, DType::BF16, {hd}, op, "q_norm_w");
  expect_optional(k_norm_w, DType::BF16, {hd}, op, "k_norm_w");
  if (norms) expect(qk_rstd, DType::F32, {N, s.n_heads + s.n_kv_heads}, op, "qk_rstd");
  check_rope_frequencies(rope, s, op);
  const cuda::RopeTable& table = impl_->rope_table_for(s.T, rope.inv_freq);
  cuda::qk_norm_rope_forward(ptr<bf16>(qkv_out), ptr<float>(qk_rstd), ptr<bf16>(qkv_in), ptr<bf16>(q_norm_w),
                             ptr<bf16>(k_norm_w), ptr<int32_t>(positions), table, N,
                             {s.n_heads, s.n_kv_heads, s.head_dim}, eps, impl_->stream);
}

void CudaOps::qk_norm_rope_backward(const Tensor& dqkv_in, const Tensor& dq_norm_w, const Tensor& dk_norm_w,
                                    const Tensor& dqkv_out, const Tensor& qkv_in, const Tensor& qk_rstd,
                                    const Tensor& q_norm_w, const Tensor& k_norm_w, const Tensor& positions,
                                    const AttnShape& s, const RopeSpec& rope,
                                    float /*eps: enters only through qk_rstd*/) {
  const char* op = "qk_norm_rope_backward";
  check_attn_shape(s, op);
  int64_t N = int64_t(s.B) * s.T, W = s.qkv_width(), hd = s.head_dim;
  bool norms = !q_norm_w.empty();
  TK_CHECK(norms == !k_norm_w.empty(), "{}: q_norm_w and k_norm_w must be given together", op);
  expect(dqkv_out, DType::BF16, {N, W}, op, "dqkv_out");
  expect(dqkv_in, DType::BF16, {N, W}, op, "dqkv_in");
  expect(positions, DType::I32, {N}, op, "positions");
  if (norms) {
    expect(qkv_in, DType::BF16, {N, W}, op, "qkv_in");
    expect(qk_rstd, DType::F32, {N, s.n_heads + s.n_kv_heads}, op, "qk_rstd");
    expect(q_norm_w, DType::BF16, {hd}, op, "q_norm_w");
    expect(k_norm_w, DType::BF16, {hd}, op, "k_norm_w");
    expect_optional(dq_norm_w, DType::F32, {hd}, op, "dq_norm_w");
    expect_optional(dk_norm_w, DType::F32, {hd}, op, "dk_norm_w");
  }
  cuda::QkvShape shape{s.n_heads, s.n_kv_heads, s.head_dim};
  size_t bytes = cuda::qk_norm_rope_backward_scratch_bytes(N, shape);
  void* scratch = bytes ? impl_->rope_scratch.ensure(impl_->alloc, bytes, "q/k norm backward partials") : nullptr;
  check_rope_frequencies(rope, s, op);
  const cuda::RopeTable& table = impl_->rope_table_for(s.T, rope.inv_freq);
  cuda::qk_norm_rope_backward(ptr<bf16>(dqkv_in), ptr<float>(dq_norm_w), ptr<float>(dk_norm_w), ptr<bf16>(dqkv_out),
                              ptr<bf16>(qkv_in), ptr<float>(qk_rstd), ptr<bf16>(q_norm_w), ptr<bf16>(k_norm_w),
                              ptr<int32_t>(positions), table, N, shape, scratch, bytes, impl_->stream);
}

// ---- attention ------------------------------------------------------------------------------------

void CudaOps::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, const Tensor& segment_ids,
                                const AttnShape& s) {
  const char* op = "attention_forward";
  check_attn_shape(s, op);
  int64_t B = s.B, T = s.T, Hq = s.n_heads, hd = s.head_dim;
  expect(qkv, DType::BF16, {B, T, Hq + 2 * s.n_kv_heads, hd}, op, "qkv");
  expect(out, DType::BF16, {B, T, Hq, hd}, op, "out");
  expect(lse, DType::F32, {B, Hq, T}, op, "lse");
  expect_optional(segment_ids, DType::I32, {B, T}, op, "segment_ids");
  impl_->attention->forward(ptr<bf16>(out), ptr<float>(lse), ptr<bf16>(qkv), ptr<int32_t>(segment_ids), s);
}

void CudaOps::attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, const Tensor& segment_ids, const AttnShape& s) {
  const char* op = "attention_backward";
  check_attn_shape(s, op);
  int64_t B = s.B, T = s.T, Hq = s.n_heads, Hkv = s.n_kv_heads, hd = s.head_dim;
  expect(qkv, DType::BF16, {B, T, Hq + 2 * Hkv, hd}, op, "qkv");
  expect(dqkv, DType::BF16, {B, T, Hq + 2 * Hkv, hd}, op, "dqkv");
  expect(out, DType::BF16, {B, T, Hq, hd}, op, "out");
  expect(dout, DType::BF16, {B, T, Hq, hd}, op, "dout");
  expect(lse, DType::F32, {B, Hq, T}, op, "lse");
  expect_optional(segment_ids, DType::I32, {B, T}, op, "segment_ids");
  // Our own backward where it runs (Hopper, head_dim 64, no document mask); cuDNN's otherwise, or when asked for
  // with TOKAMAK_ATTENTION_BACKWARD=cudnn.
  if (segment_ids.empty() && cuda::attention_backward_fused_supported(s.T, s.head_dim)) {
    const size_t bytes = cuda::attention_backward_fused_scratch_bytes(s.B, s.T, s.n_heads);
    void* scratch = impl_->attention_scratch.ensure(impl_->alloc, bytes, "attention backward dQ and D");
    cuda::attention_backward_fused(ptr<bf16>(dqkv), ptr<bf16>(dout), ptr<bf16>(qkv), ptr<bf16>(out), ptr<float>(lse),
                                   s.B, s.T, s.n_heads, s.n_kv_heads, s.head_dim, scratch, bytes, impl_->stream);
    return;
  }
  impl_->attention->backward(ptr<bf16>(dqkv), ptr<bf16>(dout), ptr<bf16>(qkv), ptr<bf16>(out), ptr<float>(lse),
                             ptr<int32_t>(segment_ids), s);
}

void CudaOps::attention_decode(const Tensor& out, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv,
                               int pos, const AttnShape& s) {
  const char* op = "attention_decode";
  check_attn_shape(s, op);
  TK_CHECK(s.B == 1, "{}: the KV cache holds one sequence, but B is {}", op, s.B);
  int64_t Hq = s.n_heads, Hkv = s.n_kv_heads, hd = s.head_dim, n_new = s.T;
  TK_CHECK(k_cache.ndim == 3 && k_cache.shape[0] > 0, "{}: k_cache is {} but must be [max_len, {}, {}]", op,
           k_cache.describe(), Hkv, hd);
  int64_t max_len = k_cache.shape[0];
  expect(k_cache, DType::BF16, {max_len, Hkv, hd}, op, "k_cache");
  expect(v_cache, DType::BF16, {max_len, Hkv, hd}, op, "v_cache");
  expect(qkv, DType::BF16, {n_new, Hq + 2 * Hkv, hd}, op, "qkv");
  expect(out, DType::BF16, {n_new, Hq, hd}, op, "out");
  TK_CHECK(pos >= 0 && pos + n_new <= max_len, "{}: tokens [{}, {}) do not fit a cache of {} positions", op, pos,
           pos + n_new, max_len);
  cuda::attention_decode(ptr<bf16>(out), ptr<bf16>(k_cache), ptr<bf16>(v_cache), ptr<bf16>(qkv), pos, int(n_new),
                         int(Hq), int(Hkv), int(hd), impl_->stream);
}

// ---- SwiGLU ---------------------------------------------------------------------------------------

void CudaOps::swiglu_forward(const Tensor& out, const Tensor& gate_up) {
  const char* op = "swiglu_forward";
  int64_t f = out.dim(-1), N = rows_of(out, f, op);
  expect(out, DType::BF16, {N, f}, op, "out");
  expect(gate_up, DType::BF16, {N, 2 * f}, op, "gate_up");
  impl_->fp8->drop(out.data);  // out holds bf16 values again
  cuda::swiglu_forward(ptr<bf16>(out), ptr<bf16>(gate_up), N, int(f), impl_->stream);
}

void CudaOps::swiglu_backward(const Tensor& dgate_up, const Tensor& dout, const Tensor& gate_up) {
  const char* op = "swiglu_backward";
  int64_t f = dout.dim(-1), N = rows_of(dout, f, op);
  expect(dout, DType::BF16, {N, f}, op, "dout");
  expect(gate_up, DType::BF16, {N, 2 * f}, op, "gate_up");
  expect(dgate_up, DType::BF16, {N, 2 * f}, op, "dgate_up");
  cuda::swiglu_backward(ptr<bf16>(dgate_up), ptr<bf16>(dout), ptr<bf16>(gate_up), N, int(f), impl_->stream);
}

// ---- optimizer ------------------------------------------------------------------------------------

double CudaOps::grad_norm(const Tensor& grads) {
  expect(grads, DType::F32, {grads.numel()}, "grad_norm", "grads");
  int64_t n = grads.numel();
  size_t bytes = cuda::grad_norm_scratch_bytes(n);
  void* scratch = impl_->grad_norm_scratch.ensure(impl_->alloc, bytes, "gradient norm partials");
  return cuda::grad_norm_host(ptr<float>(grads), n, scratch, bytes, impl_->stream);
}

void CudaOps::adamw_update(const Tensor& params, const Tensor& master, const Tensor& grads, const Tensor& m,
                           const Tensor& v, const Tensor& m_scale, const Tensor& v_scale,
                           const std::vector<ParamSegment>& segments, const AdamWConfig& c) {
  const char* op = "adamw_update";
  int64_t P = params.numel();
  expect(params, DType::BF16, {P}, op, "params");
  expect_optional(master, DType::F32, {P}, op, "master");
  expect(grads, DType::F32, {P}, op, "grads");
  cuda::AdamWMoments mo;
  mo.m = m.data;
  mo.v = v.data;
  TK_CHECK(!m.empty() && (m.dtype == DType::F32 || m.dtype == DType::BF16 || m.dtype == DType::I8),
           "{}: m is {}: moments are f32, bf16, or int8 (m i8 and v u8, with block scales)", op,
           m.empty() ? "missing" : m.describe());
  if (m.dtype == DType::I8) {
    expect(m, DType::I8, {P}, op, "m");
    expect(v, DType::U8, {P}, op, "v");
    expect(m_scale, DType::F32, {moment_blocks(P)}, op, "m_scale");
    expect(v_scale, DType::F32, {moment_blocks(P)}, op, "v_scale");
    mo.form = cuda::MomentForm::Int8;
    mo.m_scale = ptr<float>(m_scale);
    mo.v_scale = ptr<float>(v_scale);
    if (!impl_->moment_book.data()) {
      void* dev = impl_->moment_book.ensure(impl_->alloc, sizeof(MomentCodeBook), "AdamW int8 code book");
      TK_CUDA_CHECK(cudaMemcpyAsync(dev, &moment_code_book(), sizeof(MomentCodeBook), cudaMemcpyHostToDevice,
                                    impl_->stream));
    }
    mo.book = static_cast<const MomentCodeBook*>(impl_->moment_book.data());
  } else {
    expect(m, m.dtype, {P}, op, "m");
    expect(v, m.dtype, {P}, op, "v");
    TK_CHECK(m_scale.empty() && v_scale.empty(), "{}: block scales are given but the moments are {}, not int8", op,
             dtype_name(m.dtype));
    mo.form = m.dtype == DType::BF16 ? cuda::MomentForm::BF16 : cuda::MomentForm::F32;
  }
  TK_CHECK(c.step >= 1, "{}: step must count from 1, got {}", op, c.step);
  std::vector<cuda::AdamWSegment> table;
  for (const ParamSegment& seg : segments) {
    TK_CHECK(seg.offset >= 0 && seg.count >= 0 && seg.offset + seg.count <= P,
             "{}: segment [{}, {}) lies outside the {} parameters", op, seg.offset, seg.offset + seg.count, P);
    table.push_back({seg.offset, seg.count, seg.decay ? 1 : 0, 0});
  }
  if (table.empty()) return;
  auto same = [&](const AdamWTable& t) {
    return std::equal(table.begin(), table.end(), t.host.begin(), t.host.end(), [](const auto& a, const auto& b) {
      return a.offset == b.offset && a.count == b.count && a.decay == b.decay;
    });
  };
  auto found = std::find_if(impl_->adamw_tables.begin(), impl_->adamw_tables.end(), same);
  if (found == impl_->adamw_tables.end()) {
    // A new segment list (the first step): plan the blocks and upload the table once.
    AdamWTable t;
    t.blocks = cuda::adamw_plan(table.data(), int(table.size()));
    const size_t bytes = table.size() * sizeof(cuda::AdamWSegment);
    t.device = allocate(bytes, "AdamW segment table");
    TK_CUDA_CHECK(cudaMemcpyAsync(t.device, table.data(), bytes, cudaMemcpyHostToDevice, impl_->stream));
    synchronize();
    t.host = std::move(table);
    impl_->adamw_tables.push_back(std::move(t));
    found = impl_->adamw_tables.end() - 1;
  }
  cuda::AdamWStep step{c.lr,
                       c.beta1,
                       c.beta2,
                       c.eps,
                       c.weight_decay,
                       c.grad_scale,
                       float(1.0 - std::pow(double(c.beta1), double(c.step))),
                       float(1.0 - std::pow(double(c.beta2), double(c.step))),
                       c.step,
                       c.first_index};
  cuda::adamw_update(ptr<bf16>(params), ptr<float>(master), ptr<float>(grads), mo, P,
                     static_cast<const cuda::AdamWSegment*>(found->device), int(found->host.size()), found->blocks,
                     step, impl_->stream);
}

}  // namespace tk
