// What one step keeps of each layer's activations for the backward, and what it recomputes instead (the recompute
// policy, ModelOptions::recompute): the buffers a model carves for a step, the FP8 inputs it keeps, and the memory
// they add up to (model_memory, which the planner reads without allocating).
#pragma once
#include <vector>

#include "model/block.h"
#include "model/buffer_carver.h"
#include "model/model.h"

namespace tk {

struct StepBuffers {
  // Per layer, what its forward keeps for its backward; an activation that the policy recomputes is instead the one
  // layer's worth of scratch that all layers share.
  std::vector<BlockActivations> layers;
  Tensor h_out;       // [N, d] residual stream after the last layer: the final norm's input
  Tensor x_final;     // [N, d] final norm output: the LM head's input
  Tensor rstd_final;  // [N]
  Tensor branch;      // [N, d] output of o_proj, then of down_proj, before its residual add
  Tensor losses;      // [N]
  Tensor dh;          // [N, d] gradient of the residual stream
  BlockGradScratch grad;  // the blocks' gradient scratch, reused by every layer
  // The batch's ids.
  Tensor tokens, targets, positions, segments;  // i32 [N]
};

// Which of a layer's activations the backward recomputes (the rest are kept per layer).
Recomputed recomputed(const Recompute& r);

// `c` carves what the forward keeps for the backward; `s` the gradient scratch, the branch, the ids and
// the one layer's worth of recomputed activations that all layers share.
StepBuffers plan_buffers(BufferCarver& c, BufferCarver& s, const ModelConfig& cfg, const ModelOptions& opt, DType act,
                     DType stat);

// The label of the accumulated gradients' allocation on the device (model_memory's and the ledger's row).
const char* gradient_label(const ModelOptions& opt);

}  // namespace tk
