// Recipe (recipe.h): the options of each part, derived from the one description.
#include "train/recipe.h"

#include <algorithm>

#include "core/checked.h"
#include "core/error.h"
#include "model/params.h"
#include "ops/cuda/fp8_shapes.h"
#include "ops/cuda/workspace_sizes.h"
#include "train/data_parallel.h"
#include "train/precision_choice.h"
#include "train/trainer.h"

namespace tk {

std::string Recipe::offload_name() const {
  return offload_gradients ? "optimizer,gradients" : optimizer.offload ? "optimizer" : "none";
}

void Recipe::set_offload(const std::string& name) {
  TK_CHECK(name == "none" || name == "optimizer" || name == "optimizer,gradients",
           "--offload must be none, optimizer or optimizer,gradients, got '{}'", name);
  optimizer.offload = name != "none";
  offload_gradients = name == "optimizer,gradients";
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
  o.unit_multiple = DataParallel::unit_multiple(world_size, zero_stage, optimizer.moments);
  // ZeRO 2, 3: the gradients reduce-scattered into each rank's slices in every backward (at one rank too), in host
  // memory with gradient offload.
  if (zero_stage >= 2) {
    o.reduced_grads = true;
    o.grad_shards = world_size;
    o.grad_shard = rank;
  }
  return o;
}

Recipe train_recipe(const TrainConfig& c, const ModelConfig& model, bool gpu) {
  Recipe r;
  r.model = model;
  r.gpu = gpu;
  r.batch = c.batch;
  r.seq = c.seq;
  r.accumulation = micro_batches_per_step(c.batch_tokens, c.batch, c.seq);
  r.zero_stage = std::max(c.zero, 0);  // -1: not given (0, unless --memory-budget on many ranks chooses)
  r.doc_mask = c.doc_mask;
  r.recompute = Recompute::parse(c.recompute);
  r.optimizer.beta1 = c.beta1;
  r.optimizer.beta2 = c.beta2;
  r.optimizer.eps = c.adam_eps;
  r.optimizer.weight_decay = c.weight_decay;
  r.optimizer.max_grad_norm = c.grad_clip;
  r.optimizer.moments = parse_moments(c.moments);
  r.optimizer.offload_chunk = c.offload_chunk;
  r.set_offload(c.offload);
  r.backend.precision = resolve_precision(c.precision, c.fp8, c.fp8_scaling, c.fp8_margin, c.fp8_lm_head,
                                         gpu ? current_gpu() : std::nullopt, model, r.batch, r.seq, r.precision_note);
  r.backend.gemm_tuning = c.gemm_tuning;
  if (c.logits_chunk_mib > 0) r.backend.logits_chunk_bytes = size_t(c.logits_chunk_mib) << 20;
  return r;
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
