// GPU tests of the fused memory-bound kernels (src/ops/cuda/kernels.h) against the CPU reference
// CpuOps<float>, on fresh random inputs that bf16 represents exactly (so both sides see the same values),
// at training shapes and odd sizes. Outputs are poisoned with NaN first, so an unwritten element fails;
// errors are ||out - ref|| / ||ref||; reductions are run twice and must agree bitwise.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/rope_scaling.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/moment_codec.h"
#include "gpu_testing.h"

namespace tk {
namespace {

using cuda::bf16;

// Bounds on ||out - ref|| / ||ref||: outputs stored in bf16 (8 significant bits), and f32 results whose
// only difference from the reference is the order of f32 roundings.
constexpr double kBf16Tol = 1e-2;
constexpr double kF32Tol = 1e-5;
constexpr double kF32SumTol = 1e-4;  // long f32 sums (weight gradients over many rows)

// ---- host-side bf16 -------------------------------------------------------------------------------

uint16_t bf16_bits(float f) {  // round to nearest even, as the device does
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return uint16_t((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}
float bf16_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- random inputs --------------------------------------------------------------------------------

class Random {
 public:
  Random() : seed_(std::random_device{}()), gen_(seed_) {}
  uint64_t seed() const { return seed_; }
  // Normal values rounded to bf16: the device reads exactly what the reference computes with.
  std::vector<float> bf16_normal(size_t n, float scale = 1.f) {
    std::vector<float> v = f32_normal(n, scale);
    for (float& x : v) x = round_bf16(x);
    return v;
  }
  std::vector<float> f32_normal(size_t n, float scale = 1.f) {
    std::normal_distribution<float> dist(0.f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(gen_);
    return v;
  }
  std::vector<int32_t> ints(size_t n, int32_t lo, int32_t hi) {  // uniform in [lo, hi]
    std::uniform_int_distribution<int32_t> dist(lo, hi);
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = dist(gen_);
    return v;
  }
  std::mt19937_64& gen() { return gen_; }

 private:
  uint64_t seed_;
  std::mt19937_64 gen_;
};

// ---- device buffers -------------------------------------------------------------------------------

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) { TK_CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T))); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  // All-ones bytes: NaN as f32 and as bf16.
  void poison() { TK_CUDA_CHECK(cudaMemset(p_, 0xff, bytes())); }

 private:
  T* p_ = nullptr;
  size_t n_;
};

void to_device(const DeviceBuffer<bf16>& d, const std::vector<float>& h) {
  std::vector<uint16_t> bits(h.size());
  for (size_t i = 0; i < h.size(); i++) bits[i] = bf16_bits(h[i]);
  TK_CUDA_CHECK(cudaMemcpy(d.get(), bits.data(), d.bytes(), cudaMemcpyHostToDevice));
}
template <class T>
void to_device(const DeviceBuffer<T>& d, const std::vector<T>& h) {
  TK_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), d.bytes(), cudaMemcpyHostToDevice));
}
template <class T>
std::unique_ptr<DeviceBuffer<T>> device_from(const std::vector<T>& h) {
  auto d = std::make_unique<DeviceBuffer<T>>(h.size());
  to_device(*d, h);
  return d;
}
std::unique_ptr<DeviceBuffer<bf16>> device_bf16(const std::vector<float>& h) {
  auto d = std::make_unique<DeviceBuffer<bf16>>(h.size());
  to_device(*d, h);
  return d;
}

std::vector<float> to_host(const DeviceBuffer<bf16>& d) {
  TK_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> bits(d.size());
  TK_CUDA_CHECK(cudaMemcpy(bits.data(), d.get(), d.bytes(), cudaMemcpyDeviceToHost));
  std::vector<float> h(d.size());
  for (size_t i = 0; i < h.size(); i++) h[i] = bf16_float(bits[i]);
  return h;
}
std::vector<float> to_host(const DeviceBuffer<float>& d) {
  TK_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> h(d.size());
  TK_CUDA_CHECK(cudaMemcpy(h.data(), d.get(), d.bytes(), cudaMemcpyDeviceToHost));
  return h;
}

// Any element type, as stored.
template <class T>
std::vector<T> raw_to_host(const DeviceBuffer<T>& d) {
  TK_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> h(d.size());
  TK_CUDA_CHECK(cudaMemcpy(h.data(), d.get(), d.bytes(), cudaMemcpyDeviceToHost));
  return h;
}

template <class T>
bool bitwise_equal(const DeviceBuffer<T>& a, const DeviceBuffer<T>& b) {
  std::vector<char> ha(a.bytes()), hb(b.bytes());
  TK_CUDA_CHECK(cudaDeviceSynchronize());
  TK_CUDA_CHECK(cudaMemcpy(ha.data(), a.get(), a.bytes(), cudaMemcpyDeviceToHost));
  TK_CUDA_CHECK(cudaMemcpy(hb.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost));
  return ha == hb;
}
template <class T>
void copy_device(const DeviceBuffer<T>& dst, const DeviceBuffer<T>& src) {
  TK_CUDA_CHECK(cudaMemcpy(dst.get(), src.get(), src.bytes(), cudaMemcpyDeviceToDevice));
}

// ---- comparisons ----------------------------------------------------------------------------------

// ||out - ref|| / ||ref||; infinite when out holds a NaN or an infinity (an unwritten, poisoned element).
// The elements with the largest |out - ref|, for failure messages.
std::string worst(const std::vector<float>& out, const std::vector<float>& ref, int count = 3) {
  std::vector<size_t> idx(out.size());
  for (size_t i = 0; i < idx.size(); i++) idx[i] = i;
  auto err = [&](size_t i) { return std::isfinite(out[i]) ? std::abs(double(out[i]) - ref[i]) : HUGE_VAL; };
  const size_t k = std::min<size_t>(size_t(count), idx.size());
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](size_t a, size_t b) { return err(a) > err(b); });
  std::string s = "largest differences:";
  for (size_t j = 0; j < k; j++)
    s += " [" + std::to_string(idx[j]) + "] " + std::to_string(out[idx[j]]) + " vs " + std::to_string(ref[idx[j]]);
  return s;
}

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> r(a.size());
  for (size_t i = 0; i < a.size(); i++) r[i] = a[i] - b[i];
  return r;
}

Ops& cpu() {
  static std::unique_ptr<Ops> ops = make_cpu_ops(DType::F32);
  return *ops;
}
Tensor host(std::vector<float>& v, std::initializer_list<int64_t> dims) { return Tensor(v.data(), DType::F32, dims); }
Tensor host(std::vector<int32_t>& v, std::initializer_list<int64_t> dims) { return Tensor(v.data(), DType::I32, dims); }

class KernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  }
  Random rng;
  std::string seed() const { return "random seed " + std::to_string(rng.seed()); }
};

// ---- conversions ----------------------------------------------------------------------------------

TEST_F(KernelsTest, ConversionsRoundToNearestEvenAndWidenExactly) {
  SCOPED_TRACE(seed());
  const size_t n = 1000003;
  std::vector<float> src = rng.f32_normal(n, 3.f);
  src[1] = std::numeric_limits<float>::infinity(), src[2] = -0.f, src[3] = 1e-40f;  // inf, signed zero, denormal
  src[4] = 1.f + 1.f / 256, src[5] = 1.f + 3.f / 256;  // ties: to even, down and up
  auto d_src = device_from(src);
  for (size_t offset : {size_t(0), size_t(1)}) {  // 16-byte aligned, and not
    DeviceBuffer<bf16> d_bf(n);
    d_bf.poison();
    cuda::f32_to_bf16(d_bf.get() + offset, d_src->get() + offset, int64_t(n - offset), nullptr);
    TK_CUDA_CHECK_LAUNCH();
    std::vector<float> got = to_host(d_bf);
    size_t mismatches = 0;
    for (size_t i = offset; i < n; i++) mismatches += bf16_bits(got[i]) != bf16_bits(src[i]);
    EXPECT_EQ(mismatches, 0u) << "offset " << offset;

    DeviceBuffer<float> d_back(n);
    d_back.poison();
    cuda::bf16_to_f32(d_back.get() + offset, d_bf.get() + offset, int64_t(n - offset), nullptr);
    std::vector<float> back = to_host(d_back);
    mismatches = 0;
    for (size_t i = offset; i < n; i++) mismatches += std::memcmp(&back[i], &got[i], 4) != 0;
    EXPECT_EQ(mismatches, 0u) << "offset " << offset;
  }
}

// ---- embedding ------------------------------------------------------------------------------------

struct EmbeddingCase {
  int64_t N, V;
  int d;
  double hot_fraction;  // share of tokens that are id 7 (long runs that cross many tiles)
};

std::vector<int32_t> token_ids(Random& rng, const EmbeddingCase& c) {
  std::vector<int32_t> ids = rng.ints(size_t(c.N), 0, int32_t(c.V - 1));
  std::bernoulli_distribution hot(c.hot_fraction);
  for (int32_t& id : ids)
    if (hot(rng.gen())) id = int32_t(std::min<int64_t>(7, c.V - 1));
  ids[0] = int32_t(c.V - 1);  // the largest id: the sort must cover every bit
  return ids;
}

TEST_F(KernelsTest, EmbeddingForwardGathersRows) {
  SCOPED_TRACE(seed());
  for (EmbeddingCase c : {EmbeddingCase{16384, 151936, 128, 0.0}, EmbeddingCase{4096, 32000, 2048, 0.0},
                          EmbeddingCase{37, 1000, 100, 0.0}}) {
    SCOPED_TRACE("N=" + std::to_string(c.N) + " V=" + std::to_string(c.V) + " d=" + std::to_string(c.d));
    std::vector<float> table = rng.bf16_normal(size_t(c.V * c.d)), ref(size_t(c.N * c.d));
    std::vector<int32_t> ids = token_ids(rng, c);
    cpu().embedding_forward(host(ref, {c.N, c.d}), host(ids, {c.N}), host(table, {c.V, c.d}));
    auto d_table = device_bf16(table);
    auto d_ids = device_from(ids);
    DeviceBuffer<bf16> d_out(size_t(c.N * c.d));
    d_out.poison();
    cuda::embedding_forward(d_out.get(), d_ids->get(), d_table->get(), c.N, c.d, nullptr);
    EXPECT_EQ(rel_error(to_host(d_out), ref), 0.0);  // a copy: exact
  }
}

// The backward's sort, exactly: the ids in [0, V) stably sorted with their token indices, the rest
// (negative or >= V) dropped and the tail filled with ~0u / 0. Zipf-like draws (long runs of the hottest ids,
// as in text), uniform draws over a large vocabulary, tiny and heavily repeated cases.
TEST_F(KernelsTest, SortTokenIdsIsStableAndExact) {
  SCOPED_TRACE(seed());
  struct Case { int64_t N, V; bool zipf; double invalid; };
  for (Case c : {Case{16384, 151936, true, 0.0}, Case{16384, 151936, false, 0.0}, Case{65536, 128256, true, 0.01},
                 Case{37, 50, false, 0.2}, Case{1000, 3, false, 0.0}, Case{5000, 513, true, 0.0},
                 Case{1, 1, false, 0.0},
                 // 65,536 copies of one id (the wide sort's 16-bit counts at their limit), and past that limit
                 // (the narrow-block sort).
                 Case{65536, 1, false, 0.0}, Case{100000, 151936, true, 0.01}}) {
    SCOPED_TRACE("N=" + std::to_string(c.N) + " V=" + std::to_string(c.V));
    std::vector<int32_t> ids(static_cast<size_t>(c.N));
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int32_t& id : ids) {
      const double x = u(rng.gen());
      id = c.zipf ? int32_t(std::min<double>(double(c.V - 1), std::floor(std::pow(double(c.V), x * x * x))))
                  : int32_t(std::min<double>(double(c.V - 1), std::floor(x * double(c.V))));
      if (u(rng.gen()) < c.invalid) id = u(rng.gen()) < 0.5 ? -1 - id : int32_t(c.V) + id;
    }
    std::vector<std::pair<uint32_t, int32_t>> want;
    for (int64_t i = 0; i < c.N; i++)
      if (ids[size_t(i)] >= 0 && ids[size_t(i)] < c.V) want.push_back({uint32_t(ids[size_t(i)]), int32_t(i)});
    std::stable_sort(want.begin(), want.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    while (int64_t(want.size()) < c.N) want.push_back({~0u, 0});

    auto d_ids = device_from(ids);
    DeviceBuffer<uint32_t> keys(size_t(c.N));
    DeviceBuffer<int32_t> rows(size_t(c.N));
    keys.poison(), rows.poison();
    cuda::sort_token_ids(keys.get(), rows.get(), d_ids->get(), c.N, c.V, nullptr);
    const std::vector<uint32_t> got_keys = raw_to_host(keys);
    const std::vector<int32_t> got_rows = raw_to_host(rows);
    size_t wrong = 0, first_wrong = 0;
    for (size_t i = 0; i < size_t(c.N); i++)
      if (got_keys[i] != want[i].first || got_rows[i] != want[i].second) first_wrong = wrong++ ? first_wrong : i;
    EXPECT_EQ(wrong, 0u) << "first at " << first_wrong << ": got (" << got_keys[first_wrong] << ", "
                         << got_rows[first_wrong] << "), want (" << want[first_wrong].first << ", "
                         << want[first_wrong].second << ")";
  }
}

TEST_F(KernelsTest, EmbeddingBackwardSumsEachIdInTokenOrder) {
  SCOPED_TRACE(seed());
  // d % 4 == 0: the one-launch form (slices of 128 columns; 100: a partial slice); 98 and 1: the scalar two-pass
  // fallback. Hot ids: runs across many tiles, whose last piece to arrive joins them.
  for (EmbeddingCase c : {EmbeddingCase{16384, 151936, 128, 0.0}, EmbeddingCase{16384, 5000, 896, 0.0},
                          EmbeddingCase{16384, 151936, 896, 0.05}, EmbeddingCase{16384, 1000, 2048, 0.4},
                          EmbeddingCase{37, 50, 100, 0.5}, EmbeddingCase{1000, 3, 64, 0.0},
                          EmbeddingCase{70000, 1, 8, 0.0}, EmbeddingCase{3000, 40, 98, 0.3},
                          EmbeddingCase{500, 7, 1, 0.2}}) {
    SCOPED_TRACE("N=" + std::to_string(c.N) + " V=" + std::to_string(c.V) + " d=" + std::to_string(c.d) +
                 " hot=" + std::to_string(c.hot_fraction));
    std::vector<float> dout = rng.bf16_normal(size_t(c.N * c.d)), before = rng.f32_normal(size_t(c.V * c.d));
    std::vector<int32_t> ids = token_ids(rng, c);
    std::vector<float> ref = before;
    cpu().embedding_backward(host(ref, {c.V, c.d}), host(ids, {c.N}), host(dout, {c.N, c.d}));

    auto d_dout = device_bf16(dout);
    auto d_ids = device_from(ids);
    auto d_first = device_from(before), d_second = device_from(before);
    const size_t scratch_bytes = cuda::embedding_backward_scratch_bytes(c.N, c.V, c.d);
    DeviceBuffer<char> scratch(scratch_bytes);
    for (auto* dtable : {d_first.get(), d_second.get()}) {
      scratch.poison();
      cuda::embedding_backward(dtable->get(), d_ids->get(), d_dout->get(), c.N, c.V, c.d, scratch.get(),
                               scratch_bytes, nullptr);
    }
    std::vector<float> got = to_host(*d_first);
    EXPECT_LE(rel_error(minus(got, before), minus(ref, before)), 3e-5) << worst(minus(got, before), minus(ref, before));
    EXPECT_TRUE(bitwise_equal(*d_first, *d_second)) << "two runs differ";
  }
}

// ---- RMSNorm --------------------------------------------------------------------------------------

struct RowsCase {
  int64_t N;
  int d;
};
// Training widths (Qwen2.5-0.5B, Llama-3.2-1B, Qwen2.5-1.5B) and the odd paths: d not a multiple of 8, and
// rows wide enough to need several chunks per thread.
// 896, 264, 1024, 64: the backward's register path (one chunk to four a lane; 5 rows: warps without a row);
// 2048, 1536: its staged path; the rest: the general path.
const RowsCase kRowsCases[] = {{16384, 896}, {16384, 2048}, {37, 1536}, {37, 100}, {300, 5000},
                               {40, 12000},  {64, 1999},    {1000, 264}, {37, 1024}, {5, 64}};
std::string label(const RowsCase& c) { return "N=" + std::to_string(c.N) + " d=" + std::to_string(c.d); }

TEST_F(KernelsTest, RmsNormForwardMatchesReference) {
  SCOPED_TRACE(seed());
  const float eps = 1e-6f;
  for (const RowsCase& c : kRowsCases) {
    SCOPED_TRACE(label(c));
    std::vector<float> x = rng.bf16_normal(size_t(c.N * c.d), 2.f), w = rng.bf16_normal(size_t(c.d));
    std::vector<float> y(x.size()), rstd(size_t(c.N));
    cpu().rmsnorm_forward(host(y, {c.N, c.d}), host(rstd, {c.N}), host(x, {c.N, c.d}), host(w, {c.d}), eps);
    auto d_x = device_bf16(x), d_w = device_bf16(w);
    DeviceBuffer<bf16> d_y(x.size());
    DeviceBuffer<float> d_rstd(size_t(c.N));
    d_y.poison(), d_rstd.poison();
    cuda::rmsnorm_forward(d_y.get(), d_rstd.get(), d_x->get(), d_w->get(), c.N, c.d, eps, nullptr);
    EXPECT_LE(rel_error(to_host(d_y), y), kBf16Tol) << worst(to_host(d_y), y);
    EXPECT_LE(rel_error(to_host(d_rstd), rstd), kF32Tol) << worst(to_host(d_rstd), rstd);
  }
}

TEST_F(KernelsTest, ResidualRmsNormNormalisesTheRoundedSum) {
  SCOPED_TRACE(seed());
  const float eps = 1e-5f;
  for (const RowsCase& c : kRowsCases) {
    SCOPED_TRACE(label(c));
    std::vector<float> h_in = rng.bf16_normal(size_t(c.N * c.d)), x = rng.bf16_normal(size_t(c.N * c.d), 0.5f);
    std::vector<float> w = rng.bf16_normal(size_t(c.d));
    // The device rounds h_out to bf16 and normalises that: the reference normalises the same rounded sum.
    std::vector<float> h(x.size()), y(x.size()), rstd(size_t(c.N));
    for (size_t i = 0; i < h.size(); i++) h[i] = round_bf16(h_in[i] + x[i]);
    cpu().rmsnorm_forward(host(y, {c.N, c.d}), host(rstd, {c.N}), host(h, {c.N, c.d}), host(w, {c.d}), eps);

    auto d_h_in = device_bf16(h_in), d_x = device_bf16(x), d_w = device_bf16(w);
    DeviceBuffer<bf16> d_h_out(x.size()), d_y(x.size());
    DeviceBuffer<float> d_rstd(size_t(c.N));
    d_h_out.poison(), d_y.poison(), d_rstd.poison();
    cuda::residual_rmsnorm_forward(d_h_out.get(), d_y.get(), d_rstd.get(), d_h_in->get(), d_x->get(), d_w->get(),
                                   c.N, c.d, eps, nullptr);
    EXPECT_EQ(rel_error(to_host(d_h_out), h), 0.0);
    EXPECT_LE(rel_error(to_host(d_y), y), kBf16Tol) << worst(to_host(d_y), y);
    EXPECT_LE(rel_error(to_host(d_rstd), rstd), kF32Tol) << worst(to_host(d_rstd), rstd);

    // In place (h_out aliasing h_in) gives the same bits.
    DeviceBuffer<bf16> d_y2(x.size());
    d_y2.poison();
    cuda::residual_rmsnorm_forward(d_h_in->get(), d_y2.get(), d_rstd.get(), d_h_in->get(), d_x->get(), d_w->get(),
                                   c.N, c.d, eps, nullptr);
    EXPECT_TRUE(bitwise_equal(*d_h_in, d_h_out));
    EXPECT_TRUE(bitwise_equal(d_y, d_y2));
  }
}

TEST_F(KernelsTest, RmsNormBackwardMatchesReferenceDeterministically) {
  SCOPED_TRACE(seed());
  for (const RowsCase& c : kRowsCases) {
    SCOPED_TRACE(label(c));
    const size_t nd = size_t(c.N * c.d);
    std::vector<float> h = rng.bf16_normal(nd, 2.f), dy = rng.bf16_normal(nd), dres = rng.bf16_normal(nd);
    std::vector<float> w = rng.bf16_normal(size_t(c.d)), y(nd), rstd(size_t(c.N));
    cpu().rmsnorm_forward(host(y, {c.N, c.d}), host(rstd, {c.N}), host(h, {c.N, c.d}), host(w, {c.d}), 1e-6f);
    const std::vector<float> dw_before = rng.f32_normal(size_t(c.d));
    std::vector<float> dh(nd), dw = dw_before, dh_plain(nd), dw_plain = dw_before;
    cpu().rmsnorm_backward(host(dh, {c.N, c.d}), host(dw, {c.d}), host(dy, {c.N, c.d}), host(dres, {c.N, c.d}),
                           host(h, {c.N, c.d}), host(rstd, {c.N}), host(w, {c.d}));
    cpu().rmsnorm_backward(host(dh_plain, {c.N, c.d}), host(dw_plain, {c.d}), host(dy, {c.N, c.d}), Tensor(),
                           host(h, {c.N, c.d}), host(rstd, {c.N}), host(w, {c.d}));

    auto d_h = device_bf16(h), d_dy = device_bf16(dy), d_dres = device_bf16(dres), d_w = device_bf16(w);
    auto d_rstd = device_from(rstd);
    const size_t scratch_bytes = cuda::rmsnorm_backward_scratch_bytes(c.N, c.d);
    DeviceBuffer<char> scratch(scratch_bytes);
    auto run = [&](bf16* dh_out, const bf16* dresidual, const DeviceBuffer<float>& d_dw) {
      scratch.poison();
      cuda::rmsnorm_backward(dh_out, d_dw.get(), d_dy->get(), dresidual, d_h->get(), d_rstd->get(), d_w->get(), c.N,
                             c.d, scratch.get(), scratch_bytes, nullptr);
    };
    DeviceBuffer<bf16> d_dh(nd), d_dh2(nd), d_dh_plain(nd);
    auto d_dw = device_from(dw_before), d_dw2 = device_from(dw_before), d_dw_plain = device_from(dw_before);
    d_dh.poison(), d_dh_plain.poison();
    run(d_dh.get(), d_dres->get(), *d_dw);
    run(d_dh_plain.get(), nullptr, *d_dw_plain);
    EXPECT_LE(rel_error(to_host(d_dh), dh), kBf16Tol) << worst(to_host(d_dh), dh);
    EXPECT_LE(rel_error(minus(to_host(*d_dw), dw_before), minus(dw, dw_before)), kF32SumTol)
        << worst(minus(to_host(*d_dw), dw_before), minus(dw, dw_before));
    EXPECT_LE(rel_error(to_host(d_dh_plain), dh_plain), kBf16Tol) << worst(to_host(d_dh_plain), dh_plain);
    // dresidual aliasing dh, and a second run: the same bits.
    copy_device(d_dh2, *d_dres);
    run(d_dh2.get(), d_dh2.get(), *d_dw2);
    EXPECT_TRUE(bitwise_equal(d_dh, d_dh2));
    EXPECT_TRUE(bitwise_equal(*d_dw, *d_dw2));
  }
}

// ---- q/k norm + RoPE ------------------------------------------------------------------------------

struct RopeCase {
  int B, T, Hq, Hkv, hd;
  bool norm;
  int table_rows;  // rows of the cos/sin table: T (all positions), fewer (the rest computed), 0 (all computed)
  bool llama3 = false;  // Llama 3.2's RoPE scaling (factor 32) rather than plain RoPE
};
std::string label(const RopeCase& c) {
  return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " heads " + std::to_string(c.Hq) + ":" +
         std::to_string(c.Hkv) + " hd=" + std::to_string(c.hd) + (c.norm ? " norm" : "") +
         " table=" + std::to_string(c.table_rows) + (c.llama3 ? " llama3" : "");
}
// Qwen2.5-0.5B at training size, Llama-3.2-1B / Qwen3 (32:8, hd 128, norm), and the scalar layouts; then
// small rows without norms (the pipelined kernel) with part of the table, none, and hd 128 and 256; then
// Llama 3.2's scaled RoPE over positions past the scaling's low-frequency wavelength (8192), through the
// batched kernel with the table, the pipelined one with part of it, and the norms without one.
const RopeCase kRopeCases[] = {{8, 2048, 14, 2, 64, false, 2048},      {2, 1000, 32, 8, 128, true, 500},
                               {3, 333, 14, 2, 64, true, 0},           {1, 37, 4, 2, 96, true, 37},
                               {1, 37, 2, 1, 256, true, 37},           {1, 37, 3, 1, 10, false, 37},
                               {2, 300, 14, 2, 64, false, 100},        {1, 77, 4, 2, 128, false, 0},
                               {1, 45, 2, 1, 256, false, 45},          {1, 10000, 32, 8, 64, false, 10000, true},
                               {2, 9000, 14, 2, 64, false, 3000, true}, {1, 9000, 8, 2, 128, true, 0, true}};

struct RopeSetup {
  const RopeCase& c;
  int64_t N, W;
  AttnShape shape;
  cuda::QkvShape qkv_shape;
  std::vector<int32_t> positions;
  std::unique_ptr<DeviceBuffer<int32_t>> d_positions;
  RopeSpec rope;
  std::unique_ptr<DeviceBuffer<char>> d_table;
  cuda::RopeTable table;
  static constexpr float kEps = 1e-6f;

  RopeSetup(const RopeCase& rc, Random& rng) : c(rc), N(int64_t(rc.B) * rc.T) {
    shape.B = c.B, shape.T = c.T, shape.n_heads = c.Hq, shape.n_kv_heads = c.Hkv, shape.head_dim = c.hd;
    qkv_shape = {c.Hq, c.Hkv, c.hd};
    W = shape.qkv_width();
    positions = rng.ints(size_t(N), 0, c.T - 1);  // documents restart positions anywhere
    d_positions = device_from(positions);
    rope = c.llama3 ? RopeSpec{rope_inv_freq(500000.0, c.hd, RopeScaling::llama3(32.0, 1.0, 4.0, 8192))}
                    : RopeSpec::plain(1e6, c.hd);
    d_table = std::make_unique<DeviceBuffer<char>>(cuda::rope_table_bytes(c.table_rows, c.hd));
    table = cuda::rope_table_fill(d_table->get(), c.table_rows, c.hd, rope.inv_freq.data(), nullptr);
  }
};

TEST_F(KernelsTest, QkNormRopeForwardMatchesReference) {
  SCOPED_TRACE(seed());
  for (const RopeCase& c : kRopeCases) {
    SCOPED_TRACE(label(c));
    RopeSetup s(c, rng);
    const int n_rot = c.Hq + c.Hkv;
    std::vector<float> qkv = rng.bf16_normal(size_t(s.N * s.W)), qw = rng.bf16_normal(size_t(c.hd));
    std::vector<float> kw = rng.bf16_normal(size_t(c.hd)), out(qkv.size()), rstd(size_t(s.N * n_rot));
    cpu().qk_norm_rope_forward(host(out, {s.N, s.W}), c.norm ? host(rstd, {s.N, n_rot}) : Tensor(),
                               host(qkv, {s.N, s.W}), c.norm ? host(qw, {c.hd}) : Tensor(),
                               c.norm ? host(kw, {c.hd}) : Tensor(), host(s.positions, {s.N}), s.shape, s.rope,
                               s.kEps);
    auto d_qkv = device_bf16(qkv), d_qw = device_bf16(qw), d_kw = device_bf16(kw);
    DeviceBuffer<bf16> d_out(qkv.size());
    DeviceBuffer<float> d_rstd(rstd.size());
    d_out.poison(), d_rstd.poison();
    cuda::qk_norm_rope_forward(d_out.get(), c.norm ? d_rstd.get() : nullptr, d_qkv->get(),
                               c.norm ? d_qw->get() : nullptr, c.norm ? d_kw->get() : nullptr, s.d_positions->get(),
                               s.table, s.N, s.qkv_shape, s.kEps, nullptr);
    EXPECT_LE(rel_error(to_host(d_out), out), kBf16Tol) << worst(to_host(d_out), out);
    if (c.norm) {
      EXPECT_LE(rel_error(to_host(d_rstd), rstd), kF32Tol) << worst(to_host(d_rstd), rstd);
    }
    if (!c.norm) {  // in place: the same bits
      cuda::qk_norm_rope_forward(d_qkv->get(), nullptr, d_qkv->get(), nullptr, nullptr, s.d_positions->get(),
                                 s.table, s.N, s.qkv_shape, s.kEps, nullptr);
      EXPECT_TRUE(bitwise_equal(*d_qkv, d_out));
    }
  }
}

TEST_F(KernelsTest, QkNormRopeBackwardMatchesReferenceDeterministically) {
  SCOPED_TRACE(seed());
  for (const RopeCase& c : kRopeCases) {
    SCOPED_TRACE(label(c));
    RopeSetup s(c, rng);
    const int n_rot = c.Hq + c.Hkv;
    const size_t size = size_t(s.N * s.W);
    std::vector<float> qkv = rng.bf16_normal(size), dout = rng.bf16_normal(size);
    std::vector<float> qw = rng.bf16_normal(size_t(c.hd)), kw = rng.bf16_normal(size_t(c.hd));
    std::vector<float> fwd(size), rstd(size_t(s.N * n_rot));
    const std::vector<float> dq_before = rng.f32_normal(size_t(c.hd)), dk_before = rng.f32_normal(size_t(c.hd));
    auto opt = [&](std::vector<float>& v, std::initializer_list<int64_t> dims) {
      return c.norm ? host(v, dims) : Tensor();
    };
    cpu().qk_norm_rope_forward(host(fwd, {s.N, s.W}), opt(rstd, {s.N, n_rot}), host(qkv, {s.N, s.W}),
                               opt(qw, {c.hd}), opt(kw, {c.hd}), host(s.positions, {s.N}), s.shape, s.rope, s.kEps);
    std::vector<float> din(size), dq = dq_before, dk = dk_before;
    cpu().qk_norm_rope_backward(host(din, {s.N, s.W}), opt(dq, {c.hd}), opt(dk, {c.hd}), host(dout, {s.N, s.W}),
                                host(qkv, {s.N, s.W}), opt(rstd, {s.N, n_rot}), opt(qw, {c.hd}), opt(kw, {c.hd}),
                                host(s.positions, {s.N}), s.shape, s.rope, s.kEps);

    auto d_qkv = device_bf16(qkv), d_dout = device_bf16(dout), d_qw = device_bf16(qw), d_kw = device_bf16(kw);
    auto d_rstd = device_from(rstd);
    const size_t scratch_bytes = cuda::qk_norm_rope_backward_scratch_bytes(s.N, s.qkv_shape);
    DeviceBuffer<char> scratch(scratch_bytes);
    DeviceBuffer<bf16> d_din(size), d_din2(size);
    auto d_dq = device_from(dq_before), d_dk = device_from(dk_before);
    auto d_dq2 = device_from(dq_before), d_dk2 = device_from(dk_before);
    auto run = [&](bf16* din_ptr, const bf16* dout_ptr, DeviceBuffer<float>& ddq, DeviceBuffer<float>& ddk) {
      scratch.poison();
      cuda::qk_norm_rope_backward(din_ptr, c.norm ? ddq.get() : nullptr, c.norm ? ddk.get() : nullptr, dout_ptr,
                                  c.norm ? d_qkv->get() : nullptr, c.norm ? d_rstd->get() : nullptr,
                                  c.norm ? d_qw->get() : nullptr, c.norm ? d_kw->get() : nullptr,
                                  s.d_positions->get(), s.table, s.N, s.qkv_shape, scratch.get(), scratch_bytes,
                                  nullptr);
    };
    d_din.poison();
    run(d_din.get(), d_dout->get(), *d_dq, *d_dk);
    EXPECT_LE(rel_error(to_host(d_din), din), kBf16Tol) << worst(to_host(d_din), din);
    if (c.norm) {
      EXPECT_LE(rel_error(minus(to_host(*d_dq), dq_before), minus(dq, dq_before)), kF32SumTol)
        << worst(minus(to_host(*d_dq), dq_before), minus(dq, dq_before));
      EXPECT_LE(rel_error(minus(to_host(*d_dk), dk_before), minus(dk, dk_before)), kF32SumTol)
        << worst(minus(to_host(*d_dk), dk_before), minus(dk, dk_before));
    }
    // Again, in place (dqkv_in aliasing dqkv_out): the same bits.
    copy_device(d_din2, *d_dout);
    run(d_din2.get(), d_din2.get(), *d_dq2, *d_dk2);
    EXPECT_TRUE(bitwise_equal(d_din, d_din2));
    EXPECT_TRUE(bitwise_equal(*d_dq, *d_dq2));
    EXPECT_TRUE(bitwise_equal(*d_dk, *d_dk2));
  }
}

// ---- SwiGLU ---------------------------------------------------------------------------------------

TEST_F(KernelsTest, SwigluForwardAndBackwardMatchReference) {
  SCOPED_TRACE(seed());
  // Qwen2.5-0.5B's and Qwen2.5-1.5B's FFN widths (fewer rows, to keep the reference quick), and odd sizes.
  for (const RowsCase& c : {RowsCase{4096, 4864}, RowsCase{1024, 8960}, RowsCase{37, 100}, RowsCase{5, 13}}) {
    SCOPED_TRACE("N=" + std::to_string(c.N) + " f=" + std::to_string(c.d));
    const int64_t N = c.N, f = c.d;
    std::vector<float> gate_up = rng.bf16_normal(size_t(N * 2 * f), 2.f), dout = rng.bf16_normal(size_t(N * f));
    std::vector<float> out(size_t(N * f)), dgate_up(size_t(N * 2 * f));
    cpu().swiglu_forward(host(out, {N, f}), host(gate_up, {N, 2 * f}));
    cpu().swiglu_backward(host(dgate_up, {N, 2 * f}), host(dout, {N, f}), host(gate_up, {N, 2 * f}));
    auto d_gate_up = device_bf16(gate_up), d_dout = device_bf16(dout);
    DeviceBuffer<bf16> d_out(out.size()), d_dgate_up(dgate_up.size());
    d_out.poison(), d_dgate_up.poison();
    cuda::swiglu_forward(d_out.get(), d_gate_up->get(), N, int(f), nullptr);
    cuda::swiglu_backward(d_dgate_up.get(), d_dout->get(), d_gate_up->get(), N, int(f), nullptr);
    EXPECT_LE(rel_error(to_host(d_out), out), kBf16Tol) << worst(to_host(d_out), out);
    EXPECT_LE(rel_error(to_host(d_dgate_up), dgate_up), kBf16Tol) << worst(to_host(d_dgate_up), dgate_up);
  }
}

// ---- gradient norm and AdamW ---------------------------------------------------------------------

TEST_F(KernelsTest, GradNormMatchesReferenceDeterministically) {
  SCOPED_TRACE(seed());
  for (size_t n : {size_t(10000003), size_t(4096), size_t(37), size_t(1)}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<float> g = rng.f32_normal(n + 1, 1e-3f);
    auto d_g = device_from(g);
    for (size_t offset : {size_t(0), size_t(1)}) {
      std::vector<float> part(g.begin() + offset, g.begin() + offset + n);
      const double ref = cpu().grad_norm(host(part, {int64_t(n)}));
      const size_t scratch_bytes = cuda::grad_norm_scratch_bytes(int64_t(n));
      DeviceBuffer<char> scratch(scratch_bytes);
      scratch.poison();
      const double got = cuda::grad_norm_host(d_g->get() + offset, int64_t(n), scratch.get(), scratch_bytes, nullptr);
      EXPECT_LE(std::abs(got - ref) / ref, 1e-6) << "offset " << offset;
      DeviceBuffer<float> d_norm(1);
      d_norm.poison();
      cuda::grad_norm(d_norm.get(), d_g->get() + offset, int64_t(n), scratch.get(), scratch_bytes, nullptr);
      EXPECT_EQ(to_host(d_norm)[0], float(got)) << "two runs differ";
    }
  }
}

// bf16 weights updated without master weights: the elements of `got` that are not the reference's `want` rounded,
// that is farther from it than half a bf16 spacing plus the fp32 rounding of the update itself, which is relative
// to the INPUT weight `in`: where p - lr*u cancels to nearly zero, one ulp of p (FMA contraction on the GPU) exceeds
// the tiny result's bf16 spacing.
size_t not_rounded_count(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& in) {
  size_t n = 0;
  for (size_t i = 0; i < got.size(); i++) {
    int e = 0, e_in = 0;
    std::frexp(want[i], &e);
    std::frexp(in[i], &e_in);
    const double half_spacing = std::ldexp(1.0, e - 9) * (1 + 1e-3) + 4 * std::ldexp(1.0, e_in - 24);
    n += !(std::abs(double(got[i]) - want[i]) <= half_spacing);
  }
  return n;
}

TEST_F(KernelsTest, AdamWUpdatesEverySegmentInOneLaunch) {
  SCOPED_TRACE(seed());
  // Segments at odd offsets and sizes, with a gap no segment covers (it must stay untouched).
  const int64_t sizes[] = {1000003, 17, 896, 5, 1, 999999};
  std::vector<ParamSegment> segments;
  int64_t P = 0;
  for (size_t i = 0; i < std::size(sizes); i++) {
    if (i == 3) P += 13;
    segments.push_back({P, sizes[i], i % 2 == 0});
    P += sizes[i];
  }
  AdamWConfig cfg;
  cfg.lr = 1e-2f, cfg.step = 7, cfg.grad_scale = 0.5f, cfg.weight_decay = 0.1f;
  const cuda::AdamWStep step{cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.grad_scale,
                             float(1.0 - std::pow(double(cfg.beta1), double(cfg.step))),
                             float(1.0 - std::pow(double(cfg.beta2), double(cfg.step)))};
  std::vector<cuda::AdamWSegment> table;
  for (const ParamSegment& s : segments) table.push_back({s.offset, s.count, s.decay ? 1 : 0, 0});
  const int blocks = cuda::adamw_plan(table.data(), int(table.size()));
  DeviceBuffer<cuda::AdamWSegment> d_table(table.size());
  to_device(d_table, table);

  for (bool with_master : {true, false}) {
    SCOPED_TRACE(with_master ? "with master weights" : "bf16 weights only");
    const std::vector<float> master0 = rng.bf16_normal(size_t(P)), grads = rng.f32_normal(size_t(P));
    const std::vector<float> m0 = rng.f32_normal(size_t(P), 0.1f);
    std::vector<float> v0 = rng.f32_normal(size_t(P), 0.1f);
    for (float& x : v0) x = x * x;
    std::vector<float> params = master0, master = master0, m = m0, v = v0, g = grads;
    cpu().adamw_update(host(params, {P}), with_master ? host(master, {P}) : Tensor(), host(g, {P}), host(m, {P}),
                       host(v, {P}), Tensor(), Tensor(), segments, cfg);

    auto d_params = device_bf16(master0);
    auto d_master = device_from(master0), d_grads = device_from(grads);
    auto d_m = device_from(m0), d_v = device_from(v0);
    cuda::AdamWMoments moments;
    moments.m = d_m->get();
    moments.v = d_v->get();
    cuda::adamw_update(d_params->get(), with_master ? d_master->get() : nullptr, d_grads->get(), moments, P,
                       d_table.get(), int(table.size()), blocks, step, nullptr);
    const std::vector<float> got_params = to_host(*d_params), got_master = to_host(*d_master);
    EXPECT_LE(rel_error(to_host(*d_m), m), kF32Tol) << worst(to_host(*d_m), m);
    EXPECT_LE(rel_error(to_host(*d_v), v), kF32Tol) << worst(to_host(*d_v), v);
    if (with_master) {
      EXPECT_LE(rel_error(minus(got_master, master0), minus(master, master0)), kF32SumTol) << worst(got_master, master);
      size_t unrounded = 0;
      std::string first;
      for (int64_t i = 0; i < P; i++) {
        if (got_params[i] == round_bf16(got_master[i])) continue;
        if (unrounded++ < 3)
          first += " [" + std::to_string(i) + "] " + std::to_string(got_params[i]) + " vs " +
                   std::to_string(got_master[i]);
      }
      EXPECT_EQ(unrounded, 0u) << "params must be the master weights rounded to bf16:" << first;
    } else {
      EXPECT_EQ(not_rounded_count(got_params, params, master0), 0u) << worst(got_params, params);
    }
    EXPECT_EQ(got_params[size_t(segments[3].offset - 1)], master0[size_t(segments[3].offset - 1)])
        << "the gap between segments changed";
  }
}

// ---- AdamW with bf16 and int8 moments ------------------------------------------------------------

// Moments in bf16 or int8 form on the host: what the reference updates and the device's result is read into.
struct NarrowMoments {
  std::vector<uint16_t> m16, v16;
  std::vector<int8_t> m8;
  std::vector<uint8_t> v8;
  std::vector<float> ms, vs;
  std::vector<float> m() const {
    std::vector<float> out(std::max(m16.size(), m8.size()));
    for (size_t i = 0; i < m16.size(); i++) out[i] = moment_from_bf16(m16[i]);
    if (!m8.empty()) decode_int8_m(out.data(), m8.data(), ms.data(), int64_t(m8.size()));
    return out;
  }
  std::vector<float> v() const {
    std::vector<float> out(std::max(v16.size(), v8.size()));
    for (size_t i = 0; i < v16.size(); i++) out[i] = moment_from_bf16(v16[i]);
    if (!v8.empty()) decode_int8_v(out.data(), v8.data(), vs.data(), int64_t(v8.size()));
    return out;
  }
};

// The update with narrow moments against CpuOps<float> from the same state: weights as in the f32 test
// (the update reads the decoded moments, identical on both sides); the new moments' codes equal the
// reference's except where the f32 and double arithmetic straddle a rounding threshold (the rounding noise
// is the same hash on both sides), then by one step; block scales to f32 rounding; elements outside every
// segment, and int8 blocks without one, unchanged; and a second launch from the same state gives the same
// bits.
TEST_F(KernelsTest, AdamWWithBf16AndInt8MomentsMatchesReference) {
  SCOPED_TRACE(seed());
  // Odd offsets and sizes, a short gap (13) inside a block and a long one (1300: whole blocks untouched).
  const int64_t sizes[] = {1000003, 17, 896, 5, 1, 999999};
  std::vector<ParamSegment> segments;
  int64_t P = 0;
  for (size_t i = 0; i < std::size(sizes); i++) {
    if (i == 3) P += 13;
    if (i == 5) P += 1300;
    segments.push_back({P, sizes[i], i % 2 == 0});
    P += sizes[i];
  }
  P += 100;  // a tail no segment covers, in a partial last block
  std::vector<cuda::AdamWSegment> table;
  for (const ParamSegment& s : segments) table.push_back({s.offset, s.count, s.decay ? 1 : 0, 0});
  const int blocks = cuda::adamw_plan(table.data(), int(table.size()));
  DeviceBuffer<cuda::AdamWSegment> d_table(table.size());
  to_device(d_table, table);
  DeviceBuffer<MomentCodeBook> d_book(1);
  TK_CUDA_CHECK(cudaMemcpy(d_book.get(), &moment_code_book(), sizeof(MomentCodeBook), cudaMemcpyHostToDevice));
  const int64_t n_scales = moment_blocks(P);
  const double code_step = std::exp2(1.0 / kMCodesPerOctave) - 1;

  // The noise index of element 0: a multiple of 4 (bf16 moments hash four elements at once) and not (a slice's).
  for (const int64_t first_index : {int64_t(4096), int64_t(4098)}) {
    AdamWConfig cfg;
    cfg.lr = 1e-2f, cfg.step = 7, cfg.grad_scale = 0.5f, cfg.weight_decay = 0.1f, cfg.first_index = first_index;
    const cuda::AdamWStep step{cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.grad_scale,
                               float(1.0 - std::pow(double(cfg.beta1), double(cfg.step))),
                               float(1.0 - std::pow(double(cfg.beta2), double(cfg.step))), cfg.step, cfg.first_index};
    for (bool int8 : {false, true}) {
      for (bool with_master : {true, false}) {
        SCOPED_TRACE(std::string(int8 ? "int8" : "bf16") + (with_master ? ", master weights" : ", bf16 weights only") +
                     ", first index " + std::to_string(first_index));
        // Moments over decades of magnitude (the int8 code book's case), encoded to nearest.
        std::vector<float> m0 = rng.f32_normal(size_t(P), 0.1f), v0(static_cast<size_t>(P));
        std::uniform_real_distribution<float> decades(-4.f, 0.f);
        for (size_t i = 0; i < size_t(P); i++) {
          m0[i] *= std::pow(10.f, decades(rng.gen()));
          v0[i] = m0[i] * m0[i] * std::pow(10.f, decades(rng.gen()) + 2.f);
        }
        NarrowMoments start;
        if (int8) {
          start.m8.resize(size_t(P)), start.v8.resize(size_t(P));
          start.ms.resize(size_t(n_scales)), start.vs.resize(size_t(n_scales));
          encode_int8_m(start.m8.data(), start.ms.data(), m0.data(), P);
          encode_int8_v(start.v8.data(), start.vs.data(), v0.data(), P);
        } else {
          start.m16.resize(size_t(P)), start.v16.resize(size_t(P));
          for (size_t i = 0; i < size_t(P); i++)
            start.m16[i] = moment_to_bf16(m0[i]), start.v16[i] = moment_to_bf16(v0[i]);
        }
        const std::vector<float> master0 = rng.bf16_normal(size_t(P)), grads = rng.f32_normal(size_t(P));

        NarrowMoments ref = start;
        std::vector<float> params = master0, master = master0, g = grads;
        Tensor m_t, v_t, ms_t, vs_t;
        if (int8) {
          m_t = Tensor(ref.m8.data(), DType::I8, {P}), v_t = Tensor(ref.v8.data(), DType::U8, {P});
          ms_t = host(ref.ms, {n_scales}), vs_t = host(ref.vs, {n_scales});
        } else {
          m_t = Tensor(ref.m16.data(), DType::BF16, {P}), v_t = Tensor(ref.v16.data(), DType::BF16, {P});
        }
        cpu().adamw_update(host(params, {P}), with_master ? host(master, {P}) : Tensor(), host(g, {P}), m_t, v_t, ms_t,
                           vs_t, segments, cfg);

        // Two launches from the same state.
        NarrowMoments got[2];
        std::vector<float> got_params[2], got_master[2];
        for (int run = 0; run < 2; run++) {
          auto d_params = device_bf16(master0);
          auto d_master = device_from(master0), d_grads = device_from(grads);
          cuda::AdamWMoments mo;
          std::unique_ptr<DeviceBuffer<uint16_t>> d_m16, d_v16;
          std::unique_ptr<DeviceBuffer<int8_t>> d_m8;
          std::unique_ptr<DeviceBuffer<uint8_t>> d_v8;
          std::unique_ptr<DeviceBuffer<float>> d_ms, d_vs;
          if (int8) {
            d_m8 = device_from(start.m8), d_v8 = device_from(start.v8);
            d_ms = device_from(start.ms), d_vs = device_from(start.vs);
            mo = {cuda::MomentForm::Int8, d_m8->get(), d_v8->get(), d_ms->get(), d_vs->get(), d_book.get()};
          } else {
            d_m16 = device_from(start.m16), d_v16 = device_from(start.v16);
            mo = {cuda::MomentForm::BF16, d_m16->get(), d_v16->get()};
          }
          cuda::adamw_update(d_params->get(), with_master ? d_master->get() : nullptr, d_grads->get(), mo, P,
                             d_table.get(), int(table.size()), blocks, step, nullptr);
          got_params[run] = to_host(*d_params);
          got_master[run] = to_host(*d_master);
          if (int8) {
            got[run].m8 = raw_to_host(*d_m8), got[run].v8 = raw_to_host(*d_v8);
            got[run].ms = raw_to_host(*d_ms), got[run].vs = raw_to_host(*d_vs);
          } else {
            got[run].m16 = raw_to_host(*d_m16), got[run].v16 = raw_to_host(*d_v16);
          }
        }
        EXPECT_EQ(got_params[0], got_params[1]) << "two launches differ";
        EXPECT_EQ(got[0].m8, got[1].m8);
        EXPECT_EQ(got[0].v8, got[1].v8);
        EXPECT_EQ(got[0].ms, got[1].ms);
        EXPECT_EQ(got[0].vs, got[1].vs);
        EXPECT_EQ(got[0].m16, got[1].m16);
        EXPECT_EQ(got[0].v16, got[1].v16);
        const NarrowMoments& out = got[0];

        // Weights.
        if (with_master) {
          EXPECT_LE(rel_error(minus(got_master[0], master0), minus(master, master0)), kF32SumTol)
              << worst(got_master[0], master);
          size_t unrounded = 0;
          for (int64_t i = 0; i < P; i++) unrounded += got_params[0][i] != round_bf16(got_master[0][i]);
          EXPECT_EQ(unrounded, 0u) << "params must be the master weights rounded to bf16";
        } else {
          EXPECT_EQ(not_rounded_count(got_params[0], params, master0), 0u) << worst(got_params[0], params);
        }

        // Moments: the same codes but for rare threshold cases, each then one step away.
        const std::vector<float> gm = out.m(), gv = out.v(), rm = ref.m(), rv = ref.v();
        EXPECT_LE(rel_error(gm, rm), 1e-3) << worst(gm, rm);
        EXPECT_LE(rel_error(gv, rv), 1e-3) << worst(gv, rv);
        size_t differ = 0, far = 0;
        const double step_rel = int8 ? code_step * (1 + 1e-5) : std::exp2(-7) * (1 + 1e-5);
        const MomentCodeBook& book = moment_code_book();
        for (int64_t i = 0; i < P; i++) {
          const bool same = int8 ? out.m8[i] == ref.m8[i] && out.v8[i] == ref.v8[i]
                                 : out.m16[i] == ref.m16[i] && out.v16[i] == ref.v16[i];
          if (same) continue;
          differ++;
          // Besides a step: the codes' floor near zero (int8), and a few f32 roundings of the recurrence's terms,
          // which is all the device's f32 can differ from the reference's double by. A new m that cancels to
          // near zero (beta1 m against (1 - beta1) g) can sit that far from the reference's.
          const double m_in = int8 ? book.m[start.m8[i] + 127] * double(start.ms[i / kMomentBlock])
                                   : moment_from_bf16(start.m16[i]);
          const double gs = double(grads[i]) * cfg.grad_scale;
          const double m_round = 0x1.0p-21 * (cfg.beta1 * std::abs(m_in) + (1 - cfg.beta1) * std::abs(gs));
          const double m_floor =
              m_round + (int8 ? book.m[128] * std::max(out.ms[i / kMomentBlock], ref.ms[i / kMomentBlock]) : 0);
          const double v_floor = int8 ? book.v[1] * std::max(out.vs[i / kMomentBlock], ref.vs[i / kMomentBlock]) : 0;
          const bool is_far = std::abs(gm[i] - rm[i]) > step_rel * std::abs(rm[i]) + m_floor ||
                              std::abs(gv[i] - rv[i]) > step_rel * rv[i] + v_floor;
          if (is_far && far < 5)
            ADD_FAILURE() << "element " << i << ": m " << gm[i] << " vs " << rm[i] << " (from " << m_in << ", g*scale "
                          << gs << "), v " << gv[i] << " vs " << rv[i];
          far += is_far;
        }
        EXPECT_LE(double(differ), 1e-3 * double(P)) << differ << " of " << P << " elements' codes differ";
        EXPECT_EQ(far, 0u) << "codes more than one step from the reference's";
        if (int8) {
          EXPECT_LE(rel_error(out.ms, ref.ms), 1e-5) << worst(out.ms, ref.ms);
          EXPECT_LE(rel_error(out.vs, ref.vs), 1e-5) << worst(out.vs, ref.vs);
        }

        // Untouched: the gap of 1300 holds whole blocks with no segment element, and the tail.
        const int64_t gap_lo = segments[4].offset + segments[4].count, gap_hi = segments[5].offset;
        for (int64_t i = gap_lo; i < gap_hi; i++) {
          const int64_t blk = i / kMomentBlock;
          const bool whole_block = blk * kMomentBlock >= gap_lo && (blk + 1) * kMomentBlock <= gap_hi;
          if (int8 && !whole_block) continue;  // a block shared with a segment is encoded again
          ASSERT_EQ(got_params[0][i], master0[i]) << i;
          if (int8) {
            ASSERT_TRUE(out.m8[i] == start.m8[i] && out.v8[i] == start.v8[i]) << i;
            ASSERT_TRUE(out.ms[blk] == start.ms[blk] && out.vs[blk] == start.vs[blk]) << blk;
          } else {
            ASSERT_TRUE(out.m16[i] == start.m16[i] && out.v16[i] == start.v16[i]) << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tk
