// Model: the parameters, gradients and planned activation buffers of one Llama-family model on one
// backend, and the schedule of a training step around the block that model/block.h writes once.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/batch.h"
#include "model/config.h"
#include "model/params.h"
#include "ops/ops.h"

namespace tk {

// What the backward recomputes instead of keeping from the forward. Policies combine; each gives bitwise
// the same results as keeping everything (the recomputation repeats the forward's exact ops), and the
// recomputed tensors of all layers share one layer's worth of scratch.
struct Recompute {
  bool norm = false;       // the RMSNorm outputs x_attn, x_mlp                      (no matmul FLOPs)
  bool swiglu = false;     // the SwiGLU output act [N, f]                            (no matmul FLOPs)
  bool attention = false;  // the attention output and its logsumexp: one flash forward per layer
  bool qkv = false;        // the q/k/v projection (and RoPE / q-k norms): one GEMM per layer
  bool block = false;      // everything but the block input h: the layer's whole forward again

  bool any() const { return norm || swiglu || attention || qkv || block; }
  // "none", or the policies joined by commas, e.g. "norm,swiglu" (plan/flag_values.h parse_recompute reads it).
  std::string describe() const;
  // Matmul and attention FLOPs per token that the recompute repeats (for HFU), docs/design.md's counting.
  double flops_per_token(const ModelConfig& cfg, int T) const;
};

struct ModelOptions {
  int B = 1;               // micro-batch rows
  int T = 1024;            // sequence length
  bool doc_mask = false;   // attend only within a document (positions restart at each document)
  Recompute recompute;
  // The parameter gradients live in host memory (from Ops::allocate_host); each group of them (the
  // embedding, each layer, the final norm with an untied LM head) is accumulated on the device in one of
  // three staging buffers while its backward runs, brought up before and taken down after (bitwise the
  // same gradients as on the device). The device then holds no [P] gradient buffer. With reduced_grads, what lives in
  // host memory is this rank's slices, each brought up into its chunk of the staging buffer and its reduced sum taken
  // down (data parallelism's offload of its shard).
  bool offload_grads = false;
  // ZeRO 2 and 3: the parameter gradients reduced out of the model unit by unit in every backward. The model holds
  // only slice grad_shard of grad_shards of each unit's accumulated gradients (its elements [r n/S, (r+1) n/S) of a
  // unit of n, concatenated in unit order: grads()); each unit's backward runs in one of three unit-sized staging
  // buffers (model/grad_staging.h) holding the slice in its chunk and zeros elsewhere, which the GradientHook reduces
  // across the ranks and copies its chunk back from (GradientHook::unit_done). With one shard (one rank) the same
  // path runs, the slice being the whole unit. With offload_grads the slices are in host memory; unit_multiple a
  // multiple of grad_shards x 64.
  bool reduced_grads = false;
  int grad_shards = 1, grad_shard = 0;
  // The backend writes, in place of three activations that only their linear's weight gradient reads (the norms'
  // outputs x_attn and x_mlp, SwiGLU's output act), that linear's FP8 x^T (CudaOps with --fp8, delayed scaling:
  // Ops::rmsnorm_linear_forward, swiglu_linear_forward): carve them at one byte an element, where the layer does
  // not recompute them (kept_fp8_input). The backend's answer for this model and T, which the recipe gives
  // (Recipe::keeps_fp8_inputs, from the backend's shape rules); false on other backends.
  bool fp8_kept_inputs = false;
  // Each unit of the parameter layout (ParamLayout::units) padded to a multiple of this many elements: data
  // parallelism's world size x 256 under ZeRO 1-3, so that each rank's slice of a unit is whole int8 moment blocks.
  int64_t unit_multiple = 64;
  // ZeRO 3: the parameters sharded over param_shards ranks. The model then holds only slice param_shard of each unit
  // (its elements [r n/S, (r+1) n/S) of a unit of n, concatenated in unit order: params()), and gathers each unit
  // whole through its ParameterSource before each use, forward and backward. unit_multiple must be a multiple of
  // param_shards x 64.
  int param_shards = 1, param_shard = 0;
};

// Where a model finds a unit's parameters whole and current, asked before each use of the unit (the forward's, the
// backward's, a recompute's): the trainer's data parallelism gathers it from the ranks' slices (the model knows
// nothing of them). Sharded parameters (ModelOptions::param_shards) need one; whole ones may have one, which then
// finishes, unit by unit, the gathering of the slices a sharded update changed.
class ParameterSource {
 public:
  virtual ~ParameterSource() = default;
  // Unit k's parameters, unit_size(k) elements of the activation dtype, ready for the work the compute queue is
  // given next; valid until the next call. For whole parameters, the unit in params() itself.
  virtual Tensor gather_unit(size_t unit) = 0;
};

// Work hung on the backward's gradient groups, which are the layout's units (data parallelism's gradient
// reduction, dist-free: the model calls it, the trainer implements it). Called on the host as the backward is
// queued: unit_done(k, staged) once unit k's gradients of the micro-batch are queued on the compute queue, in the
// order the backward reaches the units (the last unit first, unit 0 last); backward_done() after the last.
// `staged` is empty, unless the model reduces its gradients (ModelOptions::reduced_grads): then it is the unit's
// staging buffer (unit_size(k) elements of grad_dtype()), chunk grad_shard of it holding this rank's accumulated
// slice plus this micro-batch's gradient, the other chunks this micro-batch's gradient alone. The hook must write the
// sum over the ranks of their chunk grad_shard into Model::reduced_gradients_destination(unit), make the queue that
// reads it next wait for it (the compute queue; with the gradients in host memory, grads_on_host(), the download
// queue, which takes it down), and then call Model::store_reduced_gradients(unit), all before its next call returns
// (unit_done or backward_done), after which the model may write the buffer again.
class GradientHook {
 public:
  virtual ~GradientHook() = default;
  virtual void unit_done(size_t unit, const Tensor& staged) = 0;
  virtual void backward_done() = 0;
};

// Whether activation `which` ("x_attn", "x_mlp" or "act") is carved as the kept FP8 x^T (U8) for these options.
bool kept_fp8_input(const ModelConfig& cfg, const ModelOptions& opt, const std::string& which);

// The device memory a Model allocates for these options, by the labels Model gives its allocations,
// computed without allocating (tokamak plan): act is the backend's activation dtype (bf16 on CUDA).
std::vector<std::pair<std::string, size_t>> model_memory(const ModelConfig& cfg, const ModelOptions& opt, DType act,
                                                         DType grad);

struct LossSum {
  double sum = 0;          // sum of per-token losses (nats)
  int64_t count = 0;       // targets that counted (not ignored)
  double mean() const { return count ? sum / double(count) : 0.0; }
};

class Model {
 public:
  // Allocates parameters, gradients and every activation buffer the schedule needs, once.
  Model(const ModelConfig& cfg, Ops& ops, const ModelOptions& opt);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  const ModelOptions& options() const;
  const ParamLayout& layout() const;
  Ops& ops() const;

  Tensor params() const;   // act_dtype()[P], the flat buffer of ParamLayout; with param_shards, this rank's slices
  bool params_sharded() const;
  // Where the weights are named to the backend (Ops::name_weights), in layout order: params() when whole; sharded,
  // a reserved range that stands for the whole layout, each unit aliased to its place as it is gathered
  // (Ops::alias_weights), so that what the backend keeps per weight (FP8 scales) follows the weight.
  const void* weight_identities() const;
  // grad_dtype()[P]; in host memory with offload_grads (read it after ops().synchronize()); with reduced_grads, this
  // rank's slices (P / grad_shards elements)
  Tensor grads() const;
  bool grads_on_host() const;
  bool grads_reduced() const;  // ModelOptions::reduced_grads
  bool grads_sharded() const;  // grads() holds slices of more than one shard
  // The device memory the gradients take: the accumulated gradients where they are on the device, and the staging
  // buffers of offload_grads or reduced_grads.
  size_t gradient_bytes() const;

  // Initialisation as Hugging Face does for these architectures: normal(0, init_std) for matrices
  // and the embedding, ones for norm weights, zeros for biases; deterministic from the seed. The values are drawn
  // and uploaded in batches of batch_values (the host memory it takes, from Ops::allocate_host: page-locked on CUDA);
  // any batch size gives the same values.
  void init_params(uint64_t seed, int64_t batch_values = int64_t(1) << 26);
  void set_params_f32(const std::vector<float>& host);   // layout order, size P
  // The run [offset, offset + n) of the layout from host values: with sharded parameters, what of it this rank holds.
  void set_params_f32(int64_t offset, int64_t n, const float* host);
  std::vector<float> params_f32() const;                  // not with sharded parameters
  std::vector<float> grads_f32() const;  // not with sharded gradients
  void zero_grads();

  // One micro-batch (in host memory; made with doc_mask as the model trains): forward, loss over its targets,
  // backward with dL = grad_scale per token; gradients accumulate (+=) into grads(). The batch's memory is read
  // (uploaded) before the call returns.
  LossSum forward_backward(const Batch& batch, float grad_scale);
  // Forward and loss only (evaluation); gradients untouched.
  LossSum forward(const Batch& batch);

  size_t activation_bytes() const;  // what the planned activation buffers take

  // The hook the backward calls at each unit's end (nullptr: none). It must outlive the backwards it sees.
  void set_gradient_hook(GradientHook* hook);
  // With reduced_grads, where the hook writes the reduced sum of this rank's chunk of unit's staging buffer
  // (GradientHook): the unit's accumulated slice when it lives on the device, else that chunk itself (in place).
  Tensor reduced_gradients_destination(size_t unit) const;
  // With reduced_grads, the hook's part of GradientHook's contract: the destination holds the reduced sum for the
  // work queued next on the queue the hook made wait for it, and becomes the unit's accumulated slice.
  void store_reduced_gradients(size_t unit);
  // Where the units' parameters are made whole (ParameterSource): needed with sharded parameters
  // (ModelOptions::param_shards > 1), optional otherwise; set before the first step.
  void set_parameter_source(ParameterSource* source);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tk
