// StepRecord: what one optimizer step did, as the trainer hands it to its log (run_log.h), to `tokamak profile` and
// to whoever watches a run (Trainer::on_step): the loss, the learning rate, the gradient norm, the speed, and on a GPU
// the clock and power, on many ranks each rank's communication.
#pragma once
#include <cstdint>

#include "ops/gpu_clocks.h"
#include "plan/metrics.h"
#include "train/step_communication.h"

namespace tk {

struct StepRecord {
  int64_t step = 0;
  double loss = 0;          // mean over the global batch's trained tokens (nats per token)
  int64_t trained_tokens = 0;  // the global batch's targets the loss counts (all but those a loss mask leaves out)
  double lr = 0;
  double grad_norm = 0;     // before clipping
  double clip_scale = 1;
  int64_t tokens_seen = 0;  // after this step
  double seconds = 0;       // wall time of the step
  StepMetrics metrics;
  StepCommunication communication;  // data parallel: each rank's communication and data wait; empty for one process
  ClockSummary clocks;              // the GPU's clock and power over the step (empty on the CPU, or not read)
};

}  // namespace tk
