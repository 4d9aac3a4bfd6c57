// Builds the per-role tensor views of a flat parameter (or gradient) buffer from its ParamLayout.
#include "model/weights.h"

namespace tk {
namespace {

// The views of the tensors at layout offsets, placed by `at(offset, dims)` (an empty tensor for offset -1).
template <class At>
LayerWeights layer_views(const ModelConfig& c, const LayerOffsets& o, At&& at) {
  const int64_t d = c.d_model, q = c.q_dim(), f = c.ffn_dim;
  LayerWeights l;
  l.attn_norm = at(o.attn_norm, {d});
  l.qkv_w = at(o.qkv_w, {c.qkv_dim(), d});
  l.qkv_b = at(o.qkv_b, {c.qkv_dim()});
  l.q_norm = at(o.q_norm, {c.head_dim});
  l.k_norm = at(o.k_norm, {c.head_dim});
  l.o_w = at(o.o_w, {d, q});
  l.o_b = at(o.o_b, {d});
  l.mlp_norm = at(o.mlp_norm, {d});
  l.gate_up_w = at(o.gate_up_w, {2 * f, d});
  l.down_w = at(o.down_w, {d, f});
  return l;
}

// Views into `data`, which holds the layout's elements from `first` on.
auto placer(void* data, int64_t first, DType dtype) {
  return [=](int64_t offset, std::initializer_list<int64_t> dims) {
    if (offset < 0) return Tensor();
    return Tensor(static_cast<char*>(data) + size_t(offset - first) * dtype_size(dtype), dtype, dims);
  };
}

}  // namespace

ModelWeights weight_views(const ModelConfig& c, const ParamLayout& layout, void* flat, DType dtype) {
  const auto at = placer(flat, 0, dtype);
  const int64_t d = c.d_model, V = c.vocab_size;
  ModelWeights w;
  w.embed = at(layout.embed, {V, d});
  w.final_norm = at(layout.final_norm, {d});
  w.lm_head = at(layout.lm_head, {V, d});
  for (const LayerOffsets& o : layout.layers) w.layers.push_back(layer_views(c, o, at));
  return w;
}

void point_unit_views(ModelWeights& w, const ModelConfig& c, const ParamLayout& layout, size_t unit, void* unit_data,
                      DType dtype) {
  const int64_t begin = layout.unit_begin[unit], end = layout.unit_begin[unit + 1];
  const auto at = placer(unit_data, begin, dtype);
  auto in_unit = [&](int64_t offset) { return offset >= begin && offset < end; };
  const int64_t d = c.d_model, V = c.vocab_size;
  if (in_unit(layout.embed)) w.embed = at(layout.embed, {V, d});
  if (in_unit(layout.final_norm)) w.final_norm = at(layout.final_norm, {d});
  if (in_unit(layout.lm_head)) w.lm_head = at(layout.lm_head, {V, d});
  w.layers.resize(layout.layers.size());
  for (size_t l = 0; l < layout.layers.size(); l++)
    if (in_unit(layout.layers[l].attn_norm)) w.layers[l] = layer_views(c, layout.layers[l], at);
}

}  // namespace tk
