// DataParallel (data_parallel.h): the collectives of a data-parallel step, queued behind the compute that writes
// their inputs (wait_for_compute) and waited for by the compute that reads their outputs (compute_waits), so that on
// CUDA a unit's reduction runs while the backward computes the units below it.
#include "train/data_parallel.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tk {

DataParallel::DataParallel(dist::Communicator& comm, Model& model, int zero_stage)
    : comm_(comm), model_(model), zero_(zero_stage) {
  TK_CHECK(zero_stage >= 0 && zero_stage <= 3, "--zero {}: the stages are 0, 1, 2 and 3", zero_stage);
  TK_CHECK(!model.grads_on_host() || zero_ >= 2,
           "internal error: ZeRO {} with gradients in host memory (only a rank's slices of ZeRO 2 and 3 go there)",
           zero_);
  const ParamLayout& layout = model.layout();
  if (zero_ > 0)
    for (size_t k = 0; k < layout.units(); k++)
      TK_CHECK(layout.unit_size(k) % (int64_t(world()) * kShardQuantum) == 0,
               "internal error: unit {} of {} elements is not padded for {} ranks", k, layout.unit_size(k), world());
  const ModelOptions& o = model.options();
  TK_CHECK(o.reduced_grads == (zero_ >= 2) &&
               (!o.reduced_grads || (o.grad_shards == world() && o.grad_shard == rank())),
           "internal error: ZeRO {} on rank {} of {} with a model whose gradients are {} ({} shards)", zero_, rank(),
           world(), o.reduced_grads ? "reduced" : "whole", o.grad_shards);
  model.set_gradient_hook(this);
  // ZeRO 3 shards the parameters over more than one rank (on one, they stay whole).
  TK_CHECK((zero_ == 3 && world() > 1) == model.params_sharded(),
           "internal error: ZeRO {} on {} ranks with a model whose parameters are {}", zero_, world(),
           model.params_sharded() ? "sharded" : "whole");
  // A sharded update leaves whole parameters to gather (ZeRO 1, 2; 3 on one rank), unit by unit as the model uses them.
  if (zero_ > 0) model.set_parameter_source(this);
  if (!model.params_sharded()) {
    gathered_.assign(layout.units(), -1);
    return;
  }
  int64_t largest = 0;
  for (size_t k = 0; k < layout.units(); k++) largest = std::max(largest, layout.unit_size(k));
  for (Tensor& t : staging_) {
    t = Tensor(model.ops().allocate(size_t(largest) * dtype_size(model.params().dtype),
                                    "parameter gathering (ZeRO 3: two units)"),
               model.params().dtype, {largest});
    model.ops().zero(t);
  }
  // A step's use of the units: the forward from the embedding to the tail, the LM head, then the backward from the
  // tail down to layer 0 (the embedding's backward reads no weight).
  const size_t tail = layout.units() - 1, lm_head = model.config().tied_embeddings ? 0 : tail;
  for (size_t k = 0; k <= tail; k++) schedule_.push_back(k);
  if (lm_head != tail) schedule_.insert(schedule_.end(), {lm_head, tail});
  for (size_t k = tail - 1; k >= 1; k--) schedule_.push_back(k);
}

DataParallel::~DataParallel() {
  model_.set_gradient_hook(nullptr);
  if (zero_ > 0) model_.set_parameter_source(nullptr);
  // Whole parameters: the compute queue has waited for every all-gather it queued (each unit's, at its use), unless
  // an error cut the step short, when the process ends anyway; ZeRO 3's buffers may still be read by one.
  if (!model_.params_sharded()) return;
  comm_.synchronize();
  model_.ops().synchronize();
  for (Tensor& t : staging_) model_.ops().release(t.data);
}

Tensor DataParallel::unit_of(const Tensor& flat, size_t unit) const {
  const ParamLayout& layout = model_.layout();
  return flat.rows(layout.unit_begin[unit], layout.unit_begin[unit + 1]);
}

Tensor DataParallel::unit_slice(const Tensor& flat, size_t unit) const {
  const ParamLayout& layout = model_.layout();
  const int64_t chunk = layout.unit_size(unit) / world(), begin = layout.unit_begin[unit] + rank() * chunk;
  return flat.rows(begin, begin + chunk);
}

Tensor DataParallel::held_slice(const Tensor& held, size_t unit) const {
  const ParamLayout& layout = model_.layout();
  int64_t at = 0;
  for (size_t k = 0; k < unit; k++) at += layout.unit_size(k) / world();
  return held.rows(at, at + layout.unit_size(unit) / world());
}

std::vector<ParamRange> DataParallel::owned() const {
  if (zero_ == 0) return {};
  const ParamLayout& layout = model_.layout();
  std::vector<ParamRange> ranges;
  for (size_t k = 0; k < layout.units(); k++) {
    const int64_t chunk = layout.unit_size(k) / world();
    if (chunk > 0) ranges.push_back({layout.unit_begin[k] + rank() * chunk, chunk});
  }
  return ranges;
}

SumAcrossRanks DataParallel::sum_across_ranks() {
  return [this](double mine) { return sum(mine); };
}

// ZeRO 0, 1: the unit's accumulated gradients all-reduced in place. ZeRO 2, 3: the staging buffer reduce-scattered
// (this rank receives the ranks' sum of their chunk r, its accumulated slice included) into the model's destination:
// the slice itself on the device, whose compute-queue wait comes once the next unit's reduce-scatter is queued
// (put_back_reduced); or, with the slices in host memory, chunk r of the buffer, taken down at once: the download
// queue waits for the reduce-scatter, and the buffer's next unit for the download (the model's staging), so that the
// download overlaps the backward of the unit below.
void DataParallel::unit_done(size_t unit, const Tensor& staged) {
  const int64_t n = model_.layout().unit_size(unit);
  if (n == 0) return;
  Ops& ops = model_.ops();
  if (staged.empty()) {
    if (!armed_) return;
    const Tensor grads = unit_of(model_.grads(), unit);
    comm_.wait_for_compute(ops);
    last_ = comm_.all_reduce(grads, grads, dist::ReduceOp::Sum);
    return;
  }
  comm_.wait_for_compute(ops);
  const dist::Ticket reduced =
      comm_.reduce_scatter(model_.reduced_gradients_destination(unit), staged, dist::ReduceOp::Sum);
  if (model_.grads_on_host()) {
    comm_.copy_queue_waits(ops, Ops::Queue::download, reduced);
    model_.store_reduced_gradients(unit);
    return;
  }
  put_back_reduced();
  reduced_unit_ = int(unit);
  reduced_ticket_ = reduced;
}

// The pending unit's reduced chunk stored in the model's slice (there already on the device; taken down to host
// memory), once the compute queue has waited for its reduce-scatter; the model writes the staging buffer again only
// after this (GradientHook's contract).
void DataParallel::put_back_reduced() {
  if (reduced_unit_ < 0) return;
  comm_.compute_waits(model_.ops(), reduced_ticket_);
  model_.store_reduced_gradients(size_t(reduced_unit_));
  reduced_unit_ = -1;
}

void DataParallel::backward_done() {
  put_back_reduced();
  if (!armed_) return;
  armed_ = false;
  if (last_ >= 0) comm_.compute_waits(model_.ops(), last_);
}

void DataParallel::parameters_updated() {
  if (model_.params_sharded()) {
    holds_[0] = holds_[1] = -1;
    current_ = -1;
    position_ = 0;
    return;
  }
  if (zero_ > 0) stale_ = true;
}

// Every unit's all-gather queued, in unit order, behind the compute queue's work so far (the update of this rank's
// slices); the compute queue waits for each at the unit's first use (gather_unit), so that the gathering of the
// layers overlaps the forward of the ones before them.
void DataParallel::queue_parameter_gathers() {
  stale_ = false;
  comm_.wait_for_compute(model_.ops());
  for (size_t k = 0; k < model_.layout().units(); k++)
    if (model_.layout().unit_size(k) > 0)
      gathered_[k] = comm_.all_gather(unit_of(model_.params(), k), unit_slice(model_.params(), k));
}

void DataParallel::finish_parameter_gathers() {
  if (model_.params_sharded()) return;
  if (stale_) queue_parameter_gathers();
  const auto last = std::max_element(gathered_.begin(), gathered_.end());
  if (last == gathered_.end() || *last < 0) return;
  comm_.compute_waits(model_.ops(), *last);  // covers every collective queued before it
  std::fill(gathered_.begin(), gathered_.end(), dist::Ticket(-1));
}

// Queues the all-gather of `unit` into buffer b, once the compute queue's work so far (which may read b) is done.
void DataParallel::fill(int b, size_t unit) {
  const int64_t n = model_.layout().unit_size(unit);
  comm_.wait_for_compute(model_.ops());
  filling_[b] = comm_.all_gather(staging_[b].rows(0, n), held_slice(model_.params(), unit));
  holds_[b] = int(unit);
}

// Where `unit` is in the step's order: the next use, a repeat of the last, or (an evaluation's forward) its first.
void DataParallel::follow_schedule(size_t unit) {
  if (schedule_[position_] == unit) return;
  if (position_ + 1 < schedule_.size() && schedule_[position_ + 1] == unit) {
    position_++;
    return;
  }
  position_ = size_t(std::find(schedule_.begin(), schedule_.end(), unit) - schedule_.begin());
}

Tensor DataParallel::gather_unit(size_t unit) {
  if (!model_.params_sharded()) {
    if (stale_) queue_parameter_gathers();
    if (gathered_[unit] >= 0) {
      comm_.compute_waits(model_.ops(), gathered_[unit]);
      gathered_[unit] = -1;
    }
    return unit_of(model_.params(), unit);
  }
  int b = holds_[0] == int(unit) ? 0 : holds_[1] == int(unit) ? 1 : -1;
  if (b < 0) {
    b = current_ == 0 ? 1 : 0;
    fill(b, unit);
  }
  if (filling_[b] >= 0) {
    comm_.compute_waits(model_.ops(), filling_[b]);
    filling_[b] = -1;
  }
  current_ = b;
  follow_schedule(unit);
  if (position_ + 1 < schedule_.size()) {
    const size_t next = schedule_[position_ + 1];
    if (holds_[0] != int(next) && holds_[1] != int(next)) fill(1 - b, next);
  }
  return staging_[b].rows(0, model_.layout().unit_size(unit));
}

void DataParallel::gather_master_weights(const AdamW& optimizer, size_t unit, std::vector<float>& out) {
  const ParamLayout& layout = model_.layout();
  const int64_t chunk = layout.unit_size(unit) / world();
  std::vector<float> mine(static_cast<size_t>(chunk));
  if (chunk > 0) optimizer.weights_f32(layout.unit_begin[unit] + rank() * chunk, chunk, mine.data());
  out.resize(size_t(layout.unit_size(unit)));
  comm_.host_all_gather(mine.data(), out.data(), size_t(chunk) * sizeof(float));
}

void DataParallel::agree_fp8_amax() {
  Ops& ops = model_.ops();
  std::vector<float> amax = ops.fp8_amax_seen();  // the same count on every rank: they cast alike
  if (amax.empty()) return;
  std::vector<float> all(amax.size() * size_t(world()));
  comm_.host_all_gather(amax.data(), all.data(), amax.size() * sizeof(float));
  for (int r = 0; r < world(); r++)
    for (size_t i = 0; i < amax.size(); i++) amax[i] = std::max(amax[i], all[size_t(r) * amax.size() + i]);
  ops.set_fp8_amax_seen(amax);
}

double DataParallel::sum(double mine) {
  std::vector<double> all(static_cast<size_t>(world()));
  comm_.host_all_gather(&mine, all.data(), sizeof(double));
  double total = 0;
  for (double v : all) total += v;  // rank order: the same bits on every rank
  return total;
}

LossSum DataParallel::sum(const LossSum& mine) {
  struct Pair {
    double sum;
    int64_t count;
  };
  const Pair p{mine.sum, mine.count};
  std::vector<Pair> all(static_cast<size_t>(world()));
  comm_.host_all_gather(&p, all.data(), sizeof(Pair));
  LossSum total;
  for (const Pair& q : all) {
    total.sum += q.sum;
    total.count += q.count;
  }
  return total;
}

}  // namespace tk
