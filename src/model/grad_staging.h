// GradientStaging: the parameter gradients accumulated somewhere other than a whole [P] buffer on the device, each
// unit's gradients written by its backward into one of three unit-sized staging buffers on the device. Three homes:
// host memory (ModelOptions::offload_grads: each unit brought up before its backward and taken down after, on the
// copy queues); this rank's slice of each unit on the device (ModelOptions::reduced_grads, ZeRO 2 and 3: the slice
// copied into its chunk of the staging buffer, which the model's GradientHook then reduces across the ranks, and the
// chunk copied back); and this rank's slice of each unit in host memory (both options: the slice brought up into its
// chunk, and the reduced chunk taken down, on the copy queues).
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

class GradientStaging {
 public:
  // Where the accumulated gradients live: `accumulated` is, for host, the [P] buffer in memory from
  // Ops::allocate_host; for slices, slice `shard` of `shards` of each unit (its elements [s n/S, (s+1) n/S) of a unit
  // of n, concatenated in unit order) on the device; for host_slices, the same slices in memory from
  // Ops::allocate_host. Zero in every case.
  enum class Home { host, slices, host_slices };
  GradientStaging(const ModelConfig& cfg, const ParamLayout& layout, Ops& ops, const Tensor& accumulated, Home home,
                  int shards = 1, int shard = 0);
  ~GradientStaging();
  GradientStaging(const GradientStaging&) = delete;
  GradientStaging& operator=(const GradientStaging&) = delete;

  // A micro-step's backward: begin_microstep, then begin_group / end_group around each group's backward (k = 0 the
  // embedding, l + 1 layer l, L + 1 the tail: the layout's units), then end_microstep.
  void begin_microstep();
  // Brings unit k's gradients so far into its staging buffer (host: all of them; slices: this rank's slice into its
  // chunk, the rest zero) and points its views in `g` there.
  void begin_group(size_t k, ModelWeights& g);
  // Host: takes unit k's gradients down to host memory once the compute queue has made them. Returns the unit's
  // staging buffer (unit_size(k) elements), which with slices the caller reduces across the ranks (GradientHook) and
  // then hands back with store_reduced(k) before the compute queue passes the next begin_group of the same buffer:
  // with three buffers, the one of unit k is next begun for unit k - 2, or (unit 0 and the tail sharing one) after
  // every layer.
  Tensor end_group(size_t k);
  // Slices: where the reduced sum of this rank's chunk of unit k goes: the unit's accumulated slice itself when it
  // lives on the device, else (in host memory) the chunk of the staging buffer, reduced in place.
  Tensor reduced_destination(size_t k) const { return home_ == Home::slices ? slice_of(k) : chunk_of(k); }
  // Slices: reduced_destination(k) holds the reduced sum once the work queued so far on the compute queue is done.
  // On the device it is the accumulated slice already; in host memory the chunk is taken down into the slice on the
  // download queue, the buffer's next begin_group waiting for it.
  void store_reduced(size_t k);
  void end_microstep();
  // The accumulated gradients were set to zero (Model::zero_grads): the next micro-step clears its staging instead of
  // bringing them in.
  void accumulated_zeroed() { accumulated_zero_ = true; }

 private:
  int stage_of(size_t group) const;
  Tensor unit_stage(size_t k) const;     // unit k's part of its staging buffer
  Tensor slice_of(size_t k) const;       // slices: unit k's slice in `accumulated_`
  Tensor chunk_of(size_t k) const;       // slices: the chunk of unit k's staging that the slice fills

  const ModelConfig& cfg_;
  const ParamLayout& layout_;
  Ops& ops_;
  Tensor accumulated_;
  Home home_;
  int shards_, shard_;
  bool on_host() const { return home_ != Home::slices; }
  // [0] the embedding and tail groups, [1] and [2] the layers in turn; in host memory: the download that last read
  // each (-1: none since the micro-step began).
  Tensor stage_[3];
  int stage_free_[3] = {-1, -1, -1};
  bool accumulated_zero_ = true;  // the first micro-step after zeroing clears the staging instead of bringing it in
};

}  // namespace tk
