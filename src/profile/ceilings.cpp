// Ceilings: the GEMM through the backend's own linear_forward (so cuBLASLt on CUDA, OpenBLAS on the
// CPU) and a plain copy, each timed over several runs after a warm-up; the GPU's kept in a JSON cache
// keyed by the GPU's name.
#include "profile/ceilings.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/cache.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"

namespace tk {
namespace {

// Fills an [n, n] tensor with small values (never all zeros), a block of rows at a time.
void fill_square(Ops& ops, const Tensor& t, int64_t n) {
  const int64_t block = std::min<int64_t>(n, 256);
  std::vector<float> host(size_t(block * n));
  for (size_t i = 0; i < host.size(); i++) host[i] = float(int64_t(i * 2654435761u % 1000) - 500) * 1e-4f;
  for (int64_t r = 0; r < n; r += block) ops.upload_f32(t.rows(r, std::min(n, r + block)), host.data());
}

// y[n,n] = x[n,n] @ w[n,n]^T, `reps` times between two marks after two untimed runs.
double measure_gemm_flops(Ops& ops, int64_t n, int reps) {
  const size_t bytes = size_t(n * n) * dtype_size(ops.act_dtype());
  void *xp = ops.allocate(bytes), *wp = ops.allocate(bytes), *yp = ops.allocate(bytes);
  const Tensor x(xp, ops.act_dtype(), {n, n}), w(wp, ops.act_dtype(), {n, n}), y(yp, ops.act_dtype(), {n, n});
  fill_square(ops, x, n);
  fill_square(ops, w, n);
  for (int i = 0; i < 2; i++) ops.linear_forward(y, x, w, Tensor());
  ops.synchronize();
  const int64_t a = ops.timing_mark();
  for (int i = 0; i < reps; i++) ops.linear_forward(y, x, w, Tensor());
  const int64_t b = ops.timing_mark();
  const double ms = ops.timing_elapsed_ms(a, b);
  ops.timing_reset();
  ops.release(yp);
  ops.release(wp);
  ops.release(xp);
  return 2.0 * double(n) * double(n) * double(n) * reps / (ms * 1e-3);
}

// The best of three 256 MiB memcpys; a copy reads and writes each byte, so it moves twice its size.
double measure_host_copy_bytes_per_s() {
  const size_t bytes = size_t(256) << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);  // both written first: no page faults in the timing
  double best = 1e30;
  for (int i = 0; i < 3; i++) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * double(bytes) / best;
}

// Twenty 1 GiB device-to-device copies on the backend's compute queue between two of its marks.
double measure_device_copy_bytes_per_s(Ops& ops) {
  const size_t bytes = size_t(1) << 30;
  const int reps = 20;
  void *src = ops.allocate(bytes, "copy ceiling source"), *dst = ops.allocate(bytes, "copy ceiling destination");
  ops.zero(Tensor(src, DType::U8, {int64_t(bytes)}));
  ops.copy_async(dst, src, bytes, Ops::Queue::compute);
  const int64_t a = ops.timing_mark();
  for (int i = 0; i < reps; i++) ops.copy_async(dst, src, bytes, Ops::Queue::compute);
  const int64_t b = ops.timing_mark();
  const double ms = ops.timing_elapsed_ms(a, b);
  ops.timing_reset();
  ops.release(dst);
  ops.release(src);
  return 2.0 * double(bytes) * reps / (ms * 1e-3);
}

}  // namespace

Ceilings measure_ceilings(Ops& ops, bool gpu) {
  Ceilings c;
  c.source = "measured now";
  if (gpu) {
    TK_CHECK(std::string(ops.name()) == "cuda", "the GPU ceilings need the CUDA backend, not {}", ops.name());
    c.matmul_flops = measure_gemm_flops(ops, 8192, 20);
    c.copy_bytes_per_s = measure_device_copy_bytes_per_s(ops);
  } else {
    c.matmul_flops = measure_gemm_flops(ops, 1024, 3);
    c.copy_bytes_per_s = measure_host_copy_bytes_per_s();
  }
  return c;
}

std::string ceilings_cache_path() { return cache::path_of("ceilings.json"); }

Ceilings find_ceilings(const std::string& device_flag, const std::string& device_name, bool gpu) {
  if (!gpu) {
    Backend be = make_backend("cpu");
    return measure_ceilings(*be.ops, false);
  }
  const std::string path = ceilings_cache_path();
  nlohmann::json table = cache::read(path, "ceilings");
  if (table.contains(device_name)) {
    const nlohmann::json& e = table[device_name];
    const double tflops = e.value("matmul_tflops", 0.0), gbps = e.value("copy_gbps", 0.0);
    if (tflops > 0 && gbps > 0) return {tflops * 1e12, gbps * 1e9, "cache " + path};
  }
  log::info("measuring the ceilings of {} (an 8192^3 bf16 GEMM and a 1 GiB copy), once for this GPU", device_name);
  Ceilings c;
  {
    Backend be = make_backend(device_flag);
    c = measure_ceilings(*be.ops, true);
  }
  table[device_name] = {{"matmul_tflops", c.matmul_flops / 1e12},
                        {"copy_gbps", c.copy_bytes_per_s / 1e9},
                        {"gemm", "8192^3 bf16, fp32 accumulate"},
                        {"copy", "1 GiB device to device (read + write bytes)"}};
  cache::write(path, table);
  return c;
}

}  // namespace tk
