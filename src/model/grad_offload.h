// GradientOffload (ModelOptions::offload_grads): the parameter gradients live in host memory, and each group of them
// (the embedding, each layer, the tail: the final norm and an untied LM head) is accumulated on the device in one of
// three staging buffers while its backward runs, brought up before and taken down after, on the copy queues.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/params.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace tk {

// Elements of the staging buffers: the embedding / tail one, and each of the two layer ones.
std::pair<int64_t, int64_t> gradient_stage_elements(const ModelConfig& cfg, const ParamLayout& layout);

class GradientOffload {
 public:
  // host_grads: the [P] gradient buffer in memory from Ops::allocate_host, zero.
  GradientOffload(const ModelConfig& cfg, const ParamLayout& layout, Ops& ops, const Tensor& host_grads);
  ~GradientOffload();
  GradientOffload(const GradientOffload&) = delete;
  GradientOffload& operator=(const GradientOffload&) = delete;

  // A micro-step's backward: begin_microstep, then begin_group / end_group around each group's backward (k = 0 the
  // embedding, l + 1 layer l, L + 1 the tail), then end_microstep.
  void begin_microstep();
  // Brings group k's gradients so far into its staging buffer and points its views in `g` there.
  void begin_group(size_t k, ModelWeights& g);
  // Takes group k's gradients down to host memory once the compute queue has made them.
  void end_group(size_t k);
  void end_microstep();
  // The host gradients were set to zero (Model::zero_grads): the next micro-step clears its staging instead.
  void host_zeroed() { host_grads_zero_ = true; }

 private:
  int stage_of(size_t group) const;

  const ModelConfig& cfg_;
  const ParamLayout& layout_;
  Ops& ops_;
  Tensor host_;
  std::vector<int64_t> bounds_;  // group k is [bounds_[k], bounds_[k+1]) of the layout, alignment padding included
  // [0] the embedding and tail groups, [1] and [2] the layers in turn; the download that last read each (-1: none
  // since the micro-step began).
  Tensor stage_[3];
  int stage_free_[3] = {-1, -1, -1};
  bool host_grads_zero_ = true;  // the first micro-step after zeroing clears the staging instead of bringing it up
};

}  // namespace tk
