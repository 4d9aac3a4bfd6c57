// CpuOps<float>, the CPU trainer's backend and the CUDA kernels' reference, against CpuOps<double> on
// the same random inputs (rounded to float for both), at shapes large enough to take the parallel and
// chunked paths. Also: the float ops give the same bits with one thread as with several.
#include <gtest/gtest.h>
#include <omp.h>

#include <cblas.h>

#include <map>
#include <string>

#include "op_test_support.h"
#include "ops/cpu/cpu_ops.h"

namespace tk {
namespace {

using testing::Array;
using testing::Rng;
using testing::rel_error;
using Outputs = std::map<std::string, std::vector<double>>;

constexpr double kFloatTolerance = 1e-5;
constexpr int kIgnore = -1;

// Random values rounded to float, so both precisions start from the same numbers.
template <class Real>
void fill(Array<Real>& a, Rng& rng, double scale = 1.0, double offset = 0.0) {
  for (Real& e : a.v) e = Real(float(offset + scale * rng.normal()));
}

template <class Real>
std::vector<double> widen(const Array<Real>& a) {
  return std::vector<double>(a.v.begin(), a.v.end());
}

void expect_close(const Outputs& single, const Outputs& reference) {
  ASSERT_EQ(single.size(), reference.size());
  for (const auto& [name, ref] : reference) {
    EXPECT_LT(rel_error(single.at(name), ref), kFloatTolerance) << name;
  }
}

// A transformer block's worth of shapes: GQA 6:2, head_dim 16, T not a power of two, two documents a row.
constexpr int B = 2, T = 37, N = B * T, D = 96, F = 160, V = 4500, Hq = 6, Hkv = 2, HD = 16;
const AttnShape kShape{B, T, Hq, Hkv, HD};

template <class Real>
Outputs run_norms(uint64_t seed) {
  CpuOps<Real> ops;
  Rng rng(seed);
  Array<Real> h_in({N, D}), x({N, D}), w({D}), h_out({N, D}), y({N, D}), rstd({N}), dy({N, D}), dres({N, D});
  Array<Real> dh({N, D}), dw({D});
  fill(h_in, rng);
  fill(x, rng);
  fill(w, rng, 0.3, 1.0);
  fill(dy, rng);
  fill(dres, rng);
  ops.residual_rmsnorm_forward(h_out.t, y.t, rstd.t, h_in.t, x.t, w.t, 1e-5f);
  ops.rmsnorm_backward(dh.t, dw.t, dy.t, dres.t, h_out.t, rstd.t, w.t);
  Array<Real> y2({N, D}), rstd2({N});
  ops.rmsnorm_forward(y2.t, rstd2.t, x.t, w.t, 1e-6f);
  return {{"h_out", widen(h_out)}, {"y", widen(y)},   {"rstd", widen(rstd)},
          {"dh", widen(dh)},       {"dw", widen(dw)}, {"y (no residual)", widen(y2)}};
}

template <class Real>
Outputs run_linear(uint64_t seed) {
  CpuOps<Real> ops;
  Rng rng(seed);
  Array<Real> x({N, D}), w({F, D}), bias({F}), y({N, F}), dy({N, F}), dx({N, D}), dw({F, D}), dbias({F});
  fill(x, rng);
  fill(w, rng, 0.1);
  fill(bias, rng);
  fill(dy, rng);
  ops.linear_forward(y.t, x.t, w.t, bias.t);
  ops.linear_backward(dx.t, dw.t, dbias.t, dy.t, x.t, w.t);
  return {{"y", widen(y)}, {"dx", widen(dx)}, {"dw", widen(dw)}, {"dbias", widen(dbias)}};
}

// Positions restart at a document boundary inside each row.
void fill_documents(Array<int32_t>& seg, Array<int32_t>& pos) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const int cut = 11 + 9 * b;
      seg[b * T + t] = t < cut ? 0 : 1;
      pos[b * T + t] = t < cut ? t : t - cut;
    }
}

template <class Real>
Outputs run_qk_norm_rope(uint64_t seed) {
  CpuOps<Real> ops;
  Rng rng(seed);
  const int W = kShape.qkv_width();
  Array<Real> qkv({N, W}), out({N, W}), rstd({N, Hq + Hkv}), qw({HD}), kw({HD}), dout({N, W}), din({N, W});
  Array<Real> dqw({HD}), dkw({HD});
  Array<int32_t> seg({B, T}), pos({B, T});
  fill(qkv, rng);
  fill(qw, rng, 0.3, 1.0);
  fill(kw, rng, 0.3, 1.0);
  fill(dout, rng);
  fill_documents(seg, pos);
  for (auto& p : pos.v) p += 500;  // angles well away from zero
  const RopeSpec rope = RopeSpec::plain(1e6, HD);
  ops.qk_norm_rope_forward(out.t, rstd.t, qkv.t, qw.t, kw.t, pos.t, kShape, rope, 1e-6f);
  ops.qk_norm_rope_backward(din.t, dqw.t, dkw.t, dout.t, qkv.t, rstd.t, qw.t, kw.t, pos.t, kShape, rope, 1e-6f);
  return {{"qkv_out", widen(out)}, {"qk_rstd", widen(rstd)}, {"dqkv_in", widen(din)},
          {"dq_norm_w", widen(dqw)}, {"dk_norm_w", widen(dkw)}};
}

template <class Real>
Outputs run_attention(uint64_t seed) {
  CpuOps<Real> ops;
  Rng rng(seed);
  const int H3 = Hq + 2 * Hkv;
  Array<Real> qkv({B, T, H3, HD}), out({B, T, Hq, HD}), lse({B, Hq, T}), dout({B, T, Hq, HD}), dqkv({B, T, H3, HD});
  Array<int32_t> seg({B, T}), pos({B, T});
  fill(qkv, rng);
  fill(dout, rng);
  fill_documents(seg, pos);
  ops.attention_forward(out.t, lse.t, qkv.t, seg.t, kShape);
  ops.attention_backward(dqkv.t, dout.t, qkv.t, out.t, lse.t, seg.t, kShape);
  return {{"out", widen(out)}, {"lse", widen(lse)}, {"dqkv", widen(dqkv)}};
}

template <class Real>
Outputs run_swiglu_embedding(uint64_t seed) {
  CpuOps<Real> ops;
  Rng rng(seed);
  Array<Real> gate_up({N, 2 * F}), out({N, F}), dout({N, F}), dgate_up({N, 2 * F});
  Array<Real> table({V, D}), emb({N, D}), demb({N, D}), dtable({V, D});
  Array<int32_t> tokens({N});
  fill(gate_up, rng, 2.0);
  fill(dout, rng);
  fill(table, rng);
  fill(demb, rng);
  for (auto& t : tokens.v) t = rng.integer(0, 40);  // repeated ids: dtable rows sum several tokens
  ops.swiglu_forward(out.t, gate_up.t);
  ops.swiglu_backward(dgate_up.t, dout.t, gate_up.t);
  ops.embedding_forward(emb.t, tokens.t, table.t);
  ops.embedding_backward(dtable.t, tokens.t, demb.t);
  return {{"swiglu out", widen(out)}, {"dgate_up", widen(dgate_up)}, {"embedding", widen(emb)},
          {"dtable", widen(dtable)}};
}

template <class Real>
Outputs run_lm_head(uint64_t seed) {
  CpuOps<Real> ops;
  Rng rng(seed);
  const int n = 300;  // V = 4500: three vocabulary chunks of the op
  Array<Real> x({n, D}), w({V, D}), losses({n}), dx({n, D}), dw({V, D});
  Array<int32_t> targets({n});
  fill(x, rng);
  fill(w, rng, 0.2);
  int valid = 0;
  for (int i = 0; i < n; i++) {
    targets[i] = i % 9 == 4 ? kIgnore : rng.integer(0, V - 1);
    valid += targets[i] != kIgnore;
  }
  ops.lm_head_cross_entropy(losses.t, dx.t, dw.t, x.t, w.t, targets.t, 1.0f / float(valid), kIgnore);
  return {{"losses", widen(losses)}, {"dx", widen(dx)}, {"dw", widen(dw)}};
}

template <class Real>
Outputs run_optimizer(uint64_t seed) {
  CpuOps<Real> ops;
  Rng rng(seed);
  const int P = 100000;
  Array<Real> params({P}), master({P}), grads({P}), m({P}), v({P}), norm({1});
  fill(master, rng);
  params.v = master.v;
  fill(grads, rng, 1e-2);
  fill(m, rng, 1e-3);
  for (auto& e : v.v) e = Real(float(rng.uniform(1e-6, 1e-4)));
  norm[0] = Real(ops.grad_norm(grads.t));
  AdamWConfig c;
  c.step = 7;
  c.grad_scale = 0.25f;
  ops.adamw_update(params.t, master.t, grads.t, m.t, v.t, Tensor(), Tensor(), {{0, 60000, true}, {60000, 40000, false}},
                   c);
  return {{"grad_norm", widen(norm)}, {"master", widen(master)}, {"params", widen(params)}, {"m", widen(m)},
          {"v", widen(v)}};
}

TEST(CpuOpsFloat, RmsNorm) { expect_close(run_norms<float>(1), run_norms<double>(1)); }
TEST(CpuOpsFloat, Linear) { expect_close(run_linear<float>(2), run_linear<double>(2)); }
TEST(CpuOpsFloat, QkNormRope) { expect_close(run_qk_norm_rope<float>(3), run_qk_norm_rope<double>(3)); }
TEST(CpuOpsFloat, Attention) { expect_close(run_attention<float>(4), run_attention<double>(4)); }
TEST(CpuOpsFloat, SwiGluAndEmbedding) {
  expect_close(run_swiglu_embedding<float>(5), run_swiglu_embedding<double>(5));
}
TEST(CpuOpsFloat, LmHeadCrossEntropy) { expect_close(run_lm_head<float>(6), run_lm_head<double>(6)); }
TEST(CpuOpsFloat, Optimizer) { expect_close(run_optimizer<float>(7), run_optimizer<double>(7)); }

Outputs run_everything() {
  Outputs all;
  for (const Outputs& part : {run_norms<float>(1), run_linear<float>(2), run_qk_norm_rope<float>(3),
                              run_attention<float>(4), run_swiglu_embedding<float>(5), run_lm_head<float>(6),
                              run_optimizer<float>(7)})
    for (const auto& [name, values] : part) all[std::to_string(all.size()) + " " + name] = values;
  return all;
}

void expect_same_bits(const Outputs& a, const Outputs& b) {
  for (const auto& [name, values] : a) EXPECT_EQ(values, b.at(name)) << name;
}

TEST(CpuOpsFloat, SameBitsRunAfterRun) { expect_same_bits(run_everything(), run_everything()); }

// The ops' own loops sum in a fixed order, so the OpenMP thread count cannot change a bit. (OpenBLAS
// splits a GEMM differently with another thread count, so it is held at one thread here: a run is
// bitwise reproducible at a fixed thread count.)
TEST(CpuOpsFloat, SameBitsWithOneOrSeveralOpenMpThreads) {
  const int omp_threads = omp_get_max_threads(), blas_threads = openblas_get_num_threads();
  openblas_set_num_threads(1);
  omp_set_num_threads(1);
  const Outputs one = run_everything();
  omp_set_num_threads(std::max(3, omp_threads));
  const Outputs several = run_everything();
  omp_set_num_threads(omp_threads);
  openblas_set_num_threads(blas_threads);
  expect_same_bits(one, several);
}

// convert: between f64, f32 and bf16 on the device (the optimizer's master weights from the parameters), rounding to
// nearest even where the destination is narrower, exact where it is wider.
TEST(CpuOpsFloat, ConvertBetweenFloatDtypes) {
  CpuOps<float> ops;
  std::vector<double> wide = {1.0 + 0x1.0p-30, -3.25, 1.0 + 0x1.0p-8, 1.0 + 0x1.8p-8};
  std::vector<float> narrow(wide.size());
  std::vector<uint16_t> bits(wide.size());
  std::vector<float> back(wide.size());
  const int64_t n = int64_t(wide.size());
  const Tensor f64(wide.data(), DType::F64, {n}), f32(narrow.data(), DType::F32, {n});
  const Tensor bf16(bits.data(), DType::BF16, {n}), f32_back(back.data(), DType::F32, {n});
  ops.convert(f32, f64);
  for (size_t i = 0; i < wide.size(); i++) EXPECT_EQ(narrow[i], float(wide[i])) << i;
  ops.convert(bf16, f32);
  ops.convert(f32_back, bf16);
  // 1 + 2^-8 lies halfway between two bf16 values and rounds to the even one, 1; 1 + 1.5 x 2^-8 rounds up.
  const std::vector<float> expected = {1.0f, -3.25f, 1.0f, 1.0f + 0x1.0p-7f};
  EXPECT_EQ(back, expected);
  std::vector<float> short_buffer(2);
  EXPECT_THROW(ops.convert(Tensor(short_buffer.data(), DType::F32, {2}), f64), std::exception);
}

}  // namespace
}  // namespace tk
