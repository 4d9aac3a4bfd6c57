// Data parallelism over a communicator (docs/distributed.md): the ZeRO stage's gradient reduction hung on the
// model's backward, each rank's slice of every unit of the layout, the parameter all-gather after a sharded update,
// and the sums across ranks (in rank order) of what each rank measured of the step.
#pragma once
#include <cstdint>
#include <vector>

#include "dist/communicator.h"
#include "model/model.h"
#include "train/optimizer.h"

namespace tk {

// The elements each unit is padded to a multiple of, times the world size, under ZeRO 1-3: a rank's slice of a unit
// is then whole int8 moment blocks (ModelOptions::unit_multiple).
constexpr int64_t kShardQuantum = 256;

class DataParallel final : public GradientHook {
 public:
  // Hooks itself into the model's backward; the model must be built with unit_multiple(world, zero_stage).
  DataParallel(dist::Communicator& comm, Model& model, int zero_stage);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  static int64_t unit_multiple(int world, int zero_stage);

  int rank() const { return comm_.rank(); }
  int world() const { return comm_.world_size(); }
  int zero_stage() const { return zero_; }
  dist::Communicator& communicator() const { return comm_; }
  // This rank's slice of each unit: what its AdamW owns (ZeRO 1-3); empty under ZeRO 0 (the whole layout).
  std::vector<ParamRange> owned() const;
  // What a sharded AdamW sums across ranks.
  SumAcrossRanks sum_across_ranks();

  // The next backward reduces its gradients across the ranks (the last micro-batch of a step): unit by unit as the
  // backward finishes each, all-reduced (ZeRO 0, 1) or reduce-scattered to the unit's owner slices (ZeRO 2).
  void reduce_next_backward() { armed_ = true; }
  void unit_done(size_t unit) override;
  void backward_done() override;

  // After a sharded update: each rank's updated slice of the parameters to every rank (ZeRO 1, 2).
  void gather_parameters();
  // The unit's fp32 master weights, all slices in rank order (ZeRO 1, 2 with master weights): a collective, every
  // rank calls it for the same units in the same order; `out` gets the unit's unit_size() values.
  void gather_master_weights(const AdamW& optimizer, size_t unit, std::vector<float>& out);

  double sum(double mine);
  LossSum sum(const LossSum& mine);

 private:
  Tensor unit_slice(const Tensor& flat, size_t unit) const;  // this rank's slice of the unit
  Tensor unit_of(const Tensor& flat, size_t unit) const;

  dist::Communicator& comm_;
  Model& model_;
  int zero_;
  bool armed_ = false;
  dist::Ticket last_ = -1;
};

}  // namespace tk
