// ParamLayout: where every parameter lives in the flat buffer. Tensors that the schedule fuses (q/k/v,
// their biases, gate/up) are written back to back; each such group, and every other tensor, starts at a
// multiple of kGroupAlign elements so that CUDA kernels can use wide vector loads on any of them.
#include "model/params.h"

#include <fmt/format.h>

#include "core/checked.h"
#include "core/error.h"

namespace tk {
namespace {

constexpr int64_t kGroupAlign = 64;  // elements: 128 bytes in bf16, 256 in f32

class LayoutBuilder {
 public:
  explicit LayoutBuilder(ParamLayout& out) : out_(out) {}

  // Starts a group of tensors that must stay adjacent (or a single tensor) at an aligned offset.
  void begin_group() {
    cursor_ = checked_add(cursor_, kGroupAlign - 1, "the parameter layout's size") / kGroupAlign * kGroupAlign;
  }

  // Sizes and offsets are checked: ModelConfig::validate() bounds the shapes, so an overflow here is an
  // error, never a layout whose tensors overlap.
  int64_t add(std::string name, std::vector<int64_t> shape, int layer) {
    ParamInfo p;
    p.name = std::move(name);
    p.numel = 1;
    for (int64_t d : shape) p.numel = checked_mul(p.numel, d, "the size of " + p.name);
    p.decay = shape.size() == 2;  // matrices decay; norm weights and biases do not
    p.shape = std::move(shape);
    p.offset = cursor_;
    p.layer = layer;
    cursor_ = checked_add(cursor_, p.numel, "the parameter layout's size");
    out_.params.push_back(std::move(p));
    return out_.params.back().offset;
  }

  int64_t add_alone(std::string name, std::vector<int64_t> shape, int layer) {
    begin_group();
    return add(std::move(name), std::move(shape), layer);
  }

  int64_t end() {
    begin_group();
    return cursor_;
  }

  // Ends a unit: pads the cursor to a multiple of `multiple` and records where the next one begins.
  void end_unit(int64_t multiple) {
    begin_group();
    cursor_ = checked_add(cursor_, multiple - 1, "the parameter layout's size") / multiple * multiple;
    out_.unit_begin.push_back(cursor_);
  }

 private:
  ParamLayout& out_;
  int64_t cursor_ = 0;
};

LayerOffsets add_layer(LayoutBuilder& b, const ModelConfig& c, int l) {
  const int64_t d = c.d_model, q = c.q_dim(), k = c.kv_dim(), f = c.ffn_dim;
  const std::string p = fmt::format("model.layers.{}.", l);
  LayerOffsets o;
  o.attn_norm = b.add_alone(p + "input_layernorm.weight", {d}, l);
  b.begin_group();  // q, k, v: the fused [q+2k, d] matrix
  o.qkv_w = b.add(p + "self_attn.q_proj.weight", {q, d}, l);
  b.add(p + "self_attn.k_proj.weight", {k, d}, l);
  b.add(p + "self_attn.v_proj.weight", {k, d}, l);
  o.qkv_b = -1;
  if (c.qkv_bias) {
    b.begin_group();
    o.qkv_b = b.add(p + "self_attn.q_proj.bias", {q}, l);
    b.add(p + "self_attn.k_proj.bias", {k}, l);
    b.add(p + "self_attn.v_proj.bias", {k}, l);
  }
  o.q_norm = o.k_norm = -1;
  if (c.qk_norm) {
    o.q_norm = b.add_alone(p + "self_attn.q_norm.weight", {c.head_dim}, l);
    o.k_norm = b.add_alone(p + "self_attn.k_norm.weight", {c.head_dim}, l);
  }
  o.o_w = b.add_alone(p + "self_attn.o_proj.weight", {d, q}, l);
  o.o_b = c.o_bias ? b.add_alone(p + "self_attn.o_proj.bias", {d}, l) : -1;
  o.mlp_norm = b.add_alone(p + "post_attention_layernorm.weight", {d}, l);
  b.begin_group();  // gate, up: the fused [2f, d] matrix
  o.gate_up_w = b.add(p + "mlp.gate_proj.weight", {f, d}, l);
  b.add(p + "mlp.up_proj.weight", {f, d}, l);
  o.down_w = b.add_alone(p + "mlp.down_proj.weight", {d, f}, l);
  return o;
}

}  // namespace

ParamLayout ParamLayout::build(const ModelConfig& c, int64_t unit_multiple) {
  c.validate();
  TK_CHECK(unit_multiple > 0 && unit_multiple % kGroupAlign == 0,
           "internal error: parameter units padded to {} elements, not a multiple of {}", unit_multiple, kGroupAlign);
  ParamLayout layout;
  LayoutBuilder b(layout);
  layout.unit_begin.push_back(0);
  layout.embed = b.add_alone("model.embed_tokens.weight", {c.vocab_size, c.d_model}, -1);
  b.end_unit(unit_multiple);
  for (int l = 0; l < c.n_layers; l++) {
    layout.layers.push_back(add_layer(b, c, l));
    b.end_unit(unit_multiple);
  }
  layout.final_norm = b.add_alone("model.norm.weight", {c.d_model}, -1);
  layout.lm_head = c.tied_embeddings ? layout.embed : b.add_alone("lm_head.weight", {c.vocab_size, c.d_model}, -1);
  b.end_unit(unit_multiple);
  layout.total = b.end();
  return layout;
}

const ParamInfo* ParamLayout::find(const std::string& name) const {
  for (const ParamInfo& p : params)
    if (p.name == name) return &p;
  return nullptr;
}

// Neighbouring tensors with the same decay flag form one segment, alignment padding between them
// included: padding is zero in parameters and gradients, so AdamW leaves it at zero.
std::vector<ParamSegment> ParamLayout::segments() const {
  std::vector<ParamSegment> segs;
  for (const ParamInfo& p : params) {
    if (!segs.empty() && segs.back().decay == p.decay) {
      segs.back().count = p.offset + p.numel - segs.back().offset;
    } else {
      segs.push_back({p.offset, p.numel, p.decay});
    }
  }
  return segs;
}

}  // namespace tk
