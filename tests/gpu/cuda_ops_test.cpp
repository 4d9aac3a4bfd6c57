// GPU tests of the CUDA backend's matmul, attention and fused LM-head ops (CudaOps through the Ops
// interface) against the CPU reference CpuOps<float>: fresh random inputs that bf16 represents exactly (so
// both backends compute with the same values), outputs poisoned with NaN first (an unwritten element
// fails), errors as ||out - ref|| / ||ref||, and every op run twice to check bitwise determinism.
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/cache.h"
#include "core/log.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernels.h"
#include "ops/device_info.h"
#include "gpu_testing.h"

namespace tk {
namespace {

// Bounds on the relative error: bf16 outputs (8 significant bits; attention also rounds P and dS to bf16
// inside the fused kernel), f32 outputs of f32 sums over exact bf16 products, and the cross-entropy loss
// (computed from bf16-rounded logits).
constexpr double kBf16Tol = 1e-2;
constexpr double kAttnGradTol = 2e-2;
constexpr double kF32SumTol = 1e-4;
constexpr double kLossTol = 1e-3;

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); i++) d[i] = a[i] - b[i];
  return d;
}

// A tensor and its backend; the memory goes back when the test ends.
struct Owned {
  Ops* ops = nullptr;
  Tensor t;
  Owned(Ops& o, DType dt, std::initializer_list<int64_t> dims) : ops(&o) {
    Tensor shape(nullptr, dt, dims);
    t = Tensor(o.allocate(shape.nbytes()), dt, dims);
  }
  ~Owned() { ops->release(t.data); }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
};

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
    gpu_ = std::make_unique<CudaOps>(0);
    cpu_ = make_cpu_ops(DType::F32);
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    RecordProperty("seed", std::to_string(seed_));
  }

  std::vector<float> normal(size_t n, float scale) {
    std::normal_distribution<float> dist(0.f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = round_bf16(dist(rng_));
    return v;
  }

  // The same values on both backends: act dtype (bf16 / f32) or grad dtype (f32 / f32).
  std::unique_ptr<Owned> gpu(DType dt, std::initializer_list<int64_t> dims,
                             const std::vector<float>* values = nullptr) {
    auto o = std::make_unique<Owned>(*gpu_, dt, dims);
    if (values) gpu_->upload_f32(o->t, values->data());
    return o;
  }
  std::unique_ptr<Owned> cpu(std::initializer_list<int64_t> dims, const std::vector<float>* values = nullptr) {
    auto o = std::make_unique<Owned>(*cpu_, DType::F32, dims);
    if (values) cpu_->upload_f32(o->t, values->data());
    return o;
  }
  std::unique_ptr<Owned> ints(Ops& ops, const std::vector<int32_t>& v) {
    auto o = std::make_unique<Owned>(ops, DType::I32, std::initializer_list<int64_t>{int64_t(v.size())});
    ops.upload(o->t.data, v.data(), v.size() * 4);
    return o;
  }

  // NaN in every element (all-ones bytes are NaN in f32 and bf16).
  void poison(const Owned& o) {
    TK_CUDA_CHECK(cudaMemsetAsync(o.t.data, 0xff, o.t.nbytes(), gpu_->stream()));
  }
  std::vector<float> down(const Owned& o) {
    std::vector<float> h(size_t(o.t.numel()));
    o.ops->download_f32(h.data(), o.t);
    return h;
  }
  std::vector<uint8_t> bytes(const Owned& o) {
    std::vector<uint8_t> h(o.t.nbytes());
    gpu_->download(h.data(), o.t.data, h.size());
    return h;
  }
  // lm_head_cross_entropy on the GPU twice (losses and dx poisoned, dw reset to dw0 before each), with
  // check(losses, dx, dw - dw0, run) after each; then the two runs bitwise equal, and the forward-only losses
  // (evaluation) equal to theirs.
  template <class Check>
  void lm_head_twice(const Owned& losses, const Owned& dx, const Owned& dw, const Owned& x, const Owned& w,
                     const Owned& targets, const std::vector<float>& dw0, float grad_scale, int ignore, Check check) {
    std::vector<uint8_t> first_losses, first_dx, first_dw;
    for (int run = 0; run < 2; run++) {
      poison(dx);
      poison(losses);
      gpu_->upload_f32(dw.t, dw0.data());
      gpu_->lm_head_cross_entropy(losses.t, dx.t, dw.t, x.t, w.t, targets.t, grad_scale, ignore);
      check(down(losses), down(dx), minus(down(dw), dw0), run);
      if (run == 0) {
        first_losses = bytes(losses), first_dx = bytes(dx), first_dw = bytes(dw);
      } else {
        EXPECT_EQ(first_losses, bytes(losses)) << "losses are not deterministic";
        EXPECT_EQ(first_dx, bytes(dx)) << "dx is not deterministic";
        EXPECT_EQ(first_dw, bytes(dw)) << "dw is not deterministic";
      }
    }
    poison(losses);
    gpu_->lm_head_cross_entropy(losses.t, Tensor(), Tensor(), x.t, w.t, targets.t, grad_scale, ignore);
    EXPECT_EQ(first_losses, bytes(losses)) << "forward-only losses differ from the training losses";
  }


  std::unique_ptr<CudaOps> gpu_;
  std::unique_ptr<Ops> cpu_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

// ---- linear -----------------------------------------------------------------------------------------

class LinearTest : public CudaOpsTest {
 protected:
  void check(int64_t N, int64_t in, int64_t out, bool with_bias);
};

TEST_F(LinearTest, WithBiasAtTrainingShape) { check(2048, 896, 1152, true); }
TEST_F(LinearTest, OddSizes) { check(37, 120, 200, false); }
TEST_F(LinearTest, OddSizesWithBias) { check(1000, 136, 72, true); }

void LinearTest::check(int64_t N, int64_t in, int64_t out, bool with_bias) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " in=" << in << " out=" << out << " seed=" << seed_);
  auto x_h = normal(size_t(N * in), 1.f), w_h = normal(size_t(out * in), 0.05f);
  auto b_h = normal(size_t(out), 0.5f), dy_h = normal(size_t(N * out), 1.f);
  auto dw0_h = normal(size_t(out * in), 1.f), db0_h = normal(size_t(out), 1.f);

  auto x = gpu(DType::BF16, {N, in}, &x_h), w = gpu(DType::BF16, {out, in}, &w_h);
  auto b = gpu(DType::BF16, {out}, &b_h), dy = gpu(DType::BF16, {N, out}, &dy_h);
  auto y = gpu(DType::BF16, {N, out}), dx = gpu(DType::BF16, {N, in});
  auto dw = gpu(DType::F32, {out, in}), db = gpu(DType::F32, {out});
  auto cx = cpu({N, in}, &x_h), cw = cpu({out, in}, &w_h), cb = cpu({out}, &b_h), cdy = cpu({N, out}, &dy_h);
  auto cy = cpu({N, out}), cdx = cpu({N, in}), cdw = cpu({out, in}, &dw0_h), cdb = cpu({out}, &db0_h);
  Tensor bias = with_bias ? b->t : Tensor(), cbias = with_bias ? cb->t : Tensor();
  Tensor dbias = with_bias ? db->t : Tensor(), cdbias = with_bias ? cdb->t : Tensor();

  cpu_->linear_forward(cy->t, cx->t, cw->t, cbias);
  cpu_->linear_backward(cdx->t, cdw->t, cdbias, cdy->t, cx->t, cw->t);
  auto y_ref = down(*cy), dx_ref = down(*cdx);
  auto dw_inc_ref = minus(down(*cdw), dw0_h), db_inc_ref = minus(down(*cdb), db0_h);

  std::vector<uint8_t> first_y, first_dx, first_dw, first_db;
  for (int run = 0; run < 2; run++) {
    poison(*y);
    poison(*dx);
    gpu_->upload_f32(dw->t, dw0_h.data());
    gpu_->upload_f32(db->t, db0_h.data());
    gpu_->linear_forward(y->t, x->t, w->t, bias);
    gpu_->linear_backward(dx->t, dw->t, dbias, dy->t, x->t, w->t);
    EXPECT_LT(rel_error(down(*y), y_ref), kBf16Tol) << "y, run " << run;
    EXPECT_LT(rel_error(down(*dx), dx_ref), kBf16Tol) << "dx, run " << run;
    EXPECT_LT(rel_error(minus(down(*dw), dw0_h), dw_inc_ref), kF32SumTol) << "dw increment, run " << run;
    if (with_bias)
      EXPECT_LT(rel_error(minus(down(*db), db0_h), db_inc_ref), kF32SumTol) << "dbias increment, run " << run;
    if (run == 0) {
      first_y = bytes(*y), first_dx = bytes(*dx), first_dw = bytes(*dw), first_db = bytes(*db);
    } else {
      EXPECT_EQ(first_y, bytes(*y)) << "linear_forward is not deterministic";
      EXPECT_EQ(first_dx, bytes(*dx)) << "dx is not deterministic";
      EXPECT_EQ(first_dw, bytes(*dw)) << "dw is not deterministic";
      EXPECT_EQ(first_db, bytes(*db)) << "dbias is not deterministic";
    }
  }
}

// GEMM tuning (CudaOps::enable_gemm_tuning): the algorithms it chooses give the reference's results and
// are deterministic (check), the choices are recorded in the cache file, and a second backend reading the
// file times nothing and computes bitwise what the first did.
TEST_F(LinearTest, TunedGemmsAreRecordedAndRepeatBitwise) {
  const std::string path = ::testing::TempDir() + "tk-gemm-tuning-" + std::to_string(seed_) + ".json";
  std::remove(path.c_str());
  gpu_->enable_gemm_tuning(path);
  check(2048, 896, 1152, true);
  const cuda::Matmul::TuningStats first = gpu_->gemm_tuning_stats();
  EXPECT_GE(first.measured, 3) << "forward, input and weight gradients each timed";
  EXPECT_EQ(first.cached, 0);
  EXPECT_LE(first.chosen_us, first.first_us * 1.02) << "the choice is the fastest measured";
  const nlohmann::json table = cache::read(path, "GEMM choices");
  ASSERT_EQ(table.size(), 1u) << table.dump();
  EXPECT_EQ(int(table.begin()->size()), first.measured) << table.dump();
  for (const auto& [key, entry] : table.begin()->items()) {
    EXPECT_GE(entry.value("index", -1), 0) << key;
    EXPECT_LT(entry.value("index", -1), entry.value("candidates", 0)) << key;
  }

  // The same products on two backends sharing the file; the second reads every choice.
  const int64_t N = 2048, in = 896, out = 1152;
  const auto x_h = normal(size_t(N * in), 1.f), w_h = normal(size_t(out * in), 0.05f), b_h = normal(size_t(out), 0.5f);
  const auto dy_h = normal(size_t(N * out), 1.f);
  auto run = [&](CudaOps& ops) {
    Owned x(ops, DType::BF16, {N, in}), w(ops, DType::BF16, {out, in}), b(ops, DType::BF16, {out});
    Owned dy(ops, DType::BF16, {N, out}), y(ops, DType::BF16, {N, out}), dx(ops, DType::BF16, {N, in});
    Owned dw(ops, DType::F32, {out, in}), db(ops, DType::F32, {out});
    ops.upload_f32(x.t, x_h.data()), ops.upload_f32(w.t, w_h.data()), ops.upload_f32(b.t, b_h.data());
    ops.upload_f32(dy.t, dy_h.data());
    const std::vector<float> zeros_w(static_cast<size_t>(out * in), 0.f), zeros_b(static_cast<size_t>(out), 0.f);
    ops.upload_f32(dw.t, zeros_w.data()), ops.upload_f32(db.t, zeros_b.data());
    ops.linear_forward(y.t, x.t, w.t, b.t);
    ops.linear_backward(dx.t, dw.t, db.t, dy.t, x.t, w.t);
    std::vector<std::vector<uint8_t>> outs;
    for (const Owned* o : {&y, &dx, &dw, &db}) {
      outs.emplace_back(o->t.nbytes());
      ops.download(outs.back().data(), o->t.data, outs.back().size());
    }
    return outs;
  };
  const auto mine = run(*gpu_);
  CudaOps other(0);
  other.enable_gemm_tuning(path);
  const auto theirs = run(other);
  EXPECT_EQ(other.gemm_tuning_stats().measured, 0) << "every choice comes from the file";
  EXPECT_EQ(other.gemm_tuning_stats().cached, first.measured);
  EXPECT_TRUE(mine == theirs) << "a backend reading the choices computes other bits";
  std::remove(path.c_str());
}

// ---- FP8 linears ------------------------------------------------------------------------------------

// The host's reading of the FP8 path: per-tensor q = fmax / amax, each value rounded (saturating) to the
// format, and the GEMM's dequant 1/q. CUDA's host-side conversions round as the device does.
struct HostFp8 {
  std::vector<uint8_t> bytes;  // as stored, row-major
  std::vector<float> values;   // the values the GEMM multiplies: byte value x dequant
  float dequant = 1.f;
};

// The cast with the scale of `amax` (default: x's own).
HostFp8 host_fp8(const std::vector<float>& x, cuda::Fp8Format f, float amax = -1.f) {
  if (amax < 0.f) {
    amax = 0.f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
  }
  const float fmax = f == cuda::Fp8Format::E4M3 ? 448.f : 57344.f;
  const float q = amax > 0.f ? fmax / amax : 1.f;
  HostFp8 h;
  h.dequant = 1.f / q;
  h.bytes.resize(x.size());
  h.values.resize(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    if (f == cuda::Fp8Format::E4M3) {
      __nv_fp8_e4m3 c(x[i] * q);
      h.bytes[i] = c.__x;
      h.values[i] = float(c) * h.dequant;
    } else {
      __nv_fp8_e5m2 c(x[i] * q);
      h.bytes[i] = c.__x;
      h.values[i] = float(c) * h.dequant;
    }
  }
  return h;
}

class Fp8Test : public CudaOpsTest {
 protected:
  void check_linear(int64_t N, int64_t in, int64_t out, bool with_bias);
  // How many bytes of x8 [rows, cols] and of its transpose xt8 [cols, rows] differ from ref (row-major).
  std::pair<int64_t, int64_t> wrong_bytes(const Owned& x8, const Owned& xt8, const std::vector<uint8_t>& ref,
                                          int64_t rows, int64_t cols) {
    const auto got = bytes(x8), got_t = bytes(xt8);
    int64_t wrong = 0, wrong_t = 0;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++) {
        wrong += got[size_t(r * cols + c)] != ref[size_t(r * cols + c)];
        wrong_t += got_t[size_t(c * rows + r)] != ref[size_t(r * cols + c)];
      }
    return {wrong, wrong_t};
  }
};

// amax and the cast, bitwise against the host, as is and transposed, for both formats, at sizes whose rows
// and columns do not fill the kernel's 64 x 64 tiles (rows not a multiple of 16: the transpose's byte-wise
// tail); the amax the cast records on the side (delayed scaling's) equals the amax pass's.
TEST_F(Fp8Test, QuantizeIsExactAsIsAndTransposed) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1000, 136}, {2048, 896}, {16, 8}, {1001, 264}, {5, 16}}) {
    for (cuda::Fp8Format f : {cuda::Fp8Format::E4M3, cuda::Fp8Format::E5M2}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols << (f == cuda::Fp8Format::E4M3 ? " e4m3" : " e5m2")
                                        << " seed=" << seed_);
      const auto x_h = normal(size_t(rows * cols), 3.f);
      auto x = gpu(DType::BF16, {rows, cols}, &x_h);
      Owned x8(*gpu_, DType::U8, {rows, cols}), xt8(*gpu_, DType::U8, {cols, rows}), sc(*gpu_, DType::F32, {3});
      TK_CUDA_CHECK(cudaMemsetAsync(x8.t.data, 0x7f, x8.t.nbytes(), gpu_->stream()));  // NaN in both formats
      TK_CUDA_CHECK(cudaMemsetAsync(xt8.t.data, 0x7f, xt8.t.nbytes(), gpu_->stream()));
      float* s = sc.t.as<float>();
      TK_CUDA_CHECK(cudaMemsetAsync(s + 2, 0, sizeof(float), gpu_->stream()));
      cuda::amax_bf16(s, x->t.as<cuda::bf16>(), rows * cols, gpu_->stream());
      cuda::quantize_fp8(x8.t.as<uint8_t>(), xt8.t.as<uint8_t>(), s + 1, x->t.as<cuda::bf16>(), rows, cols, s, f,
                         gpu_->stream(), s + 2);
      const HostFp8 ref = host_fp8(x_h, f);
      float scales[3];
      gpu_->download(scales, s, sizeof(scales));
      float amax = 0.f;
      for (float v : x_h) amax = std::max(amax, std::fabs(v));
      EXPECT_EQ(scales[0], amax);
      EXPECT_EQ(scales[1], ref.dequant);
      EXPECT_EQ(scales[2], amax) << "the amax the cast saw";
      const auto [wrong, wrong_t] = wrong_bytes(x8, xt8, ref.bytes, rows, cols);
      EXPECT_EQ(wrong, 0) << "bytes of x8 differ from the host's rounding";
      EXPECT_EQ(wrong_t, 0) << "bytes of the transpose differ from the host's rounding";
    }
  }
}

// Delayed scaling's guard: a cast whose scale was too small for x (saturated) is done again with the amax it
// saw, bitwise the host's cast at that amax, and the scale's amax is raised to it (the counter left at 0); a cast
// within its scale is left as it is, bytes and amax.
TEST_F(Fp8Test, GuardRecastsASaturatedCastWithTheAmaxItSaw) {
  const int64_t rows = 1000, cols = 264;
  for (cuda::Fp8Format f : {cuda::Fp8Format::E4M3, cuda::Fp8Format::E5M2}) {
    const auto x_h = normal(size_t(rows * cols), 3.f);
    float amax = 0.f;
    for (float v : x_h) amax = std::max(amax, std::fabs(v));
    auto x = gpu(DType::BF16, {rows, cols}, &x_h);
    Owned x8(*gpu_, DType::U8, {rows, cols}), xt8(*gpu_, DType::U8, {cols, rows});
    for (float scale_amax : {amax / 4, 2 * amax}) {
      SCOPED_TRACE(::testing::Message() << (f == cuda::Fp8Format::E4M3 ? "e4m3" : "e5m2") << " scale amax "
                                        << scale_amax << " of " << amax << " seed=" << seed_);
      std::vector<float> slot_h(cuda::kFp8SlotFloats, 0.f);
      slot_h[0] = scale_amax;
      auto slot = gpu(DType::F32, {cuda::kFp8SlotFloats}, &slot_h);
      float* s = slot->t.as<float>();
      cuda::quantize_fp8(x8.t.as<uint8_t>(), xt8.t.as<uint8_t>(), s + 4, x->t.as<cuda::bf16>(), rows, cols, s, f,
                         gpu_->stream(), s + 1);
      cuda::fp8_guard(x8.t.as<uint8_t>(), xt8.t.as<uint8_t>(), s + 4, x->t.as<cuda::bf16>(), rows, cols, s, s + 1,
                      reinterpret_cast<unsigned int*>(s + 2), f, gpu_->stream());
      const bool saturated = scale_amax < amax;
      const HostFp8 ref = host_fp8(x_h, f, saturated ? amax : scale_amax);
      const auto got_slot = down(*slot);
      EXPECT_EQ(got_slot[0], saturated ? amax : scale_amax) << "the scale's amax";
      EXPECT_EQ(got_slot[1], amax) << "the amax seen";
      EXPECT_EQ(got_slot[2], 0.f) << "the counter";
      EXPECT_EQ(got_slot[4], ref.dequant);
      const auto [wrong, wrong_t] = wrong_bytes(x8, xt8, ref.bytes, rows, cols);
      EXPECT_EQ(wrong, 0);
      EXPECT_EQ(wrong_t, 0);
    }
  }
}

// Delayed scaling's step end: the seen amax into the history at the ring position, the scale's amax the
// history's max, the seen amax back to 0.
// The guards of several casts in one launch (fp8_guard_all): each operand as its own fp8_guard would leave it,
// the saturated ones cast again with their own amax and the others untouched, whatever their shapes and formats.
TEST_F(Fp8Test, GuardAllTreatsEachOperandByItself) {
  struct Case {
    int64_t rows, cols;
    cuda::Fp8Format f;
    float scale_share;  // the scale's amax as a share of the tensor's own
  };
  const Case cases[] = {{1000, 264, cuda::Fp8Format::E4M3, 0.25f},
                        {64, 4096, cuda::Fp8Format::E5M2, 2.f},
                        {333, 72, cuda::Fp8Format::E4M3, 0.5f}};
  struct Operand {
    std::vector<float> x_h;
    float amax = 0.f, scale_amax = 0.f;
    std::unique_ptr<Owned> x, slot;
    std::unique_ptr<Owned> x8, xt8;
  };
  std::vector<Operand> ops(3);
  std::vector<cuda::Fp8GuardOperand> guard;
  for (size_t i = 0; i < 3; i++) {
    const Case& c = cases[i];
    Operand& o = ops[i];
    o.x_h = normal(size_t(c.rows * c.cols), 3.f);
    for (float v : o.x_h) o.amax = std::max(o.amax, std::fabs(v));
    o.scale_amax = o.amax * c.scale_share;
    o.x = gpu(DType::BF16, {c.rows, c.cols}, &o.x_h);
    std::vector<float> slot_h(cuda::kFp8SlotFloats, 0.f);
    slot_h[0] = o.scale_amax;
    o.slot = gpu(DType::F32, {cuda::kFp8SlotFloats}, &slot_h);
    o.x8 = std::make_unique<Owned>(*gpu_, DType::U8, std::initializer_list<int64_t>{c.rows, c.cols});
    o.xt8 = std::make_unique<Owned>(*gpu_, DType::U8, std::initializer_list<int64_t>{c.cols, c.rows});
    float* s = o.slot->t.as<float>();
    cuda::quantize_fp8(o.x8->t.as<uint8_t>(), o.xt8->t.as<uint8_t>(), s + 4, o.x->t.as<cuda::bf16>(), c.rows, c.cols,
                       s, c.f, gpu_->stream(), s + 1);
    guard.push_back({o.x8->t.as<uint8_t>(), o.xt8->t.as<uint8_t>(), s + 4, o.x->t.as<cuda::bf16>(), c.rows, c.cols, s,
                     s + 1, reinterpret_cast<unsigned int*>(s + 2), c.f});
  }
  cuda::fp8_guard_all(guard.data(), int(guard.size()), gpu_->stream());
  for (size_t i = 0; i < 3; i++) {
    const Case& c = cases[i];
    const Operand& o = ops[i];
    SCOPED_TRACE(::testing::Message() << "operand " << i << " seed=" << seed_);
    const bool saturated = o.scale_amax < o.amax;
    const HostFp8 ref = host_fp8(o.x_h, c.f, saturated ? o.amax : o.scale_amax);
    const auto got_slot = down(*o.slot);
    EXPECT_EQ(got_slot[0], saturated ? o.amax : o.scale_amax) << "the scale's amax";
    EXPECT_EQ(got_slot[1], o.amax) << "the amax seen";
    EXPECT_EQ(got_slot[2], 0.f) << "the counter";
    EXPECT_EQ(got_slot[4], ref.dequant);
    const auto [wrong, wrong_t] = wrong_bytes(*o.x8, *o.xt8, ref.bytes, c.rows, c.cols);
    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(wrong_t, 0);
  }
}

// SwiGLU's forward cast as it is written (swiglu_forward_fp8): the bf16 output of swiglu_forward, and the bytes and
// recorded amax of quantize_fp8 of it, bitwise.
TEST_F(Fp8Test, SwigluForwardCastIsSwigluForwardThenTheCast) {
  for (auto [rows, f] : {std::pair<int64_t, int64_t>{1000, 200}, {256, 4864}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << f << " seed=" << seed_);
    const auto gu_h = normal(size_t(rows * 2 * f), 2.f);
    auto gate_up = gpu(DType::BF16, {rows, 2 * f}, &gu_h);
    auto ref = gpu(DType::BF16, {rows, f}), got = gpu(DType::BF16, {rows, f});
    poison(*got);
    cuda::swiglu_forward(ref->t.as<cuda::bf16>(), gate_up->t.as<cuda::bf16>(), rows, int(f), gpu_->stream());
    float amax = 0.f;
    for (float v : down(*ref)) amax = std::max(amax, std::fabs(v));
    std::vector<float> slot_h(cuda::kFp8SlotFloats, 0.f);
    slot_h[0] = amax / 2;  // a scale the values exceed: the cast saturates, as the guard after it would find
    auto ref_slot = gpu(DType::F32, {cuda::kFp8SlotFloats}, &slot_h), got_slot = gpu(DType::F32, {cuda::kFp8SlotFloats}, &slot_h);
    Owned ref8(*gpu_, DType::U8, {rows, f}), got8(*gpu_, DType::U8, {rows, f});
    poison(got8);
    float *rs = ref_slot->t.as<float>(), *gs = got_slot->t.as<float>();
    cuda::quantize_fp8(ref8.t.as<uint8_t>(), nullptr, rs + 4, ref->t.as<cuda::bf16>(), rows, f, rs,
                       cuda::Fp8Format::E4M3, gpu_->stream(), rs + 1);
    cuda::swiglu_forward_fp8(got->t.as<cuda::bf16>(), got8.t.as<uint8_t>(), nullptr, gs + 4,
                             gate_up->t.as<cuda::bf16>(), rows, int(f), gs, gs + 1, cuda::Fp8Format::E4M3,
                             gpu_->stream());
    EXPECT_EQ(bytes(*got), bytes(*ref)) << "the bf16 output";
    EXPECT_EQ(bytes(got8), bytes(ref8)) << "the FP8 bytes";
    const auto r = down(*ref_slot), g = down(*got_slot);
    EXPECT_EQ(g[1], amax) << "the amax seen";
    for (int i : {0, 1, 4}) EXPECT_EQ(g[size_t(i)], r[size_t(i)]) << "slot float " << i;

    // As the step runs it: as is and transposed, no bf16 output, then its guard (from gate_up), which finds the
    // cast saturated and casts again: the bytes and slot of quantize_fp8 both ways and fp8_guard of the bf16 output.
    auto ref_slot2 = gpu(DType::F32, {cuda::kFp8SlotFloats}, &slot_h), got_slot2 = gpu(DType::F32, {cuda::kFp8SlotFloats}, &slot_h);
    Owned reft8(*gpu_, DType::U8, {f, rows}), gott8(*gpu_, DType::U8, {f, rows});
    poison(got8);
    poison(gott8);
    float *rs2 = ref_slot2->t.as<float>(), *gs2 = got_slot2->t.as<float>();
    cuda::quantize_fp8(ref8.t.as<uint8_t>(), reft8.t.as<uint8_t>(), rs2 + 4, ref->t.as<cuda::bf16>(), rows, f, rs2,
                       cuda::Fp8Format::E4M3, gpu_->stream(), rs2 + 1);
    cuda::fp8_guard(ref8.t.as<uint8_t>(), reft8.t.as<uint8_t>(), rs2 + 4, ref->t.as<cuda::bf16>(), rows, f, rs2,
                    rs2 + 1, reinterpret_cast<unsigned int*>(rs2 + 2), cuda::Fp8Format::E4M3, gpu_->stream());
    cuda::swiglu_forward_fp8(nullptr, got8.t.as<uint8_t>(), gott8.t.as<uint8_t>(), gs2 + 4, gate_up->t.as<cuda::bf16>(),
                             rows, int(f), gs2, gs2 + 1, cuda::Fp8Format::E4M3, gpu_->stream());
    const cuda::Fp8GuardOperand op{got8.t.as<uint8_t>(), gott8.t.as<uint8_t>(), gs2 + 4, nullptr, rows, f, gs2, gs2 + 1,
                                   reinterpret_cast<unsigned int*>(gs2 + 2), cuda::Fp8Format::E4M3,
                                   gate_up->t.as<cuda::bf16>()};
    cuda::fp8_guard_all(&op, 1, gpu_->stream());
    EXPECT_EQ(bytes(got8), bytes(ref8)) << "the FP8 bytes as is, after the guard";
    EXPECT_EQ(bytes(gott8), bytes(reft8)) << "the FP8 bytes transposed, after the guard";
    const auto r2 = down(*ref_slot2), g2 = down(*got_slot2);
    EXPECT_EQ(r2[0], amax) << "the guard raised the scale's amax to the one seen";
    for (int i : {0, 1, 2, 4}) EXPECT_EQ(g2[size_t(i)], r2[size_t(i)]) << "slot float " << i << " after the guard";
  }
}

// RMSNorm's output cast from the norm's input and rstd (rmsnorm_cast_fp8), both ways, then its guard: the bytes and
// slot of rmsnorm_forward's bf16 output cast by quantize_fp8 and guarded by fp8_guard, bitwise; with the residual
// add (the norm of its rounded sum) and without, with a scale that holds and one the values exceed.
TEST_F(Fp8Test, RmsnormCastIsTheNormOutputThenTheCast) {
  for (auto [rows, d] : {std::pair<int64_t, int64_t>{1000, 200}, {256, 896}}) {
    for (bool residual : {false, true}) {
      const auto x_h = normal(size_t(rows * d), 1.5f), r_h = normal(size_t(rows * d), 1.f),
                 w_h = normal(size_t(d), 1.f);
      auto x = gpu(DType::BF16, {rows, d}, &x_h), h_in = gpu(DType::BF16, {rows, d}, &r_h),
           nw = gpu(DType::BF16, {d}, &w_h);
      auto h_out = gpu(DType::BF16, {rows, d}), h_out2 = gpu(DType::BF16, {rows, d}), y = gpu(DType::BF16, {rows, d});
      auto rstd = gpu(DType::F32, {rows}), rstd2 = gpu(DType::F32, {rows});
      poison(*h_out2);
      poison(*rstd2);
      const cuda::bf16* h = x->t.as<cuda::bf16>();
      if (residual) {
        cuda::residual_rmsnorm_forward(h_out->t.as<cuda::bf16>(), y->t.as<cuda::bf16>(), rstd->t.as<float>(),
                                       h_in->t.as<cuda::bf16>(), x->t.as<cuda::bf16>(), nw->t.as<cuda::bf16>(), rows,
                                       int(d), 1e-6f, gpu_->stream());
        cuda::residual_rmsnorm_forward(h_out2->t.as<cuda::bf16>(), nullptr, rstd2->t.as<float>(),
                                       h_in->t.as<cuda::bf16>(), x->t.as<cuda::bf16>(), nw->t.as<cuda::bf16>(), rows,
                                       int(d), 1e-6f, gpu_->stream());
        h = h_out2->t.as<cuda::bf16>();
      } else {
        cuda::rmsnorm_forward(y->t.as<cuda::bf16>(), rstd->t.as<float>(), x->t.as<cuda::bf16>(),
                              nw->t.as<cuda::bf16>(), rows, int(d), 1e-6f, gpu_->stream());
        cuda::rmsnorm_forward(nullptr, rstd2->t.as<float>(), x->t.as<cuda::bf16>(), nw->t.as<cuda::bf16>(), rows,
                              int(d), 1e-6f, gpu_->stream());
      }
      EXPECT_EQ(down(*rstd2), down(*rstd)) << "rstd without the output";
      if (residual) EXPECT_EQ(bytes(*h_out2), bytes(*h_out)) << "h_out without the output";
      float amax = 0.f;
      for (float v : down(*y)) amax = std::max(amax, std::fabs(v));
      for (float scale_amax : {2 * amax, amax / 3}) {
        SCOPED_TRACE(::testing::Message() << rows << " x " << d << (residual ? " residual" : "") << " scale amax "
                                          << scale_amax << " of " << amax << " seed=" << seed_);
        std::vector<float> slot_h(cuda::kFp8SlotFloats, 0.f);
        slot_h[0] = scale_amax;
        auto ref_slot = gpu(DType::F32, {cuda::kFp8SlotFloats}, &slot_h);
        auto got_slot = gpu(DType::F32, {cuda::kFp8SlotFloats}, &slot_h);
        Owned ref8(*gpu_, DType::U8, {rows, d}), got8(*gpu_, DType::U8, {rows, d});
        Owned reft8(*gpu_, DType::U8, {d, rows}), gott8(*gpu_, DType::U8, {d, rows});
        poison(got8);
        poison(gott8);
        float *rs = ref_slot->t.as<float>(), *gs = got_slot->t.as<float>();
        cuda::quantize_fp8(ref8.t.as<uint8_t>(), reft8.t.as<uint8_t>(), rs + 4, y->t.as<cuda::bf16>(), rows, d, rs,
                           cuda::Fp8Format::E4M3, gpu_->stream(), rs + 1);
        cuda::fp8_guard(ref8.t.as<uint8_t>(), reft8.t.as<uint8_t>(), rs + 4, y->t.as<cuda::bf16>(), rows, d, rs,
                        rs + 1, reinterpret_cast<unsigned int*>(rs + 2), cuda::Fp8Format::E4M3, gpu_->stream());
        cuda::rmsnorm_cast_fp8(got8.t.as<uint8_t>(), gott8.t.as<uint8_t>(), gs + 4, h, rstd2->t.as<float>(),
                               nw->t.as<cuda::bf16>(), rows, int(d), gs, gs + 1, cuda::Fp8Format::E4M3,
                               gpu_->stream());
        const cuda::Fp8GuardOperand op{got8.t.as<uint8_t>(), gott8.t.as<uint8_t>(), gs + 4, h, rows, d, gs, gs + 1,
                                       reinterpret_cast<unsigned int*>(gs + 2), cuda::Fp8Format::E4M3, nullptr,
                                       rstd2->t.as<float>(), nw->t.as<cuda::bf16>()};
        cuda::fp8_guard_all(&op, 1, gpu_->stream());
        EXPECT_EQ(bytes(got8), bytes(ref8)) << "the FP8 bytes as is";
        EXPECT_EQ(bytes(gott8), bytes(reft8)) << "the FP8 bytes transposed";
        const auto r = down(*ref_slot), g = down(*got_slot);
        EXPECT_EQ(g[1], amax) << "the amax seen";
        for (int i : {0, 1, 2, 4}) EXPECT_EQ(g[size_t(i)], r[size_t(i)]) << "slot float " << i;
      }
    }
  }
}

// SwiGLU's backward cast straight to FP8 (swiglu_backward_fp8) gives the bytes, the recorded amax and the guard's
// outcome of swiglu_backward in bf16 followed by quantize_fp8 and fp8_guard, bitwise: with a scale that holds
// the values and with one they exceed, at sizes that fill no 64 x 64 tile (rows 1000, f 200) and at a width
// of the models' (f 4864, 9728 gradient columns).
TEST_F(Fp8Test, SwigluBackwardCastIsSwigluBackwardThenTheCast) {
  for (auto [rows, f] : {std::pair<int64_t, int64_t>{1000, 200}, {256, 4864}}) {
    const int64_t cols = 2 * f;
    const auto gu_h = normal(size_t(rows * cols), 2.f), dout_h = normal(size_t(rows * f), 0.5f);
    auto gate_up = gpu(DType::BF16, {rows, cols}, &gu_h);
    auto dout = gpu(DType::BF16, {rows, f}, &dout_h);
    auto dgate_up = gpu(DType::BF16, {rows, cols});
    cuda::swiglu_backward(dgate_up->t.as<cuda::bf16>(), dout->t.as<cuda::bf16>(), gate_up->t.as<cuda::bf16>(), rows,
                          int(f), gpu_->stream());
    float amax = 0.f;
    for (float v : down(*dgate_up)) amax = std::max(amax, std::fabs(v));
    ASSERT_GT(amax, 0.f);
    for (cuda::Fp8Format fmt : {cuda::Fp8Format::E5M2, cuda::Fp8Format::E4M3}) {
      for (float scale_amax : {amax / 4, 2 * amax}) {
        SCOPED_TRACE(::testing::Message() << rows << " x " << f << (fmt == cuda::Fp8Format::E4M3 ? " e4m3" : " e5m2")
                                          << " scale amax " << scale_amax << " of " << amax << " seed=" << seed_);
        std::vector<float> slot_h(cuda::kFp8SlotFloats, 0.f);
        slot_h[0] = scale_amax;
        auto ref_slot = gpu(DType::F32, {cuda::kFp8SlotFloats}, &slot_h);
        auto got_slot = gpu(DType::F32, {cuda::kFp8SlotFloats}, &slot_h);
        Owned ref8(*gpu_, DType::U8, {rows, cols}), reft8(*gpu_, DType::U8, {cols, rows});
        Owned got8(*gpu_, DType::U8, {rows, cols}), gott8(*gpu_, DType::U8, {cols, rows});
        poison(got8);  // 0xff is NaN in both formats, which a saturating cast never writes
        poison(gott8);
        float* rs = ref_slot->t.as<float>();
        cuda::quantize_fp8(ref8.t.as<uint8_t>(), reft8.t.as<uint8_t>(), rs + 4, dgate_up->t.as<cuda::bf16>(), rows,
                           cols, rs, fmt, gpu_->stream(), rs + 1);
        cuda::fp8_guard(ref8.t.as<uint8_t>(), reft8.t.as<uint8_t>(), rs + 4, dgate_up->t.as<cuda::bf16>(), rows,
                        cols, rs, rs + 1, reinterpret_cast<unsigned int*>(rs + 2), fmt, gpu_->stream());
        float* gs = got_slot->t.as<float>();
        cuda::swiglu_backward_fp8(got8.t.as<uint8_t>(), gott8.t.as<uint8_t>(), gs + 4, dout->t.as<cuda::bf16>(),
                                  gate_up->t.as<cuda::bf16>(), rows, int(f), gs, gs + 1,
                                  reinterpret_cast<unsigned int*>(gs + 2), fmt, gpu_->stream());
        const auto rslot = down(*ref_slot), gslot = down(*got_slot);
        EXPECT_EQ(gslot[1], amax) << "the amax seen";
        EXPECT_EQ(gslot[0], scale_amax < amax ? amax : scale_amax) << "the scale's amax after the guard";
        unsigned recasts = 0;
        std::memcpy(&recasts, &gslot[3], sizeof recasts);
        EXPECT_EQ(recasts, scale_amax < amax ? 1u : 0u) << "the guard's recast count";
        for (int i : {0, 1, 2, 4}) EXPECT_EQ(gslot[size_t(i)], rslot[size_t(i)]) << "slot float " << i;
        for (auto [got, ref] : {std::pair{&got8, &ref8}, {&gott8, &reft8}}) {
          std::vector<uint8_t> g(size_t(rows * cols)), r(g.size());
          gpu_->download(g.data(), got->t.data, g.size());
          gpu_->download(r.data(), ref->t.data, r.size());
          int64_t wrong = 0;
          for (size_t i = 0; i < g.size(); i++) wrong += g[i] != r[i];
          EXPECT_EQ(wrong, 0) << (got == &got8 ? "as is" : "transposed");
        }
      }
    }
  }
}

// The commit: the seen amax into the history, the scale's amax the history's max times the margin, the seen amax
// and the recast counts back to 0, the counts summed.
TEST_F(Fp8Test, CommitPutsTheSeenAmaxInTheHistoryAndScalesByItsMax) {
  const int n = 300, len = 16, position = 5;
  for (float margin : {1.f, 2.f, 8.f}) {
    SCOPED_TRACE(::testing::Message() << "margin " << margin << " seed=" << seed_);
    std::vector<float> slots_h(size_t(n) * cuda::kFp8SlotFloats), history_h = normal(size_t(n) * len, 1.f);
    for (float& h : history_h) h = std::fabs(h);
    const auto seen = normal(size_t(n), 4.f);
    unsigned long long recasts = 0;
    for (int i = 0; i < n; i++) {
      slots_h[size_t(i) * cuda::kFp8SlotFloats + 1] = std::fabs(seen[size_t(i)]);
      const unsigned count = unsigned(i % 7 == 0 ? i % 5 : 0);
      std::memcpy(&slots_h[size_t(i) * cuda::kFp8SlotFloats + 3], &count, sizeof count);
      recasts += count;
    }
    ASSERT_GT(recasts, 0u);
    auto slots = gpu(DType::F32, {int64_t(slots_h.size())}, &slots_h), history = gpu(DType::F32, {n, len}, &history_h);
    Owned total(*gpu_, DType::F64, {1});  // 8 bytes: the unsigned 64-bit total
    TK_CUDA_CHECK(cudaMemsetAsync(total.t.data, 0, 8, gpu_->stream()));
    cuda::fp8_commit_amax(slots->t.as<float>(), history->t.as<float>(), n, len, position, margin,
                          static_cast<unsigned long long*>(total.t.data), gpu_->stream());
    const auto got_slots = down(*slots), got_history = down(*history);
    unsigned long long got_total = 0;
    gpu_->download(&got_total, total.t.data, sizeof got_total);
    EXPECT_EQ(got_total, recasts) << "the recasts summed";
    for (int i = 0; i < n; i++) {
      float* h = history_h.data() + size_t(i) * len;
      h[position] = std::fabs(seen[size_t(i)]);
      const float mx = *std::max_element(h, h + len);
      ASSERT_EQ(got_slots[size_t(i) * cuda::kFp8SlotFloats], mx * margin) << "slot " << i;
      ASSERT_EQ(got_slots[size_t(i) * cuda::kFp8SlotFloats + 1], 0.f) << "slot " << i;
      ASSERT_EQ(got_slots[size_t(i) * cuda::kFp8SlotFloats + 3], 0.f) << "slot " << i << ": its recasts";
    }
    EXPECT_EQ(got_history, history_h);
  }
}

TEST_F(Fp8Test, LinearAtTrainingShapeWithBias) { check_linear(2048, 896, 1152, true); }
TEST_F(Fp8Test, LinearAt1BShape) { check_linear(1024, 2048, 8192, false); }
TEST_F(Fp8Test, LinearSmall) { check_linear(272, 192, 320, false); }
// A dimension that is not a multiple of 16 takes the bf16 GEMMs: bf16's bounds against the exact product.
TEST_F(Fp8Test, OddShapeFallsBackToBf16) { check_linear(37, 120, 200, true); }

// Against two references: the CPU product of the values the FP8 path multiplies (the host's rounding of
// each operand; only accumulation and the bf16 output may differ), and the exact product (the error FP8
// costs, bounded loosely: ~3.6% per e4m3 operand, ~7% for e5m2, in norm). Run twice: bitwise equal.
void Fp8Test::check_linear(int64_t N, int64_t in, int64_t out, bool with_bias) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " in=" << in << " out=" << out << " seed=" << seed_);
  const bool fp8 = N % 16 == 0 && in % 16 == 0 && out % 16 == 0;
  gpu_->set_fp8(true);
  auto x_h = normal(size_t(N * in), 1.f), w_h = normal(size_t(out * in), 0.05f);
  auto b_h = normal(size_t(out), 0.5f), dy_h = normal(size_t(N * out), 1e-3f);
  auto x = gpu(DType::BF16, {N, in}, &x_h), w = gpu(DType::BF16, {out, in}, &w_h);
  auto b = gpu(DType::BF16, {out}, &b_h), dy = gpu(DType::BF16, {N, out}, &dy_h);
  auto y = gpu(DType::BF16, {N, out}), dx = gpu(DType::BF16, {N, in});
  auto dw = gpu(DType::F32, {out, in}), db = gpu(DType::F32, {out});
  Tensor bias = with_bias ? b->t : Tensor(), dbias = with_bias ? db->t : Tensor();
  const std::vector<float> zeros_w(size_t(out * in), 0.f), zeros_b(size_t(out), 0.f);

  // refs[0]: exact operands; refs[1]: the rounded ones (x, w e4m3; dy e5m2).
  struct Ref {
    std::vector<float> y, dx, dw;
  } refs[2];
  for (int r = 0; r < 2; r++) {
    const bool rounded = r == 1 && fp8;
    const auto xv = rounded ? host_fp8(x_h, cuda::Fp8Format::E4M3).values : x_h;
    const auto wv = rounded ? host_fp8(w_h, cuda::Fp8Format::E4M3).values : w_h;
    const auto dyv = rounded ? host_fp8(dy_h, cuda::Fp8Format::E5M2).values : dy_h;
    auto cx = cpu({N, in}, &xv), cw = cpu({out, in}, &wv), cb = cpu({out}, &b_h), cdy = cpu({N, out}, &dyv);
    auto cy = cpu({N, out}), cdx = cpu({N, in}), cdw = cpu({out, in}, &zeros_w), cdb = cpu({out}, &zeros_b);
    cpu_->linear_forward(cy->t, cx->t, cw->t, with_bias ? cb->t : Tensor());
    cpu_->linear_backward(cdx->t, cdw->t, with_bias ? cdb->t : Tensor(), cdy->t, cx->t, cw->t);
    refs[r] = {down(*cy), down(*cdx), down(*cdw)};
  }
  std::vector<uint8_t> first_y, first_dx, first_dw;
  for (int run = 0; run < 2; run++) {
    poison(*y);
    poison(*dx);
    gpu_->upload_f32(dw->t, zeros_w.data());
    gpu_->upload_f32(db->t, zeros_b.data());
    gpu_->linear_forward(y->t, x->t, w->t, bias);
    gpu_->linear_backward(dx->t, dw->t, dbias, dy->t, x->t, w->t);
    const auto yh = down(*y), dxh = down(*dx), dwh = down(*dw);
    EXPECT_LT(rel_error(yh, refs[1].y), kBf16Tol) << "y against the rounded operands, run " << run;
    EXPECT_LT(rel_error(dxh, refs[1].dx), kBf16Tol) << "dx against the rounded operands, run " << run;
    EXPECT_LT(rel_error(dwh, refs[1].dw), fp8 ? 1e-3 : kF32SumTol) << "dw against the rounded operands, run " << run;
    if (fp8) {
      EXPECT_LT(rel_error(yh, refs[0].y), 0.08) << "y against the exact product";
      EXPECT_LT(rel_error(dxh, refs[0].dx), 0.12) << "dx against the exact product";
      EXPECT_LT(rel_error(dwh, refs[0].dw), 0.12) << "dw against the exact product";
      EXPECT_GT(rel_error(yh, refs[0].y), 1e-2) << "y is as exact as bf16: the FP8 path did not run";
    }
    if (run == 0) {
      first_y = bytes(*y), first_dx = bytes(*dx), first_dw = bytes(*dw);
    } else {
      EXPECT_EQ(first_y, bytes(*y)) << "FP8 forward is not deterministic";
      EXPECT_EQ(first_dx, bytes(*dx)) << "FP8 dx is not deterministic";
      EXPECT_EQ(first_dw, bytes(*dw)) << "FP8 dw is not deterministic";
    }
  }
}

// ---- attention --------------------------------------------------------------------------------------

struct AttnCase {
  int B, T, Hq, Hkv, hd;
};

// dq, dk and dv slices of a [B, T, Hq+2Hkv, hd] gradient, as three vectors.
std::vector<std::vector<float>> split_qkv(const std::vector<float>& g, const AttnShape& s) {
  std::vector<std::vector<float>> parts(3);
  int64_t row = s.qkv_width(), q = int64_t(s.n_heads) * s.head_dim, kv = int64_t(s.n_kv_heads) * s.head_dim;
  for (int64_t r = 0; r < int64_t(s.B) * s.T; r++) {
    const float* p = g.data() + r * row;
    parts[0].insert(parts[0].end(), p, p + q);
    parts[1].insert(parts[1].end(), p + q, p + q + kv);
    parts[2].insert(parts[2].end(), p + q + kv, p + row);
  }
  return parts;
}

class AttentionTest : public CudaOpsTest {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    log::set_level(log::Level::Debug);  // the log then names the cuDNN engine and workspace of each plan
  }
  void TearDown() override { log::set_level(log::Level::Info); }

  // Attention forward and backward of fresh random inputs on both backends, the CUDA results against the
  // CPU's: outputs poisoned first, two runs bitwise equal. segments (i32[B,T] on the GPU, or empty for no
  // document masking) holds the ids of `ids`.
  void check(const AttnShape& s, const Tensor& segments, const std::vector<int32_t>& ids);
};

void AttentionTest::check(const AttnShape& s, const Tensor& segments, const std::vector<int32_t>& ids) {
  int64_t B = s.B, T = s.T, H3 = s.n_heads + 2 * s.n_kv_heads, Hq = s.n_heads, hd = s.head_dim;
  auto qkv_h = normal(size_t(B * T * H3 * hd), 1.5f), dout_h = normal(size_t(B * T * Hq * hd), 1.f);

  auto qkv = gpu(DType::BF16, {B, T, H3, hd}, &qkv_h), dout = gpu(DType::BF16, {B, T, Hq, hd}, &dout_h);
  auto out = gpu(DType::BF16, {B, T, Hq, hd}), lse = gpu(DType::F32, {B, Hq, T});
  auto dqkv = gpu(DType::BF16, {B, T, H3, hd});
  auto cqkv = cpu({B, T, H3, hd}, &qkv_h), cdout = cpu({B, T, Hq, hd}, &dout_h);
  auto cout_ = cpu({B, T, Hq, hd}), clse = cpu({B, Hq, T}), cdqkv = cpu({B, T, H3, hd});
  std::unique_ptr<Owned> cseg;
  Tensor csegments;
  if (!segments.empty()) {
    cseg = ints(*cpu_, ids);
    csegments = Tensor(cseg->t.data, DType::I32, {B, T});
  }

  cpu_->attention_forward(cout_->t, clse->t, cqkv->t, csegments, s);
  cpu_->attention_backward(cdqkv->t, cdout->t, cqkv->t, cout_->t, clse->t, csegments, s);
  auto out_ref = down(*cout_), lse_ref = down(*clse);
  auto grads_ref = split_qkv(down(*cdqkv), s);

  std::vector<uint8_t> first_out, first_lse, first_dqkv;
  for (int run = 0; run < 2; run++) {
    poison(*out);
    poison(*lse);
    poison(*dqkv);
    gpu_->attention_forward(out->t, lse->t, qkv->t, segments, s);
    gpu_->attention_backward(dqkv->t, dout->t, qkv->t, out->t, lse->t, segments, s);
    EXPECT_LT(rel_error(down(*out), out_ref), kBf16Tol) << "out, run " << run;
    EXPECT_LT(rel_error(down(*lse), lse_ref), kF32SumTol) << "lse, run " << run;
    auto grads = split_qkv(down(*dqkv), s);
    const char* names[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++)
      EXPECT_LT(rel_error(grads[i], grads_ref[i]), kAttnGradTol) << names[i] << ", run " << run;
    if (run == 0) {
      first_out = bytes(*out), first_lse = bytes(*lse), first_dqkv = bytes(*dqkv);
    } else {
      EXPECT_EQ(first_out, bytes(*out)) << "attention_forward out is not deterministic";
      EXPECT_EQ(first_lse, bytes(*lse)) << "attention_forward lse is not deterministic";
      EXPECT_EQ(first_dqkv, bytes(*dqkv)) << "attention_backward is not deterministic";
    }
  }
}

std::string case_name(const AttnCase& c) {
  return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_H" + std::to_string(c.Hq) + "x" +
         std::to_string(c.Hkv) + "_hd" + std::to_string(c.hd);
}

class CausalAttention : public AttentionTest, public ::testing::WithParamInterface<AttnCase> {};

TEST_P(CausalAttention, GqaForwardBackward) {
  const AttnCase c = GetParam();
  SCOPED_TRACE(::testing::Message() << case_name(c) << " seed=" << seed_);
  check({c.B, c.T, c.Hq, c.Hkv, c.hd}, Tensor(), {});
}

INSTANTIATE_TEST_SUITE_P(Shapes, CausalAttention,
                         // head_dim 64 with T % 128 == 0 takes our own backward on Hopper (1 and 2 kv blocks a
                         // q block's dQ waits on, GQA 7:1, 4:1 and none); the rest cuDNN's.
                         ::testing::Values(AttnCase{1, 2048, 14, 2, 64}, AttnCase{1, 2048, 32, 8, 128},
                                           AttnCase{2, 1000, 14, 2, 64}, AttnCase{2, 1000, 32, 8, 128},
                                           AttnCase{2, 384, 32, 8, 64}, AttnCase{3, 128, 2, 2, 64}),
                         [](const ::testing::TestParamInfo<AttnCase>& i) { return case_name(i.param); });

// ---- attention with document masking (segment ids) ------------------------------------------------------

// How a row is cut into documents.
enum class Docs {
  kOne,       // one document over the whole row
  kMixed,     // lengths 1, 1, 2, then random lengths up to T/3, some starting at a multiple of 128
  kShort,     // many documents of 1 to 40 tokens
  kAligned,   // 128 and 256 tokens on 128-token tile edges, 64 inside one tile (crossing no edge), then random
  kRepeated,  // a few documents whose ids come back later in the row (equal ids attend to each other)
};

struct DocCase {
  AttnCase shape;
  std::vector<Docs> rows;  // row b is cut as rows[b % rows.size()]
};

class DocumentMaskedAttention : public AttentionTest, public ::testing::WithParamInterface<DocCase> {
 protected:
  // The segment ids of one row of T tokens.
  std::vector<int32_t> row_ids(Docs docs, int T);
};

std::vector<int32_t> DocumentMaskedAttention::row_ids(Docs docs, int T) {
  std::vector<int> lengths;
  auto fill = [&](int lo, int hi) {
    std::uniform_int_distribution<int> len(lo, hi);
    int used = 0;
    for (int l : lengths) used += l;
    while (used < T) {
      int l = std::min(len(rng_), T - used);
      lengths.push_back(l);
      used += l;
    }
  };
  switch (docs) {
    case Docs::kOne:
      lengths = {T};
      break;
    case Docs::kMixed:
      lengths = {1, 1, 2, 124};  // the fifth document starts at 128
      fill(1, std::max(1, T / 3));
      break;
    case Docs::kShort:
      fill(1, 40);
      break;
    case Docs::kAligned:
      lengths = {128, 256, 64};  // the third lies inside one tile
      fill(1, 384);
      break;
    case Docs::kRepeated:
      fill(1, std::max(1, T / 5));
      break;
  }
  std::vector<int32_t> ids;
  for (size_t d = 0; d < lengths.size(); d++) {
    // Ids need not count from 0; repeated rows reuse ids 0, 1, 2 in turn, so documents d and d + 3 share one.
    const int32_t id = docs == Docs::kRepeated ? int32_t(d % 3) : int32_t(1000 + 7 * d);
    ids.insert(ids.end(), size_t(std::max(0, std::min(lengths[d], T - int(ids.size())))), id);
  }
  return ids;
}

TEST_P(DocumentMaskedAttention, GqaForwardBackward) {
  const DocCase& c = GetParam();
  const AttnShape s{c.shape.B, c.shape.T, c.shape.Hq, c.shape.Hkv, c.shape.hd};
  std::vector<int32_t> ids;
  for (int b = 0; b < s.B; b++) {
    std::vector<int32_t> row = row_ids(c.rows[size_t(b) % c.rows.size()], s.T);
    ASSERT_EQ(int(row.size()), s.T);
    ids.insert(ids.end(), row.begin(), row.end());
  }
  SCOPED_TRACE(::testing::Message() << case_name(c.shape) << " seed=" << seed_);
  auto seg = ints(*gpu_, ids);
  check(s, Tensor(seg->t.data, DType::I32, {s.B, s.T}), ids);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DocumentMaskedAttention,
    ::testing::Values(DocCase{{3, 1000, 14, 2, 64}, {Docs::kMixed, Docs::kOne, Docs::kRepeated}},
                      DocCase{{2, 2048, 32, 8, 128}, {Docs::kMixed, Docs::kShort}},
                      DocCase{{1, 2048, 14, 2, 64}, {Docs::kAligned}},
                      DocCase{{2, 1000, 32, 8, 128}, {Docs::kAligned, Docs::kOne}},
                      DocCase{{2, 333, 14, 2, 64}, {Docs::kShort, Docs::kMixed}}),  // rows not 16-byte multiples
    [](const ::testing::TestParamInfo<DocCase>& i) { return case_name(i.param.shape); });

// The mask follows the ids, not the buffer: new ids in the same buffer (one row changed), the same ids in
// another buffer, and no ids at all, each give the CPU's results.
TEST_F(AttentionTest, DocumentMaskFollowsChangedSegmentIds) {
  const AttnShape s{2, 384, 14, 2, 64};
  std::vector<int32_t> a(size_t(2 * 384)), b;
  for (int t = 0; t < 2 * 384; t++) a[size_t(t)] = t % 384 < 100 ? 0 : t % 384 < 300 ? 1 : 2;
  b = a;
  for (int t = 384; t < 2 * 384; t++) b[size_t(t)] = (t - 384) / 50;  // row 1 only
  auto seg = ints(*gpu_, a);
  const Tensor seg_t(seg->t.data, DType::I32, {2, 384});
  check(s, seg_t, a);
  gpu_->upload(seg->t.data, b.data(), b.size() * sizeof(int32_t));
  check(s, seg_t, b);
  auto other = ints(*gpu_, a);
  check(s, Tensor(other->t.data, DType::I32, {2, 384}), a);
  check(s, Tensor(), {});
  // A smaller batch and a shorter row with the same buffer.
  const AttnShape small{1, 200, 14, 2, 64};
  std::vector<int32_t> c(a.begin(), a.begin() + 200);
  check(small, Tensor(other->t.data, DType::I32, {1, 200}), c);
}

TEST_F(CudaOpsTest, AttentionChecksSegmentIds) {
  AttnShape s{1, 64, 2, 1, 64};
  auto qkv = gpu(DType::BF16, {1, 64, 4, 64}), out = gpu(DType::BF16, {1, 64, 2, 64});
  auto lse = gpu(DType::F32, {1, 2, 64});
  auto seg = ints(*gpu_, std::vector<int32_t>(64, 0));
  EXPECT_THROW(gpu_->attention_forward(out->t, lse->t, qkv->t, Tensor(seg->t.data, DType::I32, {2, 32}), s), Error);
  EXPECT_THROW(gpu_->attention_forward(out->t, lse->t, qkv->t, Tensor(seg->t.data, DType::F32, {1, 64}), s), Error);
  EXPECT_THROW(gpu_->attention_forward(out->t, lse->t, qkv->t, Tensor(seg->t.data, DType::I32, {1, 32}), s), Error);
}

TEST_F(CudaOpsTest, AttentionDecodeMatchesCpu) {
  // A cache holding 37 earlier positions, then 5 new tokens: 14:2 heads, hd 64.
  const int Hq = 14, Hkv = 2, hd = 64, max_len = 64, pos = 37, n_new = 5;
  AttnShape s{1, n_new, Hq, Hkv, hd};
  auto kc_h = normal(size_t(max_len * Hkv * hd), 1.f), vc_h = normal(size_t(max_len * Hkv * hd), 1.f);
  auto qkv_h = normal(size_t(n_new * (Hq + 2 * Hkv) * hd), 1.5f);
  auto kc = gpu(DType::BF16, {max_len, Hkv, hd}, &kc_h), vc = gpu(DType::BF16, {max_len, Hkv, hd}, &vc_h);
  auto qkv = gpu(DType::BF16, {n_new, Hq + 2 * Hkv, hd}, &qkv_h), out = gpu(DType::BF16, {n_new, Hq, hd});
  auto ckc = cpu({max_len, Hkv, hd}, &kc_h), cvc = cpu({max_len, Hkv, hd}, &vc_h);
  auto cqkv = cpu({n_new, Hq + 2 * Hkv, hd}, &qkv_h), cout_ = cpu({n_new, Hq, hd});
  cpu_->attention_decode(cout_->t, ckc->t, cvc->t, cqkv->t, pos, s);
  poison(*out);
  gpu_->attention_decode(out->t, kc->t, vc->t, qkv->t, pos, s);
  EXPECT_LT(rel_error(down(*out), down(*cout_)), kBf16Tol);
  EXPECT_EQ(down(*kc), down(*ckc)) << "the new keys were not appended to the cache exactly";
  EXPECT_EQ(down(*vc), down(*cvc)) << "the new values were not appended to the cache exactly";
}

// ---- LM head + cross-entropy ------------------------------------------------------------------------

struct CeCase {
  int64_t N, d, V;
  size_t chunk_budget;  // small budgets force several chunks and a short last one
};

class CrossEntropyTest : public CudaOpsTest, public ::testing::WithParamInterface<CeCase> {};

TEST_P(CrossEntropyTest, LossAndGradientsWithIgnoredTargets) {
  const CeCase c = GetParam();
  SCOPED_TRACE(::testing::Message() << "N=" << c.N << " d=" << c.d << " V=" << c.V << " seed=" << seed_);
  const int ignore = -100;
  int64_t N = c.N, d = c.d, V = c.V;
  auto x_h = normal(size_t(N * d), 1.f), w_h = normal(size_t(V * d), 0.05f), dw0_h = normal(size_t(V * d), 1e-3f);
  // Every 7th target ignored; the first one the last vocabulary entry (an odd vocabulary's unaligned tail).
  std::vector<int32_t> targets(static_cast<size_t>(N));
  std::uniform_int_distribution<int32_t> token(0, int32_t(V - 1));
  for (size_t i = 0; i < targets.size(); i++) targets[i] = i % 7 == 3 ? ignore : token(rng_);
  targets[0] = int32_t(V - 1);
  int64_t valid = std::count_if(targets.begin(), targets.end(), [&](int32_t v) { return v != ignore; });
  float grad_scale = 1.0f / float(valid);

  auto x = gpu(DType::BF16, {N, d}, &x_h), w = gpu(DType::BF16, {V, d}, &w_h);
  auto dx = gpu(DType::BF16, {N, d}), dw = gpu(DType::F32, {V, d}), losses = gpu(DType::F32, {N});
  auto tg = ints(*gpu_, targets);
  auto cx = cpu({N, d}, &x_h), cw = cpu({V, d}, &w_h), cdx = cpu({N, d}), cdw = cpu({V, d}, &dw0_h);
  auto closses = cpu({N});
  auto ctg = ints(*cpu_, targets);
  cpu_->lm_head_cross_entropy(closses->t, cdx->t, cdw->t, cx->t, cw->t, ctg->t, grad_scale, ignore);
  auto loss_ref = down(*closses), dx_ref = down(*cdx), dw_inc_ref = minus(down(*cdw), dw0_h);

  gpu_->set_logits_chunk_budget(c.chunk_budget);
  lm_head_twice(*losses, *dx, *dw, *x, *w, *tg, dw0_h, grad_scale, ignore,
                [&](const std::vector<float>& loss, const std::vector<float>& dxh, const std::vector<float>& dwh,
                    int run) {
                  EXPECT_LT(rel_error(loss, loss_ref), kLossTol) << "losses, run " << run;
                  for (size_t i = 0; i < targets.size(); i++)
                    if (targets[i] == ignore) ASSERT_EQ(loss[i], 0.0f) << "ignored token " << i << " has a loss";
                  EXPECT_LT(rel_error(dxh, dx_ref), kBf16Tol) << "dx, run " << run;
                  EXPECT_LT(rel_error(dwh, dw_inc_ref), kBf16Tol) << "dw increment, run " << run;
                });
}

// The byte transpose the FP8 LM head's weight gradient takes, at sizes that fill no 64 x 64 tile: exact.
TEST_F(Fp8Test, TransposeBytesIsExact) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{144, 400}, {16, 16}, {2560, 1008}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols << " seed=" << seed_);
    std::vector<uint8_t> in_h(size_t(rows * cols));
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : in_h) b = uint8_t(byte(rng_));
    Owned in(*gpu_, DType::U8, {rows, cols}), out(*gpu_, DType::U8, {cols, rows});
    gpu_->upload(in.t.data, in_h.data(), in_h.size());
    poison(out);
    cuda::transpose_bytes(out.t.as<uint8_t>(), in.t.as<uint8_t>(), rows, cols, gpu_->stream());
    const auto got = bytes(out);
    int64_t wrong = 0;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++) wrong += got[size_t(c * rows + r)] != in_h[size_t(r * cols + c)];
    EXPECT_EQ(wrong, 0);
  }
}

// The LM head in FP8 (CudaOps::set_fp8_lm_head), in two chunks, the second short: the losses against the CPU's from
// the e4m3-rounded x and w (only the bf16 logits and the accumulation differ, so bf16's loss bound); dx and dw
// against that reference (the dlogits' e5m2 rounding added) and against the exact one, from which they must differ
// by e4m3's rounding of w and x (the GEMMs took the FP8 operands); bitwise repeatable; forward-only gives the same
// losses; a vocabulary that is not a multiple of 16 stays bf16.
TEST_F(Fp8Test, LmHeadCrossEntropyInFp8) {
  for (int64_t V : {int64_t(151936), int64_t(50257)}) {
    const int64_t N = 400, d = 896;
    const bool fp8 = V % 16 == 0;
    SCOPED_TRACE(::testing::Message() << "N=" << N << " d=" << d << " V=" << V << " seed=" << seed_);
    const int ignore = -100;
    // Logits of sd 3: the softmax is peaked enough that its part of the dlogits shows next to the target's.
    auto x_h = normal(size_t(N * d), 1.f), w_h = normal(size_t(V * d), 0.1f), dw0_h = normal(size_t(V * d), 1e-3f);
    std::vector<int32_t> targets(static_cast<size_t>(N));
    std::uniform_int_distribution<int32_t> token(0, int32_t(V - 1));
    for (size_t i = 0; i < targets.size(); i++) targets[i] = i % 7 == 3 ? ignore : token(rng_);
    const int64_t valid = std::count_if(targets.begin(), targets.end(), [&](int32_t v) { return v != ignore; });
    const float grad_scale = 1.0f / float(valid);
    // refs[0]: exact operands; refs[1]: x and w rounded to e4m3 with their own scales.
    struct Ref {
      std::vector<float> loss, dx, dw;
    } refs[2];
    for (int r = 0; r < 2; r++) {
      const auto xv = r == 1 && fp8 ? host_fp8(x_h, cuda::Fp8Format::E4M3).values : x_h;
      const auto wv = r == 1 && fp8 ? host_fp8(w_h, cuda::Fp8Format::E4M3).values : w_h;
      auto cx = cpu({N, d}, &xv), cw = cpu({V, d}, &wv), cdx = cpu({N, d}), cdw = cpu({V, d}, &dw0_h);
      auto closses = cpu({N});
      auto ctg = ints(*cpu_, targets);
      cpu_->lm_head_cross_entropy(closses->t, cdx->t, cdw->t, cx->t, cw->t, ctg->t, grad_scale, ignore);
      refs[r] = {down(*closses), down(*cdx), minus(down(*cdw), dw0_h)};
    }
    if (fp8) ASSERT_GT(rel_error(refs[1].loss, refs[0].loss), 3 * kLossTol) << "the rounding does not show in the loss";
    gpu_->set_fp8(true);
    gpu_->set_fp8_lm_head(true);
    gpu_->set_logits_chunk_budget(size_t(256) * size_t(V) * 2);  // chunks of 256 and 144 rows
    auto x = gpu(DType::BF16, {N, d}, &x_h), w = gpu(DType::BF16, {V, d}, &w_h);
    auto dx = gpu(DType::BF16, {N, d}), dw = gpu(DType::F32, {V, d}), losses = gpu(DType::F32, {N});
    auto tg = ints(*gpu_, targets);
    lm_head_twice(*losses, *dx, *dw, *x, *w, *tg, dw0_h, grad_scale, ignore,
                  [&](const std::vector<float>& loss, const std::vector<float>& dxh, const std::vector<float>& dwh,
                      int run) {
      EXPECT_LT(rel_error(loss, refs[1].loss), kLossTol) << "losses against the rounded operands, run " << run;
      for (size_t i = 0; i < targets.size(); i++)
        if (targets[i] == ignore) ASSERT_EQ(loss[i], 0.0f) << "ignored token " << i << " has a loss";
      if (fp8) {
        EXPECT_GT(rel_error(loss, refs[0].loss), 2 * kLossTol) << "losses as exact as bf16's: the logits were not FP8";
        for (auto [got, ref, exact, name] : {std::tuple{&dxh, &refs[1].dx, &refs[0].dx, "dx"},
                                             {&dwh, &refs[1].dw, &refs[0].dw, "dw increment"}}) {
          EXPECT_LT(rel_error(*got, *ref), 0.08) << name << " against the rounded x and w, run " << run;
          EXPECT_LT(rel_error(*got, *exact), 0.12) << name << " against the exact operands, run " << run;
          EXPECT_GT(rel_error(*got, *exact), 1e-2) << name << " as exact as bf16's: the GEMM's operands were not FP8";
        }
      } else {
        EXPECT_LT(rel_error(dxh, refs[0].dx), kBf16Tol) << "dx (bf16 path), run " << run;
        EXPECT_LT(rel_error(dwh, refs[0].dw), kBf16Tol) << "dw increment (bf16 path), run " << run;
      }
    });
    gpu_->set_fp8_lm_head(false);
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, CrossEntropyTest,
                         ::testing::Values(CeCase{300, 896, 151936, size_t(128) * 151936 * 2},
                                           CeCase{300, 768, 50257, size_t(256) * 50257 * 2},
                                           CeCase{1024, 896, 151936, size_t(512) << 20}),
                         [](const ::testing::TestParamInfo<CeCase>& i) {
                           return "N" + std::to_string(i.param.N) + "_V" + std::to_string(i.param.V) + "_chunks" +
                                  std::to_string((i.param.N * i.param.V * 2 + i.param.chunk_budget - 1) /
                                                 i.param.chunk_budget);
                         });

}  // namespace
}  // namespace tk
