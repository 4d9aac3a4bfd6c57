// The attention backward of one layer, ours (attention_bwd_sm90.cu) against cuDNN's, on the same inputs: median time of
// back-to-back calls, TFLOP/s counting the causal backward as 2.5x the forward's matmul FLOPs (4 B Hq T^2 hd / 2 for
// the forward), and the relative difference of dq, dk and dv between the two, with their scale. Shapes: Qwen2.5-0.5B
// (14:2 heads) and Llama-3.2-1B (32:8), head_dim 64, B = 8, T = 2048, with peaked and nearly uniform attention, and the
// tiny model's (4:2 heads, B = 4, T = 128). Usage: attention_bench [iterations]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/ops.h"

namespace tk::cuda {
namespace {

struct Shape {
  const char* name;
  int B, T, Hq, Hkv, hd;
  float sigma;  // of the random q, k and v: 1.5 gives peaked attention, 0.3 nearly uniform (as early in training)
};

template <typename F>
double median_ms(F&& f, int iterations) {
  cudaEvent_t a, b;
  TK_CUDA_CHECK(cudaEventCreate(&a));
  TK_CUDA_CHECK(cudaEventCreate(&b));
  f();  // warm-up (plans, scratch)
  TK_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int k = 0; k < iterations; k++) {
    TK_CUDA_CHECK(cudaEventRecord(a));
    f();
    TK_CUDA_CHECK(cudaEventRecord(b));
    TK_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    TK_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  TK_CUDA_CHECK(cudaEventDestroy(a));
  TK_CUDA_CHECK(cudaEventDestroy(b));
  return ms[ms.size() / 2];
}

std::vector<bf16> random_bf16(size_t n, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> d(0.f, sigma);
  std::vector<bf16> v(n);
  for (auto& x : v) x = __float2bfloat16(d(rng));
  return v;
}

void run(const Shape& s, int iterations) {
  const size_t H3 = size_t(s.Hq + 2 * s.Hkv), n_qkv = size_t(s.B) * s.T * H3 * s.hd, n_o = size_t(s.B) * s.T * s.Hq * s.hd;
  std::mt19937 rng(7);
  const std::vector<bf16> qkv_h = random_bf16(n_qkv, s.sigma, rng), dout_h = random_bf16(n_o, 1e-3f, rng);
  std::vector<void*> owned;
  auto dev = [&](size_t bytes) {
    void* p = nullptr;
    TK_CUDA_CHECK(cudaMalloc(&p, bytes));
    owned.push_back(p);
    return p;
  };
  DeviceAlloc alloc{[&](size_t bytes, const char*) { return dev(bytes); }, [](void*) {}};
  auto* qkv = static_cast<bf16*>(dev(n_qkv * 2));
  auto* dout = static_cast<bf16*>(dev(n_o * 2));
  auto* out = static_cast<bf16*>(dev(n_o * 2));
  auto* lse = static_cast<float*>(dev(size_t(s.B) * s.Hq * s.T * 4));
  auto* dqkv_own = static_cast<bf16*>(dev(n_qkv * 2));
  auto* dqkv_cudnn = static_cast<bf16*>(dev(n_qkv * 2));
  TK_CUDA_CHECK(cudaMemcpy(qkv, qkv_h.data(), n_qkv * 2, cudaMemcpyHostToDevice));
  TK_CUDA_CHECK(cudaMemcpy(dout, dout_h.data(), n_o * 2, cudaMemcpyHostToDevice));
  CudnnAttention cudnn(nullptr, alloc);
  const AttnShape shape{s.B, s.T, s.Hq, s.Hkv, s.hd};
  cudnn.forward(out, lse, qkv, nullptr, shape);
  const double fwd_flops = 4.0 * s.B * s.Hq * double(s.T) * s.T * s.hd / 2, bwd_flops = 2.5 * fwd_flops;
  const double cudnn_ms = median_ms([&] { cudnn.backward(dqkv_cudnn, dout, qkv, out, lse, nullptr, shape); }, iterations);
  std::printf("| %s | cuDNN | %.3f ms | %.0f TFLOP/s |\n", s.name, cudnn_ms, bwd_flops / cudnn_ms / 1e9);
  if (!attention_backward_fused_supported(s.T, s.hd)) {
    std::printf("| %s | ours | not supported here | |\n", s.name);
  } else {
    const size_t bytes = attention_backward_fused_scratch_bytes(s.B, s.T, s.Hq);
    void* scratch = dev(bytes);
    const double own_ms = median_ms([&] {
      attention_backward_fused(dqkv_own, dout, qkv, out, lse, s.B, s.T, s.Hq, s.Hkv, s.hd, scratch, bytes, nullptr);
    }, iterations);
    std::vector<bf16> a(n_qkv), b(n_qkv);
    TK_CUDA_CHECK(cudaMemcpy(a.data(), dqkv_own, n_qkv * 2, cudaMemcpyDeviceToHost));
    TK_CUDA_CHECK(cudaMemcpy(b.data(), dqkv_cudnn, n_qkv * 2, cudaMemcpyDeviceToHost));
    // ||ours - cuDNN|| / ||cuDNN|| over dq, dk and dv apart, and their mean ratio <ours, cuDNN> / <cuDNN, cuDNN>
    // (1 but for a bias in scale).
    double num[3] = {}, den[3] = {}, dot[3] = {};
    const size_t H3i = H3;
    for (size_t i = 0; i < n_qkv; i++) {
      const size_t head = (i / s.hd) % H3i;
      const int part = head < size_t(s.Hq) ? 0 : head < size_t(s.Hq + s.Hkv) ? 1 : 2;
      const double x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
      num[part] += (x - y) * (x - y), den[part] += y * y, dot[part] += x * y;
    }
    auto rel = [&](int k) { return std::sqrt(num[k] / std::max(den[k], 1e-30)); };
    auto scale = [&](int k) { return dot[k] / std::max(den[k], 1e-30); };
    std::printf("| %s | ours | %.3f ms | %.0f TFLOP/s | %.2fx cuDNN's time | vs cuDNN: dq %.2e dk %.2e dv %.2e, "
                "scale %.5f %.5f %.5f |\n",
                s.name, own_ms, bwd_flops / own_ms / 1e9, own_ms / cudnn_ms, rel(0), rel(1), rel(2), scale(0),
                scale(1), scale(2));
  }
  for (void* p : owned) TK_CUDA_CHECK(cudaFree(p));
}

}  // namespace
}  // namespace tk::cuda

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 20;
  const tk::cuda::Shape shapes[] = {
      {"qwen2.5-0.5b layer", 8, 2048, 14, 2, 64, 1.5f},
      {"llama3.2-1b layer", 8, 2048, 32, 8, 64, 1.5f},
      {"qwen2.5-0.5b layer, diffuse", 8, 2048, 14, 2, 64, 0.3f},
      {"tiny layer (4x128, 4:2), diffuse", 4, 128, 4, 2, 64, 0.3f},
      {"tiny layer (4x128, 4:2)", 4, 128, 4, 2, 64, 1.5f}};
  std::printf("| shape | backward | time | rate | | |\n|---|---|---|---|---|---|\n");
  try {
    for (const auto& s : shapes) tk::cuda::run(s, iterations);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
