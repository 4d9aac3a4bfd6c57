// Attention against a KV cache for generation (ops.h attention_decode): a small kernel of its own, since
// the cache length changes with every generated token and a cuDNN plan per length would cost far more
// than the attention itself.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace tk::cuda {

// Appends the keys and values of the n_new tokens in qkv[n_new, (Hq+2Hkv)*hd] to rows [pos, pos + n_new)
// of k_cache/v_cache [max_len, Hkv, hd], then out[n_new, Hq, hd] = causal GQA attention of each new query
// over cache rows [0, pos + i]. f32 softmax and accumulation, a fixed summation order (deterministic).
// head_dim must be a multiple of 32, at most 256.
void attention_decode(__nv_bfloat16* out, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const __nv_bfloat16* qkv,
                      int pos, int n_new, int n_heads, int n_kv_heads, int head_dim, cudaStream_t stream);

}  // namespace tk::cuda
