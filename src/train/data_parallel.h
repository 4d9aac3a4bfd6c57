// Data parallelism over a communicator (docs/distributed.md): the ZeRO stage's gradient reduction hung on the
// model's backward, each rank's slice of every unit of the layout, the parameter all-gather after a sharded update
// (ZeRO 1, 2: queued at the next use, waited for unit by unit) or before each use of a unit (ZeRO 3), and the sums
// across ranks (in rank order) of what each rank measured of the step.
#pragma once
#include <cstdint>
#include <vector>

#include "dist/communicator.h"
#include "model/model.h"
#include "ops/moment_codec.h"
#include "optim/optimizer.h"
#include "plan/zero_plan.h"

namespace tk {

class DataParallel final : public GradientHook, public ParameterSource {
 public:
  // Hooks itself into the model's backward (and, ZeRO 3, gathers its units); the model must be built with
  // zero_unit_multiple(world, zero_stage, moments) (plan/zero_plan.h), under ZeRO 2 and 3 its gradients reduced and sharded over the world
  // (ModelOptions::reduced_grads), and under ZeRO 3 its parameters sharded over the world.
  DataParallel(dist::Communicator& comm, Model& model, int zero_stage);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return comm_.rank(); }
  int world() const { return comm_.world_size(); }
  int zero_stage() const { return zero_; }
  dist::Communicator& communicator() const { return comm_; }
  // This rank's slice of each unit: what its AdamW owns (ZeRO 1-3); empty under ZeRO 0 (the whole layout).
  std::vector<ParamRange> owned() const;
  // What a sharded AdamW sums across ranks.
  SumAcrossRanks sum_across_ranks();

  // ZeRO 0, 1: the next backward all-reduces its gradients across the ranks (the last micro-batch of a step), unit by
  // unit as the backward finishes each. ZeRO 2, 3 reduce-scatter every backward's gradients, unit by unit, into the
  // rank's slices (the model's staging, GradientHook), whatever this says.
  void reduce_next_backward() { armed_ = zero_ < 2; }
  void unit_done(size_t unit, const Tensor& staged) override;
  void backward_done() override;

  // After a sharded update. Whole parameters (ZeRO 1, 2; 3 on one rank): each rank's updated slices are to be
  // all-gathered to every rank; that is queued at the parameters' next use (gather_unit), after whatever the host
  // does between the steps, and waited for unit by unit. ZeRO 3 forgets the units it holds gathered.
  void parameters_updated();
  // Whole parameters: the all-gathers after an update queued (if not yet) and the compute queue made to wait for all of
  // them, for a reader of params() other than the model's own units (a checkpoint). Nothing under sharded ZeRO 3.
  void finish_parameter_gathers();
  // Whole parameters: the unit of params(), once the compute queue has waited for its all-gather after an update.
  // ZeRO 3: unit k gathered whole into one of two buffers; the unit the backward or forward uses next (in the order
  // the model uses them) is gathered ahead into the other, so that on CUDA its all-gather overlaps the compute.
  Tensor gather_unit(size_t unit) override;
  // The unit's full-precision weights, all slices in rank order (ZeRO 1, 2 with master weights; ZeRO 3): a
  // collective, every rank calls it for the same units in the same order; `out` gets the unit's unit_size() values.
  void gather_master_weights(const AdamW& optimizer, size_t unit, std::vector<float>& out);

  double sum(double mine);
  LossSum sum(const LossSum& mine);
  // FP8 delayed scaling: the amax each cast saw this step, the maximum over the ranks, set on every rank before the
  // backend commits it (Ops::fp8_amax_seen), so that every rank scales its next casts alike. Nothing otherwise.
  void agree_fp8_amax();

 private:
  Tensor unit_slice(const Tensor& flat, size_t unit) const;  // this rank's slice of the unit
  Tensor unit_of(const Tensor& flat, size_t unit) const;
  // This rank's slice of the unit in a buffer of its slices in unit order: the model's sharded parameters (ZeRO 3).
  Tensor held_slice(const Tensor& held, size_t unit) const;
  void put_back_reduced();
  void queue_parameter_gathers();
  void fill(int buffer, size_t unit);
  void follow_schedule(size_t unit);

  dist::Communicator& comm_;
  Model& model_;
  int zero_;
  bool armed_ = false;
  dist::Ticket last_ = -1;
  // ZeRO 2, 3: the unit whose reduce-scatter was queued last and the ticket of it; its chunk is stored into the
  // model's slice once the next unit's reduce-scatter is queued, so that the compute queue waits for one reduction
  // while the collective queue runs the next (-1: none pending).
  int reduced_unit_ = -1;
  dist::Ticket reduced_ticket_ = -1;
  // Whole parameters after a sharded update: whether its all-gathers are still to be queued, and each unit's ticket
  // until the compute queue has waited for it (-1: none pending).
  bool stale_ = false;
  std::vector<dist::Ticket> gathered_;
  // ZeRO 3's two gathering buffers: the unit each holds (-1: none), the all-gather filling it (-1: done), which one
  // the compute reads now; the order in which a training step uses the units, and where in it the last use was.
  Tensor staging_[2];
  int holds_[2] = {-1, -1};
  dist::Ticket filling_[2] = {-1, -1};
  int current_ = -1;
  std::vector<size_t> schedule_;
  size_t position_ = 0;
};

}  // namespace tk
