// Recipe: what a training step computes and how, in one description: the model, the micro-batch and the
// accumulation, the precision, what is recomputed and offloaded, AdamW's settings and the backend's tuning. The
// backend's settings, the Model's options, AdamW's options and the memory plan (memory_plan.h) are all built from
// it, by `train`, `bench`, `plan` and `profile` alike (from their StepOptions: step_options.h make_recipe): what the planner counts is what a run allocates, and every
// command runs the steps train runs. A setting a later command line adds (the precision chosen for the device,
// data-parallel sharding) belongs here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/model.h"
#include "optim/optimizer.h"

namespace tk {

struct Recipe {
  ModelConfig model;
  bool gpu = true;                 // the CUDA backend (bf16 activations, f32 gradients); false: the CPU's f32
  int batch = 8;                   // micro-batch rows B
  int seq = 2048;                  // sequence length T
  int accumulation = 1;            // micro-batches per optimizer step
  bool doc_mask = false;           // attention stays within documents
  Recompute recompute;
  bool offload_gradients = false;  // the parameter gradients in host memory too (with optimizer.offload)
  AdamWOptions optimizer;          // the hyperparameters, m and v's precision, the optimizer state's offload
  BackendOptions backend;         // the precision, GEMM tuning, the LM head's logits chunk
  std::string precision_note;      // --precision auto's choice and why, the line the run prints ("" otherwise)
  int zero_stage = 0;              // ZeRO: 0 replicated, 1 optimizer state, 2 and gradients, 3 and parameters sharded
  int world_size = 1;              // data-parallel ranks (GPUs), each computing micro-batches of this shape
  int rank = 0;                    // which of them this process is (ZeRO 3 holds its slice of the parameters)
  bool data_parallel = false;      // the steps run data-parallel over a communicator (implied by world_size > 1)

  int64_t micro_tokens() const { return int64_t(batch) * seq; }
  // "none", "optimizer" or "optimizer,gradients", as train --offload spells it; set_offload reads the same
  // (flag_values.h parse_offload).
  std::string offload_name() const;
  void set_offload(const std::string& name);
  // Whether the gradients may go to host memory: one process's whole; data parallelism's, a rank's slice of them,
  // which only ZeRO 2 and 3 keep (at ZeRO 0 and 1 every rank reduces all of them on the device).
  bool gradient_offload_allowed() const { return (!data_parallel && world_size == 1) || zero_stage >= 2; }
  // The LM head's bf16 logits chunk in bytes: the backend's default unless set.
  size_t logits_chunk_bytes() const;
  // Whether the CUDA backend's fused FP8 forwards (delayed scaling) keep the norms' and SwiGLU's outputs as their
  // linears' one-byte x^T: for its FP8 shapes (ops/cuda/fp8_shapes.h) at this model and sequence length.
  bool keeps_fp8_inputs() const;
  // Whether every linear of a block (qkv, o, gate/up, down) at this micro-batch takes the FP8 GEMMs (fp8_shapes.h).
  bool linears_fp8_shapes() const;
  // Whether the LM head's shapes at this micro-batch take its FP8 GEMMs (--fp8-lm-head; fp8_shapes.h).
  bool lm_head_fp8_shapes() const;

  // The options of this rank's model (ZeRO 2, 3: its slice of the gradients); make_model adds ZeRO 3's parameter
  // slice, which the memory plan counts apart (zero_plan.h), with the units being gathered.
  ModelOptions model_options() const;
  const AdamWOptions& adamw_options() const { return optimizer; }
};

// The recipe's model on `ops` (under ZeRO 3 on many ranks, holding this rank's slice of the parameters), its weights
// named to the backend (Ops::name_weights) so that the state the backend keeps per weight is saved and restored by
// parameter name; its parameters are not initialised.
std::unique_ptr<Model> make_model(const Recipe& r, Ops& ops);
// A model's parameters by name, where its ops find them or, sharded, where they stand (Model::weight_identities):
// what make_model gives Ops::name_weights.
std::vector<Ops::NamedWeight> named_weights(const Model& model);

}  // namespace tk
