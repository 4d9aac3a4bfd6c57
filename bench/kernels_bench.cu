// Achieved memory bandwidth of each fused memory-bound kernel (src/ops/cuda/kernels.h) at training shapes,
// against the measured device-to-device copy ceiling, and against a copy that moves the same bytes (what a
// launch of that size can reach at all: small kernels pay a fixed start and tail the 2 GiB ceiling does not).
// Bytes are the fewest each kernel must move (every input read once, every output written once); time is the
// median over batches of launches timed with events, rotating over enough input sets that they do not fit in
// L2. Prints one table.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"

namespace tk::cuda {
namespace {

constexpr int kWarmup = 3, kBatches = 15, kLaunchesPerBatch = 10;

// ---- device memory and random fills ------------------------------------------------------------

__device__ float hash_uniform(uint64_t i, uint32_t seed) {  // in [-1, 1)
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
  return float(x >> 40) / float(1 << 23) - 1.f;
}
__global__ void fill_bf16_kernel(bf16* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16_rn(scale * hash_uniform(i, seed));
}
__global__ void fill_f32_kernel(float* p, int64_t n, uint32_t seed, float scale, bool square) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float u = scale * hash_uniform(i, seed);
    p[i] = square ? u * u : u;
  }
}
__global__ void fill_ids_kernel(int32_t* p, int64_t n, uint32_t seed, int32_t modulo) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = int32_t(uint32_t((hash_uniform(i, seed) + 1.f) * 8388608.f) % uint32_t(modulo));
}

// Device buffers of one benchmark case, freed together.
class Pool {
 public:
  ~Pool() {
    for (void* p : ptrs_) cudaFree(p);
  }
  template <class T>
  T* alloc(int64_t n) {
    void* p = nullptr;
    TK_CUDA_CHECK(cudaMalloc(&p, size_t(std::max<int64_t>(n, 1)) * sizeof(T)));
    ptrs_.push_back(p);
    return static_cast<T*>(p);
  }
  bf16* random_bf16(int64_t n, float scale = 1.f) {
    bf16* p = alloc<bf16>(n);
    fill_bf16_kernel<<<1024, 256>>>(p, n, seed_++, scale);
    TK_CUDA_CHECK_LAUNCH();
    return p;
  }
  float* random_f32(int64_t n, float scale = 1.f, bool square = false) {
    float* p = alloc<float>(n);
    fill_f32_kernel<<<1024, 256>>>(p, n, seed_++, scale, square);
    TK_CUDA_CHECK_LAUNCH();
    return p;
  }
  int32_t* random_ids(int64_t n, int32_t modulo) {
    int32_t* p = alloc<int32_t>(n);
    fill_ids_kernel<<<1024, 256>>>(p, n, seed_++, modulo);
    TK_CUDA_CHECK_LAUNCH();
    return p;
  }

 private:
  std::vector<void*> ptrs_;
  uint32_t seed_ = 12345;
};

// ---- timing ---------------------------------------------------------------------------------------

// Median microseconds of one launch; launch(k) runs on input set k % sets.
double median_us(const std::function<void(int)>& launch) {
  for (int k = 0; k < kWarmup; k++) launch(k);
  cudaEvent_t start, stop;
  TK_CUDA_CHECK(cudaEventCreate(&start));
  TK_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> us;
  for (int b = 0; b < kBatches; b++) {
    TK_CUDA_CHECK(cudaEventRecord(start));
    for (int k = 0; k < kLaunchesPerBatch; k++) launch(b * kLaunchesPerBatch + k);
    TK_CUDA_CHECK(cudaEventRecord(stop));
    TK_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    TK_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(1000.f * ms / kLaunchesPerBatch);
  }
  TK_CUDA_CHECK(cudaEventDestroy(start));
  TK_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// Input sets so that one pass over all of them is several times the L2.
int rotation_sets(double bytes_per_call) {
  static const double l2 = [] {
    int dev = 0, bytes = 0;
    TK_CUDA_CHECK(cudaGetDevice(&dev));
    TK_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, dev));
    return double(bytes);
  }();
  return int(std::clamp(std::ceil(4 * l2 / bytes_per_call), 1.0, 8.0));
}

struct Row {
  std::string kernel, shape;
  double bytes, us;
  double copy_us = 0;  // a device-to-device copy of bytes / 2 (so bytes moved), rotated the same way
};
std::vector<Row> rows;
double copy_gbps = 0;

double same_size_copy_us(double bytes) {
  // From 4 GiB up a copy runs at the 2 GiB ceiling's rate: no need to allocate its size again.
  if (bytes >= double(int64_t(4) << 30) && copy_gbps > 0) return bytes / copy_gbps / 1e3;
  const int64_t half = std::max<int64_t>(int64_t(bytes / 2) / 256 * 256, 256);
  const int sets = rotation_sets(bytes);
  Pool pool;
  std::vector<char*> src, dst;
  for (int k = 0; k < sets; k++) {
    src.push_back(pool.alloc<char>(half)), dst.push_back(pool.alloc<char>(half));
    TK_CUDA_CHECK(cudaMemset(src.back(), 1, size_t(half)));
  }
  return median_us([&](int k) {
    TK_CUDA_CHECK(cudaMemcpyAsync(dst[k % sets], src[k % sets], size_t(half), cudaMemcpyDeviceToDevice));
  });
}

void record(const std::string& kernel, const std::string& shape, double bytes, const std::function<void(int)>& launch) {
  const double us = median_us(launch);
  rows.push_back({kernel, shape, bytes, us, same_size_copy_us(bytes)});
  std::fprintf(stderr, "  %-26s %-34s %8.1f us (same-size copy %.1f us)\n", kernel.c_str(), shape.c_str(), us,
               rows.back().copy_us);
}

// ---- the ceiling ----------------------------------------------------------------------------------

void measure_copy_ceiling() {
  Pool pool;
  const int64_t bytes = int64_t(2) << 30;
  char* a = pool.alloc<char>(bytes);
  char* b = pool.alloc<char>(bytes);
  TK_CUDA_CHECK(cudaMemset(a, 1, size_t(bytes)));
  const double us =
      median_us([&](int) { TK_CUDA_CHECK(cudaMemcpyAsync(b, a, size_t(bytes), cudaMemcpyDeviceToDevice)); });
  copy_gbps = 2.0 * double(bytes) / us / 1e3;  // read + write
  rows.push_back({"copy (ceiling)", "2 GiB device to device", 2.0 * double(bytes), us, us});
}

// ---- the kernels ----------------------------------------------------------------------------------

constexpr int64_t kTokens = 16384;  // 8 x 2048 tokens per micro-step
const int kWidths[] = {896, 2048, 1536};  // Qwen2.5-0.5B, Llama-3.2-1B, Qwen2.5-1.5B
const int kFfnWidths[] = {4864, 8192, 8960};

std::string nd_shape(int64_t N, int d, const char* what = "d") {
  return "N=" + std::to_string(N) + " " + what + "=" + std::to_string(d);
}

void bench_rmsnorm() {
  for (int d : kWidths) {
    const int64_t N = kTokens, nd = N * d;
    const double act = 2.0 * double(nd);  // one bf16 [N, d] tensor
    const int sets = rotation_sets(5 * act);
    Pool pool;
    std::vector<bf16*> x, h, y, dy, dres, dh;
    std::vector<float*> rstd;
    for (int k = 0; k < sets; k++) {
      x.push_back(pool.random_bf16(nd)), h.push_back(pool.random_bf16(nd)), y.push_back(pool.alloc<bf16>(nd));
      dy.push_back(pool.random_bf16(nd)), dres.push_back(pool.random_bf16(nd)), dh.push_back(pool.alloc<bf16>(nd));
      rstd.push_back(pool.alloc<float>(N));
    }
    bf16* w = pool.random_bf16(d);
    float* dw = pool.random_f32(d);
    const size_t scratch_bytes = rmsnorm_backward_scratch_bytes(N, d);
    void* scratch = pool.alloc<char>(int64_t(scratch_bytes));
    record("rmsnorm_forward", nd_shape(N, d), 2 * act + 4.0 * N, [&](int k) {
      rmsnorm_forward(y[k % sets], rstd[k % sets], x[k % sets], w, N, d, 1e-6f, nullptr);
    });
    record("residual_rmsnorm_forward", nd_shape(N, d), 4 * act + 4.0 * N, [&](int k) {
      const int s = k % sets;
      residual_rmsnorm_forward(h[s], y[s], rstd[s], h[s], x[s], w, N, d, 1e-6f, nullptr);
    });
    record("rmsnorm_backward", nd_shape(N, d), 4 * act + 4.0 * N, [&](int k) {
      const int s = k % sets;
      rmsnorm_backward(dh[s], dw, dy[s], dres[s], h[s], rstd[s], w, N, d, scratch, scratch_bytes, nullptr);
    });
  }
}

struct RopeShape {
  const char* model;
  int Hq, Hkv, hd;
  bool norm;
};

void bench_rope() {
  const int T = 2048;
  for (RopeShape r : {RopeShape{"0.5B", 14, 2, 64, false}, RopeShape{"1B", 32, 8, 64, false},
                      RopeShape{"1.5B", 12, 2, 128, false}, RopeShape{"Qwen3-1.7B", 16, 8, 128, true}}) {
    const int64_t N = kTokens, W = int64_t(r.Hq + 2 * r.Hkv) * r.hd, n_rot = r.Hq + r.Hkv;
    const double qkv = 2.0 * double(N * W);
    const int sets = rotation_sets(3 * qkv);
    Pool pool;
    std::vector<bf16*> in, out, dout, din;
    std::vector<float*> rstd;
    for (int k = 0; k < sets; k++) {
      in.push_back(pool.random_bf16(N * W)), out.push_back(pool.alloc<bf16>(N * W));
      dout.push_back(pool.random_bf16(N * W)), din.push_back(pool.alloc<bf16>(N * W));
      rstd.push_back(pool.random_f32(N * n_rot, 1.f, true));
    }
    int32_t* positions = pool.random_ids(N, T);
    std::vector<double> inv_freq;  // plain RoPE, theta 1e6
    for (int i = 0; i < r.hd / 2; i++) inv_freq.push_back(std::pow(1e6, -2.0 * i / r.hd));
    const RopeTable table = rope_table_fill(pool.alloc<char>(int64_t(rope_table_bytes(T, r.hd))), T, r.hd,
                                            inv_freq.data(), nullptr);
    bf16* qw = r.norm ? pool.random_bf16(r.hd) : nullptr;
    bf16* kw = r.norm ? pool.random_bf16(r.hd) : nullptr;
    float* dqw = r.norm ? pool.random_f32(r.hd) : nullptr;
    float* dkw = r.norm ? pool.random_f32(r.hd) : nullptr;
    const QkvShape shape{r.Hq, r.Hkv, r.hd};
    const size_t scratch_bytes = qk_norm_rope_backward_scratch_bytes(N, shape);
    void* scratch = pool.alloc<char>(int64_t(scratch_bytes));
    const std::string label = std::string(r.model) + " " + std::to_string(r.Hq) + ":" + std::to_string(r.Hkv) +
                              " hd=" + std::to_string(r.hd) + (r.norm ? " norm" : "");
    const double rstd_bytes = r.norm ? 4.0 * double(N * n_rot) : 0.0;
    record("qk_norm_rope_forward", label, 2 * qkv + 4.0 * N + rstd_bytes, [&](int k) {
      const int s = k % sets;
      qk_norm_rope_forward(out[s], r.norm ? rstd[s] : nullptr, in[s], qw, kw, positions, table, N, shape, 1e-6f,
                           nullptr);
    });
    record("qk_norm_rope_backward", label, (r.norm ? 3 : 2) * qkv + 4.0 * N + rstd_bytes, [&](int k) {
      const int s = k % sets;
      qk_norm_rope_backward(din[s], dqw, dkw, dout[s], r.norm ? in[s] : nullptr, r.norm ? rstd[s] : nullptr, qw, kw,
                            positions, table, N, shape, scratch, scratch_bytes, nullptr);
    });
  }
}

void bench_swiglu() {
  for (int f : kFfnWidths) {
    const int64_t N = kTokens, nf = N * f;
    const double half = 2.0 * double(nf);  // one bf16 [N, f] tensor
    const int sets = rotation_sets(5 * half);
    Pool pool;
    std::vector<bf16*> gate_up, out, dout, dgate_up;
    for (int k = 0; k < sets; k++) {
      gate_up.push_back(pool.random_bf16(2 * nf, 3.f)), out.push_back(pool.alloc<bf16>(nf));
      dout.push_back(pool.random_bf16(nf)), dgate_up.push_back(pool.alloc<bf16>(2 * nf));
    }
    record("swiglu_forward", nd_shape(N, f, "f"), 3 * half,
           [&](int k) { swiglu_forward(out[k % sets], gate_up[k % sets], N, f, nullptr); });
    record("swiglu_backward", nd_shape(N, f, "f"), 5 * half, [&](int k) {
      swiglu_backward(dgate_up[k % sets], dout[k % sets], gate_up[k % sets], N, f, nullptr);
    });
  }
}

// Distinct ids among n uniform draws from V, expected: the table rows the backward reads and writes.
double expected_distinct(double n, double V) { return V * (1.0 - std::exp(-n / V)); }

void bench_embedding() {
  const int64_t vocab[] = {151936, 128256, 151936};
  for (int i = 0; i < 3; i++) {
    const int d = kWidths[i];
    const int64_t N = kTokens, V = vocab[i], nd = N * d;
    const int sets = rotation_sets(4.0 * double(nd));
    Pool pool;
    bf16* table = pool.random_bf16(V * d);
    float* dtable = pool.random_f32(V * d);
    std::vector<int32_t*> ids;
    std::vector<bf16*> out, dout;
    for (int k = 0; k < sets; k++) {
      ids.push_back(pool.random_ids(N, int32_t(V)));
      out.push_back(pool.alloc<bf16>(nd)), dout.push_back(pool.random_bf16(nd));
    }
    const size_t scratch_bytes = embedding_backward_scratch_bytes(N, V, d);
    void* scratch = pool.alloc<char>(int64_t(scratch_bytes));
    const std::string label = "N=" + std::to_string(N) + " V=" + std::to_string(V) + " d=" + std::to_string(d);
    record("embedding_forward", label, 4.0 * double(nd) + 4.0 * N,
           [&](int k) { embedding_forward(out[k % sets], ids[k % sets], table, N, d, nullptr); });
    record("embedding_backward", label, 2.0 * double(nd) + 8.0 * expected_distinct(N, V) * d + 4.0 * N, [&](int k) {
      embedding_backward(dtable, ids[k % sets], dout[k % sets], N, V, d, scratch, scratch_bytes, nullptr);
    });
  }
}

void bench_optimizer() {
  for (int64_t P : {int64_t(494032768), int64_t(1235814400)}) {  // Qwen2.5-0.5B, Llama-3.2-1B parameters
    Pool pool;
    float* grads = pool.random_f32(P, 1e-3f);
    float* master = pool.random_f32(P);
    float* m = pool.random_f32(P, 1e-3f);
    float* v = pool.random_f32(P, 1e-3f, true);
    bf16* params = pool.alloc<bf16>(P);
    const std::string label = "P=" + std::to_string(P);
    const size_t scratch_bytes = grad_norm_scratch_bytes(P);
    void* scratch = pool.alloc<char>(int64_t(scratch_bytes));
    float* norm = pool.alloc<float>(1);
    record("grad_norm", label, 4.0 * double(P),
           [&](int) { grad_norm(norm, grads, P, scratch, scratch_bytes, nullptr); });
    // The segments of a real layout alternate between matrices (decay) and norms (no decay).
    std::vector<AdamWSegment> segments;
    for (int64_t off = 0; off < P;) {
      const int64_t count = std::min<int64_t>(P - off, segments.size() % 2 ? 896 : 4000000);
      segments.push_back({off, count, int32_t(segments.size() % 2 == 0), 0});
      off += count;
    }
    const int blocks = adamw_plan(segments.data(), int(segments.size()));
    AdamWSegment* d_segments = pool.alloc<AdamWSegment>(int64_t(segments.size()));
    TK_CUDA_CHECK(cudaMemcpy(d_segments, segments.data(), segments.size() * sizeof(AdamWSegment),
                             cudaMemcpyHostToDevice));
    const AdamWStep step{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.f, 0.1f, 0.05f};
    const std::string segs = " (" + std::to_string(segments.size()) + " segments)";
    AdamWMoments f32_moments;
    f32_moments.m = m;
    f32_moments.v = v;
    record("adamw_update", label + segs, 30.0 * double(P), [&](int) {
      adamw_update(params, master, grads, f32_moments, P, d_segments, int(segments.size()), blocks, step, nullptr);
    });
    // Narrow moments (zero to start: a valid state in every form). Bytes: grads 4, master 8, params 2, and
    // m and v read and written: bf16 8, int8 4 plus the block scales.
    AdamWMoments bf16_moments{MomentForm::BF16, pool.alloc<bf16>(P), pool.alloc<bf16>(P)};
    TK_CUDA_CHECK(cudaMemset(bf16_moments.m, 0, size_t(P) * 2));
    TK_CUDA_CHECK(cudaMemset(bf16_moments.v, 0, size_t(P) * 2));
    record("adamw_update bf16 moments", label + segs, 22.0 * double(P), [&](int) {
      adamw_update(params, master, grads, bf16_moments, P, d_segments, int(segments.size()), blocks, step, nullptr);
    });
    const int64_t scales = moment_blocks(P);
    AdamWMoments int8_moments{MomentForm::Int8, pool.alloc<int8_t>(P), pool.alloc<uint8_t>(P),
                              pool.alloc<float>(scales), pool.alloc<float>(scales), pool.alloc<MomentCodeBook>(1)};
    TK_CUDA_CHECK(cudaMemset(int8_moments.m, 0, size_t(P)));
    TK_CUDA_CHECK(cudaMemset(int8_moments.v, 0, size_t(P)));
    TK_CUDA_CHECK(cudaMemset(int8_moments.m_scale, 0, size_t(scales) * 4));
    TK_CUDA_CHECK(cudaMemset(int8_moments.v_scale, 0, size_t(scales) * 4));
    TK_CUDA_CHECK(cudaMemcpy(const_cast<MomentCodeBook*>(int8_moments.book), &moment_code_book(),
                             sizeof(MomentCodeBook), cudaMemcpyHostToDevice));
    record("adamw_update int8 moments", label + segs, (18.0 + 16.0 / 256) * double(P), [&](int) {
      adamw_update(params, master, grads, int8_moments, P, d_segments, int(segments.size()), blocks, step, nullptr);
    });
    record("f32_to_bf16", "n=" + std::to_string(P), 6.0 * double(P),
           [&](int) { f32_to_bf16(params, master, P, nullptr); });
    record("bf16_to_f32", "n=" + std::to_string(P), 6.0 * double(P),
           [&](int) { bf16_to_f32(master, params, P, nullptr); });
  }
}

// ---- FP8 casts (fp8.cu): the amax pass and the cast, as is, transposed and both, at the linears' shapes; each
// cast also records the amax it saw, as delayed scaling's casts do ----

void bench_fp8() {
  for (int i = 0; i < 3; i++) {
    const int d = kWidths[i], f = kFfnWidths[i];
    for (const auto& shape_case : {std::tuple<int64_t, int, const char*>{kTokens, d, "x [N, d]"},
                                   {kTokens, f, "x [N, f]"},
                                   {kTokens, 2 * f, "dy [N, 2f]"}}) {
      const int64_t rows_ = std::get<0>(shape_case);
      const int cols = std::get<1>(shape_case);
      const char* what = std::get<2>(shape_case);
      const int64_t n = rows_ * cols;
      const int sets = rotation_sets(4.0 * double(n));
      Pool pool;
      std::vector<bf16*> x;
      std::vector<uint8_t*> x8, xt8;
      for (int k = 0; k < sets; k++)
        x.push_back(pool.random_bf16(n, 3.f)), x8.push_back(pool.alloc<uint8_t>(n)), xt8.push_back(pool.alloc<uint8_t>(n));
      float* scales = pool.alloc<float>(8);
      const std::string shape = std::string(what) + " " + std::to_string(rows_) + "x" + std::to_string(cols);
      record("fp8 amax", shape, 2.0 * double(n), [&](int k) { amax_bf16(scales, x[k % sets], n, nullptr); });
      record("fp8 cast", shape, 3.0 * double(n), [&](int k) {
        quantize_fp8(x8[k % sets], nullptr, scales + 4, x[k % sets], rows_, cols, scales, Fp8Format::E4M3, nullptr,
                     scales + 2);
      });
      record("fp8 cast, transposed", shape, 3.0 * double(n), [&](int k) {
        quantize_fp8(nullptr, xt8[k % sets], scales + 4, x[k % sets], rows_, cols, scales, Fp8Format::E4M3, nullptr,
                     scales + 2);
      });
      record("fp8 cast, both", shape, 4.0 * double(n), [&](int k) {
        quantize_fp8(x8[k % sets], xt8[k % sets], scales + 4, x[k % sets], rows_, cols, scales, Fp8Format::E5M2,
                     nullptr, scales + 2);
      });
    }
    // SwiGLU's gradient for the gate/up linear's FP8 GEMMs, with delayed scaling: swiglu_backward in bf16 then the
    // cast both ways and its guard (18 N f bytes: 6 read + 4 written, then 4 read + 4 written), against the fused cast that
    // never writes the bf16 gradient (10 N f: 6 read, 4 written), its guard included.
    const int64_t nf = kTokens * f;
    const int sets = rotation_sets(10.0 * double(nf));
    Pool pool;
    std::vector<bf16*> gate_up, dout, dgate_up;
    std::vector<uint8_t*> dy8, dyt8;
    for (int k = 0; k < sets; k++) {
      gate_up.push_back(pool.random_bf16(2 * nf)), dout.push_back(pool.random_bf16(nf));
      dgate_up.push_back(pool.alloc<bf16>(2 * nf));
      dy8.push_back(pool.alloc<uint8_t>(2 * nf)), dyt8.push_back(pool.alloc<uint8_t>(2 * nf));
    }
    float* slot = pool.alloc<float>(8);
    const float big = 1e30f;  // a scale no value exceeds: the guard exits at once, as in a step that fits
    TK_CUDA_CHECK(cudaMemset(slot, 0, 8 * sizeof(float)));
    TK_CUDA_CHECK(cudaMemcpy(slot, &big, sizeof(float), cudaMemcpyHostToDevice));
    const std::string shape = "N=" + std::to_string(kTokens) + " f=" + std::to_string(f);
    record("swiglu_backward + fp8 cast both", shape, 18.0 * double(nf), [&](int k) {
      swiglu_backward(dgate_up[k % sets], dout[k % sets], gate_up[k % sets], kTokens, f, nullptr);
      quantize_fp8(dy8[k % sets], dyt8[k % sets], slot + 4, dgate_up[k % sets], kTokens, 2 * f, slot, Fp8Format::E5M2,
                   nullptr, slot + 1);
      fp8_guard(dy8[k % sets], dyt8[k % sets], slot + 4, dgate_up[k % sets], kTokens, 2 * f, slot, slot + 1,
                reinterpret_cast<unsigned int*>(slot + 2), Fp8Format::E5M2, nullptr);
    });
    // The forward: swiglu_forward then the cast as is (9 N f bytes), against the cast as it writes (7 N f).
    record("swiglu_forward + fp8 cast", shape, 9.0 * double(nf), [&](int k) {
      swiglu_forward(dgate_up[k % sets], gate_up[k % sets], kTokens, f, nullptr);
      quantize_fp8(dy8[k % sets], nullptr, slot + 4, dgate_up[k % sets], kTokens, f, slot, Fp8Format::E4M3, nullptr,
                   slot + 1);
    });
    record("swiglu_forward_fp8 (fused)", shape, 7.0 * double(nf), [&](int k) {
      swiglu_forward_fp8(dgate_up[k % sets], dy8[k % sets], nullptr, slot + 4, gate_up[k % sets], kTokens, f, slot,
                         slot + 1, Fp8Format::E4M3, nullptr);
    });
    // As the step runs it under --fp8: the bytes as is for the GEMM and transposed for the backward's weight
    // gradient (kept in the output's memory), no bf16 output (6 N f), then the guard that finds nothing to do.
    record("swiglu_forward_fp8 both, no bf16 (fused) + guard", shape, 6.0 * double(nf), [&](int k) {
      swiglu_forward_fp8(nullptr, dy8[k % sets], dyt8[k % sets], slot + 4, gate_up[k % sets], kTokens, f, slot,
                         slot + 1, Fp8Format::E4M3, nullptr);
      Fp8GuardOperand op{dy8[k % sets], dyt8[k % sets], slot + 4, nullptr, kTokens, f, slot, slot + 1,
                         reinterpret_cast<unsigned int*>(slot + 2), Fp8Format::E4M3, gate_up[k % sets]};
      fp8_guard_all(&op, 1, nullptr);
    });
    // What the step did before: the bf16 output and the cast as is in the forward, the transposed cast of the
    // bf16 output in the backward (9 N f + 3 N f).
    record("swiglu_forward + fp8 cast, then the cast transposed", shape, 12.0 * double(nf), [&](int k) {
      swiglu_forward_fp8(dgate_up[k % sets], dy8[k % sets], nullptr, slot + 4, gate_up[k % sets], kTokens, f, slot,
                         slot + 1, Fp8Format::E4M3, nullptr);
      quantize_fp8(nullptr, dyt8[k % sets], slot + 4, dgate_up[k % sets], kTokens, f, slot, Fp8Format::E4M3, nullptr,
                   slot + 1);
    });
    record("swiglu_backward_fp8 (fused)", shape, 10.0 * double(nf), [&](int k) {
      swiglu_backward_fp8(dy8[k % sets], dyt8[k % sets], slot + 4, dout[k % sets], gate_up[k % sets], kTokens, f, slot,
                          slot + 1, reinterpret_cast<unsigned int*>(slot + 2), Fp8Format::E5M2, nullptr);
    });

    // A norm's output for the linear after it (rmsnorm_linear_forward under --fp8): the residual norm writing its
    // bf16 output, then the forward's cast as is and the backward's transposed cast (8 Nd + 3 Nd + 3 Nd), against the
    // norm without its output (6 Nd) and the cast both ways from its input and rstd (4 Nd), with its guard.
    const int64_t nd = kTokens * d;
    const int nsets = rotation_sets(14.0 * double(nd));
    Pool npool;
    std::vector<bf16*> h_in, xs, h_out, ys;
    std::vector<float*> rstd;
    std::vector<uint8_t*> n8, nt8;
    for (int k = 0; k < nsets; k++) {
      h_in.push_back(npool.random_bf16(nd)), xs.push_back(npool.random_bf16(nd));
      h_out.push_back(npool.alloc<bf16>(nd)), ys.push_back(npool.alloc<bf16>(nd)), rstd.push_back(npool.alloc<float>(kTokens));
      n8.push_back(npool.alloc<uint8_t>(nd)), nt8.push_back(npool.alloc<uint8_t>(nd));
    }
    bf16* nw = npool.random_bf16(d);
    const std::string nshape = "N=" + std::to_string(kTokens) + " d=" + std::to_string(d);
    record("residual_rmsnorm_forward + fp8 cast, then the cast transposed", nshape, 14.0 * double(nd), [&](int k) {
      const int j = k % nsets;
      residual_rmsnorm_forward(h_out[j], ys[j], rstd[j], h_in[j], xs[j], nw, kTokens, d, 1e-6f, nullptr);
      quantize_fp8(n8[j], nullptr, slot + 4, ys[j], kTokens, d, slot, Fp8Format::E4M3, nullptr, slot + 1);
      quantize_fp8(nullptr, nt8[j], slot + 4, ys[j], kTokens, d, slot, Fp8Format::E4M3, nullptr, slot + 1);
    });
    record("residual norm, no output + rmsnorm_cast_fp8 both + guard", nshape, 10.0 * double(nd), [&](int k) {
      const int j = k % nsets;
      residual_rmsnorm_forward(h_out[j], nullptr, rstd[j], h_in[j], xs[j], nw, kTokens, d, 1e-6f, nullptr);
      rmsnorm_cast_fp8(n8[j], nt8[j], slot + 4, h_out[j], rstd[j], nw, kTokens, d, slot, slot + 1, Fp8Format::E4M3,
                       nullptr);
      Fp8GuardOperand op{n8[j], nt8[j], slot + 4, h_out[j], kTokens, d, slot, slot + 1,
                         reinterpret_cast<unsigned int*>(slot + 2), Fp8Format::E4M3, nullptr, rstd[j], nw};
      fp8_guard_all(&op, 1, nullptr);
    });
  }
}

void print_table() {
  std::printf("\n| kernel | shape | MB moved | median us | GB/s | of copy | of same-size copy |\n"
              "|---|---|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    const double gbps = r.bytes / r.us / 1e3;
    std::printf("| %s | %s | %.1f | %.1f | %.0f | %.0f%% | %.0f%% |\n", r.kernel.c_str(), r.shape.c_str(),
                r.bytes / 1e6, r.us, gbps, 100.0 * gbps / copy_gbps, 100.0 * r.copy_us / r.us);
  }
}

}  // namespace
}  // namespace tk::cuda

// kernels_bench [family...]: the families named (rmsnorm, rope, swiglu, embedding, optimizer, fp8), all by default.
int main(int argc, char** argv) {
  using namespace tk::cuda;
  try {
    auto wanted = [&](const char* family) {
      if (argc < 2) return true;
      for (int i = 1; i < argc; i++)
        if (std::strcmp(argv[i], family) == 0) return true;
      return false;
    };
    cudaDeviceProp prop{};
    TK_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::fprintf(stderr, "%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    measure_copy_ceiling();
    if (wanted("rmsnorm")) bench_rmsnorm();
    if (wanted("rope")) bench_rope();
    if (wanted("swiglu")) bench_swiglu();
    if (wanted("embedding")) bench_embedding();
    if (wanted("optimizer")) bench_optimizer();
    if (wanted("fp8")) bench_fp8();
    print_table();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
