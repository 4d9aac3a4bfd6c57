// The advice rules. Each returns nothing when its cause is not measurable in this profile, else one
// Advice whose payoff is the share of the step (or of each token's time) its change is estimated to
// save, and whose detail gives the measurements the estimate comes from.
#include "profile/profile_advice.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "core/format.h"
#include "core/fs.h"
#include "plan/memory_plan.h"

namespace tk {
namespace {

// Below this share of the step a change is not worth a line.
constexpr double kMinPayoffPct = 1.0;
// A full micro-batch gets the matmuls to at least this share of the measured ceiling (the 8192^3 GEMM
// reaches 1 by definition; the block linears of a well-fed model reach 0.6-0.9 of it).
constexpr double kFilledMatmulShare = 0.5;

double pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

struct Sum {
  double ms = 0, flops = 0, bytes = 0;
  double flops_per_s() const { return ms > 0 ? flops / (ms * 1e-3) : 0; }
  double bytes_per_s() const { return ms > 0 ? bytes / (ms * 1e-3) : 0; }
};

template <class Pred>
Sum sum_ops(const std::vector<OpRow>& ops, Pred pred) {
  Sum s;
  for (const OpRow& r : ops)
    if (pred(r)) {
      s.ms += r.ms;
      s.flops += r.flops;
      s.bytes += r.bytes;
    }
  return s;
}

std::optional<Advice> data_wait(const AdviceInputs& in) {
  const double step = in.totals.step_ms, wait = in.totals.data_wait_ms;
  if (pct(wait, step) < kMinPayoffPct) return std::nullopt;
  const bool slow = fs::is_slow_mount(in.mount_type);
  std::string detail = fmt::format(
      "{:.1f} ms of the {:.1f} ms step ({:.1f}%) is spent blocked waiting for the data loader. The data in {} is on a "
      "{} mount",
      wait, step, pct(wait, step), in.data_dir, in.mount_type);
  detail += slow ? ": a network or VM-shared filesystem, which reads far slower than a local disk. Copy the data "
                   "directory to a local disk (e.g. ~/data) and pass that as --data."
                 : ": the loader's background thread does not keep up with the step. Check the disk's read rate and "
                   "what else keeps the CPU cores busy.";
  return Advice{"Data: the step waits for the loader", pct(wait, step), detail};
}

// The GEMMs: the linear layers and the LM head (whose three GEMMs are nearly all of its work).
bool is_gemm(const OpRow& r) { return r.category == OpCategory::Matmul || r.category == OpCategory::Loss; }

std::optional<Advice> small_micro_batch(const AdviceInputs& in) {
  const int64_t rows = int64_t(in.micro_batch) * in.seq;
  const Sum mm = sum_ops(in.ops, is_gemm);
  if (rows >= matmul_fill_rows(in.gpu) || mm.ms <= 0 || in.ceilings.matmul_flops <= 0) return std::nullopt;
  const double share = mm.flops_per_s() / in.ceilings.matmul_flops;
  if (share >= kFilledMatmulShare) return std::nullopt;
  // Were the matmuls at kFilledMatmulShare of the ceiling, their time would shrink by this much.
  const double saved = mm.ms * (1.0 - share / kFilledMatmulShare);
  if (pct(saved, in.totals.step_ms) < kMinPayoffPct) return std::nullopt;
  std::string detail = fmt::format(
      "--batch {} x --seq {} gives each matmul {} rows, fewer than the {} that fill this {}. The matmuls (linear "
      "layers and LM head) run at {}, "
      "{:.1f}% of the measured {} ceiling, and take {:.1f}% of the step; at {:.0f}% of the ceiling they would save "
      "{:.1f}% of it. Raise --batch (fewer accumulation steps keep the global batch: --batch-tokens)",
      in.micro_batch, in.seq, rows, matmul_fill_rows(in.gpu), in.gpu ? "GPU" : "CPU",
      format_flop_rate(mm.flops_per_s(), in.gpu), 100 * share, format_flop_rate(in.ceilings.matmul_flops, in.gpu),
      pct(mm.ms, in.totals.step_ms), 100 * kFilledMatmulShare, pct(saved, in.totals.step_ms));
  if (in.free_memory_bytes > 0 && in.micro_batch > 0)
    detail += fmt::format("; {} of memory is free, and each row of the micro-batch takes about {} of activations",
                          format_bytes(in.free_memory_bytes), format_bytes(in.activation_bytes / in.micro_batch));
  detail += ".";
  return Advice{"Micro-batch too small to fill the matmuls", pct(saved, in.totals.step_ms), detail};
}

// Memory-bound ops of the model (host transfers and buffer clears aside) against the copy ceiling: the
// time they would save at the ceiling's bandwidth.
std::optional<Advice> memory_bound(const AdviceInputs& in) {
  if (in.ceilings.copy_bytes_per_s <= 0) return std::nullopt;
  auto pred = [](const OpRow& r) { return !r.compute_bound && r.category != OpCategory::Memory && r.bytes > 0; };
  const Sum mb = sum_ops(in.ops, pred);
  const double at_ceiling_ms = mb.bytes / in.ceilings.copy_bytes_per_s * 1e3;
  const double saved = std::max(0.0, mb.ms - at_ceiling_ms);
  if (pct(saved, in.totals.step_ms) < kMinPayoffPct) return std::nullopt;
  std::string largest;
  int listed = 0;
  for (const OpRow& r : in.ops) {  // in.ops is sorted by time
    if (!pred(r) || listed == 3) continue;
    largest += fmt::format("{}{} {:.1f}% of the step at {:.0f}% of the bandwidth", listed ? "; " : "", r.name,
                           100 * r.share, 100 * r.ceiling_share);
    listed++;
  }
  const double share = mb.bytes_per_s() / in.ceilings.copy_bytes_per_s;
  std::string detail = fmt::format(
      "Ops bound by memory take {:.1f}% of the step and move {} per step at {:.1f} GB/s, {:.1f}% of the "
      "measured copy bandwidth ({:.1f} GB/s); at that bandwidth they would save {:.1f}% of the step. Largest: {}. {}",
      pct(mb.ms, in.totals.step_ms), format_bytes(mb.bytes), mb.bytes_per_s() / 1e9, 100 * share,
      in.ceilings.copy_bytes_per_s / 1e9, pct(saved, in.totals.step_ms), largest,
      in.gpu ? "Fusing them with the ops next to them removes whole round trips through memory."
             : "On the CPU these are the reference backend's plain loops; the CUDA backend fuses them.");
  return Advice{fmt::format("Memory-bound ops: {:.1f}% of the step at {:.0f}% of the copy bandwidth",
                            pct(mb.ms, in.totals.step_ms), 100 * share),
                pct(saved, in.totals.step_ms), detail};
}

std::optional<Advice> host_gaps(const AdviceInputs& in) {
  const double gaps = in.totals.gaps_ms, step = in.totals.step_ms;
  if (pct(gaps, step) < kMinPayoffPct) return std::nullopt;
  double calls = 0;
  for (const OpRow& r : in.ops) calls += r.calls;
  std::string detail = fmt::format(
      "{:.1f} ms of the {:.1f} ms step ({:.1f}%) runs no op: {} waits for the host between its {:.0f} op calls "
      "({:.1f} us per call). ",
      gaps, step, pct(gaps, step), in.gpu ? "the GPU" : "the step", calls, calls > 0 ? gaps * 1e3 / calls : 0.0);
  detail += in.gpu ? "A larger micro-batch gives every launch more work; capturing the step in a CUDA graph would "
                     "remove the launch cost."
                   : "That is host work outside the ops (staging each batch, summing the loss, the optimizer's "
                     "bookkeeping); a larger micro-batch spreads it over more tokens.";
  return Advice{fmt::format("Host and launch gaps: {:.1f}% of the step runs no op", pct(gaps, step)), pct(gaps, step),
                detail};
}

// The optimizer runs once per step whatever the batch: doubling the accumulation halves its share of
// each token's time (payoff per token, not per step).
std::optional<Advice> optimizer_share(const AdviceInputs& in) {
  const Sum opt = sum_ops(in.ops, [](const OpRow& r) { return r.category == OpCategory::Optimizer; });
  const double saved_pct = pct(opt.ms, in.totals.step_ms) / 2;
  if (saved_pct < kMinPayoffPct) return std::nullopt;
  std::string detail = fmt::format(
      "AdamW and the gradient norm take {:.1f} ms, {:.1f}% of the step, once per step over every parameter, "
      "whatever the batch. Doubling --batch-tokens ({} accumulation steps instead of {}) halves their share of each "
      "token's time, saving {:.1f}% per token (a larger global batch changes the recipe: retune --lr).",
      opt.ms, pct(opt.ms, in.totals.step_ms), 2 * in.accumulation_steps, in.accumulation_steps, saved_pct);
  return Advice{fmt::format("Optimizer: {:.1f}% of every step", pct(opt.ms, in.totals.step_ms)), saved_pct, detail};
}

// Recompute is needless when the memory it saves is free anyway.
std::optional<Advice> recompute(const AdviceInputs& in) {
  const double r = in.totals.recompute_ms;
  if (pct(r, in.totals.step_ms) < kMinPayoffPct) return std::nullopt;
  if (in.recompute_saved_bytes > 0 && in.free_memory_bytes < 1.1 * in.recompute_saved_bytes) return std::nullopt;
  std::string detail = fmt::format(
      "Recomputing activations in the backward (--recompute {}) costs {:.1f} ms, {:.1f}% of the step; keeping them "
      "would take {} more, and {} of memory is free: run with --recompute none (or a lighter policy; `tokamak plan` "
      "shows each one's memory).",
      in.recompute, r, pct(r, in.totals.step_ms), format_bytes(in.recompute_saved_bytes),
      format_bytes(in.free_memory_bytes));
  return Advice{"Recompute costs time while memory is free", pct(r, in.totals.step_ms), detail};
}

// --fp8 runs the linear layers' GEMMs (not the LM head) on FP8 tensor cores: faster GEMMs less the casts of
// their operands (kFp8GemmSpeedup, kFp8CastBytesPerGemmByte in memory_plan.h), which is why narrow models gain
// little.

// The linear layers' ops, and the milliseconds a step casting their operands to FP8 takes (current scaling) at
// the copy rate (0 when it was not measured).
struct LinearCast {
  Sum lin;
  double cast_ms = 0;
};
LinearCast linear_cast(const AdviceInputs& in) {
  LinearCast c;
  c.lin = sum_ops(in.ops, [](const OpRow& r) {
    return r.category == OpCategory::Matmul && (r.name == "linear_forward" || r.name == "linear_backward" ||
                                                r.name == "swiglu_linear_forward" || r.name == "swiglu_linear_backward" ||
                                                r.name == "rmsnorm_linear_forward");
  });
  if (in.ceilings.copy_bytes_per_s > 0)
    c.cast_ms = 1e3 * kFp8CastBytesPerGemmByte * c.lin.bytes / in.ceilings.copy_bytes_per_s;
  return c;
}

std::optional<Advice> fp8(const AdviceInputs& in) {
  if (!in.gpu || !in.fp8_tensor_cores || in.fp8) return std::nullopt;
  const auto [lin, current_cast_ms] = linear_cast(in);
  const double cast_ms = current_cast_ms * kFp8DelayedCastShare;  // --fp8 scales by delayed scaling by default
  const double saved_ms = lin.ms * (1 - 1 / kFp8GemmSpeedup) - cast_ms;
  const double saved_pct = pct(saved_ms, in.totals.step_ms);
  if (saved_pct < kMinPayoffPct) return std::nullopt;
  std::string detail = fmt::format(
      "The linear layers' GEMMs take {:.1f}% of the step at {}; this GPU has FP8 tensor cores. With --fp8 they "
      "would run ~{:.1f}x faster, less ~{:.1f} ms a step to cast their operands: about {:.1f}% of the step saved. "
      "FP8 rounds each operand to 3 (e4m3) or 2 (e5m2) mantissa bits: compare a few hundred steps' loss with the "
      "bf16 run before relying on it.",
      pct(lin.ms, in.totals.step_ms), format_flop_rate(lin.flops_per_s(), true), kFp8GemmSpeedup, cast_ms, saved_pct);
  return Advice{"FP8 linears (--fp8): this GPU has FP8 tensor cores", saved_pct, detail};
}

// --fp8 with current scaling reads every operand twice: once for its maximum, once to cast it. Delayed scaling
// takes the scale from the last steps' maxima, which the casts record as they go, so the first read goes
// (kFp8DelayedCastShare of the cast bytes are left).
std::optional<Advice> fp8_delayed(const AdviceInputs& in) {
  if (!in.gpu || !in.fp8 || in.fp8_delayed) return std::nullopt;
  const double cast_ms = linear_cast(in).cast_ms;
  const double saved_ms = cast_ms * (1 - kFp8DelayedCastShare);
  const double saved_pct = pct(saved_ms, in.totals.step_ms);
  if (saved_pct < kMinPayoffPct) return std::nullopt;
  std::string detail = fmt::format(
      "Casting the linears' operands to FP8 takes ~{:.1f} ms a step, of which ~{:.1f} ms is the pass over each "
      "operand for its maximum. --fp8-scaling delayed scales each operand by its largest maximum over the last 16 "
      "steps, which the casts record as they go, and saves that pass: about {:.1f}% of the step (a cast past its "
      "scale is done again with the tensor's own maximum). FP8 rounds differently from current scaling: compare "
      "a few hundred steps' loss on your run before relying on it (bench/NOTES.md has the 300-step comparison).",
      cast_ms, saved_ms, saved_pct);
  return Advice{"FP8 delayed scaling (--fp8-scaling delayed): no pass for each operand's maximum", saved_pct, detail};
}

// --fp8-lm-head, once the linears are in FP8: the LM head's three GEMMs (their FLOPs at the GEMM ceiling, within the
// loss op's time) at kFp8LmHeadGemmSpeedup times the rate, less its casts' bytes at the copy rate. Large where the
// vocabulary is large against the model (a fifth of Qwen2.5-0.5B's GEMM work).
std::optional<Advice> fp8_lm_head(const AdviceInputs& in) {
  if (!in.gpu || !in.fp8 || in.fp8_lm_head || !in.lm_head_fp8_shape || in.ceilings.matmul_flops <= 0)
    return std::nullopt;
  const Sum head = sum_ops(in.ops, [](const OpRow& r) { return r.name == "lm_head_cross_entropy"; });
  const double gemm_ms = std::min(head.ms, 1e3 * head.flops / in.ceilings.matmul_flops);
  const double cast_ms =
      in.ceilings.copy_bytes_per_s > 0 ? 1e3 * in.lm_head_cast_bytes / in.ceilings.copy_bytes_per_s : 0;
  const double saved_ms = gemm_ms * (1 - 1 / kFp8LmHeadGemmSpeedup) - cast_ms;
  const double saved_pct = pct(saved_ms, in.totals.step_ms);
  if (saved_pct < kMinPayoffPct) return std::nullopt;
  std::string detail = fmt::format(
      "The LM head takes {:.1f}% of the step, ~{:.1f} ms of it in its GEMMs, which --fp8 leaves in bf16. "
      "--fp8-lm-head runs them in FP8 as well (~{:.1f}x faster, less ~{:.1f} ms a step of casts): about {:.1f}% of "
      "the step saved. The logits are then made from e4m3 operands and their gradients rounded to e5m2: compare a "
      "few hundred steps' loss with the --fp8 run before relying on it (bench/NOTES.md has the 300-step comparison).",
      pct(head.ms, in.totals.step_ms), gemm_ms, kFp8LmHeadGemmSpeedup, cast_ms, saved_pct);
  return Advice{"The LM head in FP8 (--fp8-lm-head)", saved_pct, detail};
}

// Attention on the GPU below the rate an attention kernel can reach: kAttainableAttentionShare of the measured matmul
// ceiling. cuDNN's forward runs at 0.39 of it at head dim 64 on the H200, tokamak's own backward (faster than cuDNN's
// there) at 0.21 (bench/NOTES.md), and published Hopper kernels run both passes above 0.4 at head dim 128. A pass well
// below it is a kernel to improve, which the user cannot do (not actionable), but a shorter --seq cuts attention's
// work per token.
constexpr double kAttainableAttentionShare = 0.4;

std::optional<Advice> attention(const AdviceInputs& in) {
  if (!in.gpu || in.ceilings.matmul_flops <= 0) return std::nullopt;
  const double attainable = kAttainableAttentionShare * in.ceilings.matmul_flops;
  double saved = 0;
  std::string passes;
  for (const OpRow& r : in.ops) {
    if (r.category != OpCategory::Attention || r.flops <= 0) continue;
    saved += std::max(0.0, r.ms - r.flops / attainable * 1e3);
    const double rate = r.flops / (r.ms * 1e-3);
    passes += fmt::format("{}{} {:.1f} ms at {:.0f} TFLOP/s ({:.0f}% of the ceiling)", passes.empty() ? "" : "; ",
                          r.name, r.ms, rate / 1e12, pct(rate, in.ceilings.matmul_flops));
  }
  if (pct(saved, in.totals.step_ms) < kMinPayoffPct) return std::nullopt;
  const Sum all = sum_ops(in.ops, [](const OpRow& r) { return r.category == OpCategory::Attention; });
  std::string detail = fmt::format(
      "Attention takes {:.1f} ms, {:.1f}% of the step: {}, against the matmul ceiling of {:.0f} TFLOP/s. At {:.0f}% of "
      "that ceiling, which published attention kernels reach on current GPUs, it would save {:.1f}% of the step. The "
      "kernel is tokamak's to make faster; meanwhile attention's work per token grows with the sequence, so a shorter "
      "--seq (now {}) reduces it in proportion.",
      all.ms, pct(all.ms, in.totals.step_ms), passes, in.ceilings.matmul_flops / 1e12, 100 * kAttainableAttentionShare,
      pct(saved, in.totals.step_ms), in.seq);
  return Advice{fmt::format("A faster attention kernel: attention is {:.1f}% of the step at {:.0f}% of the matmul "
                            "ceiling", pct(all.ms, in.totals.step_ms), pct(all.flops_per_s(), in.ceilings.matmul_flops)),
                pct(saved, in.totals.step_ms), detail, /*actionable=*/false};
}

// A GPU whose temperature limit held its clock down: every kernel ran slower in proportion, so the step at the
// maximum clock would be up to that much shorter (less where memory, not the clock, bounds an op). The power limit
// holds the clock down on most GPUs in training too (docs/profile.md), but that is the card's design, not a change
// to make; heat is the owner's to fix.
std::optional<Advice> hot_gpu(const AdviceInputs& in) {
  const ClockSummary& c = in.clocks;
  if (c.limit() != ClockLimit::Temperature) return std::nullopt;
  const double saved_pct = 100 * (1 - c.clock_share());
  if (saved_pct < kMinPayoffPct) return std::nullopt;
  return Advice{
      fmt::format("Cooling: the GPU's temperature limit held its clock at {:.0f}% of its maximum", 100 * c.clock_share()),
      saved_pct,
      fmt::format("The SM clock averaged {:.0f} MHz of its {:.0f} MHz maximum, held back by the temperature limit (or a "
                  "hardware slowdown) in {:.0f}% of the samples, at up to {:.0f} C. Every kernel runs in proportion to "
                  "the clock, so a cooler GPU would take up to {:.1f}% off the step: more airflow through the case, "
                  "clean fans and heatsink, a cooler room.",
                  c.sm_mhz_mean, c.max_sm_mhz, 100 * c.thermal_share, c.temperature_c_max, saved_pct)};
}

// Communication that no rank hides: the least exposed time of any rank (collectives the compute waited for, and host
// gathers), per step. The ranks with more also wait for slower ranks (their loader, or more compute), which is not
// the communication's own cost; a slow loader has its own rule (slow_rank_loader).
std::optional<Advice> exposed_communication(const AdviceInputs& in) {
  if (!in.communication) return std::nullopt;
  const ProfileCommunication& c = *in.communication;
  const std::vector<RankStepTimes>& ranks = c.per_step.ranks;
  if (ranks.empty()) return std::nullopt;
  auto exposed_ms = [](const RankStepTimes& t) { return (t.comm_exposed_s + t.comm_host_s) * 1e3; };
  size_t least = 0, most = 0;
  for (size_t r = 1; r < ranks.size(); r++) {
    if (exposed_ms(ranks[r]) < exposed_ms(ranks[least])) least = r;
    if (exposed_ms(ranks[r]) > exposed_ms(ranks[most])) most = r;
  }
  const double cost = exposed_ms(ranks[least]), step = in.totals.step_ms;
  if (pct(cost, step) < kMinPayoffPct) return std::nullopt;
  const RankStepTimes& first = ranks.front();
  std::string detail = fmt::format(
      "{} {:.1f} ms of the {:.1f} ms step ({:.1f}%) for communication that the compute does not hide (exposed "
      "collectives and host gathers{}); rank 0's collectives take {:.1f} ms a step, {:.1f} ms of them exposed, and its "
      "host gathers {:.1f} ms.",
      ranks.size() > 1 ? "Every rank waits at least" : "The step waits", cost, step, pct(cost, step),
      ranks.size() > 1 ? fmt::format(", rank {} the least", least) : "", first.comm_s * 1e3,
      first.comm_exposed_s * 1e3, first.comm_host_s * 1e3);
  if (pct(exposed_ms(ranks[most]) - cost, step) >= kMinPayoffPct)
    detail += fmt::format(" Rank {} waits {:.1f} ms: the difference is time it waits for slower ranks.", most,
                          exposed_ms(ranks[most]));
  const int a = in.accumulation_steps, n = c.world_size();
  if (c.zero_stage <= 1)
    detail += fmt::format(
        " The gradients are all-reduced once a step, in the backward of each rank's last micro-batch ({} a step){}: "
        "more accumulation ({} micro-batches a rank instead of {}: --batch-tokens twice as large) spreads the same "
        "communication over twice the tokens (a larger global batch changes the recipe: retune --lr).",
        a, c.zero_stage == 1 ? ", and the updated parameters all-gathered after the optimizer" : "", 2 * a, a);
  else
    detail += fmt::format(
        " The gradients are reduce-scattered in every micro-batch's backward{}: a larger --batch, with fewer "
        "micro-batches for the same global batch ({} a rank now), moves them fewer times; ZeRO {} moves {} once a step "
        "instead, where its memory fits (`tokamak plan --gpus {} --zero {}` shows it).",
        c.zero_stage == 3 ? " and the parameters all-gathered before each use, forward and backward" : "", a,
        c.zero_stage - 1, c.zero_stage == 3 ? "the parameters" : "the gradients", n, c.zero_stage - 1);
  detail += c.communicator == "mpi"
                ? " On the CPU the MPI communicator runs each collective on the thread that computes, so none of it "
                  "overlaps the compute; NCCL on GPUs overlaps it with the backward."
                : " What the compute still waits for moves at the interconnect's rate: NVLink within a host, "
                  "InfiniBand or Ethernet between hosts (NCCL_DEBUG=INFO names the transport NCCL chose).";
  return Advice{fmt::format("Communication: {:.1f}% of the step waits for collectives", pct(cost, step)),
                pct(cost, step), detail};
}

// A rank whose loader is slower than rank 0's: every other rank waits for it at the step's collectives, so its extra
// wait is in rank 0's step as communication (rank 0's own wait is data_wait's).
std::optional<Advice> slow_rank_loader(const AdviceInputs& in) {
  if (!in.communication || in.communication->world_size() < 2) return std::nullopt;
  const ProfileCommunication& c = *in.communication;
  const RankPeak slowest = c.slowest_loader();
  const RankStepTimes& first = c.per_step.ranks.front();
  const double extra = (slowest.seconds - first.data_wait_s) * 1e3, step = in.totals.step_ms;
  if (slowest.rank == 0 || pct(extra, step) < kMinPayoffPct) return std::nullopt;
  const std::string detail = fmt::format(
      "Rank {} waits {:.1f} ms a step for its next batches, rank 0 {:.1f} ms: the other ranks wait for it at the "
      "step's collectives, where its wait shows as their communication ({:.1f} ms a step exposed on rank 0, host "
      "gathers included), {:.1f}% of the step. Its loader's background thread does not keep up: check the read rate "
      "of {} on rank {}'s host (rank 0 reads it from a {} mount) and what else keeps that host's cores busy.",
      slowest.rank, slowest.seconds * 1e3, first.data_wait_s * 1e3, (first.comm_exposed_s + first.comm_host_s) * 1e3,
      pct(extra, step), in.data_dir, slowest.rank, in.mount_type);
  return Advice{fmt::format("Data: rank {}'s loader is the slowest, {:.1f} ms a step behind rank 0's", slowest.rank,
                            extra),
                pct(extra, step), detail};
}

// What makes an op of each kind smaller, in words, for the op that takes the largest share of the step.
std::string what_reduces(const OpRow& op, const AdviceInputs& in) {
  const Sum gemms = sum_ops(in.ops, is_gemm);
  if (op.name == "lm_head_cross_entropy")
    return fmt::format(
        "It is the LM head's GEMMs over the vocabulary ({} tokens) and the softmax: {:.0f}% of the step's matmul "
        "FLOPs, in proportion to the vocabulary. A smaller vocabulary reduces it in proportion: a tokenizer of your "
        "data (`tokamak train-tokenizer --vocab-size N`) and data prepared with it, whose vocabulary a model trained "
        "from scratch takes{}",
        in.vocab_size, pct(op.flops, gemms.flops),
        in.gpu ? "; on the GPU, a larger --logits-chunk passes over the f32 LM-head gradient fewer times, and "
                 "--fp8-lm-head (with --fp8, on FP8 tensor cores) runs its GEMMs in FP8."
               : ".");
  switch (op.category) {
    case OpCategory::Matmul:
      return fmt::format("The linear layers' GEMMs, at {:.0f}% of the matmul ceiling: a micro-batch of at least {} "
                         "rows (--batch x --seq) fills them{}; a narrower model has fewer.",
                         100 * op.ceiling_share, matmul_fill_rows(in.gpu),
                         in.gpu ? ", and --fp8 runs them on FP8 tensor cores where the GPU has them" : "");
    case OpCategory::Attention:
      return fmt::format("Attention's work per token grows with the sequence: a shorter --seq (now {}) reduces it in "
                         "proportion.",
                         in.seq);
    case OpCategory::Optimizer:
      return "It runs once per step over every parameter, whatever the batch: a larger global batch (--batch-tokens) "
             "spreads it over more tokens; --offload optimizer moves it to the host, where it is slower.";
    case OpCategory::Loss:
      return "The loss over the vocabulary: a smaller vocabulary reduces it in proportion.";
    case OpCategory::Memory:
      return "Copies and clears of buffers: a larger micro-batch spreads them over more tokens.";
    default:
      return in.gpu ? "It is bound by memory: fusing it with the ops next to it removes round trips through memory."
                    : "On the CPU it is the reference backend's plain loop; the CUDA backend fuses such ops.";
  }
}

}  // namespace

int64_t matmul_fill_rows(bool gpu) { return gpu ? 8192 : 1024; }

std::vector<Advice> rank_advice(const AdviceInputs& in) {
  std::vector<Advice> out;
  for (auto rule : {data_wait, slow_rank_loader, exposed_communication, small_micro_batch, memory_bound, host_gaps,
                    optimizer_share, recompute, fp8, fp8_delayed, fp8_lm_head, attention, hot_gpu})
    if (std::optional<Advice> a = rule(in)) out.push_back(std::move(*a));
  std::stable_sort(out.begin(), out.end(), [](const Advice& a, const Advice& b) {
    if (a.actionable != b.actionable) return a.actionable;
    return a.payoff_pct > b.payoff_pct;
  });
  return out;
}

std::optional<Advice> largest_share(const AdviceInputs& in) {
  const OpRow* top = nullptr;
  for (const OpRow& r : in.ops)
    if (!top || r.ms > top->ms) top = &r;
  if (!top || top->ms <= 0 || pct(top->ms, in.totals.step_ms) < kLargestShareShownPct) return std::nullopt;
  return Advice{fmt::format("Largest share: {} takes {:.1f}% of the step", top->name, pct(top->ms, in.totals.step_ms)),
                pct(top->ms, in.totals.step_ms), what_reduces(*top, in)};
}

}  // namespace tk
