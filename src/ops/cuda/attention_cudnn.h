// Causal GQA flash attention, forward and backward, through cuDNN's fused attention engines: the
// attention computation is described as a graph of backend operations (cudnn_backend.h) that cuDNN
// recognises and runs as one flash-attention kernel. Plans are built once per shape and cached. Document
// masking (segment ids) adds a bias of 0 / kDocumentMasked to the scores (document_mask.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ops/cuda/device_alloc.h"
#include "ops/ops.h"

namespace tk::cuda {

using bf16 = __nv_bfloat16;

class CudnnAttention {
 public:
  CudnnAttention(cudaStream_t stream, const DeviceAlloc& alloc);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // ops.h attention_forward: out bf16[B,T,Hq,hd], lse f32[B,Hq,T] (natural log) from qkv bf16[B,T,Hq+2Hkv,hd]
  // (Q, K and V are strided views; repeated K/V heads are never materialised). segment_ids i32[B,T] on the
  // device, or null: no document masking.
  void forward(bf16* out, float* lse, const bf16* qkv, const int32_t* segment_ids, const AttnShape& s);
  // ops.h attention_backward: dqkv bf16[B,T,Hq+2Hkv,hd] (=) from dout[B,T,Hq,hd] and the forward's qkv, out,
  // lse, with the forward's segment ids (or null). cuDNN sums dK and dV over each GQA group itself.
  void backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                const int32_t* segment_ids, const AttnShape& s);

  // Device memory held for cuDNN's workspaces and the backward's own buffers (for the memory report).
  size_t workspace_bytes() const;
  // cuDNN's version as a number (91400 for 9.14.0).
  static int64_t cudnn_version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tk::cuda
