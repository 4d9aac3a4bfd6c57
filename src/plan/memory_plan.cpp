// The memory plan and the budget search (memory_plan.h). The model's own buffers come from
// model_memory(), the very function the Model allocates by, with the recipe's ModelOptions, so those rows are exact
// by construction; the CUDA backend's workspaces come from its own sizing rules (ops/cuda/workspace_sizes.h: the
// LM head's logits chunk and the FP8 operands that share its buffer, cuDNN's dP workspace in row groups, the
// staging buffer, cuBLASLt's workspace; ops/cuda/attention_schedule.h: the scratch of tokamak's own attention
// backward). Two rows are estimates: cuDNN's workspace (its own figure runs 6-12% over the B*Hq*T^2 bf16 the
// groups are sized by) and the CUDA context with the libraries' kernels.
#include "plan/memory_plan.h"
#include "plan/flag_values.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/format.h"
#include "model/params.h"
#include "ops/cuda/attention_schedule.h"
#include "ops/cuda/workspace_sizes.h"
#include "ops/moment_codec.h"

namespace tk {
namespace {

constexpr double kCudnnWorkspaceMargin = 1.10;                // cuDNN's figure over the estimate (NOTES.md)
constexpr double kCudaContext = 600.0 * (1 << 20);            // context, cuBLAS/cuDNN handles and kernels
constexpr double kSmallScratch = 8.0 * (1 << 20);             // norm/grad-norm partials, RoPE table, sort buffers

// Seconds per token of one GPU: the GEMMs at the target's efficiency (lower for small micro-batches, whose GEMMs
// do not fill the GPU), the memory-bound ops at its bandwidth, the optimizer (its shard under ZeRO 1-3) once per
// optimizer step.
StepTimes compute_times(const Recipe& rc, const PlanTarget& t) {
  const ModelConfig& c = rc.model;
  const Recompute& r = rc.recompute;
  const MatmulPrecision& precision = rc.backend.precision;
  const int T = rc.seq;
  const double model = c.flops_per_token(T), redo = r.flops_per_token(c, T);
  const double N = double(rc.micro_tokens());
  const double eff = t.matmul_efficiency * N / (N + 1024.0);
  const double d = c.d_model, f = c.ffn_dim, qkv = c.qkv_dim(), L = c.n_layers;
  double layer_bytes = 32 * d + 16 * f + 8 * qkv;  // norms, SwiGLU and RoPE, forward and backward (bf16)
  if (r.block) {
    layer_bytes += 16 * d + 6 * f + 4 * qkv;
  } else {
    if (r.norm) layer_bytes += 16 * d;
    if (r.swiglu) layer_bytes += 6 * f;
    if (r.qkv) layer_bytes += 4 * qkv;
  }
  double loss_bytes = 3.0 * c.vocab_size * 2;
  if (rc.gpu) {
    // Each chunk's weight-gradient GEMM reads and writes the f32 LM-head gradient: V d x 8 bytes a chunk
    // (bench/NOTES.md, the logits chunk: 512 MiB -> 2 GiB saved 2.2% of a 0.5B step).
    const int64_t rows = cuda::lm_head_chunk_rows(rc.micro_tokens(), c.vocab_size, rc.logits_chunk_bytes());
    const double chunks = std::ceil(N / double(rows));
    loss_bytes += chunks * 8.0 * double(c.vocab_size) * d / N;
  }
  const double P = double(ParamLayout::build(c).total);
  // AdamW reads the gradient, reads and writes m, v and the master weight, writes the bf16 weight; then the
  // gradient norm and zeroing.
  const double adamw_bytes = 4 + 2 * moment_bytes_per_param(rc.optimizer.moments) + 8 + 2;
  const double optimizer_bytes = P * (adamw_bytes + 8) / (rc.zero_stage >= 1 ? rc.world_size : 1);
  const double tokens_per_step = N * rc.accumulation;
  // The causal attention's FLOPs (flops_per_token's 6 L T q: forward 2 L T q, backward twice that, and the
  // forward again when recomputed) at its own rates; the rest at the GEMMs'.
  const double attn_fwd = 2.0 * L * T * c.q_dim(), attn_redo = (r.block || r.attention) ? attn_fwd : 0.0;
  const double attn_rate = t.peak_flops * attention_sequence_factor(T);
  double matmul_s = (model - 3 * attn_fwd + redo - attn_redo) / (t.peak_flops * eff) +
                    (attn_fwd + attn_redo) / (attn_rate * t.attention_forward_efficiency) +
                    2 * attn_fwd / (attn_rate * t.attention_backward_efficiency);
  double cast_bytes = 0;
  if (precision.fp8 && rc.linears_fp8_shapes()) {
    // --fp8: the linears' GEMMs (forward and backward, 6 FLOPs a weight a token) at kFp8GemmSpeedup times the
    // bf16 rate, plus their operands' casts: per token 10 bytes an input feature (x: amax and cast, forward
    // and backward), 6 an output feature (dy: amax and the cast as is and transposed); per micro-step 10 a
    // weight. bench/NOTES.md, FP8 linears: 80.4k tok/s predicted for llama3.2-1b (with the LM head's gradient
    // traffic), 80.7k measured.
    const double q = c.q_dim(), W = d * qkv + q * d + d * 2 * f + f * d;
    const double linear = 6 * L * W;
    matmul_s -= linear * (1 - 1 / kFp8GemmSpeedup) / (t.peak_flops * eff);
    // Delayed scaling (--fp8-scaling delayed): no amax pass, so 6, 4 and 6 bytes (bench/NOTES.md, delayed
    // scaling: 84.1k measured for llama3.2-1b); SwiGLU's output and gradient are cast as they are computed, so
    // the down projection's x costs only its backward's transposed cast (4 bytes: the forward cast's read goes)
    // and the gate/up projection's dy nothing (swiglu_backward writes its FP8 forms where it wrote bf16). When
    // SwiGLU's output is kept (not recomputed), the forward writes that transpose in its place, 1 byte where the
    // bf16 output took 2, and the backward casts nothing for it: -1 byte instead of 4.
    const double down_x = (r.swiglu || r.block) ? 4 * f : -f;
    // The same for the norms' outputs (x of the qkv and gate/up projections) when neither they nor those linears
    // are recomputed: cast both ways from the norm's input (2 read, 2 written) in place of the bf16 output's 2
    // bytes, nothing in the backward: 2 bytes instead of 6.
    const double norm_x = (r.norm || r.block || r.qkv) ? 6 * 2 * d : 2 * 2 * d;
    cast_bytes = precision.delayed ? L * (norm_x + 6 * q + down_x + 4 * (qkv + 2 * d) + 6 * W / N)
                               : L * (10 * (2 * d + q + f) + 6 * (qkv + 2 * d + 2 * f) + 10 * W / N);
    if (precision.lm_head && rc.lm_head_fp8_shapes()) {
      // --fp8-lm-head: the LM head's three GEMMs (6 V d a token) at its FP8 rate too, and its casts.
      matmul_s -= 6 * double(c.vocab_size) * d * (1 - 1 / kFp8LmHeadGemmSpeedup) / (t.peak_flops * eff);
      cast_bytes += fp8_lm_head_cast_bytes(c, N, precision.delayed) / N;
    }
  }
  // ZeRO 2, 3: each micro-step zeroes every unit's f32 staging and copies the rank's slice into it
  // (model/grad_staging.h; the reduce-scatter writes the sum back into the slice itself), 4 P + 8 P / N bytes.
  const double staging_bytes = rc.zero_stage >= 2 ? (4 * P + 8 * P / rc.world_size) / N : 0.0;
  StepTimes times;
  times.matmul = matmul_s;
  times.memory = (L * layer_bytes + loss_bytes + cast_bytes + staging_bytes) / t.bandwidth;
  times.optimizer = optimizer_bytes / t.bandwidth / tokens_per_step;
  return times;
}

std::vector<Recompute> policies() {
  return {parse_recompute("none"),
          parse_recompute("swiglu"),
          parse_recompute("norm,swiglu"),
          parse_recompute("norm,swiglu,attention"),
          parse_recompute("norm,swiglu,attention,qkv"),
          parse_recompute("block")};
}

std::string human(double bytes) { return format_bytes(bytes); }

}  // namespace

namespace {

// The CUDA backend's transient buffer with --fp8 (workspace_sizes.h): the largest of the LM head's chunk (with its
// FP8 operands after it under --fp8-lm-head), the FP8 operands of each linear's backward (qkv, o, gate+up, down),
// and with the inputs kept at one byte (ModelOptions::fp8_kept_inputs) the first step's forward of the norms' and
// SwiGLU's linears (x, w, and x in bf16 scratch).
double fp8_transient_bytes(const Recipe& r, int64_t chunk_rows) {
  const ModelConfig& c = r.model;
  const int64_t N = r.micro_tokens(), V = c.vocab_size, d = c.d_model, f = c.ffn_dim;
  const int64_t q = c.q_dim(), qkv = c.qkv_dim();
  const bool fp8_head = r.backend.precision.fp8_lm_head() && r.lm_head_fp8_shapes();
  size_t bytes = fp8_head ? cuda::transient_bytes(cuda::fp8_lm_head_parts(chunk_rows, V, d, true, true))
                          : cuda::logits_chunk_bytes(chunk_rows, V);
  for (auto [in, out] : {std::pair{d, qkv}, {q, d}, {d, 2 * f}, {f, d}})
    bytes = std::max(bytes, cuda::transient_bytes(cuda::fp8_backward_parts(N, in, out, true, true)));
  if (r.keeps_fp8_inputs())
    for (auto [in, out] : {std::pair{d, qkv}, {d, 2 * f}, {f, d}})
      bytes = std::max(bytes, cuda::transient_bytes(cuda::fp8_kept_forward_parts(N, in, out, true)));
  return double(bytes);
}

// ZeRO 3 (memory_plan.h): the model's parameters as one GPU holds them. (ZeRO 2 and 3's gradients, a slice and the
// staging, are model_memory's own rows: the recipe's model options carry them.)
void shard_model_rows(MemoryPlan& p) {
  const Recipe& r = p.recipe;
  if (r.zero_stage < 3 || r.world_size <= 1) return;
  const double n = r.world_size, unit = zero_unit_elements(r.model), P = double(ParamLayout::build(r.model).total);
  for (PlanRow& row : p.rows) {
    if (row.component != "parameters") continue;
    const double element = row.bytes / P;  // the row's bytes per parameter
    row.bytes = element * (P / n + 2 * unit);
    row.component = fmt::format("parameters: a 1/{} shard and two units gathered (ZeRO-3)", r.world_size);
  }
}

// The optimizer's allocations (AdamW's constructor): m and v in their precision, int8's block scales; the fp32
// master weights on the GPU; offloaded, all of it in host memory and two chunks of each streaming through the
// device (AdamW::offloaded_update), with the gradients when they are offloaded too.
void add_optimizer_rows(MemoryPlan& p) {
  const Recipe& r = p.recipe;
  const int64_t shards = r.zero_stage >= 1 ? r.world_size : 1;  // ZeRO 1-3: each GPU's 1/N of the state
  // The layout the run builds (its units padded for the stage and the moments): ZeRO 1-3 divide it evenly.
  const int64_t params = ParamLayout::build(r.model, r.model_options().unit_multiple).total / shards;
  const double P = double(params);
  const MomentPrecision moments = r.optimizer.moments;
  const bool int8 = moments == MomentPrecision::Int8;
  const double moment_bytes = int8 ? 1.0 : moments == MomentPrecision::BF16 ? 2.0 : 4.0;
  auto scale_bytes = [](int64_t n) { return 2.0 * 4.0 * double(moment_blocks(n)); };  // m's and v's
  if (r.optimizer.offload) {
    const int64_t chunk = std::min(offload_chunk_elements(r.optimizer.offload_chunk), params);
    p.rows.push_back({"fp32 master weights (host)", P * 4, true, true});
    p.rows.push_back({"AdamW first moments (host)", P * moment_bytes, true, true});
    p.rows.push_back({"AdamW second moments (host)", P * moment_bytes, true, true});
    if (int8) p.rows.push_back({"AdamW int8 block scales (host)", scale_bytes(params), true, true});
    p.rows.push_back({"offload staging: m chunks", 2 * double(chunk) * moment_bytes});
    p.rows.push_back({"offload staging: v chunks", 2 * double(chunk) * moment_bytes});
    if (int8) p.rows.push_back({"offload staging: int8 block scale chunks", 2 * scale_bytes(chunk)});
    p.rows.push_back({"offload staging: master weight chunks", 2 * double(chunk) * 4});
    if (r.offload_gradients) {
      p.rows.push_back({"parameter gradients (host)", P * 4, true, true});
      p.rows.push_back({"offload staging: gradient chunks", 2 * double(chunk) * 4});
    }
  } else {
    if (r.gpu) p.rows.push_back({"fp32 master weights", P * 4});
    p.rows.push_back({"AdamW first moments", P * moment_bytes});
    p.rows.push_back({"AdamW second moments", P * moment_bytes});
    if (int8) p.rows.push_back({"AdamW int8 block scales", scale_bytes(params)});
  }
}

// The CUDA backend's own buffers, by its sizing rules.
void add_cuda_rows(MemoryPlan& p, const PlanTarget& target) {
  const Recipe& r = p.recipe;
  const ModelConfig& cfg = r.model;
  const int B = r.batch, T = r.seq;
  const int64_t N = r.micro_tokens();
  const int64_t chunk_rows = cuda::lm_head_chunk_rows(N, cfg.vocab_size, r.logits_chunk_bytes());
  if (r.backend.precision.fp8)
    p.rows.push_back({"LM head logits chunk / FP8 operands (shared)", fp8_transient_bytes(r, chunk_rows)});
  else
    p.rows.push_back({"LM head logits chunk", double(cuda::logits_chunk_bytes(chunk_rows, cfg.vocab_size))});
  if (!r.doc_mask && cuda::attn_schedule::runs(T, cfg.head_dim, target.own_attention_sms)) {
    p.rows.push_back({"attention backward dQ sums, row sums and turns",
                      double(cuda::attn_schedule::scratch_layout(B, T, cfg.n_heads).total)});
  } else {
    const double g = double(cuda::attention_backward_batch_group(B, cfg.n_heads, T));
    p.rows.push_back({"cuDNN attention workspace",
                      kCudnnWorkspaceMargin * g * double(cuda::attention_backward_dp_bytes_per_row(cfg.n_heads, T)),
                      false});
    p.rows.push_back({"cuDNN attention row sums", g * cfg.n_heads * T * 4});
  }
  if (r.doc_mask) {
    // The bias [B, T, T rounded up to 8] bf16, and the segment ids it was built from plus a flag per row.
    p.rows.push_back({"attention document mask", double(N) * double((T + 7) / 8 * 8) * 2});
    p.rows.push_back({"attention document mask segment ids", double(N + B) * 4});
  }
  p.rows.push_back({"f32 staging", double(cuda::staging_bytes(ParamLayout::build(cfg).total))});
  p.rows.push_back({"cuBLASLt workspace", double(cuda::kCublasWorkspaceBytes)});
  p.rows.push_back({"kernel partials, RoPE table, sort buffers", kSmallScratch, false});
  p.rows.push_back({"CUDA context and library kernels", kCudaContext, false});
}

}  // namespace

MemoryPlan plan_memory(const Recipe& recipe, const PlanTarget& target) {
  MemoryPlan p;
  Recipe& r = p.recipe;
  r = recipe;
  r.optimizer.offload = (recipe.optimizer.offload || recipe.offload_gradients) && recipe.gpu;
  r.offload_gradients = recipe.offload_gradients && recipe.gpu;
  if (r.gpu) r.backend.logits_chunk_bytes = recipe.logits_chunk_bytes();
  const DType act = r.gpu ? DType::BF16 : DType::F32;
  for (const auto& [label, bytes] : model_memory(r.model, r.model_options(), act, DType::F32))
    p.rows.push_back({label, double(bytes)});
  shard_model_rows(p);
  add_optimizer_rows(p);
  if (r.gpu) add_cuda_rows(p, target);
  std::stable_sort(p.rows.begin(), p.rows.end(), [](const PlanRow& a, const PlanRow& b) { return a.bytes > b.bytes; });
  for (const PlanRow& row : p.rows) (row.host ? p.host_bytes : p.total_bytes) += row.bytes;
  p.recompute_flops_per_token = r.recompute.flops_per_token(r.model, r.seq);
  const double P = double(ParamLayout::build(r.model).total), tokens = double(r.micro_tokens());
  const double state = r.zero_stage >= 1 ? P / r.world_size : P, grads = r.zero_stage >= 2 ? P / r.world_size : P;
  const double step_tokens = tokens * r.accumulation;
  p.time = compute_times(r, target);
  // Offload: master, m and v (and the gradients) go up and come back once per update, the two directions
  // overlapping each other (and the chunks' updates) but not the forward and backward.
  if (r.optimizer.offload)
    p.time.offload += ((4 + moment_bytes_per_param(r.optimizer.moments)) * state +
                       (r.offload_gradients ? 4 : 0) * grads) / target.host_bandwidth / step_tokens;
  // Gradient offload: each micro-step takes every gradient down (and, after the first, brings it up first),
  // overlapping the backward only in part: counted in full, plus the host's gradient norm.
  if (r.offload_gradients)
    p.time.offload += (4 * grads * (r.accumulation > 1 ? 2 : 1) / target.host_bandwidth) / tokens +
                      4 * grads / target.host_bandwidth / step_tokens;
  // A micro-step's forward is a third of its compute, the backward two thirds (the FLOPs' split).
  const double micro_s = (p.time.matmul + p.time.memory) * tokens;
  p.communication = zero_communication(r, micro_s / 3, 2 * micro_s / 3, target.link_bandwidth);
  p.time.communication = p.communication.exposed_seconds / step_tokens;
  p.predicted_tokens_per_s = r.gpu ? r.world_size / p.time.total() : 0.0;
  return p;
}

std::vector<MemoryPlan> plan_candidates(const Recipe& base, int64_t global_tokens, const PlanTarget& target) {
  std::vector<MemoryPlan> out;
  std::vector<MatmulPrecision> precisions = {base.backend.precision};
  if (target.try_fp8 && base.gpu) {
    const bool delayed = base.backend.precision.delayed;
    const int margin = base.backend.precision.margin;  // --fp8-margin, as the run would take it
    precisions = {MatmulPrecision{}, MatmulPrecision{true, delayed, margin, false},
                  MatmulPrecision{true, delayed, margin, true}};
  }
  for (int B = base.batch; B >= 1; B /= 2) {
    const int64_t micro = int64_t(B) * base.seq * base.world_size;
    if (global_tokens % micro != 0) continue;
    std::vector<size_t> chunks = {base.logits_chunk_bytes()};
    if (base.gpu && target.choose_logits_chunk)
      chunks.assign(std::begin(kLogitsChunkChoices), std::end(kLogitsChunkChoices));
    for (size_t chunk : chunks)
      for (const Recompute& policy : policies())
        for (const MatmulPrecision& precision : precisions) {
          Recipe r = base;
          r.batch = B;
          r.accumulation = int(global_tokens / micro);
          r.recompute = policy;
          r.backend.logits_chunk_bytes = chunk;
          r.backend.precision = precision;
          // FP8 only where the backend runs it: the linears' shapes, and the LM head's for its variant.
          if (precision.fp8 && (!r.linears_fp8_shapes() || (precision.lm_head && !r.lm_head_fp8_shapes()))) continue;
          for (const char* offload : {"none", "optimizer", "optimizer,gradients"}) {
            // Data parallelism offloads a rank's slice of the gradients, which only ZeRO 2 and 3 keep.
            if (!r.gradient_offload_allowed() && std::string(offload) == "optimizer,gradients") continue;
            r.set_offload(offload);
            out.push_back(plan_memory(r, target));
            if (!r.gpu) break;  // the CPU offloads nothing
          }
        }
  }
  std::stable_sort(out.begin(), out.end(), [](const MemoryPlan& a, const MemoryPlan& b) {
    return a.predicted_tokens_per_s > b.predicted_tokens_per_s;
  });
  return out;
}

namespace {

// The first candidate (fastest first) that fits, or nullptr.
const MemoryPlan* fastest_fitting(const std::vector<MemoryPlan>& all, double budget_bytes, const PlanTarget& target) {
  for (const MemoryPlan& p : all)
    if (p.fits(budget_bytes, target)) return &p;
  return nullptr;
}

// None of `all` (not empty) fits: the smallest footprint, what of it is largest, and what would be needed.
[[noreturn]] void refuse_to_fit(const std::vector<MemoryPlan>& all, double budget_bytes, const PlanTarget& target) {
  const MemoryPlan* smallest = &all[0];
  for (const MemoryPlan& p : all)
    if (p.total_bytes < smallest->total_bytes) smallest = &p;
  const Recipe& r = smallest->recipe;
  const MomentPrecision moments = r.optimizer.moments;
  const std::string stage = r.world_size > 1 ? fmt::format(", ZeRO {} on {} GPUs", r.zero_stage, r.world_size) : "";
  if (smallest->total_bytes <= budget_bytes)  // only the host memory stood in the way
    fail("{} fits {} on the device only by offloading, which needs {} of page-locked host memory{} (micro-batch {} x "
         "{}, recompute {}, offload {}, {} moments{}); {}; {}more host memory would be needed",
         r.model.name, human(budget_bytes), human(smallest->host_bytes_of_all_gpus()),
         r.world_size > 1 ? fmt::format(" for its {} GPUs", r.world_size) : "", r.batch, r.seq, r.recompute.describe(),
         r.offload_name(), moments_name(moments), stage,
         target.host_memory_limit_given
             ? fmt::format("--host-memory allows {}", human(target.host_memory_limit))
             : fmt::format("this machine allows {} (80% of its memory)", human(target.host_memory_limit)),
         moments == MomentPrecision::Int8 ? "" : "narrower optimizer moments (--moments bf16 or int8) or ");
  const PlanRow* top = nullptr;  // the largest part on the device
  for (const PlanRow& row : smallest->rows)
    if (!row.host && (!top || row.bytes > top->bytes)) top = &row;
  fail("{} does not fit in {}{}: the smallest footprint tried is {} (micro-batch {} x {}, recompute {}{}), of which {} "
       "is the largest part ({}); a larger budget or a shorter --seq would be needed",
       r.model.name, human(budget_bytes), r.world_size > 1 ? " per GPU" : "", human(smallest->total_bytes), r.batch,
       r.seq, r.recompute.describe() + (r.optimizer.offload ? ", offload " + r.offload_name() : ""), stage,
       top->component, human(top->bytes));
}

void require_candidates(const std::vector<MemoryPlan>& all, const Recipe& base, int64_t global_tokens) {
  TK_CHECK(!all.empty(), "no micro-batch of at most {} rows of {} tokens{} divides the global batch of {} tokens",
           base.batch, base.seq, base.world_size > 1 ? fmt::format(" on each of {} GPUs", base.world_size) : "",
           global_tokens);
}

}  // namespace

MemoryPlan choose_plan(const Recipe& base, int64_t global_tokens, double budget_bytes, const PlanTarget& target) {
  const std::vector<MemoryPlan> all = plan_candidates(base, global_tokens, target);
  require_candidates(all, base, global_tokens);
  if (const MemoryPlan* p = fastest_fitting(all, budget_bytes, target)) return *p;
  refuse_to_fit(all, budget_bytes, target);
}

std::vector<Recipe> zero_stage_recipes(const Recipe& base, int given) {
  std::vector<Recipe> stages;
  for (int k = 0; k <= 3; k++) {
    if (given >= 0 && k != given) continue;
    stages.push_back(base);
    stages.back().zero_stage = k;
  }
  return stages;
}

StageChoice choose_zero_stage(const std::vector<Recipe>& stages, int64_t global_tokens, double budget_bytes,
                              const PlanTarget& target) {
  TK_CHECK(!stages.empty(), "internal error: no ZeRO stage to choose from");
  std::vector<MemoryPlan> tried;  // every stage's candidates: the refusal's smallest footprint is among them
  std::vector<std::pair<int, const MemoryPlan*>> best;  // each stage's fastest that fits (nullptr: none)
  std::vector<std::vector<MemoryPlan>> per_stage;
  for (const Recipe& r : stages) {
    per_stage.push_back(plan_candidates(r, global_tokens, target));
    require_candidates(per_stage.back(), r, global_tokens);
  }
  const MemoryPlan* chosen = nullptr;
  for (size_t i = 0; i < stages.size(); i++) {
    const MemoryPlan* p = fastest_fitting(per_stage[i], budget_bytes, target);
    best.emplace_back(stages[i].zero_stage, p);
    // Strictly faster only: on a tie the lower stage, listed first, keeps it (it moves fewer bytes).
    if (p && (!chosen || p->predicted_tokens_per_s > chosen->predicted_tokens_per_s)) chosen = p;
    tried.insert(tried.end(), per_stage[i].begin(), per_stage[i].end());
  }
  if (!chosen) refuse_to_fit(tried, budget_bytes, target);
  StageChoice c{*chosen, ""};
  for (const auto& [stage, p] : best) {
    if (!c.why.empty()) c.why += "; ";
    c.why += p ? fmt::format("ZeRO {} {:.0f} tokens/s", stage, p->predicted_tokens_per_s)
               : fmt::format("ZeRO {} does not fit", stage);
  }
  c.why = stages.size() == 1 ? fmt::format("--zero {} as given", stages[0].zero_stage)
                             : fmt::format("the fastest predicted: {}", c.why);
  return c;
}

double local_host_memory_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? 0.8 * double(pages) * double(page) : 0.0;
}

double parse_bytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) i++;
  TK_CHECK(i > 0, "'{}' is not a size: use e.g. 16GiB, 24GB or 800MiB", text);
  const double value = std::stod(text.substr(0, i));
  std::string unit;
  for (char ch : text.substr(i))
    if (!std::isspace(static_cast<unsigned char>(ch))) unit += char(std::tolower(static_cast<unsigned char>(ch)));
  const double Ki = 1024.0;
  if (unit.empty() || unit == "b") return value;
  if (unit == "kib" || unit == "k") return value * Ki;
  if (unit == "mib" || unit == "m") return value * Ki * Ki;
  if (unit == "gib" || unit == "g") return value * Ki * Ki * Ki;
  if (unit == "tib" || unit == "t") return value * Ki * Ki * Ki * Ki;
  if (unit == "kb") return value * 1e3;
  if (unit == "mb") return value * 1e6;
  if (unit == "gb") return value * 1e9;
  if (unit == "tb") return value * 1e12;
  fail("'{}' has an unknown unit '{}': use B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB)", text, unit);
}

std::string precision_name(const Recipe& r) {
  if (!r.gpu) return "f32";
  const MatmulPrecision& p = r.backend.precision;
  if (!p.fp8 || !r.linears_fp8_shapes()) return "bf16";
  return p.lm_head && r.lm_head_fp8_shapes() ? "fp8 (linears and LM head)" : "fp8 (linears)";
}

std::string format_speed(const MemoryPlan& p, const PlanTarget& t) {
  if (!p.recipe.gpu) return "";
  const StepTimes& s = p.time;
  const double total = s.total();
  struct Part {
    double seconds;
    std::string what;
  };
  std::vector<Part> parts = {
      {s.matmul, fmt::format("matmuls: FLOPs at {:.0f}% of {:.1f} TFLOP/s for the GEMMs, {:.1f}% / {:.1f}% for the "
                             "attention's forward / backward at sequence {}",
                             100 * t.matmul_efficiency, t.peak_flops / 1e12,
                             100 * t.attention_forward_efficiency * attention_sequence_factor(p.recipe.seq),
                             100 * t.attention_backward_efficiency * attention_sequence_factor(p.recipe.seq),
                             p.recipe.seq)},
      {s.memory, fmt::format("memory-bound ops: bytes at {:.0f} GB/s", t.bandwidth / 1e9)},
      {s.optimizer, fmt::format("the optimizer step: bytes at {:.0f} GB/s", t.bandwidth / 1e9)},
      {s.offload, fmt::format("offload transfers: bytes at {:.0f} GB/s each way", t.host_bandwidth / 1e9)},
      {s.communication,
       fmt::format("exposed communication: bytes at {:.0f} GB/s bus bandwidth", t.link_bandwidth / 1e9)}};
  std::stable_sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.seconds > b.seconds; });
  std::string out = "the step's parts, the first bounds it (efficiencies measured on the H200, memory_plan.h):\n";
  for (const Part& part : parts)
    if (part.seconds > 0) out += fmt::format("  {:>5.1f}%  {}\n", 100 * part.seconds / total, part.what);
  return out;
}

std::string format_plan(const MemoryPlan& p, double budget_bytes) {
  std::string out = fmt::format("micro-batch {} x {} tokens, {} accumulation step(s), recompute {}, offload {}, "
                                "{} moments\n",
                                p.recipe.batch, p.recipe.seq, p.recipe.accumulation, p.recipe.recompute.describe(),
                                p.recipe.offload_name(), moments_name(p.recipe.optimizer.moments));
  for (const PlanRow& r : p.rows) {
    if (r.host) continue;
    out += fmt::format("  {:>11}  {:>5.1f}%  {}{}\n", human(r.bytes), 100.0 * r.bytes / p.total_bytes, r.component,
                       r.exact ? "" : " (estimate)");
  }
  out += fmt::format("  {:>11}  total {}{}\n", human(p.total_bytes),
                     p.recipe.gpu ? "on the device" : "in the CPU's memory",
                     budget_bytes > 0 ? fmt::format(" (budget {})", human(budget_bytes)) : "");
  double host = 0;
  for (const PlanRow& r : p.rows)
    if (r.host) host += r.bytes;
  if (host > 0)
    out += fmt::format("  {:>11}  in page-locked host memory ({})\n", human(host),
                       p.recipe.offload_gradients ? "optimizer state, gradients" : "optimizer state");
  if (!p.recipe.gpu)
    return out + "no speed prediction on the CPU: the speed model is of GPUs (tokamak bench --device cpu measures a "
                 "step)\n";
  out += fmt::format("predicted: {:.0f} tokens/s{}\n", p.predicted_tokens_per_s,
                     p.recompute_flops_per_token > 0
                         ? fmt::format(" (recompute adds {:.2f} GFLOP per token)", p.recompute_flops_per_token / 1e9)
                         : "");
  return out;
}

}  // namespace tk
