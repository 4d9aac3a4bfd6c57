// The memory plan and the budget search (memory_plan.h). The model's own buffers come from
// model_memory(), the very function the Model allocates by, so those rows are exact by construction; the
// CUDA backend's workspaces follow its sizing rules (the LM head's logits chunk, cuDNN's dP workspace in
// row groups under 1 GiB or, where tokamak's own attention backward runs, its dQ sums, the staging buffer,
// cuBLASLt's workspace); two rows are estimates: cuDNN's
// workspace (its own figure runs 6-12% over the B*Hq*T^2 bf16 the groups are sized by) and the CUDA
// context with the libraries' kernels.
#include "train/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <unistd.h>
#include <cctype>
#include <cmath>

#include "core/error.h"
#include "core/format.h"
#include "model/params.h"
#include "ops/cuda/attention_schedule.h"
#include "ops/moment_codec.h"

namespace tk {
namespace {

constexpr double kAttentionGroupBudget = 1024.0 * (1 << 20);  // CudnnAttention::kBackwardWorkspaceBudget
constexpr double kCudnnWorkspaceMargin = 1.10;                // cuDNN's figure over the estimate (NOTES.md)
constexpr double kStagingBytes = 64.0 * (1 << 20);            // CudaOps' f32 staging buffer
constexpr double kCublasWorkspace = 32.0 * (1 << 20);
constexpr double kCudaContext = 600.0 * (1 << 20);            // context, cuBLAS/cuDNN handles and kernels
constexpr double kSmallScratch = 8.0 * (1 << 20);             // norm/grad-norm partials, RoPE table, sort buffers

// The rows of a logits chunk within `budget` bytes of bf16 logits (cuda::lm_head_chunk_rows' rule).
int64_t logits_chunk_rows(int64_t N, int64_t V, double budget) {
  const int64_t fit = int64_t(budget / (double(V) * 2));
  return std::min<int64_t>(std::max<int64_t>(128, fit / 128 * 128), N);
}

// The largest divisor of B whose dP workspace fits the group budget (CudnnAttention's rule).
int attention_group(int B, int heads, int T) {
  const double per_row = double(heads) * double(T) * double(T) * 2;
  int group = 1;
  for (int g = 1; g <= B; g++)
    if (B % g == 0 && g * per_row <= kAttentionGroupBudget) group = g;
  return group;
}

// Seconds per token: the GEMMs at the target's efficiency (lower for small micro-batches, whose GEMMs
// do not fill the GPU), the memory-bound ops at its bandwidth, the optimizer once per global batch.
double seconds_per_token(const ModelConfig& c, int B, int T, int accumulation, const Recompute& r,
                         const PlanTarget& t) {
  const double model = c.flops_per_token(T), redo = r.flops_per_token(c, T);
  const double N = double(B) * T;
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
  if (t.gpu) {
    // Each chunk's weight-gradient GEMM reads and writes the f32 LM-head gradient: V d x 8 bytes a chunk
    // (bench/NOTES.md, the logits chunk: 512 MiB -> 2 GiB saved 2.2% of a 0.5B step).
    const int64_t rows = logits_chunk_rows(int64_t(N), c.vocab_size, t.logits_chunk);
    const double chunks = std::ceil(N / double(rows));
    loss_bytes += chunks * 8.0 * double(c.vocab_size) * d / N;
  }
  const double P = double(ParamLayout::build(c).total);
  // AdamW reads the gradient, reads and writes m, v and the master weight, writes the bf16 weight; then the
  // gradient norm and zeroing.
  const double adamw_bytes = 4 + 2 * moment_bytes_per_param(t.moments) + 8 + 2;
  const double optimizer_bytes = P * (adamw_bytes + 8);
  const double tokens_per_step = N * accumulation;
  // The causal attention's FLOPs (flops_per_token's 6 L T q: forward 2 L T q, backward twice that, and the
  // forward again when recomputed) at its own rates; the rest at the GEMMs'.
  const double attn_fwd = 2.0 * L * T * c.q_dim(), attn_redo = (r.block || r.attention) ? attn_fwd : 0.0;
  double matmul_s = (model - 3 * attn_fwd + redo - attn_redo) / (t.peak_flops * eff) +
                    (attn_fwd + attn_redo) / (t.peak_flops * t.attention_forward_efficiency) +
                    2 * attn_fwd / (t.peak_flops * t.attention_backward_efficiency);
  double cast_bytes = 0;
  if (t.fp8) {
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
    cast_bytes = t.fp8_delayed ? L * (norm_x + 6 * q + down_x + 4 * (qkv + 2 * d) + 6 * W / N)
                               : L * (10 * (2 * d + q + f) + 6 * (qkv + 2 * d + 2 * f) + 10 * W / N);
    if (t.fp8_lm_head && fp8_lm_head_applies(c, int64_t(N))) {
      // --fp8-lm-head: the LM head's three GEMMs (6 V d a token) at its FP8 rate too, and its casts.
      matmul_s -= 6 * double(c.vocab_size) * d * (1 - 1 / kFp8LmHeadGemmSpeedup) / (t.peak_flops * eff);
      cast_bytes += fp8_lm_head_cast_bytes(c, N, t.fp8_delayed) / N;
    }
  }
  return matmul_s + (L * layer_bytes + loss_bytes + cast_bytes) / t.bandwidth +
         optimizer_bytes / t.bandwidth / tokens_per_step;
}

std::vector<Recompute> policies() {
  return {Recompute::parse("none"),
          Recompute::parse("swiglu"),
          Recompute::parse("norm,swiglu"),
          Recompute::parse("norm,swiglu,attention"),
          Recompute::parse("norm,swiglu,attention,qkv"),
          Recompute::parse("block")};
}

std::string human(double bytes) { return format_bytes(bytes); }

}  // namespace

MemoryPlan plan_memory(const ModelConfig& cfg, int B, int T, int accumulation, const Recompute& r,
                       const PlanTarget& target, bool offload, bool offload_grads) {
  MemoryPlan p;
  p.offload = (offload || offload_grads) && target.gpu;
  p.offload_grads = offload_grads && target.gpu;
  p.B = B;
  p.T = T;
  p.accumulation = accumulation;
  p.recompute = r;
  ModelOptions o;
  o.B = B;
  o.T = T;
  o.recompute = r;
  o.offload_grads = p.offload_grads;
  o.fp8_kept_inputs = target.gpu && target.fp8 && target.fp8_delayed;  // as the trainer sets it
  const DType act = target.gpu ? DType::BF16 : DType::F32;
  for (const auto& [label, bytes] : model_memory(cfg, o, act, DType::F32)) p.rows.push_back({label, double(bytes)});
  const int64_t params = ParamLayout::build(cfg).total;
  const double P = double(params);
  // The optimizer's allocations (AdamW's constructor): m and v in their precision, int8's block scales.
  p.moments = target.moments;
  const bool int8 = target.moments == MomentPrecision::Int8;
  const double moment_bytes = int8 ? 1.0 : target.moments == MomentPrecision::BF16 ? 2.0 : 4.0;
  auto scale_bytes = [](int64_t n) { return 2.0 * 4.0 * double(moment_blocks(n)); };  // m's and v's
  if (p.offload) {
    // AdamW's state in host memory; on the device two chunks of each stream through (AdamW::offloaded_update).
    const int64_t chunk = std::min(offload_chunk_elements(target.offload_chunk), params);
    p.rows.push_back({"fp32 master weights (host)", P * 4, true, true});
    p.rows.push_back({"AdamW first moments (host)", P * moment_bytes, true, true});
    p.rows.push_back({"AdamW second moments (host)", P * moment_bytes, true, true});
    if (int8) p.rows.push_back({"AdamW int8 block scales (host)", scale_bytes(params), true, true});
    p.rows.push_back({"offload staging: m chunks", 2 * double(chunk) * moment_bytes});
    p.rows.push_back({"offload staging: v chunks", 2 * double(chunk) * moment_bytes});
    if (int8) p.rows.push_back({"offload staging: int8 block scale chunks", 2 * scale_bytes(chunk)});
    p.rows.push_back({"offload staging: master weight chunks", 2 * double(chunk) * 4});
    if (p.offload_grads) {
      p.rows.push_back({"parameter gradients (host)", P * 4, true, true});
      p.rows.push_back({"offload staging: gradient chunks", 2 * double(chunk) * 4});
    }
  } else {
    if (target.gpu) p.rows.push_back({"fp32 master weights", P * 4});
    p.rows.push_back({"AdamW first moments", P * moment_bytes});
    p.rows.push_back({"AdamW second moments", P * moment_bytes});
    if (int8) p.rows.push_back({"AdamW int8 block scales", scale_bytes(params)});
  }
  if (target.gpu) {
    const int64_t N = int64_t(B) * T;
    p.logits_chunk = target.logits_chunk;
    p.rows.push_back({"LM head logits chunk", double(logits_chunk_rows(N, cfg.vocab_size, target.logits_chunk)) *
                                                  double(cfg.vocab_size) * 2});
    if (target.fp8) {
      // CudaOps' FP8 operands of one linear's backward (x^T, dy, dy^T, w^T; one byte an element), the largest
      // of qkv, o, gate+up and down: in the buffer that holds the logits chunk in the LM head (the larger size).
      const double d = cfg.d_model, f = cfg.ffn_dim, q = cfg.q_dim(), qkv = cfg.qkv_dim();
      double fp8 = 0;
      for (auto [in, out] : {std::pair{d, qkv}, {q, d}, {d, 2 * f}, {f, d}})
        fp8 = std::max(fp8, double(N) * (in + 2 * out) + in * out);
      // With the inputs kept at one byte (ModelOptions::fp8_kept_inputs), the first step's forward of the norms'
      // and SwiGLU's linears: x as is, w, and x in bf16 scratch.
      if (o.fp8_kept_inputs)
        for (auto [in, out] : {std::pair{d, qkv}, {d, 2 * f}, {f, d}}) fp8 = std::max(fp8, double(N) * 3 * in + in * out);
      // With --fp8-lm-head the chunk's FP8 operands come after it: the dlogits as is and transposed, the weight
      // as is and transposed, the chunk's x as is and transposed (CudaOps::lm_head_cross_entropy).
      if (target.fp8_lm_head && fp8_lm_head_applies(cfg, N)) {
        const double rows = double(logits_chunk_rows(N, cfg.vocab_size, target.logits_chunk)), V = cfg.vocab_size;
        p.rows.back().bytes = rows * V * 4 + 2 * V * d + 2 * rows * d;
      }
      p.rows.back() = {"LM head logits chunk / FP8 operands (shared)", std::max(fp8, p.rows.back().bytes)};
    }
    if (!target.doc_mask && cuda::attn_schedule::runs(T, cfg.head_dim, target.own_attention_sms)) {
      p.rows.push_back({"attention backward dQ sums, row sums and turns",
                        double(cuda::attn_schedule::scratch_layout(B, T, cfg.n_heads).total)});
    } else {
      const int g = attention_group(B, cfg.n_heads, T);
      p.rows.push_back({"cuDNN attention workspace",
                        kCudnnWorkspaceMargin * g * double(cfg.n_heads) * double(T) * double(T) * 2, false});
      p.rows.push_back({"cuDNN attention row sums", double(g) * cfg.n_heads * T * 4});
    }
    if (target.doc_mask) {
      // The bias [B, T, T rounded up to 8] bf16, and the segment ids it was built from plus a flag per row.
      p.rows.push_back({"attention document mask", double(N) * double((T + 7) / 8 * 8) * 2});
      p.rows.push_back({"attention document mask segment ids", double(N + B) * 4});
    }
    p.rows.push_back({"f32 staging", std::min(kStagingBytes, P * 4)});
    p.rows.push_back({"cuBLASLt workspace", kCublasWorkspace});
    p.rows.push_back({"kernel partials, RoPE table, sort buffers", kSmallScratch, false});
    p.rows.push_back({"CUDA context and library kernels", kCudaContext, false});
  }
  std::stable_sort(p.rows.begin(), p.rows.end(), [](const PlanRow& a, const PlanRow& b) { return a.bytes > b.bytes; });
  for (const PlanRow& row : p.rows) (row.host ? p.host_bytes : p.total_bytes) += row.bytes;
  p.recompute_flops_per_token = r.flops_per_token(cfg, T);
  double s = seconds_per_token(cfg, B, T, accumulation, r, target);
  // Offload: master, m and v (and the gradients) go up and come back once per update, the two directions
  // overlapping each other (and the chunks' updates) but not the forward and backward.
  if (p.offload)
    s += (4 + moment_bytes_per_param(target.moments) + (p.offload_grads ? 4 : 0)) * P / target.host_bandwidth /
         (double(B) * T * accumulation);
  // Gradient offload: each micro-step takes every gradient down (and, after the first, brings it up first),
  // overlapping the backward only in part: counted in full, plus the host's gradient norm.
  if (p.offload_grads) s += (4 * P * (accumulation > 1 ? 2 : 1) / target.host_bandwidth) / (double(B) * T) +
                            4 * P / target.host_bandwidth / (double(B) * T * accumulation);
  p.predicted_tokens_per_s = 1.0 / s;
  return p;
}

std::vector<MemoryPlan> plan_candidates(const ModelConfig& cfg, int max_B, int T, int64_t global_tokens,
                                        const PlanTarget& target) {
  std::vector<MemoryPlan> out;
  for (int B = max_B; B >= 1; B /= 2) {
    const int64_t micro = int64_t(B) * T;
    if (global_tokens % micro != 0) continue;
    const int accumulation = int(global_tokens / micro);
    std::vector<double> chunks = {target.logits_chunk};
    if (target.gpu && target.choose_logits_chunk)
      chunks.assign(std::begin(kLogitsChunkChoices), std::end(kLogitsChunkChoices));
    for (double chunk : chunks) {
      PlanTarget t = target;
      t.logits_chunk = chunk;
      for (const Recompute& r : policies()) {
        out.push_back(plan_memory(cfg, B, T, accumulation, r, t, false));
        if (t.gpu) out.push_back(plan_memory(cfg, B, T, accumulation, r, t, true));
        if (t.gpu) out.push_back(plan_memory(cfg, B, T, accumulation, r, t, true, true));
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const MemoryPlan& a, const MemoryPlan& b) {
    return a.predicted_tokens_per_s > b.predicted_tokens_per_s;
  });
  return out;
}

MemoryPlan choose_plan(const ModelConfig& cfg, int max_B, int T, int64_t global_tokens, double budget_bytes,
                       const PlanTarget& target) {
  const std::vector<MemoryPlan> all = plan_candidates(cfg, max_B, T, global_tokens, target);
  TK_CHECK(!all.empty(), "no micro-batch of at most {} rows of {} tokens divides the global batch of {} tokens",
           max_B, T, global_tokens);
  for (const MemoryPlan& p : all)
    if (p.fits(budget_bytes, target)) return p;
  const MemoryPlan* smallest = &all[0];
  for (const MemoryPlan& p : all)
    if (p.total_bytes < smallest->total_bytes) smallest = &p;
  if (smallest->total_bytes <= budget_bytes)  // only the host memory stood in the way
    fail("{} fits {} on the device only by offloading, which needs {} of page-locked host memory (micro-batch {} x "
         "{}, recompute {}, offload {}, {} moments); this machine allows {} (80% of its memory); {}more host memory "
         "would be needed",
         cfg.name, human(budget_bytes), human(smallest->host_bytes), smallest->B, smallest->T,
         smallest->recompute.describe(), smallest->offload_name(), moments_name(target.moments),
         human(target.host_memory_limit),
         target.moments == MomentPrecision::Int8 ? "" : "narrower optimizer moments (--moments bf16 or int8) or ");
  const PlanRow* top = nullptr;  // the largest part on the device
  for (const PlanRow& r : smallest->rows)
    if (!r.host && (!top || r.bytes > top->bytes)) top = &r;
  fail("{} does not fit in {}: the smallest footprint tried is {} (micro-batch {} x {}, recompute {}), of which {} "
       "is the largest part ({}); a larger budget or a shorter --seq would be needed",
       cfg.name, human(budget_bytes), human(smallest->total_bytes), smallest->B, smallest->T,
       smallest->recompute.describe() + (smallest->offload ? ", offload " + smallest->offload_name() : ""), top->component,
       human(top->bytes));
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

std::string format_plan(const MemoryPlan& p, double budget_bytes) {
  std::string out = fmt::format("micro-batch {} x {} tokens, {} accumulation step(s), recompute {}, offload {}, "
                                "{} moments\n",
                                p.B, p.T, p.accumulation, p.recompute.describe(), p.offload_name(),
                                moments_name(p.moments));
  for (const PlanRow& r : p.rows) {
    if (r.host) continue;
    out += fmt::format("  {:>11}  {:>5.1f}%  {}{}\n", human(r.bytes), 100.0 * r.bytes / p.total_bytes, r.component,
                       r.exact ? "" : " (estimate)");
  }
  out += fmt::format("  {:>11}  total on the device{}\n", human(p.total_bytes),
                     budget_bytes > 0 ? fmt::format(" (budget {})", human(budget_bytes)) : "");
  double host = 0;
  for (const PlanRow& r : p.rows)
    if (r.host) host += r.bytes;
  if (host > 0)
    out += fmt::format("  {:>11}  in page-locked host memory ({})\n", human(host),
                       p.offload_grads ? "optimizer state, gradients" : "optimizer state");
  out += fmt::format("predicted: {:.0f} tokens/s{}\n", p.predicted_tokens_per_s,
                     p.recompute_flops_per_token > 0
                         ? fmt::format(" (recompute adds {:.2f} GFLOP per token)", p.recompute_flops_per_token / 1e9)
                         : "");
  return out;
}

}  // namespace tk
