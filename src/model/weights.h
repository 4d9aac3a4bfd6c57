// Tensor views of a model's parameters inside one flat buffer (ParamLayout order), by role: what the
// model's schedule and its block (model/block.h) pass to ops. The same views over the gradient buffer give each
// parameter's gradient, so forward and backward address weights and gradients alike.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/params.h"

namespace tk {

struct LayerWeights {
  Tensor attn_norm;   // [d]
  Tensor qkv_w;       // [q+2k, d]: q_proj, k_proj, v_proj stacked
  Tensor qkv_b;       // [q+2k] or empty
  Tensor q_norm;      // [hd] or empty (Qwen3)
  Tensor k_norm;      // [hd] or empty (Qwen3)
  Tensor o_w;         // [d, q]
  Tensor o_b;         // [d] or empty
  Tensor mlp_norm;    // [d]
  Tensor gate_up_w;   // [2f, d]: gate_proj, up_proj stacked
  Tensor down_w;      // [d, f]
};

struct ModelWeights {
  Tensor embed;       // [V, d]
  Tensor final_norm;  // [d]
  Tensor lm_head;     // [V, d]; the same memory as embed when tied
  std::vector<LayerWeights> layers;
};

// Views of `flat` (dtype elements, laid out by `layout`).
ModelWeights weight_views(const ModelConfig& c, const ParamLayout& layout, void* flat, DType dtype);
// Points the views of unit `unit`'s tensors (ParamLayout::unit_begin) at `unit_data`, which holds that unit alone
// (ZeRO 3: the unit gathered whole for its use).
void point_unit_views(ModelWeights& w, const ModelConfig& c, const ParamLayout& layout, size_t unit, void* unit_data,
                      DType dtype);

}  // namespace tk
