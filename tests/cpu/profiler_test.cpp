// The profile: each op's FLOP and byte count against hand arithmetic on small shapes, a model's
// matmul FLOPs against docs/design.md's count, the step arithmetic (ops + gaps + data wait + communication +
// unexplained = step), a tiny CPU profile's profile.json and trace.json read back (and with a communicator of one
// rank), the advice a slow data reader and a one-row micro-batch get, and a two-rank report's communication section
// and advice from fixed numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "core/fs.h"
#include "data/prepare.h"
#include "data_testing.h"
#include "dist/mpi_communicator.h"
#include "model/model.h"
#include "model_testing.h"
#include "ops/cpu/cpu_ops.h"
#include "profile/profile_advice.h"
#include "profile/profile_report.h"
#include "profile/profile_run.h"
#include "profile/profiling_ops.h"
#include "train/run_log.h"

namespace tk {
namespace {

using testing::TempDir;

// ---- op costs ---------------------------------------------------------------------------------------

// Small f32 tensors on the CPU backend, zeroed, kept until the end of the test.
class Tensors {
 public:
  explicit Tensors(Ops& ops) : ops_(ops) {}
  ~Tensors() {
    for (void* p : held_) ops_.release(p);
  }
  Tensor make(DType t, std::initializer_list<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    void* p = ops_.allocate(size_t(n) * dtype_size(t));
    held_.push_back(p);
    Tensor x(p, t, dims);
    ops_.zero(x);
    return x;
  }
  Tensor f32(std::initializer_list<int64_t> dims) { return make(DType::F32, dims); }
  Tensor i32(std::initializer_list<int64_t> dims) { return make(DType::I32, dims); }

 private:
  Ops& ops_;
  std::vector<void*> held_;
};

struct CostCase {
  ProfilingOps ops{make_cpu_ops(DType::F32)};
  Tensors t{ops.inner()};
  // The record of the last op called.
  const OpRecord& last() const { return ops.records().back(); }
};

// N = 6 tokens (B = 2, T = 3), d = 8, f32: 4 bytes per value.
TEST(OpCost, LinearCountsGemmFlopsAndEachTensorOnce) {
  CostCase c;
  Tensor x = c.t.f32({6, 8}), w = c.t.f32({12, 8}), b = c.t.f32({12}), y = c.t.f32({6, 12});
  c.ops.linear_forward(y, x, w, b);
  EXPECT_STREQ(c.last().name, "linear_forward");
  EXPECT_EQ(c.last().category, OpCategory::Matmul);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 2.0 * 6 * 8 * 12);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (48 + 96 + 12 + 72));

  Tensor dx = c.t.f32({6, 8}), dw = c.t.f32({12, 8}), db = c.t.f32({12}), dy = c.t.f32({6, 12});
  c.ops.linear_backward(dx, dw, db, dy, x, w);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 2 * 2.0 * 6 * 8 * 12);
  // dy read; dbias and dw accumulated (read + written); w read and dx written for dx; x read for dw.
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (72 + 2 * 12 + 96 + 48 + 48 + 2 * 96));
  c.ops.linear_backward(Tensor(), dw, Tensor(), dy, x, w);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 2.0 * 6 * 8 * 12);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (72 + 48 + 2 * 96));
}

TEST(OpCost, EmbeddingTouchesOnlyTheTokensRows) {
  CostCase c;
  Tensor tokens = c.t.i32({6}), table = c.t.f32({10, 8}), out = c.t.f32({6, 8});
  c.ops.embedding_forward(out, tokens, table);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 0);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (6 + 48 + 48));
  c.ops.embedding_backward(table, tokens, out);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 48);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (6 + 48 + 2 * 48));
  EXPECT_EQ(c.last().category, OpCategory::Embedding);
}

TEST(OpCost, NormsCountPerElement) {
  CostCase c;
  Tensor x = c.t.f32({6, 8}), y = c.t.f32({6, 8}), h = c.t.f32({6, 8}), rstd = c.t.f32({6}), w = c.t.f32({8});
  c.ops.upload_f32(w, std::vector<float>(8, 1.0f).data());
  c.ops.rmsnorm_forward(y, rstd, x, w, 1e-5f);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 4.0 * 48);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (48 + 8 + 48 + 6));
  c.ops.residual_rmsnorm_forward(h, y, rstd, h, x, w, 1e-5f);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 5.0 * 48);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (48 + 48 + 8 + 48 + 48 + 6));
  Tensor dh = c.t.f32({6, 8}), dw = c.t.f32({8});
  c.ops.rmsnorm_backward(dh, dw, y, dh, h, rstd, w);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 11.0 * 48);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (48 + 48 + 48 + 6 + 8 + 48 + 2 * 8));
  c.ops.rmsnorm_backward(dh, dw, y, Tensor(), h, rstd, w);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 10.0 * 48);
  EXPECT_EQ(c.last().category, OpCategory::Norm);
}

// Hq = 2, Hkv = 1, hd = 4: a qkv row holds 16 values, of which 12 are q and k.
TEST(OpCost, RopeAndAttention) {
  CostCase c;
  const AttnShape s{2, 3, 2, 1, 4};
  Tensor qkv = c.t.f32({6, 16}), pos = c.t.i32({6});
  c.ops.qk_norm_rope_forward(qkv, Tensor(), qkv, Tensor(), Tensor(), pos, s, RopeSpec::plain(1e4, 4), 1e-6f);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 3.0 * 72);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (96 + 96 + 6));
  Tensor qn = c.t.f32({4}), kn = c.t.f32({4}), rstd = c.t.f32({6, 3}), out = c.t.f32({6, 16});
  c.ops.qk_norm_rope_forward(out, rstd, qkv, qn, kn, pos, s, RopeSpec::plain(1e4, 4), 1e-6f);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 7.0 * 72);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (96 + 96 + 6 + 4 + 4 + 18));
  EXPECT_EQ(c.last().category, OpCategory::Rope);

  Tensor q4 = c.t.f32({2, 3, 4, 4}), att = c.t.f32({2, 3, 2, 4}), lse = c.t.f32({2, 2, 3});
  c.ops.attention_forward(att, lse, q4, Tensor(), s);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 2.0 * 2 * 3 * 3 * 2 * 4);  // 2 * B * T^2 * Hq * hd
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (96 + 48 + 12));
  Tensor dq4 = c.t.f32({2, 3, 4, 4});
  c.ops.attention_backward(dq4, att, q4, att, lse, Tensor(), s);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 4.0 * 2 * 3 * 3 * 2 * 4);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (48 + 96 + 48 + 12 + 96));
  EXPECT_EQ(c.last().category, OpCategory::Attention);
}

TEST(OpCost, SwigluLossAndOptimizer) {
  CostCase c;
  Tensor gu = c.t.f32({6, 10}), act = c.t.f32({6, 5});
  c.ops.swiglu_forward(act, gu);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 5.0 * 30);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (60 + 30));
  c.ops.swiglu_backward(gu, act, gu);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 11.0 * 30);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (30 + 60 + 60));

  Tensor losses = c.t.f32({6}), dx = c.t.f32({6, 8}), dw = c.t.f32({10, 8}), x = c.t.f32({6, 8}),
         w = c.t.f32({10, 8}), targets = c.t.i32({6});
  c.ops.lm_head_cross_entropy(losses, dx, dw, x, w, targets, 1.0f, -1);
  EXPECT_EQ(c.last().category, OpCategory::Loss);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 3 * 2.0 * 6 * 8 * 10);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 4.0 * (48 + 80 + 6 + 6 + 48 + 2 * 80));
  c.ops.lm_head_cross_entropy(losses, Tensor(), Tensor(), x, w, targets, 1.0f, -1);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 2.0 * 6 * 8 * 10);

  Tensor p = c.t.f32({100}), g = c.t.f32({100}), m = c.t.f32({100}), v = c.t.f32({100});
  EXPECT_EQ(c.ops.grad_norm(g), 0.0);  // the value comes back through the decorator
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 200);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 400);
  c.ops.adamw_update(p, Tensor(), g, m, v, Tensor(), Tensor(), {{0, 60, true}, {60, 40, false}}, AdamWConfig{});
  EXPECT_EQ(c.last().category, OpCategory::Optimizer);
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 17.0 * 100);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 100.0 * (4 + 8 + 8 + 8));  // grad; m, v, param read + written

  c.ops.zero(g);
  EXPECT_EQ(c.last().category, OpCategory::Memory);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 400);
  int32_t host[6] = {};
  c.ops.upload(targets.data, host, sizeof host);
  EXPECT_DOUBLE_EQ(c.last().cost.bytes, 2.0 * sizeof host);
}

// SwiGLU and the linear it feeds, on a backend that does not fuse them (the CPU's): timed as the two ops they
// are, with those ops' costs (a fusing backend's single row shows in the GPU's profile: bench/gpu.sh profile).
TEST(OpCost, SwigluLinearIsTimedAsItsTwoOpsWhereTheBackendDoesNotFuseThem) {
  CostCase c;
  EXPECT_FALSE(c.ops.fuses_swiglu_linear());
  Tensor gu = c.t.f32({6, 10}), act = c.t.f32({6, 5}), w = c.t.f32({8, 5}), y = c.t.f32({6, 8});
  const size_t before = c.ops.records().size();
  c.ops.swiglu_linear_forward(y, act, gu, w);
  ASSERT_EQ(c.ops.records().size(), before + 2);
  EXPECT_STREQ(c.ops.records()[before].name, "swiglu_forward");
  EXPECT_STREQ(c.last().name, "linear_forward");
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 2.0 * 6 * 5 * 8);
  Tensor dx = c.t.f32({6, 5}), dwg = c.t.f32({10, 5}), x = c.t.f32({6, 5}), dgu = c.t.f32({6, 10}),
         wg = c.t.f32({10, 5});
  c.ops.swiglu_linear_backward(dx, dwg, dgu, act, gu, x, wg);
  ASSERT_EQ(c.ops.records().size(), before + 4);
  EXPECT_STREQ(c.ops.records()[before + 2].name, "swiglu_backward");
  EXPECT_STREQ(c.last().name, "linear_backward");
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 2 * 2.0 * 6 * 5 * 10);
}

// The norm and the linear it feeds, on a backend that does not fuse them: the norm's op (plain or with the residual
// add) and linear_forward, each with its own cost.
TEST(OpCost, RmsnormLinearIsTimedAsItsTwoOpsWhereTheBackendDoesNotFuseThem) {
  CostCase c;
  EXPECT_FALSE(c.ops.fuses_rmsnorm_linear());
  Tensor x = c.t.f32({6, 8}), xn = c.t.f32({6, 8}), rstd = c.t.f32({6}), nw = c.t.f32({8}), w = c.t.f32({4, 8}),
         y = c.t.f32({6, 4}), h_in = c.t.f32({6, 8}), h_out = c.t.f32({6, 8});
  const size_t before = c.ops.records().size();
  c.ops.rmsnorm_linear_forward(y, xn, rstd, Tensor(), Tensor(), x, nw, w, Tensor(), 1e-6f,
                               Ops::NormOutput::linear_backward_only);
  ASSERT_EQ(c.ops.records().size(), before + 2);
  EXPECT_STREQ(c.ops.records()[before].name, "rmsnorm_forward");
  EXPECT_STREQ(c.last().name, "linear_forward");
  EXPECT_DOUBLE_EQ(c.last().cost.flops, 2.0 * 6 * 8 * 4);
  c.ops.rmsnorm_linear_forward(y, xn, rstd, h_out, h_in, x, nw, w, Tensor(), 1e-6f, Ops::NormOutput::values);
  ASSERT_EQ(c.ops.records().size(), before + 4);
  EXPECT_STREQ(c.ops.records()[before + 2].name, "residual_rmsnorm_forward");
  EXPECT_STREQ(c.last().name, "linear_forward");
}

TEST(OpCost, RecordsNestTheirMarksInCallOrder) {
  CostCase c;
  Tensor a = c.t.f32({64, 64}), b = c.t.f32({64, 64}), y = c.t.f32({64, 64}), act = c.t.f32({64, 32});
  c.ops.clear_records();
  c.ops.linear_forward(y, a, b, Tensor());
  c.ops.swiglu_forward(act, y);
  ASSERT_EQ(c.ops.records().size(), 2u);
  const OpRecord &r0 = c.ops.records()[0], &r1 = c.ops.records()[1];
  EXPECT_GE(c.ops.timing_elapsed_ms(r0.begin, r0.end), 0.0);
  EXPECT_GE(c.ops.timing_elapsed_ms(r0.end, r1.begin), 0.0);
  EXPECT_GE(c.ops.timing_elapsed_ms(r1.begin, r1.end), 0.0);
  EXPECT_EQ(r0.in.describe(), "f32[64, 64]");
  EXPECT_EQ(r0.in.data, nullptr);  // records keep shapes, not pointers
}

// What orders work against the backend's queues (the NCCL communicator) reaches the backend beneath the decorator.
TEST(OpCost, TheDecoratorsUnderlyingBackendIsTheOneItWraps) {
  CostCase c;
  EXPECT_EQ(&c.ops.underlying(), &c.ops.inner());
  EXPECT_EQ(&c.ops.inner().underlying(), &c.ops.inner());
}

// The matmul, attention and LM head FLOPs of one forward + backward are docs/design.md's model FLOPs.
TEST(OpCost, AModelsMatmulFlopsAreTheModelFlopsOfMfu) {
  for (bool qk_norm : {false, true}) {
    ModelConfig cfg = testing::tiny_llama_config();
    cfg.qk_norm = qk_norm;
    if (qk_norm) cfg.arch = Arch::Qwen3;
    const int B = 2, T = 16;
    auto owned = std::make_unique<ProfilingOps>(make_cpu_ops(DType::F32));
    ProfilingOps& ops = *owned;
    Model model(cfg, ops, ModelOptions{B, T, false});
    model.init_params(1);
    std::vector<int32_t> tokens(size_t(B) * (T + 1));
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = int32_t(i * 7 % 257);
    const OwnedBatch batch(B, T, tokens);
    ops.clear_records();
    model.forward_backward(batch.batch(), 1.0f / (B * T));
    double flops = 0;
    for (const OpRecord& r : ops.records())
      if (r.category == OpCategory::Matmul || r.category == OpCategory::Attention || r.category == OpCategory::Loss)
        flops += r.cost.flops;
    EXPECT_DOUBLE_EQ(flops, cfg.flops_per_token(T) * B * T) << "qk_norm " << qk_norm;
  }
}

// ---- the step's arithmetic --------------------------------------------------------------------------

TraceSpan span(const char* name, OpCategory c, double start, double dur, double flops, double bytes) {
  TraceSpan s;
  s.name = name;
  s.category = c;
  s.start_ms = start;
  s.dur_ms = dur;
  s.flops = flops;
  s.bytes = bytes;
  return s;
}

TEST(ProfileSummary, OpsGapsDataAndUnexplainedAddUpToTheStep) {
  MeasuredStep a;  // the timeline is longer than the host's step: no unexplained time
  a.wall_ms = 10;
  a.timeline_ms = 10.2;
  a.data_wait_ms = 1;
  a.ops = {span("linear_forward", OpCategory::Matmul, 1, 3, 3e9, 1e6),
           span("swiglu_forward", OpCategory::Activation, 5, 3, 1e6, 4e8)};
  MeasuredStep b;  // the host's step is 0.5 ms longer than the timeline
  b.wall_ms = 12;
  b.timeline_ms = 11.5;
  b.data_wait_ms = 0;
  b.ops = {span("linear_forward", OpCategory::Matmul, 0, 5, 3e9, 1e6),
           span("swiglu_forward", OpCategory::Activation, 6, 4, 1e6, 4e8)};
  const Ceilings ceil{1e12, 1e11, "test"};  // ridge: 10 FLOPs per byte

  const std::vector<OpRow> rows = summarize_ops({a, b}, 11, ceil);
  ASSERT_EQ(rows.size(), 2u);
  const OpRow &lin = rows[0], &glu = rows[1];  // 4 ms per step, then 3.5
  EXPECT_EQ(lin.name, "linear_forward");
  EXPECT_EQ(glu.name, "swiglu_forward");
  EXPECT_DOUBLE_EQ(lin.calls, 1);
  EXPECT_DOUBLE_EQ(lin.ms, 4);
  EXPECT_DOUBLE_EQ(lin.share, 4.0 / 11);
  EXPECT_DOUBLE_EQ(lin.flops, 3e9);
  EXPECT_DOUBLE_EQ(lin.tflops, 3e9 / 4e-3 / 1e12);
  EXPECT_TRUE(lin.compute_bound);  // 3000 FLOPs per byte
  EXPECT_DOUBLE_EQ(lin.ceiling_share, 3e9 / 4e-3 / 1e12);
  EXPECT_FALSE(lin.above_ceiling);
  EXPECT_FALSE(glu.compute_bound);  // 0.0025 FLOPs per byte
  EXPECT_DOUBLE_EQ(glu.ms, 3.5);
  EXPECT_DOUBLE_EQ(glu.gbps, 4e8 / 3.5e-3 / 1e9);
  // 114 GB/s against a copy ceiling of 100: counted at 100% and marked, its own rate as measured.
  EXPECT_DOUBLE_EQ(glu.ceiling_share, 1);
  EXPECT_TRUE(glu.above_ceiling);
  ProfileReport shown;
  shown.backend = "cpu";
  shown.ops = rows;
  const std::string text = format_profile(shown);
  EXPECT_NE(text.find("  100.0%* memory"), std::string::npos) << text;
  EXPECT_NE(text.find("* faster than the ceiling measured, counted at 100%"), std::string::npos) << text;
  EXPECT_EQ(profile_json(shown)["ops"][1]["ceiling_share"], 1.0);
  EXPECT_EQ(profile_json(shown)["ops"][1]["above_ceiling"], true);

  const StepTotals t = summarize_step({a, b}, 0, rows);
  EXPECT_DOUBLE_EQ(t.step_ms, 11);
  EXPECT_DOUBLE_EQ(t.kernels_ms, (6 + 9) / 2.0);
  EXPECT_DOUBLE_EQ(t.data_wait_ms, 0.5);
  EXPECT_DOUBLE_EQ(t.gaps_ms, (3 + 2.5) / 2.0);  // 10 - 6 - 1 and 11.5 - 9
  EXPECT_DOUBLE_EQ(t.unexplained_ms, 0.25);
  EXPECT_NEAR(t.kernels_ms + t.gaps_ms + t.data_wait_ms + t.unexplained_ms, t.step_ms, 1e-12);
  EXPECT_DOUBLE_EQ(t.recompute_ms, 0);
  // Recomputed FLOPs are costed at the matmuls' measured rate: 3e9 FLOPs in 4 ms.
  EXPECT_DOUBLE_EQ(summarize_step({a, b}, 1.5e9, rows).recompute_ms, 2);
}

// Communication the step waited for runs between ops: it is its own part of the step, not a gap; every rank's
// figures are averaged per step.
TEST(ProfileSummary, ExposedCommunicationIsItsOwnPartOfTheStep) {
  MeasuredStep a;
  a.wall_ms = 10;
  a.timeline_ms = 10;
  a.data_wait_ms = 1;
  a.communication_ms = 2;
  a.ops = {span("linear_forward", OpCategory::Matmul, 0, 6, 3e9, 1e6)};
  // Each rank's comm, exposed, host gathers and data wait in seconds, and its collectives.
  a.communication = {{RankStepTimes{0.003, 0.0015, 0.0005, 0.001, 10},
                      RankStepTimes{0.002, 0.001, 0.0004, 0.004, 10}}};
  MeasuredStep b = a;
  b.timeline_ms = 9;  // 0.5 ms of gaps on the timeline, 1 ms more on the host clock
  b.data_wait_ms = 0;
  b.communication_ms = 2.5;
  b.communication = {{RankStepTimes{0.005, 0.002, 0.0005, 0, 11}, RankStepTimes{0.004, 0.001, 0.0004, 0.002, 10}}};
  const StepTotals t = summarize_step({a, b}, 0, summarize_ops({a, b}, 10, Ceilings{1e12, 1e11, "test"}));
  EXPECT_DOUBLE_EQ(t.communication_ms, 2.25);
  EXPECT_DOUBLE_EQ(t.gaps_ms, (1 + 0.5) / 2);  // 10 - 6 - 1 - 2 and 9 - 6 - 2.5
  EXPECT_DOUBLE_EQ(t.unexplained_ms, 0.5);
  EXPECT_NEAR(t.kernels_ms + t.gaps_ms + t.data_wait_ms + t.communication_ms + t.unexplained_ms, t.step_ms, 1e-12);

  const StepCommunication mean = summarize_communication({a, b});
  ASSERT_EQ(mean.ranks.size(), 2u);
  EXPECT_DOUBLE_EQ(mean.ranks[0].comm_s, 0.004);
  EXPECT_DOUBLE_EQ(mean.ranks[0].comm_exposed_s, 0.00175);
  EXPECT_DOUBLE_EQ(mean.ranks[1].data_wait_s, 0.003);
  EXPECT_EQ(mean.ranks[0].collectives, 11);  // 10.5, to the nearest
  EXPECT_EQ(mean.ranks[1].collectives, 10);
}

// ---- whole profiles of a tiny model ------------------------------------------------------------------

class TinyProfile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(7);
    for (int d = 0; d < 24; d++)
      testing::write_text(dir_.path("text/doc" + std::to_string(d) + ".txt"), testing::random_document(rng, 150));
    PrepareOptions p;
    p.inputs = {dir_.path("text")};
    p.out_dir = dir_.path("data");
    p.val_fraction = 0.1;
    p.threads = 1;
    p.progress = false;
    prepare(testing::ByteTokenizer(), p);
    fs::write_file_atomic(dir_.path("model.json"), testing::tiny_llama_config().to_hf_json().dump(2));
  }

  ProfileOptions options(int batch, int seq) const {
    ProfileOptions o;
    o.train.model = dir_.path("model.json");
    o.train.vocab_size = testing::tiny_llama_config().vocab_size;  // the data's, unpadded: the FLOPs below are its
    o.train.data = dir_.path("data");
    o.train.out = dir_.path("profile");
    o.train.device = "cpu";
    o.train.batch = batch;
    o.train.seq = seq;
    o.warmup_steps = 1;
    o.measure_steps = 3;
    o.print_progress = false;
    // Ceilings given, not measured (the test then does not depend on this machine's speed): a GEMM
    // ceiling far above what 32-row matmuls reach on any CPU.
    o.ceilings = Ceilings{2e12, 20e9, "test"};
    return o;
  }

  static bool has_advice(const ProfileReport& r, const std::string& words) {
    for (const Advice& a : r.advice)
      if (a.title.find(words) != std::string::npos) return true;
    return false;
  }

  TempDir dir_;
};

// Sets an environment variable for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST_F(TinyProfile, WritesProfileAndTraceThatAccountForTheStep) {
  ProfileOptions o = options(4, 32);
  o.ceilings.reset();  // measured now, on the CPU
  o.train.peak_tflops = 0.01;
  const ProfileReport r = run_profile(o).value();
  write_profile(r, o.train.out);

  const nlohmann::json p = nlohmann::json::parse(fs::read_file(dir_.path("profile/profile.json")));
  EXPECT_EQ(p["backend"], "cpu");
  EXPECT_EQ(p["device"], "cpu");
  EXPECT_EQ(p["steps"], 3);
  EXPECT_EQ(p["tokens_per_step"], 4 * 32);
  EXPECT_EQ(p["ceilings"]["source"], "measured now");
  EXPECT_FALSE(p.contains("clocks"));  // read on a GPU only
  EXPECT_GT(p["ceilings"]["matmul_tflops"].get<double>(), 0);
  EXPECT_GT(p["ceilings"]["copy_gbps"].get<double>(), 0);
  const double step = p["step_ms"].get<double>();
  ASSERT_GT(step, 0);
  EXPECT_NEAR(p["tokens_per_s"].get<double>(), 128 / (step * 1e-3), 1e-6 * p["tokens_per_s"].get<double>());
  // MFU: the trainer's own arithmetic over the measured steps.
  EXPECT_NEAR(p["mfu"].get<double>(), testing::tiny_llama_config().flops_per_token(32) * p["tokens_per_s"].get<double>() / 1e10, 1e-9);
  EXPECT_DOUBLE_EQ(p["hfu"].get<double>(), p["mfu"].get<double>());  // nothing is recomputed
  EXPECT_DOUBLE_EQ(p["peak_tflops"].get<double>(), 0.01);

  const std::set<std::string> categories = {"matmul", "attention", "norm", "rope", "activation", "embedding",
                                            "loss", "optimizer", "memory", "other"};
  double ops_ms = 0, shares = 0, prev = 1e30;
  std::set<std::string> names;
  for (const auto& op : p["ops"]) {
    names.insert(op["name"]);
    EXPECT_TRUE(categories.count(op["category"])) << op["category"];
    EXPECT_TRUE(op["bound"] == "compute" || op["bound"] == "memory");
    EXPECT_LE(op["ms"].get<double>(), prev);  // sorted by time
    prev = op["ms"].get<double>();
    ops_ms += prev;
    shares += op["share"].get<double>();
    EXPECT_GT(op["calls"].get<double>(), 0);
    EXPECT_GE(op["ceiling_share"].get<double>(), 0);
  }
  for (const char* op : {"linear_forward", "linear_backward", "attention_forward", "attention_backward",
                         "lm_head_cross_entropy", "adamw_update", "grad_norm", "embedding_forward"})
    EXPECT_TRUE(names.count(op)) << op;
  const auto& t = p["totals"];
  EXPECT_NEAR(t["kernels_ms"].get<double>(), ops_ms, 1e-9 * step);
  const double accounted = ops_ms + t["gaps_ms"].get<double>() + t["data_wait_ms"].get<double>() +
                           t["unexplained_ms"].get<double>();
  EXPECT_NEAR(accounted, step, 1e-9 * step);
  EXPECT_NEAR(shares + (accounted - ops_ms) / step, 1.0, 1e-9);
  EXPECT_LE(std::abs(t["unexplained_ms"].get<double>()), 0.05 * step);  // host clocks on both sides
  EXPECT_GE(t["gaps_ms"].get<double>(), 0);
  EXPECT_EQ(t["recompute_ms"].get<double>(), 0);
  EXPECT_EQ(t["communication_ms"].get<double>(), 0);  // one process: no communicator
  EXPECT_FALSE(p.contains("communication")) << p.dump();
  EXPECT_EQ(format_profile(r).find("communication and data wait"), std::string::npos) << format_profile(r);
  for (const auto& a : p["advice"]) {
    EXPECT_FALSE(a["title"].get<std::string>().empty());
    EXPECT_FALSE(a["detail"].get<std::string>().empty());
    EXPECT_GT(a["payoff_pct"].get<double>(), 0);
  }

  const nlohmann::json trace = nlohmann::json::parse(fs::read_file(dir_.path("profile/trace.json")));
  int steps = 0;
  size_t op_events = 0;
  double op_events_ms = 0;
  for (const auto& e : trace["traceEvents"]) {
    ASSERT_TRUE(e["ph"] == "X" || e["ph"] == "M") << e.dump();
    if (e["ph"] != "X") continue;
    for (const char* key : {"name", "ts", "dur", "pid", "tid"}) ASSERT_TRUE(e.contains(key)) << key << " in " << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0);
    EXPECT_GE(e["ts"].get<double>(), 0);
    if (e["cat"] == "step") steps++;
    if (e["pid"] == 2) {
      op_events++;
      op_events_ms += e["dur"].get<double>() / 1e3;
    }
  }
  EXPECT_EQ(steps, 3);
  double calls = 0;
  for (const auto& op : p["ops"]) calls += op["calls"].get<double>();
  EXPECT_NEAR(double(op_events), 3 * calls, 1e-6);
  EXPECT_NEAR(op_events_ms, 3 * ops_ms, 1e-6 * step);
}

// The profiled steps with a communicator of one rank (the path of --gpus 1; the MPI communicator, which runs each
// collective on the computing thread): ZeRO 1's collectives are timed, all of them exposed, the loss and norm sums
// are host gathers, and the step's parts still add up to it.
TEST_F(TinyProfile, ACommunicatorOfOneRankIsReportedAndAccountedFor) {
  const std::unique_ptr<dist::Communicator> comm = dist::make_mpi_communicator(dist::World{}, false);
  ProfileOptions o = options(2, 32);
  o.train.zero = 1;
  const ProfileReport r = run_profile(o, comm.get()).value();
  ASSERT_TRUE(r.communication.has_value());
  const ProfileCommunication& c = *r.communication;
  EXPECT_EQ(c.world_size(), 1);
  EXPECT_EQ(c.communicator, "mpi");
  EXPECT_EQ(c.zero_stage, 1);
  const RankStepTimes& t = c.per_step.ranks[0];
  EXPECT_GT(t.collectives, 0);
  EXPECT_GT(t.comm_s, 0);
  EXPECT_DOUBLE_EQ(t.comm_exposed_s, t.comm_s);
  EXPECT_GT(t.comm_host_s, 0);
  EXPECT_GE(t.data_wait_s, 0);
  EXPECT_NEAR(r.totals.communication_ms, (t.comm_exposed_s + t.comm_host_s) * 1e3, 1e-9);
  const StepTotals& s = r.totals;
  EXPECT_NEAR(s.kernels_ms + s.gaps_ms + s.data_wait_ms + s.communication_ms + s.unexplained_ms, s.step_ms,
              1e-9 * s.step_ms);
  EXPECT_NE(format_profile(r).find("communication and data wait, per step"), std::string::npos) << format_profile(r);
  const nlohmann::json j = profile_json(r);
  EXPECT_EQ(j["communication"]["world_size"], 1);
  EXPECT_EQ(j["communication"]["ranks"].size(), 1u);
}

// Needless recompute (the whole block recomputed while memory is plentiful) is measured and advised against
// with its measured share. (On this toy model's CPU step the memory-bound and micro-batch advice rank above it.)
TEST_F(TinyProfile, NeedlessRecomputeIsMeasuredAndAdvisedAgainst) {
  ProfileOptions o = options(8, 64);
  o.train.recompute = "block";
  const ProfileReport r = run_profile(o).value();
  EXPECT_GT(r.totals.recompute_ms, 0.05 * r.totals.step_ms) << format_profile(r);
  const Advice* a = nullptr;
  for (const Advice& x : r.advice)
    if (x.title == "Recompute costs time while memory is free") a = &x;
  ASSERT_NE(a, nullptr) << format_profile(r);
  EXPECT_NE(a->detail.find("--recompute block"), std::string::npos) << a->detail;
  EXPECT_NEAR(a->payoff_pct, 100 * r.totals.recompute_ms / r.totals.step_ms, 1e-9);
  // Keeping everything: no recompute time and no such advice.
  o.train.recompute = "none";
  const ProfileReport keep = run_profile(o).value();
  EXPECT_EQ(keep.totals.recompute_ms, 0);
  for (const Advice& x : keep.advice) EXPECT_NE(x.title, "Recompute costs time while memory is free");
}

TEST_F(TinyProfile, ASlowDataReaderIsTheFirstAdvice) {
  // Far above any hiccup of a loaded machine (a test runs beside others), so the wait decides the ranking.
  ScopedEnv delay("TOKAMAK_LOADER_DELAY_MS", "400");
  ScopedEnv mount("TOKAMAK_FAKE_MOUNT_TYPE", "9p");
  const ProfileReport r = run_profile(options(1, 32)).value();
  ASSERT_FALSE(r.advice.empty());
  EXPECT_EQ(r.advice[0].title, "Data: the step waits for the loader") << format_profile(r);
  EXPECT_NE(r.advice[0].detail.find("9p mount"), std::string::npos) << r.advice[0].detail;
  EXPECT_NE(r.advice[0].detail.find("local disk"), std::string::npos) << r.advice[0].detail;
  EXPECT_GT(r.totals.data_wait_ms, 0.5 * r.totals.step_ms) << format_profile(r);
  EXPECT_NEAR(r.advice[0].payoff_pct, 100 * r.totals.data_wait_ms / r.totals.step_ms, 1e-9);
  for (size_t i = 1; i < r.advice.size(); i++) EXPECT_LE(r.advice[i].payoff_pct, r.advice[i - 1].payoff_pct);
}

TEST_F(TinyProfile, AOneRowMicroBatchIsTooSmallAndAFullOneIsNot) {
  const ProfileReport one = run_profile(options(1, 32)).value();
  EXPECT_TRUE(has_advice(one, "Micro-batch too small")) << format_profile(one);
  const ProfileReport full = run_profile(options(int(matmul_fill_rows(false) / 32), 32)).value();
  EXPECT_FALSE(has_advice(full, "Micro-batch too small")) << format_profile(full);
}

// Advice inputs for one linear_forward GEMM of `ms` and `flops` (compute-bound) against a 1e12 FLOP/s,
// 1e11 B/s ceiling, the data on a local disk.
AdviceInputs one_gemm(double step_ms, double ms, double flops) {
  AdviceInputs in;
  in.totals.step_ms = step_ms;
  in.mount_type = "ext4";
  in.ceilings = Ceilings{1e12, 1e11, "test"};
  OpRow mm;
  mm.name = "linear_forward";
  mm.category = OpCategory::Matmul;
  mm.ms = ms;
  mm.flops = flops;
  mm.bytes = 1e6;
  mm.compute_bound = true;
  in.ops = {mm};
  return in;
}

TEST(ProfileAdvice, RankedByPayoff) {
  AdviceInputs in = one_gemm(100, 40, 4e9);  // 1e11 FLOP/s: 10% of the ceiling
  in.totals.data_wait_ms = 10;
  in.totals.gaps_ms = 30;
  in.micro_batch = 1;
  in.seq = 64;
  const std::vector<Advice> a = rank_advice(in);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].title, "Micro-batch too small to fill the matmuls");  // 40 ms * (1 - 0.1 / 0.5) = 32%
  EXPECT_DOUBLE_EQ(a[0].payoff_pct, 32);
  EXPECT_EQ(a[1].title, "Host and launch gaps: 30.0% of the step runs no op");
  EXPECT_EQ(a[2].title, "Data: the step waits for the loader");
  EXPECT_DOUBLE_EQ(a[2].payoff_pct, 10);
  EXPECT_NE(a[2].detail.find("does not keep up"), std::string::npos);  // ext4 is not a slow mount
}

// The op with the largest share is named with what makes its kind smaller, apart from the ranked advice: an LM head
// that is 79% of a CPU step is said to scale with the vocabulary; a largest op under 10% of the step is not shown.
TEST(ProfileAdvice, TheLargestShareIsNamedWithWhatReducesIt) {
  AdviceInputs in = one_gemm(100, 10, 4e9);
  OpRow head;
  head.name = "lm_head_cross_entropy";
  head.category = OpCategory::Matmul;
  head.ms = 79;
  head.flops = 4e10;
  in.ops.push_back(head);
  in.vocab_size = 50304;
  in.seq = 128;
  const std::optional<Advice> top = largest_share(in);
  ASSERT_TRUE(top.has_value());
  EXPECT_EQ(top->title, "Largest share: lm_head_cross_entropy takes 79.0% of the step");
  EXPECT_DOUBLE_EQ(top->payoff_pct, 79);
  EXPECT_NE(top->detail.find("vocabulary (50304 tokens)"), std::string::npos) << top->detail;
  EXPECT_NE(top->detail.find("train-tokenizer"), std::string::npos) << top->detail;
  for (const Advice& a : rank_advice(in)) EXPECT_EQ(a.title.find("Largest share"), std::string::npos);

  in.ops.pop_back();
  in.ops[0].ms = 9;
  EXPECT_FALSE(largest_share(in).has_value());
}

// FP8 on a GPU that has it: the linears' time less 1/1.6 of it, less the cast with delayed scaling (--fp8's
// default: 0.6 of 1.2x the GEMMs' bytes at the copy rate); once the run uses --fp8 with current scaling, delayed
// scaling instead (0.4 of the cast saved) and nothing once it uses that; and no FP8 advice where the cast would
// eat the gain.
TEST(ProfileAdvice, Fp8WhereTheGpuHasItAndTheRunDoesNotUseIt) {
  AdviceInputs in = one_gemm(100, 80, 7e10);  // 8.75e11 FLOP/s: 87.5% of the ceiling, so no micro-batch advice
  in.ops[0].bytes = 1e9;                       // 1.2e9 bytes to cast at 1e11 B/s: 12 ms
  in.gpu = true;
  in.fp8_tensor_cores = true;
  in.totals.data_wait_ms = 5;
  in.micro_batch = 8;
  in.seq = 2048;
  std::vector<Advice> a = rank_advice(in);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_NE(a[0].title.find("--fp8"), std::string::npos) << a[0].title;
  EXPECT_TRUE(a[0].actionable);
  EXPECT_NEAR(a[0].payoff_pct, 80 * (1 - 1 / 1.6) - 12 * 0.6, 1e-9);  // 22.8%
  EXPECT_EQ(a[1].title, "Data: the step waits for the loader");

  in.fp8 = true;
  a = rank_advice(in);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].title, "Data: the step waits for the loader");  // 5% against 4.8%
  EXPECT_NE(a[1].title.find("--fp8-scaling delayed"), std::string::npos) << a[1].title;
  EXPECT_NEAR(a[1].payoff_pct, 12 * 0.4, 1e-9);

  in.fp8_delayed = true;
  a = rank_advice(in);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].title, "Data: the step waits for the loader");

  in.fp8 = false;
  in.fp8_delayed = false;
  in.ops[0].bytes = 5e9;  // 36 ms of casting (delayed scaling): more than the 30 ms the GEMMs would save
  a = rank_advice(in);
  ASSERT_EQ(a.size(), 1u);
}

// --fp8-lm-head once the linears run in FP8: the LM head's GEMM time (its FLOPs at the ceiling, at most the op's
// time) halved, less its casts at the copy rate; not before --fp8, not once used, not where the shape cannot take it.
TEST(ProfileAdvice, Fp8LmHeadOnceTheLinearsAreFp8) {
  AdviceInputs in = one_gemm(100, 10, 9e9);  // 90% of the ceiling: no micro-batch advice
  OpRow head;
  head.name = "lm_head_cross_entropy";
  head.category = OpCategory::Loss;
  head.ms = 20;
  head.flops = 1.6e10;  // 16 ms of GEMMs at 1e12 FLOP/s; the rest is the softmax rows
  head.bytes = 1e8;
  head.compute_bound = true;  // 160 FLOP a byte
  in.ops.push_back(head);
  in.gpu = true;
  in.fp8_tensor_cores = true;
  in.fp8 = true;
  in.fp8_delayed = true;
  in.lm_head_fp8_shape = true;
  in.lm_head_cast_bytes = 1e8;  // 1 ms at 1e11 B/s
  std::vector<Advice> a = rank_advice(in);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].title, "The LM head in FP8 (--fp8-lm-head)");
  EXPECT_NEAR(a[0].payoff_pct, 16 * (1 - 1 / 2.0) - 1, 1e-9);  // 7%
  EXPECT_NE(a[0].detail.find("e5m2"), std::string::npos) << a[0].detail;

  in.fp8_lm_head = true;
  EXPECT_TRUE(rank_advice(in).empty());
  in.fp8_lm_head = false;
  in.lm_head_fp8_shape = false;  // a vocabulary of 50257
  EXPECT_TRUE(rank_advice(in).empty());
  in.lm_head_fp8_shape = true;
  in.fp8 = in.fp8_delayed = false;  // --fp8 first: its own advice, not this one
  for (const Advice& x : rank_advice(in)) EXPECT_EQ(x.title.find("LM head"), std::string::npos) << x.title;
}

// Attention on the GPU against 40% of the matmul ceiling: a backward at 20% of it saves half its time, a forward
// above 40% nothing; the advice ranks after the ones the user can act on, whatever its payoff; none on the CPU (the
// reference backend's loops are not the kernel to speed up) nor when the saving is under 1% of the step.
TEST(ProfileAdvice, AttentionBelowWhatAnAttentionKernelReaches) {
  AdviceInputs in = one_gemm(100, 40, 3.6e10);  // 90% of the 1e12 FLOP/s ceiling: no micro-batch advice
  auto attention_row = [](const char* name, double ms, double flops) {
    OpRow r;
    r.name = name;
    r.category = OpCategory::Attention;
    r.ms = ms;
    r.flops = flops;
    r.bytes = 1e6;
    r.compute_bound = true;
    return r;
  };
  in.ops.push_back(attention_row("attention_backward", 30, 6e9));  // 2e11 FLOP/s: at 4e11 it takes 15 ms
  in.ops.push_back(attention_row("attention_forward", 5, 2.5e9));  // 5e11 FLOP/s: above 4e11, nothing to save
  in.gpu = true;
  in.seq = 2048;
  in.micro_batch = 8;
  in.totals.data_wait_ms = 2;
  std::vector<Advice> a = rank_advice(in);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].title, "Data: the step waits for the loader");  // 2%, yet first: the user can act on it
  EXPECT_EQ(a[1].title, "A faster attention kernel: attention is 35.0% of the step at 24% of the matmul ceiling");
  EXPECT_FALSE(a[1].actionable);
  EXPECT_NEAR(a[1].payoff_pct, 15, 1e-9);
  EXPECT_NE(a[1].detail.find("attention_backward 30.0 ms"), std::string::npos) << a[1].detail;
  EXPECT_NE(a[1].detail.find("(20% of the ceiling)"), std::string::npos) << a[1].detail;
  EXPECT_NE(a[1].detail.find("--seq (now 2048)"), std::string::npos) << a[1].detail;

  in.ops[1].ms = 15.5;  // 0.5 ms above 40%: under 1% of the step
  for (const Advice& x : rank_advice(in)) EXPECT_EQ(x.title.find("attention"), std::string::npos) << x.title;
  in.ops[1].ms = 30;
  in.gpu = false;
  for (const Advice& x : rank_advice(in)) EXPECT_EQ(x.title.find("attention"), std::string::npos) << x.title;
}

// A GPU its temperature slows: cooling is advised, with the share the maximum clock would save; the power limit,
// the card's own design, is reported (format_clocks) but not advised on.
TEST(ProfileAdvice, CoolingWhereTheTemperatureLimitHeldTheClock) {
  AdviceInputs in = one_gemm(100, 40, 3.6e10);  // 90% of the 1e12 FLOP/s ceiling: nothing else to advise
  in.gpu = true;
  in.clocks = summarize_clocks({{1500, 280, 0x40, 88}, {1500, 290, 0x40, 90}}, 2500, 320);  // an RTX card, hot
  std::vector<Advice> a = rank_advice(in);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].title, "Cooling: the GPU's temperature limit held its clock at 60% of its maximum");
  EXPECT_TRUE(a[0].actionable);
  EXPECT_NEAR(a[0].payoff_pct, 40, 1e-9);
  EXPECT_NE(a[0].detail.find("1500 MHz of its 2500 MHz maximum"), std::string::npos) << a[0].detail;
  EXPECT_NE(a[0].detail.find("at up to 90 C"), std::string::npos) << a[0].detail;

  in.clocks = summarize_clocks({{1500, 700, 0x4, 60}}, 1980, 700);  // the power limit
  EXPECT_TRUE(rank_advice(in).empty());
  in.clocks = summarize_clocks({{2490, 300, 0x40, 90}}, 2500, 320);  // hot, but at its maximum
  EXPECT_TRUE(rank_advice(in).empty());
  in.clocks = ClockSummary{};  // not read
  EXPECT_TRUE(rank_advice(in).empty());
}

// ---- two ranks, from fixed numbers ---------------------------------------------------------------------

// A 100 ms step of rank 0 on two MPI ranks under ZeRO 2: rank 0 waits 30 ms a step in communication (25 ms of
// collectives, all exposed, and 5 ms of host gathers), rank 1 15 ms; rank 1's loader makes it wait 20 ms a step, rank
// 0's 0.5 ms.
ProfileReport two_rank_report() {
  ProfileReport r;
  r.model = "tiny";
  r.device = "cpu";
  r.backend = "cpu";
  r.steps = 2;
  r.micro_batch = 2;
  r.seq = 16;
  r.accumulation_steps = 3;
  r.tokens_per_step = 192;
  r.totals.step_ms = 100;
  r.totals.kernels_ms = 59.5;
  r.totals.data_wait_ms = 0.5;
  r.totals.communication_ms = 30;
  r.totals.gaps_ms = 9;
  r.totals.unexplained_ms = 1;
  ProfileCommunication c;
  c.communicator = "mpi";
  c.zero_stage = 2;
  c.per_step.ranks = {RankStepTimes{0.025, 0.025, 0.005, 0.0005, 12}, RankStepTimes{0.012, 0.012, 0.003, 0.020, 12}};
  r.communication = c;
  return r;
}

AdviceInputs two_rank_inputs(const ProfileReport& r) {
  AdviceInputs in;
  in.totals = r.totals;
  in.communication = r.communication;
  in.accumulation_steps = r.accumulation_steps;
  in.data_dir = "/data/brown";
  in.mount_type = "ext4";
  return in;
}

TEST(ProfileCommunicationReport, SaysEachRanksCommunicationAndDataWaitAndWhichStandOut) {
  const ProfileReport r = two_rank_report();
  const std::string text = format_profile(r);
  for (const char* line :
       {"(2 x 16 x 3 micro-batches x 2 ranks)",
        "data parallel over mpi, ZeRO 2: the op table and the step's totals are rank 0's (its ops alone are timed)",
        "exposed communication and host gathers            30.000   30.0%",
        "communication and data wait, per step (each rank's mean over the measured steps):",
        "  rank collectives    comm ms  exposed ms host gathers ms  data wait ms",
        "     0          12     25.000      25.000           5.000         0.500",
        "     1          12     12.000      12.000           3.000        20.000",
        "the most exposed communication: rank 0, 25.000 ms (25.0% of the step); the slowest loader: rank 1, 20.000 ms "
        "(20.0%)"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;

  const nlohmann::json j = profile_json(r);
  EXPECT_DOUBLE_EQ(j["totals"]["communication_ms"].get<double>(), 30);
  const nlohmann::json& c = j["communication"];
  EXPECT_EQ(c["world_size"], 2);
  EXPECT_EQ(c["communicator"], "mpi");
  EXPECT_EQ(c["zero_stage"], 2);
  ASSERT_EQ(c["ranks"].size(), 2u);
  EXPECT_EQ(c["ranks"][1]["rank"], 1);
  EXPECT_EQ(c["ranks"][1]["collectives"], 12);
  EXPECT_DOUBLE_EQ(c["ranks"][1]["comm_ms"].get<double>(), 12);
  EXPECT_DOUBLE_EQ(c["ranks"][1]["comm_exposed_ms"].get<double>(), 12);
  EXPECT_DOUBLE_EQ(c["ranks"][1]["comm_host_ms"].get<double>(), 3);
  EXPECT_DOUBLE_EQ(c["ranks"][1]["data_wait_ms"].get<double>(), 20);
  EXPECT_EQ(c["most_exposed"]["rank"], 0);
  EXPECT_DOUBLE_EQ(c["most_exposed"]["comm_exposed_ms"].get<double>(), 25);
  EXPECT_EQ(c["slowest_loader"]["rank"], 1);
  EXPECT_DOUBLE_EQ(c["slowest_loader"]["data_wait_ms"].get<double>(), 20);

  ProfileReport one = r;
  one.communication.reset();
  one.totals.communication_ms = 0;
  EXPECT_FALSE(profile_json(one).contains("communication"));
  EXPECT_EQ(format_profile(one).find("communication"), std::string::npos) << format_profile(one);
}

// Rank 1's slow loader costs rank 0's step what rank 1 waits beyond rank 0 (19.5 ms); the communication that no rank
// hides is rank 1's 15 ms (rank 0's other 15 ms is waiting for rank 1); both rank by that time with the host gaps.
TEST(ProfileAdvice, ExposedCommunicationAndASlowRanksLoaderRankByTheirTime) {
  const ProfileReport r = two_rank_report();
  const std::vector<Advice> a = rank_advice(two_rank_inputs(r));
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].title, "Data: rank 1's loader is the slowest, 19.5 ms a step behind rank 0's");
  EXPECT_DOUBLE_EQ(a[0].payoff_pct, 19.5);
  EXPECT_NE(a[0].detail.find("Rank 1 waits 20.0 ms a step for its next batches, rank 0 0.5 ms"), std::string::npos)
      << a[0].detail;
  EXPECT_NE(a[0].detail.find("/data/brown on rank 1's host"), std::string::npos) << a[0].detail;
  EXPECT_EQ(a[1].title, "Communication: 15.0% of the step waits for collectives");
  EXPECT_DOUBLE_EQ(a[1].payoff_pct, 15);
  for (const char* words : {"Every rank waits at least 15.0 ms of the 100.0 ms step", "Rank 0 waits 30.0 ms",
                            "reduce-scattered in every micro-batch's backward", "(3 a rank now)",
                            "ZeRO 1 moves the gradients once a step", "`tokamak plan --gpus 2 --zero 1`",
                            "the MPI communicator runs each collective on the thread that computes"})
    EXPECT_NE(a[1].detail.find(words), std::string::npos) << words << "\n" << a[1].detail;
  EXPECT_EQ(a[2].title, "Host and launch gaps: 9.0% of the step runs no op");
}

// What the communication advice says to change follows the stage and the communicator: under ZeRO 0 more
// accumulation, under ZeRO 3 the parameters' gathers too, on NCCL the interconnect; a slow loader on rank 0 is the
// data-wait rule's, and communication under 1% of the step is not advice.
TEST(ProfileAdvice, CommunicationAdviceFollowsTheStageAndTheCommunicator) {
  ProfileReport r = two_rank_report();
  r.communication->zero_stage = 0;
  r.communication->communicator = "nccl";
  std::vector<Advice> a = rank_advice(two_rank_inputs(r));
  const Advice* comm = nullptr;
  for (const Advice& x : a)
    if (x.title.starts_with("Communication:")) comm = &x;
  ASSERT_NE(comm, nullptr);
  for (const char* words : {"all-reduced once a step, in the backward of each rank's last micro-batch (3 a step):",
                            "6 micro-batches a rank instead of 3", "NVLink"})
    EXPECT_NE(comm->detail.find(words), std::string::npos) << words << "\n" << comm->detail;

  r.communication->zero_stage = 3;
  for (const Advice& x : rank_advice(two_rank_inputs(r)))
    if (x.title.starts_with("Communication:")) {
      EXPECT_NE(x.detail.find("parameters all-gathered before each use"), std::string::npos) << x.detail;
      EXPECT_NE(x.detail.find("ZeRO 2 moves the parameters once a step"), std::string::npos) << x.detail;
    }

  std::swap(r.communication->per_step.ranks[0].data_wait_s, r.communication->per_step.ranks[1].data_wait_s);
  r.totals.data_wait_ms = 20;
  r.communication->per_step.ranks[1].comm_exposed_s = 0.0005;
  r.communication->per_step.ranks[1].comm_host_s = 0.0004;
  a = rank_advice(two_rank_inputs(r));
  for (const Advice& x : a) {
    EXPECT_EQ(x.title.find("loader is the slowest"), std::string::npos) << x.title;
    EXPECT_FALSE(x.title.starts_with("Communication:")) << x.title << ": 0.9 ms is under 1% of the step";
  }
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a[0].title, "Data: the step waits for the loader");
}

// ---- the GPU's clock over the measured steps ----------------------------------------------------------------------

TEST(GpuClocks, TheSummaryAveragesTheSamplesAndCountsWhatHeldTheClockBack) {
  using namespace clock_reason;
  // Four samples of a GPU at its power limit, one of them also hot: the H200's figures of a bf16 8B step.
  const std::vector<ClockSample> s = {{1440, 690, kPowerCap, 60}, {1230, 665, kPowerCap, 61},
                                      {1665, 692, kPowerCap | 0x40, 62}, {1980, 300, 0, 50}};
  const ClockSummary c = summarize_clocks(s, 1980, 700);
  EXPECT_EQ(c.samples, 4);
  EXPECT_DOUBLE_EQ(c.sm_mhz_mean, (1440 + 1230 + 1665 + 1980) / 4.0);
  EXPECT_DOUBLE_EQ(c.sm_mhz_min, 1230);
  EXPECT_DOUBLE_EQ(c.power_w_mean, (690 + 665 + 692 + 300) / 4.0);
  EXPECT_DOUBLE_EQ(c.temperature_c_max, 62);
  EXPECT_DOUBLE_EQ(c.power_capped_share, 0.75);
  EXPECT_DOUBLE_EQ(c.thermal_share, 0.25);
  EXPECT_NEAR(c.clock_share(), 1578.75 / 1980, 1e-12);
  EXPECT_EQ(c.limit(), ClockLimit::Power);
  EXPECT_EQ(c.held_back_by(), "the power limit");

  const std::string line = format_clocks(c);
  EXPECT_NE(line.find("SM 1579 MHz on average (lowest 1230), 80% of its 1980 MHz maximum"), std::string::npos) << line;
  EXPECT_NE(line.find("power 587 W of its 700 W limit"), std::string::npos) << line;
  EXPECT_NE(line.find("held back by the power limit in 75% of the samples"), std::string::npos) << line;

  ProfileReport r;
  r.clocks = c;
  const nlohmann::json j = profile_json(r);
  EXPECT_EQ(j["clocks"]["held_back_by"], "the power limit");
  EXPECT_EQ(j["clocks"]["samples"], 4);
  EXPECT_DOUBLE_EQ(j["clocks"]["sm_mhz_max"].get<double>(), 1980);

  // A step's record (log.jsonl, tokamak bench --json): the mean clock and power, and the limit's words or null.
  nlohmann::json record;
  add_clock_fields(record, c);
  EXPECT_DOUBLE_EQ(record["sm_clock_mhz"].get<double>(), c.sm_mhz_mean);
  EXPECT_DOUBLE_EQ(record["power_w"].get<double>(), c.power_w_mean);
  EXPECT_EQ(record["clock_held_back_by"], "the power limit");
  nlohmann::json free_record;
  add_clock_fields(free_record, summarize_clocks({{1980, 400, 0, 50}}, 1980, 700));
  EXPECT_TRUE(free_record["clock_held_back_by"].is_null());
  nlohmann::json unread;
  add_clock_fields(unread, ClockSummary{});
  EXPECT_TRUE(unread.empty());
}

TEST(GpuClocks, AClockAtItsMaximumOrRarelyHeldBackIsNotCalledBound) {
  using namespace clock_reason;
  // At its maximum, whatever the bits say.
  EXPECT_EQ(summarize_clocks({{1975, 650, kPowerCap, 60}}, 1980, 700).held_back_by(), "");
  // Below it, but held back in under half of the samples.
  EXPECT_EQ(summarize_clocks({{1500, 650, kPowerCap, 60}, {1500, 600, 0, 60}, {1500, 600, 0, 60}}, 1980, 700)
                .held_back_by(),
            "");
  // Hot: the temperature limit (software or hardware) or a hardware slowdown.
  EXPECT_EQ(summarize_clocks({{1200, 300, 0x20, 90}, {1200, 300, kHwSlowdown, 91}}, 2500, 320).held_back_by(),
            "the temperature limit");
  const ClockSummary free = summarize_clocks({{1980, 400, 0, 50}}, 1980, 700);
  EXPECT_EQ(format_clocks(free).find("held back"), std::string::npos);
}

// A run's summary merges its steps': the same as summarizing every sample at once.
TEST(GpuClocks, MergingStepsIsSummarizingTheirSamplesTogether) {
  using namespace clock_reason;
  const std::vector<ClockSample> a = {{1440, 690, kPowerCap, 60}, {1230, 665, kPowerCap, 61}};
  const std::vector<ClockSample> b = {{1980, 300, 0, 50}, {1665, 692, kPowerCap | 0x40, 63}, {1500, 680, kPowerCap, 59}};
  std::vector<ClockSample> all = a;
  all.insert(all.end(), b.begin(), b.end());
  const ClockSummary merged = merge_clocks(summarize_clocks(a, 1980, 700), summarize_clocks(b, 1980, 700));
  const ClockSummary whole = summarize_clocks(all, 1980, 700);
  EXPECT_EQ(merged.samples, whole.samples);
  EXPECT_NEAR(merged.sm_mhz_mean, whole.sm_mhz_mean, 1e-9);
  EXPECT_DOUBLE_EQ(merged.sm_mhz_min, whole.sm_mhz_min);
  EXPECT_NEAR(merged.power_w_mean, whole.power_w_mean, 1e-9);
  EXPECT_NEAR(merged.power_capped_share, whole.power_capped_share, 1e-12);
  EXPECT_NEAR(merged.thermal_share, whole.thermal_share, 1e-12);
  EXPECT_DOUBLE_EQ(merged.temperature_c_max, 63);
  EXPECT_EQ(describe_clocks(merged), describe_clocks(whole));
  // An empty side (a step too short for a sample) changes nothing.
  EXPECT_EQ(describe_clocks(merge_clocks(ClockSummary{}, whole)), describe_clocks(whole));
  EXPECT_EQ(describe_clocks(merge_clocks(whole, ClockSummary{})), describe_clocks(whole));
}

TEST(GpuClocks, NothingIsReadOrReportedWithoutSamples) {
  const ClockSummary none = summarize_clocks({}, 1980, 700);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.held_back_by(), "");
  EXPECT_EQ(format_clocks(none), "");
  EXPECT_FALSE(profile_json(ProfileReport{}).contains("clocks"));
  // Where no GPU can be read (this machine in CI), the sampler samples nothing and says so.
  ClockSampler sampler(std::chrono::milliseconds(1));
  sampler.start();
  const ClockSummary got = sampler.stop();
  if (!sampler.available()) EXPECT_TRUE(got.empty());
  else EXPECT_GT(got.samples, 0);
}

}  // namespace
}  // namespace tk
