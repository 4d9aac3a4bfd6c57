// Gradient staging's buffers, which unit takes which, and the copies that bring a unit's accumulated gradients into
// its buffer and (in host memory) take them down again, ordered by events so that the copies overlap the backward of
// the units around them.
#include "model/grad_staging.h"

#include <algorithm>

#include "core/error.h"

namespace tk {
namespace {

// The tail takes buffer 0 (untied) or a layer buffer (tied: then it is the final norm alone, smaller than any layer).
std::pair<int64_t, int64_t> stage_sizes(const ParamLayout& layout, bool tied) {
  const size_t tail = layout.units() - 1;
  const int64_t tail_n = layout.unit_size(tail), embed_n = layout.unit_size(0);
  int64_t layer = tied ? tail_n : 0;
  for (size_t k = 1; k < tail; k++) layer = std::max(layer, layout.unit_size(k));
  return {tied ? embed_n : std::max(embed_n, tail_n), layer};
}

}  // namespace

std::pair<int64_t, int64_t> gradient_stage_elements(const ModelConfig& cfg, const ParamLayout& layout) {
  return stage_sizes(layout, cfg.tied_embeddings);
}

GradientStaging::GradientStaging(const ModelConfig& cfg, const ParamLayout& layout, Ops& ops,
                                 const Tensor& accumulated, Home home, int shards, int shard)
    : cfg_(cfg), layout_(layout), ops_(ops), accumulated_(accumulated), home_(home), shards_(shards), shard_(shard) {
  TK_CHECK(shards >= 1 && shard >= 0 && shard < shards && (home != Home::host || shards == 1) &&
               accumulated.numel() == layout.total / shards,
           "internal error: gradient staging of slice {} of {} over {} accumulated elements of a layout of {}", shard,
           shards, accumulated.numel(), layout.total);
  const auto [outer, layer] = stage_sizes(layout, cfg.tied_embeddings);
  const char* labels[3] = {"gradient staging: embedding / LM head group", "gradient staging: layers",
                           "gradient staging: layers"};
  for (int i = 0; i < 3; i++) {
    const int64_t n = i == 0 ? outer : layer;
    stage_[i] = Tensor(ops.allocate(size_t(n) * dtype_size(accumulated.dtype), labels[i]), accumulated.dtype, {n});
  }
}

GradientStaging::~GradientStaging() {
  for (Tensor& t : stage_) ops_.release(t.data);
}

// Tied embeddings: unit 0 receives the LM head's gradient first and the embedding's last, so it holds buffer 0 for
// the whole backward and the tail (the final norm) takes a layer buffer. Untied: the tail (final norm, LM head) uses
// buffer 0 first and the embedding after it.
int GradientStaging::stage_of(size_t group) const {
  const size_t tail = layout_.units() - 1;
  if (group == 0) return 0;
  if (group == tail) return cfg_.tied_embeddings ? 1 : 0;
  return 1 + int((tail - group + (cfg_.tied_embeddings ? 0 : 1)) % 2);
}

Tensor GradientStaging::unit_stage(size_t k) const { return stage_[stage_of(k)].rows(0, layout_.unit_size(k)); }

Tensor GradientStaging::slice_of(size_t k) const {
  int64_t at = 0;
  for (size_t u = 0; u < k; u++) at += layout_.unit_size(u) / shards_;
  return accumulated_.rows(at, at + layout_.unit_size(k) / shards_);
}

Tensor GradientStaging::chunk_of(size_t k) const {
  const int64_t chunk = layout_.unit_size(k) / shards_;
  return unit_stage(k).rows(shard_ * chunk, (shard_ + 1) * chunk);
}

// In host memory: the uploads come after every download of the last micro-step (the event ring is reused, so an older
// event cannot be waited on safely).
void GradientStaging::begin_microstep() {
  if (!on_host()) return;
  ops_.wait_event(Ops::Queue::upload, ops_.record_event(Ops::Queue::download));
  for (int& e : stage_free_) e = -1;
}

// Slices: the buffer is zeroed and the slice copied into its chunk on the compute queue, after whatever the compute
// queue was given before (with its wait for the reduction of the buffer's last unit into its slice). Slices
// in host memory: the rest of the buffer zeroed on the compute queue and the slice brought up into its chunk on the
// upload queue, both once the buffer's last unit is taken down.
void GradientStaging::begin_group(size_t k, ModelWeights& g) {
  using Q = Ops::Queue;
  const int st = stage_of(k);
  const int64_t b = layout_.unit_begin[k];
  const Tensor stage = unit_stage(k);
  const size_t elem = dtype_size(accumulated_.dtype);
  if (home_ == Home::slices) {
    ops_.zero(stage);
    if (!accumulated_zero_) ops_.copy_async(chunk_of(k).data, slice_of(k).data, chunk_of(k).nbytes(), Q::compute);
  } else if (home_ == Home::host_slices) {
    const int64_t chunk = layout_.unit_size(k) / shards_;
    if (stage_free_[st] >= 0) ops_.wait_event(Q::compute, stage_free_[st]);
    if (shard_ > 0) ops_.zero(stage.rows(0, shard_ * chunk));
    if (shard_ + 1 < shards_) ops_.zero(stage.rows((shard_ + 1) * chunk, stage.numel()));
    if (accumulated_zero_) {
      ops_.zero(chunk_of(k));
    } else {
      if (stage_free_[st] >= 0) ops_.wait_event(Q::upload, stage_free_[st]);
      ops_.copy_async(chunk_of(k).data, slice_of(k).data, chunk_of(k).nbytes(), Q::upload);
      ops_.wait_event(Q::compute, ops_.record_event(Q::upload));
    }
  } else if (accumulated_zero_) {
    if (stage_free_[st] >= 0) ops_.wait_event(Q::compute, stage_free_[st]);
    ops_.zero(stage);
  } else {
    if (stage_free_[st] >= 0) ops_.wait_event(Q::upload, stage_free_[st]);
    ops_.copy_async(stage.data, static_cast<char*>(accumulated_.data) + size_t(b) * elem, stage.nbytes(), Q::upload);
    ops_.wait_event(Q::compute, ops_.record_event(Q::upload));
  }
  // Views of a flat buffer that starts b elements before the staging buffer: the unit's own views land inside it,
  // the others are not used until their unit begins.
  const uintptr_t base = reinterpret_cast<uintptr_t>(stage.data) - uintptr_t(b) * elem;
  ModelWeights v = weight_views(cfg_, layout_, reinterpret_cast<void*>(base), accumulated_.dtype);
  const size_t tail = layout_.units() - 1;
  if (k == 0) {
    g.embed = v.embed;
    if (cfg_.tied_embeddings) g.lm_head = v.lm_head;
  } else if (k == tail) {
    g.final_norm = v.final_norm;
    if (!cfg_.tied_embeddings) g.lm_head = v.lm_head;
  } else {
    g.layers[k - 1] = v.layers[k - 1];
  }
}

Tensor GradientStaging::end_group(size_t k) {
  using Q = Ops::Queue;
  const Tensor stage = unit_stage(k);
  if (home_ == Home::host) {
    const size_t elem = dtype_size(accumulated_.dtype);
    ops_.wait_event(Q::download, ops_.record_event(Q::compute));
    ops_.copy_async(static_cast<char*>(accumulated_.data) + size_t(layout_.unit_begin[k]) * elem, stage.data,
                    stage.nbytes(), Q::download);
    stage_free_[stage_of(k)] = ops_.record_event(Q::download);
  }
  return stage;
}

void GradientStaging::store_reduced(size_t k) {
  using Q = Ops::Queue;
  TK_CHECK(home_ != Home::host, "internal error: gradients kept whole have no reduced slice to store");
  if (home_ == Home::slices) return;  // reduced straight into the slice
  const Tensor chunk = chunk_of(k), slice = slice_of(k);
  ops_.wait_event(Q::download, ops_.record_event(Q::compute));
  ops_.copy_async(slice.data, chunk.data, chunk.nbytes(), Q::download);
  stage_free_[stage_of(k)] = ops_.record_event(Q::download);
}

// In host memory: whatever the compute queue runs next (the next micro-step, the optimizer) comes after every
// download.
void GradientStaging::end_microstep() {
  if (on_host()) ops_.wait_event(Ops::Queue::compute, ops_.record_event(Ops::Queue::download));
  accumulated_zero_ = false;
}

}  // namespace tk
