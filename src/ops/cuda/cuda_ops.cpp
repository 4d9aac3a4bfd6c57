// CudaOps: checks each op's tensors against ops.h (a schedule bug reads as a sentence, not a fault inside
// a kernel), then hands raw pointers to the kernels (kernels.h), cuBLASLt (matmul_cublaslt.h), cuDNN
// (attention_cudnn.h) and the fused LM head (cross_entropy.h), all on one stream.
//
// Memory: every allocation is cudaMalloc'd and recorded under a label. Scratch that an op needs (reduction
// partials, the RoPE table, the logits chunk, cuDNN's workspace, ...) follows GrowingBuffer's rule: made
// on the op's first use and grown only when a larger shape first asks, so only a run's first step allocates.
#include "ops/cuda/cuda_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/attention_decode.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_alloc.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/matmul_cublaslt.h"
#include "ops/op_checks.h"

namespace tk {

using cuda::bf16;

namespace {

// Host <-> device f32 conversions go through a staging buffer of this many floats at a time.
constexpr int64_t kStagingFloats = int64_t(16) << 20;  // 64 MiB

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data);
}

// Rows of the last dimension: x[..., d] has numel / d rows.
int64_t rows_of(const Tensor& x, int64_t d, const char* op) {
  TK_CHECK(d > 0 && x.numel() % d == 0, "{}: {} is not rows of width {}", op, x.describe(), d);
  return x.numel() / d;
}

std::string human_bytes(size_t b) {
  if (b >= (size_t(1) << 30)) return fmt::format("{:.2f} GiB", double(b) / double(size_t(1) << 30));
  if (b >= (size_t(1) << 20)) return fmt::format("{:.1f} MiB", double(b) / double(size_t(1) << 20));
  return fmt::format("{:.1f} KiB", double(b) / 1024.0);
}

}  // namespace

// An AdamW segment table on the device, one per distinct segment list (the offloaded update's chunks
// each have their own), uploaded once.
struct AdamWTable {
  std::vector<cuda::AdamWSegment> host;
  void* device = nullptr;
  int blocks = 0;
};

struct CudaOps::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  // The copy queues: created on first use, with a ring of events that orders them against the compute
  // stream (an event may be recorded again once every wait on it has been queued, which record/wait
  // pairs in program order guarantee long before the ring comes round).
  cudaStream_t upload_stream = nullptr, download_stream = nullptr;
  std::vector<cudaEvent_t> events;
  size_t next_event = 0;
  MemoryLedger ledger;
  cuda::DeviceAlloc alloc;  // hands CudaOps::allocate / release to the building blocks

  std::unique_ptr<cuda::Matmul> matmul;
  std::string gemm_tuning_path;  // "" when GEMM tuning is off
  std::unique_ptr<cuda::CudnnAttention> attention;

  // Scratch, each with GrowingBuffer's rule.
  // `transient` holds the LM head's logits chunk during lm_head_cross_entropy and the FP8 operands during a
  // linear op: never both at once, so one buffer of the larger size serves both.
  cuda::GrowingBuffer staging, embedding_scratch, rmsnorm_scratch, rope_scratch, rope_table, transient,
      grad_norm_scratch, moment_book, attention_scratch;
  cuda::RopeTable rope_table_view;      // what rope_table holds: the angles for positions below max_pos
  std::vector<double> rope_table_freq;  // of these frequencies
  size_t logits_budget = cuda::kLogitsChunkBudgetBytes;
  std::vector<AdamWTable> adamw_tables;

  // FP8 linears (set_fp8). Each operand (x, w, dy of the linear with a given weight) has a slot of
  // kFp8SlotFloats floats on the device: [0] the amax its casts scale by, [1] the amax they saw this step
  // (delayed scaling), [4] the dequant scale (cuBLASLt takes only 16-byte aligned scale pointers: a 4-byte
  // aligned one makes the GEMM "not supported"), and a history of kFp8HistoryLen amax values.
  bool fp8 = false, fp8_fusion = true, fp8_lm_head = false;
  float* fp8_dlogits_slot = nullptr;  // the LM head's dlogits: [4] their dequant scale (16-byte aligned)
  float fp8_margin = 1.f;  // 2^margin (set_fp8)
  unsigned long long* fp8_recasts = nullptr;  // on the device, after the slots: the recasts of committed steps
  int64_t fp8_fused_casts = 0;
  CudaOps::Fp8Scaling fp8_scaling = CudaOps::Fp8Scaling::Current;
  static constexpr int kFp8MaxSlots = 3 * 4096;  // 4,096 linear layers
  float* fp8_slots = nullptr;
  float* fp8_history = nullptr;
  std::unordered_map<const void*, int> fp8_first_slot;  // weight -> its x slot (w and dy follow)
  std::vector<uint8_t> fp8_primed, fp8_used;            // per slot: a committed step has an amax / used now
  int64_t fp8_steps = 0;                                // steps committed
  // The slot of operand `role` (0: x, 1: w, 2: dy) of the linear with weight w, its scale set for a cast of
  // x[n]: an amax pass over x unless delayed scaling has a committed amax for it.
  float* fp8_slot(const void* w, int role, const bf16* x, int64_t n) {
    const auto it = fp8_first_slot.try_emplace(w, int(fp8_first_slot.size()) * 3).first;
    TK_CHECK(it->second + 3 <= kFp8MaxSlots, "--fp8 keeps scales for at most {} linear layers", kFp8MaxSlots / 3);
    const int i = it->second + role;
    float* slot = fp8_slots + int64_t(i) * cuda::kFp8SlotFloats;
    fp8_used[size_t(i)] = 1;
    if (fp8_scaling == CudaOps::Fp8Scaling::Current || !fp8_primed[size_t(i)]) cuda::amax_bf16(slot, x, n, stream);
    return slot;
  }
  // The slot as the op that kept an x^T left it: no amax pass, whether or not a committed step primed it (the first
  // step's forward took the pass itself).
  float* fp8_slot_as_kept(const void* w, int role) {
    const int i = fp8_first_slot.at(w) + role;
    fp8_used[size_t(i)] = 1;
    return fp8_slots + int64_t(i) * cuda::kFp8SlotFloats;
  }
  // The cast of x[rows, cols] into x8 and/or xt8 with the slot's scale (recording what it saw when delayed).
  void fp8_cast(uint8_t* x8, uint8_t* xt8, float* slot, const bf16* x, int64_t rows, int64_t cols,
                cuda::Fp8Format f) {
    if (fp8_scaling != CudaOps::Fp8Scaling::Delayed) {
      cuda::quantize_fp8(x8, xt8, slot + 4, x, rows, cols, slot, f, stream);
      return;
    }
    // Delayed: the cast records what it saw; a cast that saturated is done again with that (the guard, launched
    // with the op's other casts' guards before its GEMMs: fp8_flush_guards).
    cuda::quantize_fp8(x8, xt8, slot + 4, x, rows, cols, slot, f, stream, slot + 1);
    if (fp8_guards.size() == size_t(cuda::kFp8MaxGuarded)) fp8_flush_guards();
    fp8_guards.push_back(
        {x8, xt8, slot + 4, x, rows, cols, slot, slot + 1, reinterpret_cast<unsigned int*>(slot + 2), f});
  }
  std::vector<cuda::Fp8GuardOperand> fp8_guards;  // casts whose guard has not been launched yet
  // Activations whose memory holds, instead of their bf16 values, the e4m3 transpose that their linear's weight
  // gradient takes (x -> the linear's weight): the fused SwiGLU and norm forwards write the down, gate/up and qkv
  // projections' x^T there, since the backward needs x only for that GEMM. Consumed by the linear_backward of that
  // weight; any other write of the activation (swiglu_forward, the norms: recomputes) drops it.
  std::unordered_map<const void*, const void*> fp8_kept_xt;
  void fp8_flush_guards() {
    cuda::fp8_guard_all(fp8_guards.data(), int(fp8_guards.size()), stream);
    fp8_guards.clear();
  }
  // Whether the operand's slot has a committed amax (delayed scaling scales its next cast without a pass).
  bool fp8_slot_primed(const void* w, int role) const {
    const auto it = fp8_first_slot.find(w);
    return it != fp8_first_slot.end() && fp8_primed[size_t(it->second + role)];
  }
  // Space in `transient` for the given FP8 operands (element counts, 0: not needed), each 256-byte aligned.
  template <size_t K>
  std::array<uint8_t*, K> fp8_space(const std::array<int64_t, K>& sizes) {
    auto up = [](int64_t n) { return size_t(n + 255) / 256 * 256; };
    size_t total = 0;
    for (int64_t n : sizes) total += up(n);
    auto* base = static_cast<uint8_t*>(transient.ensure(alloc, total, kTransientLabel));
    std::array<uint8_t*, K> out{};
    for (size_t i = 0; i < K; i++) {
      out[i] = sizes[i] > 0 ? base : nullptr;
      base += up(sizes[i]);
    }
    return out;
  }
  // linear_backward's FP8 operands in `transient`: dy as is and transposed, w^T, x^T (those the GEMMs asked need).
  std::array<uint8_t*, 4> fp8_backward_space(const Tensor& dx, const Tensor& dw, int64_t N,
                                             int64_t in, int64_t out) {
    const bool want_dx = !dx.empty(), want_dw = !dw.empty();
    return fp8_space<4>({want_dx ? N * out : 0, want_dw ? N * out : 0, want_dx ? out * in : 0, want_dw ? N * in : 0});
  }

  // linear_backward's FP8 GEMMs once dy is cast (dy8 / dyt8 with the scale in slot sdy): w^T and x^T cast, then
  // dx = dy w and dw += dy^T x.
  void fp8_backward_gemms(const Tensor& dx, const Tensor& dw, uint8_t* dy8, uint8_t* dyt8, float* sdy,
                          uint8_t* wt8, uint8_t* xt8, const Tensor& x, const Tensor& w, int64_t N, int64_t in,
                          int64_t out) {
    float *sw = nullptr, *sx = nullptr;
    if (!dx.empty()) {
      sw = fp8_slot(w.data, 1, ptr<bf16>(w), out * in);
      fp8_cast(nullptr, wt8, sw, ptr<bf16>(w), out, in, cuda::Fp8Format::E4M3);
    }
    if (!dw.empty()) {
      const auto kept = fp8_kept_xt.find(x.data);
      if (kept != fp8_kept_xt.end()) {
        TK_CHECK(kept->second == w.data,
                 "linear_backward: x holds the FP8 transpose a fused forward wrote for another linear");
        fp8_kept_xt.erase(kept);
        sx = fp8_slot_as_kept(w.data, 0);  // the forward's scale; its guard saw to saturation
        xt8 = static_cast<uint8_t*>(x.data);
      } else {
        sx = fp8_slot(w.data, 0, ptr<bf16>(x), N * in);
        fp8_cast(nullptr, xt8, sx, ptr<bf16>(x), N, in, cuda::Fp8Format::E4M3);
      }
    }
    fp8_flush_guards();
    if (sw) matmul->linear_backward_input_fp8(ptr<bf16>(dx), dy8, sdy + 4, wt8, sw + 4, N, in, out);
    if (sx) matmul->linear_backward_weight_fp8(ptr<float>(dw), dyt8, sdy + 4, xt8, sx + 4, N, in, out);
  }
  static constexpr const char* kTransientLabel = "LM head logits chunk / FP8 operands (shared)";

  cudaStream_t queue(Queue q) {
    if (q == Queue::compute) return stream;
    cudaStream_t& s = q == Queue::upload ? upload_stream : download_stream;
    if (!s) TK_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }

  const cuda::RopeTable& rope_table_for(int max_pos, const std::vector<double>& inv_freq);
};

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
  TK_CHECK(cuda_available(), "no CUDA device is available (no GPU, or no working NVIDIA driver)");
  impl_->device = device;
  TK_CUDA_CHECK(cudaSetDevice(device));
  TK_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  impl_->alloc.allocate = [this](size_t bytes, const char* label) { return allocate(bytes, label); };
  impl_->alloc.release = [this](void* p) { release(p); };
  impl_->matmul = std::make_unique<cuda::Matmul>(impl_->stream, impl_->alloc);
  impl_->attention = std::make_unique<cuda::CudnnAttention>(impl_->stream, impl_->alloc);
}

CudaOps::~CudaOps() {
  // Nothing may still run on memory about to be freed; errors are beyond reporting in a destructor.
  cudaStreamSynchronize(impl_->stream);
  for (cudaStream_t s : {impl_->upload_stream, impl_->download_stream})
    if (s) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  for (cudaEvent_t e : impl_->events) cudaEventDestroy(e);
  impl_->attention.reset();
  impl_->matmul.reset();
  for (void* p : impl_->ledger.pointers()) cudaFree(p);
  cudaStreamDestroy(impl_->stream);
}

std::unique_ptr<Ops> make_cuda_ops(int device) { return std::make_unique<CudaOps>(device); }

// ---- memory ---------------------------------------------------------------------------------------

void* CudaOps::allocate(size_t bytes, const char* label) {
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);  // cudaMalloc aligns to at least 256 bytes
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky out-of-memory status
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    fail("out of GPU memory: {} for '{}' did not fit ({} already held by tokamak, {} free of {}); lower the "
         "micro-batch or the sequence length ({})",
         human_bytes(bytes), label, human_bytes(impl_->ledger.total()), human_bytes(free_b), human_bytes(total_b),
         cudaGetErrorString(err));
  }
  impl_->ledger.add(p, bytes, label);
  log::debug("cuda: allocated {} for {}", human_bytes(bytes), label);
  return p;
}

void CudaOps::release(void* p) {
  if (!p) return;
  TK_CHECK(impl_->ledger.contains(p), "release: {} was not allocated by this CUDA backend", p);
  // Kept FP8 transposes inside the memory go with it: a later allocation at the same address holds other data.
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + impl_->ledger.bytes_of(p);
  auto& kept = impl_->fp8_kept_xt;
  for (auto it = kept.begin(); it != kept.end();) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(it->first);
    it = a >= begin && a < end ? kept.erase(it) : std::next(it);
  }
  TK_CUDA_CHECK(cudaFree(p));
  impl_->ledger.remove(p);
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
    int64_t chunk = std::min(n, kStagingFloats);
    auto* staging = static_cast<float*>(impl_->staging.ensure(impl_->alloc, size_t(chunk) * 4, "f32 staging"));
    for (int64_t i = 0; i < n; i += chunk) {
      int64_t len = std::min(chunk, n - i);
      TK_CUDA_CHECK(cudaMemcpyAsync(staging, src + i, size_t(len) * 4, cudaMemcpyHostToDevice, s));
      cuda::f32_to_bf16(ptr<bf16>(dst) + i, staging, len, s);
    }
  }
  synchronize();
}

void CudaOps::download_f32(float* dst, const Tensor& src) {
  TK_CHECK(!src.empty() && (src.dtype == DType::F32 || src.dtype == DType::BF16),
           "download_f32: {} is not an f32 or bf16 tensor", src.describe());
  cudaStream_t s = impl_->stream;
  int64_t n = src.numel();
  if (src.dtype == DType::F32) {
    TK_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, s));
  } else {
    int64_t chunk = std::min(n, kStagingFloats);
    auto* staging = static_cast<float*>(impl_->staging.ensure(impl_->alloc, size_t(chunk) * 4, "f32 staging"));
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
  TK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, impl_->queue(q)));
}

int CudaOps::record_event(Queue q) {
  constexpr size_t kEvents = 64;
  if (impl_->events.empty()) {
    impl_->events.resize(kEvents);
    for (cudaEvent_t& e : impl_->events) TK_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  const int id = int(impl_->next_event++ % kEvents);
  TK_CUDA_CHECK(cudaEventRecord(impl_->events[size_t(id)], impl_->queue(q)));
  return id;
}

void CudaOps::wait_event(Queue waiter, int event) {
  TK_CHECK(event >= 0 && size_t(event) < impl_->events.size(), "wait_event: no event {} was recorded", event);
  TK_CUDA_CHECK(cudaStreamWaitEvent(impl_->queue(waiter), impl_->events[size_t(event)], 0));
}

cudaStream_t CudaOps::stream() const { return impl_->stream; }
int CudaOps::device() const { return impl_->device; }
size_t CudaOps::allocated_bytes() const { return impl_->ledger.total(); }
std::vector<MemoryRow> CudaOps::memory_rows() const { return impl_->ledger.rows(); }

void* CudaOps::allocate_host(size_t bytes, const char* label) {
  void* p = nullptr;
  cudaError_t err = cudaMallocHost(&p, bytes ? bytes : 1);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail("could not page-lock {} of host memory for '{}' ({}); free host memory or offload less",
         human_bytes(bytes), label, cudaGetErrorString(err));
  }
  log::debug("cuda: page-locked {} of host memory for {}", human_bytes(bytes), label);
  return p;
}

void CudaOps::release_host(void* p) {
  if (p) cudaFreeHost(p);
}
void CudaOps::seal_memory() { impl_->ledger.seal(); }
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

std::string CudaOps::memory_report() const {
  std::string out;
  for (const MemoryRow& r : impl_->ledger.rows()) {
    std::string count = r.count > 1 ? fmt::format(" (x{})", r.count) : "";
    out += fmt::format("  {:>12}  {}{}\n", human_bytes(r.bytes), r.label, count);
  }
  out += fmt::format("  {:>12}  total on {}\n", human_bytes(impl_->ledger.total()), cuda_device_name(impl_->device));
  return out;
}

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
  impl_->fp8_kept_xt.erase(y.data);  // y holds bf16 values again
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
  impl_->fp8_kept_xt.erase(y.data);  // y holds bf16 values again
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

// ---- linear ---------------------------------------------------------------------------------------

void CudaOps::set_fp8(bool on, Fp8Scaling scaling, int margin) {
  TK_CHECK(margin >= 0 && margin <= 8, "--fp8-margin is {}: it must be 0 to 8 (the scale's headroom, 2^margin)",
           margin);
  Impl& m = *impl_;
  if (on) {
    cudaDeviceProp prop{};
    TK_CUDA_CHECK(cudaGetDeviceProperties(&prop, m.device));
    TK_CHECK(prop.major * 10 + prop.minor >= 89,
             "--fp8 needs FP8 tensor cores (compute capability 8.9 or newer); {} is {}.{}", prop.name, prop.major,
             prop.minor);
    if (!m.fp8_slots) {
      // + the recasts' count (16 bytes), then the LM head dlogits' slot (16-byte aligned)
      const size_t slots = size_t(Impl::kFp8MaxSlots + 1) * cuda::kFp8SlotFloats * sizeof(float) + 16;
      const size_t history = size_t(Impl::kFp8MaxSlots) * kFp8HistoryLen * sizeof(float);
      m.fp8_slots = static_cast<float*>(allocate(slots, "FP8 scales"));
      m.fp8_history = static_cast<float*>(allocate(history, "FP8 amax history"));
      m.fp8_recasts = reinterpret_cast<unsigned long long*>(m.fp8_slots + size_t(Impl::kFp8MaxSlots) *
                                                                               cuda::kFp8SlotFloats);
      m.fp8_dlogits_slot = m.fp8_slots + size_t(Impl::kFp8MaxSlots) * cuda::kFp8SlotFloats + 4;
      TK_CUDA_CHECK(cudaMemsetAsync(m.fp8_slots, 0, slots, m.stream));
      TK_CUDA_CHECK(cudaMemsetAsync(m.fp8_history, 0, history, m.stream));
      m.fp8_primed.assign(Impl::kFp8MaxSlots, 0);
      m.fp8_used.assign(Impl::kFp8MaxSlots, 0);
    }
  }
  m.fp8 = on;
  m.fp8_scaling = scaling;
  m.fp8_margin = std::ldexp(1.f, margin);
}

int64_t CudaOps::fp8_recasts() const {
  if (!impl_->fp8_recasts) return 0;
  unsigned long long n = 0;
  TK_CUDA_CHECK(cudaMemcpyAsync(&n, impl_->fp8_recasts, sizeof n, cudaMemcpyDeviceToHost, impl_->stream));
  TK_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  return int64_t(n);
}

void CudaOps::end_step() {
  Impl& m = *impl_;
  if (!m.fp8 || m.fp8_scaling != Fp8Scaling::Delayed || m.fp8_first_slot.empty()) return;
  const int n = int(m.fp8_first_slot.size()) * 3;
  cuda::fp8_commit_amax(m.fp8_slots, m.fp8_history, n, kFp8HistoryLen, int(m.fp8_steps % kFp8HistoryLen),
                        m.fp8_margin, m.fp8_recasts, m.stream);
  for (int i = 0; i < n; i++) {
    m.fp8_primed[size_t(i)] |= m.fp8_used[size_t(i)];
    m.fp8_used[size_t(i)] = 0;
  }
  m.fp8_steps++;
}

Ops::Fp8ScalingState CudaOps::fp8_scaling_state() const {
  const Impl& m = *impl_;
  Fp8ScalingState st;
  if (!m.fp8 || m.fp8_scaling != Fp8Scaling::Delayed) return st;
  st.history_len = kFp8HistoryLen;
  st.steps = m.fp8_steps;
  const size_t per = size_t(3) * kFp8HistoryLen, n = m.fp8_first_slot.size() * 3;
  std::vector<float> all(n * kFp8HistoryLen), slots(n * cuda::kFp8SlotFloats);
  if (n > 0) {
    TK_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    TK_CUDA_CHECK(cudaMemcpy(all.data(), m.fp8_history, all.size() * sizeof(float), cudaMemcpyDeviceToHost));
    TK_CUDA_CHECK(cudaMemcpy(slots.data(), m.fp8_slots, slots.size() * sizeof(float), cudaMemcpyDeviceToHost));
  }
  for (const auto& [w, first] : m.fp8_first_slot) {
    const float* h = all.data() + size_t(first) * kFp8HistoryLen;
    std::vector<float> v(h, h + per);
    for (int r = 0; r < 3; r++) v.push_back(slots[(size_t(first) + size_t(r)) * cuda::kFp8SlotFloats + 1]);
    st.weights.push_back({w, std::move(v)});
  }
  return st;
}

void CudaOps::set_fp8_scaling_state(const Fp8ScalingState& st) {
  Impl& m = *impl_;
  if (!m.fp8 || m.fp8_scaling != Fp8Scaling::Delayed || st.weights.empty()) return;
  TK_CHECK(st.history_len == kFp8HistoryLen, "the FP8 amax history saved has {} steps a value, this build keeps {}",
           st.history_len, kFp8HistoryLen);
  TK_CHECK(m.fp8_first_slot.empty(), "internal error: FP8 scaling state restored after the first FP8 cast");
  const size_t per = size_t(3) * kFp8HistoryLen;
  std::vector<float> history(st.weights.size() * per), slots(st.weights.size() * 3 * cuda::kFp8SlotFloats, 0.f);
  for (size_t e = 0; e < st.weights.size(); e++) {
    const Fp8AmaxHistory& h = st.weights[e];
    TK_CHECK(h.amax.size() == per + 3, "an FP8 amax history holds {} values where {} were expected",
             h.amax.size(), per + 3);
    TK_CHECK(3 * (e + 1) <= size_t(Impl::kFp8MaxSlots), "--fp8 keeps scales for at most {} linear layers",
             Impl::kFp8MaxSlots / 3);
    m.fp8_first_slot[h.weight] = int(e) * 3;
    std::copy(h.amax.begin(), h.amax.begin() + ptrdiff_t(per), history.begin() + ptrdiff_t(e * per));
    for (int r = 0; r < 3; r++) {
      const float* v = h.amax.data() + r * kFp8HistoryLen;
      const float mx = *std::max_element(v, v + kFp8HistoryLen);
      const float seen = h.amax[per + size_t(r)];
      slots[(e * 3 + size_t(r)) * cuda::kFp8SlotFloats] = mx * m.fp8_margin;  // as fp8_commit_amax leaves it
      slots[(e * 3 + size_t(r)) * cuda::kFp8SlotFloats + 1] = seen;
      m.fp8_primed[e * 3 + size_t(r)] = mx > 0.f;
      m.fp8_used[e * 3 + size_t(r)] = seen > 0.f;
    }
  }
  TK_CUDA_CHECK(cudaMemcpyAsync(m.fp8_history, history.data(), history.size() * sizeof(float),
                                cudaMemcpyHostToDevice, m.stream));
  TK_CUDA_CHECK(cudaMemcpyAsync(m.fp8_slots, slots.data(), slots.size() * sizeof(float), cudaMemcpyHostToDevice,
                                m.stream));
  TK_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  m.fp8_steps = st.steps;
}

bool CudaOps::fp8() const { return impl_->fp8; }
void CudaOps::set_fp8_fusion(bool on) { impl_->fp8_fusion = on; }
void CudaOps::set_fp8_lm_head(bool on) { impl_->fp8_lm_head = on; }
bool CudaOps::fp8_lm_head() const { return impl_->fp8_lm_head; }
bool CudaOps::fuses_swiglu_linear() const {
  return impl_->fp8 && impl_->fp8_fusion && impl_->fp8_scaling == Fp8Scaling::Delayed;
}
bool CudaOps::fuses_rmsnorm_linear() const { return fuses_swiglu_linear(); }  // the same conditions
int64_t CudaOps::fp8_fused_casts() const { return impl_->fp8_fused_casts; }

namespace {
// The FP8 path's conditions: cuBLASLt's (every dimension a multiple of 16) and quantize_fp8's (16-byte rows).
bool fp8_shape(int64_t N, int64_t in, int64_t out, std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands)
    if (!t->empty() && (reinterpret_cast<uintptr_t>(t->data) & 15) != 0) return false;
  return N % 16 == 0 && in % 16 == 0 && out % 16 == 0;
}
}  // namespace

// x of a linear's backward: bf16, or one byte an element (ModelOptions::fp8_kept_inputs) holding the x^T that a
// fused forward kept for it.
void CudaOps::expect_linear_input(const Tensor& x, int64_t N, int64_t in, const char* op) const {
  if (x.dtype != DType::U8) return expect(x, DType::BF16, {N, in}, op, "x");
  expect(x, DType::U8, {N, in}, op, "x");
  TK_CHECK(impl_->fp8_kept_xt.count(x.data),
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
  TK_CHECK(!impl_->fp8_kept_xt.count(x.data),
           "{}: x holds the FP8 transpose a fused forward kept for a linear's backward, not its values", op);
  if (impl_->fp8 && fp8_shape(N, in, out, {&x, &w})) {
    Impl& m = *impl_;
    const auto [x8, w8] = m.fp8_space<2>({N * in, out * in});
    float* sx = m.fp8_slot(w.data, 0, ptr<bf16>(x), N * in);
    m.fp8_cast(x8, nullptr, sx, ptr<bf16>(x), N, in, cuda::Fp8Format::E4M3);
    float* sw = m.fp8_slot(w.data, 1, ptr<bf16>(w), out * in);
    m.fp8_cast(w8, nullptr, sw, ptr<bf16>(w), out, in, cuda::Fp8Format::E4M3);
    m.fp8_flush_guards();
    m.matmul->linear_forward_fp8(ptr<bf16>(y), x8, sx + 4, w8, sw + 4, ptr<bf16>(bias), N, in, out);
    return;
  }
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
  if (impl_->fp8 && fp8_shape(N, in, out, {&x, &w, &dy}) && (!dx.empty() || !dw.empty())) {
    Impl& m = *impl_;
    const auto [dy8, dyt8, wt8, xt8] = m.fp8_backward_space(dx, dw, N, in, out);
    float* sdy = m.fp8_slot(w.data, 2, ptr<bf16>(dy), N * out);
    m.fp8_cast(dy8, dyt8, sdy, ptr<bf16>(dy), N, out, cuda::Fp8Format::E5M2);
    m.fp8_backward_gemms(dx, dw, dy8, dyt8, sdy, wt8, xt8, x, w, N, in, out);
    if (!dbias.empty()) mm.bias_backward(ptr<float>(dbias), ptr<bf16>(dy), N, out);
    return;
  }
  TK_CHECK(dw.empty() || !impl_->fp8_kept_xt.count(x.data),
           "{}: x holds the FP8 transpose a fused forward kept, but this backward is not on the FP8 path", op);
  if (!dx.empty()) mm.linear_backward_input(ptr<bf16>(dx), ptr<bf16>(dy), ptr<bf16>(w), N, in, out);
  if (!dw.empty()) mm.linear_backward_weight(ptr<float>(dw), ptr<bf16>(dy), ptr<bf16>(x), N, in, out);
  if (!dbias.empty()) mm.bias_backward(ptr<float>(dbias), ptr<bf16>(dy), N, out);
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
  impl_->fp8_kept_xt.erase(out.data);  // out holds bf16 values again
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

void CudaOps::swiglu_linear_forward(const Tensor& y, const Tensor& act, const Tensor& gate_up, const Tensor& w) {
  Impl& m = *impl_;
  const int64_t f = act.dim(-1), N = rows_of(act, f, "swiglu_linear_forward");
  // SwiGLU's output cast to FP8 as it is written: with delayed scaling once the operand has a committed amax,
  // when linear_forward would take the FP8 path for it.
  const bool fused = fuses_swiglu_linear() && w.ndim == 2 && w.dim(1) == f && f % 8 == 0 &&
                     fp8_shape(N, f, w.dim(0), {&act, &w, &gate_up}) && m.fp8_slot_primed(w.data, 0);
  const char* op = "swiglu_linear_forward";
  const bool kept_u8 = act.dtype == DType::U8;  // ModelOptions::fp8_kept_inputs: act holds only the x^T
  if (!fused && !kept_u8) {
    Ops::swiglu_linear_forward(y, act, gate_up, w);  // swiglu_forward drops act from fp8_kept_xt
    return;
  }
  TK_CHECK(fused || (fuses_swiglu_linear() && w.ndim == 2 && w.dim(1) == f &&
                     fp8_shape(N, f, w.dim(0), {&act, &w, &gate_up})),
           "{}: act is one byte an element (the kept FP8 x^T of --fp8 with delayed scaling) but this linear is not on "
           "that path",
           op);
  const int64_t out = w.dim(0), in = f;
  expect(act, kept_u8 ? DType::U8 : DType::BF16, {N, f}, op, "act");
  expect(gate_up, DType::BF16, {N, 2 * f}, op, "gate_up");
  expect(w, DType::BF16, {out, in}, op, "w");
  expect(y, DType::BF16, {N, out}, op, "y");
  // The backward needs act only for the weight gradient's x^T: that is what act's memory keeps, so the bf16
  // output is never kept and the backward casts nothing for it. Once the operand has a history the cast is fused
  // into SwiGLU; before (the first step, act one byte an element) SwiGLU's output goes to bf16 scratch after the
  // FP8 operands, then its amax and the cast both ways: the bytes the unfused ops give.
  const bool first = !fused;
  const auto [x8, w8, scratch] = m.fp8_space<3>({N * in, out * in, first ? 2 * N * in : 0});
  auto* xt8 = static_cast<uint8_t*>(act.data);
  float* sx = nullptr;
  if (first) {
    auto* x = reinterpret_cast<bf16*>(scratch);
    cuda::swiglu_forward(x, ptr<bf16>(gate_up), N, int(f), m.stream);
    sx = m.fp8_slot(w.data, 0, x, N * in);
    m.fp8_cast(x8, xt8, sx, x, N, in, cuda::Fp8Format::E4M3);
  } else {
    sx = m.fp8_slot(w.data, 0, nullptr, 0);  // primed: no amax pass
    m.fp8_fused_casts++;
    cuda::swiglu_forward_fp8(nullptr, x8, xt8, sx + 4, ptr<bf16>(gate_up), N, int(f), sx, sx + 1,
                             cuda::Fp8Format::E4M3, m.stream);
    m.fp8_guards.push_back({x8, xt8, sx + 4, nullptr, N, in, sx, sx + 1, reinterpret_cast<unsigned int*>(sx + 2),
                            cuda::Fp8Format::E4M3, ptr<bf16>(gate_up)});
  }
  m.fp8_kept_xt[act.data] = w.data;
  float* sw = m.fp8_slot(w.data, 1, ptr<bf16>(w), out * in);
  m.fp8_cast(w8, nullptr, sw, ptr<bf16>(w), out, in, cuda::Fp8Format::E4M3);
  m.fp8_flush_guards();
  m.matmul->linear_forward_fp8(ptr<bf16>(y), x8, sx + 4, w8, sw + 4, nullptr, N, in, out);
}

void CudaOps::rmsnorm_linear_forward(const Tensor& y, const Tensor& x_norm, const Tensor& rstd, const Tensor& h_out,
                                     const Tensor& h_in, const Tensor& x, const Tensor& norm_w, const Tensor& w,
                                     const Tensor& bias, float eps) {
  Impl& m = *impl_;
  const char* op = "rmsnorm_linear_forward";
  const int64_t d = norm_w.numel(), N = rows_of(x, d, op);
  // The norm's output cast to FP8 from its input and rstd: with delayed scaling once the operand has a committed
  // amax, when linear_forward would take the FP8 path, and for the norm kernels' warp-per-row widths.
  const bool fused = fuses_rmsnorm_linear() && w.ndim == 2 && w.dim(1) == d && d % 8 == 0 && d <= 4096 &&
                     fp8_shape(N, d, w.dim(0), {&x, &x_norm, &w, &norm_w, &h_in, &h_out}) &&
                     m.fp8_slot_primed(w.data, 0);
  const bool kept_u8 = x_norm.dtype == DType::U8;  // ModelOptions::fp8_kept_inputs: x_norm holds only the x^T
  if (!fused && !kept_u8) {
    Ops::rmsnorm_linear_forward(y, x_norm, rstd, h_out, h_in, x, norm_w, w, bias, eps);
    return;
  }
  TK_CHECK(fused || (fuses_rmsnorm_linear() && w.ndim == 2 && w.dim(1) == d && d % 8 == 0 && d <= 4096 &&
                     fp8_shape(N, d, w.dim(0), {&x, &x_norm, &w, &norm_w, &h_in, &h_out})),
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
  // As for SwiGLU's output: x_norm's memory keeps the transpose the weight gradient takes, not the bf16 values.
  // Once the operand has a history the norm writes no output and its cast is fused; before (the first step,
  // x_norm one byte an element) the norm writes bf16 scratch after the FP8 operands, then its amax and the cast.
  const bool first = !fused;
  const auto [x8, w8, scratch] = m.fp8_space<3>({N * in, out * in, first ? 2 * N * in : 0});
  auto* y_first = reinterpret_cast<bf16*>(scratch);  // null when fused
  const bf16* h = ptr<bf16>(x);  // the norm's input
  if (h_in.empty()) {
    cuda::rmsnorm_forward(y_first, ptr<float>(rstd), ptr<bf16>(x), ptr<bf16>(norm_w), N, int(d), eps, m.stream);
  } else {
    expect(h_in, DType::BF16, {N, d}, op, "h_in");
    expect(h_out, DType::BF16, {N, d}, op, "h_out");
    cuda::residual_rmsnorm_forward(ptr<bf16>(h_out), y_first, ptr<float>(rstd), ptr<bf16>(h_in), ptr<bf16>(x),
                                   ptr<bf16>(norm_w), N, int(d), eps, m.stream);
    h = ptr<bf16>(h_out);
  }
  auto* xt8 = static_cast<uint8_t*>(x_norm.data);
  float* sx = nullptr;
  if (first) {
    sx = m.fp8_slot(w.data, 0, y_first, N * in);
    m.fp8_cast(x8, xt8, sx, y_first, N, in, cuda::Fp8Format::E4M3);
  } else {
    sx = m.fp8_slot(w.data, 0, nullptr, 0);  // primed: no amax pass
    m.fp8_fused_casts++;
    cuda::rmsnorm_cast_fp8(x8, xt8, sx + 4, h, ptr<float>(rstd), ptr<bf16>(norm_w), N, int(d), sx, sx + 1,
                           cuda::Fp8Format::E4M3, m.stream);
    m.fp8_guards.push_back({x8, xt8, sx + 4, h, N, in, sx, sx + 1, reinterpret_cast<unsigned int*>(sx + 2),
                            cuda::Fp8Format::E4M3, nullptr, ptr<float>(rstd), ptr<bf16>(norm_w)});
  }
  m.fp8_kept_xt[x_norm.data] = w.data;
  float* sw = m.fp8_slot(w.data, 1, ptr<bf16>(w), out * in);
  m.fp8_cast(w8, nullptr, sw, ptr<bf16>(w), out, in, cuda::Fp8Format::E4M3);
  m.fp8_flush_guards();
  m.matmul->linear_forward_fp8(ptr<bf16>(y), x8, sx + 4, w8, sw + 4, ptr<bf16>(bias), N, in, out);
}

void CudaOps::swiglu_linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dgate_up, const Tensor& dout,
                                     const Tensor& gate_up, const Tensor& x, const Tensor& w) {
  Impl& m = *impl_;
  const int64_t f = dout.dim(-1), N = rows_of(dout, f, "swiglu_linear_backward");
  // SwiGLU's gradient cast to FP8 as it is computed: with delayed scaling once the operand has a committed amax
  // (its scale is known before the values are), when linear_backward would take the FP8 path for it.
  const bool fused = fuses_swiglu_linear() && w.ndim == 2 && w.dim(0) == 2 * f && f % 8 == 0 &&
                     (!dx.empty() || !dw.empty()) &&
                     fp8_shape(N, w.dim(1), 2 * f, {&x, &w, &dgate_up, &dout, &gate_up}) &&
                     m.fp8_slot_primed(w.data, 2);
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
  const auto [dy8, dyt8, wt8, xt8] = m.fp8_backward_space(dx, dw, N, in, out);
  float* sdy = m.fp8_slot(w.data, 2, nullptr, 0);  // primed: no amax pass
  m.fp8_fused_casts++;
  cuda::swiglu_backward_fp8(dy8, dyt8, sdy + 4, ptr<bf16>(dout), ptr<bf16>(gate_up), N, int(f), sdy, sdy + 1,
                            reinterpret_cast<unsigned int*>(sdy + 2), cuda::Fp8Format::E5M2, m.stream);
  m.fp8_backward_gemms(dx, dw, dy8, dyt8, sdy, wt8, xt8, x, w, N, in, out);
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
  Impl& m = *impl_;
  if (m.fp8 && m.fp8_lm_head && fp8_shape(N, d, V, {&x, &w})) {
    // FP8 (set_fp8_lm_head): per chunk of token rows, x's rows cast (as is for the logits, transposed for dw), the
    // logits' GEMM, the softmax rows writing the dlogits in e5m2 with the scale of their bound (for dx), their
    // transpose (for dw), then the two gradient GEMMs. The weight is cast once a call (as is for the logits,
    // transposed for dx). Every operand lives in `transient`, after the logits chunk.
    const bool want_dx = !dx.empty(), want_dw = !dw.empty(), grads = want_dx || want_dw;
    const auto [logit_bytes, dl8, dlt8, w8, wt8, x8, xt8] = m.fp8_space<7>(
        {2 * rows * V, grads ? rows * V : 0, want_dw ? rows * V : 0, V * d, want_dx ? d * V : 0, rows * d,
         want_dw ? d * rows : 0});
    auto* logits = reinterpret_cast<bf16*>(logit_bytes);
    float* sw = m.fp8_slot(w.data, 1, ptr<bf16>(w), V * d);
    m.fp8_cast(w8, wt8, sw, ptr<bf16>(w), V, d, cuda::Fp8Format::E4M3);
    float* sx = m.fp8_slot(w.data, 0, ptr<bf16>(x), N * d);
    float* sdl = m.fp8_dlogits_slot;
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
      const int64_t n = std::min(rows, N - r0);
      m.fp8_cast(x8, xt8, sx, ptr<bf16>(x) + r0 * d, n, d, cuda::Fp8Format::E4M3);
      m.fp8_flush_guards();
      m.matmul->linear_forward_fp8(logits, x8, sx + 4, w8, sw + 4, nullptr, n, d, V);
      if (!grads) {
        cuda::cross_entropy_chunk(logits, ptr<float>(losses) + r0, ptr<int32_t>(targets) + r0, n, V, grad_scale,
                                  ignore_index, false, m.stream);
        continue;
      }
      cuda::cross_entropy_chunk_fp8(logits, dl8, sdl + 4, ptr<float>(losses) + r0, ptr<int32_t>(targets) + r0, n, V,
                                    grad_scale, ignore_index, m.stream);
      if (want_dw) cuda::transpose_bytes(dlt8, dl8, n, V, m.stream);
      if (want_dx) m.matmul->linear_backward_input_fp8(ptr<bf16>(dx) + r0 * d, dl8, sdl + 4, wt8, sw + 4, n, d, V);
      if (want_dw) m.matmul->linear_backward_weight_fp8(ptr<float>(dw), dlt8, sdl + 4, xt8, sx + 4, n, d, V);
    }
    return;
  }
  auto* logits = static_cast<bf16*>(
      impl_->transient.ensure(impl_->alloc, size_t(rows * V) * sizeof(bf16), Impl::kTransientLabel));
  cuda::lm_head_cross_entropy(*impl_->matmul, logits, rows, ptr<float>(losses), ptr<bf16>(dx), ptr<float>(dw),
                              ptr<bf16>(x), ptr<bf16>(w), ptr<int32_t>(targets), N, d, V, grad_scale, ignore_index,
                              impl_->stream);
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

// ---- device information ----------------------------------------------------------------------------

bool cuda_available() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // leave no sticky error behind for later calls
    return false;
  }
  return count > 0;
}

CudaDeviceInfo cuda_device_info(int device) {
  TK_CHECK(cuda_available(), "no CUDA device is available (no GPU, or no working NVIDIA driver)");
  cudaDeviceProp prop{};
  TK_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return {prop.name, prop.multiProcessorCount, prop.major, prop.minor, prop.totalGlobalMem};
}

std::string cuda_device_name(int device) { return cuda_device_info(device).name; }

size_t cuda_memory_used() {
  size_t free_b = 0, total_b = 0;
  TK_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}

}  // namespace tk
