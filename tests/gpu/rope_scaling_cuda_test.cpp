// Scaled RoPE on the CUDA backend against the CPU reference, through the op vocabulary (ops.h): Llama 3.2's
// "llama3" scaling and a linear one, forward and backward, with and without q/k norms, at positions past the
// scaling's low-frequency wavelength (8192) and past the cos/sin table (generation's positions), and a change
// of frequencies between calls, which must refill the backend's table.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/rope_scaling.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/device_info.h"
#include "gpu_testing.h"

namespace tk {
namespace {

constexpr double kTol = 1e-2;  // ||cuda - cpu|| / ||cpu||: bf16 storage of inputs and outputs

// A tensor on a backend, filled from host values, read back as floats.
struct Buf {
  Ops& ops;
  Tensor t;
  Buf(Ops& o, DType dt, std::initializer_list<int64_t> dims) : ops(o) {
    t = Tensor(nullptr, dt, dims);
    t.data = ops.allocate(t.nbytes(), "rope scaling test");
  }
  void set(const std::vector<float>& v) { ops.upload_f32(t, v.data()); }
  std::vector<float> get() {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    ops.download_f32(v.data(), t);
    return v;
  }
};

struct Case {
  const char* name;
  int T, Hq, Hkv, hd;
  bool norm;
  int position_offset;  // positions are offset + t: past the table (which covers 0..T-1) when above 0
  RopeScaling scaling;
};

class RopeScalingCuda : public ::testing::TestWithParam<Case> {};

TEST_P(RopeScalingCuda, ForwardAndBackwardMatchTheCpuReference) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  const AttnShape s{1, c.T, c.Hq, c.Hkv, c.hd};
  const int64_t N = c.T, W = s.qkv_width(), n_rot = c.Hq + c.Hkv;
  const RopeSpec rope{rope_inv_freq(500000.0, c.hd, c.scaling)};
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;
  auto values = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = round_bf16(normal(rng));
    return v;
  };
  const std::vector<float> qkv = values(N * W), dout = values(N * W), qw = values(c.hd), kw = values(c.hd);
  std::vector<int32_t> pos_i(static_cast<size_t>(N));
  for (int64_t t = 0; t < N; t++) pos_i[size_t(t)] = int32_t(c.position_offset + t);

  struct Out {
    std::vector<float> out, din, dqw, dkw;
  };
  auto run = [&](Ops& ops) {
    const DType act = ops.act_dtype(), grad = ops.grad_dtype();
    Buf x(ops, act, {N, W}), y(ops, act, {N, W}), dy(ops, act, {N, W}), dx(ops, act, {N, W});
    Buf rstd(ops, DType::F32, {N, n_rot}), q_w(ops, act, {c.hd}), k_w(ops, act, {c.hd});
    Buf dq_w(ops, grad, {c.hd}), dk_w(ops, grad, {c.hd}), positions(ops, DType::I32, {N});
    x.set(qkv), dy.set(dout), q_w.set(qw), k_w.set(kw);
    ops.zero(dq_w.t), ops.zero(dk_w.t);
    ops.upload(positions.t.data, pos_i.data(), pos_i.size() * sizeof(int32_t));
    const Tensor qn = c.norm ? q_w.t : Tensor(), kn = c.norm ? k_w.t : Tensor();
    const Tensor r = c.norm ? rstd.t : Tensor();
    // Plain RoPE first, so that the backend's table must change to the scaled frequencies.
    ops.qk_norm_rope_forward(y.t, r, x.t, qn, kn, positions.t, s, RopeSpec::plain(500000.0, c.hd), 1e-6f);
    ops.qk_norm_rope_forward(y.t, r, x.t, qn, kn, positions.t, s, rope, 1e-6f);
    ops.qk_norm_rope_backward(dx.t, c.norm ? dq_w.t : Tensor(), c.norm ? dk_w.t : Tensor(), dy.t, x.t, r, qn, kn,
                              positions.t, s, rope, 1e-6f);
    ops.synchronize();
    return Out{y.get(), dx.get(), dq_w.get(), dk_w.get()};
  };
  auto cpu = make_cpu_ops(DType::F32);
  auto gpu = make_cuda_ops();
  const Out ref = run(*cpu), got = run(*gpu);
  EXPECT_LE(rel_error(got.out, ref.out), kTol);
  EXPECT_LE(rel_error(got.din, ref.din), kTol);
  if (c.norm) {
    EXPECT_LE(rel_error(got.dqw, ref.dqw), kTol);
    EXPECT_LE(rel_error(got.dkw, ref.dkw), kTol);
  }
  // And the scaling mattered: plain RoPE gives another output at these positions.
  auto plain_cpu = make_cpu_ops(DType::F32);
  Buf x(*plain_cpu, DType::F32, {N, W}), y(*plain_cpu, DType::F32, {N, W}), p(*plain_cpu, DType::I32, {N});
  x.set(qkv);
  plain_cpu->upload(p.t.data, pos_i.data(), pos_i.size() * sizeof(int32_t));
  plain_cpu->qk_norm_rope_forward(y.t, Tensor(), x.t, Tensor(), Tensor(), p.t, s, RopeSpec::plain(500000.0, c.hd),
                                  1e-6f);
  if (!c.norm) EXPECT_GT(rel_error(y.get(), ref.out), 0.05);
}

const RopeScaling kLlama32 = RopeScaling::llama3(32.0, 1.0, 4.0, 8192);

// Llama 3.2-1B's heads (32:8, hd 64) over 10,000 positions from the table; Llama 3.2-3B's (hd 128) with norms;
// the rows of Qwen2.5-0.5B's shape (the pipelined kernel); and generation: a few tokens at positions 9000+,
// past the table of T rows, whose angles the kernels compute from the frequencies.
INSTANTIATE_TEST_SUITE_P(
    Shapes, RopeScalingCuda,
    ::testing::Values(Case{"llama32_1b_10k", 10000, 32, 8, 64, false, 0, kLlama32},
                      Case{"llama32_3b_norms", 9000, 24, 8, 128, true, 0, kLlama32},
                      Case{"pipelined_rows", 9000, 14, 2, 64, false, 0, kLlama32},
                      Case{"decode_past_table", 5, 32, 8, 64, false, 9000, kLlama32},
                      Case{"decode_past_table_norms", 3, 16, 8, 128, true, 12000, kLlama32},
                      Case{"linear", 4096, 8, 2, 64, false, 0, RopeScaling::linear(4.0)}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tk
