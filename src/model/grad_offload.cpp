// Gradient offload's groups, staging buffers and the copies that move each group between host and device, ordered
// by events so that the copies overlap the backward of the groups around them.
#include "model/grad_offload.h"

#include <algorithm>

namespace tk {
namespace {

// [bounds[k], bounds[k+1]) for the embedding (k = 0), layer l (k = l + 1) and the tail (the final norm and an untied
// LM head), alignment padding included.
std::vector<int64_t> gradient_groups(const ParamLayout& layout) {
  std::vector<int64_t> bounds{0};
  for (const LayerOffsets& l : layout.layers) bounds.push_back(l.attn_norm);
  bounds.push_back(layout.final_norm);
  bounds.push_back(layout.total);
  return bounds;
}

std::pair<int64_t, int64_t> stage_sizes(const std::vector<int64_t>& bounds, bool tied) {
  // The tail takes buffer 0 (untied) or a layer buffer (tied: then it is the final norm alone, smaller than any layer).
  const size_t tail = bounds.size() - 2;
  const int64_t tail_n = bounds[tail + 1] - bounds[tail];
  int64_t layer = tied ? tail_n : 0;
  for (size_t k = 1; k < tail; k++) layer = std::max(layer, bounds[k + 1] - bounds[k]);
  return {tied ? bounds[1] - bounds[0] : std::max(bounds[1] - bounds[0], tail_n), layer};
}

}  // namespace

std::pair<int64_t, int64_t> gradient_stage_elements(const ModelConfig& cfg, const ParamLayout& layout) {
  return stage_sizes(gradient_groups(layout), cfg.tied_embeddings);
}

GradientOffload::GradientOffload(const ModelConfig& cfg, const ParamLayout& layout, Ops& ops, const Tensor& host_grads)
    : cfg_(cfg), layout_(layout), ops_(ops), host_(host_grads), bounds_(gradient_groups(layout)) {
  const auto [outer, layer] = stage_sizes(bounds_, cfg.tied_embeddings);
  const char* labels[3] = {"gradient staging: embedding / LM head group", "gradient staging: layers",
                           "gradient staging: layers"};
  for (int i = 0; i < 3; i++) {
    const int64_t n = i == 0 ? outer : layer;
    stage_[i] = Tensor(ops.allocate(size_t(n) * dtype_size(host_.dtype), labels[i]), host_.dtype, {n});
  }
}

GradientOffload::~GradientOffload() {
  for (Tensor& t : stage_) ops_.release(t.data);
}

// Tied embeddings: the embedding group receives the LM head's gradient first and the embedding's last, so it holds
// buffer 0 for the whole backward and the tail (the final norm) takes a layer buffer. Untied: the tail (final norm,
// LM head) uses buffer 0 first and the embedding after it.
int GradientOffload::stage_of(size_t group) const {
  const size_t tail = bounds_.size() - 2;
  if (group == 0) return 0;
  if (group == tail) return cfg_.tied_embeddings ? 1 : 0;
  return 1 + int((tail - group + (cfg_.tied_embeddings ? 0 : 1)) % 2);
}

// The uploads come after every download of the last micro-step (the event ring is reused, so an older event cannot
// be waited on safely).
void GradientOffload::begin_microstep() {
  ops_.wait_event(Ops::Queue::upload, ops_.record_event(Ops::Queue::download));
  for (int& e : stage_free_) e = -1;
}

void GradientOffload::begin_group(size_t k, ModelWeights& g) {
  using Q = Ops::Queue;
  const int st = stage_of(k);
  const int64_t b = bounds_[k], n = bounds_[k + 1] - b;
  const Tensor stage = stage_[st].rows(0, n);
  const size_t elem = dtype_size(host_.dtype);
  if (host_grads_zero_) {
    if (stage_free_[st] >= 0) ops_.wait_event(Q::compute, stage_free_[st]);
    ops_.zero(stage);
  } else {
    if (stage_free_[st] >= 0) ops_.wait_event(Q::upload, stage_free_[st]);
    ops_.copy_async(stage.data, static_cast<char*>(host_.data) + size_t(b) * elem, stage.nbytes(), Q::upload);
    ops_.wait_event(Q::compute, ops_.record_event(Q::upload));
  }
  // Views of a flat buffer that starts b elements before the staging buffer: the group's own views land inside it,
  // the others are not used until their group begins.
  const uintptr_t base = reinterpret_cast<uintptr_t>(stage.data) - uintptr_t(b) * elem;
  ModelWeights v = weight_views(cfg_, layout_, reinterpret_cast<void*>(base), host_.dtype);
  const size_t tail = bounds_.size() - 2;
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

void GradientOffload::end_group(size_t k) {
  using Q = Ops::Queue;
  const int st = stage_of(k);
  const int64_t b = bounds_[k], n = bounds_[k + 1] - b;
  const size_t elem = dtype_size(host_.dtype);
  ops_.wait_event(Q::download, ops_.record_event(Q::compute));
  ops_.copy_async(static_cast<char*>(host_.data) + size_t(b) * elem, stage_[st].data, size_t(n) * elem, Q::download);
  stage_free_[st] = ops_.record_event(Q::download);
}

// Whatever the compute queue runs next (the next micro-step, the optimizer) comes after every download.
void GradientOffload::end_microstep() {
  ops_.wait_event(Ops::Queue::compute, ops_.record_event(Ops::Queue::download));
  host_grads_zero_ = false;
}

}  // namespace tk
