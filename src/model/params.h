// ParamLayout: every parameter tensor of a model, by its Hugging Face name, at a fixed offset in one
// flat buffer. q/k/v projections (and their biases) are adjacent, as are gate/up, so that the fused
// QKV [q+2k, d] and gate-up [2f, d] matrices are plain views of the flat buffer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "ops/ops.h"

namespace tk {

struct ParamInfo {
  std::string name;             // e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;   // as Hugging Face stores it
  int64_t offset = 0;           // elements from the start of the flat buffer
  int64_t numel = 0;
  bool decay = false;           // weight decay applies (2-D matrices)
  int layer = -1;               // -1 for embedding / final norm / lm head
};

// Offsets of one layer's tensors (elements), as the schedule uses them.
struct LayerOffsets {
  int64_t attn_norm, qkv_w, qkv_b /* -1 if none */, q_norm /* -1 */, k_norm /* -1 */, o_w;
  int64_t mlp_norm, gate_up_w, down_w;
  int64_t o_b = -1;  // o_proj bias (attention_bias in Llama/Qwen3 configs), -1 if none
};

struct ParamLayout {
  std::vector<ParamInfo> params;
  std::vector<LayerOffsets> layers;
  int64_t embed = 0, final_norm = 0, lm_head = 0;  // lm_head == embed when tied
  int64_t total = 0;
  // The units, the backward's gradient groups: unit 0 the embedding (with a tied LM head), unit l + 1 layer l, the
  // last the final norm (with an untied LM head). Unit k is [unit_begin[k], unit_begin[k + 1]); n_layers + 3 entries.
  std::vector<int64_t> unit_begin;

  // unit_multiple: every unit's size is padded to a multiple of it (a multiple of the 64-element alignment), so that
  // data parallelism cuts each unit into equal slices, one per rank (docs/distributed.md). The padding is zero and
  // names nothing; tensors keep their order and their alignment.
  static ParamLayout build(const ModelConfig& c, int64_t unit_multiple = 64);
  size_t units() const { return unit_begin.size() - 1; }
  int64_t unit_size(size_t k) const { return unit_begin[k + 1] - unit_begin[k]; }
  const ParamInfo* find(const std::string& name) const;  // nullptr if absent
  // Contiguous runs for AdamW (adjacent tensors with the same decay flag merged).
  std::vector<ParamSegment> segments() const;
};

}  // namespace tk
