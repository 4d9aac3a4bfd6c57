// The CPU reference ops in float64: every backward against central finite differences of a random
// scalar projection L = sum(out * R), the = / += semantics of every gradient output, and every forward
// against a plain transcription of its formula in ops.h. The CUDA kernels are held to these ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "model/rope_scaling.h"
#include "op_test_support.h"
#include "ops/cpu/cpu_ops.h"

namespace tk {
namespace {

using testing::Array;
using testing::Rng;
using testing::rel_error;
using Vec = std::vector<double>;

constexpr double kFiniteDiffStep = 1e-6;
constexpr double kGradTolerance = 1e-6;   // central differences in double: truncation ~1e-12, rounding ~1e-10
constexpr double kFormulaTolerance = 1e-12;
constexpr int kIgnore = -100;

double project(const Vec& out, const Vec& r) {
  double acc = 0;
  for (size_t i = 0; i < out.size(); i++) acc += out[i] * r[i];
  return acc;
}

// One input of a gradient check: its values (perturbed in place by the check), the buffer the backward
// writes its gradient to, and whether that buffer accumulates (+=, parameters) or is written (=).
struct GradInput {
  std::string name;
  Vec* value;
  Vec* grad;
  bool accumulates;
};

// Fills every gradient buffer with random values first: an accumulating gradient must then equal
// start + analytic, a written one must not depend on the start at all (else the finite differences
// disagree). A second backward must add the same increment again (+=) or repeat the result exactly (=).
// backward() runs the forward whose saved tensors it needs.
void check_gradients(const std::function<double()>& loss, const std::function<void()>& backward,
                     const std::vector<GradInput>& inputs, Rng& rng) {
  std::vector<Vec> start(inputs.size());
  for (size_t k = 0; k < inputs.size(); k++) {
    rng.fill_normal(*inputs[k].grad);
    start[k] = *inputs[k].grad;
  }
  backward();
  std::vector<Vec> analytic(inputs.size());
  for (size_t k = 0; k < inputs.size(); k++) {
    analytic[k] = *inputs[k].grad;
    if (inputs[k].accumulates)
      for (size_t i = 0; i < analytic[k].size(); i++) analytic[k][i] -= start[k][i];
  }

  for (size_t k = 0; k < inputs.size(); k++) {
    Vec& x = *inputs[k].value;
    Vec numeric(x.size());
    for (size_t i = 0; i < x.size(); i++) {
      const double saved = x[i];
      x[i] = saved + kFiniteDiffStep;
      const double up = loss();
      x[i] = saved - kFiniteDiffStep;
      const double down = loss();
      x[i] = saved;
      numeric[i] = (up - down) / (2 * kFiniteDiffStep);
    }
    EXPECT_LT(rel_error(analytic[k], numeric), kGradTolerance) << "gradient of " << inputs[k].name;
  }

  backward();
  for (size_t k = 0; k < inputs.size(); k++) {
    if (inputs[k].accumulates) {
      Vec twice(start[k]);
      for (size_t i = 0; i < twice.size(); i++) twice[i] += 2 * analytic[k][i];
      EXPECT_LT(rel_error(*inputs[k].grad, twice), 1e-12) << inputs[k].name << " must accumulate (+=)";
    } else {
      EXPECT_EQ(*inputs[k].grad, analytic[k]) << inputs[k].name << " must be written (=), bitwise the same";
    }
  }
}

// Segment ids of a [B, T] batch with two or three documents per row, and positions restarting at each.
void fill_documents(Array<int32_t>& segments, Array<int32_t>& positions, int B, int T, Rng& rng) {
  for (int b = 0; b < B; b++) {
    const int n_docs = 2 + b % 2;
    std::vector<int> cuts = {0};
    for (int k = 1; k < n_docs; k++) cuts.push_back(k * T / n_docs + rng.integer(0, 1));
    int doc = 0, start = 0;
    for (int t = 0; t < T; t++) {
      if (doc + 1 < n_docs && t == cuts[size_t(doc) + 1]) start = cuts[size_t(++doc)];
      segments[int64_t(b) * T + t] = 10 * b + doc;
      positions[int64_t(b) * T + t] = t - start;
    }
  }
}

// ---- embedding ----------------------------------------------------------------------------------

TEST(CpuOpsGrad, Embedding) {
  CpuOps<double> ops;
  Rng rng(1);
  const int V = 11, d = 5, N = 23;  // more tokens than vocabulary: rows repeat and must add up
  Array<double> table({V, d}), dtable({V, d}), out({N, d}), r({N, d});
  Array<int32_t> tokens({N});
  rng.fill_normal(table.v);
  rng.fill_normal(r.v);
  for (auto& t : tokens.v) t = rng.integer(0, V - 1);

  auto forward = [&] { ops.embedding_forward(out.t, tokens.t, table.t); };
  forward();
  for (int n = 0; n < N; n++)
    for (int i = 0; i < d; i++) ASSERT_EQ(out[n * d + i], table[tokens[n] * d + i]);

  check_gradients([&] { forward(); return project(out.v, r.v); },
                  [&] { ops.embedding_backward(dtable.t, tokens.t, r.t); },
                  {{"table", &table.v, &dtable.v, true}}, rng);
}

// ---- RMSNorm ------------------------------------------------------------------------------------

void rmsnorm_formula(Vec& y, Vec& rstd, const Vec& x, const Vec& w, int N, int d, double eps) {
  for (int n = 0; n < N; n++) {
    double ms = 0;
    for (int i = 0; i < d; i++) ms += x[n * d + i] * x[n * d + i] / d;
    rstd[n] = 1 / std::sqrt(ms + eps);
    for (int i = 0; i < d; i++) y[n * d + i] = x[n * d + i] * rstd[n] * w[i];
  }
}

TEST(CpuOpsGrad, RmsNorm) {
  CpuOps<double> ops;
  Rng rng(2);
  const int N = 9, d = 13;
  const float eps = 1e-5f;
  Array<double> x({N, d}), w({d}), y({N, d}), rstd({N}), r({N, d}), dx({N, d}), dw({d});
  rng.fill_normal(x.v);
  for (auto& e : w.v) e = 1 + 0.3 * rng.normal();
  rng.fill_normal(r.v);

  auto forward = [&] { ops.rmsnorm_forward(y.t, rstd.t, x.t, w.t, eps); };
  forward();
  Vec y_ref(y.v.size()), rstd_ref(N);
  rmsnorm_formula(y_ref, rstd_ref, x.v, w.v, N, d, eps);
  EXPECT_LT(rel_error(y.v, y_ref), kFormulaTolerance);
  EXPECT_LT(rel_error(rstd.v, rstd_ref), kFormulaTolerance);

  check_gradients([&] { forward(); return project(y.v, r.v); },
                  [&] { forward(); ops.rmsnorm_backward(dx.t, dw.t, r.t, Tensor(), x.t, rstd.t, w.t); },
                  {{"x", &x.v, &dx.v, false}, {"w", &w.v, &dw.v, true}}, rng);
}

// h_out = h_in + x feeds both the next residual (projection r_h) and the norm (projection r_y); the
// backward folds the residual's gradient in through dresidual.
TEST(CpuOpsGrad, ResidualRmsNorm) {
  CpuOps<double> ops;
  Rng rng(3);
  const int N = 7, d = 11;
  const float eps = 1e-6f;
  Array<double> h_in({N, d}), x({N, d}), w({d}), h_out({N, d}), y({N, d}), rstd({N});
  Array<double> r_h({N, d}), r_y({N, d}), dh({N, d}), dw({d});
  rng.fill_normal(h_in.v);
  rng.fill_normal(x.v);
  for (auto& e : w.v) e = 1 + 0.3 * rng.normal();
  rng.fill_normal(r_h.v);
  rng.fill_normal(r_y.v);

  auto forward = [&] { ops.residual_rmsnorm_forward(h_out.t, y.t, rstd.t, h_in.t, x.t, w.t, eps); };
  forward();
  Vec sum(h_in.v), y_ref(y.v.size()), rstd_ref(N);
  for (size_t i = 0; i < sum.size(); i++) sum[i] += x.v[i];
  rmsnorm_formula(y_ref, rstd_ref, sum, w.v, N, d, eps);
  EXPECT_EQ(h_out.v, sum);
  EXPECT_LT(rel_error(y.v, y_ref), kFormulaTolerance);

  check_gradients([&] { forward(); return project(h_out.v, r_h.v) + project(y.v, r_y.v); },
                  [&] { forward(); ops.rmsnorm_backward(dh.t, dw.t, r_y.t, r_h.t, h_out.t, rstd.t, w.t); },
                  {{"h_in", &h_in.v, &dh.v, false}, {"x", &x.v, &dh.v, false}, {"w", &w.v, &dw.v, true}}, rng);
}

// ---- linear -------------------------------------------------------------------------------------

TEST(CpuOpsGrad, Linear) {
  for (bool with_bias : {false, true}) {
    SCOPED_TRACE(with_bias ? "with bias" : "without bias");
    CpuOps<double> ops;
    Rng rng(4);
    const int N = 7, in = 11, out = 5;
    Array<double> x({N, in}), w({out, in}), bias({out}), y({N, out}), r({N, out});
    Array<double> dx({N, in}), dw({out, in}), dbias({out});
    rng.fill_normal(x.v);
    rng.fill_normal(w.v);
    rng.fill_normal(bias.v);
    rng.fill_normal(r.v);
    const Tensor b = with_bias ? bias.t : Tensor(), db = with_bias ? dbias.t : Tensor();

    ops.linear_forward(y.t, x.t, w.t, b);
    Vec y_ref(y.v.size());
    for (int n = 0; n < N; n++)
      for (int o = 0; o < out; o++) {
        double acc = with_bias ? bias[o] : 0.0;
        for (int i = 0; i < in; i++) acc += x[n * in + i] * w[o * in + i];
        y_ref[size_t(n * out + o)] = acc;
      }
    EXPECT_LT(rel_error(y.v, y_ref), kFormulaTolerance);

    std::vector<GradInput> inputs = {{"x", &x.v, &dx.v, false}, {"w", &w.v, &dw.v, true}};
    if (with_bias) inputs.push_back({"bias", &bias.v, &dbias.v, true});
    check_gradients([&] { ops.linear_forward(y.t, x.t, w.t, b); return project(y.v, r.v); },
                    [&] { ops.linear_backward(dx.t, dw.t, db, r.t, x.t, w.t); }, inputs, rng);

    // Each output is optional: dw alone gets the same increment as with the others.
    Vec before(dw.v);
    ops.linear_backward(Tensor(), dw.t, Tensor(), r.t, x.t, w.t);
    Array<double> dw_alone({out, in});
    ops.linear_backward(dx.t, dw_alone.t, db, r.t, x.t, w.t);
    for (size_t i = 0; i < before.size(); i++) before[i] += dw_alone.v[i];
    EXPECT_LT(rel_error(dw.v, before), 1e-14);
  }
}

// ---- q/k norm and RoPE --------------------------------------------------------------------------

// ops.h's formula, transcribed: optional per-head RMSNorm of q and k, then rotate-half RoPE with the
// frequencies given.
void qk_norm_rope_formula(Vec& out, const Vec& in, const Vec* qw, const Vec* kw, const std::vector<int32_t>& pos,
                          const AttnShape& s, const std::vector<double>& inv_freq, double eps) {
  const int hd = s.head_dim, W = s.qkv_width(), half = hd / 2;
  out = in;
  for (size_t n = 0; n < pos.size(); n++)
    for (int j = 0; j < s.n_heads + s.n_kv_heads; j++) {
      Vec u(in.begin() + int64_t(n) * W + j * hd, in.begin() + int64_t(n) * W + (j + 1) * hd);
      if (qw) {
        const Vec& w = j < s.n_heads ? *qw : *kw;
        double ms = 0;
        for (double e : u) ms += e * e / hd;
        for (int i = 0; i < hd; i++) u[size_t(i)] *= w[size_t(i)] / std::sqrt(ms + eps);
      }
      for (int i = 0; i < half; i++) {
        const double f = pos[n] * inv_freq[size_t(i)];
        out[n * W + j * hd + i] = u[size_t(i)] * std::cos(f) - u[size_t(i + half)] * std::sin(f);
        out[n * W + j * hd + i + half] = u[size_t(i + half)] * std::cos(f) + u[size_t(i)] * std::sin(f);
      }
    }
}

struct QkCase {
  int B, T, n_heads, n_kv_heads, head_dim;
  bool norm;
  RopeScaling scaling = {};
};

// Plain RoPE, then Llama 3's scaling at hd 8 and theta 500000, where each of its three bands holds a frequency
// (wavelengths 6.3 and 167 are kept, 4443 blended, 118,000 divided by the factor), and linear scaling.
TEST(CpuOpsGrad, QkNormRope) {
  const RopeScaling llama3 = RopeScaling::llama3(32.0, 1.0, 4.0, 8192), linear = RopeScaling::linear(4.0);
  for (const QkCase& c : {QkCase{2, 5, 6, 2, 8, true}, QkCase{1, 7, 4, 4, 6, false}, QkCase{2, 3, 4, 4, 6, true},
                          QkCase{1, 5, 6, 2, 8, false}, QkCase{2, 5, 6, 2, 8, true, llama3},
                          QkCase{1, 7, 4, 2, 8, false, llama3}, QkCase{1, 5, 4, 4, 6, true, linear}}) {
    SCOPED_TRACE(::testing::Message() << "Hq=" << c.n_heads << " Hkv=" << c.n_kv_heads << " hd=" << c.head_dim
                                      << " norm=" << c.norm << " scaling=" << c.scaling.describe());
    CpuOps<double> ops;
    Rng rng(5);
    const AttnShape s{c.B, c.T, c.n_heads, c.n_kv_heads, c.head_dim};
    const int N = c.B * c.T, W = s.qkv_width(), hd = c.head_dim;
    const double theta = c.scaling.type == RopeScaling::Type::None ? 10000.0 : 500000.0;
    const float eps = 1e-6f;
    const RopeSpec rope{rope_inv_freq(theta, hd, c.scaling)};
    std::vector<double> plain_freq;  // plain RoPE's frequencies, written out here rather than taken from the spec
    for (int i = 0; i < hd / 2; i++) plain_freq.push_back(std::pow(theta, -2.0 * i / hd));
    Array<double> qkv_in({N, W}), qkv_out({N, W}), rstd({N, c.n_heads + c.n_kv_heads}), r({N, W});
    Array<double> qw({hd}), kw({hd}), dqkv({N, W}), dqw({hd}), dkw({hd});
    Array<int32_t> pos({N});
    rng.fill_normal(qkv_in.v);
    rng.fill_normal(r.v);
    for (auto& e : qw.v) e = 1 + 0.3 * rng.normal();
    for (auto& e : kw.v) e = 1 + 0.3 * rng.normal();
    for (auto& p : pos.v) p = rng.integer(0, 3000);  // large angles too
    const Tensor q_w = c.norm ? qw.t : Tensor(), k_w = c.norm ? kw.t : Tensor();
    const Tensor dq_w = c.norm ? dqw.t : Tensor(), dk_w = c.norm ? dkw.t : Tensor();

    auto forward = [&] { ops.qk_norm_rope_forward(qkv_out.t, rstd.t, qkv_in.t, q_w, k_w, pos.t, s, rope, eps); };
    forward();
    Vec ref;
    const std::vector<double>& freq = c.scaling.type == RopeScaling::Type::None ? plain_freq : rope.inv_freq;
    qk_norm_rope_formula(ref, qkv_in.v, c.norm ? &qw.v : nullptr, c.norm ? &kw.v : nullptr, pos.v, s, freq, eps);
    EXPECT_LT(rel_error(qkv_out.v, ref), kFormulaTolerance);

    std::vector<GradInput> inputs = {{"qkv_in", &qkv_in.v, &dqkv.v, false}};
    if (c.norm) {
      inputs.push_back({"q_norm_w", &qw.v, &dqw.v, true});
      inputs.push_back({"k_norm_w", &kw.v, &dkw.v, true});
    }
    check_gradients([&] { forward(); return project(qkv_out.v, r.v); },
                    [&] {
                      forward();
                      ops.qk_norm_rope_backward(dqkv.t, dq_w, dk_w, r.t, qkv_in.t, rstd.t, q_w, k_w, pos.t, s,
                                                rope, eps);
                    },
                    inputs, rng);
  }
}

// RoPE makes q.k depend on positions only through their difference: a property independent of the
// formula's transcription above.
TEST(CpuOpsGrad, RopeDependsOnRelativePosition) {
  CpuOps<double> ops;
  Rng rng(6);
  const AttnShape s{1, 2, 1, 1, 8};
  const int W = s.qkv_width();
  Array<double> qkv({2, W}), a({2, W}), b({2, W});
  Array<int32_t> pos_a({2}), pos_b({2});
  rng.fill_normal(qkv.v);
  pos_a.v = {7, 3};
  pos_b.v = {1007, 1003};
  const RopeSpec rope = RopeSpec::plain(500000.0, 8);
  ops.qk_norm_rope_forward(a.t, Tensor(), qkv.t, Tensor(), Tensor(), pos_a.t, s, rope, 1e-6f);
  ops.qk_norm_rope_forward(b.t, Tensor(), qkv.t, Tensor(), Tensor(), pos_b.t, s, rope, 1e-6f);
  auto q_dot_k = [&](const Vec& x) {  // q of token 0 with k of token 1
    double acc = 0;
    for (int i = 0; i < 8; i++) acc += x[size_t(i)] * x[size_t(W + 8 + i)];
    return acc;
  };
  EXPECT_NEAR(q_dot_k(a.v), q_dot_k(b.v), 1e-9 * std::abs(q_dot_k(a.v)) + 1e-12);
  EXPECT_GT(std::abs(q_dot_k(a.v) - q_dot_k(qkv.v)), 1e-6);  // and the rotation did something
}

// ---- attention ----------------------------------------------------------------------------------

// Explicit scores with a -inf mask matrix, a row softmax and the product with V.
void attention_formula(Vec& out, Vec& lse, const Vec& qkv, const int32_t* seg, const AttnShape& s) {
  const int T = s.T, hd = s.head_dim, H3 = s.n_heads + 2 * s.n_kv_heads;
  auto at = [&](int b, int t, int j, int i) { return qkv[((size_t(b) * T + t) * H3 + j) * hd + i]; };
  out.assign(size_t(s.B) * T * s.n_heads * hd, 0.0);
  lse.assign(size_t(s.B) * s.n_heads * T, 0.0);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.n_heads; h++) {
      const int g = h / (s.n_heads / s.n_kv_heads);
      std::vector<Vec> p(size_t(T), Vec(size_t(T), 0.0));
      for (int t = 0; t < T; t++)
        for (int j = 0; j < T; j++) {
          const bool masked = j > t || (seg && seg[b * T + j] != seg[b * T + t]);
          double dot = 0;
          for (int i = 0; i < hd; i++) dot += at(b, t, h, i) * at(b, j, s.n_heads + g, i);
          p[size_t(t)][size_t(j)] = masked ? -std::numeric_limits<double>::infinity() : dot / std::sqrt(double(hd));
        }
      for (int t = 0; t < T; t++) {
        Vec& row = p[size_t(t)];
        const double m = *std::max_element(row.begin(), row.end());
        double z = 0;
        for (double& e : row) z += (e = std::exp(e - m));
        lse[(size_t(b) * s.n_heads + h) * T + t] = m + std::log(z);
        for (int j = 0; j < T; j++)
          for (int i = 0; i < hd; i++)
            out[((size_t(b) * T + t) * s.n_heads + h) * hd + i] +=
                row[size_t(j)] / z * at(b, j, s.n_heads + s.n_kv_heads + g, i);
      }
    }
}

struct AttnCase {
  int B, T, n_heads, n_kv_heads, head_dim;
  bool documents;
};

TEST(CpuOpsGrad, Attention) {
  for (const AttnCase& c : {AttnCase{2, 7, 6, 2, 6, true}, AttnCase{1, 9, 4, 4, 8, false},
                            AttnCase{2, 5, 4, 1, 8, true}, AttnCase{1, 6, 6, 2, 8, false}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " Hq=" << c.n_heads
                                      << " Hkv=" << c.n_kv_heads << " hd=" << c.head_dim << " docs=" << c.documents);
    CpuOps<double> ops;
    Rng rng(7);
    const AttnShape s{c.B, c.T, c.n_heads, c.n_kv_heads, c.head_dim};
    const int H3 = c.n_heads + 2 * c.n_kv_heads;
    Array<double> qkv({c.B, c.T, H3, c.head_dim}), dqkv({c.B, c.T, H3, c.head_dim});
    Array<double> out({c.B, c.T, c.n_heads, c.head_dim}), r({c.B, c.T, c.n_heads, c.head_dim});
    Array<double> lse({c.B, c.n_heads, c.T});
    Array<int32_t> seg({c.B, c.T}), pos({c.B, c.T});
    rng.fill_normal(qkv.v);
    rng.fill_normal(r.v);
    fill_documents(seg, pos, c.B, c.T, rng);
    const Tensor seg_t = c.documents ? seg.t : Tensor();

    auto forward = [&] { ops.attention_forward(out.t, lse.t, qkv.t, seg_t, s); };
    forward();
    Vec out_ref, lse_ref;
    attention_formula(out_ref, lse_ref, qkv.v, c.documents ? seg.v.data() : nullptr, s);
    EXPECT_LT(rel_error(out.v, out_ref), kFormulaTolerance);
    EXPECT_LT(rel_error(lse.v, lse_ref), kFormulaTolerance);

    check_gradients([&] { forward(); return project(out.v, r.v); },
                    [&] { forward(); ops.attention_backward(dqkv.t, r.t, qkv.t, out.t, lse.t, seg_t, s); },
                    {{"qkv", &qkv.v, &dqkv.v, false}}, rng);
  }
}

// ---- SwiGLU -------------------------------------------------------------------------------------

TEST(CpuOpsGrad, SwiGlu) {
  CpuOps<double> ops;
  Rng rng(8);
  const int N = 7, f = 9;
  Array<double> gate_up({N, 2 * f}), out({N, f}), r({N, f}), dgate_up({N, 2 * f});
  rng.fill_normal(gate_up.v, 2.0);
  rng.fill_normal(r.v);

  auto forward = [&] { ops.swiglu_forward(out.t, gate_up.t); };
  forward();
  Vec ref(out.v.size());
  for (int n = 0; n < N; n++)
    for (int i = 0; i < f; i++) {
      const double g = gate_up[n * 2 * f + i], u = gate_up[n * 2 * f + f + i];
      ref[size_t(n * f + i)] = g / (1 + std::exp(-g)) * u;
    }
  EXPECT_LT(rel_error(out.v, ref), kFormulaTolerance);

  check_gradients([&] { forward(); return project(out.v, r.v); },
                  [&] { ops.swiglu_backward(dgate_up.t, r.t, gate_up.t); },
                  {{"gate_up", &gate_up.v, &dgate_up.v, false}}, rng);
}

// ---- LM head + cross-entropy --------------------------------------------------------------------

// Random targets with every `ignore_every`-th one ignored; returns the count of the others.
int fill_targets(Array<int32_t>& targets, int V, int ignore_every, Rng& rng) {
  int valid = 0;
  for (int64_t n = 0; n < targets.size(); n++) {
    targets[n] = n % ignore_every == 2 ? kIgnore : rng.integer(0, V - 1);
    valid += targets[n] != kIgnore;
  }
  return valid;
}

TEST(CpuOpsGrad, LmHeadCrossEntropy) {
  CpuOps<double> ops;
  Rng rng(9);
  const int N = 13, V = 37, d = 7;
  Array<double> x({N, d}), w({V, d}), losses({N}), dx({N, d}), dw({V, d});
  Array<int32_t> targets({N});
  rng.fill_normal(x.v);
  rng.fill_normal(w.v, 0.5);
  const float scale = 1.0f / float(fill_targets(targets, V, 5, rng));

  auto loss = [&] {
    ops.lm_head_cross_entropy(losses.t, Tensor(), Tensor(), x.t, w.t, targets.t, scale, kIgnore);
    double sum = 0;
    for (double l : losses.v) sum += l;
    return double(scale) * sum;
  };
  check_gradients(loss, [&] { ops.lm_head_cross_entropy(losses.t, dx.t, dw.t, x.t, w.t, targets.t, scale, kIgnore); },
                  {{"x", &x.v, &dx.v, false}, {"w", &w.v, &dw.v, true}}, rng);
  for (int n = 0; n < N; n++)
    if (targets[n] == kIgnore) EXPECT_EQ(losses[n], 0.0);
}

// Against materialised logits and log_softmax, at sizes that cross the op's token blocks (2048) and
// vocabulary chunks (2048), so the streaming log-sum-exp and the per-chunk GEMMs are exercised.
TEST(CpuOpsGrad, LmHeadCrossEntropyMatchesMaterialisedLogits) {
  CpuOps<double> ops;
  Rng rng(10);
  const int N = 2048 + 53, V = 2 * 2048 + 77, d = 6;
  Array<double> x({N, d}), w({V, d}), losses({N}), dx({N, d}), dw({V, d});
  Array<int32_t> targets({N});
  rng.fill_normal(x.v);
  rng.fill_normal(w.v);
  for (int v : {2046, 2047, 2048, 4095, 4096, 4097}) w[int64_t(v) * d] += 3.0;  // large logits at chunk edges
  const float scale = 1.0f / float(fill_targets(targets, V, 7, rng));
  ops.lm_head_cross_entropy(losses.t, dx.t, dw.t, x.t, w.t, targets.t, scale, kIgnore);

  Vec loss_ref(N, 0.0), dx_ref(size_t(N) * d, 0.0), dw_ref(size_t(V) * d, 0.0), logits(V);
  for (int n = 0; n < N; n++) {
    for (int v = 0; v < V; v++) {
      logits[size_t(v)] = 0;
      for (int i = 0; i < d; i++) logits[size_t(v)] += x[n * d + i] * w[int64_t(v) * d + i];
    }
    if (targets[n] == kIgnore) continue;
    const double m = *std::max_element(logits.begin(), logits.end());
    double z = 0;
    for (double l : logits) z += std::exp(l - m);
    const double log_z = m + std::log(z);
    loss_ref[size_t(n)] = log_z - logits[size_t(targets[n])];  // -log_softmax at the target
    for (int v = 0; v < V; v++) {
      const double dlogit = scale * (std::exp(logits[size_t(v)] - log_z) - (v == targets[n] ? 1.0 : 0.0));
      for (int i = 0; i < d; i++) {
        dx_ref[size_t(n) * d + i] += dlogit * w[int64_t(v) * d + i];
        dw_ref[size_t(v) * d + i] += dlogit * x[n * d + i];
      }
    }
  }
  EXPECT_LT(rel_error(losses.v, loss_ref), kFormulaTolerance);
  EXPECT_LT(rel_error(dx.v, dx_ref), kFormulaTolerance);
  EXPECT_LT(rel_error(dw.v, dw_ref), kFormulaTolerance);

  // The loss alone, without gradients, is the same.
  Array<double> losses_only({N});
  ops.lm_head_cross_entropy(losses_only.t, Tensor(), Tensor(), x.t, w.t, targets.t, scale, kIgnore);
  EXPECT_EQ(losses_only.v, losses.v);
}

// ---- optimizer ----------------------------------------------------------------------------------

TEST(CpuOpsGrad, GradNorm) {
  CpuOps<double> ops;
  Rng rng(11);
  Array<double> g({200003});  // several of the reduction's blocks, the last one partial
  rng.fill_normal(g.v);
  double sum = 0;
  for (double e : g.v) sum += e * e;
  EXPECT_NEAR(ops.grad_norm(g.t), std::sqrt(sum), 1e-12 * std::sqrt(sum));
  EXPECT_EQ(ops.grad_norm(g.t), ops.grad_norm(g.t));
}

// One AdamW step by hand: bias correction at step 3, grad_scale, decay on decay segments only, elements
// outside every segment untouched; with and without master weights.
TEST(CpuOpsGrad, AdamWMatchesHandFormula) {
  for (bool with_master : {false, true}) {
    SCOPED_TRACE(with_master ? "master weights" : "no master weights");
    CpuOps<double> ops;
    Rng rng(12);
    const int P = 50;
    Array<double> params({P}), master({P}), grads({P}), m({P}), v({P});
    rng.fill_normal(params.v);
    rng.fill_normal(grads.v);
    rng.fill_normal(m.v, 0.1);
    for (auto& e : v.v) e = rng.uniform(0.01, 0.5);
    if (with_master) {
      master.v = params.v;
      for (auto& e : params.v) e += 1000;  // must be overwritten from the master copy
    }
    const std::vector<ParamSegment> segments = {{0, 20, true}, {20, 10, false}, {35, 15, true}};
    AdamWConfig c;
    c.lr = 0.01f, c.beta1 = 0.9f, c.beta2 = 0.95f, c.eps = 1e-8f, c.weight_decay = 0.1f, c.step = 3, c.grad_scale = 0.5f;

    const Vec p0 = with_master ? master.v : params.v, params0 = params.v, g0 = grads.v, m0 = m.v, v0 = v.v;
    ops.adamw_update(params.t, with_master ? master.t : Tensor(), grads.t, m.t, v.t, Tensor(), Tensor(), segments, c);

    const double b1 = c.beta1, b2 = c.beta2;
    for (int i = 0; i < P; i++) {
      const bool in_segment = i < 30 || i >= 35, decay = i < 20 || i >= 35;
      double p = p0[size_t(i)], mi = m0[size_t(i)], vi = v0[size_t(i)];
      if (in_segment) {
        const double g = g0[size_t(i)] * double(c.grad_scale);
        mi = b1 * mi + (1 - b1) * g;
        vi = b2 * vi + (1 - b2) * g * g;
        const double mh = mi / (1 - b1 * b1 * b1), vh = vi / (1 - b2 * b2 * b2);
        p -= double(c.lr) * (mh / (std::sqrt(vh) + double(c.eps)) + (decay ? double(c.weight_decay) * p : 0.0));
      }
      const double p_out = with_master ? master[i] : params[i];
      EXPECT_NEAR(p_out, p, 1e-14 * (1 + std::abs(p))) << "element " << i;
      EXPECT_NEAR(m[i], mi, 1e-15) << "element " << i;
      EXPECT_NEAR(v[i], vi, 1e-15) << "element " << i;
      if (with_master) EXPECT_EQ(params[i], in_segment ? master[i] : params0[size_t(i)]) << "element " << i;
    }
    EXPECT_EQ(grads.v, g0);
  }
}

// ---- aliasing allowed by ops.h, and errors ----------------------------------------------------

TEST(CpuOpsGrad, InPlaceVariantsMatch) {
  CpuOps<double> ops;
  Rng rng(13);
  const int N = 6, d = 10;
  Array<double> h({N, d}), x({N, d}), w({d}), h_out({N, d}), y({N, d}), y2({N, d}), rstd({N});
  rng.fill_normal(h.v);
  rng.fill_normal(x.v);
  rng.fill_normal(w.v);
  ops.residual_rmsnorm_forward(h_out.t, y.t, rstd.t, h.t, x.t, w.t, 1e-5f);
  ops.residual_rmsnorm_forward(h.t, y2.t, rstd.t, h.t, x.t, w.t, 1e-5f);  // h_out aliases h_in
  EXPECT_EQ(h.v, h_out.v);
  EXPECT_EQ(y.v, y2.v);

  Array<double> dy({N, d}), dres({N, d}), dh({N, d}), dw({d});
  rng.fill_normal(dy.v);
  rng.fill_normal(dres.v);
  ops.rmsnorm_backward(dh.t, dw.t, dy.t, dres.t, h.t, rstd.t, w.t);
  ops.rmsnorm_backward(dres.t, dw.t, dy.t, dres.t, h.t, rstd.t, w.t);  // dresidual aliases dh
  EXPECT_EQ(dres.v, dh.v);

  const AttnShape s{1, N, 4, 2, 6};
  const int W = s.qkv_width();
  Array<double> qkv({N, W}), out({N, W}), qk_rstd({N, 6}), qw({6}), kw({6}), dq({6}), dk({6});
  Array<int32_t> pos({N});
  rng.fill_normal(qkv.v);
  rng.fill_normal(qw.v);
  rng.fill_normal(kw.v);
  for (int n = 0; n < N; n++) pos[n] = 3 * n + 1;
  ops.qk_norm_rope_forward(out.t, qk_rstd.t, qkv.t, qw.t, kw.t, pos.t, s, RopeSpec::plain(1e4, 6), 1e-6f);
  Array<double> copy({N, W});
  copy.v = qkv.v;
  ops.qk_norm_rope_forward(copy.t, qk_rstd.t, copy.t, qw.t, kw.t, pos.t, s, RopeSpec::plain(1e4, 6), 1e-6f);
  EXPECT_EQ(copy.v, out.v);

  Array<double> dout({N, W}), din({N, W});
  rng.fill_normal(dout.v);
  ops.qk_norm_rope_backward(din.t, dq.t, dk.t, dout.t, qkv.t, qk_rstd.t, qw.t, kw.t, pos.t, s, RopeSpec::plain(1e4, 6), 1e-6f);
  ops.qk_norm_rope_backward(dout.t, dq.t, dk.t, dout.t, qkv.t, qk_rstd.t, qw.t, kw.t, pos.t, s, RopeSpec::plain(1e4, 6), 1e-6f);
  EXPECT_EQ(dout.v, din.v);
}

TEST(CpuOpsGrad, BadInputsAreClearErrors) {
  CpuOps<double> ops;
  Array<double> x({4, 3}), w({5, 3}), y({4, 6}), table({5, 3}), out({4, 3});
  Array<float> wrong_dtype({4, 3});
  Array<int32_t> tokens({4});
  tokens.v = {0, 1, 5, 2};
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { ops.linear_forward(y.t, x.t, w.t, Tensor()); }).find("y is f64[4, 6] but must be f64[4, 5]"),
            std::string::npos);
  EXPECT_NE(message([&] { ops.embedding_forward(out.t, tokens.t, table.t); }).find("token id 5 at position 2"),
            std::string::npos);
  EXPECT_NE(message([&] { ops.swiglu_forward(wrong_dtype.t, y.t); }).find("out is f32[4, 3]"), std::string::npos);
  AttnShape bad{1, 4, 3, 2, 4};
  EXPECT_NE(message([&] { ops.attention_forward(out.t, out.t, x.t, Tensor(), bad); }).find("cannot be shared evenly"),
            std::string::npos);
  EXPECT_THROW(make_cpu_ops(DType::BF16), Error);
}

}  // namespace
}  // namespace tk
