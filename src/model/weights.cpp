// Builds the per-role tensor views of a flat parameter (or gradient) buffer from its ParamLayout.
#include "model/weights.h"

namespace tk {

ModelWeights weight_views(const ModelConfig& c, const ParamLayout& layout, void* flat, DType dtype) {
  auto at = [&](int64_t offset, std::initializer_list<int64_t> dims) {
    if (offset < 0) return Tensor();
    return Tensor(static_cast<char*>(flat) + size_t(offset) * dtype_size(dtype), dtype, dims);
  };
  const int64_t d = c.d_model, q = c.q_dim(), f = c.ffn_dim, V = c.vocab_size;
  ModelWeights w;
  w.embed = at(layout.embed, {V, d});
  w.final_norm = at(layout.final_norm, {d});
  w.lm_head = at(layout.lm_head, {V, d});
  for (const LayerOffsets& o : layout.layers) {
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
    w.layers.push_back(l);
  }
  return w;
}

}  // namespace tk
