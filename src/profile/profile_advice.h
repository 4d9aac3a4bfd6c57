// What a profile advises: one rule per cause (data wait, small micro-batch, memory-bound ops, host gaps, optimizer,
// recompute, FP8, attention below what its kernels reach, a GPU its temperature slows, and on many ranks exposed
// communication and a rank's slow loader), each estimating from the measurements how much of the step its change
// would save, sorted by that payoff; and, apart from them, the op that takes the largest share of the step and what
// would make it smaller.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "profile/profile_report.h"

namespace tk {

struct AdviceInputs {
  StepTotals totals;
  std::vector<OpRow> ops;
  Ceilings ceilings;
  bool gpu = false;
  bool fp8_tensor_cores = false;  // the GPU has them (compute capability 8.9 and later)
  bool fp8 = false;               // the run's linears already use them (--fp8)
  bool fp8_delayed = false;       // ... with --fp8-scaling delayed
  bool fp8_lm_head = false;       // ... and the LM head's GEMMs too (--fp8-lm-head)
  bool lm_head_fp8_shape = false; // the model's LM head could take them (Recipe::lm_head_fp8_shapes)
  double lm_head_cast_bytes = 0;  // what --fp8-lm-head's casts would move a step, beyond the bf16 head's
  int micro_batch = 1, seq = 1, accumulation_steps = 1;
  int64_t vocab_size = 0;          // the model's: the LM head's work is in proportion
  std::string data_dir, mount_type;
  double free_memory_bytes = 0;   // device memory free (GPU) or memory available (CPU) during the profile
  double activation_bytes = 0;    // the planned activations of one micro-batch
  std::string recompute;          // the run's recompute policy ("none" when it keeps everything)
  double recompute_saved_bytes = 0;  // what keeping everything would add to the device memory
  std::optional<ProfileCommunication> communication;  // with a communicator: every rank's, per step
  ClockSummary clocks;            // the GPU's clock over the measured steps (empty: not read)
};

// The changes by payoff, largest first; only changes expected to save a measurable share of the step.
std::vector<Advice> rank_advice(const AdviceInputs& in);

// The op that takes the largest share of the step (payoff_pct: that share) and what makes that kind of op smaller,
// named whatever it is, so that the profile says where the time goes even when no rule has a change to estimate
// for it; none below kLargestShareShownPct of the step.
inline constexpr double kLargestShareShownPct = 10.0;
std::optional<Advice> largest_share(const AdviceInputs& in);

// Micro-batches of fewer rows than this leave the matmuls short of the hardware: the M of the GEMM
// the matmul ceiling is measured with.
int64_t matmul_fill_rows(bool gpu);

}  // namespace tk
