// Flash attention through cuDNN's backend graph API. The forward graph is
//   S = Q K^T * scale -> causal mask -> softmax (max, exp, sum; stats = max + log sum) -> O = P V
// and the backward graph the matching flash backward (P recomputed from the stats; dS = P * (dP - rowsum(dO*O))).
// cuDNN's runtime-fusion engines match exactly these operation patterns (the ones its own C++ frontend
// emits for SDPA), so the graphs below follow that sequence of operations, tensor types and views; any other
// arrangement of the same math finds no engine.
//
// Views: Q, K, V are strided [B, H, T, hd] views into qkv[B, T, Hq+2Hkv, hd] (row stride W = (Hq+2Hkv)*hd);
// cuDNN's Q K^T wants K^T, the same memory with the last two dims and strides swapped. GQA is the batch
// broadcast of the matmuls over heads (Hq = g * Hkv); in the backward, dK and dV are formed per query head
// and reduced over each group of g heads inside the fused kernel.
//
// Document masking adds a bias tensor [B, 1, T, T] (broadcast over heads) to the scaled scores, before the
// causal mask, in both graphs: 0 within a document, kDocumentMasked across documents (document_mask.h).
// Shapes, plans, the backward's batch groups and the lse layout stay those of the unmasked graphs. cuDNN's
// other route, every document a sequence of a ragged batch (padding mask and ragged offsets), would need
// the number of documents on the host to give the graph its batch size (it is only on the device: a
// synchronisation per call), and its deterministic backward's dP workspace grows with that batch at the
// graph's maximum length, B' * Hq * T^2 bf16 for B' documents. The bias costs a [T, T] read per row and
// head instead, and the cross-document tiles are computed and then masked rather than skipped.
#include "ops/cuda/attention_cudnn.h"

#include <cudnn.h>

#include <cmath>
#include <compare>
#include <limits>
#include <map>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cudnn_backend.h"
#include "ops/cuda/document_mask.h"
#include "ops/cuda/workspace_sizes.h"

namespace tk::cuda {

namespace {

using cudnn::Dims;
using cudnn::GraphBuilder;
using Tensor = cudnnBackendDescriptor_t;

// Uids of the tensors bound at execution.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kNegInf, kNegInfPadding, kOne, kDO, kDQ, kDK, kDV, kSoftmaxSum, kSeqLenQ,
  kSeqLenKV, kBias
};

// The dims and strides of every tensor of one graph, for a batch of B rows.
struct Views {
  Dims q, q_str;        // [B, Hq, T, hd] in qkv
  Dims kt, kt_str;      // K^T: [B, Hkv, hd, T] in qkv (V^T alike)
  Dims kv, kv_str;      // [B, Hkv, T, hd] in qkv
  Dims o, o_str;        // [B, Hq, T, hd] in out[B, T, Hq, hd]
  Dims o_heads_str;     // [B, Hq, T, hd] packed per head (the backward's per-query-head dK, dV)
  Dims s, s_str;        // scores [B, Hq, T, T]
  Dims s_t_str;         // scores viewed transposed ([B, Hq, T_kv, T_q] over the same elements)
  Dims row, row_str;    // per-query statistics [B, Hq, T, 1]
  Dims batch, batch_str;  // per-batch-row scalars [B, 1, 1, 1]
  Dims bias, bias_str;    // the document mask [B, 1, T, T], rows document_mask_stride(T) apart
};

Views views(int64_t B, const AttnShape& a) {
  int64_t T = a.T, Hq = a.n_heads, Hkv = a.n_kv_heads, hd = a.head_dim, W = int64_t(a.qkv_width());
  Views v;
  v.q = {B, Hq, T, hd};
  v.q_str = {T * W, hd, W, 1};
  v.kt = {B, Hkv, hd, T};
  v.kt_str = {T * W, hd, 1, W};
  v.kv = {B, Hkv, T, hd};
  v.kv_str = {T * W, hd, W, 1};
  v.o = {B, Hq, T, hd};
  v.o_str = {T * Hq * hd, hd, Hq * hd, 1};
  v.o_heads_str = {Hq * T * hd, T * hd, hd, 1};
  v.s = {B, Hq, T, T};
  v.s_str = {Hq * T * T, T * T, T, 1};
  v.s_t_str = {Hq * T * T, T * T, 1, T};
  v.row = {B, Hq, T, 1};
  v.row_str = {Hq * T, T, 1, 1};
  v.batch = {B, 1, 1, 1};
  v.batch_str = {1, 1, 1, 1};
  int64_t row = document_mask_stride(a.T);
  v.bias = {B, 1, T, T};
  v.bias_str = {T * row, T * row, row, 1};
  return v;
}

// y = x where column <= row (key position <= query position), else -inf.
Tensor causal_mask(GraphBuilder& g, const Views& v, Tensor x, Tensor neg_inf) {
  Tensor row = g.virtual_tensor(CUDNN_DATA_INT32, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, row, x, nullptr, nullptr, CUDNN_DATA_FLOAT, 2);
  Tensor col = g.virtual_tensor(CUDNN_DATA_INT32, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, col, x, nullptr, nullptr, CUDNN_DATA_FLOAT, 3);
  Tensor keep = g.virtual_tensor(CUDNN_DATA_BOOLEAN, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, keep, row, col, nullptr, CUDNN_DATA_BOOLEAN);
  Tensor y = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, y, x, neg_inf, keep);
  return y;
}

// y = x where row < seq_len_q and column < seq_len_kv, else -inf (the "padded batch" mask).
Tensor padding_mask(GraphBuilder& g, const Views& v, Tensor x, Tensor neg_inf, Tensor seq_q, Tensor seq_kv) {
  Tensor row = g.virtual_tensor(CUDNN_DATA_INT32, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, row, x, nullptr, nullptr, CUDNN_DATA_INT32, 2);
  Tensor col = g.virtual_tensor(CUDNN_DATA_INT32, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, col, x, nullptr, nullptr, CUDNN_DATA_INT32, 3);
  Tensor row_ok = g.virtual_tensor(CUDNN_DATA_BOOLEAN, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, row_ok, row, seq_q, nullptr, CUDNN_DATA_BOOLEAN);
  Tensor col_ok = g.virtual_tensor(CUDNN_DATA_BOOLEAN, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, col_ok, col, seq_kv, nullptr, CUDNN_DATA_BOOLEAN);
  Tensor keep = g.virtual_tensor(CUDNN_DATA_BOOLEAN, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_LOGICAL_AND, keep, row_ok, col_ok, nullptr, CUDNN_DATA_BOOLEAN);
  Tensor y = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, y, x, neg_inf, keep);
  return y;
}

// y = x + the document mask, when there is one.
Tensor add_document_mask(GraphBuilder& g, const Views& v, Tensor x, bool doc_mask) {
  if (!doc_mask) return x;
  Tensor bias = g.tensor(kBias, CUDNN_DATA_BFLOAT16, v.bias, v.bias_str);
  Tensor y = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_ADD, y, x, bias);
  return y;
}

std::string describe(const char* which, int64_t B, const AttnShape& a, bool doc_mask) {
  return fmt::format("the attention {} graph (B={}, T={}, heads {}:{}, head_dim {}{})", which, B, a.T, a.n_heads,
                     a.n_kv_heads, a.head_dim, doc_mask ? ", document mask" : "");
}

cudnn::ExecutionPlan build_forward(cudnnHandle_t handle, int64_t B, const AttnShape& a, bool doc_mask) {
  GraphBuilder g(handle);
  Views v = views(B, a);
  Tensor q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, v.q, v.q_str);
  Tensor kt = g.tensor(kK, CUDNN_DATA_BFLOAT16, v.kt, v.kt_str);
  Tensor val = g.tensor(kV, CUDNN_DATA_BFLOAT16, v.kv, v.kv_str);
  Tensor o = g.tensor(kO, CUDNN_DATA_BFLOAT16, v.o, v.o_str);
  Tensor stats = g.tensor(kStats, CUDNN_DATA_FLOAT, v.row, v.row_str);
  Tensor scale = g.scalar(kScale, CUDNN_DATA_FLOAT);
  Tensor neg_inf = g.scalar(kNegInf, CUDNN_DATA_FLOAT);

  Tensor s = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.matmul(s, q, kt);
  Tensor scaled = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_MUL, scaled, s, scale);
  Tensor masked = causal_mask(g, v, add_document_mask(g, v, scaled, doc_mask), neg_inf);

  // Softmax, keeping its statistics: stats = max + log(sum exp(x - max)), the natural-log logsumexp.
  Tensor max = g.virtual_tensor(CUDNN_DATA_FLOAT, v.row, v.row_str);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, max, masked);
  Tensor centered = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_SUB, centered, masked, max);
  Tensor e = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_EXP, e, centered);
  Tensor sum = g.virtual_tensor(CUDNN_DATA_FLOAT, v.row, v.row_str);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, sum, e);
  Tensor log_sum = g.virtual_tensor(CUDNN_DATA_FLOAT, v.row, v.row_str);
  g.pointwise(CUDNN_POINTWISE_LOG, log_sum, sum);
  g.pointwise(CUDNN_POINTWISE_ADD, stats, max, log_sum);
  Tensor p = g.virtual_tensor(CUDNN_DATA_BFLOAT16, v.s, v.s_str);  // the P @ V operand is bf16, like Q
  g.pointwise(CUDNN_POINTWISE_DIV, p, e, sum);

  g.matmul(o, p, val);
  return g.build(describe("forward", B, a, doc_mask));
}

// dX for X in {K, V}: per query head into a packed virtual, then summed over each GQA group into the
// strided slot in dqkv; without GQA straight into the slot.
void grad_per_kv_head(GraphBuilder& g, const Views& v, const AttnShape& a, Tensor dx, Tensor lhs_t, Tensor rhs,
                      Tensor m_override, Tensor k_override) {
  if (a.n_heads == a.n_kv_heads) {
    g.matmul(dx, lhs_t, rhs, m_override, nullptr, k_override);
    return;
  }
  Tensor per_q_head = g.virtual_tensor(CUDNN_DATA_BFLOAT16, v.o, v.o_heads_str);
  g.matmul(per_q_head, lhs_t, rhs, m_override, nullptr, k_override);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dx, per_q_head);
}

// The backward. With `padded`, the batch is described as padded to its own length T (seq_len tensors all
// equal to T, so nothing is masked): cuDNN up to 9.15 needs this for a T that is not a multiple of 128.
// dQ is written directly by the last matmul (no f32 dQ accumulator): that is the form for which cuDNN's
// Hopper backward uses its deterministic dP-workspace kernel instead of atomics.
cudnn::ExecutionPlan build_backward(cudnnHandle_t handle, int64_t B, const AttnShape& a, bool padded, bool doc_mask) {
  GraphBuilder g(handle);
  Views v = views(B, a);
  Tensor q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, v.q, v.q_str);
  Tensor kt = g.tensor(kK, CUDNN_DATA_BFLOAT16, v.kt, v.kt_str);
  Tensor vt = g.tensor(kV, CUDNN_DATA_BFLOAT16, v.kt, v.kt_str);
  Tensor o = g.tensor(kO, CUDNN_DATA_BFLOAT16, v.o, v.o_str);
  Tensor stats = g.tensor(kStats, CUDNN_DATA_FLOAT, v.row, v.row_str);
  Tensor d_o = g.tensor(kDO, CUDNN_DATA_BFLOAT16, v.o, v.o_str);
  Tensor dq = g.tensor(kDQ, CUDNN_DATA_BFLOAT16, v.q, v.q_str);
  Tensor dk = g.tensor(kDK, CUDNN_DATA_BFLOAT16, v.kv, v.kv_str);
  Tensor dv = g.tensor(kDV, CUDNN_DATA_BFLOAT16, v.kv, v.kv_str);
  Tensor softmax_sum = g.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, v.row, v.row_str);
  Tensor scale = g.scalar(kScale, CUDNN_DATA_FLOAT);
  Tensor neg_inf = g.scalar(kNegInf, CUDNN_DATA_FLOAT);
  Tensor neg_inf_padding = padded ? g.scalar(kNegInfPadding, CUDNN_DATA_FLOAT) : nullptr;
  Tensor one = g.scalar(kOne, CUDNN_DATA_FLOAT);
  Tensor seq_q = padded ? g.tensor(kSeqLenQ, CUDNN_DATA_INT32, v.batch, v.batch_str) : nullptr;
  Tensor seq_kv = padded ? g.tensor(kSeqLenKV, CUDNN_DATA_INT32, v.batch, v.batch_str) : nullptr;

  // softmax_sum = rowsum(dO * O): the softmax backward's correction term, kept in memory.
  Tensor do_o = g.virtual_tensor(CUDNN_DATA_FLOAT, v.o, v.o_str);
  g.pointwise(CUDNN_POINTWISE_MUL, do_o, d_o, o);
  Tensor row_sum = g.virtual_tensor(CUDNN_DATA_FLOAT, v.row, v.row_str);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, row_sum, do_o);
  g.pointwise(CUDNN_POINTWISE_MUL, softmax_sum, row_sum, one);

  // P = exp(S * scale (masked) - stats), recomputed.
  Tensor s = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.matmul(s, q, kt, seq_q, seq_kv);
  Tensor scaled = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_MUL, scaled, s, scale);
  scaled = add_document_mask(g, v, scaled, doc_mask);
  if (padded) scaled = padding_mask(g, v, scaled, neg_inf_padding, seq_q, seq_kv);
  Tensor shifted = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_SUB, shifted, scaled, stats);
  Tensor masked = causal_mask(g, v, shifted, neg_inf);
  Tensor p = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_EXP, p, masked);

  // dV = P^T dO.
  Tensor p_t = g.virtual_tensor(CUDNN_DATA_BFLOAT16, v.s, v.s_t_str);
  g.reshape(p_t, p);
  grad_per_kv_head(g, v, a, dv, p_t, d_o, seq_kv, seq_q);

  // dS = P * (dO V^T - softmax_sum) * scale.
  Tensor dp = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.matmul(dp, d_o, vt, seq_q, seq_kv);
  Tensor dp_centered = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_SUB, dp_centered, dp, softmax_sum);
  Tensor dp_p = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_p, dp_centered, p);
  Tensor ds = g.virtual_tensor(CUDNN_DATA_FLOAT, v.s, v.s_str);
  g.pointwise(CUDNN_POINTWISE_MUL, ds, dp_p, scale);

  // dK = dS^T Q.
  Tensor ds_t = g.virtual_tensor(CUDNN_DATA_BFLOAT16, v.s, v.s_t_str);
  g.reshape(ds_t, ds);
  grad_per_kv_head(g, v, a, dk, ds_t, q, seq_kv, seq_q);

  // dQ = dS K, with K the un-transposed view of the K^T input.
  Tensor k = g.virtual_tensor(CUDNN_DATA_FLOAT, v.kv, v.kv_str);
  g.reshape(k, kt);
  g.matmul(dq, ds, k, seq_q, nullptr, seq_kv);
  return g.build(describe("backward", B, a, doc_mask));
}

struct PlanKey {
  int64_t B, T, Hq, Hkv, hd;
  bool backward, doc_mask;
  auto operator<=>(const PlanKey&) const = default;
};

struct Plan {
  cudnn::ExecutionPlan exec;
  int64_t batch_group = 0;    // rows per execution (the backward runs B / batch_group times)
  bool padded = false;
  // Per-row lengths, all T (padded backward only): q lengths first, kv lengths from kv_lens_offset, a
  // multiple of 64 entries so that both arrays keep the 16-byte alignment their tensors declare.
  int32_t* seq_lens = nullptr;
  int64_t kv_lens_offset = 0;
};

// The backward's batch rows per execution (workspace_sizes.h: its dP workspace under the budget).
int64_t backward_batch_group(const AttnShape& a) { return attention_backward_batch_group(a.B, a.n_heads, a.T); }

}  // namespace

struct CudnnAttention::Impl {
  cudaStream_t stream = nullptr;
  DeviceAlloc alloc;
  cudnnHandle_t handle = nullptr;
  GrowingBuffer workspace, softmax_sum;
  size_t seq_len_bytes = 0;
  // The document mask (document_mask.h): the bias, and the segment ids it was built from followed by one
  // change flag per batch row; mask_B/mask_T: the shape of the last build (0: none yet).
  GrowingBuffer mask_bias, mask_segments;
  int mask_B = 0, mask_T = 0;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
  // By-value scalars: cuDNN reads them from these host addresses at each execution.
  float neg_inf = -std::numeric_limits<float>::infinity();
  float one = 1.0f;

  const Plan& plan_for(const AttnShape& a, bool backward, bool doc_mask);
  const bf16* document_mask(const int32_t* segment_ids, const AttnShape& a);
  void* workspace_for(const Plan& p) {
    return workspace.ensure(alloc, size_t(p.exec.workspace_bytes()), "cuDNN attention workspace");
  }
};

const Plan& CudnnAttention::Impl::plan_for(const AttnShape& a, bool backward, bool doc_mask) {
  PlanKey key{a.B, a.T, a.n_heads, a.n_kv_heads, a.head_dim, backward, doc_mask};
  auto it = plans.find(key);
  if (it != plans.end()) return *it->second;

  int64_t group = backward ? backward_batch_group(a) : a.B;
  bool padded = backward && a.T % 128 != 0;
  auto exec = backward ? build_backward(handle, group, a, padded, doc_mask) : build_forward(handle, group, a, doc_mask);
  auto plan = std::make_unique<Plan>(Plan{std::move(exec), group, padded, nullptr, 0});
  log::debug("cuDNN attention {} plan for B={} T={} heads {}:{} hd {}{}: engine {}, workspace {} bytes, {} row(s) "
             "per execution{}",
             backward ? "backward" : "forward", a.B, a.T, a.n_heads, a.n_kv_heads, a.head_dim,
             doc_mask ? " with a document mask" : "", plan->exec.engine(), plan->exec.workspace_bytes(), group,
             plan->exec.deterministic() ? "" : ", nondeterministic");
  if (padded) {
    // First use of this shape: the per-row lengths (all T) are written once and never change.
    plan->kv_lens_offset = (group + 63) / 64 * 64;
    size_t bytes = size_t(2 * plan->kv_lens_offset) * sizeof(int32_t);
    plan->seq_lens = static_cast<int32_t*>(alloc.allocate(bytes, "cuDNN attention sequence lengths"));
    seq_len_bytes += bytes;
    std::vector<int32_t> lens(size_t(2 * plan->kv_lens_offset), a.T);
    TK_CUDA_CHECK(cudaMemcpyAsync(plan->seq_lens, lens.data(), bytes, cudaMemcpyHostToDevice, stream));
    TK_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return *plans.emplace(key, std::move(plan)).first->second;
}

// The bias for these segment ids: rebuilt for the rows whose ids changed since the last build, all rows
// when the shape changed or the buffers were (re)allocated.
const bf16* CudnnAttention::Impl::document_mask(const int32_t* segment_ids, const AttnShape& a) {
  size_t cells = size_t(a.B) * size_t(a.T);
  void *old_bias = mask_bias.data(), *old_segments = mask_segments.data();
  auto* bias = static_cast<bf16*>(mask_bias.ensure(
      alloc, cells * size_t(document_mask_stride(a.T)) * sizeof(bf16), "attention document mask"));
  auto* seen = static_cast<int32_t*>(
      mask_segments.ensure(alloc, (cells + size_t(a.B)) * sizeof(int32_t), "attention document mask segment ids"));
  bool rebuild = bias != old_bias || seen != old_segments || a.B != mask_B || a.T != mask_T;
  document_mask_bias(bias, seen, seen + cells, segment_ids, a.B, a.T, rebuild, stream);
  mask_B = a.B;
  mask_T = a.T;
  return bias;
}

CudnnAttention::CudnnAttention(cudaStream_t stream, const DeviceAlloc& alloc) : impl_(std::make_unique<Impl>()) {
  int64_t version = cudnn_version();
  TK_CHECK(version >= 90000, "the CUDA attention needs cuDNN 9 or newer; this machine has cuDNN {}", version);
  impl_->stream = stream;
  impl_->alloc = alloc;
  TK_CUDNN_CHECK(cudnnCreate(&impl_->handle));
  TK_CUDNN_CHECK(cudnnSetStream(impl_->handle, stream));
  // cuDNN before 9.10 masks with the lowest finite float rather than -inf.
  if (version < 91000) impl_->neg_inf = std::numeric_limits<float>::lowest();
}

CudnnAttention::~CudnnAttention() {
  impl_->plans.clear();
  if (impl_->handle) cudnnDestroy(impl_->handle);
}

int64_t CudnnAttention::cudnn_version() { return int64_t(cudnnGetVersion()); }

size_t CudnnAttention::workspace_bytes() const {
  return impl_->workspace.bytes() + impl_->softmax_sum.bytes() + impl_->seq_len_bytes + impl_->mask_bias.bytes() +
         impl_->mask_segments.bytes();
}

namespace {

void check_shape(const AttnShape& a) {
  TK_CHECK(a.B > 0 && a.T > 0 && a.n_heads > 0 && a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0,
           "attention shape B={} T={} heads {}:{} is not valid (query heads must be a multiple of kv heads)", a.B,
           a.T, a.n_heads, a.n_kv_heads);
  TK_CHECK(a.head_dim % 8 == 0 && a.head_dim <= 256,
           "the CUDA attention supports head_dim a multiple of 8 up to 256, not {}", a.head_dim);
}

}  // namespace

void CudnnAttention::forward(bf16* out, float* lse, const bf16* qkv, const int32_t* segment_ids,
                             const AttnShape& s) {
  check_shape(s);
  const bool doc_mask = segment_ids != nullptr;
  const Plan& plan = impl_->plan_for(s, false, doc_mask);
  void* workspace = impl_->workspace_for(plan);
  float scale = 1.0f / std::sqrt(float(s.head_dim));
  int64_t hd = s.head_dim;
  auto* base = const_cast<bf16*>(qkv);
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale, kNegInf};
  std::vector<void*> ptrs = {base, base + s.n_heads * hd, base + (s.n_heads + s.n_kv_heads) * hd, out, lse, &scale,
                             &impl_->neg_inf};
  if (doc_mask) {
    uids.push_back(kBias);
    ptrs.push_back(const_cast<bf16*>(impl_->document_mask(segment_ids, s)));
  }
  plan.exec.execute(impl_->handle, uids, ptrs, workspace);
}

void CudnnAttention::backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                              const int32_t* segment_ids, const AttnShape& s) {
  check_shape(s);
  const bool doc_mask = segment_ids != nullptr;
  const Plan& plan = impl_->plan_for(s, true, doc_mask);
  void* workspace = impl_->workspace_for(plan);
  int64_t group = plan.batch_group, T = s.T, hd = s.head_dim, Hq = s.n_heads;
  auto* softmax_sum = static_cast<float*>(
      impl_->softmax_sum.ensure(impl_->alloc, size_t(group * Hq * T) * sizeof(float), "cuDNN attention row sums"));
  float scale = 1.0f / std::sqrt(float(hd));
  int64_t k_off = Hq * hd, v_off = (Hq + s.n_kv_heads) * hd;
  int64_t qkv_rows = group * T * int64_t(s.qkv_width()), o_rows = group * T * Hq * hd, lse_rows = group * Hq * T;
  int64_t bias_rows = group * T * document_mask_stride(s.T);
  bf16* bias = doc_mask ? const_cast<bf16*>(impl_->document_mask(segment_ids, s)) : nullptr;

  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kScale, kNegInf, kOne, kSoftmaxSum};
  if (plan.padded) uids.insert(uids.end(), {kNegInfPadding, kSeqLenQ, kSeqLenKV});
  if (doc_mask) uids.push_back(kBias);
  for (int64_t b0 = 0; b0 < s.B; b0 += group) {
    auto* x = const_cast<bf16*>(qkv) + (b0 / group) * qkv_rows;
    bf16* dx = dqkv + (b0 / group) * qkv_rows;
    auto* o = const_cast<bf16*>(out) + (b0 / group) * o_rows;
    auto* d_o = const_cast<bf16*>(dout) + (b0 / group) * o_rows;
    auto* stats = const_cast<float*>(lse) + (b0 / group) * lse_rows;
    std::vector<void*> ptrs = {x,      x + k_off,          x + v_off,   o,           stats,
                               d_o,    dx,                 dx + k_off,  dx + v_off,  &scale,
                               &impl_->neg_inf, &impl_->one, softmax_sum};
    if (plan.padded) ptrs.insert(ptrs.end(), {&impl_->neg_inf, plan.seq_lens, plan.seq_lens + plan.kv_lens_offset});
    if (doc_mask) ptrs.push_back(bias + (b0 / group) * bias_rows);
    plan.exec.execute(impl_->handle, uids, ptrs, workspace);
  }
}

}  // namespace tk::cuda
