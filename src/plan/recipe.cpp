// Recipe (recipe.h): the options of each part, derived from the one description.
#include "plan/recipe.h"

#include <algorithm>

#include "core/error.h"
#include "model/params.h"
#include "ops/cuda/fp8_shapes.h"
#include "ops/cuda/workspace_sizes.h"
#include "plan/flag_values.h"
#include "plan/zero_plan.h"

namespace tk {

std::string Recipe::offload_name() const {
  return offload_gradients ? "optimizer,gradients" : optimizer.offload ? "optimizer" : "none";
}

void Recipe::set_offload(const std::string& name) {
  const Offload o = parse_offload(name);
  optimizer.offload = o.optimizer;
  offload_gradients = o.gradients;
}

size_t Recipe::logits_chunk_bytes() const {
  return backend.logits_chunk_bytes > 0 ? backend.logits_chunk_bytes : cuda::kLogitsChunkBudgetBytes;
}

bool Recipe::keeps_fp8_inputs() const {
  return gpu && backend.precision.delayed_fp8() &&
         cuda::fp8_shapes::keeps_linear_inputs(seq, model.d_model, model.ffn_dim, model.qkv_dim());
}

bool Recipe::linears_fp8_shapes() const {
  namespace shapes = cuda::fp8_shapes;
  const int64_t N = micro_tokens(), d = model.d_model, q = model.q_dim(), qkv = model.qkv_dim(), f = model.ffn_dim;
  return shapes::gemm(N, d, qkv) && shapes::gemm(N, q, d) && shapes::gemm(N, d, 2 * f) && shapes::gemm(N, f, d);
}

bool Recipe::lm_head_fp8_shapes() const {
  return cuda::fp8_shapes::lm_head(micro_tokens(), model.d_model, model.vocab_size);
}

ModelOptions Recipe::model_options() const {
  ModelOptions o;
  o.B = batch;
  o.T = seq;
  o.doc_mask = doc_mask;
  o.recompute = recompute;
  o.offload_grads = offload_gradients;
  o.fp8_kept_inputs = keeps_fp8_inputs();
  o.unit_multiple = zero_unit_multiple(world_size, zero_stage, optimizer.moments);
  // ZeRO 2, 3: the gradients reduce-scattered into each rank's slices in every backward (at one rank too), in host
  // memory with gradient offload.
  if (zero_stage >= 2) {
    o.reduced_grads = true;
    o.grad_shards = world_size;
    o.grad_shard = rank;
  }
  return o;
}

std::vector<Ops::NamedWeight> named_weights(const Model& model) {
  const DType dtype = model.params().dtype;
  const char* base = static_cast<const char*>(model.weight_identities());
  std::vector<Ops::NamedWeight> weights;
  for (const ParamInfo& p : model.layout().params)
    weights.push_back({p.name, Tensor(const_cast<char*>(base) + size_t(p.offset) * dtype_size(dtype), dtype, {p.numel})});
  return weights;
}

std::unique_ptr<Model> make_model(const Recipe& r, Ops& ops) {
  ModelOptions o = r.model_options();
  if (r.zero_stage == 3 && r.world_size > 1) {  // this rank's slice of the parameters (the plan counts it itself)
    o.param_shards = r.world_size;
    o.param_shard = r.rank;
  }
  auto model = std::make_unique<Model>(r.model, ops, o);
  ops.name_weights(named_weights(*model));
  return model;
}

}  // namespace tk
