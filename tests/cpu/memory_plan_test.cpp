// The memory plan: the model's rows are what a Model allocates, the budget search picks the fastest
// setting that fits (recomputing or shrinking the micro-batch only when it must), and a budget nothing fits
// is an error naming the smallest footprint and its largest part.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"
#include "core/format.h"
#include "model/config.h"
#include "model/params.h"
#include "ops/memory_ledger.h"
#include "plan/flag_values.h"
#include "plan/memory_plan.h"
#include "plan/recipe.h"

namespace tk {
namespace {

ModelConfig preset(const std::string& name) { return ModelConfig::preset(name); }

// A GPU recipe of the model at micro-batch B x T (bf16, nothing recomputed or offloaded, f32 moments).
Recipe recipe(const ModelConfig& cfg, int B, int T) {
  Recipe r;
  r.model = cfg;
  r.batch = B;
  r.seq = T;
  return r;
}

// --fp8 with current or delayed scaling.
Recipe with_fp8(Recipe r, bool delayed) {
  r.backend.precision.fp8 = true;
  r.backend.precision.delayed = delayed;
  return r;
}

double row(const MemoryPlan& p, const std::string& component) {
  for (const PlanRow& r : p.rows)
    if (r.component == component) return r.bytes;
  return -1;
}

TEST(MemoryPlan, ModelRowsComeFromTheModelsOwnPlanAndRecomputeShrinksThem) {
  const ModelConfig cfg = preset("qwen2.5-0.5b");
  PlanTarget gpu;
  Recipe r = recipe(cfg, 8, 2048);
  const MemoryPlan none = plan_memory(r, gpu);
  ModelOptions o{8, 2048, false};
  for (const auto& [label, bytes] : model_memory(cfg, o, DType::BF16, DType::F32))
    EXPECT_EQ(row(none, label), double(bytes)) << label;
  const double P = double(ParamLayout::build(cfg).total);
  EXPECT_EQ(row(none, "AdamW first moments"), 4 * P);
  EXPECT_EQ(row(none, "fp32 master weights"), 4 * P);
  // 0.5B at 8 x 2048 keeps ~15 GiB of activations; block recompute keeps the block inputs only.
  r.recompute = parse_recompute("block");
  const MemoryPlan block = plan_memory(r, gpu);
  EXPECT_LT(row(block, "activations kept for the backward"), 0.2 * row(none, "activations kept for the backward"));
  EXPECT_LT(block.predicted_tokens_per_s, none.predicted_tokens_per_s);
  EXPECT_GT(block.recompute_flops_per_token, 0);
}

TEST(MemoryPlan, TheBudgetSearchKeepsEverythingWhenItFitsAndRecomputesWhenItMust) {
  const ModelConfig cfg = preset("qwen2.5-0.5b");
  PlanTarget gpu;
  const MemoryPlan roomy = choose_plan(recipe(cfg, 8, 2048), 16384, parse_bytes("80GiB"), gpu);
  EXPECT_EQ(roomy.recipe.batch, 8);
  EXPECT_FALSE(roomy.recipe.recompute.any());
  const MemoryPlan tight = choose_plan(recipe(cfg, 8, 2048), 16384, parse_bytes("16GiB"), gpu);
  const Recipe& t = tight.recipe;
  EXPECT_LE(tight.total_bytes, parse_bytes("16GiB"));
  EXPECT_EQ(t.micro_tokens() * t.accumulation, 16384);  // the global batch is kept
  EXPECT_TRUE(t.recompute.any() || t.batch < 8 || t.optimizer.offload);
  // Nothing tried that fits is faster than the choice.
  for (const MemoryPlan& p : plan_candidates(recipe(cfg, 8, 2048), 16384, gpu))
    if (p.total_bytes <= parse_bytes("16GiB")) EXPECT_LE(p.predicted_tokens_per_s, tight.predicted_tokens_per_s);
}

// The LM head's logits chunk: each chunk's weight-gradient GEMM reads and writes the f32 LM-head gradient, so
// larger chunks are faster (measured at 0.5B: 512 MiB -> 2 GiB, -2.2% a step) for more memory. The budget
// search spends memory left over on it: all of 2 GiB when roomy, 1 GiB when only that fits, and never at the
// cost of a faster setting.
TEST(MemoryPlan, TheBudgetSearchSpendsMemoryLeftOnTheLogitsChunk) {
  const ModelConfig cfg = preset("qwen2.5-0.5b");
  PlanTarget gpu;
  gpu.bandwidth = 4.26e12;
  Recipe r = recipe(cfg, 8, 2048);
  const MemoryPlan base = plan_memory(r, gpu);
  EXPECT_EQ(base.recipe.logits_chunk_bytes(), size_t(512) << 20);
  r.backend.logits_chunk_bytes = size_t(2048) << 20;
  const MemoryPlan big = plan_memory(r, gpu);
  const double gain = big.predicted_tokens_per_s / base.predicted_tokens_per_s;
  EXPECT_GT(gain, 1.01);
  EXPECT_LT(gain, 1.04);
  // 7,040 rows of 151,936 bf16 logits (the most multiples of 128 rows in 2 GiB) against 1,664.
  EXPECT_NEAR(big.total_bytes - base.total_bytes, (7040.0 - 1664.0) * 151936 * 2, 1.0);

  r.backend.logits_chunk_bytes = 0;  // the default
  gpu.choose_logits_chunk = true;
  const MemoryPlan roomy = choose_plan(r, 16384, parse_bytes("80GiB"), gpu);
  EXPECT_EQ(roomy.recipe.logits_chunk_bytes(), size_t(2048) << 20);
  EXPECT_FALSE(roomy.recipe.recompute.any());
  EXPECT_EQ(roomy.recipe.batch, 8);
  const double some = base.total_bytes + 0.6e9;  // room for 1 GiB (+0.55 GB), not 2 GiB (+1.6 GB)
  const MemoryPlan middle = choose_plan(r, 16384, some, gpu);
  EXPECT_EQ(middle.recipe.logits_chunk_bytes(), size_t(1024) << 20);
  EXPECT_FALSE(middle.recipe.recompute.any());
  for (const MemoryPlan& p : plan_candidates(r, 16384, gpu))
    if (p.fits(some, gpu)) EXPECT_LE(p.predicted_tokens_per_s, middle.predicted_tokens_per_s);
}

TEST(MemoryPlan, ABudgetNothingFitsNamesTheSmallestFootprintAndItsLargestPart) {
  try {
    choose_plan(recipe(preset("qwen2.5-7b"), 8, 2048), 16384, parse_bytes("16GiB"), PlanTarget());
    FAIL() << "a 7B model's bf16 weights alone take 14.2 GiB: nothing fits 16 GiB";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("smallest footprint"), std::string::npos) << msg;
    EXPECT_NE(msg.find("is the largest part"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parameters"), std::string::npos) << msg;
  }
}

// A 7B model fits 24 GiB only with its gradients offloaded too; with too little host memory for that,
// the error says so.
TEST(MemoryPlan, SevenBillionFitsTwentyFourGiBWithGradientsInHostMemory) {
  PlanTarget gpu;
  const MemoryPlan p = choose_plan(recipe(preset("qwen2.5-7b"), 8, 2048), 16384, parse_bytes("24GiB"), gpu);
  EXPECT_TRUE(p.recipe.offload_gradients);
  EXPECT_LE(p.total_bytes, parse_bytes("24GiB"));
  EXPECT_GT(p.host_bytes, parse_bytes("100GiB"));  // fp32 master, m, v and gradients: 16 bytes a parameter
  gpu.host_memory_limit = parse_bytes("64GiB");
  try {
    choose_plan(recipe(preset("qwen2.5-7b"), 8, 2048), 16384, parse_bytes("24GiB"), gpu);
    FAIL() << "113 GiB of host state does not fit a 64 GiB limit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("page-locked host memory"), std::string::npos) << e.what();
  }
}

TEST(MemoryPlan, DocumentMaskingAddsTheAttentionBiasAndItsSegmentIds) {
  const ModelConfig cfg = preset("qwen2.5-0.5b");
  PlanTarget gpu;
  Recipe r = recipe(cfg, 8, 2050);
  const MemoryPlan plain = plan_memory(r, gpu);
  r.doc_mask = true;
  const MemoryPlan masked = plan_memory(r, gpu);
  EXPECT_EQ(row(plain, "attention document mask"), -1);
  EXPECT_EQ(row(masked, "attention document mask"), 8.0 * 2050 * 2056 * 2);  // rows padded to 8 columns
  EXPECT_EQ(row(masked, "attention document mask segment ids"), (8.0 * 2050 + 8) * 4);
  EXPECT_NEAR(masked.total_bytes - plain.total_bytes, 8.0 * 2050 * 2056 * 2 + (8.0 * 2050 + 8) * 4, 1.0);
}

// Where tokamak's own attention backward runs (Hopper, head_dim 64, T % 128 == 0, a (batch row, kv head)'s
// ceil(T / 256) CTAs resident at once, no document mask), its scratch replaces cuDNN's dP workspace and row sums.
TEST(MemoryPlan, TheOwnAttentionBackwardReplacesCudnnsWorkspaceWhereItRuns) {
  const ModelConfig qwen = preset("qwen2.5-0.5b");  // head_dim 64, 14 q heads
  PlanTarget cudnn, own;
  own.own_attention_sms = 132;
  const MemoryPlan a = plan_memory(recipe(qwen, 8, 2048), cudnn);
  const MemoryPlan b = plan_memory(recipe(qwen, 8, 2048), own);
  EXPECT_GT(row(a, "cuDNN attention workspace"), 0);
  EXPECT_EQ(row(a, "attention backward dQ sums, row sums and turns"), -1);
  EXPECT_EQ(row(b, "cuDNN attention workspace"), -1);
  EXPECT_EQ(row(b, "cuDNN attention row sums"), -1);
  // D and dQ's sums, and the counters (8 x 14 x 16 blocks, 4 bytes): multiples of 256 bytes already.
  const double rows = 8.0 * 14 * 2048, counters = 8.0 * 14 * 16 * 4;
  EXPECT_EQ(row(b, "attention backward dQ sums, row sums and turns"), rows * 4 + rows * 64 * 4 + counters);
  EXPECT_NEAR(a.total_bytes - b.total_bytes,
              row(a, "cuDNN attention workspace") + row(a, "cuDNN attention row sums") - (rows * 65 * 4 + counters), 1.0);
  EXPECT_GT(a.total_bytes - b.total_bytes, 0.8 * (1 << 30));  // ~0.9 GiB less, as measured on the H200
  // Where it does not run, cuDNN's rows stay.
  auto cudnn_rows = [&](const Recipe& r, PlanTarget t) {
    return row(plan_memory(r, t), "cuDNN attention workspace") > 0;
  };
  EXPECT_TRUE(cudnn_rows(recipe(qwen, 8, 2050), own));                   // T % 128 != 0
  EXPECT_TRUE(cudnn_rows(recipe(preset("llama3.2-3b"), 8, 2048), own));  // head_dim 128
  Recipe masked = recipe(qwen, 8, 2048);
  masked.doc_mask = true;
  EXPECT_TRUE(cudnn_rows(masked, own));                                  // the document mask
  PlanTarget small = own;
  small.own_attention_sms = 7;  // 8 CTAs of a (batch row, kv head) do not fit
  EXPECT_TRUE(cudnn_rows(recipe(qwen, 8, 2048), small));
  small.own_attention_sms = 8;
  EXPECT_FALSE(cudnn_rows(recipe(qwen, 8, 2048), small));
}

// FP8 linears: the backward's FP8 operands of the largest linear (gate+up for Llama-3.2-1B: x^T [N, d],
// dy and dy^T [N, 2f], w^T [2f, d], one byte each) share the LM head's logits buffer, so the plan grows by
// what they need past the logits chunk, not by their whole size; with a vocabulary whose chunk is larger,
// by nothing.
TEST(MemoryPlan, Fp8OperandsShareTheLogitsBuffer) {
  PlanTarget gpu;
  const ModelConfig llama = preset("llama3.2-1b");
  const MemoryPlan plain = plan_memory(recipe(llama, 8, 2048), gpu);
  const MemoryPlan fp8 = plan_memory(with_fp8(recipe(llama, 8, 2048), false), gpu);
  const double N = 8 * 2048, d = 2048, f = 8192;
  const double operands = N * (d + 2 * 2 * f) + 2 * f * d;
  const double logits = row(plain, "LM head logits chunk");
  ASSERT_GT(logits, 0);
  ASSERT_GT(operands, logits);
  EXPECT_EQ(row(fp8, "LM head logits chunk"), -1);
  EXPECT_EQ(row(fp8, "LM head logits chunk / FP8 operands (shared)"), operands);
  EXPECT_NEAR(fp8.total_bytes - plain.total_bytes, operands - logits, 1.0);

  const MemoryPlan one_row = plan_memory(with_fp8(recipe(llama, 1, 512), false), gpu);  // operands < logits
  const MemoryPlan one_row_plain = plan_memory(recipe(llama, 1, 512), gpu);
  EXPECT_NEAR(one_row.total_bytes, one_row_plain.total_bytes, 1.0);
}

// --fp8-lm-head: the LM head's FP8 operands follow the logits chunk in the shared buffer (dlogits as is and
// transposed, the weight as is and transposed, the chunk's x as is and transposed; one byte each), and the
// prediction gains most where the vocabulary is large against the model (Qwen2.5-0.5B: V d is a fifth of its
// parameters' GEMM work).
TEST(MemoryPlan, Fp8LmHeadOperandsFollowTheLogitsChunk) {
  PlanTarget gpu;
  Recipe r = with_fp8(recipe(preset("qwen2.5-0.5b"), 8, 2048), true);
  r.backend.logits_chunk_bytes = size_t(2048) << 20;
  const MemoryPlan linears = plan_memory(r, gpu);
  r.backend.precision.lm_head = true;
  const MemoryPlan head = plan_memory(r, gpu);
  const double V = 151936, d = 896, rows = std::floor(2048.0 * (1 << 20) / (V * 2) / 128) * 128;
  const double chunk = rows * V * 2, operands = rows * V * 2 + 2 * V * d + 2 * rows * d;
  const char* name = "LM head logits chunk / FP8 operands (shared)";
  EXPECT_EQ(row(linears, name), chunk);
  EXPECT_EQ(row(head, name), chunk + operands);
  EXPECT_NEAR(head.total_bytes - linears.total_bytes, operands, 1.0);
  const double gain = head.predicted_tokens_per_s / linears.predicted_tokens_per_s;
  EXPECT_GT(gain, 1.03);
  EXPECT_LT(gain, 1.15);
}

// The speed prediction with --fp8: the linears' GEMMs faster, their casts' traffic added. On the H200 the
// bench measured 1B +20% (68.1k -> 81.6k tok/s) and 0.5B +4% (141.8k -> 147.6k): the prediction follows,
// large for the wide model, small for the narrow one.
TEST(MemoryPlan, Fp8PredictionGainsOnWideModelsMoreThanOnNarrowOnes) {
  auto gain = [](const char* name) {
    PlanTarget gpu;
    gpu.bandwidth = 4.26e12;
    const MemoryPlan bf16 = plan_memory(recipe(preset(name), 8, 2048), gpu);
    const MemoryPlan fp8 = plan_memory(with_fp8(recipe(preset(name), 8, 2048), false), gpu);
    return fp8.predicted_tokens_per_s / bf16.predicted_tokens_per_s;
  };
  const double wide = gain("llama3.2-1b"), narrow = gain("qwen2.5-0.5b");
  EXPECT_GT(wide, 1.12);
  EXPECT_LT(wide, 1.30);
  EXPECT_GT(narrow, 1.0);
  EXPECT_LT(narrow, 1.12);
  EXPECT_GT(wide - 1, 2 * (narrow - 1));
}

// The attention's FLOPs at its own rates, which grow with the sequence: 2 T / (T + 2048) times those of 2048 (1.6 at
// 8192, as Llama-3.1-8B measured): its predicted time a token is what remains once attention is made free.
TEST(MemoryPlan, AttentionRunsFasterAtLongerSequences) {
  EXPECT_DOUBLE_EQ(attention_sequence_factor(2048), 1.0);
  EXPECT_DOUBLE_EQ(attention_sequence_factor(8192), 1.6);
  const ModelConfig c = preset("llama3.2-1b");
  PlanTarget gpu, free_attention;
  free_attention.attention_forward_efficiency = free_attention.attention_backward_efficiency = 1e12;
  for (int T : {2048, 8192}) {
    const Recipe r = recipe(c, 16384 / T, T);
    const double attention_s = plan_memory(r, gpu).time.matmul - plan_memory(r, free_attention).time.matmul;
    const double forward = 2.0 * c.n_layers * T * c.q_dim();  // FLOPs a token; the backward twice that
    const double want = (forward / gpu.attention_forward_efficiency + 2 * forward / gpu.attention_backward_efficiency) /
                        (gpu.peak_flops * attention_sequence_factor(T));
    EXPECT_NEAR(attention_s, want, 1e-6 * want) << "sequence " << T;
  }
}

// Delayed scaling drops the amax passes and casts SwiGLU's output and gradient in its kernels: faster than
// current scaling by several percent (measured on the H200 with both: 1B 81.8k -> 85.6k tok/s, +4.6%; 0.5B
// 146.3k -> 158.6k, +8.4%, before the fused forward kept the down projection's x^T). Its fused forwards keep the
// norms' and SwiGLU's outputs as the one-byte x^T of their linears (ModelOptions::fp8_kept_inputs): N (f + 2 d)
// bytes a layer less, nothing else.
TEST(MemoryPlan, Fp8DelayedScalingPredictsSeveralPercentMoreThanCurrent) {
  for (const char* name : {"llama3.2-1b", "qwen2.5-0.5b"}) {
    PlanTarget gpu;
    gpu.bandwidth = 4.26e12;
    const MemoryPlan current = plan_memory(with_fp8(recipe(preset(name), 8, 2048), false), gpu);
    const MemoryPlan delayed = plan_memory(with_fp8(recipe(preset(name), 8, 2048), true), gpu);
    const double gain = delayed.predicted_tokens_per_s / current.predicted_tokens_per_s;
    EXPECT_GT(gain, 1.03) << name;
    EXPECT_LT(gain, 1.15) << name;
    const ModelConfig c = preset(name);
    const double kept = double(c.n_layers) * 8 * 2048 * double(c.ffn_dim + 2 * c.d_model);
    EXPECT_EQ(delayed.total_bytes, current.total_bytes - kept) << name;
  }
}

// Which activations are kept as the one-byte x^T: only where the forward runs the fused op and no recompute reads
// them in bf16, and only where the backend keeps them (the recipe's answer: delayed scaling on the GPU, FP8's
// shapes).
TEST(MemoryPlan, KeptFp8InputsFollowTheRecomputePolicy) {
  const ModelConfig cfg = preset("qwen2.5-0.5b");
  ModelOptions o;
  o.B = 8;
  o.T = 2048;
  EXPECT_FALSE(kept_fp8_input(cfg, o, "act"));  // not asked for
  o.fp8_kept_inputs = true;
  for (const char* which : {"x_attn", "x_mlp", "act"}) EXPECT_TRUE(kept_fp8_input(cfg, o, which)) << which;
  o.recompute = parse_recompute("swiglu");
  EXPECT_FALSE(kept_fp8_input(cfg, o, "act"));
  EXPECT_TRUE(kept_fp8_input(cfg, o, "x_mlp"));
  o.recompute = parse_recompute("norm");
  EXPECT_FALSE(kept_fp8_input(cfg, o, "x_attn"));
  EXPECT_FALSE(kept_fp8_input(cfg, o, "x_mlp"));
  EXPECT_TRUE(kept_fp8_input(cfg, o, "act"));
  o.recompute = parse_recompute("norm,swiglu,attention,qkv");
  EXPECT_FALSE(kept_fp8_input(cfg, o, "x_attn"));  // the recomputed qkv projection reads it
  o.recompute = parse_recompute("block");
  for (const char* which : {"x_attn", "x_mlp", "act"}) EXPECT_FALSE(kept_fp8_input(cfg, o, which)) << which;
  o.recompute = Recompute();
  // Whether they are kept is the backend's answer, which the recipe gives: on the GPU with delayed scaling, for
  // FP8's shapes only.
  Recipe r = with_fp8(recipe(cfg, 8, 2048), true);
  EXPECT_TRUE(r.model_options().fp8_kept_inputs);
  r.seq = 1000;  // N not always a multiple of 16
  EXPECT_FALSE(r.model_options().fp8_kept_inputs);
  r.seq = 2048;
  r.backend.precision.delayed = false;  // current scaling fuses no cast
  EXPECT_FALSE(r.model_options().fp8_kept_inputs);
  r.backend.precision.delayed = true;
  r.gpu = false;
  EXPECT_FALSE(r.model_options().fp8_kept_inputs);
  // The model's memory: act at one byte.
  const auto rows = [&](bool keep) {
    ModelOptions m = o;
    m.fp8_kept_inputs = keep;
    for (const auto& [label, bytes] : model_memory(cfg, m, DType::BF16, DType::F32))
      if (label == "activations kept for the backward") return double(bytes);
    return 0.0;
  };
  EXPECT_EQ(rows(false) - rows(true), double(cfg.n_layers) * 8 * 2048 * double(cfg.ffn_dim + 2 * cfg.d_model));
}

// Moments precision: m and v take 4, 2 or 1 byte a parameter (int8 adds the block scales), on the device
// or, offloaded, in host memory with chunk staging of the same precision; smaller moments let a tight
// budget keep more on the device.
TEST(MemoryPlan, MomentPrecisionSetsTheOptimizerRows) {
  const ModelConfig cfg = preset("qwen2.5-0.5b");
  PlanTarget gpu;
  Recipe r = recipe(cfg, 8, 2048);
  const double P64 = double(ParamLayout::build(cfg).total);
  for (MomentPrecision m : {MomentPrecision::F32, MomentPrecision::BF16, MomentPrecision::Int8}) {
    SCOPED_TRACE(moments_name(m));
    r.optimizer.moments = m;
    // The layout of the run: narrow moments pad its units to whole int8 blocks (DataParallel::unit_multiple).
    const int64_t params = ParamLayout::build(cfg, r.model_options().unit_multiple).total;
    const double P = double(params);
    EXPECT_EQ(r.model_options().unit_multiple, m == MomentPrecision::F32 ? 64 : 256);
    const double bytes = m == MomentPrecision::F32 ? 4 : m == MomentPrecision::BF16 ? 2 : 1;
    const double scales = m == MomentPrecision::Int8 ? 8.0 * double((params + 255) / 256) : -1;
    const MemoryPlan device = plan_memory(r, gpu);
    EXPECT_EQ(device.recipe.optimizer.moments, m);
    EXPECT_EQ(row(device, "AdamW first moments"), bytes * P);
    EXPECT_EQ(row(device, "AdamW second moments"), bytes * P);
    EXPECT_EQ(row(device, "AdamW int8 block scales"), scales);
    EXPECT_EQ(row(device, "fp32 master weights"), 4 * P);
    Recipe offloaded = r;
    offloaded.set_offload("optimizer");
    offloaded.optimizer.offload_chunk = 1000;  // rounded down to whole int8 blocks, as the optimizer does; two sets
    const MemoryPlan offload = plan_memory(offloaded, gpu);
    EXPECT_EQ(row(offload, "AdamW first moments (host)"), bytes * P);
    EXPECT_EQ(row(offload, "offload staging: m chunks"), 2 * bytes * 768);
    EXPECT_EQ(row(offload, "offload staging: master weight chunks"), 2 * 4.0 * 768);
    EXPECT_EQ(row(offload, "offload staging: int8 block scale chunks"), scales < 0 ? -1 : 2 * 8.0 * 3);
  }
  r.optimizer.moments = MomentPrecision::F32;
  const double f32_total = plan_memory(r, gpu).total_bytes;
  r.optimizer.moments = MomentPrecision::Int8;
  // 6 bytes a parameter fewer, less the block scales and the few elements of padding that int8's blocks add.
  EXPECT_NEAR(f32_total - plan_memory(r, gpu).total_bytes, 6 * P64, 0.02 * 6 * P64);
  EXPECT_EQ(parse_moments("bf16"), MomentPrecision::BF16);
  EXPECT_THROW(parse_moments("fp8"), Error);
}

TEST(MemoryPlan, SizesParse) {
  EXPECT_EQ(parse_bytes("16GiB"), 16.0 * (1ull << 30));
  EXPECT_EQ(parse_bytes("24 GB"), 24e9);
  EXPECT_EQ(parse_bytes("800MiB"), 800.0 * (1 << 20));
  EXPECT_EQ(parse_bytes("1.5TiB"), 1.5 * (1ull << 40));
  EXPECT_EQ(parse_bytes("4096"), 4096.0);
  EXPECT_THROW(parse_bytes("lots"), Error);
  EXPECT_THROW(parse_bytes("16 parsecs"), Error);
}

// The ledger of a backend's allocations: totals, the peak, rows by label, and each allocation's bytes (what a
// backend drops its bookkeeping for when memory is released).
TEST(MemoryLedger, CountsBytesByAllocationAndLabel) {
  MemoryLedger ledger;
  int a = 0, b = 0, c = 0;
  ledger.add(&a, 100, "weights");
  ledger.add(&b, 50, "weights");
  ledger.add(&c, 30, "scratch");
  EXPECT_EQ(ledger.total(), 180u);
  EXPECT_EQ(ledger.bytes_of(&b), 50u);
  EXPECT_EQ(ledger.bytes_of(&c), 30u);
  const std::vector<MemoryRow> rows = ledger.rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].label, "weights");
  EXPECT_EQ(rows[0].bytes, 150u);
  EXPECT_EQ(rows[0].count, 2);
  EXPECT_TRUE(ledger.remove(&b));
  EXPECT_FALSE(ledger.remove(&b));
  EXPECT_EQ(ledger.bytes_of(&b), 0u) << "a released allocation";
  EXPECT_EQ(ledger.total(), 130u);
  EXPECT_EQ(ledger.peak(), 180u);
}

// ZeRO (zero_plan.h): one GPU equals the plain plan at every stage but for ZeRO 2 and 3's gradient staging (one rank
// takes the same path); on N, each stage takes from one GPU's memory what its formula says, and the collectives move
// and take what theirs say.
Recipe on_gpus(Recipe r, int n, int stage) {
  r.world_size = n;
  r.zero_stage = stage;
  return r;
}

TEST(ZeroPlan, OneGpuIsThePlainPlan) {
  const PlanTarget gpu;
  const Recipe r = recipe(preset("llama3.2-1b"), 8, 2048);
  const MemoryPlan plain = plan_memory(r, gpu);
  const double staging = 4 * zero_gradient_staging_elements(r.model);
  for (int stage = 0; stage <= 3; stage++) {
    const MemoryPlan one = plan_memory(on_gpus(r, 1, stage), gpu);
    EXPECT_EQ(one.total_bytes, plain.total_bytes + (stage >= 2 ? staging : 0)) << stage;
    // ZeRO 2 and 3 zero the staging and copy the slice into it in every micro-step: 4 P + 8 P bytes.
    const double staging_s = stage >= 2 ? 12 * double(ParamLayout::build(r.model).total) / gpu.bandwidth : 0;
    EXPECT_NEAR(1 / one.predicted_tokens_per_s, 1 / plain.predicted_tokens_per_s + staging_s / r.micro_tokens(),
                1e-12 / plain.predicted_tokens_per_s)
        << stage;
    EXPECT_EQ(one.communication.bytes, 0) << stage;
  }
}

TEST(ZeroPlan, EachStageShardsWhatItsFormulaSays) {
  const PlanTarget gpu;
  const ModelConfig cfg = preset("llama3.2-1b");
  const Recipe r = recipe(cfg, 8, 2048);
  const double P = double(ParamLayout::build(cfg).total), n = 4, unit = zero_unit_elements(cfg);
  const double staging = zero_gradient_staging_elements(cfg);
  double total[4];
  for (int stage = 0; stage <= 3; stage++) total[stage] = plan_memory(on_gpus(r, 4, stage), gpu).total_bytes;
  EXPECT_EQ(total[0], plan_memory(r, gpu).total_bytes);                  // 0: everything replicated
  EXPECT_NEAR(total[0] - total[1], 12 * (P - P / n), 12 * n);            // 1: master weights, m and v / N
  EXPECT_NEAR(total[1] - total[2], 4 * (P - (P / n + staging)), 4 * n);  // 2: + gradients / N, three units staged
  EXPECT_NEAR(total[2] - total[3], 2 * (P - (P / n + 2 * unit)), 2 * n);  // 3: + parameters / N, two units gathered
  EXPECT_GT(total[0], total[1]);
  EXPECT_GT(total[1], total[2]);
  EXPECT_GT(total[2], total[3]);
}

TEST(ZeroPlan, CommunicationAtAKnownSize) {
  const ModelConfig cfg = preset("llama3.2-1b");
  Recipe r = on_gpus(recipe(cfg, 8, 2048), 8, 0);
  const double P = double(ParamLayout::build(cfg).total), share = 7.0 / 8, link = 100e9;
  const double unit = zero_unit_elements(cfg) / P;
  // 0: an all-reduce of the f32 gradients, 2 (N-1)/N x 4P; hidden behind a backward long enough but for one unit's.
  ZeroCommunication z = zero_communication(r, 1.0, 2.0, link);
  EXPECT_DOUBLE_EQ(z.bytes, 2 * share * 4 * P);
  EXPECT_DOUBLE_EQ(z.seconds, z.bytes / link);
  EXPECT_DOUBLE_EQ(z.exposed_seconds, unit * z.seconds);
  // With no compute to hide behind, all of it is exposed (and the unit once more: it never hides).
  EXPECT_DOUBLE_EQ(zero_communication(r, 0, 0, link).exposed_seconds, (1 + unit) * z.seconds);
  // 1: and the all-gather of the bf16 parameters after the update, beside the next forward: its first unit exposed,
  // and all of it with no forward to hide behind.
  r.zero_stage = 1;
  z = zero_communication(r, 1.0, 2.0, link);
  EXPECT_DOUBLE_EQ(z.bytes, 2 * share * 4 * P + share * 2 * P);
  EXPECT_DOUBLE_EQ(z.exposed_seconds, unit * 2 * share * 4 * P / link + unit * share * 2 * P / link);
  EXPECT_DOUBLE_EQ(zero_communication(r, 0, 2.0, link).exposed_seconds,
                   unit * 2 * share * 4 * P / link + (1 + unit) * share * 2 * P / link);
  // 2 with two micro-steps: a reduce-scatter in each backward, one all-gather.
  r.zero_stage = 2;
  r.accumulation = 2;
  EXPECT_DOUBLE_EQ(zero_communication(r, 1.0, 2.0, link).bytes, 2 * share * 4 * P + share * 2 * P);
  // 3: the reduce-scatters, and the parameters gathered in every forward and every backward.
  r.zero_stage = 3;
  EXPECT_DOUBLE_EQ(zero_communication(r, 1.0, 2.0, link).bytes, 2 * (share * 4 * P + 2 * share * 2 * P));
  EXPECT_EQ(interconnect_bandwidth("nvlink"), 360e9);
  EXPECT_EQ(interconnect_bandwidth("pcie"), 25e9);
  EXPECT_EQ(interconnect_bandwidth("pcie5"), 50e9);
  EXPECT_EQ(interconnect_bandwidth("nvlink5"), 720e9);
  EXPECT_EQ(interconnect_bandwidth("nvlink3"), 240e9);
  EXPECT_THROW(interconnect_bandwidth("infiniband"), Error);
}

TEST(ZeroPlan, ExposedCommunicationSlowsTheRunAndTheBudgetSearchKeepsTheStage) {
  PlanTarget target;
  target.link_bandwidth = 25e9;
  const Recipe r = recipe(preset("llama3.2-1b"), 8, 2048);
  const MemoryPlan one = plan_memory(r, target), eight = plan_memory(on_gpus(r, 8, 0), target);
  EXPECT_LT(eight.predicted_tokens_per_s, 8 * one.predicted_tokens_per_s);
  EXPECT_GT(eight.predicted_tokens_per_s, one.predicted_tokens_per_s);
  const MemoryPlan chosen = choose_plan(on_gpus(r, 8, 3), 8 * 8 * 2048, 16.0 * (1 << 30), target);
  EXPECT_EQ(chosen.recipe.zero_stage, 3);
  EXPECT_EQ(chosen.recipe.world_size, 8);
  EXPECT_EQ(int64_t(chosen.recipe.batch) * chosen.recipe.accumulation, 8);
}

// Data parallelism offloads a rank's slice of the gradients, which ZeRO 2 and 3 keep and 0 and 1 do not: the budget
// search tries gradient offload on N GPUs (and on one rank of a communicator) only at those stages; the host then
// holds 1/N of the gradients.
TEST(ZeroPlan, GradientOffloadIsTriedUnderZero2And3Only) {
  const PlanTarget target;
  const ModelConfig cfg = preset("llama3.2-1b");
  const double P = double(ParamLayout::build(cfg).total);
  for (int world : {1, 4})
    for (int k = 0; k <= 3; k++) {
      SCOPED_TRACE(fmt::format("{} ranks, ZeRO {}", world, k));
      Recipe r = on_gpus(recipe(cfg, 8, 2048), world, k);
      r.data_parallel = true;
      EXPECT_EQ(r.gradient_offload_allowed(), k >= 2);
      int offloaded = 0;
      for (const MemoryPlan& p : plan_candidates(r, int64_t(8) * 2048 * world, target)) {
        if (!p.recipe.offload_gradients) continue;
        offloaded++;
        for (const PlanRow& row : p.rows)
          if (row.component == "parameter gradients (host)")
            EXPECT_NEAR(row.bytes, 4 * P / world, 4.0 * 256 * (cfg.n_layers + 2));  // the units padded to 256 x N
      }
      EXPECT_EQ(offloaded > 0, k >= 2);
    }
  // One process, not data-parallel: its whole gradients may go.
  EXPECT_TRUE(recipe(cfg, 8, 2048).gradient_offload_allowed());
}

// --memory-budget on N GPUs (choose_zero_stage): a model whose optimizer state dwarfs its activations (1B parameters,
// micro-batches of 2 x 64 tokens), four micro-steps a step, over PCIe, where each higher stage moves more bytes than
// the one below it and is predicted slower at the same setting. A budget that holds ZeRO k's fastest setting (and no
// lower stage's smallest) then picks k, from 0 to 3 in order; a budget below every stage's smallest footprint is an
// error naming it; --zero limits the search to its stage.
TEST(ZeroPlan, TheBudgetPicksTheLowestStageThatFitsWhenNothingIsFaster) {
  PlanTarget target;
  target.link_bandwidth = interconnect_bandwidth("pcie");
  target.host_memory_limit = 1;  // no offload: each stage's memory is what it shards
  Recipe base = on_gpus(recipe(preset("llama3.2-1b"), 2, 64), 4, 0);
  base.accumulation = 4;
  const int64_t global = int64_t(2) * 64 * 4 * 4;
  const std::vector<Recipe> stages = zero_stage_recipes(base, -1);
  ASSERT_EQ(stages.size(), 4u);
  double fastest_setting[4], smallest[4], smallest_offloaded = 0;
  for (int k = 0; k <= 3; k++) {
    EXPECT_EQ(stages[size_t(k)].zero_stage, k);
    fastest_setting[k] = plan_memory(stages[size_t(k)], target).total_bytes;
    smallest[k] = fastest_setting[k];
    for (const MemoryPlan& p : plan_candidates(stages[size_t(k)], global, target)) {
      if (p.host_bytes == 0) smallest[k] = std::min(smallest[k], p.total_bytes);
      else if (k == 3 && (smallest_offloaded == 0 || p.total_bytes < smallest_offloaded)) smallest_offloaded = p.total_bytes;
    }
  }
  for (int k = 0; k <= 3; k++) {
    SCOPED_TRACE(k);
    if (k > 0) ASSERT_LT(fastest_setting[k], smallest[k - 1]);  // the budget below holds no lower stage
    const StageChoice c = choose_zero_stage(stages, global, fastest_setting[k], target);
    EXPECT_EQ(c.plan.recipe.zero_stage, k) << c.why;
    EXPECT_EQ(c.plan.recipe.batch, 2);
    EXPECT_EQ(c.plan.recipe.accumulation, 4);
    EXPECT_LE(c.plan.total_bytes, fastest_setting[k]);
    EXPECT_NE(c.why.find(fmt::format("ZeRO {} ", k)), std::string::npos) << c.why;
    if (k > 0) EXPECT_NE(c.why.find(fmt::format("ZeRO {} does not fit", k - 1)), std::string::npos) << c.why;
  }
  // The smallest footprint of all is ZeRO 3's with the optimizer state offloaded (which the host limit refuses).
  ASSERT_GT(smallest_offloaded, 0);
  ASSERT_LT(smallest_offloaded, smallest[3]);
  try {
    choose_zero_stage(stages, global, 0.9 * smallest_offloaded, target);
    ADD_FAILURE() << "a budget below every stage's smallest footprint was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("does not fit in " + format_bytes(0.9 * smallest_offloaded) + " per GPU"), std::string::npos)
        << what;
    EXPECT_NE(what.find("the smallest footprint tried is " + format_bytes(smallest_offloaded)), std::string::npos)
        << what;
    EXPECT_NE(what.find("ZeRO 3 on 4 GPUs"), std::string::npos) << what;
  }
  // --zero 1 given: only stage 1, even where ZeRO 0 fits; and where it does not fit, its own error.
  const std::vector<Recipe> given = zero_stage_recipes(base, 1);
  ASSERT_EQ(given.size(), 1u);
  EXPECT_EQ(choose_zero_stage(given, global, fastest_setting[0], target).plan.recipe.zero_stage, 1);
  EXPECT_THROW(choose_zero_stage(given, global, fastest_setting[2], target), Error);
  // FP8 linears work at every stage: an FP8 recipe chooses among all four.
  Recipe fp8 = base;
  fp8.backend.precision.fp8 = true;
  EXPECT_EQ(zero_stage_recipes(fp8, -1).size(), 4u);
}

// The lowest stage that fits is not always chosen: over NVLink, with one micro-step a step, the planner predicts a
// higher stage faster (its optimizer step is 1/N and its collectives hide behind the backward), and the choice is the
// fastest stage's fastest setting.
TEST(ZeroPlan, TheBudgetPicksAHigherStageThatIsPredictedFaster) {
  PlanTarget target;
  target.host_memory_limit = 1;
  const Recipe base = on_gpus(recipe(preset("llama3.2-1b"), 8, 2048), 8, 0);
  const std::vector<Recipe> stages = zero_stage_recipes(base, -1);
  const double budget = 80.0 * (1ull << 30);
  const StageChoice c = choose_zero_stage(stages, 8 * 8 * 2048, budget, target);
  EXPECT_GT(c.plan.recipe.zero_stage, 0) << c.why;
  for (const Recipe& r : stages)
    EXPECT_GE(c.plan.predicted_tokens_per_s, choose_plan(r, 8 * 8 * 2048, budget, target).predicted_tokens_per_s);
}

}  // namespace
}  // namespace tk
